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

use super::field::{Row, fields};

fields! {
    impl MemcgEntry: pub fn write_cells(entry: Option<&MemcgEntry>, row: &mut Row) -> row {
        let kb = |bytes: u64| bytes / 1024;
    }
    LIMIT "memcg_limit_kb" Kib "with --memory-max: the hard limit of the host's memory cgroup" = entry.map(|e| kb(e.limit_bytes));
    USAGE "memcg_usage_kb" Kib "what the cgroup was charged at the end of the entry: the host's memory, the page cache it brought in, the kernel memory it caused" = entry.map(|e| kb(e.after.usage_bytes));
    PEAK "memcg_peak_kb" Kib "the most the cgroup was charged during the entry, by the kernel's own account (cgroup v2: since the run began)" = entry.map(|e| kb(e.after.peak_bytes));
    LIMIT_HITS "memcg_limit_hits" Count "charges that hit the limit and reclaimed first, during the entry (v1 memory.failcnt, v2 memory.events max)" = entry.map(MemcgEntry::limit_hits);
    OOM_KILLS "memcg_oom_kills" Count "processes the OOM killer killed in the cgroup during the entry" = entry.map(MemcgEntry::oom_kills);
}

impl MemcgEntry {
    pub fn limit_hits(&self) -> u64 {
        self.after.limit_hits.saturating_sub(self.before.limit_hits)
    }

    pub fn oom_kills(&self) -> u64 {
        self.after.oom_kills.saturating_sub(self.before.oom_kills)
    }
}
