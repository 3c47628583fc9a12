//! The balloon: a child process that holds anonymous memory, every page touched, and grows or
//! shrinks to the size skillprof asks for.
//!
//! A process of its own because the kernel frees a process's memory however it ends (SIGKILL
//! included), and because the OOM killer, should the experiment go too far, then takes the
//! balloon: it marks itself the preferred victim (oom_score_adj 1000), never the host or
//! skillprof. It also ends by itself when skillprof goes, as its command pipe closes.
//!
//! The memory is one reserved region: growing touches the next pages, shrinking hands the tail
//! back with MADV_DONTNEED. Huge pages are off for it, so the size moves page by page.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;

use anyhow::{Context, Result, bail};

use super::fork::{self, Child, Helper, Session};
use crate::{machine, pidfd};

const BALLOON: Helper = Helper {
    name: "balloon process",
    comm: c"skp-balloon",
};

/// One process holding memory; see the module documentation.
pub struct Balloon {
    /// `None` once the child has been reaped (it died).
    child: Option<Child>,
    pid: u32,
    /// `None` once released: closing it ends the child.
    commands: Option<File>,
    /// Names this very process even after it is reaped and its pid reused.
    pidfd: Arc<OwnedFd>,
    replies: File,
    bytes: u64,
}

/// What the child needs, prepared before the fork.
struct Plan {
    commands: RawFd,
    replies: RawFd,
    capacity: usize,
    page: usize,
}

impl Balloon {
    /// Starts an empty balloon that can grow up to the machine's memory.
    pub fn spawn() -> Result<Balloon> {
        let page = procfs::page_size();
        let capacity = machine::memory_kb()?.0 * 1024 / page * page;
        let (commands_in, commands) = fork::pipe()?;
        let (replies, replies_out) = fork::pipe()?;
        let plan = Plan {
            commands: commands_in.as_raw_fd(),
            replies: replies_out.as_raw_fd(),
            capacity: capacity as usize,
            page: page as usize,
        };
        let child = fork::spawn(
            &BALLOON,
            &[plan.commands, plan.replies],
            Session::Same,
            serve,
            &plan,
        )?;
        drop((commands_in, replies_out));
        let pidfd = pidfd::open(child.pid()).context("watching the balloon process")?;
        let mut balloon = Balloon {
            pidfd: Arc::new(pidfd),
            pid: child.pid(),
            child: Some(child),
            commands: Some(commands.into()),
            replies: replies.into(),
            bytes: 0,
        };
        // The child answers once its region is reserved.
        balloon.reply().context("starting the balloon")?;
        Ok(balloon)
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// A way to end the balloon from another thread without asking it: SIGKILL needs no
    /// memory, and the kernel frees the balloon's as the process exits.
    pub fn killer(&self) -> Killer {
        Killer(Arc::clone(&self.pidfd))
    }

    /// Grows (touching every new page) or shrinks to `bytes`, rounded down to whole pages and
    /// capped at the machine's memory; returns the size reached. Blocks while pages are touched
    /// (~1.5 GB/s here).
    pub fn resize(&mut self, bytes: u64) -> Result<u64> {
        let commands = self.commands.as_mut().context("the balloon was released")?;
        let sent = commands.write_all(&bytes.to_ne_bytes());
        // The write fails only when the child has already exited (a broken pipe); its reply
        // pipe has then ended too, and `reply` says how it ended, which is what the caller
        // needs to know (killed by the watchdog, by the OOM killer, ...).
        let reached = self.reply()?;
        sent.context("sending the balloon its new size")?;
        Ok(reached)
    }

    fn reply(&mut self) -> Result<u64> {
        let mut answer = [0u8; 8];
        match self.replies.read_exact(&mut answer) {
            Ok(()) => {
                self.bytes = u64::from_ne_bytes(answer);
                Ok(self.bytes)
            }
            // The child is gone (or reserving its region failed): say how it ended.
            Err(_) => {
                self.bytes = 0;
                let Some(child) = self.child.take() else {
                    bail!("the balloon process (pid {}) is gone", self.pid);
                };
                let exit = child.wait()?;
                bail!(
                    "the balloon process (pid {}) {exit}{}",
                    self.pid,
                    if matches!(exit, fork::Exit::Signal(libc::SIGKILL)) {
                        ": most likely the OOM killer, which the balloon volunteers for \
                         (see `dmesg`); free memory fell further than the safety margin allows"
                    } else {
                        ""
                    }
                )
            }
        }
    }

    /// Ends the child and waits until it has exited, so its memory is back with the kernel
    /// when this returns.
    pub fn release(mut self) -> Result<()> {
        self.end()
    }

    fn end(&mut self) -> Result<()> {
        self.commands = None;
        self.bytes = 0;
        let Some(child) = self.child.take() else {
            return Ok(());
        };
        match child.wait()? {
            fork::Exit::Code(0) => Ok(()),
            exit => bail!("the balloon process {exit} while releasing"),
        }
    }
}

/// A balloon dropped without `release` (an error, a panic) still goes, and is reaped.
impl Drop for Balloon {
    fn drop(&mut self) {
        let _ = self.end();
    }
}

/// See [`Balloon::killer`].
pub struct Killer(Arc<OwnedFd>);

impl Killer {
    /// SIGKILLs the balloon; a balloon already gone is not an error.
    pub fn kill(&self) {
        // SAFETY: a pidfd we own and a signal number; no pointer is passed.
        unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.0.as_raw_fd(),
                libc::SIGKILL,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            );
        }
    }
}

