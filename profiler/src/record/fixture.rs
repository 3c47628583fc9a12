//! Records as the runner fills them, for the tests of every view of the record (explain's
//! sentences, capacity, the report).

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
