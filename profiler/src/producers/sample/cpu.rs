//! The machine's CPU time from the `cpu` line of /proc/stat: an entry that is slower with no
//! memory evidence is often one that waited for a CPU, on a busy or overcommitted machine.

use std::path::Path;

use anyhow::{Context, Result, bail};

use crate::record::sampling::CpuShare;

/// Cumulative time of all CPUs, in clock ticks (USER_HZ), as /proc/stat counts it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTimes {
    /// Every state: user, nice, system, idle, iowait, irq, softirq, steal. Guest time is
    /// already inside user and nice.
    pub total: u64,
    /// Idle and waiting for I/O: no task on the CPU.
    pub idle: u64,
    /// Taken by the hypervisor for other guests while this one wanted to run.
    pub steal: u64,
    /// Serving hardware interrupts and softirqs (the network stack's receive work, timers,
    /// RCU): time the CPUs' tasks cannot see.
    pub irq: u64,
    pub softirq: u64,
}

impl CpuTimes {
    /// `None` when no tick passed between the readings (entries shorter than 10 ms).
    pub fn since(&self, earlier: &CpuTimes) -> Option<CpuShare> {
        let total = self.total.checked_sub(earlier.total).filter(|&t| t > 0)? as f64;
        let idle = self.idle.saturating_sub(earlier.idle) as f64;
        let share = |now: u64, then: u64| 100.0 * now.saturating_sub(then) as f64 / total;
        Some(CpuShare {
            busy_pct: 100.0 * (total - idle).max(0.0) / total,
            steal_pct: share(self.steal, earlier.steal),
            irq_pct: Some(share(self.irq, earlier.irq)),
            softirq_pct: Some(share(self.softirq, earlier.softirq)),
        })
    }
}

pub fn read(proc_root: &Path) -> Result<CpuTimes> {
    parse(&super::read_proc_file(proc_root, "stat")?)
        .with_context(|| format!("parsing {}", proc_root.join("stat").display()))
}

/// The CPUs `cpus`, summed, or every CPU where `cpus` is `None`.
pub fn read_cpus(proc_root: &Path, cpus: Option<&[usize]>) -> Result<CpuTimes> {
    let text = super::read_proc_file(proc_root, "stat")?;
    match cpus {
        Some(cpus) => parse_cpus(&text, cpus),
        None => parse(&text),
    }
    .with_context(|| format!("parsing {}", proc_root.join("stat").display()))
}

pub fn parse(text: &str) -> Result<CpuTimes> {
    let Some(line) = text.lines().find(|line| line.starts_with("cpu ")) else {
        bail!("no `cpu ` line");
    };
    parse_line(line)
}

/// The CPUs `cpus` only, summed (their `cpuN` lines): the CPUs a host was given.
pub fn parse_cpus(text: &str, cpus: &[usize]) -> Result<CpuTimes> {
    let mut sum = CpuTimes::default();
    for cpu in cpus {
        let name = format!("cpu{cpu} ");
        let Some(line) = text.lines().find(|line| line.starts_with(&name)) else {
            bail!("no `cpu{cpu}` line");
        };
        let times = parse_line(line)?;
        sum.total += times.total;
        sum.idle += times.idle;
        sum.steal += times.steal;
        sum.irq += times.irq;
        sum.softirq += times.softirq;
    }
    Ok(sum)
}

fn parse_line(line: &str) -> Result<CpuTimes> {
    let ticks: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|field| field.parse().context("a CPU time that is not a number"))
        .collect::<Result<_>>()?;
    // user nice system idle iowait irq softirq steal [guest guest_nice]
    if ticks.len() < 8 {
        bail!(
            "{} CPU times in the `cpu` line, expected at least 8",
            ticks.len()
        );
    }
    Ok(CpuTimes {
        total: ticks[..8].iter().sum(),
        idle: ticks[3] + ticks[4],
        steal: ticks[7],
        irq: ticks[5],
        softirq: ticks[6],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Captured on this 2-CPU VM.
    const CAPTURED: &str = "cpu  1879592 36061 338378 692685 9719 0 3866 88654 0 0\n\
                            cpu0 915095 18217 153224 388233 3138 0 1875 45618 0 0\n";

    #[test]
    fn reads_the_summed_cpu_line_and_leaves_guest_time_uncounted_twice() {
        let times = parse(CAPTURED).unwrap();
        assert_eq!(
            times,
            CpuTimes {
                total: 1879592 + 36061 + 338378 + 692685 + 9719 + 3866 + 88654,
                idle: 692685 + 9719,
                steal: 88654,
                irq: 0,
                softirq: 3866,
            }
        );
    }

    #[test]
    fn shares_are_of_all_cpu_time_between_two_readings() {
        let before = CpuTimes {
            total: 1000,
            idle: 400,
            steal: 10,
            irq: 0,
            softirq: 5,
        };
        let after = CpuTimes {
            total: 1200,
            idle: 450,
            steal: 30,
            irq: 0,
            softirq: 15,
        };
        let share = after.since(&before).unwrap();
        assert_eq!(share.busy_pct, 75.0);
        assert_eq!(share.steal_pct, 10.0);
        assert_eq!(share.softirq_pct, Some(5.0));
        assert_eq!(before.since(&before), None, "no tick, no share");
    }

    #[test]
    fn the_cpus_of_a_list_are_summed_from_their_own_lines() {
        let times = parse_cpus(CAPTURED, &[0]).unwrap();
        assert_eq!(times.steal, 45618);
        assert_eq!(times.softirq, 1875);
        assert!(parse_cpus(CAPTURED, &[1]).is_err());
    }

    #[test]
    fn a_short_cpu_line_is_an_error() {
        assert!(parse("cpu  1 2 3\n").is_err());
        assert!(parse("intr 1\n").is_err());
    }
}
