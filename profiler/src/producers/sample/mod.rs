//! Sampling from procfs: the host process (/proc/PID/statm and stat) and the system (PSI, meminfo,
//! zoneinfo, vmstat), every interval and at entry boundaries, on a thread of its own.
//! Knows nothing of probes; everything here is read from text files.

pub mod composition;
pub mod cpu;
pub mod cpu_quota;
pub mod cpu_takers;
mod entry;
pub mod interrupts;
pub mod meminfo;
pub mod process;
pub mod psi;
pub mod reach;
mod sampler;
pub mod schedstat;
mod system;
pub mod vmstat;
pub mod zoneinfo;

use std::path::Path;

use anyhow::{Context, Result};

pub use sampler::{DEFAULT_INTERVAL, Sample, SampleSink, Sampler};
pub use system::System;

/// Where procfs is mounted. Readers take the root as a parameter so tests can point them at
/// a folder without, say, /proc/pressure.
pub const PROC: &str = "/proc";

fn read_proc_file(proc_root: &Path, name: &str) -> Result<String> {
    let path = proc_root.join(name);
    std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
}
