//! The files of `skillprof pressure`: `pressure.csv`, one row per band, and
//! `pressure_samples.csv`, every reading of the balloon's controller. Both are written row by
//! row and flushed, so an interrupted experiment keeps what it measured.
//!
//! `pressure.csv` (a [`Row`] per band, written with [`CommandsCsv`]):
//!
//! | column | meaning |
//! |---|---|
//! | `band` | the band aimed at: baseline [promo, inf), promo [high, promo), high [low, high), low [min, low) |
//! | `outcome`, `reason` | held; aborted (a safety rule stopped it: the reason); not reached (in time); interrupted |
//! | `settle_s` | seconds until free memory was in the band |
//! | `block_kb` | memory one iteration maps, writes and unmaps |
//! | `iterations`, `iter_mean_ms`, `iter_median_ms`, `iter_p99_ms`, `iter_min_ms`, `iter_max_ms` | the iterations' times (p99: nearest rank) |
//! | `vs_baseline_pct`, `vs_baseline_lo_pct`, `vs_baseline_hi_pct` | the median iteration against baseline's (median over median, minus 1), and the bootstrap 95% confidence interval of that ratio (2,000 resamples of each band's iterations); empty for baseline |
//! | `pressure_*` | the band actually held during the iterations, as `commands.csv` documents them (`record::COLUMNS`) |
//! | probe columns | what the BPF probes attributed to the iterations (`kswapd_*`, `direct_reclaim_*` with the iterating skillprof as the "host", `lru_*`, ...; see `record::COLUMNS`); empty with --no-probes or where a probe did not attach |
//! | `vmstat_*` | change of the kept /proc/vmstat counters during the iterations |
//! | `psi_some_us`, `psi_full_us` | memory stall time during the iterations |
//! | `kswapd_cpu_ms`, `kswapd_cpu_pct` | CPU time of the kswapd threads during the iterations (/proc/PID/stat), and as a share of the wall time |
//!
//! For a band that was not reached, the kernel columns cover the attempt to settle instead.
//!
//! `pressure_samples.csv`:
//!
//! | column | meaning |
//! |---|---|
//! | `t_s` | seconds since the experiment started |
//! | `unix_s` | the wall clock at the reading, seconds since the Unix epoch (ms precision), as samples.csv's |
//! | `band` | the band the balloon aimed at |
//! | `settled` | 1 once free memory had reached that band |
//! | `free_kb` | free memory as user memory reaches it: free pages above each zone's lowmem reserve, summed over the zones that can serve user memory |
//! | `min_kb`, `low_kb`, `high_kb`, `promo_kb` | those zones' configured watermarks, summed (promo empty before kernel 6.3) |
//! | `boost_kb` | what the kernel adds to each of them for now (watermark boosting after fragmentation), summed |
//! | `balloon_kb` | memory the balloon held |
//! | `memfree_kb`, `memavailable_kb`, `swaptotal_kb` | /proc/meminfo |
//! | `psi_some_avg10`, `psi_full_avg10` | /proc/pressure/memory, percent (empty without PSI) |
//! | `zone_<node>_<name>_usable_kb` | per populated zone, its free pages above its reserve |

use std::path::Path;
use std::time::{Instant, UNIX_EPOCH};

use anyhow::{Context, Result};

use super::commands_csv::CommandsCsv;
use crate::producers::balloon::HoldSample;
use crate::record::Row;
use crate::record::field::fields;

pub struct PressureCsv {
    rows: CommandsCsv,
    started: Instant,
    page_kb: u64,
}

impl PressureCsv {
    /// `started`: the instant `t_s` counts from.
    pub fn create(path: &Path, started: Instant, page_bytes: u64) -> Result<Self> {
        Ok(PressureCsv {
            rows: CommandsCsv::create(path)?,
            started,
            page_kb: page_bytes / 1024,
        })
    }

    pub fn write(&mut self, sample: &HoldSample) -> Result<()> {
        let mut row = Row::default();
        self.cells(sample, &mut row);
        self.rows.write(&row)
    }
}

