//! The experiment: band by band, from the most free memory to the least, settle into the band
//! (printing progress), then time the iterations while the balloon holds it. One result per
//! band; the first band that cannot be held ends the experiment, since every band after it
//! lies lower.

use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use anyhow::Result;

use super::iterations::{self, Summary};
use super::kernel::{KernelMetrics, Window};
use super::kswapd::Kswapd;
use super::signals::{self, Interrupted};
use crate::ground::band::{self, Band};
use crate::producers::balloon::hold::{HeldBalloon, NotHeld, Settling};
use crate::producers::probes::ProbeSession;
use crate::record::balloon::BandHeld;
use crate::record::field::fields;
use crate::record::{Metrics, Row};
use crate::{ground::stats, ground::units};

pub struct Plan {
    /// In the order they are visited.
    pub levels: Vec<Band>,
    pub iterations: u32,
    pub block_bytes: u64,
    pub settle_timeout: Duration,
}

/// How a band ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Held,
    /// A safety rule stopped the hold (the balloon gave its memory back).
    Aborted(String),
    NotReached(String),
    Interrupted(Interrupted),
}

impl Outcome {
    pub fn name(&self) -> &'static str {
        match self {
            Outcome::Held => "held",
            Outcome::Aborted(_) => "aborted",
            Outcome::NotReached(_) => "not reached",
            Outcome::Interrupted(_) => "interrupted",
        }
    }

    pub fn reason(&self) -> String {
        match self {
            Outcome::Held => String::new(),
            Outcome::Aborted(reason) | Outcome::NotReached(reason) => reason.clone(),
            Outcome::Interrupted(signal) => format!("skillprof received {}", signal.name()),
        }
    }
}

#[derive(Clone)]
pub struct BandResult {
    pub band: Band,
    pub outcome: Outcome,
    pub settle: Duration,
    pub block_bytes: u64,
    /// `None` when no iteration ran.
    pub times: Option<Summary>,
    /// Every iteration's time, in ms, in the order they ran.
    pub iteration_ms: Vec<f64>,
    /// The median iteration against baseline's, with its bootstrap 95% CI; `None` for
    /// baseline itself, or without iterations on either side.
    pub vs_baseline: Option<Slowdown>,
    pub held: BandHeld,
    /// Over the iterations; over the attempt to settle for a band that was not reached.
    pub kernel: KernelMetrics,
}

// pressure.csv's columns: one row per band, then the balloon's and the kernel's.
fields! {
    impl BandResult: fn write_own(&self, row: &mut Row) -> row {
        let times = self.times.as_ref();
        let slowdown = self.vs_baseline;
    }
    BAND "band" Text "the band held" = self.band.name();
    OUTCOME "outcome" Text "held, or why not" = self.outcome.name();
    REASON "reason" Text "what stopped the band, in words" = self.outcome.reason();
    SETTLE "settle_s" Seconds "time to get free memory into the band" = self.settle.as_secs_f64();
    BLOCK "block_kb" Kib "what each iteration allocates, touches and frees" = self.block_bytes / 1024;
    ITERATIONS "iterations" Count "iterations timed in the band" = times.map_or(0, |t| t.count as u64);
    MEAN "iter_mean_ms" Ms "mean iteration" = times.map(|s| s.mean_ms);
    MEDIAN "iter_median_ms" Ms "median iteration" = times.map(|s| s.median_ms);
    P99 "iter_p99_ms" Ms "99th percentile iteration (nearest rank)" = times.map(|s| s.p99_ms);
    MIN "iter_min_ms" Ms "fastest iteration" = times.map(|s| s.min_ms);
    MAX "iter_max_ms" Ms "slowest iteration" = times.map(|s| s.max_ms);
    VS "vs_baseline_pct" Percent "the median iteration against baseline's" = slowdown.map(|s| s.median_pct);
    VS_LO "vs_baseline_lo_pct" Percent "its bootstrap 95% interval, low end" = slowdown.map(|s| s.lo_pct);
    VS_HI "vs_baseline_hi_pct" Percent "its bootstrap 95% interval, high end" = slowdown.map(|s| s.hi_pct);
}

impl Metrics for BandResult {
    fn write(&self, row: &mut Row) {
        self.write_own(row);
        BandHeld::write_cells(Some(&self.held), &[], row);
        self.kernel.write(row);
    }
}

/// How much slower a band's median iteration was than baseline's, in percent, with the
/// bootstrap 95% confidence interval of that ratio.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Slowdown {
    pub median_pct: f64,
    pub lo_pct: f64,
    pub hi_pct: f64,
}

/// Resamples for the slowdown's interval: enough that the interval's ends move by well under
/// a tenth of a percent between seeds.
const RESAMPLES: usize = 2000;

impl Slowdown {
    pub fn of(values: &[f64], baseline: &[f64]) -> Option<Slowdown> {
        if values.is_empty() || baseline.is_empty() {
            return None;
        }
        let median = |v: &[f64]| stats::sort_median(&mut v.to_vec());
        let (lo_pct, hi_pct) = stats::slowdown_ci(values, baseline, RESAMPLES, 17);
        Some(Slowdown {
            median_pct: 100.0 * (median(values) / median(baseline) - 1.0),
            lo_pct,
            hi_pct,
        })
    }
}

