//! The attach plan: which probes exist and, for each, the mechanisms to try in order.
//!
//! Mechanisms differ by kernel: on the machines skillprof runs on, fentry loads fail with
//! EPERM and kprobes are not configured, while tracepoints and tp_btf work. So a probe lists
//! every mechanism that can observe its event, cheapest first, and the first that attaches
//! wins. The outcome is a [`ProbeStatus`], never a silent fallback.

use anyhow::Context as _;
use aya::{Ebpf, programs::TracePoint};
use serde::Serialize;

use super::tracefs::{self, Tracefs};

/// How a program is attached to the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mechanism {
    /// A classic tracepoint, found through tracefs (`events/<category>/<name>`).
    Tracepoint,
}

impl Mechanism {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Tracepoint => "tracepoint",
        }
    }
}

/// One way to attach a probe: a program in the BPF object and where it goes.
#[derive(Debug)]
pub enum Attach {
    Tracepoint {
        program: &'static str,
        category: &'static str,
        name: &'static str,
    },
}

impl Attach {
    pub fn mechanism(&self) -> Mechanism {
        match self {
            Self::Tracepoint { .. } => Mechanism::Tracepoint,
        }
    }
}

/// A kernel event skillprof observes, with its attach plan.
#[derive(Debug)]
pub struct Probe {
    pub name: &'static str,
    /// Mechanisms to try, best first. Never empty.
    pub plan: &'static [Attach],
}

pub const PROBES: &[Probe] = &[Probe {
    name: "mmap",
    plan: &[Attach::Tracepoint {
        program: "sys_enter_mmap",
        category: "syscalls",
        name: "sys_enter_mmap",
    }],
}];

/// What happened to one probe in this run.
#[derive(Clone, Debug, Serialize)]
pub struct ProbeStatus {
    pub probe: &'static str,
    /// The mechanism that attached or, if none did, the last one tried.
    pub mechanism: Mechanism,
    pub attached: bool,
    /// Where it attached, or why not; a mechanism that failed before another one attached is
    /// listed too, so the cost of the fallback is visible.
    pub detail: String,
}

/// Attaches probes, mounting tracefs the first time a classic tracepoint needs it.
#[derive(Default)]
pub struct Attacher {
    tracefs: Option<Result<Tracefs, String>>,
}

impl Attacher {
    /// What was done about tracefs, if any probe needed it.
    pub fn tracefs(&self) -> Option<Tracefs> {
        self.tracefs.clone().and_then(Result::ok)
    }

    pub fn attach(&mut self, ebpf: &mut Ebpf, probe: &Probe) -> ProbeStatus {
        let mut failures = Vec::new();
        for how in probe.plan {
            let mechanism = how.mechanism();
            match self.try_attach(ebpf, how) {
                Ok(place) => {
                    let detail = std::iter::once(place).chain(failures).collect::<Vec<_>>();
                    return ProbeStatus {
                        probe: probe.name,
                        mechanism,
                        attached: true,
                        detail: detail.join("; "),
                    };
                }
                Err(why) => failures.push(format!("{} failed: {why:#}", mechanism.as_str())),
            }
        }
        ProbeStatus {
            probe: probe.name,
            mechanism: probe
                .plan
                .last()
                .expect("attach plans are never empty")
                .mechanism(),
            attached: false,
            detail: failures.join("; "),
        }
    }

    /// Loads and attaches one program; returns where it attached.
    fn try_attach(&mut self, ebpf: &mut Ebpf, how: &Attach) -> anyhow::Result<String> {
        match *how {
            Attach::Tracepoint {
                program,
                category,
                name,
            } => {
                self.tracefs
                    .get_or_insert_with(tracefs::ensure_mounted)
                    .clone()
                    .map_err(anyhow::Error::msg)?;
                let tracepoint: &mut TracePoint = ebpf
                    .program_mut(program)
                    .with_context(|| format!("program {program} is not in the BPF object"))?
                    .try_into()?;
                tracepoint.load().context("loading")?;
                tracepoint.attach(category, name).context("attaching")?;
                Ok(format!("{category}:{name}"))
            }
        }
    }
}
