//! Guardians: one tiny child process per change skillprof makes to the machine (a sysctl, a
//! swap file), forked before the change. Each waits on a pipe only skillprof holds and undoes
//! its change when the pipe closes. The pipe closes on every way skillprof can end: a normal
//! exit, an error, a signal, a panic, and SIGKILL, which no handler in skillprof survives.
//!
//! The normal path uses the same mechanism (close, then wait for the guardian to finish), so
//! the restore code that runs after a SIGKILL is the one every run exercises. When skillprof
//! is alive to report, it says "quiet" first and the guardian restores silently; otherwise the
//! guardian reports on the inherited stderr.

use std::ffi::CString;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use anyhow::{Context, Result, bail};

use crate::producers::system::fork::{self, Child, Helper, Session};

const GUARDIAN: Helper = Helper {
    name: "guardian",
    comm: c"skp-guardian",
};

/// What a guardian undoes.
pub enum Restore {
    /// Write `value` back into the file under /proc/sys.
    Sysctl { path: CString, value: Vec<u8> },
    /// swapoff the file and delete it.
    Swapfile { path: CString },
    /// Delete the file.
    File { path: CString },
    /// SIGKILL every process left in the cgroup directory `dir` (listed in its `procs`
    /// file), then remove the directory; then, if skillprof enabled the memory controller
    /// for its parent (cgroup v2), disable it again through this `cgroup.subtree_control`.
    Cgroup {
        dir: CString,
        procs: CString,
        memory_enabled_in: Option<CString>,
    },
    /// Unmount and delete each named network namespace file (`ip netns add`'s bind mounts
    /// under /run/netns). A namespace dies with its last file and process, and its veth
    /// links with it; the processes are the cgroup guardian's.
    Netns { files: Vec<CString> },
}

impl Restore {
    pub fn sysctl(path: &Path, value: &str) -> Result<Restore> {
        Ok(Restore::Sysctl {
            path: c_path(path)?,
            value: format!("{value}\n").into_bytes(),
        })
    }

    pub fn file(path: &Path) -> Result<Restore> {
        Ok(Restore::File {
            path: c_path(path)?,
        })
    }

    pub fn swapfile(path: &Path) -> Result<Restore> {
        Ok(Restore::Swapfile {
            path: c_path(path)?,
        })
    }

    pub fn netns(files: &[std::path::PathBuf]) -> Result<Restore> {
        Ok(Restore::Netns {
            files: files.iter().map(|f| c_path(f)).collect::<Result<_>>()?,
        })
    }

    /// `memory_enabled_in`: the parent's `cgroup.subtree_control`, if skillprof enables the
    /// memory controller there.
    pub fn cgroup(dir: &Path, memory_enabled_in: Option<&Path>) -> Result<Restore> {
        Ok(Restore::Cgroup {
            dir: c_path(dir)?,
            procs: c_path(&dir.join("cgroup.procs"))?,
            memory_enabled_in: memory_enabled_in.map(c_path).transpose()?,
        })
    }
}

fn c_path(path: &Path) -> Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .with_context(|| format!("{} contains a NUL byte", path.display()))
}

/// The byte skillprof sends when it will report the restore itself.
const QUIET: u8 = b'q';

pub struct Guardian {
    child: Option<Child>,
    /// Closing it makes the guardian restore.
    pipe: Option<File>,
    what: String,
}

/// Everything the child needs, built before the fork.
struct Plan {
    pipe: RawFd,
    restore: Restore,
    restored: Vec<u8>,
    failed: Vec<u8>,
}

impl Guardian {
    /// Forks a guardian for `restore`; `what` names the change in messages
    /// ("vm.watermark_scale_factor back to 10").
    pub fn protect(restore: Restore, what: &str) -> Result<Guardian> {
        let (read, write) = fork::pipe()?;
        let plan = Plan {
            pipe: read.as_raw_fd(),
            restore,
            restored: format!("skillprof (guardian): restored {what}\n").into_bytes(),
            failed: format!(
                "skillprof (guardian): FAILED to restore {what}: do it by hand (see `skillprof \
                 pressure --help`)\n"
            )
            .into_bytes(),
        };
        let child = fork::spawn(&GUARDIAN, &[plan.pipe], Session::New, guard, &plan)?;
        drop(read);
        Ok(Guardian {
            child: Some(child),
            pipe: Some(write.into()),
            what: what.to_string(),
        })
    }

    /// The guardian's process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::pid)
    }

    /// Restores now and waits until it is done; the error says what is left to do by hand.
    pub fn restore(mut self) -> Result<()> {
        self.finish(true)
    }

    fn finish(&mut self, quiet: bool) -> Result<()> {
        if let Some(mut pipe) = self.pipe.take()
            && quiet
        {
            // Best effort: if it fails, the guardian merely reports too.
            let _ = pipe.write_all(&[QUIET]);
        }
        let Some(child) = self.child.take() else {
            return Ok(());
        };
        match child.wait()? {
            fork::Exit::Code(0) => Ok(()),
            exit => bail!("the guardian that restores {} {exit}", self.what),
        }
    }
}

/// Dropped on an error or a panic: restore, and let the guardian say so.
impl Drop for Guardian {
    fn drop(&mut self) {
        if let Err(error) = self.finish(false) {
            eprintln!("skillprof: {error:#}");
        }
    }
}

