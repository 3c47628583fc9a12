//! `skillprof pressure` command line.

use std::path::PathBuf;

use clap::Args;

use crate::ground::band::{self, Band};
use crate::ground::units::{parse_cpus, parse_size};
use crate::record::balloon::Basis;

const LONG_ABOUT: &str = "\
Hold free memory in each band between the kernel's zone watermarks and time what allocating \
costs there.

THE BANDS. Each zone has watermarks min < low < high < promo (/proc/zoneinfo). Below low, an \
allocation wakes kswapd, which reclaims in the background until free memory is back above high; \
below min, the allocating task reclaims itself (direct reclaim: it stalls) and only the kernel \
may take more. The bands are named after the watermark free memory is below:
  baseline [promo, inf)   nothing happens
  promo    [high, promo)  kswapd stays asleep (promo matters for memory tiering)
  high     [low, high)    kswapd stays asleep, but an allocation that dips below low wakes it
  low      [min, low)     kswapd is awake and reclaims; allocations are one step from stalling
They are defined on free pages summed over the zones, counting in each zone only the pages \
above its lowmem reserve (the `protection:` line), as the kernel does for user memory; a zone \
that cannot serve user memory at all (DMA) counts neither free pages nor watermarks. The plain \
sums would put every band below baseline out of reach. With --band-mode per-zone a band is \
held only when every such zone is in the band of its own watermarks, the state kswapd decides \
on. The allocator drains the zones in order and leaves the first at its watermark, so the \
balloon gives back or takes one zone's pages (found through /proc/self/pagemap, which needs \
root) until each is in band; a zone that stays out is named. Watermarks and managed pages are re-read \
at every step: they grow while the kernel initialises memory lazily, and the kernel raises the \
watermarks for a while after memory fragments (the zone's `boost`), which moves every band up.

THE EXPERIMENT. For each band, from baseline down, a balloon process grows (touching every \
page) or shrinks until free memory sits in the band, printing its progress. Then it times \
--iterations iterations, each mapping a block, writing every page and unmapping it, while the \
balloon keeps the band (it reads free memory every 50 ms and resizes when free memory leaves \
a comfort zone, so it does not chase the iterations' own dips). Per band it reports the \
iteration time (mean, median, p99), the band actually held (fewest and most free pages read, \
against the watermarks), kswapd wakeups, awake time and CPU, direct reclaims and their time, LRU \
pages scanned and reclaimed, PSI memory stall time, major faults and swap traffic, each from \
the BPF probes where they attach and from /proc otherwise (the table names the source).

SAFETY. skillprof never pushes free memory below min plus a margin (--margin-percent of the \
[min, low) band), min as the kernel applies it now, boost included. If free memory falls below \
that floor (or a boost lifts the floor above it), the balloon gives memory back at once; if \
free memory is still below the floor at the next reading, or PSI memory `full avg10` exceeds \
--psi-full-max, the band is aborted: the balloon gives everything back and the experiment \
stops. Before it changes anything, it waits (up to 120 s) until PSI `full` avg10 is below \
half of --psi-full-max, so that stalls left by an earlier run do not abort the first band. When the kernel has little it could reclaim (no swap and little page cache) \
the aim moves higher in the band and the margin doubles, and the output says so. The balloon \
volunteers for the OOM killer (oom_score_adj 1000), so a misjudgement costs the balloon, not \
another process. On every exit path (the end, an error, Ctrl-C, SIGTERM, a panic, even \
SIGKILL) the balloon's memory is freed, vm.watermark_scale_factor and vm.watermark_boost_factor \
are restored and the swap file is turned off and deleted: small guardian processes, forked \
before each change, undo it when skillprof goes. If one ever reports a failure, restore by \
hand: `sysctl -w vm.watermark_scale_factor=<value in meta.json>` (and the boost factor), \
`swapoff <file>; rm <file>`.

--quick holds baseline, promo and high only, with fewer iterations: in those bands kswapd \
sleeps and the page cache stays, so any burst of allocations by another process is reclaimed \
from cache. Holding low [min, low) without swap first makes kswapd evict the whole page cache, \
and then the next burst has nothing left to reclaim but the OOM killer: not for CI.

Output, in runs/pressure-YYMMDD_HHMMSS.mmm/: pressure.csv (one row per band), \
pressure_samples.csv (every reading: free memory, the summed watermarks, the balloon, PSI), \
free_vs_watermarks.svg (free memory against the four watermarks over time) and meta.json. The \
exit status is 0 when every band was held, 1 when one was aborted or not reached, 130/143 after \
SIGINT/SIGTERM.

Needs root: it drives the machine to low memory, writes a sysctl and enables swap.

Examples:
  sudo skillprof pressure --quick
  sudo skillprof pressure --scale-factor 200 --swapfile 2G
  sudo skillprof pressure --swapfile 2G --page-cache 1G       # both kinds of pages to reclaim
  sudo skillprof pressure --levels baseline,low --iterations 2000 --cpus 1";

#[derive(Args, Debug, Clone)]
#[command(
    about = "Hold free memory in each watermark band and time allocations there",
    long_about = LONG_ABOUT
)]
pub struct PressureArgs {
    /// Bands to hold, visited from the most free memory down [default: all four; with
    /// --quick: baseline,promo,high].
    #[arg(long, value_delimiter = ',', value_parser = band::parse, value_name = "BANDS")]
    pub levels: Option<Vec<Band>>,

    /// Iterations per band [default: 1000; with --quick: 50].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub iterations: Option<u32>,

    /// Memory each iteration maps, writes and unmaps (e.g. 4M) [default: 20% of the
    /// narrowest band, at most 64 MiB, so that an iteration never leaves the band].
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub block_size: Option<u64>,

