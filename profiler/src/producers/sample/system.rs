//! One snapshot of the system-wide memory state, and the cumulative counters an entry
//! reports as differences.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::{
    cpu::{self, CpuTimes},
    interrupts,
    meminfo::{self, Meminfo},
    psi::{self, Psi},
    reach::{self, Reach},
    vmstat::{self, Vmstat},
    zoneinfo::{self, Zone},
};

#[derive(Clone, Debug, PartialEq)]
pub struct System {
    /// `None` when the kernel has no PSI.
    pub psi: Option<Psi>,
    pub meminfo: Meminfo,
    /// Every zone, populated or not, in file order.
    pub zones: Vec<Zone>,
    /// The same zones as user allocations can reach them: the bands are judged on this.
    pub reach: Reach,
}

/// Counters that only ever count up and that an entry reports as the difference between its
/// two boundaries. Nothing reads them in between, so they are read at the boundaries only,
/// not on every tick.
#[derive(Clone, Debug, PartialEq)]
pub struct Counters {
    pub vmstat: Vmstat,
    pub cpu: CpuTimes,
    /// `None` where the kernel counts none.
    pub tlb_shootdowns: Option<u64>,
}

impl Counters {
    pub(super) fn read(proc_root: &Path) -> Result<Self> {
        Ok(Counters {
            vmstat: vmstat::read(proc_root)?,
            cpu: cpu::read(proc_root)?,
            tlb_shootdowns: interrupts::tlb_shootdowns(proc_root),
        })
    }
}

/// Reads snapshots; decides once, at creation, whether PSI is there, and says so if not.
pub(super) struct SystemReader {
    proc_root: PathBuf,
    psi_live: bool,
}

impl SystemReader {
    pub(super) fn new(proc_root: &Path) -> Result<Self> {
        let psi_live = psi::read(proc_root)?.is_some();
        if !psi_live {
            // A run must say which mechanisms were live; this is the one place that knows.
            eprintln!(
                "skillprof: WARNING: {}/pressure/memory is missing (kernel without CONFIG_PSI, \
                 or booted with psi=0): the memory stall columns stay empty; boot with psi=1 \
                 to measure them",
                proc_root.display()
            );
        }
        Ok(SystemReader {
            proc_root: proc_root.to_path_buf(),
            psi_live,
        })
    }

    pub(super) fn psi_live(&self) -> bool {
        self.psi_live
    }

    pub(super) fn read(&self) -> Result<System> {
        let psi = if self.psi_live {
            let psi = psi::read(&self.proc_root)?;
            Some(psi.context("/proc/pressure/memory disappeared during the run")?)
        } else {
            None
        };
        let zoneinfo = super::read_proc_file(&self.proc_root, "zoneinfo")?;
        let zones = zoneinfo::parse_with_reserves(&zoneinfo)?;
        Ok(System {
            psi,
            meminfo: meminfo::read(&self.proc_root)?,
            reach: reach::of(&zones)?,
            zones: zones.into_iter().map(|(zone, _)| zone).collect(),
        })
    }
}