/// The child: wait for the pipe to close, then restore.
fn guard(plan: &Plan) -> i32 {
    let mut quiet = false;
    let mut byte = [0u8; 1];
    while fork::read_exact(plan.pipe, &mut byte) {
        quiet |= byte[0] == QUIET;
    }
    let restored = match &plan.restore {
        Restore::Sysctl { path, value } => write_file(path, value),
        Restore::Swapfile { path } => swapoff(path) && remove(path),
        Restore::File { path } => remove(path),
        Restore::Cgroup {
            dir,
            procs,
            memory_enabled_in,
        } => {
            remove_cgroup(dir, procs)
                && memory_enabled_in
                    .as_ref()
                    .is_none_or(|control| write_file(control, b"-memory"))
        }
        // Every file is tried, whatever became of the others.
        Restore::Netns { files } => files.iter().filter(|file| !remove_netns(file)).count() == 0,
    };
    if !restored {
        fork::write_all(2, &plan.failed);
        return 1;
    }
    if !quiet {
        fork::write_all(2, &plan.restored);
    }
    0
}

fn write_file(path: &CString, value: &[u8]) -> bool {
    // SAFETY: open/write/close with a NUL-terminated path and a valid buffer.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_TRUNC);
        if fd < 0 {
            return false;
        }
        let written = fork::write_all(fd, value);
        libc::close(fd) == 0 && written
    }
}

/// Turns the swap file off; a file that is not (or no longer) swap is fine. Swapping its
/// pages back in needs free memory, which the balloon may still be handing back when
/// skillprof died: retry for up to a minute.
fn swapoff(path: &CString) -> bool {
    for _ in 0..120 {
        // SAFETY: a NUL-terminated path.
        if unsafe { libc::swapoff(path.as_ptr()) } == 0 {
            return true;
        }
        match fork::errno() {
            // Not an active swap area, or no such file: nothing to turn off.
            libc::EINVAL | libc::ENOENT => return true,
            libc::ENOMEM | libc::EBUSY | libc::EINTR => sleep_half_a_second(),
            _ => return false,
        }
    }
    false
}

fn remove(path: &CString) -> bool {
    // SAFETY: a NUL-terminated path.
    unsafe { libc::unlink(path.as_ptr()) == 0 || fork::errno() == libc::ENOENT }
}

/// Kills what is left in the cgroup (after a SIGKILL of skillprof: the host) and removes it.
/// A killed process leaves the cgroup only once it has exited, and the directory cannot be
/// removed before: retry for up to a minute.
fn remove_cgroup(dir: &CString, procs: &CString) -> bool {
    for _ in 0..120 {
        // SAFETY: a NUL-terminated path.
        if unsafe { libc::rmdir(dir.as_ptr()) } == 0 {
            return true;
        }
        match fork::errno() {
            libc::ENOENT => return true,
            libc::EBUSY | libc::EINTR => {
                kill_all(procs);
                sleep_half_a_second();
            }
            _ => return false,
        }
    }
    false
}

/// Detaches the namespace's bind mount and removes its file; one never made is fine.
fn remove_netns(file: &CString) -> bool {
    // SAFETY: NUL-terminated paths.
    unsafe {
        let unmounted = libc::umount2(file.as_ptr(), libc::MNT_DETACH) == 0
            || matches!(fork::errno(), libc::EINVAL | libc::ENOENT);
        unmounted && (libc::unlink(file.as_ptr()) == 0 || fork::errno() == libc::ENOENT)
    }
}

/// SIGKILLs every process id listed in `procs`; raw system calls only (this runs in the
/// guardian, a fork of a threaded process).
fn kill_all(procs: &CString) {
    let mut buffer = [0u8; 4096];
    // SAFETY: open/read/close with a NUL-terminated path and a buffer of the length given.
    let read = unsafe {
        let fd = libc::open(procs.as_ptr(), libc::O_RDONLY);
        if fd < 0 {
            return;
        }
        let read = libc::read(fd, buffer.as_mut_ptr().cast(), buffer.len());
        libc::close(fd);
        read
    };
    let Ok(read) = usize::try_from(read) else {
        return;
    };
    for line in buffer[..read].split(|&b| b == b'\n') {
        let pid = line
            .iter()
            .try_fold(0i32, |pid, &b| {
                b.is_ascii_digit()
                    .then(|| pid.checked_mul(10)?.checked_add(i32::from(b - b'0')))
                    .flatten()
            })
            .filter(|&pid| pid > 0);
        if let Some(pid) = pid {
            // SAFETY: a signal to a process id; a gone process only makes it fail.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

fn sleep_half_a_second() {
    let half = libc::timespec {
        tv_sec: 0,
        tv_nsec: 500_000_000,
    };
    // SAFETY: a valid timespec; an early wake-up only shortens one retry's wait.
    unsafe { libc::nanosleep(&half, std::ptr::null_mut()) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restores_a_file_when_its_owner_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("setting");
        std::fs::write(&path, "10\n").unwrap();
        let guardian =
            Guardian::protect(Restore::sysctl(&path, "10").unwrap(), "the setting").unwrap();
        std::fs::write(&path, "200\n").unwrap();
        guardian.restore().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "10\n");
    }

    #[test]
    fn restores_when_dropped_too() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("setting");
        {
            let _guardian =
                Guardian::protect(Restore::sysctl(&path, "7").unwrap(), "the setting").unwrap();
            std::fs::write(&path, "8\n").unwrap();
        }
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "7\n");
    }

    #[test]
    fn a_swap_file_that_never_was_is_simply_removed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("swap");
        std::fs::write(&path, "not swap").unwrap();
        let guardian = Guardian::protect(Restore::swapfile(&path).unwrap(), "swap").unwrap();
        guardian.restore().unwrap();
        assert!(!path.exists());
    }
}
