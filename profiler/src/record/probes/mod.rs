//! What the probes measured and how they attached: plain data, filled in by `crate::producers::probes`.
//! One room per concept: how each probe attached (`attach`), what an entry's probes counted and
//! the columns they write (`metrics`), the host's rows by skill and phase (`skills`), the
//! stop's breakdown (`stop`), and what the probes cost (`costs`).

mod attach;
mod costs;
mod metrics;
mod skills;
mod stop;

pub use attach::{Attempt, Mechanism, Outcome, ProbeMode, ProbeStatus, Tracefs};
pub use costs::{
    CountFloor, Counted, Modelled, Ns, Per, ProbeCosts, ProgramCost, StatsSource, Term,
};
pub use metrics::{
    ProbeColumn, ProbeMetrics, PublishedDuring, RequestSpan, StackSummary, probe_columns,
};
pub use skills::{Phase, SkillRow, skill_columns};
pub use stop::{StopBreakdown, StopPart, StopPhase, TeardownSource};

use serde::{Deserialize, Serialize};

/// A kernel event group skillprof observes (a probe), or a counter beside them: the name
/// meta.json, the attach table and every record use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Probe {
    Syscalls,
    /// The syscalls' entry programs that time each call (`--syscall-latency`).
    SyscallLatency,
    PageFaults,
    Kswapd,
    DirectReclaim,
    MemcgReclaim,
    LruShrink,
    ShrinkNode,
    ShrinkSlab,
    Throttle,
    Exit,
    RssStat,
    ExitMmap,
    /// The perf software counter of major faults (not BPF).
    MajorFaults,
    /// The uprobe on the host's marker function.
    Markers,
    /// The uprobe on wasmtime's `decommit_pages` in the host (batched, process_madvise).
    Decommits,
    /// The uprobe on rustix's `_ioctl` in the host (wasmtime's PAGEMAP_SCAN).
    PagemapScan,
    /// The uprobe on wasmtime's `CodeMemory::publish` in the host.
    Publish,
    /// The profile clock's samples of the host's threads on a CPU (a perf event per CPU).
    CpuProfile,
    /// The host's threads' time off a CPU (the scheduler's switches and wakeups).
    OffCpu,
}

impl Probe {
    /// Whether its programs run for every process's events, not only the host's: a syscall
    /// tracepoint slows every syscall on the machine, and the fault programs run on every
    /// fault. Those attach in exact mode only.
    pub fn taxes_every_process(self) -> bool {
        matches!(
            self,
            Probe::Syscalls | Probe::SyscallLatency | Probe::PageFaults
        )
    }

    /// Whether it follows a function of the host's binary rather than the kernel: a host
    /// without that function leaves it off, on any kernel.
    pub fn follows_the_host(self) -> bool {
        matches!(
            self,
            Probe::Markers | Probe::Decommits | Probe::PagemapScan | Probe::Publish
        )
    }

    pub const ALL: [Probe; 20] = [
        Probe::Syscalls,
        Probe::SyscallLatency,
        Probe::PageFaults,
        Probe::Kswapd,
        Probe::DirectReclaim,
        Probe::MemcgReclaim,
        Probe::LruShrink,
        Probe::ShrinkNode,
        Probe::ShrinkSlab,
        Probe::Throttle,
        Probe::Exit,
        Probe::RssStat,
        Probe::ExitMmap,
        Probe::MajorFaults,
        Probe::Markers,
        Probe::Decommits,
        Probe::PagemapScan,
        Probe::Publish,
        Probe::CpuProfile,
        Probe::OffCpu,
    ];

    /// As meta.json and the attach table name it.
    pub fn name(self) -> &'static str {
        match self {
            Probe::Syscalls => "syscalls",
            Probe::SyscallLatency => "syscall_latency",
            Probe::PageFaults => "page_faults",
            Probe::Kswapd => "kswapd",
            Probe::DirectReclaim => "direct_reclaim",
            Probe::MemcgReclaim => "memcg_reclaim",
            Probe::LruShrink => "lru_shrink",
            Probe::ShrinkNode => "shrink_node",
            Probe::ShrinkSlab => "shrink_slab",
            Probe::Throttle => "throttle",
            Probe::Exit => "exit",
            Probe::RssStat => "rss_stat",
            Probe::ExitMmap => "exit_mmap",
            Probe::MajorFaults => "major_faults",
            Probe::Markers => "markers",
            Probe::Decommits => "decommits",
            Probe::PagemapScan => "pagemap_scan",
            Probe::Publish => "code_publish",
            Probe::CpuProfile => "cpu_profile",
            Probe::OffCpu => "off_cpu",
        }
    }
}

impl std::fmt::Display for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
