//! What an entry's probes counted, and the columns of commands.csv they write.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use skillprof_common::{
    ADVICE_NAMES, CONTEXTS, CTX_NAMES, Counters, ReclaimCounts, SYSCALL_NAMES, SYSCALLS,
};

use super::{Mechanism, Probe, SkillRow};
use crate::record::field::{Column, Row, Unit, Value, fields};

/// Everything the probes attributed to one entry.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct ProbeMetrics {
    pub(crate) counters: Counters,
    /// Per probe name: the mechanism that attached (absent: not attached).
    pub(crate) attached: HashMap<Probe, Mechanism>,
    /// Major faults from the perf counter during the entry (`None`: no counter).
    pub majflt_perf: Option<u64>,
    /// Whether `--events` streamed (the events_* columns).
    pub(crate) streaming: bool,
    /// Per skill and phase (skills.csv); `None` when the host had no markers.
    #[serde(default)]
    pub skills: Option<Vec<SkillRow>>,
    /// The instants (CLOCK_MONOTONIC ns) of the entry's code publishes, until
    /// [`ProbeMetrics::name_publishes`] turns them into `published_during`.
    #[serde(skip)]
    pub(crate) published_at: Vec<u64>,
    /// The requests in flight when the host published code.
    #[serde(default)]
    pub published_during: PublishedDuring,
}

/// The entry's code publishes (a module compiled, or loaded from a cache) against the requests
/// in flight at each: on a host without markers, what names a skill compiled in a request.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishedDuring {
    /// Publishes with at least one of the entry's requests in flight.
    pub in_requests: u64,
    /// Per skill: the publishes during one of its requests.
    pub skills: std::collections::BTreeMap<String, u64>,
}

/// One request to execute a skill, on the clock the probes use (CLOCK_MONOTONIC ns).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestSpan {
    pub skill: String,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// What an entry's stacks came to: the events whose stack was walked, those whose stack
/// was lost, and those whose innermost frame has a name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackSummary {
    pub samples: u64,
    pub lost: u64,
    pub top_named: u64,
}

impl ProbeMetrics {
    /// Names the requests in flight at each of the entry's code publishes.
    pub fn name_publishes(&mut self, requests: &[RequestSpan]) {
        let mut during = PublishedDuring::default();
        for &at in &self.published_at {
            let skills: std::collections::BTreeSet<&str> = requests
                .iter()
                .filter(|r| (r.start_ns..=r.end_ns).contains(&at))
                .map(|r| r.skill.as_str())
                .collect();
            during.in_requests += u64::from(!skills.is_empty());
            for skill in skills {
                *during.skills.entry(skill.to_owned()).or_default() += 1;
            }
        }
        self.published_during = during;
    }

    /// A figure of `probe`'s counters; `None` if that probe did not attach.
    pub fn read<T>(&self, probe: Probe, figure: impl Fn(&Counters) -> T) -> Option<T> {
        self.attached
            .contains_key(&probe)
            .then(|| figure(&self.counters))
    }

    fn measured(&self, column: &ProbeColumn) -> Value {
        let mechanism = self.attached.get(&column.probe);
        let count = |read: &Read| read(&self.counters);
        match &column.read {
            Reading::MajfltPerf => self.majflt_perf.into(),
            Reading::Events(read) => self.streaming.then(|| count(read)).into(),
            Reading::FexitOnly(read) => (mechanism == Some(&Mechanism::Fentry))
                .then(|| count(read))
                .into(),
            Reading::Count(read) => mechanism.map(|_| count(read)).into(),
            Reading::Scaled(read, factor) => mechanism.map(|_| count(read) as f64 * factor).into(),
        }
    }

    /// The probe columns of an entry: absent without probes (`--no-probes`) or where a probe
    /// did not attach, so that every row has the same columns.
    pub fn write_cells(probes: Option<&ProbeMetrics>, row: &mut Row) {
        for column in probe_columns() {
            let value = probes.map_or(Value::Absent, |probes| probes.measured(column));
            row.put(&column.column, value);
        }
    }
}

