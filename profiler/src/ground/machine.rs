//! Facts about the machine a run or an experiment ran on, in full (meta.json); the harness
//! log's header line 1 is written from them (`output::harness_log`).

use std::fs;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
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
    /// vm.max_map_count: the mappings one process may hold (runs from before: unknown).
    #[serde(default)]
    pub max_map_count: Option<u64>,
    /// Whether this VM hands the pages it frees back to its hypervisor (virtio-balloon's
    /// free page reporting): the next write to such a page costs the hypervisor's work too,
    /// which a profile sees as slower page zeroing in faults. `None`: no balloon device.
    #[serde(default)]
    pub free_page_reporting: Option<bool>,
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
        let memory = memory_kb()?;
        // SAFETY: sysconf has no preconditions.
        let cores = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as u64;
        Ok(Machine {
            arch: harness_arch(&uname.machine),
            brand,
            cores,
            memory_total_kb: memory.0,
            memory_available_kb: memory.1,
            kernel_release: uname.release,
            kernel_version: uname.version,
            hostname: uname.nodename,
            max_map_count: max_map_count(),
            free_page_reporting: free_page_reporting(),
        })
    }
}

/// virtio-balloon's free page reporting, from the feature bits the device offers and the
/// driver accepted (`VIRTIO_BALLOON_F_REPORTING`, bit 5).
fn free_page_reporting() -> Option<bool> {
    const REPORTING: usize = 5;
    let devices = fs::read_dir("/sys/bus/virtio/drivers/virtio_balloon").ok()?;
    devices.flatten().find_map(|device| {
        let features = fs::read_to_string(device.path().join("features")).ok()?;
        Some(features.trim().as_bytes().get(REPORTING) == Some(&b'1'))
    })
}

/// vm.max_map_count now: the mappings one process may hold (a run may change it).
pub fn max_map_count() -> Option<u64> {
    fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()?
        .trim()
        .parse()
        .ok()
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
pub fn memory_kb() -> Result<(u64, u64)> {
    use procfs::Current as _;
    let meminfo = procfs::Meminfo::current().context("reading /proc/meminfo")?;
    Ok((
        meminfo.mem_total / 1024,
        meminfo.mem_available.unwrap_or(meminfo.mem_free) / 1024,
    ))
}
