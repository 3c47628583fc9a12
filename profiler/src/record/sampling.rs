//! The sampler's figures of an entry: extremes over its samples, changes between its two
//! boundaries, per zone against the zone's watermarks.

use serde::{Deserialize, Serialize};

use crate::ground::band::Band;

#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct ZoneId {
    pub node: u32,
    pub name: String,
}

/// In pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Watermarks {
    pub min: u64,
    pub low: u64,
    pub high: u64,
    /// Absent before kernel 6.3.
    pub promo: Option<u64>,
}

/// How low free pages got: the fewest free pages, and the most severe band. The two can
/// come from different samples, because watermarks move as zones grow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Lowest {
    pub free_pages: u64,
    pub band: Band,
}

/// The sampler's measurements of one entry.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EntrySampling {
    /// Samples taken during the entry, both boundary samples included.
    pub samples: u64,
    /// The most RSS seen: in the samples and in what the runner adds
    /// ([`EntrySampling::cover_rss`]): its own readings before and after the entry, and the
    /// kernel's high-water mark over the entry. `None` if the host was gone in every one.
    pub rss_peak_kb: Option<u64>,
    /// What the sampler counts of the host at its slower pace, at their most over the entry.
    #[serde(flatten)]
    pub handles: Handles,
    /// vm.max_map_count at the end of the entry.
    #[serde(default)]
    pub maps_limit: Option<u64>,
    /// Most threads the host ran in any sample of the entry: a compile's own threads live
    /// only while it runs, so the count at the end misses them.
    #[serde(default)]
    pub threads_peak: Option<u64>,
    /// Most address space (VmSize) the host held in any sample of the entry, KB: what a pool
    /// reserves up front, and each instance on demand while it lives.
    #[serde(default)]
    pub vms_peak_kb: Option<u64>,
    /// Memory stall time between the boundaries; `None` without PSI.
    pub psi_some_us: Option<u64>,
    pub psi_full_us: Option<u64>,
    /// Over the summed free pages and watermarks of the populated zones.
    pub zones_lowest: Lowest,
    /// Each zone of the run's zone set; `None` if a sample lacked it.
    pub zone_lowest: Vec<(ZoneId, Option<Lowest>)>,
    /// vmstat counter changes between the boundaries, in file order.
    pub vmstat: Vec<(String, i64)>,
    /// The machine's CPUs between the boundaries; `None` if no tick passed.
    pub cpu: Option<CpuShare>,
    /// TLB shootdown interrupts of the machine between the boundaries; `None` where the
    /// kernel counts none, and in runs made before they were read.
    #[serde(default)]
    pub tlb_shootdowns: Option<u64>,
}

/// What the sampler counts of the host at its slower pace (at entry boundaries, and at most
/// once a second between: each count walks a /proc list as long as the count), each the most
/// seen; one reading is its own most. A new count is one field here, its reading in
/// `sample::process::handles`, and its column below.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handles {
    /// Memory mappings (VMAs, /proc/PID/maps), which vm.max_map_count limits; `None` if never
    /// counted.
    #[serde(default)]
    pub maps_peak: Option<u64>,
    /// Open file descriptors (/proc/PID/fd): every connection in flight holds one, so 10,000
    /// requests at once need more than 10,000.
    #[serde(default)]
    pub fds_peak: Option<u64>,
    /// The host's soft RLIMIT_NOFILE (/proc/PID/limits) at the latest reading: past it,
    /// accept, open and socket fail with EMFILE. `None` if unlimited or never read.
    #[serde(default)]
    pub fds_limit: Option<u64>,
    /// The host's soft RLIMIT_AS (`ulimit -v`, /proc/PID/limits) at the latest reading, KB:
    /// past it, mmap fails with ENOMEM. `None` if unlimited or never read.
    #[serde(default)]
    pub as_limit_kb: Option<u64>,
}

impl Handles {
    /// The most of each count over two readings, `other` the later; a limit is the later's.
    pub fn max(self, other: Handles) -> Handles {
        Handles {
            maps_peak: self.maps_peak.max(other.maps_peak),
            fds_peak: self.fds_peak.max(other.fds_peak),
            fds_limit: other.fds_limit.or(self.fds_limit),
            as_limit_kb: other.as_limit_kb.or(self.as_limit_kb),
        }
    }
}

/// The share of the CPUs busy and stolen between two readings, in percent of all CPU time.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CpuShare {
    pub busy_pct: f64,
    pub steal_pct: f64,
    /// Hardware interrupts and softirqs (absent in runs made before they were read).
    #[serde(default)]
    pub irq_pct: Option<f64>,
    #[serde(default)]
    pub softirq_pct: Option<f64>,
}