    /// Set vm.watermark_scale_factor to N (1-3000) for the experiment, restored afterwards.
    /// It sets the distance between the watermarks in 1/10000 of memory: 200 makes each band
    /// 2% of memory wide instead of 0.1%.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=3000))]
    pub scale_factor: Option<u32>,

    /// Set vm.watermark_boost_factor to N for the experiment, restored afterwards. When an
    /// allocation has to take part of a pageblock of another migrate type (free memory is
    /// fragmented, as after a build), the kernel raises every watermark by up to N/10000 of
    /// the high watermark (15000 by default) until kswapd has reclaimed up to it, and every
    /// band moves up with it. 0 turns boosting off, so that a band stays where the configured
    /// watermarks put it; the summary says when a boost moved a band.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32))]
    pub boost_factor: Option<u32>,

    /// Create a swap file of SIZE (e.g. 2G) in the run folder and enable it for the
    /// experiment; turned off and deleted afterwards.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub swapfile: Option<u64>,

    /// Write a file of SIZE (e.g. 1G) in the run folder and keep reading it, so that the
    /// page cache holds SIZE of hot pages for kswapd to reclaim besides anonymous memory;
    /// deleted afterwards. The kernel table then says whose pages were reclaimed.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub page_cache: Option<u64>,

    /// What a band is held on. summed: the zones' usable free pages against their summed
    /// watermarks, reachable in every band. per-zone: every zone that serves user memory in
    /// the band of its own watermarks, as the kernel judges them; one balloon steers only the
    /// zone the allocator takes from, so on a multi-zone machine promo and high are out of
    /// reach and the run says which zone stayed behind.
    #[arg(long, value_enum, default_value_t = Basis::Summed, value_name = "MODE")]
    pub band_mode: Basis,

    /// After the results, set our slowdowns and kswapd CPU beside the 2024 watermark
    /// experiment's (546 / 547 / 548 / 564 ms; kswapd at 20-30% in low).
    #[arg(long)]
    pub compare_2024: bool,

    /// When the experiment ends, print one JSON document on stdout: the run folder
    /// (run_dir), meta.json's record (meta) and each band's pressure.csv row (bands, numbers
    /// as numbers). Everything else, progress and tables, goes to stderr.
    #[arg(long)]
    pub json: bool,

    /// Pin skillprof (iterations, balloon, controller) to these CPUs, e.g. 1 or 0-1,3.
    #[arg(long, value_name = "LIST", value_parser = parse_cpus)]
    pub cpus: Option<Vec<usize>>,

    /// A short experiment for CI: baseline, promo and high, 50 iterations (see above).
    #[arg(long)]
    pub quick: bool,

    /// Safety margin above min, in percent of the [min, low) band's width.
    #[arg(long, default_value_t = 25, value_name = "PERCENT",
          value_parser = clap::value_parser!(u64).range(0..100))]
    pub margin_percent: u64,

    /// Abort the band when PSI memory `full avg10` exceeds this many percent.
    #[arg(long, default_value_t = 20.0, value_name = "PERCENT")]
    pub psi_full_max: f64,

    /// Give up on a band not reached within this many seconds [default: 180; with --quick: 90].
    #[arg(long, value_name = "S")]
    pub settle_timeout_s: Option<u64>,

    /// Measure the kernel from /proc only, without loading BPF probes.
    #[arg(long)]
    pub no_probes: bool,

    /// Folder under which the run folder is created.
    #[arg(long, default_value = "runs", value_name = "DIR")]
    pub out: PathBuf,
}

impl PressureArgs {
    /// The bands to hold, in visiting order (most free memory first).
    pub fn levels(&self) -> Vec<Band> {
        let chosen = match (&self.levels, self.quick) {
            (Some(levels), _) => levels.clone(),
            (None, true) => vec![Band::Baseline, Band::Promo, Band::High],
            (None, false) => band::HOLDABLE.to_vec(),
        };
        band::HOLDABLE
            .into_iter()
            .filter(|band| chosen.contains(band))
            .collect()
    }

    pub fn iterations(&self) -> u32 {
        self.iterations
            .unwrap_or(if self.quick { 50 } else { 1000 })
    }

    pub fn settle_timeout_s(&self) -> u64 {
        self.settle_timeout_s
            .unwrap_or(if self.quick { 90 } else { 180 })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: PressureArgs,
    }

    fn parse(line: &[&str]) -> PressureArgs {
        Cli::try_parse_from([&["pressure"], line].concat())
            .unwrap()
            .args
    }

    #[test]
    fn quick_holds_the_bands_above_low_and_explicit_levels_win() {
        let quick = parse(&["--quick"]);
        assert_eq!(quick.levels(), [Band::Baseline, Band::Promo, Band::High]);
        assert_eq!(quick.iterations(), 50);
        let chosen = parse(&["--quick", "--levels", "low,baseline"]);
        assert_eq!(chosen.levels(), [Band::Baseline, Band::Low]);
        assert_eq!(parse(&[]).levels(), band::HOLDABLE);
    }

    #[test]
    fn bad_values_say_what_is_expected() {
        let error = Cli::try_parse_from(["pressure", "--levels", "min"])
            .err()
            .unwrap();
        assert!(error.to_string().contains("only the kernel"), "{error}");
        assert!(Cli::try_parse_from(["pressure", "--scale-factor", "5000"]).is_err());
        assert_eq!(parse(&["--swapfile", "1G"]).swapfile, Some(1 << 30));
        assert_eq!(parse(&["--page-cache", "64M"]).page_cache, Some(64 << 20));
    }
}
