//! The host's memory cgroup over an entry (`--memory-max`), as the kernel accounts it.

use serde::{Deserialize, Serialize};

/// Which hierarchy holds the cgroup; their files differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Version {
    V1,
    V2,
}

/// The kernel's account of the cgroup at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemcgStat {
    /// Memory charged now: the host's anonymous memory, the page cache it brought in and the
    /// kernel memory it caused (page tables, slab).
    pub usage_bytes: u64,
    /// The most charged since [`MemoryCgroup::reset_peak`] (v1), or since the cgroup was
    /// made (v2).
    pub peak_bytes: u64,
    /// Times a charge hit the limit and had to reclaim first (v1 `memory.failcnt`, v2
    /// `memory.events` max).
    pub limit_hits: u64,
    /// Processes the OOM killer killed in the cgroup.
    pub oom_kills: u64,
}

/// The cgroup over one entry: its limit and the kernel's account at both ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemcgEntry {
    pub limit_bytes: u64,
    pub before: MemcgStat,
    pub after: MemcgStat,
}
