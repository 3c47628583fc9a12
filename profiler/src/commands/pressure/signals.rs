//! SIGINT and SIGTERM during an experiment: noted, never fatal, so that the experiment stops
//! between two steps and cleans up in order (balloon, sysctl, swap file) before exiting.

use std::io;
use std::sync::atomic::{AtomicI32, Ordering};

use anyhow::{Context, Result};

static RECEIVED: AtomicI32 = AtomicI32::new(0);

extern "C" fn note(signal: libc::c_int) {
    RECEIVED.store(signal, Ordering::SeqCst);
}

/// Catches SIGINT and SIGTERM from now on.
pub fn install() -> Result<()> {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: `note` only stores into an atomic, which is async-signal-safe. SA_RESTART, so
        // that file writes in progress are not cut short by EINTR.
        let installed = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = note as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut())
        };
        if installed != 0 {
            return Err(io::Error::last_os_error()).context("catching SIGINT and SIGTERM");
        }
    }
    Ok(())
}

/// A signal that asked the experiment to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interrupted(libc::c_int);

impl Interrupted {
    pub fn name(self) -> &'static str {
        if self.0 == libc::SIGINT {
            "SIGINT"
        } else {
            "SIGTERM"
        }
    }

    /// 128 + the signal number, as a shell reports a process the signal ended.
    pub fn exit_code(self) -> u8 {
        128 + self.0 as u8
    }
}

/// The signal received since [`install`], if any.
pub fn received() -> Option<Interrupted> {
    match RECEIVED.load(Ordering::SeqCst) {
        0 => None,
        signal => Some(Interrupted(signal)),
    }
}
