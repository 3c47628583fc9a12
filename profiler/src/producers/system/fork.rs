//! Forked helper processes: the balloon (its memory goes back to the kernel whenever it exits,
//! however skillprof ends) and the guardians (they restore what skillprof changed when
//! skillprof goes, even by SIGKILL or a panic with `panic = "abort"`).
//!
//! They are forked, not executed: there is no second binary to find, and the runner can hold
//! a balloon from any binary that links this library. A forked child of a process with threads
//! has only the thread that forked, and any lock another thread held (the allocator's, stdout's)
//! stays locked forever. So the child runs a plain `fn` on data prepared before the fork, makes
//! raw system calls only, and never allocates, frees, locks or panics.

use std::ffi::CStr;
use std::fmt;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use anyhow::{Context, Result, bail};

/// Signals that end a terminal session. A helper ignores them: Ctrl-C must reach skillprof,
/// which cleans up in order, and a helper that died of it first would leave nothing to clean.
const IGNORED: [libc::c_int; 5] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGPIPE,
];

/// A pipe whose ends are closed on exec, so a host the runner starts never holds one open.
pub fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error()).context("creating a pipe");
    }
    // SAFETY: pipe2 succeeded, so both are open descriptors nothing else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Whether the child stays in skillprof's process group.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Session {
    /// Killing skillprof's process group kills it too: right for the balloon, whose death
    /// only frees memory.
    Same,
    /// Its own session: a group kill aimed at skillprof must not take the guardian with it.
    New,
}

/// What a kind of helper is called: in messages, and in `ps` and the kernel's log (its comm).
pub struct Helper {
    pub name: &'static str,
    /// At most 15 bytes.
    pub comm: &'static CStr,
}

/// A forked child that has not been waited for.
pub struct Child {
    pid: libc::pid_t,
    name: &'static str,
}

/// How a child ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Exit::Code(code) => write!(f, "exited with code {code}"),
            Exit::Signal(signal) => {
                // SAFETY: strsignal returns a static or thread-local string for any number.
                let name = unsafe { CStr::from_ptr(libc::strsignal(signal)) };
                write!(
                    f,
                    "was killed by signal {signal} ({})",
                    name.to_string_lossy()
                )
            }
        }
    }
}

/// Forks a child that runs `body(arg)` and exits with what it returns. The child keeps only
/// the descriptors in `keep` (and 0-2) and ignores the signals in [`IGNORED`]. `body` is a
/// plain `fn` taking a reference so that nothing is dropped, and so freed, in the child.
pub fn spawn<T>(
    helper: &Helper,
    keep: &[RawFd],
    session: Session,
    body: fn(&T) -> i32,
    arg: &T,
) -> Result<Child> {
    let mut keep = keep.to_vec();
    keep.sort_unstable();
    // SAFETY: the child only makes system calls on memory that exists in it (`keep`, `arg`)
    // and ends with _exit, never returning into the parent's code.
    match unsafe { libc::fork() } {
        -1 => {
            Err(io::Error::last_os_error()).with_context(|| format!("forking the {}", helper.name))
        }
        0 => {
            prepare_child(helper.comm, &keep, session);
            let code = body(arg);
            // SAFETY: ends the child without running the parent's exit handlers.
            unsafe { libc::_exit(code) }
        }
        pid => Ok(Child {
            pid,
            name: helper.name,
        }),
    }
}

/// Runs in the child: raw system calls only.
fn prepare_child(comm: &CStr, keep: &[RawFd], session: Session) {
    // SAFETY: plain system calls; their failures leave the child usable.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, comm.as_ptr());
        if session == Session::New {
            libc::setsid();
        }
        for signal in IGNORED {
            libc::signal(signal, libc::SIG_IGN);
        }
    }
    let mut first: RawFd = 3;
    for &fd in keep {
        if fd > first {
            close_range(first, fd - 1);
        }
        first = first.max(fd + 1);
    }
    close_range(first, RawFd::MAX);
}

fn close_range(first: RawFd, last: RawFd) {
    // SAFETY: closes descriptors of this (child) process only.
    unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first as libc::c_uint,
            last as libc::c_uint,
            0,
        );
    }
}

