//! What the probes measured for one entry, as result-record cells. The BPF side only adds into
//! the typed counter groups of `skillprof_common::Counters`; each column's name, unit, probe
//! and documentation are declared once, in [`columns`].
//!
//! A probe that did not attach writes empty cells for its columns, never zeros.

use std::sync::OnceLock;

use skillprof_common::{
    ADVICE_NAMES, CONTEXTS, CTX_NAMES, Combine as _, Counters, ReclaimCounts, SYSCALL_NAMES,
    SYSCALLS,
};

use super::plan::Mechanism;
use crate::record::Row;

pub use crate::record::probes::ProbeMetrics;

/// Combines the per-CPU copies of one entry's counters: sums, and maxima for the `*_max`
/// counters.
pub fn combine<'a>(per_cpu: impl IntoIterator<Item = &'a Counters>) -> Counters {
    let mut total = Counters::default();
    for cpu in per_cpu {
        total.combine(cpu);
    }
    total
}

impl ProbeMetrics {
    /// A figure of `probe`'s counters; `None` if that probe did not attach.
    pub fn read<T>(&self, probe: &str, figure: impl Fn(&Counters) -> T) -> Option<T> {
        self.attached
            .contains_key(probe)
            .then(|| figure(&self.counters))
    }

    fn measured(&self, spec: &Column) -> Option<f64> {
        let mechanism = self.attached.get(spec.probe);
        let count = |read: &Read| read(&self.counters) as f64;
        match &spec.value {
            Value::MajfltPerf => self.majflt_perf.map(|v| v as f64),
            Value::Events(read) => self.streaming.then(|| count(read)),
            Value::FexitOnly(read) => (mechanism? == &Mechanism::Fentry).then(|| count(read)),
            Value::Count(read) => mechanism.map(|_| count(read)),
            Value::Scaled(read, unit) => mechanism.map(|_| count(read) * unit.factor()),
        }
    }
}

#[cfg(test)]
impl ProbeMetrics {
    /// `counters` as if every probe of the plan had attached by tp_btf, without --events.
    pub(crate) fn attached_everywhere(counters: Counters) -> Self {
        ProbeMetrics {
            counters,
            attached: super::PROBES
                .iter()
                .map(|probe| (probe.name.to_owned(), Mechanism::TpBtf))
                .collect(),
            majflt_perf: None,
            streaming: false,
            skills: None,
        }
    }
}

