//! A run folder read back into a typed view for reports: meta.json, entries.jsonl (the
//! typed [`EntryRecord`] of every entry, and its commands.csv row as a view of it),
//! samples.csv as columns, events.csv when the run had `--events`, and each entry's span on
//! one clock.
//!
//! **One clock.** Everything is placed on the sampler's clock (`t_s` of samples.csv, seconds
//! since the sampler started). An entry starts at its first sample tagged with its index (the
//! sampler takes one at every boundary, just before the entry's clock starts) and lasts its
//! `took_ms`, cut short at the next entry's start where the millisecond rounding of the files
//! would make them overlap. Events carry CLOCK_MONOTONIC nanoseconds; they are moved onto the
//! sampler's clock by the one offset that keeps every entry's events inside that entry (see
//! [`Events::offset_slack_ms`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail, ensure};

use crate::ground::stats;
use crate::record::event::KernelEvent;
use crate::record::{EntryRecord, Row, RunInfo};
use crate::views::explain;
use crate::views::output::samples_csv::{self, SampleSeries};
use crate::views::output::{entries_jsonl, meta};

/// Everything a report draws from one run folder.
pub struct Run {
    pub folder: PathBuf,
    /// `YYMMDD_HHMMSS.mmm`, from meta.json.
    pub name: String,
    pub meta: RunInfo,
    /// What each entry measured, as the run recorded it.
    pub records: Vec<EntryRecord>,
    /// Each record's commands.csv row, for the table of every column.
    pub rows: Vec<Row>,
    /// Each entry's paragraph of explain.md, in entry order (empty if the run has none).
    pub explanations: Vec<String>,
    pub samples: SampleSeries,
    /// Each record's span, in the same order: `entries[i]` is entry `i`.
    pub entries: Vec<EntrySpan>,
    /// How the entries were placed on the sampler's clock, in words.
    pub alignment: String,
    pub events: Option<Events>,
    /// Each entry's time profile, by entry index, where the run has one.
    pub profiles: std::collections::BTreeMap<usize, crate::record::time::TimeProfile>,
}

impl Run {
    /// Bytes per page, where the architecture fixes it (x86_64: always 4 KiB).
    fn page_bytes(&self) -> Option<f64> {
        matches!(
            self.meta.machine.arch.to_ascii_lowercase().as_str(),
            "x86_64" | "x86" | "i686"
        )
        .then_some(4096.0)
    }

    /// How page counts are shown: in MiB (the factor per page) where the page size is
    /// known, else as pages.
    pub fn page_unit(&self) -> (f64, &'static str) {
        match self.page_bytes() {
            Some(bytes) => (bytes / 1048576.0, "MiB"),
            None => (1.0, "pages"),
        }
    }

    pub fn sampling_interval_s(&self) -> f64 {
        self.meta.sampling_interval_ms as f64 / 1000.0
    }

    /// Samples closer than this are merged into the next interval when a counter becomes a
    /// rate: the boundary samples come in pairs a millisecond apart.
    pub fn rate_min_dt_s(&self) -> f64 {
        self.sampling_interval_s() / 2.0
    }
}

/// One entry on the sampler's clock.
#[derive(Debug, Clone)]
pub struct EntrySpan {
    pub index: usize,
    pub cmd: String,
    pub begin_s: f64,
    pub end_s: f64,
    pub took_ms: f64,
}

/// events.csv, on the sampler's clock.
#[derive(Debug, Default)]
pub struct Events {
    pub list: Vec<Event>,
    /// How far the estimated CLOCK_MONOTONIC time of the sampler's t = 0 can be off either way:
    /// half the range of offsets that keep every entry's events inside it.
    pub offset_slack_ms: f64,
    /// Threads of the host: those seen in the host-only probes (syscalls, faults).
    pub host_tids: BTreeSet<u32>,
}

/// A kernel event placed on the sampler's clock.
#[derive(Debug, Clone)]
pub struct Event {
    /// On the sampler's clock.
    pub t_s: f64,
    pub kernel: KernelEvent,
}

impl std::ops::Deref for Event {
    type Target = KernelEvent;

    fn deref(&self) -> &KernelEvent {
        &self.kernel
    }
}

/// The syscalls the probes count, as events.csv names them.
pub use skillprof_common::SYSCALL_NAMES as SYSCALLS;

