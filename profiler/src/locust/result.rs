//! What one `l_execute_all` entry measured: Locust's merged figures per skill and in total,
//! and the host's own count of what it served over the same window.

use crate::record::Row;

pub use crate::record::locust::{LoadEntry, LoadRow};

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