impl ProbeMetrics {
    /// The probe columns of an entry: empty cells without probes (`--no-probes`) or where a
    /// probe did not attach, so that every row has the same columns.
    pub fn write_cells(probes: Option<&ProbeMetrics>, row: &mut Row) {
        for spec in columns() {
            match probes.and_then(|probes| probes.measured(spec)) {
                None => row.missing(&spec.name),
                Some(value) if matches!(spec.value, Value::Scaled(..)) => {
                    row.float(&spec.name, value)
                }
                Some(value) => row.int(&spec.name, value as i128),
            };
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Unit {
    NsAsUs,
    NsAsMs,
    UsAsMs,
}

impl Unit {
    fn factor(self) -> f64 {
        match self {
            Self::NsAsUs => 1e-3,
            Self::NsAsMs => 1e-6,
            Self::UsAsMs => 1e-3,
        }
    }
}

type Read = Box<dyn Fn(&Counters) -> u64 + Send + Sync>;

enum Value {
    /// A count, written as an integer.
    Count(Read),
    /// A time, converted to the column's unit and written with decimals.
    Scaled(Read, Unit),
    /// Only the fexit mechanism of the probe sees it.
    FexitOnly(Read),
    /// Only while `--events` streams.
    Events(Read),
    /// Not BPF: the perf counter of major faults.
    MajfltPerf,
}

/// A documentation line: a column's name (or a family's, `mmap_*`) and what it holds.
type Doc = (&'static str, &'static str);

/// One probe column: its name, the probe it needs, where its value comes from, and what it
/// means.
pub struct Column {
    pub name: String,
    pub probe: &'static str,
    /// The documentation line: this column's own, or a family's (`mmap_*`) shared by every
    /// column of the family.
    pub doc: Doc,
    value: Value,
}

impl std::fmt::Debug for Column {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Column")
            .field("name", &self.name)
            .field("probe", &self.probe)
            .finish_non_exhaustive()
    }
}

/// The documentation of every probe column, one line per column or family, in row order.
pub fn documentation() -> Vec<Doc> {
    let mut docs: Vec<Doc> = Vec::new();
    for column in columns() {
        if !docs.contains(&column.doc) {
            docs.push(column.doc);
        }
    }
    docs
}

/// What each syscall kind's family of columns holds (its `_bytes` differ).
const SYSCALL_DOCS: [Doc; SYSCALLS] = [
    (
        "mmap_*",
        "host mmap(2) calls (probes): mmap_calls, mmap_bytes (requested lengths), mmap_errors and of those mmap_enomem (out of memory, or of mappings: vm.max_map_count), mmap_einval and mmap_eagain, mmap_lat_us (enter→exit, summed over calls), mmap_lat_max_us; a call counts in the entry current when it entered",
    ),
    (
        "munmap_*",
        "host munmap(2) calls: _calls, _bytes (lengths), _errors (_enomem, _einval, _eagain), _lat_us, _lat_max_us",
    ),
    (
        "mremap_*",
        "host mremap(2) calls: _calls, _bytes (new lengths), _errors (_enomem, _einval, _eagain), _lat_us, _lat_max_us",
    ),
    (
        "mprotect_*",
        "host mprotect(2) calls: _calls, _bytes (lengths), _errors (_enomem, _einval, _eagain), _lat_us, _lat_max_us",
    ),
    (
        "madvise_*",
        "host madvise(2) calls, all advice: _calls, _bytes (lengths), _errors (_enomem, _einval, _eagain), _lat_us, _lat_max_us",
    ),
    (
        "brk_*",
        "host brk(2) calls: _calls, _bytes (how far the break moved, either way), _errors (the break did not move as asked; brk returns no errno, so _enomem, _einval and _eagain stay 0), _lat_us, _lat_max_us",
    ),
];

const MADV_DOC: Doc = (
    "madv_*",
    "madvise per advice: madv_<advice>_calls and madv_<advice>_bytes, advice one of dontneed, free, remove, willneed, hugepage, nohugepage, cold, pageout, populate (read or write), collapse, other",
);
const EXEC_DOC: Doc = (
    "exec_*",
    "code published: the host's mmap and mprotect calls that made memory executable (PROT_EXEC) and succeeded, exec_calls and exec_bytes (their lengths). Any wasmtime host does this for each module it compiles or loads, so a skill compiled a second time shows here",
);
const KSWAPD_DOC: Doc = (
    "kswapd_*",
    "kswapd, system-wide: kswapd_wakes, kswapd_sleeps, kswapd_awake_ms (awake time, counted when it sleeps), kswapd_woken_by_host and kswapd_woken_by_others (allocations that asked it to wake)",
);
const LRU_DOC: Doc = (
    "lru_*",
    "LRU shrinking (mm_vmscan_lru_shrink_inactive/active), system-wide: lru_<ctx>_calls, _scanned (inactive: scanned, active: taken), _reclaimed, ctx one of kswapd, direct, memcg, other; and lru_host_* for the host's own context",
);
const SHRINK_NODE_DOC: Doc = (
    "shrink_node_*",
    "shrink_node (fentry/fexit or kprobes only; empty where neither attaches): shrink_node_<ctx>_calls and _ms per reclaim context, and shrink_node_host_calls/_ms",
);
const SLAB_DOC: Doc = (
    "slab_*",
    "slab shrinkers, system-wide: slab_shrinks, slab_freed (objects), slab_ms; in the host's context: slab_host_shrinks, slab_host_ms",
);
const THROTTLE_DOC: Doc = (
    "throttle_*",
    "reclaim throttling (mm_vmscan_throttled): throttle_count, throttle_ms (delayed), and throttle_host_count/_ms for the host",
);
const MARKS_DOC: Doc = (
    "marks_*",
    "the host's markers (uprobe; empty for a host without them): marks_hits, marker calls seen; marks_overflow, events counted in skills.csv's host row because the skill table was full",
);
const EVENTS_DOC: Doc = (
    "events_*",
    "with --events: events_sent to the ring buffer and events_lost (ring full) during the entry",
);

/// Every column the probes write, in row order.
pub fn columns() -> &'static [Column] {
    static COLUMNS: OnceLock<Vec<Column>> = OnceLock::new();
    COLUMNS.get_or_init(|| {
        use Unit::*;
        let mut out = Vec::new();
        let mut col = |name: String, probe: &'static str, doc, value| {
            out.push(Column {
                name,
                probe,
                doc,
                value,
            })
        };
        fn count(read: impl Fn(&Counters) -> u64 + Send + Sync + 'static) -> Value {
            Value::Count(Box::new(read))
        }
        fn scaled(read: impl Fn(&Counters) -> u64 + Send + Sync + 'static, unit: Unit) -> Value {
            Value::Scaled(Box::new(read), unit)
        }

        for (kind, name) in SYSCALL_NAMES.iter().enumerate() {
            let doc = SYSCALL_DOCS[kind];
            let sc = move |c: &Counters| c.syscalls[kind];
            col(format!("{name}_calls"), "syscalls", doc, count(move |c| sc(c).calls));
            col(format!("{name}_bytes"), "syscalls", doc, count(move |c| sc(c).bytes));
            col(format!("{name}_errors"), "syscalls", doc, count(move |c| sc(c).errors));
            col(format!("{name}_enomem"), "syscalls", doc, count(move |c| sc(c).enomem));
            col(format!("{name}_einval"), "syscalls", doc, count(move |c| sc(c).einval));
            col(format!("{name}_eagain"), "syscalls", doc, count(move |c| sc(c).eagain));
            col(format!("{name}_lat_us"), "syscalls", doc, scaled(move |c| sc(c).lat_ns, NsAsUs));
            col(
                format!("{name}_lat_max_us"),
                "syscalls",
                doc,
                scaled(move |c| sc(c).lat_max_ns, NsAsUs),
            );
        }
        for (class, name) in ADVICE_NAMES.iter().enumerate() {
            col(format!("madv_{name}_calls"), "syscalls", MADV_DOC, count(move |c| c.madvise[class].calls));
            col(format!("madv_{name}_bytes"), "syscalls", MADV_DOC, count(move |c| c.madvise[class].bytes));
        }
        col("exec_calls".into(), "syscalls", EXEC_DOC, count(|c| c.exec.calls));
        col("exec_bytes".into(), "syscalls", EXEC_DOC, count(|c| c.exec.bytes));

        let faults = "page_faults";
        col("faults_user".into(), faults, ("faults_user", "user-mode page faults of the host (exceptions:page_fault_user, or fexit handle_mm_fault without the retried attempts)"), count(|c| c.faults.user));
        col("faults_user_write".into(), faults, ("faults_user_write", "faults_user that were writes"), count(|c| c.faults.user_write));
        col("faults_user_read".into(), faults, ("faults_user_read", "faults_user that were reads or instruction fetches (faults_user - faults_user_write)"), count(|c| c.faults.user - c.faults.user_write));
        col("faults_major".into(), faults, ("faults_major", "faults_user that were major; only fexit handle_mm_fault sees this (empty otherwise; see majflt_perf)"), Value::FexitOnly(Box::new(|c| c.faults.major)));
        col("faults_kernel".into(), faults, ("faults_kernel", "page faults the host took in kernel mode on its own user addresses, e.g. read(2) into a fresh buffer (exceptions:page_fault_kernel, or fexit handle_mm_fault); the kernel counts them in minflt too"), count(|c| c.faults.kernel));
        col("faults_gup".into(), faults, ("faults_gup", "page faults taken for get_user_pages on the host's behalf (MAP_POPULATE, mlock, MADV_POPULATE_*, O_DIRECT I/O), which the kernel counts in minflt; only fexit handle_mm_fault sees them (empty otherwise)"), Value::FexitOnly(Box::new(|c| c.faults.gup)));
        col("majflt_perf".into(), "major_faults", ("majflt_perf", "major faults of the host from a perf software counter (PAGE_FAULTS_MAJ, every thread)"), Value::MajfltPerf);

        col("kswapd_wakes".into(), "kswapd", KSWAPD_DOC, count(|c| c.kswapd.wakes));
        col("kswapd_sleeps".into(), "kswapd", KSWAPD_DOC, count(|c| c.kswapd.sleeps));
        col("kswapd_awake_ms".into(), "kswapd", KSWAPD_DOC, scaled(|c| c.kswapd.awake_ns, NsAsMs));
        col("kswapd_woken_by_host".into(), "kswapd", KSWAPD_DOC, count(|c| c.kswapd.woken_by_host));
        col("kswapd_woken_by_others".into(), "kswapd", KSWAPD_DOC, count(|c| c.kswapd.woken_by_others));

        type Group = fn(&Counters) -> &ReclaimCounts;
        let reclaims: [(&str, Doc, Group); 2] = [
            ("direct_reclaim", ("direct_reclaim_*", "direct reclaim in the host's context: _count, _ms (total), _max_ms, _pages (reclaimed); by other processes: _others_count, _others_pages"), |c| &c.direct),
            ("memcg_reclaim", ("memcg_reclaim_*", "memcg limit reclaim in the host's context: _count, _ms, _max_ms, _pages; by other processes: _others_count, _others_pages"), |c| &c.memcg),
        ];
        for (prefix, doc, group) in reclaims {
            col(format!("{prefix}_count"), prefix, doc, count(move |c| group(c).host));
            col(format!("{prefix}_ms"), prefix, doc, scaled(move |c| group(c).host_ns, NsAsMs));
            col(format!("{prefix}_max_ms"), prefix, doc, scaled(move |c| group(c).host_max_ns, NsAsMs));
            col(format!("{prefix}_pages"), prefix, doc, count(move |c| group(c).host_pages));
            col(format!("{prefix}_others_count"), prefix, doc, count(move |c| group(c).others));
            col(format!("{prefix}_others_pages"), prefix, doc, count(move |c| group(c).others_pages));
        }

        let contexts = CTX_NAMES.iter().enumerate().take(CONTEXTS);
        for (ctx, name) in contexts.clone() {
            col(format!("lru_{name}_calls"), "lru_shrink", LRU_DOC, count(move |c| c.lru[ctx].calls));
            col(format!("lru_{name}_scanned"), "lru_shrink", LRU_DOC, count(move |c| c.lru[ctx].scanned));
            col(format!("lru_{name}_reclaimed"), "lru_shrink", LRU_DOC, count(move |c| c.lru[ctx].reclaimed));
        }
        col("lru_host_calls".into(), "lru_shrink", LRU_DOC, count(|c| c.lru_host.calls));
        col("lru_host_scanned".into(), "lru_shrink", LRU_DOC, count(|c| c.lru_host.scanned));
        col("lru_host_reclaimed".into(), "lru_shrink", LRU_DOC, count(|c| c.lru_host.reclaimed));

        for (ctx, name) in contexts {
            col(format!("shrink_node_{name}_calls"), "shrink_node", SHRINK_NODE_DOC, count(move |c| c.shrink_node[ctx].calls));
            col(format!("shrink_node_{name}_ms"), "shrink_node", SHRINK_NODE_DOC, scaled(move |c| c.shrink_node[ctx].ns, NsAsMs));
        }
        col("shrink_node_host_calls".into(), "shrink_node", SHRINK_NODE_DOC, count(|c| c.shrink_node_host.calls));
        col("shrink_node_host_ms".into(), "shrink_node", SHRINK_NODE_DOC, scaled(|c| c.shrink_node_host.ns, NsAsMs));

        col("slab_shrinks".into(), "shrink_slab", SLAB_DOC, count(|c| c.slab.shrinks));
        col("slab_freed".into(), "shrink_slab", SLAB_DOC, count(|c| c.slab.freed));
        col("slab_ms".into(), "shrink_slab", SLAB_DOC, scaled(|c| c.slab.ns, NsAsMs));
        col("slab_host_shrinks".into(), "shrink_slab", SLAB_DOC, count(|c| c.slab.host_shrinks));
        col("slab_host_ms".into(), "shrink_slab", SLAB_DOC, scaled(|c| c.slab.host_ns, NsAsMs));

        col("throttle_count".into(), "throttle", THROTTLE_DOC, count(|c| c.throttle.count));
        col("throttle_ms".into(), "throttle", THROTTLE_DOC, scaled(|c| c.throttle.us, UsAsMs));
        col("throttle_host_count".into(), "throttle", THROTTLE_DOC, count(|c| c.throttle.host_count));
        col("throttle_host_ms".into(), "throttle", THROTTLE_DOC, scaled(|c| c.throttle.host_us, UsAsMs));

        col("marks_hits".into(), super::markers::PROBE, MARKS_DOC, count(|c| c.marks.hits));
        col("marks_overflow".into(), super::markers::PROBE, MARKS_DOC, count(|c| c.marks.overflow));

        col("events_sent".into(), "events", EVENTS_DOC, Value::Events(Box::new(|c| c.events.sent)));
        col("events_lost".into(), "events", EVENTS_DOC, Value::Events(Box::new(|c| c.events.lost)));
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record;

    #[test]
    fn every_probe_column_is_documented() {
        for column in columns() {
            assert!(
                record::documentation(&column.name).is_some(),
                "column {} has no documentation",
                column.name
            );
        }
    }

    #[test]
    fn missing_probes_write_empty_cells() {
        let mut counters = Counters::default();
        counters.syscalls[0].calls = 3;
        counters.faults.user = 10;
        counters.faults.user_write = 4;
        let metrics = ProbeMetrics {
            counters,
            attached: [("syscalls".to_string(), Mechanism::TpBtf)].into(),
            majflt_perf: Some(2),
            streaming: false,
            skills: None,
        };
        let mut row = Row::default();
        ProbeMetrics::write_cells(Some(&metrics), &mut row);
        assert_eq!(row.get("mmap_calls"), Some("3"));
        assert_eq!(row.get("faults_user"), Some(""));
        assert_eq!(row.get("majflt_perf"), Some("2"));
        assert_eq!(row.get("events_lost"), Some(""));
        assert_eq!(metrics.read("syscalls", |c| c.syscalls[0].calls), Some(3));
        assert_eq!(metrics.read("page_faults", |c| c.faults.user), None);
    }

    #[test]
    fn per_cpu_copies_sum_and_keep_maxima() {
        let mut a = Counters::default();
        a.syscalls[1].calls = 2;
        a.syscalls[1].lat_max_ns = 50;
        a.direct.host_max_ns = 7;
        let mut b = a;
        b.syscalls[1].lat_max_ns = 30;
        b.direct.host_max_ns = 9;
        let total = combine([&a, &b]);
        assert_eq!(total.syscalls[1].calls, 4);
        assert_eq!(total.syscalls[1].lat_max_ns, 50);
        assert_eq!(total.direct.host_max_ns, 9);
    }
}
