//! Per-program BPF run statistics (run count and run time), on for the session only.
//!
//! The kernel keeps these only while stats are enabled. Two ways to enable them:
//! - `BPF_ENABLE_STATS` (kernel >= 5.8): the kernel returns an fd and keeps stats on while
//!   any such fd is open. It is restored on *every* exit path, including SIGKILL and a crash,
//!   because the kernel closes the fd; and `kernel.bpf_stats_enabled` reads 1 meanwhile.
//!   This is the one used.
//! - writing `kernel.bpf_stats_enabled`: the fallback for older kernels, restored by `Drop`
//!   (so not after SIGKILL).

use std::{fs, os::fd::OwnedFd};

use anyhow::{Context as _, Result};
use aya::{
    Btf, Ebpf,
    sys::{Stats, enable_stats},
};

use super::object;
use crate::record::probes::{CountFloor, StatsSource};

/// The empty program (profiler-ebpf/src/floor.rs) and where it runs.
const FLOOR_PROGRAM: &str = "btf_count_floor";
const FLOOR_TRACEPOINT: &str = "sched_wakeup";

/// Attaches the empty program whose count is every program's floor; while stats are on only.
pub fn attach_floor(ebpf: &mut Ebpf) -> Result<()> {
    let btf = Btf::from_sys_fs().context("reading the kernel's BTF")?;
    object::attach_tp_btf(ebpf, &btf, FLOOR_PROGRAM, FLOOR_TRACEPOINT)
}

/// The empty program's count so far.
pub fn floor(ebpf: &Ebpf) -> Result<CountFloor> {
    let info = ebpf
        .program(FLOOR_PROGRAM)
        .with_context(|| format!("the BPF object has no {FLOOR_PROGRAM}"))?
        .info()
        .with_context(|| format!("reading the info of program {FLOOR_PROGRAM}"))?;
    Ok(CountFloor {
        runs: info.run_count(),
        run_ns: info.run_time().as_nanos() as u64,
    })
}

const SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";

/// Keeps BPF stats on while alive.
pub struct StatsGuard {
    how: How,
}

enum How {
    Fd(#[allow(dead_code)] OwnedFd),
    Sysctl { previous: String },
    AlreadyOn,
}

impl StatsGuard {
    pub fn enable() -> Result<Self, String> {
        match enable_stats(Stats::RunTime) {
            Ok(fd) => Ok(Self { how: How::Fd(fd) }),
            Err(fd_error) => {
                let previous = fs::read_to_string(SYSCTL).map_err(|e| {
                    format!("BPF_ENABLE_STATS failed ({fd_error}) and {SYSCTL}: {e}")
                })?;
                let previous = previous.trim().to_string();
                if previous == "1" {
                    return Ok(Self {
                        how: How::AlreadyOn,
                    });
                }
                fs::write(SYSCTL, "1").map_err(|e| {
                    format!("BPF_ENABLE_STATS failed ({fd_error}) and writing {SYSCTL}: {e}")
                })?;
                Ok(Self {
                    how: How::Sysctl { previous },
                })
            }
        }
    }

    pub fn source(&self) -> StatsSource {
        match self.how {
            How::Fd(_) => StatsSource::EnableStatsFd,
            How::Sysctl { .. } => StatsSource::Sysctl,
            How::AlreadyOn => StatsSource::AlreadyOn,
        }
    }
}

impl Drop for StatsGuard {
    fn drop(&mut self) {
        if let How::Sysctl { previous } = &self.how
            && let Err(e) = fs::write(SYSCTL, previous)
        {
            eprintln!("warning: could not restore {SYSCTL} to {previous}: {e}");
        }
    }
}
