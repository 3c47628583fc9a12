//! Locust's swarm over an `l_execute_all` or `lo_execute` entry, and the load network the run
//! made.

use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

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
    /// `lo_execute`'s open loop: what the workers' schedules asked and how well they kept
    /// them. Its latencies (`total`) count from each request's scheduled send.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<ScheduleKept>,
}

/// The open loop of `lo_execute`, summed over Locust's workers from what each wrote at its
/// schedule's end.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScheduleKept {
    pub asked_rps: u32,
    pub poisson: bool,
    /// The schedule's length.
    pub seconds: u32,
    /// Requests the workers sent, all of them (Locust keeps no warm-up apart).
    pub sent: u64,
    /// Sends more than 2 ms after their scheduled time (a Python worker's timers wake within
    /// about 1 ms): the workers fell behind.
    pub late_sends: u64,
    /// The worst worker's 99th percentile of the send lag, ms.
    pub send_lag_p99_ms: f64,
    /// Requests still unanswered when a worker stopped waiting (Locust never counted them).
    pub unanswered: u64,
}

impl ScheduleKept {
    /// Why the workers could not hold the schedule, if they could not (late sends beyond 1%
    /// of the requests): then the entry measured the workers, not the host.
    pub fn workers_limited(&self) -> Option<String> {
        (self.late_sends * 100 > self.sent.max(1)).then(|| {
            format!(
                "{} of {} sends were more than 2 ms late, the worst worker's send lag p99 \
                 {:.2} ms",
                self.late_sends, self.sent, self.send_lag_p99_ms
            )
        })
    }
}

/// What the run made, for meta.json and for anyone checking it is gone.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkInfo {
    /// The host's side of the link: the run points the host here.
    pub host_address: Ipv4Addr,
    /// The veth end in the root namespace.
    pub link: String,
    /// The namespaces' names (`ip netns list`): the bridge's, then one per worker.
    pub namespaces: Vec<String>,
}

use super::field::{Row, fields};

fields! {
    impl LoadEntry: pub fn write_cells(entry: Option<&LoadEntry>, row: &mut Row) -> row {
        let total = entry.map(|e| &e.total);
        let schedule = entry.and_then(|e| e.schedule.as_ref());
    }
    USERS "load_users" Count "l_execute_all and lo_execute only: the Locust users the swarm held (lo_execute: one per worker)" = entry.map(|e| e.users);
    WORKERS "load_workers" Count "Locust workers, each in a network namespace of the run's making" = entry.map(|e| e.workers);
    REQUESTS "load_requests" Count "requests Locust counted, all skills, merged by its master from every worker" = total.map(|t| t.requests);
    FAILURES "load_failures" Count "of those, failures" = total.map(|t| t.failures);
    RPS "load_rps" Count "requests per second of the held window (lo_execute: of the schedule)" = entry.map(LoadEntry::requests_per_s);
    P50 "load_p50_ms" Ms "median response time, from Locust's histogram (which rounds times above 100 ms to two significant digits)" = total.map(|t| t.p50_ms);
    P90 "load_p90_ms" Ms "90th percentile response time, from Locust's histogram" = total.map(|t| t.p90_ms);
    P99 "load_p99_ms" Ms "99th percentile response time, from Locust's histogram" = total.map(|t| t.p99_ms);
    MAX "load_max_ms" Ms "slowest response" = total.map(|t| t.max_ms);
    SERVED "load_host_served" Count "executions the host itself counted over the entry, from its /metrics (empty for a host without them)" = entry.and_then(|e| e.host_served);
    CPU "load_locust_cpu_s" Seconds "CPU time of Locust's master and workers: on one machine they share the cores with the host" = entry.map(|e| e.locust_cpu_s);
    ASKED "load_asked_rps" Count "lo_execute only: the rate asked of the workers in all (each sends its share on a schedule of its own; latencies then count from each scheduled send)" = schedule.map(|s| s.asked_rps);
    LATE "load_late_sends" Count "lo_execute only: sends more than 2 ms after their scheduled time, all workers (a Python worker's timers wake within about 1 ms)" = schedule.map(|s| s.late_sends);
}

/// load.csv's columns after the entry's own, one row per skill.
pub mod load_columns {
    use super::{LoadRow, Row, fields};

    fields! {
        impl LoadRow: pub fn write_cells(&self, row: &mut Row) -> row {}
        SKILL "skill" Text "the skill (Aggregated: all of them)" = self.name.as_str();
        REQUESTS "requests" Count "requests Locust counted" = self.requests;
        FAILURES "failures" Count "of those, failures" = self.failures;
        AVG_MS "avg_ms" Ms "mean response time" = self.avg_ms;
        P50_MS "p50_ms" Ms "median response time" = self.p50_ms;
        P90_MS "p90_ms" Ms "90th percentile response time" = self.p90_ms;
        P99_MS "p99_ms" Ms "99th percentile response time" = self.p99_ms;
        MAX_MS "max_ms" Ms "slowest response" = self.max_ms;
    }
}

impl LoadEntry {
    /// Over the held window; for a schedule, over the schedule (the swarm's start and stop
    /// are no part of it).
    pub fn requests_per_s(&self) -> f64 {
        let seconds = match &self.schedule {
            Some(schedule) => f64::from(schedule.seconds),
            None => self.held_s,
        };
        self.total.requests as f64 / seconds.max(1e-9)
    }
}
