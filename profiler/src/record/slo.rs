//! `skillprof slo`: how much traffic a host serves within a latency target, per host
//! configuration. One [`SloStep`] per step of traffic (the search for each configuration's
//! peak, then the table of load points), each with the evidence of what bounded it; the
//! [`SloReport`] is what slo.json holds and every view of the experiment reads.

use serde::{Deserialize, Serialize};

use super::field::{Row, fields};
use super::traffic::{Arrivals, TrafficStep};

/// pN ≤ T: the latency quantile a target bounds, and the bound.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Target {
    /// As written: p50, p90, p99 or p99.9.
    pub quantile: String,
    pub ms: f64,
}

impl Target {
    /// The step's latency at the target's quantile (from the scheduled send).
    pub fn latency_ms(&self, step: &TrafficStep) -> f64 {
        let l = &step.latency;
        match self.quantile.as_str() {
            "p50" => l.p50_ms,
            "p90" => l.p90_ms,
            "p99.9" => l.p999_ms,
            _ => l.p99_ms,
        }
    }

    /// The step's verdict against the target: sustained (at least 90% of an open loop's rate
    /// answered, no errors, the latency not still growing at the end) and within the target,
    /// or by how much not.
    pub fn verdict(&self, step: &TrafficStep) -> Verdict {
        if step.generator_limited().is_some() {
            return Verdict::Generator;
        }
        if step.unsustained().is_some() {
            return Verdict::Fail;
        }
        let ratio = self.latency_ms(step) / self.ms;
        match ratio {
            r if r <= 1.0 => Verdict::Met,
            r if r <= 1.5 => Verdict::Near,
            _ => Verdict::Over,
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ≤ {} ms", self.quantile, self.ms)
    }
}

/// One way to run the host: its worker threads, its CPUs, its allocator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostConfig {
    /// Async worker threads (TOKIO_WORKER_THREADS); `None`: the host's default.
    pub workers: Option<u32>,
    /// The CPUs the host runs on.
    pub cpus: Vec<usize>,
    /// skillhost's `--allocator`; `None`: the host's default.
    pub allocator: Option<String>,
}

impl HostConfig {
    /// "1 worker, 1 CPU, pooling": how tables and explain.md name it.
    pub fn label(&self) -> String {
        let workers = match self.workers {
            Some(1) => "1 worker".to_owned(),
            Some(n) => format!("{n} workers"),
            None => "default workers".to_owned(),
        };
        let cpus = match self.cpus.len() {
            1 => "1 CPU".to_owned(),
            n => format!("{n} CPUs"),
        };
        match &self.allocator {
            Some(allocator) => format!("{workers}, {cpus}, {allocator}"),
            None => format!("{workers}, {cpus}"),
        }
    }
}

/// Why a step counts as meeting the target or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Sustained, and the quantile within the target.
    Met,
    /// Sustained, the quantile 101-150% of the target.
    Near,
    /// Sustained, the quantile above 150% of the target.
    Over,
    /// Not sustained: under 90% of the asked rate answered, errors, or a queue still growing.
    Fail,
    /// The generator could not send the rate: the step says nothing of the host.
    Generator,
}

impl Verdict {
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Met => "met",
            Verdict::Near => "101-150%",
            Verdict::Over => ">150%",
            Verdict::Fail => "FAIL",
            Verdict::Generator => "generator",
        }
    }

    pub fn met(self) -> bool {
        self == Verdict::Met
    }
}

/// What bounded a step, from the host's own counters over it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// The host's CPU time over the step (all threads, user + system).
    pub host_cpu_ms: f64,
    /// The step's wall time, warm-up included.
    pub wall_ms: f64,
    /// Time the host's threads waited to run, runnable but not running (schedstat).
    pub run_delay_ms: f64,
    /// The time on a CPU of the host's busiest thread (schedstat); 0 in experiments made
    /// before it was read.
    #[serde(default)]
    pub busiest_thread_ms: f64,
    /// The host's page faults (minflt + majflt).
    pub faults: u64,
    /// TLB shootdown interrupts, all CPUs (the `TLB` line of /proc/interrupts): the machine's,
    /// the host's unmaps above all.
    pub tlb_shootdowns: u64,
    /// The host's CPU by phase of its work (its ledger: compile, instantiate, call, and the
    /// threads' time outside any skill), ms; empty without a ledger.
    pub phases_cpu_ms: Vec<(String, f64)>,
    /// Requests the host answered in the step (warm-up and drain included).
    pub answered: u64,
    /// The host died in the step: how it ended and the end of its log.
    pub died: Option<String>,
    /// Where the requests' time went inside the host (its ledger), summed over the step.
    #[serde(default)]
    pub requests: Option<RequestTimes>,
    /// What the host's CPUs did that no task sees as its own (their /proc/stat lines).
    #[serde(default)]
    pub cpus: Option<CpusLost>,
    /// Where the host's CPU went (the time profile of the step), where it ran.
    #[serde(default)]
    pub time: Option<super::time::EntryTime>,
    /// What the host's threads did during the stall the tail came from, where there was one
    /// and the profile's timeline ran.
    #[serde(default)]
    pub stall: Option<StallSeen>,
    /// The CPU quota of the host's cgroup and its throttling over the step, where its cgroup
    /// has the CPU controller.
    #[serde(default)]
    pub quota: Option<super::sampling::CpuQuota>,
    /// The other processes that used the most CPU over the step, most first (the
    /// generator, skillprof, among them): what ran while the host's threads waited.
    #[serde(default)]
    pub ran_instead: Vec<super::sampling::CpuTaker>,
}

