//! What the probes measured and how they attached: plain data, filled in by `crate::probes`.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use skillprof_common::{
    ADVICE_NAMES, CONTEXTS, CTX_NAMES, Counters, FAILURE_NAMES, FAILURE_PHASES, ReclaimCounts,
    SYSCALL_NAMES, SYSCALLS, SkillCounters,
};

use super::field::{Column, Row, Unit, Value, fields};

/// How a program is attached to the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mechanism {
    /// fentry/fexit: BPF trampolines on kernel functions (BTF).
    Fentry,
    /// kprobe/kretprobe on kernel functions.
    Kprobe,
    /// BTF-typed raw tracepoints.
    TpBtf,
    /// A classic tracepoint, found through tracefs (`events/<category>/<name>`).
    Tracepoint,
    /// A perf software counter (not BPF): the major-fault count.
    PerfCounter,
    /// A uprobe on a function of the host (its markers).
    Uprobe,
    /// Counts the host keeps itself in memory skillprof maps (its ledger), read at the
    /// boundaries: no program.
    Ledger,
}

/// What happened to one mechanism of a probe's plan.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Attached,
    Failed,
    /// Not tried: excluded by `--mechanism`/`--force-fallback`, or a better one attached.
    Skipped,
    /// Not tried: the probe taxes every process, and the run was in the host-only mode
    /// (`--probes host-only`).
    ExactOnly,
    /// Not tried: it measures what the run did not ask for (`--syscall-latency`).
    NotAsked,
}

/// Which programs a session runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum ProbeMode {
    /// Every memory call (mmap, munmap, mremap, mprotect, madvise, brk) and page fault of the
    /// host, by kind, entry and skill: programs on the syscall and fault paths, which every
    /// process on the machine passes through.
    Exact,
    /// Only the host pays: no program on any syscall or fault path; faults per entry are the
    /// kernel's own counts, per skill the host's ledger.
    #[default]
    HostOnly,
}

impl ProbeMode {
    /// As the flag and meta.json spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeMode::Exact => "exact",
            ProbeMode::HostOnly => "host-only",
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Attempt {
    pub mechanism: Mechanism,
    pub outcome: Outcome,
    pub detail: String,
}

/// What happened to one probe in this run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProbeStatus {
    pub probe: Probe,
    /// The mechanism that attached or, if none did, the last one tried.
    pub mechanism: Mechanism,
    pub attached: bool,
    /// Where it attached, or why not; a mechanism that failed before another one attached is
    /// listed too, so the cost of the fallback is visible.
    pub detail: String,
    /// Every mechanism of the plan, in plan order.
    pub attempts: Vec<Attempt>,
    /// The BPF programs that run for it (for the cost table).
    pub programs: Vec<String>,
}

impl ProbeStatus {
    /// Left out by the host-only mode rather than refused by the kernel.
    pub fn exact_only(&self) -> bool {
        self.left_out_as(Outcome::ExactOnly)
    }

    /// Left out because the run did not ask for what it measures.
    pub fn not_asked(&self) -> bool {
        self.left_out_as(Outcome::NotAsked)
    }

    fn left_out_as(&self, outcome: Outcome) -> bool {
        !self.attached
            && !self.attempts.is_empty()
            && self.attempts.iter().all(|a| a.outcome == outcome)
    }
}

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

/// What a host thread was doing for a skill when an event happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// No marker covered it: the runtime, the allocator, background threads.
    Host,
    Compile,
    Instantiate,
    Call,
}

/// One skill's phase in one entry: what its threads did in it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SkillRow {
    /// The skill's name; `None` for the unattributed row.
    pub skill: Option<String>,
    pub phase: Phase,
    pub counts: SkillCounters,
}

/// How the teardown was bounded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TeardownSource {
    /// fentry/fexit (or kprobes) on exit_mmap.
    ExitMmap,
    /// The first and last rss_stat change of the host's mm after exit began.
    RssStat,
}

/// One part of the stop time.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StopPart {
    pub name: String,
    /// CLOCK_MONOTONIC ns at which the part starts.
    pub start_ns: u64,
    pub duration_ns: u64,
    /// Whether its end instant was observed in order (false: zero or clamped).
    pub observed: bool,
    /// One sentence for the explanation.
    pub detail: String,
}

/// The stop time cut into parts that sum to it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StopBreakdown {
    pub total_ns: u64,
    pub parts: Vec<StopPart>,
    pub teardown_source: Option<TeardownSource>,
    pub teardown_pages_freed: Option<u64>,
    pub drain_munmap_calls: u64,
    pub drain_munmap_bytes: u64,
}

/// What an entry's stacks came to: the events whose stack was walked, those whose stack
/// was lost, and those whose innermost frame has a name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackSummary {
    pub samples: u64,
    pub lost: u64,
    pub top_named: u64,
}

