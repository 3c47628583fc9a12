//! What the probes measured for one entry, as result-record cells. The BPF side only adds into
//! numbered slots; the names, units and meaning are here.
//!
//! A probe that did not attach writes empty cells for its columns, never zeros.

use std::{collections::HashMap, sync::OnceLock};

use skillprof_common::{
    ADVICE_NAMES, ADVICES, C_DIRECT_HOST, C_DIRECT_HOST_MAX_NS, C_DIRECT_HOST_NS,
    C_DIRECT_HOST_RECLAIMED, C_DIRECT_OTHERS, C_DIRECT_OTHERS_RECLAIMED, C_EVENTS_LOST,
    C_EVENTS_SENT, C_FAULTS, C_FAULTS_MAJOR, C_FAULTS_WRITE, C_KSWAPD_AWAKE_NS, C_KSWAPD_SLEEP,
    C_KSWAPD_WAKE, C_KSWAPD_WOKEN_BY_HOST, C_KSWAPD_WOKEN_BY_OTHERS, C_MEMCG_HOST,
    C_MEMCG_HOST_MAX_NS, C_MEMCG_HOST_NS, C_MEMCG_HOST_RECLAIMED, C_MEMCG_OTHERS,
    C_MEMCG_OTHERS_RECLAIMED, C_SHRINK_NODE_HOST, C_SHRINK_NODE_HOST_NS, C_SLAB, C_SLAB_FREED,
    C_SLAB_HOST, C_SLAB_HOST_NS, C_SLAB_NS, C_THROTTLED, C_THROTTLED_HOST, C_THROTTLED_HOST_US,
    C_THROTTLED_US, CONTEXTS, COUNTERS, CTX_NAMES, Counters, LRU_CALLS, LRU_RECLAIMED, LRU_SCANNED,
    SC_BYTES, SC_CALLS, SC_ERRORS, SC_LAT_MAX_NS, SC_LAT_NS, SYSCALL_NAMES, SYSCALLS, is_max_slot,
    lru, lru_host, madv_bytes, madv_calls, sc, shrink_node_calls, shrink_node_ns,
};

use super::plan::Mechanism;
use crate::record::{Metrics, Row};

/// Combines the per-CPU copies of one entry's counters: sums, and maxima for `*_max` slots.
pub fn combine<'a>(per_cpu: impl IntoIterator<Item = &'a Counters>) -> [u64; COUNTERS] {
    let mut total = [0u64; COUNTERS];
    for cpu in per_cpu {
        for (slot, (sum, value)) in total.iter_mut().zip(cpu.c.iter()).enumerate() {
            if is_max_slot(slot) {
                *sum = (*sum).max(*value);
            } else {
                *sum = sum.wrapping_add(*value);
            }
        }
    }
    total
}

/// Everything the probes attributed to one entry.
#[derive(Clone, Debug)]
pub struct ProbeMetrics {
    pub(super) counters: [u64; COUNTERS],
    /// Per probe name: the mechanism that attached (absent: not attached).
    pub(super) attached: HashMap<String, Mechanism>,
    /// Major faults from the perf counter during the entry (`None`: no counter).
    pub majflt_perf: Option<u64>,
    /// Whether `--events` streamed (the events_* columns).
    pub(super) streaming: bool,
}

impl ProbeMetrics {
    /// A raw slot (see `skillprof_common`), summed (or maxed) over CPUs.
    pub fn slot(&self, slot: usize) -> u64 {
        self.counters[slot]
    }

    /// The value of one of [`columns`], as written to the row (`None`: not measured).
    pub fn value(&self, column: &str) -> Option<f64> {
        let spec = columns().iter().find(|c| c.name == column)?;
        self.measured(spec)
    }

    fn measured(&self, spec: &Column) -> Option<f64> {
        let mechanism = self.attached.get(spec.probe);
        match spec.value {
            Value::MajfltPerf => return self.majflt_perf.map(|v| v as f64),
            Value::Events(_) if !self.streaming => return None,
            _ => {}
        }
        if spec.probe != "events" {
            let mechanism = mechanism?;
            if matches!(spec.value, Value::MajorBpf) && *mechanism != Mechanism::Fentry {
                return None;
            }
        }
        let slot = |i: usize| self.counters[i] as f64;
        Some(match spec.value {
            Value::Slot(i, unit) => slot(i) * unit.factor(),
            Value::FaultsRead => slot(C_FAULTS) - slot(C_FAULTS_WRITE),
            Value::MajorBpf => slot(C_FAULTS_MAJOR),
            Value::Events(i) => slot(i),
            Value::MajfltPerf => unreachable!("handled above"),
        })
    }
}

