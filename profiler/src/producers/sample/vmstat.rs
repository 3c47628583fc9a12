//! /proc/vmstat, the counters that tell about faults, reclaim and swap: which of them moved
//! during an entry says whether the kernel had to work for the host's memory.

use std::path::Path;

use anyhow::Result;

use super::read_proc_file;
use crate::ground::keyed;

/// Which lines are kept: a name ending in `_` is a prefix, any other an exact name.
const KEPT: &[&str] = &[
    "pgfault",
    "pgmajfault",
    "pgscan_",
    "pgsteal_",
    "allocstall_",
    "pgrefill",
    "workingset_",
    "pswpin",
    "pswpout",
];

/// The kept counters, in file order. Almost all are event counts; `workingset_nodes` is a
/// gauge (shadow entries in use), so its change can be negative.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Vmstat {
    pub counters: Vec<(String, u64)>,
}

impl Vmstat {
    pub fn get(&self, name: &str) -> Option<u64> {
        self.counters
            .iter()
            .find(|(counter, _)| counter == name)
            .map(|(_, value)| *value)
    }

    /// How each counter changed since `earlier`, in file order; a counter missing from
    /// either snapshot is left out.
    pub fn since(&self, earlier: &Vmstat) -> Vec<(String, i64)> {
        self.counters
            .iter()
            .filter_map(|(name, now)| {
                let before = earlier.get(name)?;
                // Two's complement: a gauge that fell yields its (negative) change.
                Some((name.clone(), now.wrapping_sub(before) as i64))
            })
            .collect()
    }
}

pub fn read(proc_root: &Path) -> Result<Vmstat> {
    parse(&read_proc_file(proc_root, "vmstat")?)
}

/// The machine's OOM kills so far (`oom_kill`, Linux 4.13+); `None` where it is not counted.
pub fn oom_kills(proc_root: &Path) -> Option<u64> {
    keyed::value(&read_proc_file(proc_root, "vmstat").ok()?, "oom_kill")
}

pub fn parse(text: &str) -> Result<Vmstat> {
    let mut counters = Vec::new();
    for pair in keyed::pairs(text, "/proc/vmstat") {
        let (name, value) = pair?;
        if is_kept(name) {
            counters.push((name.to_string(), value));
        }
    }
    Ok(Vmstat { counters })
}

fn is_kept(name: &str) -> bool {
    KEPT.iter().any(|kept| {
        if kept.ends_with('_') {
            name.starts_with(kept)
        } else {
            name == *kept
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_fault_reclaim_and_swap_counters_in_file_order() {
        let vmstat = parse(include_str!("testdata/vmstat")).unwrap();
        let names: Vec<&str> = vmstat.counters.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names.len(), 31, "{names:?}");
        assert_eq!(names[..2], ["workingset_nodes", "workingset_refault_anon"]);
        assert_eq!(names[names.len() - 1], "pgsteal_file");
        for name in [
            "pswpin",
            "pswpout",
            "allocstall_normal",
            "pgrefill",
            "pgscan_direct_throttle",
        ] {
            assert!(names.contains(&name), "{name} missing from {names:?}");
        }
        assert!(!names.iter().any(|n| n.starts_with("nr_") || *n == "pgfree"));
        assert_eq!(vmstat.get("pgfault"), Some(58875146));
        assert_eq!(vmstat.get("pgmajfault"), Some(10092));
    }

    #[test]
    fn changes_are_signed_and_skip_counters_missing_before() {
        let before = parse("pgfault 10\nworkingset_nodes 5\n").unwrap();
        let after = parse("pgfault 25\nworkingset_nodes 3\npswpin 7\n").unwrap();
        assert_eq!(
            after.since(&before),
            [
                ("pgfault".to_string(), 15),
                ("workingset_nodes".to_string(), -2)
            ]
        );
    }
}
