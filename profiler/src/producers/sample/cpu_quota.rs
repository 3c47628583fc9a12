//! The CPU quota of a process's cgroup and how often the kernel throttled it: the classic
//! container tail. A cgroup that used its quota (cgroup v2's `cpu.max`, v1's
//! `cpu.cfs_quota_us`) in a period waits, runnable, for the next one; schedstat counts that
//! as waiting for a CPU, though no CPU was busy. `cpu.stat` counts the periods and the time.

use std::fs;
use std::path::{Path, PathBuf};

use crate::ground::keyed;
use crate::record::sampling::CpuQuota;

/// Where the hierarchies are mounted on machines like this one, under /sys/fs/cgroup: v2's,
/// then v1's cpu controller (alone, or with cpuacct).
pub const CGROUP: &str = "/sys/fs/cgroup";
const V2_UNDER: [&str; 2] = ["", "unified"];
const V1_UNDER: [&str; 3] = ["cpu", "cpu,cpuacct", "cpuacct,cpu"];

/// A cgroup's CPU quota and throttling counters at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct QuotaReading {
    /// The quota in CPUs (quota / period); `None` without one.
    pub quota_cpus: Option<f64>,
    /// Enforcement periods that had runnable tasks, and those in which the quota ran out.
    pub periods: u64,
    pub throttled: u64,
    /// Time the cgroup's tasks were held back, ns.
    pub throttled_ns: u64,
}

impl QuotaReading {
    /// What changed from `before` to this reading (the quota as it is now).
    pub fn since(&self, before: &QuotaReading) -> CpuQuota {
        CpuQuota {
            quota_cpus: self.quota_cpus,
            periods: self.periods.saturating_sub(before.periods),
            throttled_periods: self.throttled.saturating_sub(before.throttled),
            throttled_ms: self.throttled_ns.saturating_sub(before.throttled_ns) as f64 / 1e6,
        }
    }
}

/// A process's CPU cgroup: its directory, the root of its hierarchy, and whether that is
/// cgroup v2's.
#[derive(Clone, Debug, PartialEq)]
pub struct CpuCgroup {
    pub dir: PathBuf,
    pub root: PathBuf,
    pub v2: bool,
}

/// Process `pid`'s CPU cgroup, from `proc` (/proc) and `cgroup` ([`CGROUP`]): v1's cpu
/// hierarchy where the process has a line in it, else v2's; `None` where neither has the CPU
/// controller.
pub fn cgroup_of(proc: &Path, cgroup: &Path, pid: u32) -> Option<CpuCgroup> {
    let membership = fs::read_to_string(proc.join(pid.to_string()).join("cgroup")).ok()?;
    cpu_cgroup(&membership, cgroup)
}

/// The quota and counters of process `pid`'s CPU cgroup (see [`cgroup_of`]).
pub fn read(proc: &Path, cgroup: &Path, pid: u32) -> Option<QuotaReading> {
    let CpuCgroup { dir, v2, .. } = cgroup_of(proc, cgroup, pid)?;
    let stat = fs::read_to_string(dir.join("cpu.stat")).ok()?;
    let quota_cpus = match v2 {
        true => {
            let max = fs::read_to_string(dir.join("cpu.max")).ok()?;
            let mut words = max.split_whitespace();
            let quota = words.next()?.parse::<f64>().ok();
            let period = words.next()?.parse::<f64>().ok()?;
            quota.map(|quota| quota / period)
        }
        false => {
            let number = |file: &str| -> Option<f64> {
                fs::read_to_string(dir.join(file)).ok()?.trim().parse().ok()
            };
            let quota = number("cpu.cfs_quota_us")?;
            (quota > 0.0).then_some(quota / number("cpu.cfs_period_us")?)
        }
    };
    Some(QuotaReading {
        quota_cpus,
        periods: keyed::value(&stat, "nr_periods")?,
        throttled: keyed::value(&stat, "nr_throttled")?,
        throttled_ns: match v2 {
            true => keyed::value(&stat, "throttled_usec")? * 1000,
            false => keyed::value(&stat, "throttled_time")?,
        },
    })
}