// pressure_samples.csv's columns: one row per reading of the balloon's controller.
fields! {
    impl PressureCsv: fn cells(&self, sample: &HoldSample, row: &mut Row) -> row {
        let kb = |pages: u64| pages * self.page_kb;
        let marks = sample.reach.watermarks;
        let since = |at: Instant| at.saturating_duration_since(self.started).as_secs_f64();
        let unix = sample
            .wall
            .duration_since(UNIX_EPOCH)
            .ok()
            .map(|since| since.as_secs_f64());
    }
    T_S "t_s" Seconds "since the experiment started" = since(sample.at);
    UNIX_S "unix_s" Seconds "the reading's wall-clock time" = unix;
    BAND "band" Text "the band aimed at" = sample.band.name();
    SETTLED "settled" Count "1 once free memory was in the band" = u8::from(sample.settled);
    FREE "free_kb" Kib "free memory as user allocations reach it (above each zone's lowmem reserve, summed)" = kb(sample.reach.free_pages);
    MIN "min_kb" Kib "the min watermark, summed over the same zones" = kb(marks.min);
    LOW "low_kb" Kib "the low watermark" = kb(marks.low);
    HIGH "high_kb" Kib "the high watermark" = kb(marks.high);
    PROMO "promo_kb" Kib "the promo watermark (empty before kernel 6.3)" = marks.promo.map(kb);
    BOOST "boost_kb" Kib "the kernel's watermark boost" = kb(sample.reach.boost_pages);
    BALLOON "balloon_kb" Kib "what the balloon held" = sample.balloon_bytes / 1024;
    MEMFREE "memfree_kb" Kib "/proc/meminfo MemFree" = sample.meminfo.memfree_kb;
    MEMAVAILABLE "memavailable_kb" Kib "/proc/meminfo MemAvailable" = sample.meminfo.memavailable_kb;
    SWAPTOTAL "swaptotal_kb" Kib "/proc/meminfo SwapTotal" = sample.meminfo.swaptotal_kb;
    PSI_SOME "psi_some_avg10" Percent "memory PSI some, 10 s average" = sample.psi.as_ref().map(|psi| psi.some_avg10);
    PSI_FULL "psi_full_avg10" Percent "memory PSI full, 10 s average" = sample.psi.as_ref().map(|psi| psi.full_avg10);
    ZONE "zone_*" Kib "per zone: zone_<node>_<name>_usable_kb, its free memory above its lowmem reserve" for sample.reach.zones.iter().map(|zone| (zone.id.column("usable_kb"), kb(zone.usable_pages())));
}

/// What the watermark plot needs of one reading.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplePoint {
    pub t_s: f64,
    pub band: String,
    pub free_kb: u64,
    pub min_kb: u64,
    pub low_kb: u64,
    pub high_kb: u64,
    pub promo_kb: Option<u64>,
    pub balloon_kb: u64,
}

pub fn read_samples(path: &Path) -> Result<Vec<SamplePoint>> {
    let mut reader =
        csv::Reader::from_path(path).with_context(|| format!("opening {}", path.display()))?;
    let header = reader.headers()?.clone();
    let column = |name: &str| {
        header
            .iter()
            .position(|h| h == name)
            .with_context(|| format!("{} has no column {name}", path.display()))
    };
    let [t, band, free, min, low, high, promo, balloon] = [
        "t_s",
        "band",
        "free_kb",
        "min_kb",
        "low_kb",
        "high_kb",
        "promo_kb",
        "balloon_kb",
    ]
    .map(column);
    let (t, band, free, min, low, high, promo, balloon) =
        (t?, band?, free?, min?, low?, high?, promo?, balloon?);
    let mut points = Vec::new();
    for (line, record) in reader.records().enumerate() {
        let record = record.with_context(|| format!("reading {}", path.display()))?;
        let cell = |index: usize| record.get(index).unwrap_or_default();
        let number = |index: usize| {
            cell(index).parse::<u64>().with_context(|| {
                format!(
                    "{} line {}: not a number: {:?}",
                    path.display(),
                    line + 2,
                    cell(index)
                )
            })
        };
        points.push(SamplePoint {
            t_s: cell(t)
                .parse()
                .with_context(|| format!("{} line {}: bad t_s", path.display(), line + 2))?,
            band: cell(band).to_string(),
            free_kb: number(free)?,
            min_kb: number(min)?,
            low_kb: number(low)?,
            high_kb: number(high)?,
            promo_kb: if cell(promo).is_empty() {
                None
            } else {
                Some(number(promo)?)
            },
            balloon_kb: number(balloon)?,
        });
    }
    Ok(points)
}
