//! The pooling allocator experiment (`skillprof pool`): every configuration's runs of one
//! workload, round by round, each run's figures taken from its entries. pool.json is this
//! record; the table, the advice and the summary are views of it.

use serde::{Deserialize, Serialize};

use super::probes::Phase;
use super::traffic::TrafficStep;
use super::{EntryRecord, Value};

/// What the experiment is asked to find.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Goal {
    /// The least host CPU per request (the most requests per second a CPU serves), within
    /// `--memory` if given.
    Cpu,
    /// The least peak RSS, within `--p99-ms` if given.
    Memory,
    /// The most requests per second within `--p99-ms`: the highest of the workload's
    /// `o_execute` rates that a configuration sustained within it, within `--memory` if given.
    Peak,
}

impl Goal {
    /// The figure it optimises, an index of [`FIGURES`].
    pub fn figure(self) -> usize {
        match self {
            Goal::Cpu => CPU,
            Goal::Memory => RSS_PEAK,
            Goal::Peak => PEAK,
        }
    }

    /// Its figure is better higher (a rate), not lower (CPU, bytes).
    pub fn maximises(self) -> bool {
        self == Goal::Peak
    }

    /// The figure it trades against, which tells apart configurations tied in its own.
    pub fn other_figure(self) -> usize {
        match self {
            Goal::Cpu | Goal::Peak => RSS_PEAK,
            Goal::Memory => CPU,
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
    /// `--memory`: the most peak RSS the goals `cpu` and `peak` accept, in KiB.
    pub memory_within_kb: Option<u64>,
    /// `--p99-ms`: the slowest p99 execute latency of any entry the goal `memory` accepts,
    /// and the target the goal `peak`'s rates are held to.
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

/// The first configuration's name: the host's on-demand allocator.
pub const ON_DEMAND: &str = "on-demand";
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
    /// The host's environment for it (a host whose profile switches pooling by a variable).
    #[serde(default)]
    pub env: Vec<(String, String)>,
    /// What skillhost's `--check-config` reserved for the engine, in bytes.
    pub reserved_bytes: Option<u64>,
    pub runs: Vec<PoolRun>,
}

impl PoolConfig {
    pub fn is_pooling(&self) -> bool {
        self.name != ON_DEMAND
    }

    /// What sets it on the host: its flags and its environment, as a shell reads them.
    pub fn setting(&self) -> String {
        self.env
            .iter()
            .map(|(key, value)| format!("{key}={value}"))
            .chain(self.flags.iter().cloned())
            .collect::<Vec<_>>()
            .join(" ")
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
    /// CPU the host's threads spent instantiating, calling and resetting (dropping the
    /// request's store: unmapping its memories, or resetting its pool slots), from its ledger,
    /// summed.
    pub instantiate_cpu_ms: Option<f64>,
    pub call_cpu_ms: Option<f64>,
    pub reset_cpu_ms: Option<f64>,
    /// The share of the host's sampled CPU that was in the kernel (the time profile), and the
    /// same within each phase.
    pub kernel_pct: Option<f64>,
    pub instantiate_kernel_pct: Option<f64>,
    pub call_kernel_pct: Option<f64>,
    pub reset_kernel_pct: Option<f64>,
    /// The slowest median and p99 execute latency of the entries (an `o_execute` step's
    /// from its scheduled sends).
    #[serde(default)]
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    /// The workload's traffic at a rate (`o_execute`), step by step.
    #[serde(default)]
    pub rates: Vec<RateStep>,
    /// The highest of those rates sustained within `--p99-ms` (0 when none was): set by the
    /// experiment, which knows the target.
    #[serde(default)]
    pub peak_rps: Option<f64>,
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

/// One step of traffic at a rate, as the experiment weighs it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RateStep {
    pub asked_rps: f64,
    /// Answered within the measured window, per second.
    pub achieved_rps: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// At least 90% of the rate answered, no errors, no queue still growing at the end, and
    /// a generator that kept its schedule ([`TrafficStep::unsustained`]).
    pub sustained: bool,
    /// Why the step was not sustained, in words ([`TrafficStep::unsustained`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsustained: Option<String>,
}

impl RateStep {
    fn of(step: &TrafficStep) -> Option<RateStep> {
        let unsustained = step.unsustained();
        Some(RateStep {
            asked_rps: step.asked_rps()?,
            achieved_rps: step.achieved_rps(),
            p50_ms: step.latency.p50_ms,
            p99_ms: step.latency.p99_ms,
            sustained: unsustained.is_none(),
            unsustained,
        })
    }
}

impl RunFigures {
    /// The highest rate sustained with its p99 within `p99_ms`; 0 when none was, `None`
    /// for a workload without rates.
    pub fn peak_within(&self, p99_ms: f64) -> Option<f64> {
        (!self.rates.is_empty()).then(|| {
            self.rates
                .iter()
                .filter(|step| step.sustained && step.p99_ms <= p99_ms)
                .map(|step| step.asked_rps)
                .fold(0.0, f64::max)
        })
    }

    /// The workload's entries (those that executed skills without compiling one) summed, read
    /// through their commands.csv row, the record's one view of every column.
    pub fn of(records: &[EntryRecord]) -> RunFigures {
        let mut figures = RunFigures::default();
        let workload: Vec<&EntryRecord> = records
            .iter()
            .filter(|record| {
                !record.measure.outcome.latencies.is_empty()
                    || record.measure.outcome.traffic.is_some()
            })
            // A skill's first request compiles it: seconds of Cranelift that no allocator setting
            // changes, and that would drown what they do.
            .filter(|record| record.host.is_none_or(|host| host.compilations == 0))
            .collect();
        let mut sums = Sums::default();
        for record in &workload {
            let row = record.row();
            let number = |name: &str| row.get(name).and_then(Value::number);
            let measure = &record.measure;
            figures.executions += measure.outcome.latencies.len() as u64;
            if let Some(step) = &measure.outcome.traffic {
                // The host served the warm-up and the drain in the entry's CPU too.
                figures.executions += step.answered_all;
                figures.rates.extend(RateStep::of(step));
                worst(&mut figures.p50_ms, step.latency.p50_ms);
                worst(&mut figures.p99_ms, step.latency.p99_ms);
            }
            figures.request_errors += measure.outcome.errors;
            figures.host_cpu_ms += measure.host_cpu_ms().unwrap_or(0.0);
            figures.wall_ms += measure.took_ms();
            figures.minflt += measure.faults().map_or(0, |(minor, _)| minor);
            if let Some((instantiate, call)) = measure.outcome.host_split_ms() {
                add(&mut figures.instantiate_ms, instantiate);
                add(&mut figures.call_ms, call);
            }
            if let Some(rows) = record.probes.as_ref().and_then(|p| p.skills.as_ref()) {
                for phase_row in rows {
                    let cpu_ms = phase_row.counts.task.cpu_ns as f64 / 1e6;
                    let (cpu, kernel) = match phase_row.phase {
                        Phase::Instantiate => {
                            (&mut figures.instantiate_cpu_ms, &mut sums.instantiate)
                        }
                        Phase::Call => (&mut figures.call_cpu_ms, &mut sums.call),
                        Phase::Reset => (&mut figures.reset_cpu_ms, &mut sums.reset),
                        Phase::Host | Phase::Compile => continue,
                    };
                    add(cpu, cpu_ms);
                    if let Some(time) = &phase_row.time {
                        kernel.0 += time.kernel;
                        kernel.1 += time.samples;
                    }
                }
            }
            if let (Some(pct), Some(samples)) = (number("cpu_kernel_pct"), number("cpu_samples")) {
                sums.kernel_samples += pct / 100.0 * samples;
                sums.samples += samples;
            }
            if let Some(latency) = measure.latency() {
                worst(&mut figures.p50_ms, latency.p50_ms);
                worst(&mut figures.p99_ms, latency.p99_ms);
            }
            for (field, column) in [
                (&mut figures.mmap_calls, "mmap_calls"),
                (&mut figures.munmap_calls, "munmap_calls"),
                (&mut figures.mprotect_calls, "mprotect_calls"),
                (&mut figures.madvise_calls, "madvise_calls"),
                (&mut figures.madvise_bytes, "madvise_bytes"),
                (&mut figures.process_madvise_calls, "process_madvise_calls"),
                (&mut figures.tlb_shootdowns, "tlb_shootdowns"),
            ] {
                if let Some(value) = number(column) {
                    *field.get_or_insert(0) += value as u64;
                }
            }
            figures.rss_peak_kb = figures.rss_peak_kb.max(record.sampling.rss_peak_kb);
            figures.maps_peak = figures.maps_peak.max(record.sampling.handles.maps_peak);
        }
        if let Some(last) = workload.last() {
            figures.rss_end_kb = last.measure.rss_after_kb();
            figures.vms_kb = last.measure.process().vms_after_kb();
            figures.warm_resident_kb = last
                .host
                .and_then(|host| host.pool_warm_resident_bytes)
                .map(|bytes| bytes / 1024);
        }
        figures.kernel_pct =
            (sums.samples > 0.0).then(|| sums.kernel_samples / sums.samples * 100.0);
        figures.instantiate_kernel_pct = share(sums.instantiate);
        figures.call_kernel_pct = share(sums.call);
        figures.reset_kernel_pct = share(sums.reset);
        figures
    }
}

#[derive(Default)]
struct Sums {
    kernel_samples: f64,
    samples: f64,
    /// Each phase's (kernel, all) samples.
    instantiate: (u64, u64),
    call: (u64, u64),
    reset: (u64, u64),
}

fn share((kernel, samples): (u64, u64)) -> Option<f64> {
    (samples > 0).then(|| 100.0 * kernel as f64 / samples as f64)
}

fn add(total: &mut Option<f64>, value: f64) {
    *total.get_or_insert(0.0) += value;
}

fn worst(slowest: &mut Option<f64>, value: f64) {
    *slowest = Some(slowest.map_or(value, |slowest| slowest.max(value)));
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
pub const RSS_PEAK: usize = 5;
pub const PEAK: usize = 6;

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
        name: "reset CPU per request",
        unit: "µs",
        help: "CPU the host's threads spent dropping the request's store (its ledger): on demand unmapping the instance's memories, pooled resetting its slots and giving them back",
        value: |f| per_request(f, f.reset_cpu_ms.map(|ms| ms * 1e3)),
    },
    Figure {
        name: "other CPU per request",
        unit: "µs",
        help: "host CPU outside the request's phases: HTTP, the async runtime, the pool's batched decommits on a thread of their own",
        value: |f| {
            let marked = f.instantiate_cpu_ms? + f.call_cpu_ms? + f.reset_cpu_ms.unwrap_or(0.0);
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
        name: "peak within the target",
        unit: "req/s",
        help: "the highest of the workload's o_execute rates sustained (90% answered, no errors, no growing queue) with p99 within --p99-ms",
        value: |f| f.peak_rps,
    },
    Figure {
        name: "p50 latency",
        unit: "ms",
        help: "the slowest median execute latency of the workload's entries (an o_execute step's from its scheduled sends)",
        value: |f| f.p50_ms,
    },
    Figure {
        name: "p99 latency",
        unit: "ms",
        help: "the slowest p99 execute latency of the workload's entries",
        value: |f| f.p99_ms,
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
        name: "kernel share of instantiate",
        unit: "%",
        help: "of the CPU sampled while instantiating, the part in the kernel",
        value: |f| f.instantiate_kernel_pct,
    },
    Figure {
        name: "kernel share of call",
        unit: "%",
        help: "of the CPU sampled in the skill's call, the part in the kernel",
        value: |f| f.call_kernel_pct,
    },
    Figure {
        name: "kernel share of reset",
        unit: "%",
        help: "of the CPU sampled while resetting, the part in the kernel",
        value: |f| f.reset_kernel_pct,
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
