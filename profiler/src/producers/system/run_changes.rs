//! What `skillprof run` changes on the machine before its host starts, held as one guard: the
//! host's memory cgroup (`--memory-max`) and the sysctls (`--max-map-count`,
//! `--overcommit-memory`), with the OOM killer's count before, to tell a kill during the run.
//! Each change has its guardian, which undoes it if skillprof dies; the guard undoes them when
//! the run ends, or when it is dropped on an error's way out.

use std::path::Path;
use std::sync::Arc;

use anyhow::Result;

use super::cgroup::MemoryCgroup;
use super::sysctl::SysctlChange;
use crate::ground::units;
use crate::producers::sample::{self, vmstat};
use crate::record::{CgroupInfo, RunInfo, SysctlDuring};

const MAX_MAP_COUNT: &str = "vm.max_map_count";
const OVERCOMMIT_MEMORY: &str = "vm.overcommit_memory";

/// What a run asked to change.
pub struct Wanted<'a> {
    /// The memory cgroup's name, if `memory_max` makes one.
    pub name: &'a str,
    pub memory_max: Option<u64>,
    pub max_map_count: Option<u64>,
    pub overcommit_memory: Option<u64>,
}

pub struct RunChanges {
    cgroup: Option<Arc<MemoryCgroup>>,
    /// Restored the last set first.
    sysctls: Vec<SysctlChange>,
    /// /proc/vmstat oom_kill before the host started.
    oom_kills_before: Option<u64>,
}

impl RunChanges {
    /// Makes what `wanted` asks for, each said in `info` with its guardian.
    pub fn make(wanted: &Wanted<'_>, info: &mut RunInfo) -> Result<RunChanges> {
        let mut changes = RunChanges {
            cgroup: None,
            sysctls: Vec::new(),
            oom_kills_before: vmstat::oom_kills(Path::new(sample::PROC)),
        };
        if let Some(limit) = wanted.memory_max {
            let cgroup = MemoryCgroup::create(wanted.name, limit)?;
            info.memory_cgroup = Some(CgroupInfo {
                dir: cgroup.cgroup().dir().display().to_string(),
                version: cgroup.cgroup().version(),
                limit_bytes: cgroup.limit_bytes(),
            });
            info.guardian_pids.extend(cgroup.cgroup().guardian_pid());
            changes.cgroup = Some(Arc::new(cgroup));
        }
        for (name, during) in [
            (MAX_MAP_COUNT, wanted.max_map_count),
            (OVERCOMMIT_MEMORY, wanted.overcommit_memory),
        ] {
            let Some(during) = during else { continue };
            // An error here drops `changes`, which undoes what was already made.
            let change = SysctlChange::set(name, &during.to_string())?;
            let said = Some(SysctlDuring {
                before: change.original().to_owned(),
                during,
            });
            match name {
                MAX_MAP_COUNT => info.max_map_count = said,
                _ => info.overcommit_memory = said,
            }
            info.guardian_pids.push(change.guardian_pid());
            eprintln!("{name}: {} -> {during} for the run", change.original());
            changes.sysctls.push(change);
        }
        Ok(changes)
    }

    /// The host's memory cgroup, shared with its measurer and the entries' watch.
    pub fn cgroup(&self) -> Option<&Arc<MemoryCgroup>> {
        self.cgroup.as_ref()
    }

    /// Why we know the OOM killer took the host, if it did: the cgroup's own count, or the
    /// machine's when the host had no cgroup (then another process may have been the victim,
    /// which the words say).
    pub fn oom_evidence(&self) -> Option<String> {
        if let Some(cgroup) = &self.cgroup {
            let kills = cgroup.read().ok()?.oom_kills;
            return (kills > 0).then(|| {
                format!(
                    "its memory cgroup reached its {} limit: oom_kill {kills}",
                    units::bytes(cgroup.limit_bytes() as f64)
                )
            });
        }
        let kills =
            vmstat::oom_kills(Path::new(sample::PROC))?.saturating_sub(self.oom_kills_before?);
        (kills > 0).then(|| {
            format!(
                "the machine's OOM killer killed {kills} process(es) during the run \
                 (/proc/vmstat oom_kill)"
            )
        })
    }

    /// Removes the cgroup (the host has been stopped: nothing is left inside) and restores
    /// the sysctls, each failure a warning: its guardian still undoes it.
    pub fn undo(&mut self) {
        if let Some(cgroup) = self.cgroup.take() {
            let removed = match Arc::into_inner(cgroup) {
                Some(cgroup) => cgroup.remove(),
                None => Err(anyhow::anyhow!(
                    "the host's memory cgroup is still held: its guardian removes it"
                )),
            };
            if let Err(error) = removed {
                eprintln!("warning: {error:#}");
            }
        }
        while let Some(change) = self.sysctls.pop() {
            if let Err(error) = change.restore() {
                eprintln!("warning: {error:#}");
            }
        }
    }
}

impl Drop for RunChanges {
    fn drop(&mut self) {
        self.undo();
    }
}