impl Child {
    pub fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// Waits until the child has exited and been reaped.
    pub fn wait(self) -> Result<Exit> {
        let mut status = 0;
        loop {
            // SAFETY: waits for our own child; `status` is a valid out-pointer.
            if unsafe { libc::waitpid(self.pid, &mut status, 0) } == self.pid {
                break;
            }
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::Interrupted {
                bail!("waiting for the {} (pid {}): {error}", self.name, self.pid);
            }
        }
        Ok(if libc::WIFSIGNALED(status) {
            Exit::Signal(libc::WTERMSIG(status))
        } else {
            Exit::Code(libc::WEXITSTATUS(status))
        })
    }
}

/// Reads exactly `buffer.len()` bytes; `false` at end of file or on an error. For children.
pub fn read_exact(fd: RawFd, buffer: &mut [u8]) -> bool {
    let mut done = 0;
    while done < buffer.len() {
        let rest = &mut buffer[done..];
        // SAFETY: `rest` is valid for `rest.len()` bytes.
        let read = unsafe { libc::read(fd, rest.as_mut_ptr().cast(), rest.len()) };
        if read > 0 {
            done += read as usize;
        } else if read == 0 || !interrupted() {
            return false;
        }
    }
    true
}

/// Writes all of `bytes`; `false` on an error. For children.
pub fn write_all(fd: RawFd, bytes: &[u8]) -> bool {
    let mut done = 0;
    while done < bytes.len() {
        let rest = &bytes[done..];
        // SAFETY: `rest` is valid for `rest.len()` bytes.
        let written = unsafe { libc::write(fd, rest.as_ptr().cast(), rest.len()) };
        if written > 0 {
            done += written as usize;
        } else if !interrupted() {
            return false;
        }
    }
    true
}

fn interrupted() -> bool {
    errno() == libc::EINTR
}

/// This thread's errno, without allocating.
pub fn errno() -> libc::c_int {
    // SAFETY: __errno_location always returns this thread's errno.
    unsafe { *libc::__errno_location() }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    use super::*;

    const ECHO: Helper = Helper {
        name: "echo",
        comm: c"skp-echo",
    };

    fn echo_twice(fds: &(RawFd, RawFd)) -> i32 {
        let mut byte = [0u8; 1];
        if !read_exact(fds.0, &mut byte) {
            return 3;
        }
        let doubled = [byte[0], byte[0]];
        if write_all(fds.1, &doubled) { 0 } else { 4 }
    }

    #[test]
    fn a_child_keeps_only_its_descriptors_and_reports_its_exit() {
        let (to_child, from_parent) = pipe().unwrap();
        let (to_parent, from_child) = pipe().unwrap();
        let fds = (to_child.as_raw_fd(), from_child.as_raw_fd());
        let child = spawn(&ECHO, &[fds.0, fds.1], Session::Same, echo_twice, &fds).unwrap();
        drop((to_child, from_child));
        assert!(write_all(from_parent.as_raw_fd(), b"x"));
        let mut answer = [0u8; 2];
        assert!(read_exact(to_parent.as_raw_fd(), &mut answer));
        assert_eq!(&answer, b"xx");
        // It answered, so it is past its preparation and named.
        let comm = std::fs::read_to_string(format!("/proc/{}/comm", child.pid())).unwrap();
        assert_eq!(comm, "skp-echo\n");
        assert_eq!(child.wait().unwrap(), Exit::Code(0));
    }

    #[test]
    fn a_closed_pipe_reads_as_end_of_file() {
        let (to_child, from_parent) = pipe().unwrap();
        let (_to_parent, from_child) = pipe().unwrap();
        let fds = (to_child.as_raw_fd(), from_child.as_raw_fd());
        let child = spawn(&ECHO, &[fds.0, fds.1], Session::Same, echo_twice, &fds).unwrap();
        drop(from_parent);
        assert_eq!(child.wait().unwrap(), Exit::Code(3));
        assert_eq!(
            Exit::Signal(9).to_string(),
            "was killed by signal 9 (Killed)"
        );
    }
}
