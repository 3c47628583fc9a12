//! A process as a file descriptor (pidfd): readable once the process has exited, so a waiter
//! can poll it alongside other descriptors instead of polling the process.

use std::os::fd::OwnedFd;

use anyhow::{Context, Result};
use rustix::process::{Pid, PidfdFlags, pidfd_open};

/// A pidfd for `pid` (Linux >= 5.3).
pub fn open(pid: u32) -> Result<OwnedFd> {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(Pid::from_raw)
        .with_context(|| format!("{pid} is not a process id"))?;
    pidfd_open(pid, PidfdFlags::empty())
        .with_context(|| format!("pidfd_open of process {pid} (Linux >= 5.3)"))
}
