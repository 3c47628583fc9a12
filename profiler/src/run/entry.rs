//! The runner's own measurements of one entry: identity, wall time, the host's memory and
//! faults at the two boundaries, the requests, and for `stop` how the host ended.

use std::time::Duration;

use crate::hostctl::Stopped;
use crate::output::harness_log;
use crate::record::{Metrics, Row};
use crate::sample::process::ProcessStat;
use crate::stats::nearest_rank;

use super::workload::Outcome;

pub struct EntryMeasure {
    pub index: usize,
    pub cmd: String,
    pub line: Option<usize>,
    pub repeat: u32,
    /// Since the host was ready.
    pub started: Duration,
    pub took: Duration,
    pub before: ProcessStat,
    /// `None` once the host is gone (after `stop`): its memory then reads 0, as in the
    /// harness, and its fault counters are not known.
    pub after: Option<ProcessStat>,
    pub outcome: Outcome,
    pub stopped: Option<Stopped>,
}

impl EntryMeasure {
    fn rss_after_kb(&self) -> u64 {
        self.after.as_ref().map_or(0, |after| after.rss_kb)
    }

    fn vms_after_kb(&self) -> u64 {
        self.after.as_ref().map_or(0, |after| after.vms_kb)
    }

    /// The entry as the harness logged it: whole milliseconds, truncated.
    pub fn harness(&self) -> harness_log::Entry {
        harness_log::Entry {
            took_ms: self.took.as_millis() as u64,
            rss_diff_kb: self.rss_after_kb() as i64 - self.before.rss_kb as i64,
            rss_kb: self.rss_after_kb(),
            vms_diff_kb: self.vms_after_kb() as i64 - self.before.vms_kb as i64,
            vms_kb: self.vms_after_kb(),
            cmd: self.cmd.clone(),
        }
    }
}

impl EntryMeasure {
    /// Percentiles of the skill executions' latency; empty cells for an entry with none.
    fn write_latency(&self, row: &mut Row) {
        let mut latencies = self.outcome.latencies.clone();
        latencies.sort();
        row.int("executions", latencies.len() as u64);
        let names = ["execute_p50_ms", "execute_p99_ms", "execute_max_ms"];
        if latencies.is_empty() {
            for name in names {
                row.missing(name);
            }
            return;
        }
        let rank = |q: f64| nearest_rank(&latencies, q);
        for (name, latency) in names.into_iter().zip([rank(0.50), rank(0.99), rank(1.0)]) {
            row.float(name, latency.as_secs_f64() * 1e3);
        }
    }
}

/// /proc/PID/stat counts CPU time in clock ticks (USER_HZ, 100 on Linux).
fn ms_per_tick() -> f64 {
    1000.0 / procfs::ticks_per_second().max(1) as f64
}

impl Metrics for EntryMeasure {
    fn write(&self, row: &mut Row) {
        let logged = self.harness();
        row.int("index", self.index as u64).text("cmd", &self.cmd);
        match self.line {
            Some(line) => row.int("line", line as u64),
            None => row.missing("line"),
        };
        row.int("repeat", self.repeat)
            .float("started_s", self.started.as_secs_f64())
            .float("took_ms", self.took.as_secs_f64() * 1e3)
            .int("rss_before_kb", self.before.rss_kb)
            .int("rss_after_kb", logged.rss_kb)
            .int("rss_diff_kb", logged.rss_diff_kb)
            .int("vms_before_kb", self.before.vms_kb)
            .int("vms_after_kb", logged.vms_kb)
            .int("vms_diff_kb", logged.vms_diff_kb);
        match &self.after {
            Some(after) => row
                .int("minflt", after.minflt.saturating_sub(self.before.minflt))
                .int("majflt", after.majflt.saturating_sub(self.before.majflt))
                .int("threads", after.threads)
                .float(
                    "host_cpu_ms",
                    after.cpu_ticks.saturating_sub(self.before.cpu_ticks) as f64 * ms_per_tick(),
                ),
            None => row
                .missing("minflt")
                .missing("majflt")
                .missing("threads")
                .missing("host_cpu_ms"),
        };
        row.int("requests", self.outcome.requests)
            .int("request_errors", self.outcome.errors)
            .text(
                "first_error",
                self.outcome.first_error.clone().unwrap_or_default(),
            );
        self.write_latency(row);
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        if self.outcome.host_timed > 0 {
            row.float("host_instantiate_ms", ms(self.outcome.host_instantiate))
                .float("host_call_ms", ms(self.outcome.host_call));
        } else {
            row.missing("host_instantiate_ms").missing("host_call_ms");
        }
        row.float("listing_ms", ms(self.outcome.listing));
        match &self.stopped {
            Some(stopped) => row
                .text("exit_status", stopped.status.to_string())
                .int("killed", u8::from(stopped.killed)),
            None => row.missing("exit_status").missing("killed"),
        };
    }
}
