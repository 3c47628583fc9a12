//! What one `l_execute_all` entry measured: Locust's merged figures per skill and in total,
//! and the host's own count of what it served over the same window.

use serde::{Deserialize, Serialize};

use crate::record::Row;

/// Requests to one skill (or, as `total`, to all), as Locust's master merged them from its
/// workers. Latencies come from Locust's histogram, whose buckets round a time above 100 ms
/// to two significant digits (9,012 ms reads 9,000).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LoadRow {
    /// The skill; `Aggregated` for the total, as Locust names it.
    pub name: String,
    pub requests: u64,
    pub failures: u64,
    pub avg_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl LoadRow {
    /// load.csv's cells for this skill.
    pub fn write_cells(&self, row: &mut Row) {
        row.text("skill", self.name.as_str())
            .int("requests", self.requests)
            .int("failures", self.failures)
            .float("avg_ms", self.avg_ms)
            .float("p50_ms", self.p50_ms)
            .float("p90_ms", self.p90_ms)
            .float("p99_ms", self.p99_ms)
            .float("max_ms", self.max_ms);
    }
}

/// One swarm: who ran it, how long it was held and what it came to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoadEntry {
    pub users: u32,
    pub workers: u32,
    /// From the swarm's start to the last user's stop (users finish the request they are in).
    pub held_s: f64,
    pub total: LoadRow,
    pub skills: Vec<LoadRow>,
    /// Distinct failures, as Locust words them, with how often each happened.
    pub errors: Vec<(String, u64)>,
    /// Executions the host itself counted over the entry (its `/metrics`), if it has them.
    pub host_served: Option<u64>,
    /// CPU time of Locust's processes (master and workers) over the entry, in seconds: on
    /// one machine, they and the host share the cores.
    pub locust_cpu_s: f64,
}

impl LoadEntry {
    pub fn requests_per_s(&self) -> f64 {
        self.total.requests as f64 / self.held_s.max(1e-9)
    }

    /// The `load_*` columns, empty for any other command.
    pub fn write_cells(entry: Option<&LoadEntry>, row: &mut Row) {
        let total = entry.map(|e| &e.total);
        row.int_or_empty("load_users", entry.map(|e| e.users))
            .int_or_empty("load_workers", entry.map(|e| e.workers))
            .int_or_empty("load_requests", total.map(|t| t.requests))
            .int_or_empty("load_failures", total.map(|t| t.failures))
            .float_or_empty("load_rps", entry.map(LoadEntry::requests_per_s))
            .float_or_empty("load_p50_ms", total.map(|t| t.p50_ms))
            .float_or_empty("load_p90_ms", total.map(|t| t.p90_ms))
            .float_or_empty("load_p99_ms", total.map(|t| t.p99_ms))
            .float_or_empty("load_max_ms", total.map(|t| t.max_ms))
            .int_or_empty("load_host_served", entry.and_then(|e| e.host_served))
            .float_or_empty("load_locust_cpu_s", entry.map(|e| e.locust_cpu_s));
    }
}