use super::Metrics;
use super::field::{Row, Value, fields};

fields! {
    impl Metrics for EntrySampling: fn write(&self, row: &mut Row) -> row {}
    RSS_PEAK "rss_peak_kb" Kib "largest host RSS during the entry: the kernel's high-water mark (VmHWM), reset at the entry's start through /proc/PID/clear_refs, so a peak between samples counts; where the reset is refused, the most of the samples and both ends (meta.json's rss_peak says which)" = self.rss_peak_kb;
    MAPS_PEAK "maps_peak" Count "most memory mappings (VMAs) the host held in any count of the entry (/proc/PID/maps, at both ends and once a second between), against maps_limit: past it, mmap and mprotect fail with ENOMEM" = self.handles.maps_peak;
    MAPS_LIMIT "maps_limit" Count "vm.max_map_count at the end of the entry: the mappings one process may hold" = self.maps_limit;
    FDS_PEAK "fds_peak" Count "most open file descriptors the host held in any count of the entry (/proc/PID/fd, at both ends and once a second between), against fds_limit: every connection in flight holds one" = self.handles.fds_peak;
    FDS_LIMIT "fds_limit" Count "the host's soft RLIMIT_NOFILE (/proc/PID/limits) at the entry's last count: past it, accept, open and socket fail with EMFILE; empty when unlimited" = self.handles.fds_limit;
    VMS_PEAK "vms_peak_kb" Kib "most address space (VmSize, /proc/PID/statm) the host held in any sample of the entry: a pool's reservation, and on demand each live instance's, against as_limit_kb and the 128 TiB of a 47-bit address space" = self.vms_peak_kb;
    AS_LIMIT "as_limit_kb" Kib "the host's soft RLIMIT_AS (ulimit -v, /proc/PID/limits) at the entry's last count: past it, mmap fails with ENOMEM; empty when unlimited" = self.handles.as_limit_kb;
    THREADS_PEAK "threads_peak" Count "most threads the host ran in any sample of the entry (/proc/PID/stat): a compile's own threads (skillhost: one per CPU) are gone by its end" = self.threads_peak;
    SAMPLES "samples" Count "samples the sampler took during the entry, both boundary samples included" = self.samples;
    PSI_SOME "psi_some_us" Us "memory stall time during the entry in which at least one task stalled (/proc/pressure/memory; empty without PSI)" = self.psi_some_us;
    PSI_FULL "psi_full_us" Us "memory stall time during the entry in which all non-idle tasks stalled at once (empty without PSI)" = self.psi_full_us;
    CPU_BUSY "cpu_busy_pct" Percent "share of all the machine's CPU time that was busy during the entry, every process (/proc/stat; empty when no 10 ms tick passed)" = self.cpu.map(|cpu| cpu.busy_pct);
    CPU_STEAL "cpu_steal_pct" Percent "share of all the machine's CPU time the hypervisor gave to other guests while this one wanted to run" = self.cpu.map(|cpu| cpu.steal_pct);
    CPU_IRQ "cpu_irq_pct" Percent "share of all the machine's CPU time spent serving hardware interrupts: time no task, the host's included, sees as its own" = self.cpu.and_then(|cpu| cpu.irq_pct);
    CPU_SOFTIRQ "cpu_softirq_pct" Percent "share of all the machine's CPU time in softirqs (the network stack's receive work, timers, RCU), outside any task's time" = self.cpu.and_then(|cpu| cpu.softirq_pct);
    TLB_SHOOTDOWNS "tlb_shootdowns" Count "TLB shootdown interrupts of the whole machine during the entry (/proc/interrupts' TLB line): one CPU telling others to drop cached translations after a munmap, mprotect or madvise of a process whose threads ran on them" = self.tlb_shootdowns;
    ZONES_MIN_FREE "zones_min_free_pages" Count "fewest free pages user allocations could reach (each zone's free pages above its reserve, summed over the zones that serve user memory) in any sample of the entry" = self.zones_lowest.free_pages;
    ZONES_LOWEST "zones_lowest_band" Text "lowest watermark band those reachable free pages fell into, against the same zones' summed watermarks (boost included): baseline [promo, inf), promo [high, promo), high [low, high), low [min, low), min [0, min); baseline starts at high without promo" = self.zones_lowest.band.name();
    ZONE "zone_*" Text "per populated zone, zone_<node>_<name>_min_free_pages (fewest free pages above the zone's reserve in any sample) and zone_<node>_<name>_lowest_band (its lowest band, as zones_lowest_band, against the zone's own watermarks)" for self.zone_cells();
    VMSTAT "vmstat_*" Count "change of a /proc/vmstat counter over the entry (pgfault, pgmajfault, pgscan_*, pgsteal_*, allocstall_*, pgrefill, workingset_*, pswpin, pswpout; workingset_nodes is a gauge and can fall)" for self.vmstat.iter().map(|(counter, change)| (format!("vmstat_{counter}"), *change));
}

