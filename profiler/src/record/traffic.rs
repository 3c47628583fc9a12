//! Traffic at a rate (`o_execute`, `c_execute`): what one step of load asked of the host and
//! what the host gave, measured by skillprof's own generator.
//!
//! Open loop: requests are sent on a schedule, and each one's latency counts from its
//! scheduled send, so a host that stalls is charged for every request it kept waiting (the
//! correction for coordinated omission that wrk2 and oha's `--latency-correction` make).
//! Closed loop: N senders, each sending again when answered (`hey -c N`): its latency counts
//! from the actual send, and a stall hides behind the senders it blocks.

use serde::{Deserialize, Serialize};

use super::field::{Row, fields};
use super::sampling::CpuShare;

/// How a step's requests were sent.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Load {
    /// At `rps` requests per second, whatever the host answers.
    Open { rps: u32, arrivals: Arrivals },
    /// `concurrency` senders, each waiting for its answer.
    Closed { concurrency: u32 },
}

/// The spacing of an open loop's sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arrivals {
    /// Every 1/rate seconds.
    Constant,
    /// Exponentially distributed gaps of mean 1/rate (a Poisson process, as independent
    /// clients make).
    Poisson,
}

impl Arrivals {
    pub fn name(self) -> &'static str {
        match self {
            Arrivals::Constant => "constant",
            Arrivals::Poisson => "poisson",
        }
    }
}

/// Latency percentiles of a step's measured requests, in milliseconds (from HDR histograms
/// of microsecond resolution).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

/// Failed requests of a step, by why.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrafficErrors {
    /// No HTTP answer: the connection failed or broke.
    pub transport: u64,
    /// Answered outside 2xx.
    pub status: u64,
    /// Still unanswered when the step's drain time ran out.
    pub unanswered: u64,
}

impl TrafficErrors {
    pub fn total(&self) -> u64 {
        self.transport + self.status + self.unanswered
    }
}

/// One step of traffic.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrafficStep {
    pub skill: String,
    pub load: Load,
    /// The measured window, after the warm-up.
    pub measured_s: f64,
    /// The warm-up, whose requests are sent and not measured.
    pub warmup_s: f64,
    /// Requests sent in the measured window (scheduled in it, for an open loop).
    pub sent: u64,
    /// Of those, answered with 2xx (during the step or its drain).
    pub ok: u64,
    /// Answers with 2xx that arrived within the measured window, whenever their requests
    /// were sent: the throughput the host delivered.
    #[serde(default)]
    pub delivered: u64,
    /// Every answer of the step, warm-up and drain included.
    #[serde(default)]
    pub answered_all: u64,
    /// The answers that arrived before the schedule's end (warm-up included, the drain left
    /// out): the work the host did while it was sent load.
    #[serde(default)]
    pub answered_by_end: u64,
    pub errors: TrafficErrors,
    /// Requests sent more than a millisecond after their scheduled time (open loop): the
    /// generator could not keep its schedule.
    pub late_sends: u64,
    /// 99th percentile of the send lag (actual send - scheduled send), ms.
    pub send_lag_p99_ms: f64,
    /// From the scheduled send (open loop) or the actual send (closed loop) to the answer.
    pub latency: Percentiles,
    /// From the actual send to the answer: the host's service time as the client saw it.
    pub service: Percentiles,
    /// The median latency of the window's first and last fifths: a queue still growing at
    /// the step's end shows as a last fifth far above the first.
    pub first_fifth_p50_ms: f64,
    pub last_fifth_p50_ms: f64,
    /// CPU time of the generator's threads over the step, and the CPUs it ran on (a list,
    /// or [`UNPINNED`]).
    pub generator_cpu_ms: f64,
    pub generator_cpus: String,
    /// The generator's CPUs from its schedule's start to its end (their /proc/stat lines; every
    /// CPU's where it was not pinned): a thread that sleeps until each send is late when its
    /// CPU is not there to wake it, taken by the hypervisor (steal) or by interrupts. `None`
    /// in steps recorded before they were read.
    #[serde(default)]
    pub generator_cpus_time: Option<CpuShare>,
    /// The stall the latency's tail came from, where it came from one.
    #[serde(default)]
    pub stall: Option<Stall>,
}