/// How tracefs came to be available.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tracefs {
    AlreadyMounted,
    /// Mounted by this run; it stays mounted afterwards, as if mounted by hand.
    MountedNow,
}

/// The profiler's own cost.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProbeCosts {
    /// How BPF stats were enabled. `None`: not asked for (`--self-cost` off, the default),
    /// or they could not be (see `stats_error`); `programs` is then empty.
    pub stats: Option<StatsSource>,
    pub stats_error: Option<String>,
    pub programs: Vec<ProgramCost>,
    pub total_runs: u64,
    pub total_run_ns: u64,
    pub events_streamed: bool,
    /// Events the programs put in the ring, and those that did not fit.
    pub events_sent: u64,
    pub events_lost: u64,
    /// Events written to events.csv so far.
    pub events_written: Option<u64>,
    /// What the programs logged (see [`ProbeSession::diagnostics`]).
    pub diagnostics: Vec<String>,
    /// Without stats: the estimate from the cost model, or why there is none.
    pub modelled: Option<Modelled>,
    pub model_error: Option<String>,
}

/// One BPF program's runs. `runs` counts every invocation, including the ones that return
/// after the tgid compare (e.g. the raw syscall tracepoints run for every syscall).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProgramCost {
    pub probe: Probe,
    pub program: String,
    pub mechanism: Mechanism,
    pub runs: u64,
    pub run_ns: u64,
    pub ns_per_run: Option<f64>,
}

/// How stats were turned on, for the cost report.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StatsSource {
    /// BPF_ENABLE_STATS fd: off again when skillprof exits, however it exits.
    EnableStatsFd,
    /// kernel.bpf_stats_enabled written, previous value restored on drop.
    Sysctl,
    /// kernel.bpf_stats_enabled was already 1; left alone.
    AlreadyOn,
}

/// What one kind of counted event costs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Per {
    /// One matching syscall, enter and exit (half a measured mmap+munmap pair).
    Syscall,
    /// One page fault of the profiled process.
    Fault,
    /// One call of the host's marker (`skillhost_mark`): the uprobe and its program.
    Mark,
}

/// Thread-CPU ns added per event: the median over the benchmark's rounds and its bootstrap
/// 95% interval.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Ns {
    pub median: f64,
    pub lo: f64,
    pub hi: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Term {
    pub counted: Counted,
    pub ns: Ns,
}

/// The estimate: Σ events × ns per event, with the interval carried through.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Modelled {
    pub measured_at: String,
    pub rounds: usize,
    pub terms: Vec<Term>,
    pub total_ns: Ns,
}

/// Events one probe counted over a session.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Counted {
    pub probe: Probe,
    pub mechanism: Mechanism,
    pub per: Per,
    pub events: u64,
}

/// A kernel event group skillprof observes (a probe), or a counter beside them: the name
/// meta.json, the attach table and every record use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Probe {
    Syscalls,
    /// The syscalls' entry programs that time each call (`--syscall-latency`).
    SyscallLatency,
    PageFaults,
    Kswapd,
    DirectReclaim,
    MemcgReclaim,
    LruShrink,
    ShrinkNode,
    ShrinkSlab,
    Throttle,
    Exit,
    RssStat,
    ExitMmap,
    /// The perf software counter of major faults (not BPF).
    MajorFaults,
    /// The uprobe on the host's marker function.
    Markers,
    /// The uprobe on wasmtime's `decommit_pages` in the host (batched, process_madvise).
    Decommits,
    /// The uprobe on rustix's `_ioctl` in the host (wasmtime's PAGEMAP_SCAN).
    PagemapScan,
    /// The uprobe on wasmtime's `CodeMemory::publish` in the host.
    Publish,
}

impl Probe {
    /// Whether its programs run for every process's events, not only the host's: a syscall
    /// tracepoint slows every syscall on the machine, and the fault programs run on every
    /// fault. Those attach in exact mode only.
    pub fn taxes_every_process(self) -> bool {
        matches!(
            self,
            Probe::Syscalls | Probe::SyscallLatency | Probe::PageFaults
        )
    }

    /// Whether it follows a function of the host's binary rather than the kernel: a host
    /// without that function leaves it off, on any kernel.
    pub fn follows_the_host(self) -> bool {
        matches!(
            self,
            Probe::Markers | Probe::Decommits | Probe::PagemapScan | Probe::Publish
        )
    }

