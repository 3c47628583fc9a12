//! `samples.csv`: the host process and the system, one row per sample, taken every interval
//! (100 ms by default) and at both boundaries of every entry. A value that was not measured
//! is an empty cell, never 0.
//!
//! | column | meaning |
//! |---|---|
//! | `t_s` | seconds since the sampler started |
//! | `entry` | index of the entry being measured; empty between entries |
//! | `rss_kb`, `vms_kb` | host resident set and virtual memory size (/proc/PID/stat, as psutil's `memory_info()`); empty once the host has exited |
//! | `minflt`, `majflt` | host minor and major page faults since it started |
//! | `threads` | host threads |
//! | `psi_some_total_us`, `psi_full_total_us` | memory stall time since boot (/proc/pressure/memory): `some`, at least one task stalled; `full`, all non-idle tasks at once; empty if the kernel has no PSI |
//! | `psi_some_avg10`, `psi_full_avg10` | the same, as percent of the last 10 s |
//! | `memfree_kb`, `memavailable_kb` | /proc/meminfo MemFree and MemAvailable |
//! | `zones_free_pages` | free memory as user allocations reach it: each zone's free pages above its reserve (the `protection:` line), summed over the zones that can serve user memory at all (not DMA here); the watermark bands are judged on this |
//! | `zones_min_pages`, `zones_low_pages`, `zones_high_pages`, `zones_promo_pages` | the current watermarks (boost included) summed over the same zones (promo: empty before kernel 6.3) |
//! | `zone_<node>_<name>_free_pages`, `..._min_pages`, `..._low_pages`, `..._high_pages`, `..._promo_pages` | the same for each populated zone (the set is fixed by the first sample) |
//! | `zone_<node>_<name>_managed_pages` | pages the zone manages; grows during a run while memory is initialised lazily, and the watermarks with it |

use std::{fs::File, path::Path};

use anyhow::{Context, Result};

use crate::sample::{
    Sample, SampleSink,
    zoneinfo::{self, Zone, ZoneId},
};

type Cell = fn(&Sample) -> Option<String>;
type ZoneCell = fn(&Zone) -> Option<u64>;

/// The columns before the per-zone ones, with how each is filled.
const COLUMNS: &[(&str, Cell)] = &[
    ("t_s", |s| Some(format!("{:.3}", s.t.as_secs_f64()))),
    ("entry", |s| s.entry.map(|entry| entry.to_string())),
    ("rss_kb", |s| Some(s.process?.rss_kb.to_string())),
    ("vms_kb", |s| Some(s.process?.vms_kb.to_string())),
    ("minflt", |s| Some(s.process?.minflt.to_string())),
    ("majflt", |s| Some(s.process?.majflt.to_string())),
    ("threads", |s| Some(s.process?.threads.to_string())),
    ("psi_some_total_us", |s| {
        Some(s.system.psi?.some_total_us.to_string())
    }),
    ("psi_full_total_us", |s| {
        Some(s.system.psi?.full_total_us.to_string())
    }),
    ("psi_some_avg10", |s| {
        Some(format!("{:.2}", s.system.psi?.some_avg10))
    }),
    ("psi_full_avg10", |s| {
        Some(format!("{:.2}", s.system.psi?.full_avg10))
    }),
    ("memfree_kb", |s| {
        Some(s.system.meminfo.memfree_kb.to_string())
    }),
    ("memavailable_kb", |s| {
        Some(s.system.meminfo.memavailable_kb.to_string())
    }),
    ("zones_free_pages", |s| {
        Some(s.system.reach.free_pages.to_string())
    }),
    ("zones_min_pages", |s| {
        Some(s.system.reach.watermarks.min.to_string())
    }),
    ("zones_low_pages", |s| {
        Some(s.system.reach.watermarks.low.to_string())
    }),
    ("zones_high_pages", |s| {
        Some(s.system.reach.watermarks.high.to_string())
    }),
    ("zones_promo_pages", |s| {
        Some(s.system.reach.watermarks.promo?.to_string())
    }),
];

/// The columns of each zone, named `zone_<node>_<name>_<suffix>`.
const ZONE_COLUMNS: &[(&str, ZoneCell)] = &[
    ("free_pages", |zone| Some(zone.free_pages)),
    ("min_pages", |zone| Some(zone.watermarks.min)),
    ("low_pages", |zone| Some(zone.watermarks.low)),
    ("high_pages", |zone| Some(zone.watermarks.high)),
    ("promo_pages", |zone| zone.watermarks.promo),
    ("managed_pages", |zone| Some(zone.managed_pages)),
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

fn header(zones: &[ZoneId]) -> Vec<String> {
    let fixed = COLUMNS.iter().map(|(name, _)| name.to_string());
    let per_zone = zones
        .iter()
        .flat_map(|zone| ZONE_COLUMNS.iter().map(|(suffix, _)| zone.column(suffix)));
    fixed.chain(per_zone).collect()
}

fn cells(sample: &Sample, zones: &[ZoneId]) -> Vec<String> {
    let fixed = COLUMNS.iter().map(|(_, cell)| cell(sample));
    let per_zone = zones.iter().flat_map(|id| {
        let zone = sample.system.zones.iter().find(|zone| zone.id == *id);
        ZONE_COLUMNS
            .iter()
            .map(move |(_, cell)| zone.and_then(cell).map(|value| value.to_string()))
    });
    fixed
        .chain(per_zone)
        .map(Option::unwrap_or_default)
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::sample::{System, meminfo, process::ProcessStat, psi, reach, zoneinfo};

    fn captured_system() -> System {
        System {
            psi: Some(psi::parse(include_str!("../sample/testdata/pressure_io")).unwrap()),
            meminfo: meminfo::parse(include_str!("../sample/testdata/meminfo")).unwrap(),
            zones: zoneinfo::parse(include_str!("../sample/testdata/zoneinfo")).unwrap(),
            reach: reach::parse(include_str!("../sample/testdata/zoneinfo")).unwrap(),
        }
    }

    #[test]
    fn writes_a_header_and_leaves_unmeasured_cells_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("samples.csv");
        let mut csv = SamplesCsv::create(&path).unwrap();
        let measured = Sample {
            t: Duration::from_millis(1234),
            entry: Some(3),
            process: Some(ProcessStat {
                rss_kb: 43244,
                vms_kb: 267296,
                minflt: 10257,
                majflt: 0,
                threads: 4,
                cpu_ticks: 0,
            }),
            system: captured_system(),
        };
        let mut system = captured_system();
        system.psi = None;
        let host_gone = Sample {
            t: Duration::from_millis(1300),
            entry: None,
            process: None,
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
    }
}