/// One stall of a step: the requests at or above its 99th percentile, most of them
/// scheduled in one run ([`Stall::tail_share`]), from `begins_ms` (from the measured
/// window's start) for `lasted_ms` (until the last of them was answered).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Stall {
    pub begins_ms: f64,
    pub lasted_ms: f64,
    /// The share of the tail scheduled in it.
    pub tail_share: f64,
    /// The measured requests scheduled in it.
    pub requests: u64,
    /// Its beginning on CLOCK_MONOTONIC (ns), the kernel's programs' clock.
    pub begins_at_ns: u64,
    /// How far its beginning may be off, ms: it began between the send before its first
    /// delayed request and that request's own, and is put halfway.
    #[serde(default)]
    pub give_or_take_ms: f64,
}

/// Late sends that one preemption of the generator's thread makes in a step of a few
/// seconds at a low rate: at 50/s a 2 s step sends 80 requests in its measured window, so
/// one late send would be over 1%, though it says nothing of whether the generator can send
/// the rate (and its request's latency still counts from its scheduled send).
const ONE_HICCUP: u64 = 2;

/// How [`TrafficStep::unsustained`] begins when the generator could not hold its schedule.
pub const GENERATOR_LATE: &str = "the generator could not hold its schedule";

/// `generator_cpus` of a generator that was not pinned: it ran on any CPU, the host's too.
pub const UNPINNED: &str = "any";

impl TrafficStep {
    /// The generator was not pinned, so it may have run on the host's CPUs.
    pub fn generator_unpinned(&self) -> bool {
        self.generator_cpus == UNPINNED
    }

    /// The rate the step asked for, for an open loop.
    pub fn asked_rps(&self) -> Option<f64> {
        match self.load {
            Load::Open { rps, .. } => Some(f64::from(rps)),
            Load::Closed { .. } => None,
        }
    }

    /// Answers per second within the measured window: what the host delivered, not what
    /// it caught up on after the step.
    pub fn achieved_rps(&self) -> f64 {
        self.delivered as f64 / self.measured_s.max(1e-9)
    }

    /// Why the generator could not hold its schedule, if it could not: then the step is no
    /// measure of the host's limit. Late sends beyond 1% of the requests and beyond
    /// [`ONE_HICCUP`] (with what took the generator's CPUs, where that was 1% of their time
    /// or more), or a generator busy for more than 90% of one CPU.
    pub fn generator_limited(&self) -> Option<String> {
        let busy = self.generator_cpu_ms / ((self.measured_s + self.warmup_s) * 1e3);
        if self.asked_rps().is_some()
            && self.late_sends * 100 > self.sent.max(1)
            && self.late_sends > ONE_HICCUP
        {
            return Some(format!(
                "{} of {} sends were more than 1 ms late (send lag p99 {:.2} ms){}",
                self.late_sends,
                self.sent,
                self.send_lag_p99_ms,
                self.generator_cpus_taken()
                    .map(|taken| format!("; of the generator's CPU time, {taken}"))
                    .unwrap_or_default()
            ));
        }
        (busy > 0.9).then(|| {
            format!(
                "the generator was busy {:.0}% of a CPU ({} ms of CPU)",
                busy * 100.0,
                self.generator_cpu_ms.round()
            )
        })
    }

    /// What took the generator's CPUs from every task, where it took 1% of their time or
    /// more: "7% went to the hypervisor (steal)". The scheduler thread runs at real-time
    /// priority, so no task of this machine delays its wake; these can.
    fn generator_cpus_taken(&self) -> Option<String> {
        let share = self.generator_cpus_time?;
        let interrupts = share.irq_pct.unwrap_or(0.0) + share.softirq_pct.unwrap_or(0.0);
        let taken: Vec<String> = [
            (share.steal_pct, "went to the hypervisor (steal)"),
            (interrupts, "to interrupts and softirqs"),
        ]
        .into_iter()
        .filter(|(pct, _)| *pct >= 1.0)
        .map(|(pct, what)| format!("{pct:.0}% {what}"))
        .collect();
        (!taken.is_empty()).then(|| taken.join(", "))
    }

