//! What the scheduler counted for each of a process's threads (/proc/PID/task/TID/schedstat):
//! time on a CPU, time runnable but waiting for one, and how often it was put on one.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

/// One thread's counts since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadSched {
    pub cpu_ns: u64,
    pub run_delay_ns: u64,
    pub timeslices: u64,
}

impl ThreadSched {
    fn parse(line: &str) -> Option<ThreadSched> {
        let mut fields = line.split_whitespace().map(|f| f.parse::<u64>().ok());
        Some(ThreadSched {
            cpu_ns: fields.next()??,
            run_delay_ns: fields.next()??,
            timeslices: fields.next()??,
        })
    }
}

/// Each living thread of a process by tid. A thread that exited is not in it, with its counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Schedstats(pub BTreeMap<u32, ThreadSched>);

impl Schedstats {
    pub fn read(proc_root: &Path, pid: u32) -> Schedstats {
        let Ok(tasks) = fs::read_dir(proc_root.join(pid.to_string()).join("task")) else {
            return Schedstats::default();
        };
        Schedstats(
            tasks
                .filter_map(Result::ok)
                .filter_map(|task| {
                    let tid = task.file_name().to_str()?.parse().ok()?;
                    let line = fs::read_to_string(task.path().join("schedstat")).ok()?;
                    Some((tid, ThreadSched::parse(&line)?))
                })
                .collect(),
        )
    }

    /// Each thread living now, with what it was counted since `before` (all of it for a
    /// thread born since).
    pub fn since<'a>(&'a self, before: &'a Schedstats) -> impl Iterator<Item = ThreadSched> + 'a {
        self.0.iter().map(|(tid, now)| {
            let then = before.0.get(tid).copied().unwrap_or_default();
            ThreadSched {
                cpu_ns: now.cpu_ns.saturating_sub(then.cpu_ns),
                run_delay_ns: now.run_delay_ns.saturating_sub(then.run_delay_ns),
                timeslices: now.timeslices.saturating_sub(then.timeslices),
            }
        })
    }

    /// The sum of [`Schedstats::since`] over the threads living now.
    pub fn total_since(&self, before: &Schedstats) -> ThreadSched {
        self.since(before)
            .fold(ThreadSched::default(), |sum, thread| ThreadSched {
                cpu_ns: sum.cpu_ns + thread.cpu_ns,
                run_delay_ns: sum.run_delay_ns + thread.run_delay_ns,
                timeslices: sum.timeslices + thread.timeslices,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_born_since_counts_all_its_time_and_one_gone_counts_none() {
        let thread = |cpu_ns, run_delay_ns, timeslices| ThreadSched {
            cpu_ns,
            run_delay_ns,
            timeslices,
        };
        let before = Schedstats([(1, thread(100, 10, 5)), (2, thread(50, 5, 2))].into());
        let after = Schedstats([(1, thread(300, 40, 9)), (3, thread(20, 7, 1))].into());
        assert_eq!(after.total_since(&before), thread(220, 37, 5));
        assert_eq!(ThreadSched::parse("12 34 5\n"), Some(thread(12, 34, 5)));
        let own = Schedstats::read(Path::new("/proc"), std::process::id());
        assert!(own.0.contains_key(&std::process::id()), "{own:?}");
    }
}
