//! The sampler's figures of an entry: extremes over its samples, changes between its two
//! boundaries, per zone against the zone's watermarks.

use crate::band::Band;

#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct ZoneId {
    pub node: u32,
    pub name: String,
}

/// In pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Watermarks {
    pub min: u64,
    pub low: u64,
    pub high: u64,
    /// Absent before kernel 6.3.
    pub promo: Option<u64>,
}

/// How low free pages got: the fewest free pages, and the most severe band. The two can
/// come from different samples, because watermarks move as zones grow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Lowest {
    pub free_pages: u64,
    pub band: Band,
}

/// The sampler's measurements of one entry.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EntrySampling {
    /// Samples taken during the entry, both boundary samples included.
    pub samples: u64,
    /// The most RSS seen: in the samples and in what the runner adds
    /// ([`EntrySampling::cover_rss`]): its own readings before and after the entry, and the
    /// kernel's high-water mark over the entry. `None` if the host was gone in every one.
    pub rss_peak_kb: Option<u64>,
    /// Most mappings the host held in any count of the entry (boundaries and every
    /// [`super::sampler::MAPS_EVERY`]); `None` if never counted.
    #[serde(default)]
    pub maps_peak: Option<u64>,
    /// vm.max_map_count at the end of the entry.
    #[serde(default)]
    pub maps_limit: Option<u64>,
    /// Most threads the host ran in any sample of the entry: a compile's own threads live
    /// only while it runs, so the count at the end misses them.
    #[serde(default)]
    pub threads_peak: Option<u64>,
    /// Memory stall time between the boundaries; `None` without PSI.
    pub psi_some_us: Option<u64>,
    pub psi_full_us: Option<u64>,
    /// Over the summed free pages and watermarks of the populated zones.
    pub zones_lowest: Lowest,
    /// Each zone of the run's zone set; `None` if a sample lacked it.
    pub zone_lowest: Vec<(ZoneId, Option<Lowest>)>,
    /// vmstat counter changes between the boundaries, in file order.
    pub vmstat: Vec<(String, i64)>,
    /// The machine's CPUs between the boundaries; `None` if no tick passed.
    pub cpu: Option<CpuShare>,
}

/// The share of the CPUs busy and stolen between two readings, in percent of all CPU time.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CpuShare {
    pub busy_pct: f64,
    pub steal_pct: f64,
}