impl Run {
    pub fn load(folder: &Path) -> Result<Run> {
        ensure!(
            folder.is_dir(),
            "{} is not a run folder (skillprof run leaves one per run, e.g. runs/241022_204217.730)",
            folder.display()
        );
        let meta = meta::read(folder)?;
        let records = entries_jsonl::read(&folder.join(entries_jsonl::FILE))?;
        let rows = records.iter().map(EntryRecord::row).collect();
        let explanations = explain::paragraphs(&meta, &records);
        let samples_path = folder.join(samples_csv::FILE);
        let samples = samples_csv::read(&samples_path)?;
        ensure!(
            !samples.is_empty(),
            "{} has no samples: the run ended before its first entry",
            samples_path.display()
        );
        let (entries, alignment) = place_entries(&records, &samples)?;
        let events_path = folder.join(crate::producers::probes::events::FILE);
        let events = if events_path.exists() {
            Some(read_events(&events_path, &entries)?)
        } else {
            None
        };
        let name = meta.run.clone();
        let mut profiles = std::collections::BTreeMap::new();
        for record in &records {
            let index = record.measure.index;
            if let Some(profile) = crate::views::output::profile::read(folder, index)? {
                profiles.insert(index, profile);
            }
        }
        Ok(Run {
            folder: folder.to_path_buf(),
            name,
            meta,
            records,
            rows,
            explanations,
            samples,
            entries,
            alignment,
            events,
            profiles,
        })
    }

    /// The run's label in comparisons: the allocator when the host says, else its name.
    pub fn label(&self) -> String {
        let allocator = self
            .meta
            .host
            .config
            .as_ref()
            .and_then(|config| config.pointer("/engine/allocator"))
            .and_then(|value| value.as_str());
        match allocator {
            Some(allocator) => format!("{} ({allocator})", self.name),
            None => self.name.clone(),
        }
    }

    /// The wall clock (seconds since the Unix epoch) at a time on the sampler's clock, from
    /// the first sample that read it; `None` for a run from before samples.csv had `unix_s`.
    pub fn unix_clock(&self) -> Option<impl Fn(f64) -> f64 + use<>> {
        let unix = self.samples.column(samples_csv::Column::UnixS)?;
        let (t_s, unix_s) = self
            .samples
            .t_s
            .iter()
            .zip(unix)
            .find_map(|(&t_s, &unix_s)| Some((t_s, unix_s?)))?;
        Some(move |t: f64| unix_s + (t - t_s))
    }

    pub fn probes_live(&self) -> bool {
        self.meta.probes.as_ref().is_some_and(|p| p.enabled)
    }

    /// The record of entry `index`; `None` past the run's last entry.
    pub fn record(&self, index: usize) -> Option<&EntryRecord> {
        self.records.get(index)
    }

    /// Where in `t_s` the run's entries start and end: [first begin, last end].
    pub fn span_s(&self) -> (f64, f64) {
        let first = self.samples.t_s.first().copied().unwrap_or(0.0);
        let last = self.samples.t_s.last().copied().unwrap_or(1.0);
        let end = self.entries.last().map_or(last, |e| e.end_s.max(last));
        (first, end.max(first + 0.001))
    }
}

fn place_entries(
    records: &[EntryRecord],
    samples: &SampleSeries,
) -> Result<(Vec<EntrySpan>, String)> {
    let mut first_tag: BTreeMap<usize, f64> = BTreeMap::new();
    for (t, entry) in samples.t_s.iter().zip(&samples.entry) {
        if let Some(entry) = entry {
            first_tag.entry(*entry).or_insert(*t);
        }
    }
    // For an entry without a tagged sample (none so far): its started_s, moved by the offset
    // the tagged entries show between the two clocks.
    let started_s = |record: &EntryRecord| record.measure.started.as_secs_f64();
    let offsets: Vec<f64> = records
        .iter()
        .enumerate()
        .filter_map(|(i, record)| Some(first_tag.get(&i)? - started_s(record)))
        .collect();
    let offset = median(&offsets);
    let mut untagged = Vec::new();
    let mut entries = Vec::new();
    for (i, record) in records.iter().enumerate() {
        let took_ms = record.measure.took_ms();
        let begin_s = match first_tag.get(&i) {
            Some(t) => *t,
            None => {
                untagged.push(i);
                match offset {
                    Some(offset) => started_s(record) + offset,
                    None => bail!(
                        "cannot place entry {i} on the sampler's clock: no sample is tagged \
                         with it and the run has no other entry to align by"
                    ),
                }
            }
        };
        entries.push(EntrySpan {
            index: i,
            cmd: record.measure.cmd.to_string(),
            begin_s,
            end_s: begin_s + took_ms / 1000.0,
            took_ms,
        });
    }
    for i in 1..entries.len() {
        let next = entries[i].begin_s;
        let previous = &mut entries[i - 1];
        previous.end_s = previous.end_s.min(next).max(previous.begin_s);
    }
    let mut alignment = String::from(
        "Entries are placed on the sampler's clock (seconds since it started): each starts at \
         its first sample tagged with its index, taken at the boundary, and lasts its took_ms.",
    );
    if !untagged.is_empty() {
        alignment.push_str(&format!(
            " Entries {untagged:?} have no tagged sample and are placed by started_s, moved by \
             the offset the others show ({:.3} s).",
            offset.unwrap_or(0.0)
        ));
    }
    Ok((entries, alignment))
}

