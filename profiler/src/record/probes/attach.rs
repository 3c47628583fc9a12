//! How each probe attached: the mechanism, every attempt and its outcome, the mode.

use serde::{Deserialize, Serialize};

use super::Probe;

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
    /// A BPF program on a perf event's overflow: the profile clock's samples.
    PerfEvent,
    /// A uprobe on a function of the host (its markers).
    Uprobe,
    /// Counts the host keeps itself in memory skillprof maps (its ledger), read at the
    /// boundaries: no program.
    Ledger,
}

/// What happened to one mechanism of a probe's plan.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Attached,
    Failed,
    /// Not tried: excluded by `--mechanism`/`--force-fallback`, or a better one attached.
    Skipped,
    /// Not tried: the probe taxes every process, and the run's mode leaves it out
    /// (`--probes host-only`, or `calls` for the faults).
    ExactOnly,
    /// Not tried: it measures what the run did not ask for (`--syscall-latency`).
    NotAsked,
}

/// Which programs a session runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum ProbeMode {
    /// Every memory call (mmap, munmap, mremap, mprotect, madvise, brk) and page fault of the
    /// host, by kind, entry and skill: programs on the syscall and fault paths, which every
    /// process on the machine passes through.
    Exact,
    /// Every memory call of the host, by kind, entry and skill, as exact; its page faults are
    /// the kernel's own counts (no read/write or user/kernel split), since a program on every
    /// fault of the machine costs more than all the others together on a fault-heavy host.
    Calls,
    /// Only the host pays: no program on any syscall or fault path; faults per entry are the
    /// kernel's own counts, per skill the host's ledger.
    #[default]
    HostOnly,
}

impl ProbeMode {
    /// As the flag and meta.json spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeMode::Exact => "exact",
            ProbeMode::Calls => "calls",
            ProbeMode::HostOnly => "host-only",
        }
    }

    /// Whether the memory calls' programs run (and with them the per-call attribution to
    /// skills through the marks).
    pub fn traces_calls(self) -> bool {
        matches!(self, ProbeMode::Exact | ProbeMode::Calls)
    }

    /// Whether `probe` attaches in this mode: the programs on every process's memory calls
    /// need `calls`; the fault programs, and the major-fault counter on every host thread
    /// (the kernel's own majflt replaces it), need `exact`; the rest attach in every mode.
    pub fn runs(self, probe: Probe) -> bool {
        match probe {
            Probe::Syscalls | Probe::SyscallLatency => self.traces_calls(),
            Probe::PageFaults | Probe::MajorFaults => self == ProbeMode::Exact,
            _ => true,
        }
    }
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
    pub probe: Probe,
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

impl ProbeStatus {
    /// Left out by the host-only mode rather than refused by the kernel.
    pub fn exact_only(&self) -> bool {
        self.left_out_as(Outcome::ExactOnly)
    }

    /// Left out because the run did not ask for what it measures.
    pub fn not_asked(&self) -> bool {
        self.left_out_as(Outcome::NotAsked)
    }

    fn left_out_as(&self, outcome: Outcome) -> bool {
        !self.attached
            && !self.attempts.is_empty()
            && self.attempts.iter().all(|a| a.outcome == outcome)
    }
}

/// How tracefs came to be available.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tracefs {
    AlreadyMounted,
    /// Mounted by this run; it stays mounted afterwards, as if mounted by hand.
    MountedNow,
}
