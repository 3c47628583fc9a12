//! `samples.csv`: the host process and the system, one row per sample, taken every interval
//! (100 ms by default) and at both boundaries of every entry. A value that was not measured
//! is an empty cell, never 0. Each column is declared once below, with its unit and help
//! (docs/columns.md's samples.csv section is made from them) and how it is filled.

use std::{fs::File, path::Path, time::UNIX_EPOCH};

use anyhow::{Context, Result, bail};

use crate::producers::sample::{
    Sample, SampleSink,
    zoneinfo::{self, Zone},
};
use crate::record::sampling::ZoneId;
use crate::record::{self, Unit};

/// The file's name in a run folder.
pub const FILE: &str = "samples.csv";

/// What a column before the per-zone ones holds: readers ask for it by this key, never by
/// its name, which lives only in [`COLUMNS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Column {
    TS,
    UnixS,
    Entry,
    RssKb,
    VmsKb,
    Minflt,
    Majflt,
    Threads,
    PsiSomeTotalUs,
    PsiFullTotalUs,
    PsiSomeAvg10,
    PsiFullAvg10,
    MemfreeKb,
    MemavailableKb,
    /// Summed over the zones that can serve user memory (`zones_*`).
    Zones(ZoneColumn),
}

/// What a per-zone column holds (`zone_<node>_<name>_<suffix>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ZoneColumn {
    FreePages,
    MinPages,
    LowPages,
    HighPages,
    PromoPages,
    ManagedPages,
}

type Cell = fn(&Sample) -> Option<String>;
type ZoneCell = fn(&Zone) -> Option<u64>;