fn median(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    stats::upper_median(&sorted)
}

fn read_events(path: &Path, entries: &[EntrySpan]) -> Result<Events> {
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut list = Vec::new();
    for (number, line) in text.lines().enumerate().skip(1) {
        let kernel = KernelEvent::parse(line)
            .with_context(|| format!("{} line {}: {line:?}", path.display(), number + 1))?;
        list.push(Event { t_s: 0.0, kernel });
    }
    list.sort_by_key(|event| event.ts_ns);
    let host_tids = list
        .iter()
        .filter(|e| e.body.host_only())
        .map(|e| e.tid)
        .collect();
    let (offset_ns, offset_slack_ms) = clock_offset(&list, entries)?;
    for event in &mut list {
        event.t_s = (i128::from(event.ts_ns) - offset_ns) as f64 / 1e9;
    }
    Ok(Events {
        list,
        offset_slack_ms,
        host_tids,
    })
}

/// The offset (monotonic ns at sampler t = 0) that keeps each entry's events inside it.
/// Every entry gives bounds: its first event cannot come before it began, its last not after
/// the next entry began (the probes attribute events to the entry last marked). The offset is the middle of the range all entries allow; its slack
/// is half that range. Events keep their order and spacing: only the whole set moves.
fn clock_offset(events: &[Event], entries: &[EntrySpan]) -> Result<(i128, f64)> {
    let mut first: BTreeMap<u32, u64> = BTreeMap::new();
    let mut last: BTreeMap<u32, u64> = BTreeMap::new();
    for event in events {
        first.entry(event.entry).or_insert(event.ts_ns);
        last.insert(event.entry, event.ts_ns);
    }
    let ns = |s: f64| (s * 1e9).round() as i128;
    let (mut upper, mut lower) = (i128::MAX, i128::MIN);
    for (i, entry) in entries.iter().enumerate() {
        let Ok(index) = u32::try_from(entry.index) else {
            continue;
        };
        // Entry 0 gives no such bound when others do: the probes count into entry 0 from
        // the moment they attach, a little before it begins.
        if let Some(ts) = first.get(&index)
            && (index > 0 || first.keys().all(|e| *e == 0))
        {
            upper = upper.min(i128::from(*ts) - ns(entry.begin_s));
        }
        if let Some(ts) = last.get(&index) {
            // The map still says this entry until the next one begins; the last entry's
            // events end with its last sample.
            let end = entries.get(i + 1).map_or(entry.end_s, |next| next.begin_s);
            lower = lower.max(i128::from(*ts) - ns(end));
        }
    }
    ensure!(
        upper != i128::MAX,
        "events.csv: no event belongs to an entry of commands.csv, so its clock cannot be \
         aligned with the samples'"
    );
    if lower == i128::MIN || lower > upper {
        // A single bound, or bounds that cross by the files' millisecond rounding: the
        // earliest placement the first events allow.
        let slack = if lower > upper {
            (lower - upper) as f64 / 1e6
        } else {
            0.0
        };
        return Ok((upper, slack));
    }
    Ok((lower + (upper - lower) / 2, (upper - lower) as f64 / 2e6))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::event::Body;

    fn event(ts_ns: u64, entry: u32) -> Event {
        Event {
            t_s: 0.0,
            kernel: KernelEvent {
                ts_ns,
                entry,
                tid: 1,
                body: Body::ThreadExit,
            },
        }
    }

    fn entry(index: usize, begin_s: f64, end_s: f64) -> EntrySpan {
        EntrySpan {
            index,
            cmd: format!("e{index}"),
            begin_s,
            end_s,
            took_ms: (end_s - begin_s) * 1000.0,
        }
    }

    #[test]
    fn the_clock_offset_keeps_every_entrys_events_inside_it() {
        // Entries at [1, 2) and [2, 3) s; events 5 s + 1.1 .. 1.9 and 5 s + 2.2 .. 2.95.
        let base = 5_000_000_000u64;
        let events = [
            event(base + 1_100_000_000, 0),
            event(base + 1_900_000_000, 0),
            event(base + 2_200_000_000, 1),
            event(base + 2_950_000_000, 1),
        ];
        let entries = [entry(0, 1.0, 2.0), entry(1, 2.0, 3.0)];
        let (offset, slack) = clock_offset(&events, &entries).unwrap();
        // Allowed: offset in [base - 0.05 s, base + 0.2 s] (entry 0's first event bounds
        // nothing: the probes count into entry 0 before it begins); the middle, ± 125 ms.
        assert_eq!(offset, i128::from(base) + 75_000_000);
        assert!((slack - 125.0).abs() < 1e-9, "{slack}");
    }
}
