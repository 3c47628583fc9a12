//! Facts about the machine a run ran on, in the harness's terms (its log header line 1)
//! and in full (meta.json).

use std::fs;

use anyhow::{Context, Result};
use serde::Serialize;

use crate::output::harness_log;

#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// As py-cpuinfo names it, which the harness logged: `X86_64`, `ARM_8`.
    pub arch: String,
    pub brand: String,
    /// Logical CPUs online.
    pub cores: u64,
    pub memory_total_kb: u64,
    pub memory_available_kb: u64,
    pub kernel_release: String,
    pub kernel_version: String,
    pub hostname: String,
}

impl Machine {
    pub fn read() -> Result<Self> {
        let uname = uname()?;
        let cpuinfo = fs::read_to_string("/proc/cpuinfo").context("reading /proc/cpuinfo")?;
        let brand = cpuinfo
            .lines()
            .find_map(|line| {
                line.strip_prefix("model name")?
                    .split_once(':')
                    .map(|(_, v)| v.trim())
            })
            .unwrap_or("unknown")
            .to_owned();
        let meminfo = meminfo()?;
        // SAFETY: sysconf has no preconditions.
        let cores = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as u64;
        Ok(Machine {
            arch: harness_arch(&uname.machine),
            brand,
            cores,
            memory_total_kb: meminfo.0,
            memory_available_kb: meminfo.1,
            kernel_release: uname.release,
            kernel_version: uname.version,
            hostname: uname.nodename,
        })
    }

    /// Header line 1 of the harness log: memory in whole GiB, truncated as `int()` would.
    pub fn harness(&self) -> harness_log::Machine {
        let gib = |kb: u64| (kb / (1024 * 1024)).to_string();
        harness_log::Machine {
            arch: self.arch.clone(),
            brand: self.brand.clone(),
            cores: self.cores.to_string(),
            memory_total: gib(self.memory_total_kb),
            memory_available: gib(self.memory_available_kb),
        }
    }
}

fn harness_arch(machine: &str) -> String {
    match machine {
        "x86_64" => "X86_64".to_owned(),
        "aarch64" | "arm64" => "ARM_8".to_owned(),
        other => other.to_uppercase(),
    }
}

struct Uname {
    machine: String,
    release: String,
    version: String,
    nodename: String,
}

fn uname() -> Result<Uname> {
    // SAFETY: uname fills the zeroed struct; its fields are NUL-terminated.
    let mut raw: libc::utsname = unsafe { std::mem::zeroed() };
    if unsafe { libc::uname(&mut raw) } != 0 {
        return Err(std::io::Error::last_os_error()).context("uname");
    }
    let field = |chars: &[libc::c_char]| {
        let bytes: Vec<u8> = chars
            .iter()
            .take_while(|c| **c != 0)
            .map(|c| *c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    Ok(Uname {
        machine: field(&raw.machine),
        release: field(&raw.release),
        version: field(&raw.version),
        nodename: field(&raw.nodename),
    })
}

/// MemTotal and MemAvailable, in kB.
fn meminfo() -> Result<(u64, u64)> {
    use procfs::Current as _;
    let meminfo = procfs::Meminfo::current().context("reading /proc/meminfo")?;
    Ok((
        meminfo.mem_total / 1024,
        meminfo.mem_available.unwrap_or(meminfo.mem_free) / 1024,
    ))
}