/// What the experiment measures with.
pub struct Instruments<'a> {
    pub probes: Option<&'a ProbeSession>,
    pub kswapd: &'a Kswapd,
}

/// Runs every band of `plan`, handing each result to `done` as soon as it is known.
pub fn run(
    plan: &Plan,
    held: &HeldBalloon,
    instruments: &Instruments<'_>,
    done: &mut dyn FnMut(&BandResult) -> Result<()>,
) -> Result<()> {
    let mut baseline: Vec<f64> = Vec::new();
    for (index, &band) in plan.levels.iter().enumerate() {
        let mut result = run_band(plan, band, index as u32, held, instruments)?;
        if band == Band::Baseline {
            baseline.clone_from(&result.iteration_ms);
        } else {
            result.vs_baseline = Slowdown::of(&result.iteration_ms, &baseline);
        }
        done(&result)?;
        if result.outcome != Outcome::Held {
            break;
        }
    }
    Ok(())
}

fn run_band(
    plan: &Plan,
    band: Band,
    index: u32,
    held: &HeldBalloon,
    instruments: &Instruments<'_>,
) -> Result<BandResult> {
    let Instruments { probes, kswapd } = *instruments;
    println!(
        "{band} {}: settling (the balloon grows or shrinks until free memory is in the band)",
        band::interval(band)
    );
    held.retarget(band)?;
    // Two windows per band, so that the settling's reclaim does not count in the iterations'.
    let settling = Window::begin(2 * index, probes, kswapd)?;
    let started = Instant::now();
    let settled = held.settle(plan.settle_timeout, &mut progress_line());
    let settle = started.elapsed();
    let not_reached = |outcome: Outcome| -> Result<BandResult> {
        Ok(BandResult {
            band,
            outcome,
            settle,
            block_bytes: plan.block_bytes,
            times: None,
            iteration_ms: Vec::new(),
            vs_baseline: None,
            held: held.held(),
            kernel: settling.end(probes, kswapd)?,
        })
    };
    match settled {
        Ok(()) => {}
        Err(NotHeld::Aborted(reason)) => return not_reached(Outcome::Aborted(reason)),
        Err(NotHeld::TimedOut(reason)) => return not_reached(Outcome::NotReached(reason)),
        Err(NotHeld::Stopped) => {
            let signal = signals::received().expect("only a signal stops the settling");
            return not_reached(Outcome::Interrupted(signal));
        }
    }
    let free = held.held();
    println!(
        "{band}: held after {:.1} s (balloon {:.2} GiB, free {}); {} iterations of {:.1} MiB",
        settle.as_secs_f64(),
        free.balloon_bytes as f64 / f64::from(1 << 30),
        units::pages(free.free_pages),
        plan.iterations,
        plan.block_bytes as f64 / f64::from(1 << 20)
    );

    let window = Window::begin(2 * index + 1, probes, kswapd)?;
    held.reset_window();
    let page = procfs::page_size() as usize;
    let mut times = Vec::with_capacity(plan.iterations as usize);
    let mut outcome = Outcome::Held;
    for _ in 0..plan.iterations {
        if let Some(signal) = signals::received() {
            outcome = Outcome::Interrupted(signal);
            break;
        }
        if let Some(reason) = held.aborted() {
            outcome = Outcome::Aborted(reason);
            break;
        }
        times.push(iterations::allocate_touch_free(
            plan.block_bytes as usize,
            page,
        )?);
    }
    let kernel = window.end(probes, kswapd)?;
    let held_band = held.held();
    // An abort during the last iteration still counts.
    if let (Outcome::Held, Some(reason)) = (&outcome, &held_band.aborted) {
        outcome = Outcome::Aborted(reason.clone());
    }
    Ok(BandResult {
        band,
        outcome,
        settle,
        block_bytes: plan.block_bytes,
        times: Summary::of(&times),
        iteration_ms: times.iter().map(|t| t.as_secs_f64() * 1e3).collect(),
        vs_baseline: None,
        held: held_band,
        kernel,
    })
}

/// Prints a settling progress line about once a second, and the reason the first time the
/// aim is eased; stops the wait on SIGINT or SIGTERM.
fn progress_line() -> impl FnMut(&Settling) -> ControlFlow<()> {
    let mut said_eased = false;
    move |settling: &Settling| {
        if let (false, Some(reason)) = (said_eased, &settling.eased) {
            println!("  {reason}");
            said_eased = true;
        }
        println!(
            "  {:5.1} s  balloon {:6.2} GiB  {}",
            settling.elapsed.as_secs_f64(),
            settling.balloon_bytes as f64 / f64::from(1 << 30),
            settling.aims.describe()
        );
        if let Some(late) = settling.late {
            println!(
                "  a balloon step is {:.1} s past its limit, with free memory above the high \
                 watermark: the machine is slow to hand out memory; waiting",
                late.as_secs_f64()
            );
        }
        match signals::received() {
            Some(_) => ControlFlow::Break(()),
            None => ControlFlow::Continue(()),
        }
    }
}