type Read = Box<dyn Fn(&Counters) -> u64 + Send + Sync>;

/// Where a probe column's value comes from.
enum Reading {
    /// A count, as it is.
    Count(Read),
    /// A time in nanoseconds or microseconds, times the factor to the column's unit.
    Scaled(Read, f64),
    /// Only the fexit mechanism of the probe sees it.
    FexitOnly(Read),
    /// Only while `--events` streams.
    Events(Read),
    /// Not BPF: the perf counter of major faults.
    MajfltPerf,
}

/// One probe column: the column, the probe it needs, and where its value comes from.
pub struct ProbeColumn {
    pub column: Column,
    pub probe: Probe,
    read: Reading,
}

/// What each syscall kind is, for its columns' help (its `_bytes` differ).
const SYSCALL_HELP: [(&str, &str); SYSCALLS] = [
    ("host mmap(2) calls", "requested lengths"),
    ("host munmap(2) calls", "lengths"),
    ("host mremap(2) calls", "new lengths"),
    ("host mprotect(2) calls", "lengths"),
    ("host madvise(2) calls, all advice", "lengths"),
    (
        "host brk(2) calls",
        "how far the break moved, either way (brk returns no errno: a call whose break did not move as asked is an error, and _enomem, _einval and _eagain stay 0)",
    ),
];

