//! What the probes cost: measured with BPF stats, or modelled from probe_cost's figures.

use serde::{Deserialize, Serialize};

use super::{Mechanism, Probe};

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
    /// With stats: an empty program's runs on the scheduler's wakeups, the floor every
    /// program's count includes (the call into it and one clock read); or why it is missing.
    /// Not in `programs`, nor in the totals: it only runs to measure.
    #[serde(default)]
    pub floor: Option<CountFloor>,
    #[serde(default)]
    pub floor_error: Option<String>,
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
    pub probe: Probe,
    pub program: String,
    pub mechanism: Mechanism,
    pub runs: u64,
    pub run_ns: u64,
    pub ns_per_run: Option<f64>,
}

/// The empty program's count.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct CountFloor {
    pub runs: u64,
    pub run_ns: u64,
}

impl CountFloor {
    pub fn ns_per_run(&self) -> Option<f64> {
        (self.runs > 0).then(|| self.run_ns as f64 / self.runs as f64)
    }
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
    /// One call of the host's marker (`skillhost_mark`): the uprobe and its program.
    Mark,
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
    pub probe: Probe,
    pub mechanism: Mechanism,
    pub per: Per,
    pub events: u64,
}
