//! The BPF object built by `cargo xtask build-ebpf`, embedded in this binary (see
//! profiler/build.rs for why), and the names of what is inside it.

use anyhow::{Context as _, Result};
use aya::{Ebpf, EbpfLoader, maps::PerCpuArray};
use skillprof_common::MmapTotals;

use super::{
    plan::{Attacher, PROBES, ProbeStatus},
    tracefs::Tracefs,
};

static OBJECT: &[u8] = aya::include_bytes_aligned!(env!("SKILLPROF_BPF_OBJECT"));

/// Global in the object: the tgid the programs count for.
const TARGET_TGID: &str = "TARGET_TGID";
/// Per-CPU array with one [`MmapTotals`] slot.
const MMAP_TOTALS: &str = "MMAP_TOTALS";

/// The object loaded into the kernel with every probe's attach outcome. Dropping it detaches
/// and unloads everything.
pub struct LoadedProbes {
    ebpf: Ebpf,
    pub statuses: Vec<ProbeStatus>,
    /// What was done about tracefs; `None` when no probe needed it.
    pub tracefs: Option<Tracefs>,
}

impl LoadedProbes {
    /// Loads the object with its filter set to `tgid` and attaches every probe by its plan.
    /// Only a failure to load the object at all is an error; per-probe failures are in
    /// `statuses`.
    pub fn attach(tgid: u32) -> Result<Self> {
        let mut ebpf = EbpfLoader::new()
            .override_global(TARGET_TGID, &tgid, true)
            .load(OBJECT)
            .context("loading the BPF object into the kernel")?;
        let mut attacher = Attacher::default();
        let statuses = PROBES
            .iter()
            .map(|probe| attacher.attach(&mut ebpf, probe))
            .collect();
        Ok(Self {
            ebpf,
            statuses,
            tracefs: attacher.tracefs(),
        })
    }

    pub fn all_attached(&self) -> bool {
        self.statuses.iter().all(|status| status.attached)
    }

    /// The mmap totals so far, summed over CPUs.
    pub fn mmap_totals(&self) -> Result<MmapTotals> {
        let map = self
            .ebpf
            .map(MMAP_TOTALS)
            .context("map MMAP_TOTALS is not in the BPF object")?;
        let per_cpu = PerCpuArray::<_, MmapTotals>::try_from(map)?.get(&0, 0)?;
        Ok(per_cpu
            .iter()
            .fold(MmapTotals::default(), |sum, cpu| MmapTotals {
                calls: sum.calls + cpu.calls,
                bytes: sum.bytes + cpu.bytes,
            }))
    }
}