/// What the scheduler counted for the host's threads over an entry
/// (/proc/PID/task/TID/schedstat at both boundaries): each thread living at the end, from its
/// count at the start (all of it, for a thread born since). A thread that exits during the
/// entry is missed, with its counts.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HostScheduling {
    pub run_delay_ms: f64,
    pub timeslices: u64,
    /// CPU time every other process used over the entry; `None` in records from before it
    /// was read.
    #[serde(default)]
    pub others_cpu_ms: Option<f64>,
    /// The other processes that used the most of it, most first: what ran while the host's
    /// threads waited.
    #[serde(default)]
    pub ran_instead: Vec<CpuTaker>,
    /// The host's cgroup's CPU quota and what it held back; `None` where its cgroup has no
    /// CPU controller, and in records from before it was read.
    #[serde(default)]
    pub quota: Option<CpuQuota>,
}

/// The host's cgroup's CPU quota over a stretch (a step, an entry) (`cpu.max`, v1's `cpu.cfs_quota_us`), and the
/// kernel's count of it in `cpu.stat`.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CpuQuota {
    /// The quota in CPUs; `None` without one (the counters then stay at 0).
    pub quota_cpus: Option<f64>,
    /// Enforcement periods with runnable tasks, and those in which the quota ran out.
    pub periods: u64,
    pub throttled_periods: u64,
    /// Time the host's tasks were held back by it.
    pub throttled_ms: f64,
}

impl CpuQuota {
    /// Whether the quota held the host back in a twentieth of its periods or more: enough to
    /// be what its requests waited for.
    pub fn held_back(&self) -> bool {
        self.throttled_periods * 20 >= self.periods.max(1)
    }

    /// The quota in words: "0.050 of a CPU" (three places: a container's quota is often a
    /// few hundredths of a CPU), or "now lifted".
    pub fn said(&self) -> String {
        match self.quota_cpus {
            Some(cpus) => format!("{cpus:.3} of a CPU"),
            None => "now lifted".to_owned(),
        }
    }
}

/// A process other than the host that used CPU time over a stretch (/proc/PID/stat).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CpuTaker {
    pub command: String,
    pub pid: u32,
    /// skillprof itself: the measurer's own share.
    pub profiler: bool,
    /// Its CPU cgroup under the hierarchy's root (another container's, say); empty if none.
    pub cgroup: String,
    pub cpu_ms: f64,
}

impl std::fmt::Display for CpuTaker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (pid {}", self.command, self.pid)?;
        if self.profiler {
            f.write_str(", this profiler")?;
        }
        if !self.cgroup.is_empty() {
            write!(f, ", cgroup {}", self.cgroup)?;
        }
        write!(f, ") {}", crate::ground::units::ms(self.cpu_ms))
    }
}