/// The requests' time inside the host, from its tracked futures (ms, summed over the step):
/// polled on a thread, pending until something woke them (the skill's own waits), and
/// queued from that wake until a thread polled them again.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestTimes {
    pub on_thread_ms: f64,
    pub pending_ms: f64,
    pub queued_ms: f64,
}

/// The host's CPUs' time that no task sees as its own, over a step, ms: taken by the
/// hypervisor (steal), and serving interrupts and softirqs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CpusLost {
    pub steal_ms: f64,
    pub irq_ms: f64,
    pub softirq_ms: f64,
}

/// The host's threads during a stall, from the profile's timeline: the samples it has in
/// the stall, against those it would have if the threads had used every CPU they were given,
/// and the functions they were in.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StallSeen {
    pub samples: u64,
    pub possible: f64,
    pub functions: Vec<super::time::Share>,
    /// From the stall's start to the first sample in it (all of it without one), ms: how long
    /// the host ran nothing, to the clock's period. The rest of the stall is the backlog of
    /// requests it left, drained.
    #[serde(default)]
    pub quiet_ms: f64,
}

impl Evidence {
    /// The host's CPU used as a share of the CPUs it was given.
    pub fn cpu_share(&self, cpus: usize) -> f64 {
        self.host_cpu_ms / (self.wall_ms * cpus.max(1) as f64).max(1e-9)
    }

    /// Per request answered: what divides by 0 is 0.
    pub fn per_request(&self, value: f64) -> f64 {
        match self.answered {
            0 => 0.0,
            n => value / n as f64,
        }
    }
}

/// Where a step stood in the experiment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Finding a configuration's peak.
    Search,
    /// A load point of the table.
    Table,
}

/// One step of traffic at one rate on one configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SloStep {
    /// The configuration's index in [`SloReport::configs`].
    pub config: usize,
    pub stage: Stage,
    pub rps: u32,
    pub verdict: Verdict,
    pub traffic: TrafficStep,
    pub evidence: Evidence,
}

/// What a configuration came to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConfigPeak {
    pub config: HostConfig,
    /// The highest rate that met the target; `None` if none did.
    pub peak_rps: Option<u32>,
    /// The lowest rate that did not.
    pub missed_rps: Option<u32>,
}

/// The whole experiment: slo.json.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SloReport {
    pub target: Target,
    pub skill: String,
    pub input: serde_json::Value,
    pub arrivals: Arrivals,
    pub step_s: u32,
    /// The host profile, and what every configuration ran.
    pub host_profile: String,
    pub machine_cpus: usize,
    pub configs: Vec<ConfigPeak>,
    /// The table's rates: fractions of the highest peak (or the rates asked for).
    pub load_points: Vec<u32>,
    pub steps: Vec<SloStep>,
    /// When it ran, and whether every step did.
    pub started: String,
    pub complete: bool,
}

impl SloReport {
    /// The table's cell of configuration `config` at load point `point` (an index into
    /// `load_points`): of its steps at the point's rate, the one asked for at that point, a
    /// rate asked for again being a point of its own.
    pub fn cell(&self, config: usize, point: usize) -> Option<&SloStep> {
        let rps = *self.load_points.get(point)?;
        self.steps
            .iter()
            .filter(|s| s.config == config && s.stage == Stage::Table && s.rps == rps)
            .nth(self.asked_before(point))
    }

    /// How many earlier load points asked for load point `point`'s rate.
    pub fn asked_before(&self, point: usize) -> usize {
        let rps = self.load_points[point];
        self.load_points[..point]
            .iter()
            .filter(|&&earlier| earlier == rps)
            .count()
    }

