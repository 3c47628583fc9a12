//! Who else used the CPUs over a stretch: every process's CPU time at the stretch's two ends
//! (/proc/PID/stat's utime and stime, with the children it waited for), so that beside the
//! host's own wait for a CPU (schedstat's run delay) a run can say what ran instead.
//!
//! From the counters, not the scheduler's switches: `slo` and `watch` put no program on the
//! switches (it would be part of what they measure), and one read of /proc at each boundary
//! costs the same whatever the rate. What it cannot see: a process that started and ended
//! inside the stretch, unless its parent waited for it (then the parent is charged), and
//! which of the takers' time fell while the host waited rather than beside it.

use std::collections::HashMap;
use std::path::Path;

use crate::producers::sample::cpu_quota;
use crate::record::sampling::CpuTaker;

/// How many takers a stretch names.
pub const NAMED: usize = 3;

/// Every process's CPU time at one instant, but the host's.
#[derive(Clone, Debug, Default)]
pub struct CpuUse {
    /// Keyed by pid and start time, so that a reused pid is a new process.
    used: HashMap<(i32, u64), Used>,
}

#[derive(Clone, Debug)]
struct Used {
    command: String,
    ticks: u64,
}

/// What the other processes used over a stretch.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Taken {
    pub total_ms: f64,
    /// The [`NAMED`] that used the most, most first.
    pub top: Vec<CpuTaker>,
}

impl CpuUse {
    /// Every process under `proc` but `host` and its threads, now. A process that cannot be
    /// read (it exited meanwhile) is left out.
    pub fn read(proc: &Path, host: u32) -> CpuUse {
        let Ok(processes) = procfs::process::all_processes_with_root(proc) else {
            return CpuUse::default();
        };
        let used = processes
            .filter_map(|process| process.ok()?.stat().ok())
            .filter(|stat| stat.pid as u32 != host)
            .map(|stat| {
                let children = (stat.cutime + stat.cstime).max(0) as u64;
                (
                    (stat.pid, stat.starttime),
                    Used {
                        command: stat.comm,
                        ticks: stat.utime + stat.stime + children,
                    },
                )
            })
            .collect();
        CpuUse { used }
    }

    /// What each process used since `before`: all of its time for one born since. `me`, the
    /// profiler's own pid, is named as such; cgroups are read under `proc` and
    /// `cgroup` ([`cpu_quota::CGROUP`]) for the named ones only.
    pub fn since(&self, before: &CpuUse, proc: &Path, cgroup: &Path, me: u32) -> Taken {
        let ms = |ticks: u64| ticks as f64 * 1e3 / procfs::ticks_per_second() as f64;
        let mut grown: Vec<(i32, &Used, u64)> = self
            .used
            .iter()
            .map(|(&(pid, start), now)| {
                let then = before.used.get(&(pid, start)).map_or(0, |then| then.ticks);
                (pid, now, now.ticks.saturating_sub(then))
            })
            .filter(|&(_, _, ticks)| ticks > 0)
            .collect();
        // Most first; a tie by pid, so the same readings name the same takers.
        grown.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
        let total_ms = ms(grown.iter().map(|(_, _, ticks)| ticks).sum());
        let top = grown
            .iter()
            .take(NAMED)
            .map(|&(pid, used, ticks)| CpuTaker {
                command: used.command.clone(),
                pid: pid as u32,
                profiler: pid as u32 == me,
                cgroup: cgroup_name(proc, cgroup, pid as u32),
                cpu_ms: ms(ticks),
            })
            .collect();
        Taken { total_ms, top }
    }
}

/// Process `pid`'s CPU cgroup as a path under the hierarchy's root (`/` for the root), empty
/// where it has none or it is gone.
fn cgroup_name(proc: &Path, cgroup: &Path, pid: u32) -> String {
    cpu_quota::cgroup_of(proc, cgroup, pid)
        .and_then(|found| {
            let below = found.dir.strip_prefix(&found.root).ok()?.to_owned();
            Some(format!("/{}", below.display()))
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// A /proc with `processes` (pid, comm, utime, stime, cutime, starttime), each in the
    /// cgroup its line names, under a folder of the test's: (dir, proc, cgroup).
    fn machine(processes: &[(u32, &str, u64, u64, i64, u64)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for &(pid, comm, utime, stime, cutime, start) in processes {
            let at = dir.path().join("proc").join(pid.to_string());
            fs::create_dir_all(&at).unwrap();
            // The fields of proc_pid_stat(5), 52 in all; only those read here are set.
            let mut fields = vec!["0".to_owned(); 52];
            fields[0] = pid.to_string();
            fields[1] = format!("({comm})");
            fields[2] = "R".into();
            fields[13] = utime.to_string();
            fields[14] = stime.to_string();
            fields[15] = cutime.to_string();
            fields[21] = start.to_string();
            fs::write(at.join("stat"), fields.join(" ") + "\n").unwrap();
            fs::write(at.join("cgroup"), format!("0::/box/{comm}\n")).unwrap();
            let group = dir.path().join("cgroup").join("box").join(comm);
            fs::create_dir_all(&group).unwrap();
            fs::write(group.join("cpu.max"), "max 100000\n").unwrap();
        }
        dir
    }

    /// A competitor, the profiler and a quiet process: the two that grew are named, most
    /// first, with their cgroups; the host is never among them, and a process whose pid was
    /// reused counts from nothing.
    #[test]
    fn names_who_used_the_cpu_most_first_with_their_cgroups() {
        let before = machine(&[
            (10, "busy", 100, 0, 0, 5),
            (11, "skillprof", 50, 10, 0, 5),
            (12, "quiet", 7, 0, 0, 5),
            (13, "host", 1000, 0, 0, 5),
            (14, "old", 40, 0, 0, 5),
        ]);
        let after = machine(&[
            (10, "busy", 180, 5, 5, 5),
            (11, "skillprof", 55, 11, 0, 5),
            (12, "quiet", 7, 0, 0, 5),
            (13, "host", 5000, 0, 0, 5),
            (14, "new", 3, 0, 0, 900),
        ]);
        let read = |dir: &tempfile::TempDir| CpuUse::read(&dir.path().join("proc"), 13);
        let taken = read(&after).since(
            &read(&before),
            &after.path().join("proc"),
            &after.path().join("cgroup"),
            11,
        );
        let tick_ms = 1e3 / procfs::ticks_per_second() as f64;
        assert_eq!(taken.total_ms, (90 + 6 + 3) as f64 * tick_ms);
        let named: Vec<(&str, u32, bool, &str)> = taken
            .top
            .iter()
            .map(|t| (t.command.as_str(), t.pid, t.profiler, t.cgroup.as_str()))
            .collect();
        assert_eq!(
            named,
            [
                ("busy", 10, false, "/box/busy"),
                ("skillprof", 11, true, "/box/skillprof"),
                ("new", 14, false, "/box/new"),
            ]
        );
        assert_eq!(taken.top[0].cpu_ms, 90.0 * tick_ms);
    }
}
