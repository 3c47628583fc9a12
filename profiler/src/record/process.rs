//! The host process from one read of /proc/PID/statm and stat at an entry's boundary, and what changed
//! between the two readings of an entry.

use super::field::{Row, fields};

/// Memory in KB as psutil's `memory_info()` reports rss and vms (from /proc/PID/statm), which
/// the 2024 harness logged; faults are the process's own (children's are not included).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProcessStat {
    pub rss_kb: u64,
    pub vms_kb: u64,
    pub minflt: u64,
    pub majflt: u64,
    pub threads: u64,
    /// utime + stime, in clock ticks (USER_HZ).
    pub cpu_ticks: u64,
    /// The process's CPU time in ns, from its CPU-time clock (`clock_getcpuclockid`), read at
    /// entry boundaries: the scheduler's own sum, where `cpu_ticks` truncates it to 10 ms,
    /// a whole short entry's worth. `None` if it could not be read, and in older records.
    #[serde(default)]
    pub cpu_ns: Option<u64>,
    /// Context switches of the threads alive at the reading, summed over their own counters
    /// (at entry boundaries only): `(voluntary, involuntary)`. A thread gives up its CPU
    /// voluntarily when it blocks or sleeps; involuntarily when the scheduler takes it off
    /// while it still wants to run. `None` if they could not be read, and in older records.
    #[serde(default)]
    pub switches: Option<(u64, u64)>,
}

/// CPU time in seconds from /proc/PID/stat's clock ticks (USER_HZ, 100 on Linux).
pub fn ticks_to_seconds(ticks: u64) -> f64 {
    ticks as f64 / procfs::ticks_per_second().max(1) as f64
}

/// The host process across one entry: its readings before and after.
#[derive(Clone, Copy, Debug)]
pub struct ProcessChange<'a> {
    pub before: &'a ProcessStat,
    /// `None` once the host is gone (after `stop`): its memory then reads 0, as in the
    /// harness, and its counters are not known.
    pub after: Option<&'a ProcessStat>,
}

impl ProcessChange<'_> {
    /// Minor and major faults of the host during the entry; `None` once it is gone.
    pub fn faults(&self) -> Option<(u64, u64)> {
        let after = self.after?;
        Some((
            after.minflt.saturating_sub(self.before.minflt),
            after.majflt.saturating_sub(self.before.majflt),
        ))
    }

    pub fn rss_after_kb(&self) -> u64 {
        self.after.map_or(0, |after| after.rss_kb)
    }

    pub fn rss_diff_kb(&self) -> i64 {
        self.rss_after_kb() as i64 - self.before.rss_kb as i64
    }

    pub fn vms_after_kb(&self) -> u64 {
        self.after.map_or(0, |after| after.vms_kb)
    }

    pub fn vms_diff_kb(&self) -> i64 {
        self.vms_after_kb() as i64 - self.before.vms_kb as i64
    }

    /// The host's threads' `(voluntary, involuntary)` context switches during the entry; a
    /// thread that ended within it took its own count with it. `None` once the host is gone.
    pub fn switches(&self) -> Option<(u64, u64)> {
        let (before, after) = (self.before.switches?, self.after?.switches?);
        Some((
            after.0.saturating_sub(before.0),
            after.1.saturating_sub(before.1),
        ))
    }

    /// CPU time the host used during the entry, to the ns where both readings have the
    /// CPU-time clock and to the clock tick where not; `None` once it is gone.
    pub fn host_cpu_ms(&self) -> Option<f64> {
        let after = self.after?;
        if let (Some(before), Some(after)) = (self.before.cpu_ns, after.cpu_ns) {
            return Some(after.saturating_sub(before) as f64 / 1e6);
        }
        let ticks = after.cpu_ticks.saturating_sub(self.before.cpu_ticks);
        Some(ticks_to_seconds(ticks) * 1e3)
    }
}

fields! {
    impl ProcessChange<'_>: pub fn write(&self, row: &mut Row) -> row {
        let faults = self.faults();
        let switches = self.switches();
    }
    RSS_BEFORE "rss_before_kb" Kib "host resident set size before the entry (/proc/PID/statm, as psutil's `memory_info()`: the exact sum of the kernel's per-CPU counts, which /proc/PID/stat skips)" = self.before.rss_kb;
    RSS_AFTER "rss_after_kb" Kib "host resident set size after the entry (0 after stop)" = self.rss_after_kb();
    RSS_DIFF "rss_diff_kb" Kib "rss_after_kb - rss_before_kb" = self.rss_diff_kb();
    VMS_BEFORE "vms_before_kb" Kib "host virtual memory size before the entry" = self.before.vms_kb;
    VMS_AFTER "vms_after_kb" Kib "host virtual memory size after the entry (0 after stop)" = self.vms_after_kb();
    VMS_DIFF "vms_diff_kb" Kib "vms_after_kb - vms_before_kb" = self.vms_diff_kb();
    MINFLT "minflt" Count "minor page faults of the host during the entry (/proc/PID/stat)" = faults.map(|f| f.0);
    MAJFLT "majflt" Count "major page faults of the host during the entry (/proc/PID/stat)" = faults.map(|f| f.1);
    THREADS "threads" Count "host threads at the end of the entry" = self.after.map(|a| a.threads);
    HOST_CPU "host_cpu_ms" Ms "CPU time the host used during the entry, user + system, all threads, the dead ones too (the process's CPU-time clock, to the ns; in runs before 2026-12-05, /proc/PID/stat's 10 ms ticks; empty after stop). Far below took_ms on a CPU-bound entry: the host waited for a CPU" = self.host_cpu_ms();
    VOLUNTARY_SWITCHES "voluntary_ctxt_switches" Count "times the host's threads gave up a CPU during the entry, blocking or sleeping: summed over each thread's own count (/proc/PID/task/*/status) at both ends; a thread that ended within the entry took its count with it; empty after stop" = switches.map(|s| s.0);
    INVOLUNTARY_SWITCHES "nonvoluntary_ctxt_switches" Count "times the scheduler took a CPU from the host's threads while they still wanted to run (preempted, or their time slice ended), counted as voluntary_ctxt_switches: more of these than of those says the host's threads were short of CPUs" = switches.map(|s| s.1);
}