/// Every column the probes write, in row order, each with its own line in the reference:
/// built once from the tables of syscall kinds, advice and reclaim contexts, and kept for the
/// whole process.
pub fn probe_columns() -> &'static [ProbeColumn] {
    static COLUMNS: OnceLock<Vec<ProbeColumn>> = OnceLock::new();
    COLUMNS.get_or_init(|| {
        let mut out = Vec::new();
        let mut col = |name: String, unit: Unit, help: String, probe: Probe, read: Reading| {
            let column = Column {
                name: name.into(),
                unit,
                help: help.into(),
            };
            out.push(ProbeColumn {
                column,
                probe,
                read,
            });
        };
        fn count(read: impl Fn(&Counters) -> u64 + Send + Sync + 'static) -> Reading {
            Reading::Count(Box::new(read))
        }
        fn ns_as(read: impl Fn(&Counters) -> u64 + Send + Sync + 'static, factor: f64) -> Reading {
            Reading::Scaled(Box::new(read), factor)
        }
        let (us, ms) = (1e-3, 1e-6);
        use Probe::*;
        use Unit::{Bytes, Count, Ms, Us};

        for (kind, name) in SYSCALL_NAMES.iter().enumerate() {
            let (what, bytes) = SYSCALL_HELP[kind];
            let sc = move |c: &Counters| c.syscalls[kind];
            let errors = |which: &str| format!("{what} that failed with {which}");
            col(format!("{name}_calls"), Count, format!("{what} (a call counts in the entry current when it returned)"), Syscalls, count(move |c| sc(c).calls));
            col(format!("{name}_bytes"), Bytes, format!("{what}: their {bytes}"), Syscalls, count(move |c| sc(c).bytes));
            col(format!("{name}_errors"), Count, format!("{what} that failed"), Syscalls, count(move |c| sc(c).errors));
            col(format!("{name}_enomem"), Count, errors("ENOMEM (out of memory, or of mappings: vm.max_map_count)"), Syscalls, count(move |c| sc(c).enomem));
            col(format!("{name}_einval"), Count, errors("EINVAL"), Syscalls, count(move |c| sc(c).einval));
            col(format!("{name}_eagain"), Count, errors("EAGAIN"), Syscalls, count(move |c| sc(c).eagain));
            col(format!("{name}_lat_us"), Us, format!("{what}: time from enter to exit, summed over the calls (with --syscall-latency)"), SyscallLatency, ns_as(move |c| sc(c).lat_ns, us));
            col(format!("{name}_lat_max_us"), Us, format!("{what}: the slowest call, enter to exit (with --syscall-latency)"), SyscallLatency, ns_as(move |c| sc(c).lat_max_ns, us));
        }
        for (class, name) in ADVICE_NAMES.iter().enumerate() {
            col(format!("madv_{name}_calls"), Count, format!("madvise(2) calls with advice {name}"), Syscalls, count(move |c| c.madvise[class].calls));
            col(format!("madv_{name}_bytes"), Bytes, format!("madvise(2) calls with advice {name}: their lengths"), Syscalls, count(move |c| c.madvise[class].bytes));
        }
        col("exec_calls".into(), Count, "code published: the host's mmap and mprotect calls that made memory executable (PROT_EXEC) and succeeded. Any wasmtime host does this for each module it compiles or loads, so a skill compiled a second time shows here".into(), Syscalls, count(|c| c.exec.calls));
        col("exec_bytes".into(), Bytes, "code published: the lengths of exec_calls".into(), Syscalls, count(|c| c.exec.bytes));

        col("faults_user".into(), Count, "user-mode page faults of the host (exceptions:page_fault_user, or fexit handle_mm_fault without the retried attempts)".into(), PageFaults, count(|c| c.faults.user));
        col("faults_user_write".into(), Count, "faults_user that were writes".into(), PageFaults, count(|c| c.faults.user_write));
        col("faults_user_read".into(), Count, "faults_user that were reads or instruction fetches (faults_user - faults_user_write)".into(), PageFaults, count(|c| c.faults.user.saturating_sub(c.faults.user_write)));
        col("faults_major".into(), Count, "faults_user that were major; only fexit handle_mm_fault sees this (empty otherwise; see majflt_perf)".into(), PageFaults, Reading::FexitOnly(Box::new(|c| c.faults.major)));
        col("faults_kernel".into(), Count, "page faults the host took in kernel mode on its own user addresses, e.g. read(2) into a fresh buffer (exceptions:page_fault_kernel, or fexit handle_mm_fault); the kernel counts them in minflt too".into(), PageFaults, count(|c| c.faults.kernel));
        col("faults_gup".into(), Count, "page faults taken for get_user_pages on the host's behalf (MAP_POPULATE, mlock, MADV_POPULATE_*, O_DIRECT I/O), which the kernel counts in minflt; only fexit handle_mm_fault sees them (empty otherwise)".into(), PageFaults, Reading::FexitOnly(Box::new(|c| c.faults.gup)));
        col("majflt_perf".into(), Count, "major faults of the host from a perf software counter (PAGE_FAULTS_MAJ, every thread)".into(), MajorFaults, Reading::MajfltPerf);

        col("kswapd_wakes".into(), Count, "kswapd, system-wide: times it woke".into(), Kswapd, count(|c| c.kswapd.wakes));
        col("kswapd_sleeps".into(), Count, "kswapd, system-wide: times it went to sleep".into(), Kswapd, count(|c| c.kswapd.sleeps));
        col("kswapd_awake_ms".into(), Ms, "kswapd, system-wide: time awake, counted when it sleeps".into(), Kswapd, ns_as(|c| c.kswapd.awake_ns, ms));
        col("kswapd_woken_by_host".into(), Count, "allocations of the host that asked kswapd to wake".into(), Kswapd, count(|c| c.kswapd.woken_by_host));
        col("kswapd_woken_by_others".into(), Count, "allocations of other processes that asked kswapd to wake".into(), Kswapd, count(|c| c.kswapd.woken_by_others));

        type Group = fn(&Counters) -> &ReclaimCounts;
        let reclaims: [(&str, &str, Probe, Group); 2] = [
            ("direct_reclaim", "direct reclaim", DirectReclaim, |c| &c.direct),
            ("memcg_reclaim", "memcg limit reclaim", MemcgReclaim, |c| &c.memcg),
        ];
        for (prefix, what, probe, group) in reclaims {
            col(format!("{prefix}_count"), Count, format!("{what} in the host's context: times it ran"), probe, count(move |c| group(c).host));
            col(format!("{prefix}_ms"), Ms, format!("{what} in the host's context: time, in total"), probe, ns_as(move |c| group(c).host_ns, ms));
            col(format!("{prefix}_max_ms"), Ms, format!("{what} in the host's context: the longest"), probe, ns_as(move |c| group(c).host_max_ns, ms));
            col(format!("{prefix}_pages"), Count, format!("{what} in the host's context: pages reclaimed"), probe, count(move |c| group(c).host_pages));
            col(format!("{prefix}_others_count"), Count, format!("{what} by other processes: times it ran"), probe, count(move |c| group(c).others));
            col(format!("{prefix}_others_pages"), Count, format!("{what} by other processes: pages reclaimed"), probe, count(move |c| group(c).others_pages));
        }

        let lru = "LRU shrinking (mm_vmscan_lru_shrink_inactive/active)";
        let contexts = CTX_NAMES.iter().enumerate().take(CONTEXTS);
        for (ctx, name) in contexts.clone() {
            col(format!("lru_{name}_calls"), Count, format!("{lru} by {name} reclaim, system-wide: calls"), LruShrink, count(move |c| c.lru[ctx].calls));
            col(format!("lru_{name}_scanned"), Count, format!("{lru} by {name} reclaim, system-wide: pages scanned (inactive) or taken (active)"), LruShrink, count(move |c| c.lru[ctx].scanned));
            col(format!("lru_{name}_reclaimed"), Count, format!("{lru} by {name} reclaim, system-wide: pages reclaimed"), LruShrink, count(move |c| c.lru[ctx].reclaimed));
        }
        col("lru_host_calls".into(), Count, format!("{lru} in the host's own context: calls"), LruShrink, count(|c| c.lru_host.calls));
        col("lru_host_scanned".into(), Count, format!("{lru} in the host's own context: pages scanned or taken"), LruShrink, count(|c| c.lru_host.scanned));
        col("lru_host_reclaimed".into(), Count, format!("{lru} in the host's own context: pages reclaimed"), LruShrink, count(|c| c.lru_host.reclaimed));

        let shrink = "shrink_node (fentry/fexit or kprobes only; empty where neither attaches)";
        for (ctx, name) in contexts {
            col(format!("shrink_node_{name}_calls"), Count, format!("{shrink} by {name} reclaim: calls"), ShrinkNode, count(move |c| c.shrink_node[ctx].calls));
            col(format!("shrink_node_{name}_ms"), Ms, format!("{shrink} by {name} reclaim: time"), ShrinkNode, ns_as(move |c| c.shrink_node[ctx].ns, ms));
        }
        col("shrink_node_host_calls".into(), Count, format!("{shrink} in the host's context: calls"), ShrinkNode, count(|c| c.shrink_node_host.calls));
        col("shrink_node_host_ms".into(), Ms, format!("{shrink} in the host's context: time"), ShrinkNode, ns_as(|c| c.shrink_node_host.ns, ms));

        col("slab_shrinks".into(), Count, "slab shrinkers, system-wide: shrinks".into(), ShrinkSlab, count(|c| c.slab.shrinks));
        col("slab_freed".into(), Count, "slab shrinkers, system-wide: objects freed".into(), ShrinkSlab, count(|c| c.slab.freed));
        col("slab_ms".into(), Ms, "slab shrinkers, system-wide: time".into(), ShrinkSlab, ns_as(|c| c.slab.ns, ms));
        col("slab_host_shrinks".into(), Count, "slab shrinkers in the host's context: shrinks".into(), ShrinkSlab, count(|c| c.slab.host_shrinks));
        col("slab_host_ms".into(), Ms, "slab shrinkers in the host's context: time".into(), ShrinkSlab, ns_as(|c| c.slab.host_ns, ms));

        col("throttle_count".into(), Count, "reclaim throttling (mm_vmscan_throttled), system-wide: tasks delayed".into(), Throttle, count(|c| c.throttle.count));
        col("throttle_ms".into(), Ms, "reclaim throttling, system-wide: time delayed".into(), Throttle, ns_as(|c| c.throttle.us, 1e-3));
        col("throttle_host_count".into(), Count, "reclaim throttling of the host: times delayed".into(), Throttle, count(|c| c.throttle.host_count));
        col("throttle_host_ms".into(), Ms, "reclaim throttling of the host: time delayed".into(), Throttle, ns_as(|c| c.throttle.host_us, 1e-3));

        col("marks_hits".into(), Count, "the host's markers (its ledger; empty for a host without one): marks that began or ended a stretch of a skill's phase".into(), Markers, count(|c| c.marks.hits));
        col("marks_overflow".into(), Count, "marks for skills beyond the ledger's rows, and (calls and exact modes) memory calls counted in skills.csv's host row because the skill table was full or another thread's mark held the thread's place (threads whose ids share their low 16 bits)".into(), Markers, count(|c| c.marks.overflow));

        let batched = "the pooling allocator's batched decommits: wasmtime's decommit_pages with more than one range (its decommit batch size above 1), given back with one process_madvise(2) call (where the kernel refuses it, wasmtime falls back to one madvise per range); in every mode";
        col("process_madvise_calls".into(), Count, format!("{batched}: batches"), Decommits, count(|c| c.process_madvise.calls));
        col("process_madvise_ranges".into(), Count, format!("{batched}: address ranges they named"), Decommits, count(|c| c.process_madvise.ranges));
        col("process_madvise_bytes".into(), Bytes, format!("{batched}: bytes they gave back (MADV_DONTNEED)"), Decommits, count(|c| c.process_madvise.bytes));
        col("process_madvise_unread".into(), Count, format!("{batched}: ranges beyond a batch's first 128, whose bytes are not in process_madvise_bytes"), Decommits, count(|c| c.process_madvise.unread));
        let scans = "the pooling allocator's scans before reusing a memory in place: wasmtime's ioctl(PAGEMAP_SCAN) (its pagemap_scan setting, with pages kept resident), seen at rustix's _ioctl; in every mode";
        col("pagemap_scan_calls".into(), Count, format!("{scans}: ioctls"), PagemapScan, count(|c| c.pagemap_scan.calls));
        col("pagemap_scan_bytes".into(), Bytes, format!("{scans}: bytes of address space they walked (end - start as asked)"), PagemapScan, count(|c| c.pagemap_scan.bytes));
        col("code_publishes".into(), Count, "code published: wasmtime's CodeMemory::publish in the host, once per module compiled or loaded from a cache, seen on any wasmtime host (markers or not); in every mode".into(), Publish, count(|c| c.publish.calls));

        col("events_sent".into(), Count, "with --events: events sent to the ring buffer during the entry".into(), Syscalls, Reading::Events(Box::new(|c| c.events.sent)));
        col("events_lost".into(), Count, "with --events: events lost, the ring buffer full".into(), Syscalls, Reading::Events(Box::new(|c| c.events.lost)));
        out
    })
}

fields! {
    impl StackSummary: pub fn write_cells(summary: Option<&StackSummary>, row: &mut Row) -> row {}
    STACKS_SAMPLES "stacks_samples" Count "with --stacks: the host's user stacks walked at its page faults and address-space syscalls during the entry (stacks/ENTRY.folded and ENTRY.svg show them)" = summary.map(|s| s.samples);
    STACKS_LOST "stacks_lost" Count "with --stacks: stacks not kept (the stack map was full, or another stack had the same hash)" = summary.map(|s| s.lost);
    STACKS_TOP_NAMED "stacks_top_named" Count "with --stacks: stacks whose innermost frame has a name (a native symbol, or a wasm function from wasmtime's perf map)" = summary.map(|s| s.top_named);
}

impl ProbeMetrics {
    /// Whether the entry's programs counted its memory calls by skill (exact mode): where
    /// they did not, skills.csv leaves those cells empty, never 0.
    pub fn calls_by_skill(&self) -> bool {
        self.attached.contains_key(&Probe::Syscalls)
    }
}
