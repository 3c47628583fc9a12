//! What the probes measured and how they attached: plain data, filled in by `crate::probes`.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use skillprof_common::{Counters, SkillCounters};

/// How a program is attached to the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mechanism {
    /// fentry/fexit: BPF trampolines on kernel functions (BTF).
    Fentry,
    /// kprobe/kretprobe on kernel functions.
    Kprobe,
    /// BTF-typed raw tracepoints.
    TpBtf,
    /// A classic tracepoint, found through tracefs (`events/<category>/<name>`).
    Tracepoint,
    /// A perf software counter (not BPF): the major-fault count.
    PerfCounter,
    /// A uprobe on a function of the host (its markers).
    Uprobe,
}

/// What happened to one mechanism of a probe's plan.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Attached,
    Failed,
    /// Not tried: excluded by `--mechanism`/`--force-fallback`, or a better one attached.
    Skipped,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Attempt {
    pub mechanism: Mechanism,
    pub outcome: Outcome,
    pub detail: String,
}

/// What happened to one probe in this run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProbeStatus {
    pub probe: String,
    /// The mechanism that attached or, if none did, the last one tried.
    pub mechanism: Mechanism,
    pub attached: bool,
    /// Where it attached, or why not; a mechanism that failed before another one attached is
    /// listed too, so the cost of the fallback is visible.
    pub detail: String,
    /// Every mechanism of the plan, in plan order.
    pub attempts: Vec<Attempt>,
    /// The BPF programs that run for it (for the cost table).
    pub programs: Vec<String>,
}

/// Everything the probes attributed to one entry.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct ProbeMetrics {
    pub(crate) counters: Counters,
    /// Per probe name: the mechanism that attached (absent: not attached).
    pub(crate) attached: HashMap<String, Mechanism>,
    /// Major faults from the perf counter during the entry (`None`: no counter).
    pub majflt_perf: Option<u64>,
    /// Whether `--events` streamed (the events_* columns).
    pub(crate) streaming: bool,
    /// Per skill and phase (skills.csv); `None` when the host had no markers.
    #[serde(default)]
    pub skills: Option<Vec<SkillRow>>,
}

/// What a host thread was doing for a skill when an event happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// No marker covered it: the runtime, the allocator, background threads.
    Host,
    Compile,
    Instantiate,
    Call,
}

/// One skill's phase in one entry: what its threads did in it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SkillRow {
    /// The skill's name; `None` for the unattributed row.
    pub skill: Option<String>,
    pub phase: Phase,
    pub counts: SkillCounters,
}

/// How the teardown was bounded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TeardownSource {
    /// fentry/fexit (or kprobes) on exit_mmap.
    ExitMmap,
    /// The first and last rss_stat change of the host's mm after exit began.
    RssStat,
}

/// One part of the stop time.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StopPart {
    pub name: String,
    /// CLOCK_MONOTONIC ns at which the part starts.
    pub start_ns: u64,
    pub duration_ns: u64,
    /// Whether its end instant was observed in order (false: zero or clamped).
    pub observed: bool,
    /// One sentence for the explanation.
    pub detail: String,
}

/// The stop time cut into parts that sum to it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StopBreakdown {
    pub total_ns: u64,
    pub parts: Vec<StopPart>,
    pub teardown_source: Option<TeardownSource>,
    pub teardown_pages_freed: Option<u64>,
    pub drain_munmap_calls: u64,
    pub drain_munmap_bytes: u64,
}

/// What an entry's stacks came to: the events whose stack was walked, those whose stack
/// was lost, and those whose innermost frame has a name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackSummary {
    pub samples: u64,
    pub lost: u64,
    pub top_named: u64,
}

/// How tracefs came to be available.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tracefs {
    AlreadyMounted,
    /// Mounted by this run; it stays mounted afterwards, as if mounted by hand.
    MountedNow,
}

/// The profiler's own cost.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProbeCosts {
    /// How BPF stats were enabled. `None`: not asked for (`--self-cost` off, the default),
    /// or they could not be (see `stats_error`); `programs` is then empty.
    pub stats: Option<StatsSource>,
    pub stats_error: Option<String>,
    pub programs: Vec<ProgramCost>,
    pub total_runs: u64,
    pub total_run_ns: u64,
    pub events_streamed: bool,
    /// Events the programs put in the ring, and those that did not fit.
    pub events_sent: u64,
    pub events_lost: u64,
    /// Events written to events.csv so far.
    pub events_written: Option<u64>,
    /// What the programs logged (see [`ProbeSession::diagnostics`]).
    pub diagnostics: Vec<String>,
    /// Without stats: the estimate from the cost model, or why there is none.
    pub modelled: Option<Modelled>,
    pub model_error: Option<String>,
}

/// One BPF program's runs. `runs` counts every invocation, including the ones that return
/// after the tgid compare (e.g. the raw syscall tracepoints run for every syscall).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProgramCost {
    pub probe: String,
    pub program: String,
    pub mechanism: Mechanism,
    pub runs: u64,
    pub run_ns: u64,
    pub ns_per_run: Option<f64>,
}

/// How stats were turned on, for the cost report.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StatsSource {
    /// BPF_ENABLE_STATS fd: off again when skillprof exits, however it exits.
    EnableStatsFd,
    /// kernel.bpf_stats_enabled written, previous value restored on drop.
    Sysctl,
    /// kernel.bpf_stats_enabled was already 1; left alone.
    AlreadyOn,
}

/// What one kind of counted event costs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Per {
    /// One matching syscall, enter and exit (half a measured mmap+munmap pair).
    Syscall,
    /// One page fault of the profiled process.
    Fault,
}

/// Thread-CPU ns added per event: the median over the benchmark's rounds and its bootstrap
/// 95% interval.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Ns {
    pub median: f64,
    pub lo: f64,
    pub hi: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Term {
    pub counted: Counted,
    pub ns: Ns,
}

/// The estimate: Σ events × ns per event, with the interval carried through.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Modelled {
    pub measured_at: String,
    pub rounds: usize,
    pub terms: Vec<Term>,
    pub total_ns: Ns,
}

/// Events one probe counted over a session.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Counted {
    pub probe: String,
    pub mechanism: Mechanism,
    pub per: Per,
    pub events: u64,
}