/// The columns before the per-zone ones: the column, its key, and how it is filled.
const COLUMNS: &[(record::Column, Column, Cell)] = &[
    (
        record::Column::new("t_s", Unit::Seconds, "seconds since the sampler started"),
        Column::TS,
        |s| Some(format!("{:.3}", s.t.as_secs_f64())),
    ),
    (
        record::Column::new(
            "unix_s",
            Unit::Seconds,
            "the wall clock at the reading, seconds since the Unix epoch (ms precision): DuckDB's `to_timestamp(unix_s)`, pandas' `pd.to_datetime(df.unix_s, unit=\"s\")`",
        ),
        Column::UnixS,
        |s| {
            let since = s.at.duration_since(UNIX_EPOCH).ok()?;
            Some(format!("{:.3}", since.as_secs_f64()))
        },
    ),
    (
        record::Column::new(
            "entry",
            Unit::Count,
            "index of the entry being measured; empty between entries",
        ),
        Column::Entry,
        |s| s.entry.map(|entry| entry.to_string()),
    ),
    (
        record::Column::new(
            "rss_kb",
            Unit::Kib,
            "host resident set size (/proc/PID/statm, as psutil's `memory_info()`); empty once the host has exited",
        ),
        Column::RssKb,
        |s| Some(s.process?.rss_kb.to_string()),
    ),
    (
        record::Column::new(
            "vms_kb",
            Unit::Kib,
            "host virtual memory size; empty once the host has exited",
        ),
        Column::VmsKb,
        |s| Some(s.process?.vms_kb.to_string()),
    ),
    (
        record::Column::new(
            "minflt",
            Unit::Count,
            "host minor page faults since it started",
        ),
        Column::Minflt,
        |s| Some(s.process?.minflt.to_string()),
    ),
    (
        record::Column::new(
            "majflt",
            Unit::Count,
            "host major page faults since it started",
        ),
        Column::Majflt,
        |s| Some(s.process?.majflt.to_string()),
    ),
    (
        record::Column::new("threads", Unit::Count, "host threads"),
        Column::Threads,
        |s| Some(s.process?.threads.to_string()),
    ),
    (
        record::Column::new(
            "psi_some_total_us",
            Unit::Us,
            "memory stall time since boot in which at least one task stalled (/proc/pressure/memory); empty if the kernel has no PSI",
        ),
        Column::PsiSomeTotalUs,
        |s| Some(s.system.psi?.some_total_us.to_string()),
    ),
    (
        record::Column::new(
            "psi_full_total_us",
            Unit::Us,
            "memory stall time since boot in which all non-idle tasks stalled at once",
        ),
        Column::PsiFullTotalUs,
        |s| Some(s.system.psi?.full_total_us.to_string()),
    ),
    (
        record::Column::new(
            "psi_some_avg10",
            Unit::Percent,
            "the share of the last 10 s in which at least one task stalled on memory",
        ),
        Column::PsiSomeAvg10,
        |s| Some(format!("{:.2}", s.system.psi?.some_avg10)),
    ),
    (
        record::Column::new(
            "psi_full_avg10",
            Unit::Percent,
            "the share of the last 10 s in which all non-idle tasks stalled on memory",
        ),
        Column::PsiFullAvg10,
        |s| Some(format!("{:.2}", s.system.psi?.full_avg10)),
    ),
    (
        record::Column::new("memfree_kb", Unit::Kib, "/proc/meminfo MemFree"),
        Column::MemfreeKb,
        |s| Some(s.system.meminfo.memfree_kb.to_string()),
    ),
    (
        record::Column::new("memavailable_kb", Unit::Kib, "/proc/meminfo MemAvailable"),
        Column::MemavailableKb,
        |s| Some(s.system.meminfo.memavailable_kb.to_string()),
    ),
    (
        record::Column::new(
            "zones_free_pages",
            Unit::Count,
            "free memory as user allocations reach it: each zone's free pages above its reserve (the `protection:` line), summed over the zones that can serve user memory at all (not DMA here); the watermark bands are judged on this",
        ),
        Column::Zones(ZoneColumn::FreePages),
        |s| Some(s.system.reach.free_pages.to_string()),
    ),
    (
        record::Column::new(
            "zones_min_pages",
            Unit::Count,
            "the min watermark (boost included), summed over the same zones",
        ),
        Column::Zones(ZoneColumn::MinPages),
        |s| Some(s.system.reach.watermarks.min.to_string()),
    ),
    (
        record::Column::new(
            "zones_low_pages",
            Unit::Count,
            "the low watermark, summed over the same zones",
        ),
        Column::Zones(ZoneColumn::LowPages),
        |s| Some(s.system.reach.watermarks.low.to_string()),
    ),
    (
        record::Column::new(
            "zones_high_pages",
            Unit::Count,
            "the high watermark, summed over the same zones",
        ),
        Column::Zones(ZoneColumn::HighPages),
        |s| Some(s.system.reach.watermarks.high.to_string()),
    ),
    (
        record::Column::new(
            "zones_promo_pages",
            Unit::Count,
            "the promo watermark, summed over the same zones (empty before kernel 6.3)",
        ),
        Column::Zones(ZoneColumn::PromoPages),
        |s| Some(s.system.reach.watermarks.promo?.to_string()),
    ),
];

/// The columns of each zone, named `zone_<node>_<name>_<suffix>`: the suffix, the family,
/// its key, and how it is filled.
const ZONE_COLUMNS: &[(&str, record::Column, ZoneColumn, ZoneCell)] = &[
    (
        "free_pages",
        record::Column::new(
            "zone_*_free_pages",
            Unit::Count,
            "per populated zone, zone_<node>_<name>_free_pages: its free pages (the set of zones is fixed by the first sample)",
        ),
        ZoneColumn::FreePages,
        |zone| Some(zone.free_pages),
    ),
    (
        "min_pages",
        record::Column::new(
            "zone_*_min_pages",
            Unit::Count,
            "the zone's min watermark (boost included)",
        ),
        ZoneColumn::MinPages,
        |zone| Some(zone.watermarks.min),
    ),
    (
        "low_pages",
        record::Column::new("zone_*_low_pages", Unit::Count, "the zone's low watermark"),
        ZoneColumn::LowPages,
        |zone| Some(zone.watermarks.low),
    ),
    (
        "high_pages",
        record::Column::new(
            "zone_*_high_pages",
            Unit::Count,
            "the zone's high watermark",
        ),
        ZoneColumn::HighPages,
        |zone| Some(zone.watermarks.high),
    ),
    (
        "promo_pages",
        record::Column::new(
            "zone_*_promo_pages",
            Unit::Count,
            "the zone's promo watermark (empty before kernel 6.3)",
        ),
        ZoneColumn::PromoPages,
        |zone| zone.watermarks.promo,
    ),
    (
        "managed_pages",
        record::Column::new(
            "zone_*_managed_pages",
            Unit::Count,
            "pages the zone manages; grows during a run while memory is initialised lazily, and the watermarks with it",
        ),
        ZoneColumn::ManagedPages,
        |zone| Some(zone.managed_pages),
    ),
];

