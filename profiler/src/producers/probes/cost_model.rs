//! The probes' cost as a model, for runs without BPF stats (the default: the stats would
//! cost more than most programs do). `cargo bench --bench probe_cost` measures what each
//! mechanism adds per matching syscall, per fault and per mark on this machine and saves it
//! here; a run multiplies the events its probes counted by those figures. An estimate, with
//! the benchmark's confidence interval carried through, never a figure of our own.

use std::{fmt, fs, io, path::Path};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::record::probes::{Counted, Mechanism, Modelled, Ns, Per, Probe, Term};
use crate::{ground::machine::Machine, ground::units};

/// Where `probe_cost` saves the model and runs look for it, unless `--cost-model` says.
pub const DEFAULT_PATH: &str = "/var/lib/skillprof/probe-cost.json";

impl Ns {
    fn times(self, events: u64) -> Ns {
        let n = events as f64;
        Ns {
            median: self.median * n,
            lo: self.lo * n,
            hi: self.hi * n,
        }
    }

    fn plus(self, other: Ns) -> Ns {
        Ns {
            median: self.median + other.median,
            lo: self.lo + other.lo,
            hi: self.hi + other.hi,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EventCost {
    pub probe: Probe,
    pub mechanism: Mechanism,
    pub per: Per,
    pub ns: Ns,
}

/// The benchmark's figures, and where they hold: this kernel on this CPU.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CostModel {
    pub kernel_release: String,
    pub cpu: String,
    pub measured_at: String,
    pub rounds: usize,
    pub costs: Vec<EventCost>,
}

impl CostModel {
    pub fn save(&self, path: &Path) -> Result<()> {
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        fs::write(path, serde_json::to_vec_pretty(self)?)
            .with_context(|| format!("writing {}", path.display()))
    }

    /// The model at `path` if it was measured on this machine's kernel and CPU; otherwise
    /// why none applies, in words for the run's head.
    pub fn load(path: &Path, machine: &Machine) -> Result<CostModel, String> {
        let text = match fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(format!(
                    "no cost model at {}: `cargo bench -p skillprof --bench probe_cost` makes \
                     one",
                    path.display()
                ));
            }
            Err(e) => return Err(format!("reading {}: {e}", path.display())),
        };
        let model: CostModel = serde_json::from_str(&text)
            .map_err(|e| format!("{} is not a cost model: {e}", path.display()))?;
        if model.kernel_release != machine.kernel_release || model.cpu != machine.brand {
            return Err(format!(
                "the cost model at {} was measured on kernel {} ({}), not this one: run \
                 probe_cost again",
                path.display(),
                model.kernel_release,
                model.cpu
            ));
        }
        Ok(model)
    }

    fn cost(&self, probe: Probe, mechanism: Mechanism, per: Per) -> Option<Ns> {
        self.costs
            .iter()
            .find(|c| c.probe == probe && c.mechanism == mechanism && c.per == per)
            .map(|c| c.ns)
    }

    /// The model applied to a session's counts; `Err` if it has no figure for a mechanism
    /// that counted events.
    pub fn apply(&self, counted: &[Counted]) -> Result<Modelled, String> {
        let mut terms = Vec::new();
        let mut total = Ns {
            median: 0.0,
            lo: 0.0,
            hi: 0.0,
        };
        for c in counted {
            let ns = self.cost(c.probe, c.mechanism, c.per).ok_or_else(|| {
                format!(
                    "the cost model has no figure for {} by {} (measured with other \
                     mechanisms, or before skillprof counted it): run probe_cost again",
                    c.probe, c.mechanism
                )
            })?;
            total = total.plus(ns.times(c.events));
            terms.push(Term {
                counted: c.clone(),
                ns,
            });
        }
        Ok(Modelled {
            measured_at: self.measured_at.clone(),
            rounds: self.rounds,
            terms,
            total_ns: total,
        })
    }
}

impl fmt::Display for Per {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Per::Syscall => "syscalls",
            Per::Fault => "faults",
            Per::Mark => "marks",
        })
    }
}

/// `12,345 syscalls (tracepoint) × 520 ns + 106,080 faults (tp_btf) × 84 ns ≈ 15 ms of CPU
/// [95% CI -3.1 ms, 28 ms] (probe_cost of …, 15 rounds)`: every output says it the same way.
impl fmt::Display for Modelled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let terms: Vec<String> = self
            .terms
            .iter()
            .map(|t| {
                format!(
                    "{} {} ({}) × {:.0} ns",
                    units::count(t.counted.events as f64),
                    t.counted.per,
                    t.counted.mechanism,
                    t.ns.median
                )
            })
            .collect();
        let ms = |ns: f64| units::ms(ns / 1e6);
        write!(
            f,
            "{} ≈ {} of CPU [95% CI {}, {}] (probe_cost's figures of {}, {} rounds)",
            terms.join(" + "),
            ms(self.total_ns.median),
            ms(self.total_ns.lo),
            ms(self.total_ns.hi),
            self.measured_at,
            self.rounds
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> CostModel {
        CostModel {
            kernel_release: "6.18".into(),
            cpu: "EPYC".into(),
            measured_at: "2026-11-24".into(),
            rounds: 15,
            costs: vec![
                EventCost {
                    probe: Probe::Syscalls,
                    mechanism: Mechanism::Tracepoint,
                    per: Per::Syscall,
                    ns: Ns {
                        median: 500.0,
                        lo: 400.0,
                        hi: 700.0,
                    },
                },
                EventCost {
                    probe: Probe::PageFaults,
                    mechanism: Mechanism::TpBtf,
                    per: Per::Fault,
                    ns: Ns {
                        median: 80.0,
                        lo: -100.0,
                        hi: 200.0,
                    },
                },
            ],
        }
    }

    fn counted(probe: Probe, mechanism: Mechanism, per: Per, events: u64) -> Counted {
        Counted {
            probe,
            mechanism,
            per,
            events,
        }
    }

    #[test]
    fn the_estimate_is_events_times_the_measured_cost_with_its_interval() {
        let modelled = model()
            .apply(&[
                counted(Probe::Syscalls, Mechanism::Tracepoint, Per::Syscall, 1_000),
                counted(Probe::PageFaults, Mechanism::TpBtf, Per::Fault, 10_000),
            ])
            .unwrap();
        assert_eq!(modelled.total_ns.median, 500_000.0 + 800_000.0);
        assert_eq!(modelled.total_ns.lo, 400_000.0 - 1_000_000.0);
        assert_eq!(modelled.total_ns.hi, 700_000.0 + 2_000_000.0);
    }

    #[test]
    fn a_mechanism_the_model_did_not_measure_is_refused() {
        let err = model()
            .apply(&[counted(Probe::Syscalls, Mechanism::Fentry, Per::Syscall, 1)])
            .unwrap_err();
        assert!(err.contains("syscalls by fentry"), "{err}");
    }
}