    pub const ALL: [Probe; 18] = [
        Probe::Syscalls,
        Probe::SyscallLatency,
        Probe::PageFaults,
        Probe::Kswapd,
        Probe::DirectReclaim,
        Probe::MemcgReclaim,
        Probe::LruShrink,
        Probe::ShrinkNode,
        Probe::ShrinkSlab,
        Probe::Throttle,
        Probe::Exit,
        Probe::RssStat,
        Probe::ExitMmap,
        Probe::MajorFaults,
        Probe::Markers,
        Probe::Decommits,
        Probe::PagemapScan,
        Probe::Publish,
    ];

    /// As meta.json and the attach table name it.
    pub fn name(self) -> &'static str {
        match self {
            Probe::Syscalls => "syscalls",
            Probe::SyscallLatency => "syscall_latency",
            Probe::PageFaults => "page_faults",
            Probe::Kswapd => "kswapd",
            Probe::DirectReclaim => "direct_reclaim",
            Probe::MemcgReclaim => "memcg_reclaim",
            Probe::LruShrink => "lru_shrink",
            Probe::ShrinkNode => "shrink_node",
            Probe::ShrinkSlab => "shrink_slab",
            Probe::Throttle => "throttle",
            Probe::Exit => "exit",
            Probe::RssStat => "rss_stat",
            Probe::ExitMmap => "exit_mmap",
            Probe::MajorFaults => "major_faults",
            Probe::Markers => "markers",
            Probe::Decommits => "decommits",
            Probe::PagemapScan => "pagemap_scan",
            Probe::Publish => "code_publish",
        }
    }
}

impl std::fmt::Display for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
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
            row.put(column.column, value);
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
    pub column: &'static Column,
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

/// Every column the probes write, in row order, each with its own line in the reference.
/// Built once; the generated names and help live for the whole process.
pub fn probe_columns() -> &'static [ProbeColumn] {
    static COLUMNS: OnceLock<Vec<ProbeColumn>> = OnceLock::new();
    COLUMNS.get_or_init(|| {
        let mut out = Vec::new();
        let mut col = |name: String, unit: Unit, help: String, probe: Probe, read: Reading| {
            let column: &'static Column = Box::leak(Box::new(Column {
                name: Box::leak(name.into_boxed_str()),
                unit,
                help: Box::leak(help.into_boxed_str()),
            }));
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
        col("faults_user_read".into(), Count, "faults_user that were reads or instruction fetches (faults_user - faults_user_write)".into(), PageFaults, count(|c| c.faults.user - c.faults.user_write));
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
        col("marks_overflow".into(), Count, "marks for skills beyond the ledger's rows, and (exact mode) events counted in skills.csv's host row because the skill table was full".into(), Markers, count(|c| c.marks.overflow));

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

/// The parts of a stop, in order, with what each spans (the stop_*_ms columns); every
/// breakdown has exactly these.
pub const STOP_PARTS: [(&str, &str); 6] = [
    ("signal", "signal (SIGTERM sent → delivered)"),
    ("drain", "drain (graceful shutdown → exit_group)"),
    ("exit", "exit (→ teardown starts)"),
    ("teardown", "address-space teardown"),
    ("last_thread", "last thread (→ parent notified)"),
    ("reap", "reap (→ reaped)"),
];

// The stop's columns: the parts in `STOP_PARTS` order, then what the drain and the teardown did.
fields! {
    impl StopBreakdown: pub fn write_cells(stop: Option<&StopBreakdown>, row: &mut Row) -> row {
        let ms = |ns: u64| ns as f64 / 1e6;
        let part = |i: usize| stop.and_then(|s| s.parts.get(i)).map(|p| ms(p.duration_ns));
    }
    STOP_TOTAL "stop_total_ms" Ms "stop only: from SIGTERM sent to the host reaped; the parts below sum to it" = stop.map(|s| ms(s.total_ns));
    STOP_SIGNAL "stop_signal_ms" Ms "stop only: SIGTERM sent → delivered" = part(0);
    STOP_DRAIN "stop_drain_ms" Ms "stop only: delivered → exit_group (the host's graceful drain)" = part(1);
    STOP_EXIT "stop_exit_ms" Ms "stop only: exit_group → the address-space teardown starts" = part(2);
    STOP_TEARDOWN "stop_teardown_ms" Ms "stop only: the address-space teardown" = part(3);
    STOP_LAST_THREAD "stop_last_thread_ms" Ms "stop only: teardown → the last thread exits and the parent is notified" = part(4);
    STOP_REAP "stop_reap_ms" Ms "stop only: notified → reaped" = part(5);
    STOP_DRAIN_MUNMAPS "stop_drain_munmaps" Count "stop only: munmap calls the host made while draining (between SIGTERM and exit_group)" = stop.map(|s| s.drain_munmap_calls);
    STOP_DRAIN_MUNMAP_BYTES "stop_drain_munmap_bytes" Bytes "stop only: what those munmap calls unmapped" = stop.map(|s| s.drain_munmap_bytes);
    STOP_TEARDOWN_PAGES "stop_teardown_pages" Count "stop only: pages the teardown freed" = stop.and_then(|s| s.teardown_pages_freed);
    STOP_TEARDOWN_BY "stop_teardown_by" Text "stop only: how the teardown was timed: exit_mmap (function probes) or rss_stat (the first to the last RSS decrement)" = stop.and_then(|s| s.teardown_source).map(|t| t.as_str());
}