pub struct SamplesCsv {
    csv: csv::Writer<File>,
    /// Fixed by the first sample, which also writes the header.
    zones: Option<Vec<ZoneId>>,
}

impl SamplesCsv {
    pub fn create(path: &Path) -> Result<Self> {
        let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
        Ok(SamplesCsv {
            csv: csv::Writer::from_writer(file),
            zones: None,
        })
    }
}

/// The run's sink: every sample the sampler takes becomes a row.
impl SampleSink for SamplesCsv {
    fn write(&mut self, sample: &Sample) -> Result<()> {
        let zones = match &self.zones {
            Some(zones) => zones,
            None => {
                let zones = zoneinfo::populated_ids(&sample.system.zones);
                self.csv
                    .write_record(header(&zones))
                    .context("writing the samples.csv header")?;
                self.zones.insert(zones)
            }
        };
        self.csv
            .write_record(cells(sample, zones))
            .context("writing a samples.csv row")
    }

    fn flush(&mut self) -> Result<()> {
        self.csv.flush().context("flushing samples.csv")
    }
}

/// Every column, a zone's as a family (`zone_*_free_pages`), in file order: docs/columns.md's
/// samples.csv section, and the help of the OpenMetrics series made of them.
pub fn columns() -> Vec<&'static record::Column> {
    let fixed = COLUMNS.iter().map(|(column, _, _)| column);
    fixed
        .chain(ZONE_COLUMNS.iter().map(|(_, column, _, _)| column))
        .collect()
}

/// The column `name` is, or is a member of.
pub fn documentation(name: &str) -> Option<&'static record::Column> {
    columns().into_iter().find(|column| column.names(name))
}

fn header(zones: &[ZoneId]) -> Vec<String> {
    let fixed = COLUMNS.iter().map(|(column, _, _)| column.name.to_string());
    let per_zone = zones.iter().flat_map(|zone| {
        ZONE_COLUMNS
            .iter()
            .map(|(suffix, _, _, _)| zone.column(suffix))
    });
    fixed.chain(per_zone).collect()
}

fn cells(sample: &Sample, zones: &[ZoneId]) -> Vec<String> {
    let fixed = COLUMNS.iter().map(|(_, _, cell)| cell(sample));
    let per_zone = zones.iter().flat_map(|id| {
        let zone = sample.system.zones.iter().find(|zone| zone.id == *id);
        ZONE_COLUMNS
            .iter()
            .map(move |(_, _, _, cell)| zone.and_then(cell).map(|value| value.to_string()))
    });
    fixed
        .chain(per_zone)
        .map(Option::unwrap_or_default)
        .collect()
}

/// A column of values; `None` where a sample did not measure it.
pub type Series = Vec<Option<f64>>;

/// samples.csv read back by column, each under its key.
#[derive(Debug, Default)]
pub struct SampleSeries {
    /// Seconds since the sampler started.
    pub t_s: Vec<f64>,
    /// The entry each sample belongs to (`None` between entries).
    pub entry: Vec<Option<usize>>,
    /// Each column of the file: its name, what it holds and its values, in file order.
    names: Vec<String>,
    slots: Vec<Slot>,
    series: Vec<Series>,
}

/// What a header name stands for: a column before the zones', or a zone's.
#[derive(Debug, PartialEq, Eq)]
enum Slot {
    Column(Column),
    Zone(ZoneId, ZoneColumn),
    /// A column this version does not write (a later one's); read past.
    Unknown,
}

fn slot(name: &str) -> Slot {
    if let Some((_, key, _)) = COLUMNS.iter().find(|(column, _, _)| column.name == name) {
        return Slot::Column(*key);
    }
    let zone = name.strip_prefix("zone_").and_then(|rest| {
        let (node, rest) = rest.split_once('_')?;
        ZONE_COLUMNS.iter().find_map(|(suffix, _, key, _)| {
            let zone = rest.strip_suffix(suffix)?.strip_suffix('_')?;
            let id = ZoneId {
                node: node.parse().ok()?,
                name: zone.to_owned(),
            };
            Some(Slot::Zone(id, *key))
        })
    });
    zone.unwrap_or(Slot::Unknown)
}