/// The CPU cgroup named in /proc/PID/cgroup's `membership`, under `cgroup`: v1's cpu line
/// where there is one, else v2's `0::`.
fn cpu_cgroup(membership: &str, cgroup: &Path) -> Option<CpuCgroup> {
    let lines: Vec<(&str, &str)> = membership
        .lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let _id = parts.next()?;
            Some((parts.next()?, parts.next()?))
        })
        .collect();
    // The first hierarchy under which the path has the controller's file.
    let within = |unders: &[&str], path: &str, file: &str, v2: bool| {
        unders.iter().find_map(|under| {
            let root = cgroup.join(under);
            let dir = root.join(path.trim_start_matches('/'));
            dir.join(file)
                .exists()
                .then_some(CpuCgroup { dir, root, v2 })
        })
    };
    if let Some((_, path)) = lines
        .iter()
        .find(|(controllers, _)| controllers.split(',').any(|c| c == "cpu"))
    {
        return within(&V1_UNDER, path, "cpu.cfs_quota_us", false);
    }
    let (_, path) = lines
        .iter()
        .find(|(controllers, _)| controllers.is_empty())?;
    within(&V2_UNDER, path, "cpu.max", true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `pid`'s /proc/PID/cgroup and the cgroup files, written as the kernel writes them, under
    /// a folder of the test's: (proc, cgroup).
    fn machine(membership: &str, files: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let (proc, cgroup) = (dir.path().join("proc"), dir.path().join("cgroup"));
        fs::create_dir_all(proc.join("42")).unwrap();
        fs::write(proc.join("42/cgroup"), membership).unwrap();
        for (path, text) in files {
            let path = cgroup.join(path);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, text).unwrap();
        }
        (dir, proc, cgroup)
    }

    /// This machine's kind: v1's cpu controller mounted with cpuacct, a tenth of a CPU.
    #[test]
    fn a_v1_quota_and_its_throttling_are_read() {
        let (_dir, proc, cgroup) = machine(
            "4:memory:/m\n2:cpu,cpuacct:/slow\n0::/\n",
            &[
                ("cpu,cpuacct/slow/cpu.cfs_quota_us", "10000\n"),
                ("cpu,cpuacct/slow/cpu.cfs_period_us", "100000\n"),
                (
                    "cpu,cpuacct/slow/cpu.stat",
                    "nr_periods 40\nnr_throttled 30\nthrottled_time 900000000\n",
                ),
            ],
        );
        assert_eq!(
            cgroup_of(&proc, &cgroup, 42),
            Some(CpuCgroup {
                dir: cgroup.join("cpu,cpuacct/slow"),
                root: cgroup.join("cpu,cpuacct"),
                v2: false,
            })
        );
        assert_eq!(
            read(&proc, &cgroup, 42),
            Some(QuotaReading {
                quota_cpus: Some(0.1),
                periods: 40,
                throttled: 30,
                throttled_ns: 900_000_000,
            })
        );
    }

    /// v2 without a quota (`max`): the counters, and no quota.
    #[test]
    fn a_v2_cgroup_without_a_quota_has_counters_and_no_quota() {
        let (_dir, proc, cgroup) = machine(
            "0::/ctr\n",
            &[
                ("ctr/cpu.max", "max 100000\n"),
                (
                    "ctr/cpu.stat",
                    "usage_usec 9\nuser_usec 5\nsystem_usec 4\nnr_periods 0\nnr_throttled 0\n\
                     throttled_usec 0\n",
                ),
            ],
        );
        let reading = read(&proc, &cgroup, 42).unwrap();
        assert_eq!(reading.quota_cpus, None);
        assert_eq!(reading.periods, 0);
        // A cgroup without the CPU controller has none of it.
        let (_dir, proc, cgroup) = machine("0::/bare\n", &[("bare/cpu.stat", "usage_usec 9\n")]);
        assert_eq!(read(&proc, &cgroup, 42), None);
    }

    #[test]
    fn a_reading_since_another_is_their_difference() {
        let before = QuotaReading {
            quota_cpus: Some(0.1),
            periods: 10,
            throttled: 2,
            throttled_ns: 5_000_000,
        };
        let after = QuotaReading {
            periods: 50,
            throttled: 32,
            throttled_ns: 905_000_000,
            ..before
        };
        assert_eq!(
            after.since(&before),
            CpuQuota {
                quota_cpus: Some(0.1),
                periods: 40,
                throttled_periods: 30,
                throttled_ms: 900.0,
            }
        );
    }
}