impl Metrics for ProbeMetrics {
    fn write(&self, row: &mut Row) {
        for spec in columns() {
            match self.measured(spec) {
                None => row.missing(&spec.name),
                Some(value) if spec.float => row.float(&spec.name, value),
                Some(value) => row.int(&spec.name, value as i128),
            };
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Unit {
    One,
    NsAsUs,
    NsAsMs,
    UsAsMs,
}

impl Unit {
    fn factor(self) -> f64 {
        match self {
            Self::One => 1.0,
            Self::NsAsUs => 1e-3,
            Self::NsAsMs => 1e-6,
            Self::UsAsMs => 1e-3,
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Value {
    Slot(usize, Unit),
    FaultsRead,
    MajorBpf,
    MajfltPerf,
    Events(usize),
}

/// One probe column: its name, the probe it needs, and where its value comes from.
#[derive(Debug)]
pub struct Column {
    pub name: String,
    pub probe: &'static str,
    value: Value,
    float: bool,
}

/// Every column the probes write, in row order.
pub fn columns() -> &'static [Column] {
    static COLUMNS: OnceLock<Vec<Column>> = OnceLock::new();
    COLUMNS.get_or_init(|| {
        let mut out = Vec::new();
        let mut col = |name: String, probe: &'static str, value: Value| {
            let float = matches!(value, Value::Slot(_, unit) if !matches!(unit, Unit::One));
            out.push(Column {
                name,
                probe,
                value,
                float,
            });
        };
        use Unit::*;
        use Value::Slot;
        for (kind, name) in SYSCALL_NAMES.iter().enumerate().take(SYSCALLS) {
            col(
                format!("{name}_calls"),
                "syscalls",
                Slot(sc(kind, SC_CALLS), One),
            );
            col(
                format!("{name}_bytes"),
                "syscalls",
                Slot(sc(kind, SC_BYTES), One),
            );
            col(
                format!("{name}_errors"),
                "syscalls",
                Slot(sc(kind, SC_ERRORS), One),
            );
            col(
                format!("{name}_lat_us"),
                "syscalls",
                Slot(sc(kind, SC_LAT_NS), NsAsUs),
            );
            col(
                format!("{name}_lat_max_us"),
                "syscalls",
                Slot(sc(kind, SC_LAT_MAX_NS), NsAsUs),
            );
        }
        for (class, name) in ADVICE_NAMES.iter().enumerate().take(ADVICES) {
            col(
                format!("madv_{name}_calls"),
                "syscalls",
                Slot(madv_calls(class), One),
            );
            col(
                format!("madv_{name}_bytes"),
                "syscalls",
                Slot(madv_bytes(class), One),
            );
        }
        col("faults_user".into(), "page_faults", Slot(C_FAULTS, One));
        col(
            "faults_user_write".into(),
            "page_faults",
            Slot(C_FAULTS_WRITE, One),
        );
        col("faults_user_read".into(), "page_faults", Value::FaultsRead);
        col("faults_major".into(), "page_faults", Value::MajorBpf);
        col("majflt_perf".into(), "major_faults", Value::MajfltPerf);

        col("kswapd_wakes".into(), "kswapd", Slot(C_KSWAPD_WAKE, One));
        col("kswapd_sleeps".into(), "kswapd", Slot(C_KSWAPD_SLEEP, One));
        col(
            "kswapd_awake_ms".into(),
            "kswapd",
            Slot(C_KSWAPD_AWAKE_NS, NsAsMs),
        );
        col(
            "kswapd_woken_by_host".into(),
            "kswapd",
            Slot(C_KSWAPD_WOKEN_BY_HOST, One),
        );
        col(
            "kswapd_woken_by_others".into(),
            "kswapd",
            Slot(C_KSWAPD_WOKEN_BY_OTHERS, One),
        );

        for (prefix, probe, base, max, ns, pages, others, others_pages) in [
            (
                "direct_reclaim",
                "direct_reclaim",
                C_DIRECT_HOST,
                C_DIRECT_HOST_MAX_NS,
                C_DIRECT_HOST_NS,
                C_DIRECT_HOST_RECLAIMED,
                C_DIRECT_OTHERS,
                C_DIRECT_OTHERS_RECLAIMED,
            ),
            (
                "memcg_reclaim",
                "memcg_reclaim",
                C_MEMCG_HOST,
                C_MEMCG_HOST_MAX_NS,
                C_MEMCG_HOST_NS,
                C_MEMCG_HOST_RECLAIMED,
                C_MEMCG_OTHERS,
                C_MEMCG_OTHERS_RECLAIMED,
            ),
        ] {
            col(format!("{prefix}_count"), probe, Slot(base, One));
            col(format!("{prefix}_ms"), probe, Slot(ns, NsAsMs));
            col(format!("{prefix}_max_ms"), probe, Slot(max, NsAsMs));
            col(format!("{prefix}_pages"), probe, Slot(pages, One));
            col(format!("{prefix}_others_count"), probe, Slot(others, One));
            col(
                format!("{prefix}_others_pages"),
                probe,
                Slot(others_pages, One),
            );
        }

        for (ctx, name) in CTX_NAMES.iter().enumerate().take(CONTEXTS) {
            col(
                format!("lru_{name}_calls"),
                "lru_shrink",
                Slot(lru(ctx, LRU_CALLS), One),
            );
            col(
                format!("lru_{name}_scanned"),
                "lru_shrink",
                Slot(lru(ctx, LRU_SCANNED), One),
            );
            col(
                format!("lru_{name}_reclaimed"),
                "lru_shrink",
                Slot(lru(ctx, LRU_RECLAIMED), One),
            );
        }
        col(
            "lru_host_calls".into(),
            "lru_shrink",
            Slot(lru_host(LRU_CALLS), One),
        );
        col(
            "lru_host_scanned".into(),
            "lru_shrink",
            Slot(lru_host(LRU_SCANNED), One),
        );
        col(
            "lru_host_reclaimed".into(),
            "lru_shrink",
            Slot(lru_host(LRU_RECLAIMED), One),
        );

        for (ctx, name) in CTX_NAMES.iter().enumerate().take(CONTEXTS) {
            col(
                format!("shrink_node_{name}_calls"),
                "shrink_node",
                Slot(shrink_node_calls(ctx), One),
            );
            col(
                format!("shrink_node_{name}_ms"),
                "shrink_node",
                Slot(shrink_node_ns(ctx), NsAsMs),
            );
        }
        col(
            "shrink_node_host_calls".into(),
            "shrink_node",
            Slot(C_SHRINK_NODE_HOST, One),
        );
        col(
            "shrink_node_host_ms".into(),
            "shrink_node",
            Slot(C_SHRINK_NODE_HOST_NS, NsAsMs),
        );

        col("slab_shrinks".into(), "shrink_slab", Slot(C_SLAB, One));
        col("slab_freed".into(), "shrink_slab", Slot(C_SLAB_FREED, One));
        col("slab_ms".into(), "shrink_slab", Slot(C_SLAB_NS, NsAsMs));
        col(
            "slab_host_shrinks".into(),
            "shrink_slab",
            Slot(C_SLAB_HOST, One),
        );
        col(
            "slab_host_ms".into(),
            "shrink_slab",
            Slot(C_SLAB_HOST_NS, NsAsMs),
        );

        col("throttle_count".into(), "throttle", Slot(C_THROTTLED, One));
        col(
            "throttle_ms".into(),
            "throttle",
            Slot(C_THROTTLED_US, UsAsMs),
        );
        col(
            "throttle_host_count".into(),
            "throttle",
            Slot(C_THROTTLED_HOST, One),
        );
        col(
            "throttle_host_ms".into(),
            "throttle",
            Slot(C_THROTTLED_HOST_US, UsAsMs),
        );

        col("events_sent".into(), "events", Value::Events(C_EVENTS_SENT));
        col("events_lost".into(), "events", Value::Events(C_EVENTS_LOST));
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
                "column {} is not in record::COLUMNS",
                column.name
            );
        }
    }

    #[test]
    fn missing_probes_write_empty_cells() {
        let mut counters = [0; COUNTERS];
        counters[sc(0, SC_CALLS)] = 3;
        counters[C_FAULTS] = 10;
        counters[C_FAULTS_WRITE] = 4;
        let metrics = ProbeMetrics {
            counters,
            attached: [("syscalls".to_string(), Mechanism::TpBtf)].into(),
            majflt_perf: Some(2),
            streaming: false,
        };
        let mut row = Row::default();
        metrics.write(&mut row);
        assert_eq!(row.get("mmap_calls"), Some("3"));
        assert_eq!(row.get("faults_user"), Some(""));
        assert_eq!(row.get("majflt_perf"), Some("2"));
        assert_eq!(row.get("events_lost"), Some(""));
        assert_eq!(metrics.value("mmap_calls"), Some(3.0));
    }
}