/// Reads samples.csv back; an empty cell stays `None`, never 0.
pub fn read(path: &Path) -> Result<SampleSeries> {
    let mut csv =
        csv::Reader::from_path(path).with_context(|| format!("reading {}", path.display()))?;
    let names: Vec<String> = csv.headers()?.iter().map(str::to_owned).collect();
    let slots: Vec<Slot> = names.iter().map(|name| slot(name)).collect();
    let mut series: Vec<Series> = slots.iter().map(|_| Vec::new()).collect();
    for record in csv.records() {
        let record = record.with_context(|| format!("reading {}", path.display()))?;
        for (column, cell) in series.iter_mut().zip(record.iter()) {
            column.push(cell.parse().ok());
        }
    }
    let mut samples = SampleSeries {
        names,
        slots,
        series,
        ..SampleSeries::default()
    };
    let (Some(t_s), Some(entry)) = (
        samples.position(&Slot::Column(Column::TS)),
        samples.position(&Slot::Column(Column::Entry)),
    ) else {
        bail!(
            "{} is not a samples.csv of skillprof: no t_s or entry column",
            path.display()
        );
    };
    samples.t_s = samples.series[t_s]
        .iter()
        .enumerate()
        .map(|(row, t)| t.with_context(|| format!("{} row {}: no t_s", path.display(), row + 1)))
        .collect::<Result<_>>()?;
    samples.entry = samples.series[entry]
        .iter()
        .map(|entry| entry.map(|entry| entry as usize))
        .collect();
    Ok(samples)
}

impl SampleSeries {
    pub fn len(&self) -> usize {
        self.t_s.len()
    }

    pub fn is_empty(&self) -> bool {
        self.t_s.is_empty()
    }

    fn position(&self, slot: &Slot) -> Option<usize> {
        self.slots.iter().position(|s| s == slot)
    }

    fn measured(&self, slot: &Slot) -> Option<&[Option<f64>]> {
        self.series
            .get(self.position(slot)?)
            .filter(|values| values.iter().any(Option::is_some))
            .map(Vec::as_slice)
    }

    /// A column, if the file has it and any of its cells was measured.
    pub fn column(&self, key: Column) -> Option<&[Option<f64>]> {
        self.measured(&Slot::Column(key))
    }

    /// Every measured column that holds a reading (not the clocks or the entry), by its
    /// name in the file, for exports that carry each column as it is.
    pub fn readings(&self) -> impl Iterator<Item = (&str, &[Option<f64>])> {
        let clocks = [Column::TS, Column::UnixS, Column::Entry].map(Slot::Column);
        self.names
            .iter()
            .zip(&self.slots)
            .filter(move |(_, slot)| !clocks.contains(slot))
            .filter_map(|(name, slot)| Some((name.as_str(), self.measured(slot)?)))
    }

    /// The populated zones, in column order.
    pub fn zones(&self) -> impl Iterator<Item = &ZoneId> {
        let mut seen: Vec<&ZoneId> = Vec::new();
        self.slots.iter().filter_map(move |slot| match slot {
            Slot::Zone(id, _) if !seen.contains(&id) => {
                seen.push(id);
                Some(id)
            }
            _ => None,
        })
    }

