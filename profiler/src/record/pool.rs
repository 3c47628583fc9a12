//! The pooling allocator experiment (`skillprof pool`): every configuration's runs of one
//! workload, round by round, each run's figures taken from its entries. pool.json is this
//! record; the table, the advice and the summary are views of it.

use serde::{Deserialize, Serialize};

/// What the experiment is asked to find.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Goal {
    /// The least host CPU per request (the most requests per second a CPU serves), within
    /// `--memory` if given.
    Cpu,
    /// The least peak RSS, within `--p99-ms` if given.
    Memory,
}

impl Goal {
    /// The figure it optimises, an index of [`FIGURES`].
    pub fn figure(self) -> usize {
        match self {
            Goal::Cpu => CPU,
            Goal::Memory => RSS_PEAK,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PoolExperiment {
    /// The cmds file every run ran.
    pub workload: String,
    pub rounds: u32,
    /// The seed of the rounds' orders.
    pub seed: u64,
    pub goal: Goal,
    /// `--memory`: the most peak RSS the goal `cpu` accepts, in KiB.
    pub memory_within_kb: Option<u64>,
    /// `--p99-ms`: the slowest p99 execute latency of any entry the goal `memory` accepts.
    pub p99_within_ms: Option<f64>,
    /// The host flags every run had, before its configuration's.
    pub common_flags: Vec<String>,
    /// The machine the figures are from.
    pub cpus: usize,
    pub kernel: String,
    pub configs: Vec<PoolConfig>,
    /// Every run of every round ran (interrupted or failed runs leave it false).
    pub complete: bool,
}

/// The configuration ratios are taken against: pooling at skillhost's defaults.
pub const BASE: usize = 1;
/// The base run again in every round: the smallest difference the machine's noise lets the
/// experiment see.
pub const CONTROL: usize = 2;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PoolConfig {
    /// `on-demand`, `pooling`, `pooling (control)`, or the grid's knobs (`keep-resident=1M
    /// decommit-batch=8`).
    pub name: String,
    /// The knobs the grid set, by name, as the user wrote their values.
    pub knobs: Vec<(String, String)>,
    /// skillhost's flags for it.
    pub flags: Vec<String>,
    /// What skillhost's `--check-config` reserved for the engine, in bytes.
    pub reserved_bytes: Option<u64>,
    pub runs: Vec<PoolRun>,
}

impl PoolConfig {
    pub fn is_pooling(&self) -> bool {
        !self.flags.windows(2).any(|pair| pair == ["--allocator", "on-demand"])
    }

    /// The runs that measured something.
    pub fn measured(&self) -> impl Iterator<Item = (u32, &RunFigures)> {
        self.runs
            .iter()
            .filter_map(|run| Some((run.round, run.figures.as_ref()?)))
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PoolRun {
    pub round: u32,
    /// Its place in the round's order, from 0.
    pub position: usize,
    /// The run folder.
    pub folder: String,
    pub seconds: f64,
    /// `None` when the run failed.
    pub figures: Option<RunFigures>,
    /// Why it failed, in the run's own words.
    pub failed: Option<String>,
}

/// One run's figures, summed over the entries that executed skills (the workload's, not the
/// adds and the stop). Counts that need probes are `None` without them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunFigures {
    pub executions: u64,
    pub request_errors: u64,
    pub host_cpu_ms: f64,
    pub wall_ms: f64,
    /// The host's own split of each request (Server-Timing), summed.
    pub instantiate_ms: Option<f64>,
    pub call_ms: Option<f64>,
    /// CPU the host's threads spent instantiating and calling (its ledger), summed.
    pub instantiate_cpu_ms: Option<f64>,
    pub call_cpu_ms: Option<f64>,
    /// The share of the host's sampled CPU that was in the kernel (the time profile).
    pub kernel_pct: Option<f64>,
    /// The slowest p99 execute latency of the entries.
    pub p99_ms: Option<f64>,
    pub minflt: u64,
    pub mmap_calls: Option<u64>,
    pub munmap_calls: Option<u64>,
    pub mprotect_calls: Option<u64>,
    pub madvise_calls: Option<u64>,
    pub madvise_bytes: Option<u64>,
    pub process_madvise_calls: Option<u64>,
    pub tlb_shootdowns: Option<u64>,
    /// The most RSS of any entry, and at the last one's end.
    pub rss_peak_kb: Option<u64>,
    pub rss_end_kb: u64,
    /// Address space at the last entry's end.
    pub vms_kb: u64,
    pub maps_peak: Option<u64>,
    /// Resident bytes the pool's warm slots held at the last entry's end.
    pub warm_resident_kb: Option<u64>,
}

/// A figure of the table: its name, unit and meaning, and how a run gives it. A new figure is
/// one line here.
pub struct Figure {
    pub name: &'static str,
    pub unit: &'static str,
    pub help: &'static str,
    pub value: fn(&RunFigures) -> Option<f64>,
}

fn per_request(figures: &RunFigures, total: Option<f64>) -> Option<f64> {
    (figures.executions > 0).then(|| total.map(|total| total / figures.executions as f64))?
}

fn count(value: Option<u64>) -> Option<f64> {
    value.map(|value| value as f64)
}

pub const CPU: usize = 0;
pub const RSS_PEAK: usize = 4;

pub const FIGURES: &[Figure] = &[
    Figure {
        name: "host CPU per request",
        unit: "µs",
        help: "the host's CPU time (utime + stime) over the workload's entries, per execution",
        value: |f| per_request(f, Some(f.host_cpu_ms * 1e3)),
    },
    Figure {
        name: "instantiate CPU per request",
        unit: "µs",
        help: "CPU the host's threads spent instantiating (its ledger)",
        value: |f| per_request(f, f.instantiate_cpu_ms.map(|ms| ms * 1e3)),
    },
    Figure {
        name: "call CPU per request",
        unit: "µs",
        help: "CPU the host's threads spent in the skill's call (its ledger)",
        value: |f| per_request(f, f.call_cpu_ms.map(|ms| ms * 1e3)),
    },
    Figure {
        name: "other CPU per request",
        unit: "µs",
        help: "host CPU outside instantiate and call: the instance's drop and its slot's reset, HTTP, the runtime",
        value: |f| {
            let marked = f.instantiate_cpu_ms? + f.call_cpu_ms?;
            per_request(f, Some((f.host_cpu_ms - marked).max(0.0) * 1e3))
        },
    },
    Figure {
        name: "RSS peak",
        unit: "MiB",
        help: "the most RSS of any entry (the kernel's high-water mark)",
        value: |f| f.rss_peak_kb.map(|kb| kb as f64 / 1024.0),
    },
    Figure {
        name: "wall per request",
        unit: "µs",
        help: "the workload entries' wall time per execution",
        value: |f| per_request(f, Some(f.wall_ms * 1e3)),
    },
    Figure {
        name: "kernel share of CPU",
        unit: "%",
        help: "of the host's sampled CPU, the part in the kernel (the time profile)",
        value: |f| f.kernel_pct,
    },
    Figure {
        name: "page faults per request",
        unit: "faults",
        help: "the host's minor faults per execution",
        value: |f| per_request(f, Some(f.minflt as f64)),
    },
    Figure {
        name: "mmap per request",
        unit: "calls",
        help: "mmap calls per execution (probes)",
        value: |f| per_request(f, count(f.mmap_calls)),
    },
    Figure {
        name: "mprotect per request",
        unit: "calls",
        help: "mprotect calls per execution: on demand, each instance's memory made accessible",
        value: |f| per_request(f, count(f.mprotect_calls)),
    },
    Figure {
        name: "munmap per request",
        unit: "calls",
        help: "munmap calls per execution",
        value: |f| per_request(f, count(f.munmap_calls)),
    },
    Figure {
        name: "madvise per request",
        unit: "calls",
        help: "madvise calls per execution: the pool's decommits and resets",
        value: |f| per_request(f, count(f.madvise_calls)),
    },
    Figure {
        name: "madvise bytes per request",
        unit: "KiB",
        help: "bytes madvise was given per execution",
        value: |f| per_request(f, f.madvise_bytes.map(|b| b as f64 / 1024.0)),
    },
    Figure {
        name: "process_madvise per request",
        unit: "calls",
        help: "batched decommits (decommit batch above 1) per execution",
        value: |f| per_request(f, count(f.process_madvise_calls)),
    },
    Figure {
        name: "TLB shootdowns per request",
        unit: "IPIs",
        help: "the machine's TLB shootdown interrupts per execution (/proc/interrupts)",
        value: |f| per_request(f, count(f.tlb_shootdowns)),
    },
    Figure {
        name: "RSS at the end",
        unit: "MiB",
        help: "RSS after the last workload entry",
        value: |f| Some(f.rss_end_kb as f64 / 1024.0),
    },
    Figure {
        name: "warm slots resident",
        unit: "MiB",
        help: "bytes the pool's unused warm slots still held resident at the end (skillhost's metrics)",
        value: |f| f.warm_resident_kb.map(|kb| kb as f64 / 1024.0),
    },
    Figure {
        name: "address space",
        unit: "GiB",
        help: "the host's virtual size at the end (VmSize)",
        value: |f| Some(f.vms_kb as f64 / (1 << 20) as f64),
    },
    Figure {
        name: "mappings",
        unit: "maps",
        help: "most memory mappings the host held (against vm.max_map_count)",
        value: |f| count(f.maps_peak),
    },
];
