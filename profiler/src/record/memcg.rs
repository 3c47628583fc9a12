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

use super::field::{Column, Row, Unit};

static LIMIT: Column = Column::new(
    "memcg_limit_kb",
    Unit::Kib,
    "with --memory-max: the hard limit of the host's memory cgroup",
);
static USAGE: Column = Column::new(
    "memcg_usage_kb",
    Unit::Kib,
    "what the cgroup was charged at the end of the entry: the host's memory, the page cache it brought in, the kernel memory it caused",
);
static PEAK: Column = Column::new(
    "memcg_peak_kb",
    Unit::Kib,
    "the most the cgroup was charged during the entry, by the kernel's own account (cgroup v2: since the run began)",
);
static LIMIT_HITS: Column = Column::new(
    "memcg_limit_hits",
    Unit::Count,
    "charges that hit the limit and reclaimed first, during the entry (v1 memory.failcnt, v2 memory.events max)",
);
static OOM_KILLS: Column = Column::new(
    "memcg_oom_kills",
    Unit::Count,
    "processes the OOM killer killed in the cgroup during the entry",
);

impl MemcgEntry {
    pub const COLUMNS: [&'static Column; 5] = [&LIMIT, &USAGE, &PEAK, &LIMIT_HITS, &OOM_KILLS];

    pub fn limit_hits(&self) -> u64 {
        self.after.limit_hits.saturating_sub(self.before.limit_hits)
    }

    pub fn oom_kills(&self) -> u64 {
        self.after.oom_kills.saturating_sub(self.before.oom_kills)
    }

    /// The `memcg_*` cells, absent for a run without `--memory-max`.
    pub fn write_cells(entry: Option<&MemcgEntry>, row: &mut Row) {
        let kb = |bytes: u64| bytes / 1024;
        row.put(&LIMIT, entry.map(|e| kb(e.limit_bytes)))
            .put(&USAGE, entry.map(|e| kb(e.after.usage_bytes)))
            .put(&PEAK, entry.map(|e| kb(e.after.peak_bytes)))
            .put(&LIMIT_HITS, entry.map(MemcgEntry::limit_hits))
            .put(&OOM_KILLS, entry.map(MemcgEntry::oom_kills));
    }
}