    /// A zone's column, if the file has it and any of its cells was measured.
    pub fn zone(&self, zone: &ZoneId, key: ZoneColumn) -> Option<&[Option<f64>]> {
        self.measured(&Slot::Zone(zone.clone(), key))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::producers::sample::{System, meminfo, psi, reach, zoneinfo};
    use crate::record::process::ProcessStat;

    fn captured_system() -> System {
        System {
            psi: Some(
                psi::parse(include_str!("../../producers/sample/testdata/pressure_io")).unwrap(),
            ),
            meminfo: meminfo::parse(include_str!("../../producers/sample/testdata/meminfo"))
                .unwrap(),
            zones: zoneinfo::parse(include_str!("../../producers/sample/testdata/zoneinfo"))
                .unwrap(),
            reach: reach::parse(include_str!("../../producers/sample/testdata/zoneinfo")).unwrap(),
        }
    }

    #[test]
    fn writes_a_header_and_leaves_unmeasured_cells_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("samples.csv");
        let mut csv = SamplesCsv::create(&path).unwrap();
        let measured = Sample {
            t: Duration::from_millis(1234),
            at: UNIX_EPOCH + Duration::from_millis(1_795_000_000_250),
            entry: Some(3),
            process: Some(ProcessStat {
                rss_kb: 43244,
                vms_kb: 267296,
                minflt: 10257,
                threads: 4,
                ..ProcessStat::default()
            }),
            handles: Some(crate::record::sampling::Handles {
                maps_peak: Some(120),
                ..Default::default()
            }),
            system: captured_system(),
        };
        let mut system = captured_system();
        system.psi = None;
        let host_gone = Sample {
            t: Duration::from_millis(1300),
            at: UNIX_EPOCH + Duration::from_millis(1_795_000_000_316),
            entry: None,
            process: None,
            handles: None,
            system,
        };
        csv.write(&measured).unwrap();
        csv.write(&host_gone).unwrap();
        csv.flush().unwrap();

        let mut reader = csv::Reader::from_path(&path).unwrap();
        let header: Vec<String> = reader.headers().unwrap().iter().map(String::from).collect();
        assert_eq!(
            header.len(),
            COLUMNS.len() + 3 * ZONE_COLUMNS.len(),
            "{header:?}"
        );
        assert_eq!(header[0], "t_s");
        assert_eq!(header[COLUMNS.len()], "zone_0_DMA_free_pages");
        assert_eq!(header.last().unwrap(), "zone_0_Normal_managed_pages");
        let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
        let cell = |row: usize, name: &str| {
            let column = header.iter().position(|h| h == name).unwrap();
            rows[row][column].to_string()
        };

        assert_eq!(cell(0, "t_s"), "1.234");
        assert_eq!(cell(0, "unix_s"), "1795000000.250");
        assert_eq!(cell(1, "unix_s"), "1795000000.316");
        assert_eq!(cell(0, "entry"), "3");
        assert_eq!(cell(0, "rss_kb"), "43244");
        assert_eq!(cell(0, "psi_some_total_us"), "24693027");
        assert_eq!(cell(0, "psi_some_avg10"), "0.00");
        // Free memory as user allocations reach it: DMA (3840 free) cannot serve them at all,
        // and DMA32 keeps 10624 pages back (its `protection:` line, against Movable).
        assert_eq!(
            cell(0, "zones_free_pages"),
            (772808 - 10624 + 2080781).to_string()
        );
        assert_eq!(cell(0, "zones_promo_pages"), (6533 + 22997).to_string());
        assert_eq!(cell(0, "zone_0_Normal_managed_pages"), "2719744");
        assert_eq!(cell(0, "zone_0_DMA32_min_pages"), "3734");
        for empty in [
            "entry",
            "rss_kb",
            "vms_kb",
            "minflt",
            "majflt",
            "threads",
            "psi_full_total_us",
            "psi_full_avg10",
        ] {
            assert_eq!(cell(1, empty), "", "{empty}");
        }
        assert_eq!(cell(1, "memfree_kb"), "22127752");

        // Read back by key, not by name.
        let series = read(&path).unwrap();
        assert_eq!(series.t_s, [1.234, 1.3]);
        assert_eq!(series.entry, [Some(3), None]);
        assert_eq!(
            series.column(Column::RssKb),
            Some(&[Some(43244.0), None][..])
        );
        assert_eq!(
            series.column(Column::PsiFullTotalUs),
            Some(&[Some(13025921.0), None][..])
        );
        assert_eq!(
            series
                .column(Column::Zones(ZoneColumn::PromoPages))
                .unwrap()[0],
            Some((6533 + 22997) as f64)
        );
        let zones: Vec<String> = series.zones().map(|z| z.column("x")).collect();
        assert_eq!(zones, ["zone_0_DMA_x", "zone_0_DMA32_x", "zone_0_Normal_x"]);
        let dma32 = series.zones().nth(1).unwrap();
        assert_eq!(
            series.zone(dma32, ZoneColumn::MinPages).unwrap()[0],
            Some(3734.0)
        );
    }
}