fields! {
    impl StackSummary: pub fn write_cells(summary: Option<&StackSummary>, row: &mut Row) -> row {}
    STACKS_SAMPLES "stacks_samples" Count "with --stacks: the host's user stacks walked at its page faults and address-space syscalls during the entry (stacks/ENTRY.folded and ENTRY.svg show them)" = summary.map(|s| s.samples);
    STACKS_LOST "stacks_lost" Count "with --stacks: stacks not kept (the stack map was full, or another stack had the same hash)" = summary.map(|s| s.lost);
    STACKS_TOP_NAMED "stacks_top_named" Count "with --stacks: stacks whose innermost frame has a name (a native symbol, or a wasm function from wasmtime's perf map)" = summary.map(|s| s.top_named);
}

/// skills.csv's columns after the entry's own: one row per skill and phase of an entry.
pub mod skill_columns {
    use super::{FAILURE_NAMES, FAILURE_PHASES, Row, SYSCALL_NAMES, SkillRow, fields};

    fields! {
        impl SkillRow: pub fn write_cells(&self, row: &mut Row, calls_counted: bool) -> row {
            let c = &self.counts;
        }
        SKILL "skill" Text "the skill the host's markers named, or host: what no marker covered (the runtime, the allocator, background threads)" = self.skill.as_deref().unwrap_or("host");
        PHASE "phase" Text "compile, instantiate, call, or host" = self.phase.as_str();
        RUNS "runs" Count "times the phase ran for the skill in the entry" = c.phase.runs;
        TIME_MS "time_ms" Ms "time inside the phase, summed over its runs (a compile's worker threads included)" = c.phase.ns as f64 / 1e6;
        TASK_MINFLT "task_minflt" Count "minor page faults of the threads while they worked on the phase: each thread's own counter (getrusage RUSAGE_THREAD) from one of its marks to the next, kept by the host in its ledger, in every mode; the host row has none (the entry's minflt less the skills' is what no mark covered)" = c.task.minflt;
        TASK_MAJFLT "task_majflt" Count "major page faults, the same way" = c.task.majflt;
        TASK_CPU_MS "task_cpu_ms" Ms "CPU time the threads ran for the phase, the same way: a stretch's elapsed time when its thread was not switched out in it, getrusage's CPU time (as the scheduler last accounted it, at most the elapsed time) when it was" = c.task.cpu_ns as f64 / 1e6;
        // Each kind's calls and bytes side by side: mmap_calls, mmap_bytes, munmap_calls, ...
        SYSCALL_CALLS "*_calls" Count "per address-space syscall kind (mmap, munmap, mremap, mprotect, madvise, brk): <kind>_calls, the calls in the phase" => {
            for (name, calls) in SYSCALL_NAMES.iter().zip(&c.syscalls) {
                row.put_in(&SYSCALL_CALLS, format!("{name}_calls"), calls_counted.then_some(calls.calls))
                    .put_in(&SYSCALL_BYTES, format!("{name}_bytes"), calls_counted.then_some(calls.bytes));
            }
        };
        SYSCALL_BYTES "*_bytes" Bytes "per address-space syscall kind: <kind>_bytes, the lengths of those calls" => {};
        FAILED "failed_*" Count "per reason the host failed one of the skill's requests in the phase, from its ledger in every mode (empty in the other phases): failed_unloadable (compile: the module did not compile or load), failed_no_slot (instantiate: the pooling allocator had no free slot), and the call's failed_input (the skill rejected its input), failed_error (it reported an error), failed_trap (it trapped: a panic, an out-of-bounds access, memory growth refused), failed_output (its answer was not JSON), failed_deadline (it ran past the host's deadline)" for FAILURE_NAMES.iter().enumerate().map(|(reason, name)| {
            let in_phase = FAILURE_PHASES[reason] == self.phase as u32 && self.skill.is_some();
            (format!("failed_{name}"), in_phase.then_some(c.failed.by_reason[reason]))
        });
    }
}

impl ProbeMetrics {
    /// Whether the entry's programs counted its memory calls by skill (exact mode): where
    /// they did not, skills.csv leaves those cells empty, never 0.
    pub fn calls_by_skill(&self) -> bool {
        self.attached.contains_key(&Probe::Syscalls)
    }
}