/// Takers as one line: `a (pid 1, cgroup /x) 950 ms; b (…) 12 ms`.
pub fn takers(ran: &[CpuTaker]) -> String {
    ran.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// `, while these used the CPUs: …` after a wait for a CPU over a stretch of `wall_ms`: the
/// takers that kept a CPU busy a tenth of the stretch or more, or, where none did, that none
/// did: the wait was then the host's own threads queued behind each other, a quota, or the
/// hypervisor's steal. Against the stretch, not the wait: the wait is summed over the host's
/// threads, and a competitor on one CPU makes each of them wait. Nothing where no takers
/// were read.
pub fn while_these_ran(ran: &[CpuTaker], wall_ms: f64) -> String {
    if ran.is_empty() {
        return String::new();
    }
    let mattered: Vec<CpuTaker> = ran
        .iter()
        .filter(|taker| taker.cpu_ms >= 0.1 * wall_ms)
        .cloned()
        .collect();
    match mattered.is_empty() {
        true => ", while no other process kept a CPU busy a tenth of the time (its own threads \
                 queued behind each other, a quota, or the hypervisor's steal)"
            .to_owned(),
        false => format!(", while these used the CPUs: {}", takers(&mattered)),
    }
}

fields! {
    impl HostScheduling: pub fn write_cells(entry: Option<&HostScheduling>, row: &mut Row) -> row {}
    RUN_DELAY "sched_run_delay_ms" Ms "time the host's threads spent runnable but waiting for a CPU during the entry (schedstat at both boundaries; a thread that exited before the end is missed): the CPU contention the host's own CPU time cannot show" = entry.map(|e| e.run_delay_ms);
    TIMESLICES "sched_timeslices" Count "times the scheduler put one of the host's threads on a CPU during the entry (schedstat)" = entry.map(|e| e.timeslices);
    OTHERS_CPU "sched_others_cpu_ms" Ms "CPU time every other process used during the entry, the profiler included (utime and stime of /proc/PID/stat, with the children each waited for, at both boundaries; clock ticks, 10 ms here)" = entry.and_then(|e| e.others_cpu_ms);
    THROTTLED "sched_throttled_ms" Ms "time the host's cgroup was held back by its CPU quota during the entry (cpu.stat's throttled_usec, v1's throttled_time): its threads runnable, no CPU busy, which sched_run_delay_ms counts as waiting for a CPU; empty where its cgroup has no CPU controller" = entry.and_then(|e| e.quota).map(|q| q.throttled_ms);
    THROTTLED_PERIODS "sched_throttled_periods" Count "the quota's enforcement periods during the entry in which the host's cgroup used its quota and waited for the next (cpu.stat's nr_throttled)" = entry.and_then(|e| e.quota).map(|q| q.throttled_periods);
    QUOTA "sched_quota_cpus" Ratio "the host's cgroup's CPU quota at the entry's end, in CPUs (cpu.max, v1's cpu.cfs_quota_us); empty without one" = entry.and_then(|e| e.quota).and_then(|q| q.quota_cpus);
    RAN_INSTEAD "sched_ran_instead" Text "the three other processes that used the most CPU during the entry, most first, each as command (pid, cgroup) and its CPU time: what ran while the host's threads waited for a CPU (sched_run_delay_ms). Not from the switches: one that began and ended inside the entry is missed, unless its parent waited for it" = entry.filter(|e| !e.ran_instead.is_empty()).map(|e| takers(&e.ran_instead));
}

impl EntrySampling {
    /// No samples yet.
    pub fn unsampled() -> EntrySampling {
        EntrySampling {
            samples: 0,
            rss_peak_kb: None,
            handles: Handles::default(),
            maps_limit: None,
            threads_peak: None,
            vms_peak_kb: None,
            psi_some_us: None,
            psi_full_us: None,
            zones_lowest: Lowest {
                free_pages: 0,
                band: Band::Baseline,
            },
            zone_lowest: Vec::new(),
            vmstat: Vec::new(),
            cpu: None,
            tlb_shootdowns: None,
        }
    }

    /// Takes a reading of the host's RSS made outside the sampler into the peak: the host
    /// can grow and shrink again between the runner's reading and the boundary sample.
    pub fn cover_rss(&mut self, rss_kb: u64) {
        self.rss_peak_kb = self.rss_peak_kb.max(Some(rss_kb));
    }

    /// The `zone_*` cells: each zone's fewest free pages and lowest band.
    fn zone_cells(&self) -> impl Iterator<Item = (String, Value)> + '_ {
        self.zone_lowest.iter().flat_map(|(zone, lowest)| {
            [
                (
                    zone.column("min_free_pages"),
                    lowest.map(|l| l.free_pages).into(),
                ),
                (
                    zone.column("lowest_band"),
                    lowest.map(|l| l.band.name()).into(),
                ),
            ]
        })
    }
}

impl ZoneId {
    /// `zone_<node>_<name>_<what>`, the column name of one of the zone's values.
    pub fn column(&self, what: &str) -> String {
        format!("zone_{}_{}_{what}", self.node, self.name)
    }
}

#[cfg(test)]
mod takers_tests {
    use super::*;

    fn taker(command: &str, cpu_ms: f64) -> CpuTaker {
        CpuTaker {
            command: command.into(),
            pid: 7,
            profiler: false,
            cgroup: String::new(),
            cpu_ms,
        }
    }

    /// Over 4 s, a kworker's 10 ms is no answer: a wait with no taker busy a tenth of the
    /// stretch says none took it, not the kworker.
    #[test]
    fn only_takers_of_a_tenth_of_the_wait_are_said() {
        let ran = [taker("sh", 900.0), taker("kworker/0:4", 10.0)];
        assert_eq!(
            while_these_ran(&ran, 4000.0),
            ", while these used the CPUs: sh (pid 7) 900 ms"
        );
        assert!(
            while_these_ran(&ran[1..], 4000.0)
                .starts_with(", while no other process kept a CPU busy a tenth of the time")
        );
        assert_eq!(while_these_ran(&[], 4000.0), "");
    }
}