/// The child: reserve the region, then resize on command until the command pipe closes.
fn serve(plan: &Plan) -> i32 {
    volunteer_for_the_oom_killer();
    // SAFETY: a fresh private anonymous mapping; NORESERVE because it is touched only as far
    // as asked, and a 24 GiB reservation must not count against overcommit.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            plan.capacity,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return 2;
    }
    let base = base.cast::<u8>();
    // SAFETY: advice on our own mapping.
    unsafe { libc::madvise(base.cast(), plan.capacity, libc::MADV_NOHUGEPAGE) };
    let mut size = 0usize;
    loop {
        if !fork::write_all(plan.replies, &(size as u64).to_ne_bytes()) {
            return 0;
        }
        let mut command = [0u8; 8];
        if !fork::read_exact(plan.commands, &mut command) {
            return 0;
        }
        let asked = u64::from_ne_bytes(command).min(plan.capacity as u64) as usize;
        let target = asked / plan.page * plan.page;
        if target > size {
            for offset in (size..target).step_by(plan.page) {
                // SAFETY: within the mapping; a write, so the page is really allocated.
                unsafe { base.add(offset).write_volatile(1) };
            }
        } else if target < size {
            // SAFETY: the tail of our own mapping; its pages go back to the kernel now.
            unsafe { libc::madvise(base.add(target).cast(), size - target, libc::MADV_DONTNEED) };
        }
        size = target;
    }
}

/// Raising one's own oom_score_adj needs no privilege (lowering it would need
/// CAP_SYS_RESOURCE, which skillprof does not have).
fn volunteer_for_the_oom_killer() {
    let value = b"1000";
    // SAFETY: open/write/close of a proc file with static, NUL-terminated names.
    unsafe {
        let fd = libc::open(c"/proc/self/oom_score_adj".as_ptr(), libc::O_WRONLY);
        if fd >= 0 {
            fork::write_all(fd, value);
            libc::close(fd);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_shrinks_and_dies_by_its_killer() {
        let rss_kb = |pid: u32| -> u64 {
            std::fs::read_to_string(format!("/proc/{pid}/status"))
                .unwrap()
                .lines()
                .find_map(|line| line.strip_prefix("RssAnon:"))
                .and_then(|kb| kb.split_whitespace().next()?.parse().ok())
                .unwrap()
        };
        let mut balloon = Balloon::spawn().unwrap();
        // What the child shares with the test process since the fork.
        let inherited = rss_kb(balloon.pid());
        assert_eq!(balloon.resize(8 << 20).unwrap(), 8 << 20);
        assert_eq!(balloon.resize((4 << 20) + 100).unwrap(), 4 << 20);
        let held = rss_kb(balloon.pid()) - inherited;
        assert!(
            (4096..5120).contains(&held),
            "{held} kB held for a 4 MiB balloon"
        );
        balloon.killer().kill();
        // Wait for the exit, so the command is sent into a broken pipe: the order a watchdog
        // kill usually takes, and the one that must still say how the balloon ended.
        let mut exited = libc::pollfd {
            fd: balloon.pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd on a pidfd we own.
        assert_eq!(unsafe { libc::poll(&mut exited, 1, 10_000) }, 1);
        let error = balloon.resize(1 << 20).unwrap_err().to_string();
        assert!(error.contains("killed by signal 9"), "{error}");
        balloon.release().unwrap();
    }
}
