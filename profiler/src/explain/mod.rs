//! From one entry's record to a paragraph of evidence: what the entry cost in memory and time,
//! which kernel activity it caused, and, for `stop`, where the shutdown's time went. Only
//! what was measured speaks; an unmeasured figure is left unsaid, never read as zero.

mod entry;
mod skills;
mod stop;

use std::fmt::Write as _;

use crate::record::EntryRecord;

pub use entry::paragraph;

/// explain.md: a header about how the run was measured, then one paragraph per entry.
pub fn document(title: &str, measurement: &[String], records: &[EntryRecord]) -> String {
    let mut text = format!("# {title}\n\n");
    for line in measurement {
        let _ = writeln!(text, "- {line}");
    }
    text.push('\n');
    for (index, record) in records.iter().enumerate() {
        let _ = writeln!(text, "{}\n", paragraph(record, &records[..index]));
    }
    text
}

/// The entry paragraphs of an explain.md that [`document`] wrote, in entry order: what a
/// report shows beside each entry, read back rather than rewritten from a CSV.
pub fn paragraphs(document: &str) -> Vec<String> {
    // A later section (`skillprof capacity` adds one) is not an entry's.
    let entries = document.split("\n## ").next().unwrap_or(document);
    entries
        .split("\n\n")
        .skip(2)
        .map(str::trim)
        .filter(|paragraph| !paragraph.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Records as the runner fills them, for the tests of each sentence.
#[cfg(test)]
pub(crate) mod test_record {
    use std::time::Duration;

    use skillprof_common::Counters;

    use crate::band::Band;
    use crate::probes::ProbeMetrics;
    use crate::record::{EntryMeasure, EntryRecord};
    use crate::sample::{EntrySampling, Lowest, process::ProcessStat};

    /// An entry of `cmd` that took `took_ms`, with the host alive at both ends, no requests,
    /// nothing probed and free memory at baseline.
    pub fn record(cmd: &str, took_ms: f64) -> EntryRecord {
        EntryRecord {
            measure: EntryMeasure {
                index: 0,
                cmd: cmd.to_owned(),
                line: Some(1),
                repeat: 1,
                started: Duration::ZERO,
                took: Duration::from_secs_f64(took_ms / 1e3),
                before: ProcessStat::default(),
                after: Some(ProcessStat::default()),
                outcome: Default::default(),
                stopped: None,
            },
            sampling: EntrySampling {
                samples: 2,
                rss_peak_kb: None,
                maps_peak: None,
                maps_limit: None,
                threads_peak: None,
                psi_some_us: None,
                psi_full_us: None,
                zones_lowest: Lowest {
                    free_pages: 1 << 20,
                    band: Band::Baseline,
                },
                zone_lowest: Vec::new(),
                vmstat: Vec::new(),
                cpu: None,
            },
            probes: None,
            stop: None,
            pressure: None,
            memcg: None,
            stacks: None,
            load: None,
            host: None,
            held: None,
        }
    }

    /// Every probe attached, with these counts.
    pub fn probed(mut record: EntryRecord, counts: impl FnOnce(&mut Counters)) -> EntryRecord {
        let mut counters = Counters::default();
        counts(&mut counters);
        record.probes = Some(ProbeMetrics::attached_everywhere(counters));
        record
    }
}