    /// Why the step was not sustained, in words, latency aside: the generator could not hold
    /// its schedule, under 90% of the asked rate was answered, requests failed, or the
    /// latency was still growing at the end. `None` for a step the host kept up with.
    pub fn unsustained(&self) -> Option<String> {
        if let Some(why) = self.generator_limited() {
            return Some(format!("{GENERATOR_LATE}: {why}"));
        }
        if let Some(asked) = self
            .asked_rps()
            .filter(|&asked| self.achieved_rps() < 0.9 * asked)
        {
            return Some(format!(
                "{:.0} of the {asked:.0} asked per second answered, under 90%",
                self.achieved_rps()
            ));
        }
        if self.errors.total() > 0 {
            return Some(format!(
                "{} of {} requests failed",
                self.errors.total(),
                self.sent
            ));
        }
        self.still_growing().then(|| {
            format!(
                "the latency was still growing at the end (median {:.2} ms in the first fifth, \
                 {:.2} ms in the last)",
                self.first_fifth_p50_ms, self.last_fifth_p50_ms
            )
        })
    }

    /// Whether the latency was still climbing when the step ended: the host fell behind and
    /// its queue grew (a last fifth's median over twice the first's, and over 1 ms more).
    pub fn still_growing(&self) -> bool {
        self.last_fifth_p50_ms > 2.0 * self.first_fifth_p50_ms
            && self.last_fifth_p50_ms > self.first_fifth_p50_ms + 1.0
    }
}

fields! {
    impl TrafficStep: pub fn write_cells(step: Option<&TrafficStep>, row: &mut Row) -> row {
        let open = step.filter(|s| s.asked_rps().is_some());
    }
    LOAD "traffic_load" Text "o_execute/c_execute only: open at RATE (constant or poisson arrivals), or closed with N senders" = step.map(TrafficStep::load_text);
    ASKED "traffic_asked_rps" Count "open loop: the rate asked for, requests per second" = step.and_then(TrafficStep::asked_rps);
    ACHIEVED "traffic_achieved_rps" Count "answers with 2xx per second that arrived within the measured window (the warm-up and the drain after the step left out): what the host delivered" = step.map(TrafficStep::achieved_rps);
    SENT "traffic_sent" Count "requests sent in the measured window (open loop: scheduled in it)" = step.map(|s| s.sent);
    ERRORS "traffic_errors" Count "of those, failed: no answer (transport), an answer outside 2xx, or none by the end of the drain" = step.map(|s| s.errors.total());
    ERRORS_STATUS "traffic_errors_status" Count "failed with an answer outside 2xx" = step.map(|s| s.errors.status);
    LATE "traffic_late_sends" Count "open loop: requests sent more than 1 ms after their scheduled time (the generator fell behind its schedule)" = open.map(|s| s.late_sends);
    LAG_P99 "traffic_send_lag_p99_ms" Ms "open loop: 99th percentile of the send lag, actual send - scheduled send" = open.map(|s| s.send_lag_p99_ms);
    P50 "traffic_p50_ms" Ms "median latency: open loop from each request's scheduled send (a stall counts for every request it delayed), closed loop from its send" = step.map(|s| s.latency.p50_ms);
    P90 "traffic_p90_ms" Ms "90th percentile latency, as traffic_p50_ms" = step.map(|s| s.latency.p90_ms);
    P99 "traffic_p99_ms" Ms "99th percentile latency, as traffic_p50_ms" = step.map(|s| s.latency.p99_ms);
    P999 "traffic_p999_ms" Ms "99.9th percentile latency, as traffic_p50_ms" = step.map(|s| s.latency.p999_ms);
    MAX "traffic_max_ms" Ms "slowest request, as traffic_p50_ms" = step.map(|s| s.latency.max_ms);
    SERVICE_P99 "traffic_service_p99_ms" Ms "99th percentile from the actual send to the answer" = step.map(|s| s.service.p99_ms);
    GENERATOR_CPU "traffic_generator_cpu_ms" Ms "CPU time of skillprof's load generator over the step" = step.map(|s| s.generator_cpu_ms);
    GENERATOR_STEAL "traffic_generator_steal_pct" Percent "share of the generator's CPUs' time the hypervisor gave to other guests over the schedule (their /proc/stat steal): a vCPU that is not running cannot wake the generator to send" = step.and_then(|s| s.generator_cpus_time).map(|t| t.steal_pct);
}

impl TrafficStep {
    /// How the load column says it.
    pub fn load_text(&self) -> String {
        match self.load {
            Load::Open { rps, arrivals } => format!("open {rps}/s {}", arrivals.name()),
            Load::Closed { concurrency } => format!("closed {concurrency}"),
        }
    }
}
