//! The host process from one read of /proc/PID/stat.

/// Memory in KB as psutil's `memory_info()` reports rss and vms, which the 2024 harness
/// logged; faults are the process's own (children's are not included).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProcessStat {
    pub rss_kb: u64,
    pub vms_kb: u64,
    pub minflt: u64,
    pub majflt: u64,
    pub threads: u64,
    /// utime + stime, in clock ticks (USER_HZ).
    pub cpu_ticks: u64,
}

/// CPU time in seconds from /proc/PID/stat's clock ticks (USER_HZ, 100 on Linux).
pub fn ticks_to_seconds(ticks: u64) -> f64 {
    ticks as f64 / procfs::ticks_per_second().max(1) as f64
}
