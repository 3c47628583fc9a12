//! Why a run stops early: the user (Ctrl-C, SIGTERM) or the host (it exited on its own).

use std::fmt;

use anyhow::{Context, Result};
use tokio::signal::unix::{Signal, SignalKind, signal};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Interruption {
    Signal(&'static str),
    /// The host process exited while an entry ran.
    HostExited,
}

impl Interruption {
    /// The conventional exit code: 128 + signal for signals, 1 for a lost host.
    pub fn exit_code(&self) -> u8 {
        match self {
            Interruption::Signal("SIGINT") => 130,
            Interruption::Signal(_) => 143,
            Interruption::HostExited => 1,
        }
    }
}

impl fmt::Display for Interruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Interruption::Signal(name) => write!(f, "skillprof received {name}"),
            Interruption::HostExited => write!(f, "the host exited on its own during the run"),
        }
    }
}

/// Why a run ended before its last entry: interrupted, or an error.
pub enum Abort {
    Interrupted(Interruption),
    Failed(anyhow::Error),
}

impl From<anyhow::Error> for Abort {
    fn from(error: anyhow::Error) -> Self {
        Abort::Failed(error)
    }
}

/// SIGINT and SIGTERM to skillprof, caught from the start of the run so that neither kills
/// it before the host is stopped and the files are finished.
pub struct Signals {
    int: Signal,
    term: Signal,
}

impl Signals {
    pub fn install() -> Result<Self> {
        Ok(Signals {
            int: signal(SignalKind::interrupt()).context("catching SIGINT")?,
            term: signal(SignalKind::terminate()).context("catching SIGTERM")?,
        })
    }

    pub async fn next(&mut self) -> Interruption {
        tokio::select! {
            _ = self.int.recv() => Interruption::Signal("SIGINT"),
            _ = self.term.recv() => Interruption::Signal("SIGTERM"),
        }
    }
}
