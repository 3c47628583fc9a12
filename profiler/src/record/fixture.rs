//! Records as the runner fills them, for the tests of every view of the record (explain's
//! sentences, capacity, the report, slo's words).

use std::time::Duration;

use skillprof_common::Counters;

use super::probes::ProbeMetrics;
use super::process::ProcessStat;
use super::sampling::Lowest;
use super::{EntryCmd, EntryMeasure, EntryRecord};
use crate::ground::band::Band;

/// An entry of `cmd` that took `took_ms`, with the host alive at both ends, no requests,
/// nothing probed and free memory at baseline.
pub fn record(cmd: &str, took_ms: f64) -> EntryRecord {
    let mut record = EntryRecord::new(EntryMeasure {
        index: 0,
        cmd: EntryCmd::named(cmd),
        line: Some(1),
        repeat: 1,
        started: Duration::ZERO,
        took: Duration::from_secs_f64(took_ms / 1e3),
        before: ProcessStat::default(),
        after: Some(ProcessStat::default()),
        outcome: Default::default(),
        stopped: None,
    });
    record.sampling.samples = 2;
    record.sampling.zones_lowest = Lowest {
        free_pages: 1 << 20,
        band: Band::Baseline,
    };
    record
}

/// Every probe attached, with these counts.
pub fn probed(mut record: EntryRecord, counts: impl FnOnce(&mut Counters)) -> EntryRecord {
    let mut counters = Counters::default();
    counts(&mut counters);
    record.probes = Some(ProbeMetrics::attached_everywhere(counters));
    record
}

/// A step of traffic the generator sent on time at `rps` (open loop), every request answered,
/// 5 ms at the median, measured for 3.2 s after 0.8 s of warm-up.
pub fn traffic(rps: u32) -> super::traffic::TrafficStep {
    use super::traffic::{Arrivals, Load, Percentiles, TrafficErrors, TrafficStep};
    let sent = (f64::from(rps) * 3.2) as u64;
    TrafficStep {
        skill: "s".into(),
        load: Load::Open {
            rps,
            arrivals: Arrivals::Constant,
        },
        measured_s: 3.2,
        warmup_s: 0.8,
        sent,
        ok: sent,
        delivered: sent,
        answered_all: sent * 5 / 4,
        answered_by_end: sent * 5 / 4,
        errors: TrafficErrors::default(),
        late_sends: 0,
        send_lag_p99_ms: 0.1,
        latency: Percentiles {
            p50_ms: 5.0,
            ..Percentiles::default()
        },
        service: Percentiles::default(),
        first_fifth_p50_ms: 5.0,
        last_fifth_p50_ms: 5.0,
        generator_cpu_ms: 30.0,
        generator_cpus: "0".into(),
        generator_cpus_time: None,
        stall: None,
    }
}