    /// The highest peak of any configuration.
    pub fn best_peak(&self) -> Option<u32> {
        self.configs.iter().filter_map(|c| c.peak_rps).max()
    }
}

fields! {
    impl SloStep: fn write_cells(&self, report: &SloReport, row: &mut Row) -> row {
        let config = &report.configs[self.config].config;
        let e = &self.evidence;
        let t = &self.traffic;
    }
    CONFIG "config" Text "the host's configuration: worker threads, CPUs, allocator" = config.label();
    STAGE "stage" Text "search (finding the configuration's peak) or table (a load point)" = match self.stage { Stage::Search => "search", Stage::Table => "table" };
    RPS "asked_rps" Count "the rate asked for, requests per second" = self.rps;
    ACHIEVED "achieved_rps" Count "answers with 2xx per second that arrived within the measured window" = t.achieved_rps();
    VERDICT "verdict" Text "met (sustained, within the target), 101-150% or >150% of the target, FAIL (under 90% of the rate answered, errors, or latency still growing at the end), generator (the generator could not send the rate)" = self.verdict.name();
    TARGET_MS "target_latency_ms" Ms "the step's latency at the target's quantile, from the scheduled send" = report.target.latency_ms(t);
    P50 "p50_ms" Ms "median latency from the scheduled send" = t.latency.p50_ms;
    P99 "p99_ms" Ms "99th percentile latency from the scheduled send" = t.latency.p99_ms;
    P999 "p999_ms" Ms "99.9th percentile latency from the scheduled send" = t.latency.p999_ms;
    MAX "max_ms" Ms "slowest request, from its scheduled send" = t.latency.max_ms;
    ERRORS "errors" Count "requests that failed: no answer, an answer outside 2xx, or none by the end of the drain" = t.errors.total();
    LATE "late_sends" Count "sends more than 1 ms after their scheduled time" = t.late_sends;
    CPU_SHARE "host_cpu_share" Ratio "the host's CPU time over the step against the CPUs it was given (1: all of them, all the time)" = e.cpu_share(config.cpus.len());
    CPU_PER_REQUEST "host_cpu_us_per_request" Us "the host's CPU time per request answered" = e.per_request(e.host_cpu_ms * 1e3);
    RUN_DELAY "run_delay_us_per_request" Us "time the host's threads waited for a CPU, runnable, per request answered (schedstat)" = e.per_request(e.run_delay_ms * 1e3);
    THROTTLED "throttled_ms" Ms "time the host's cgroup was held back by its CPU quota over the step (cpu.stat's throttled_usec, v1's throttled_time): its threads runnable, no CPU busy; empty where its cgroup has no CPU controller" = e.quota.map(|q| q.throttled_ms);
    THROTTLED_PERIODS "throttled_periods" Count "the quota's enforcement periods over the step in which the host's cgroup used its quota and waited for the next (cpu.stat's nr_throttled)" = e.quota.map(|q| q.throttled_periods);
    RAN_INSTEAD "ran_instead" Text "the three other processes that used the most CPU over the step, most first, each as command (pid, cgroup) and its CPU time (/proc/PID/stat at both ends, clock ticks): what ran while the host's threads waited for a CPU; skillprof, the generator, among them" = (!e.ran_instead.is_empty()).then(|| super::sampling::takers(&e.ran_instead));
    BUSIEST_THREAD "busiest_thread_share" Ratio "the time on a CPU of the host's busiest thread against the step's wall time (1: it never stopped running; schedstat)" = e.busiest_thread_ms / e.wall_ms.max(1e-9);
    FAULTS "faults_per_request" Ratio "the host's page faults per request answered" = e.per_request(e.faults as f64);
    TLB "tlb_shootdowns_per_request" Ratio "TLB shootdown interrupts of the machine per request answered" = e.per_request(e.tlb_shootdowns as f64);
    GENERATOR_CPU "generator_cpu_ms" Ms "CPU time of skillprof's load generator over the step" = t.generator_cpu_ms;
    GENERATOR_STEAL "generator_steal_pct" Percent "share of the generator's CPUs' time the hypervisor gave to other guests over the schedule (their /proc/stat steal): a vCPU that is not running cannot wake the generator to send; empty in experiments made before it was read" = t.generator_cpus_time.map(|time| time.steal_pct);
}

impl SloStep {
    /// steps.csv's row of this step.
    pub fn row(&self, report: &SloReport) -> Row {
        let mut row = Row::default();
        self.write_cells(report, &mut row);
        row
    }
}
