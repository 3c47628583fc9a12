//! Holding a band: a thread that reads free memory every interval and resizes the balloon to
//! keep it in the band, while whatever runs beside it (the experiment's iterations, a
//! workload's host) allocates and frees. It enforces the safety rules on every reading and,
//! when one is broken, gives all the memory back and stops. What a reading means (`step`)
//! is decided without I/O; this module is the threads, the balloon and the watchdog around it.
//!
//! The runner's view: [`Balloon::hold`] a band, [`HeldBalloon::settle`] until free memory is
//! in it, then per entry [`HeldBalloon::reset_window`] and [`HeldBalloon::held`]; move with
//! [`HeldBalloon::retarget`]; end with [`HeldBalloon::release`].

use std::ops::{ControlFlow, Range};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail};

use super::aim::{Aims, Learnt};
use super::bounds;
use super::process::{Adjust, Balloon, Killer};
use super::safety::Safety;
use crate::ground::band::{self, Band};
use crate::ground::units;
use crate::producers::sample::PROC;
use crate::producers::sample::meminfo::{self, Meminfo};
use crate::producers::sample::psi::{self, Psi};
use crate::producers::sample::reach::{self, Reach};
use crate::record::balloon::{BandHeld, Basis, Bounds, ZoneHeld};
use crate::record::sampling::{Watermarks, ZoneId};

mod step;

use procfs::page_size;
use step::Action;

/// Readings in the band, in a row, before a band counts as reached.
const SETTLED_READS: u32 = 4;
/// The time a reading or a shrink should take. Both take milliseconds; a kernel out of memory
/// (free memory at min, nothing left to reclaim) stalls them, and then the watchdog kills the
/// balloon: a kill needs no memory.
const STEP_LIMIT: Duration = Duration::from_secs(1);
/// ... and a grow gets this rate on top (touching pages runs at ~1.5 GB/s here, slower while
/// the kernel initialises memory lazily).
const GROW_BYTES_PER_SECOND: u64 = 128 << 20;
/// How far past its limit a step may run while free memory stays above the high watermark.
/// There the kernel neither reclaims nor throttles allocations, so a step that slow is waiting
/// for the machine, not for memory: a hypervisor backing guest pages on first touch stalled a
/// CI run's balloon for seconds with 6 GiB free, and killing it then aborted a band for
/// nothing. Below high, kswapd or direct reclaim may be what the step waits for, and a late
/// step is killed at once.
const LATE_LIMIT: Duration = Duration::from_secs(60);
const WATCH_INTERVAL: Duration = Duration::from_millis(100);

#[derive(Clone, Debug)]
pub struct HoldOptions {
    pub safety: Safety,
    /// What the band is held on: each zone, or the sum.
    pub basis: Basis,
    /// How often free memory is read and the balloon adjusted.
    pub interval: Duration,
    /// Every reading, for a time series (the experiment's pressure_samples.csv).
    pub samples: Option<Sender<HoldSample>>,
}

impl Default for HoldOptions {
    fn default() -> Self {
        HoldOptions {
            safety: Safety::default(),
            basis: Basis::default(),
            interval: Duration::from_millis(50),
            samples: None,
        }
    }
}

/// One reading of the controller.
#[derive(Clone, Debug)]
pub struct HoldSample {
    pub at: Instant,
    /// The wall clock at the reading, for joining with other tools' timelines.
    pub wall: SystemTime,
    /// The band being held.
    pub band: Band,
    pub settled: bool,
    pub reach: Reach,
    pub balloon_bytes: u64,
    pub psi: Option<Psi>,
    pub meminfo: Meminfo,
}

impl BandHeld {
    /// A window without readings yet; `zones` fixes the per-zone columns.
    fn new(
        band: Band,
        basis: Basis,
        bounds: Bounds,
        watermarks: Watermarks,
        balloon_bytes: u64,
        zones: impl IntoIterator<Item = ZoneId>,
    ) -> BandHeld {
        // min and max start inverted, so the first reading sets both.
        BandHeld {
            band,
            basis,
            reads: 0,
            in_band_reads: 0,
            min_free_pages: u64::MAX,
            max_free_pages: 0,
            free_pages: 0,
            lowest_band: Band::Baseline,
            highest_band: Band::Min,
            bounds,
            watermarks,
            balloon_bytes,
            max_balloon_bytes: balloon_bytes,
            adjustments: 0,
            floor_crossings: 0,
            late_steps: 0,
            slowest_step_ms: 0,
            max_boost_pages: 0,
            zones: zones
                .into_iter()
                .map(|id| ZoneHeld {
                    id,
                    min_usable_pages: None,
                    lowest_band: None,
                })
                .collect(),
            eased: None,
            aborted: None,
        }
    }

    fn record(&mut self, reach: &Reach, aims: &Aims, balloon_bytes: u64) {
        let free = reach.free_pages;
        let band = reach.band();
        self.reads += 1;
        self.in_band_reads += u64::from(aims.in_band());
        self.min_free_pages = self.min_free_pages.min(free);
        self.max_free_pages = self.max_free_pages.max(free);
        self.free_pages = free;
        self.lowest_band = self.lowest_band.min(band);
        self.highest_band = self.highest_band.max(band);
        self.bounds = aims.summed.bounds;
        self.watermarks = reach.watermarks;
        self.balloon_bytes = balloon_bytes;
        self.max_balloon_bytes = self.max_balloon_bytes.max(balloon_bytes);
        self.max_boost_pages = self.max_boost_pages.max(reach.boost_pages);
        for zone in reach.reachable() {
            if let Some(held) = self.zones.iter_mut().find(|held| held.id == zone.id) {
                let usable = zone.usable_pages();
                held.min_usable_pages =
                    Some(held.min_usable_pages.map_or(usable, |m| m.min(usable)));
                held.lowest_band =
                    Some(held.lowest_band.map_or(zone.band(), |b| b.min(zone.band())));
            }
        }
    }

    /// Share of the readings inside the band, in percent.
    pub fn in_band_percent(&self) -> f64 {
        if self.reads == 0 {
            return 0.0;
        }
        100.0 * self.in_band_reads as f64 / self.reads as f64
    }
}

/// Why a band was not reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotHeld {
    /// A safety rule stopped the hold; the balloon is empty.
    Aborted(String),
    /// Free memory did not get into the band in time.
    TimedOut(String),
    /// The progress callback asked to stop waiting.
    Stopped,
}

/// What `settle` reports while it waits, about once a second.
#[derive(Clone, Debug)]
pub struct Settling {
    pub band: Band,
    pub elapsed: Duration,
    pub balloon_bytes: u64,
    pub aims: Aims,
    pub eased: Option<String>,
    /// How far past its limit the controller's current step is running, if it is.
    pub late: Option<Duration>,
}

/// One reading of the system.
struct Reading {
    reach: Reach,
    psi: Option<Psi>,
    meminfo: Meminfo,
}

impl Reading {
    fn take() -> Result<Reading> {
        let proc_root = Path::new(PROC);
        Ok(Reading {
            reach: reach::read(proc_root)?,
            psi: psi::read(proc_root)?,
            meminfo: meminfo::read(proc_root)?,
        })
    }
}

/// What the controller and the caller share.
struct State {
    band: Band,
    settled: bool,
    in_band_streak: u32,
    /// The last reading was below the safety floor.
    below_floor: bool,
    window: BandHeld,
    /// The last reading and what it was aimed at.
    last: Option<(Reach, Aims)>,
    eased: Option<String>,
    aborted: Option<String>,
    learnt: Learnt,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    stop: AtomicBool,
    /// The controller thread has ended (the watchdog ends with it).
    ended: AtomicBool,
    /// When the controller's current step must be done, in ms since `epoch`; 0: not watched.
    deadline_ms: AtomicU64,
    /// Machine-wide free pages (sysinfo's count) below which a late step may be waiting on
    /// reclaim: the high watermark, translated at the last reading. MAX before the first.
    reclaim_below: AtomicU64,
    epoch: Instant,
}

impl Shared {
    fn new(state: State) -> Self {
        Shared {
            state: Mutex::new(state),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
            ended: AtomicBool::new(false),
            deadline_ms: AtomicU64::new(0),
            reclaim_below: AtomicU64::new(u64::MAX),
            epoch: Instant::now(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic in the controller is reported as an abort; the state itself stays usable.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Runs `step` under the watchdog's eye: it should be done within `limit`. A late step
    /// that finished counts in the window.
    fn watched<T>(&self, limit: Duration, step: impl FnOnce() -> T) -> T {
        let started = self.now_ms();
        let deadline = started + limit.as_millis() as u64;
        self.deadline_ms.store(deadline.max(1), Ordering::SeqCst);
        let result = step();
        self.deadline_ms.store(0, Ordering::SeqCst);
        let ended = self.now_ms();
        let mut state = self.lock();
        state.window.slowest_step_ms = state.window.slowest_step_ms.max(ended - started);
        state.window.late_steps += u64::from(ended > deadline);
        result
    }

    /// How far past its limit the current step is running, if it is.
    fn late(&self) -> Option<Duration> {
        let deadline = self.deadline_ms.load(Ordering::SeqCst);
        let now = self.now_ms();
        (deadline != 0 && now > deadline).then(|| Duration::from_millis(now - deadline))
    }

    fn abort(&self, reason: String) {
        let mut state = self.lock();
        state.window.aborted.get_or_insert(reason.clone());
        state.aborted.get_or_insert(reason);
        drop(state);
        self.changed.notify_all();
    }
}

/// A balloon holding a band; see the module documentation. Dropping it releases the memory.
pub struct HeldBalloon {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<Result<()>>>,
    watchdog: Option<JoinHandle<()>>,
    balloon_pid: u32,
}

impl Balloon {
    /// Starts a balloon and the thread that keeps free memory in `band`. Returns at once;
    /// [`HeldBalloon::settle`] waits until the band is reached.
    pub fn hold(band: Band, options: HoldOptions) -> Result<HeldBalloon> {
        let reading = Reading::take()?;
        let aims = Aims::new(options.basis, band, &reading.reach, &options.safety, false)?;
        let balloon = Balloon::spawn()?;
        let balloon_pid = balloon.pid();
        let shared = Arc::new(Shared::new(State {
            band,
            settled: false,
            in_band_streak: 0,
            below_floor: false,
            window: BandHeld::new(
                band,
                options.basis,
                aims.summed.bounds,
                reading.reach.watermarks,
                0,
                reading.reach.zones.iter().map(|zone| zone.id.clone()),
            ),
            last: None,
            eased: None,
            aborted: None,
            learnt: Learnt::default(),
        }));
        let killer = balloon.killer();
        let controller = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("balloon".into())
            .spawn(move || control(&controller, balloon, &options))
            .context("starting the balloon's controller thread")?;
        let watched = Arc::clone(&shared);
        let watchdog = std::thread::Builder::new()
            .name("balloon-watch".into())
            .spawn(move || watch(&watched, &killer))
            .context("starting the balloon's watchdog thread")?;
        Ok(HeldBalloon {
            shared,
            thread: Some(thread),
            watchdog: Some(watchdog),
            balloon_pid,
        })
    }
}

impl HeldBalloon {
    /// The balloon's process id (for checks that it is gone after `release`).
    pub fn balloon_pid(&self) -> u32 {
        self.balloon_pid
    }

    /// Aims at another band from the next reading on; starts a new window.
    pub fn retarget(&self, band: Band) -> Result<()> {
        let mut state = self.shared.lock();
        if let Some(reason) = &state.aborted {
            bail!("the balloon stopped holding: {reason}");
        }
        let bounds = bounds::bounds(band, &state.window.watermarks)?;
        state.band = band;
        state.settled = false;
        state.in_band_streak = 0;
        state.window.band = band;
        state.window.bounds = bounds;
        reset(&mut state.window);
        Ok(())
    }

    /// Waits until free memory has been in the band for a few readings in a row, calling
    /// `progress` about once a second; `ControlFlow::Break` from it stops the wait.
    pub fn settle(
        &self,
        timeout: Duration,
        progress: &mut dyn FnMut(&Settling) -> ControlFlow<()>,
    ) -> Result<(), NotHeld> {
        let started = Instant::now();
        let mut next_report = started + Duration::from_secs(1);
        let mut state = self.shared.lock();
        loop {
            if let Some(reason) = &state.aborted {
                return Err(NotHeld::Aborted(reason.clone()));
            }
            if state.settled {
                return Ok(());
            }
            let now = Instant::now();
            let settling = state.last.as_ref().map(|(_, aims)| Settling {
                band: state.band,
                elapsed: now - started,
                balloon_bytes: state.window.balloon_bytes,
                aims: aims.clone(),
                eased: state.eased.clone().filter(|_| state.band != Band::Baseline),
                late: self.shared.late(),
            });
            if now >= started + timeout {
                let detail = settling.map_or("no reading yet".to_string(), |s| {
                    format!(
                        "{} (the band {}), and the balloon holds {} MiB",
                        s.aims.describe(),
                        band::interval(s.band),
                        s.balloon_bytes >> 20
                    )
                });
                return Err(NotHeld::TimedOut(format!(
                    "the {} band was not reached in {} s: {detail}",
                    state.band,
                    timeout.as_secs()
                )));
            }
            if now >= next_report {
                next_report = now + Duration::from_secs(1);
                if let Some(settling) = settling {
                    drop(state);
                    if progress(&settling).is_break() {
                        return Err(NotHeld::Stopped);
                    }
                    state = self.shared.lock();
                    continue;
                }
            }
            let wait = next_report.min(started + timeout) - now;
            state = self
                .shared
                .changed
                .wait_timeout(state, wait)
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .0;
        }
    }

    /// The band actually held since the last retarget or reset.
    pub fn held(&self) -> BandHeld {
        self.shared.lock().window.clone()
    }

    /// Starts a new window (the runner calls it at each entry).
    pub fn reset_window(&self) {
        let mut guard = self.shared.lock();
        let state = &mut *guard;
        reset(&mut state.window);
        // An aborted hold holds nothing: every later window says so, and none opens with
        // the last reading (whoever aborted it, the controller or the watchdog).
        if state.aborted.is_some() {
            state.window.aborted.clone_from(&state.aborted);
            state.window.balloon_bytes = 0;
        } else if let Some((reach, aims)) = &state.last {
            let balloon_bytes = state.window.balloon_bytes;
            state.window.record(reach, aims, balloon_bytes);
        }
    }

    /// Why the hold stopped, if a safety rule (or a failure) stopped it.
    pub fn aborted(&self) -> Option<String> {
        self.shared.lock().aborted.clone()
    }

    /// Stops holding and waits until the balloon's memory is back with the kernel.
    pub fn release(mut self) -> Result<BandHeld> {
        self.stop()?;
        Ok(self.held())
    }

    fn stop(&mut self) -> Result<()> {
        self.shared.stop.store(true, Ordering::SeqCst);
        let controlled = match self.thread.take().map(JoinHandle::join) {
            None | Some(Ok(Ok(()))) => Ok(()),
            Some(Ok(Err(error))) => Err(error),
            Some(Err(_)) => Err(anyhow::anyhow!(
                "the balloon's controller thread panicked (its memory was released)"
            )),
        };
        // Also after a panic of the controller; the watchdog wakes every WATCH_INTERVAL.
        self.shared.ended.store(true, Ordering::SeqCst);
        if let Some(watchdog) = self.watchdog.take() {
            let _ = watchdog.join();
        }
        controlled
    }
}

impl Drop for HeldBalloon {
    fn drop(&mut self) {
        if let Err(error) = self.stop() {
            eprintln!("skillprof: releasing the balloon: {error:#}");
        }
    }
}

fn reset(window: &mut BandHeld) {
    *window = BandHeld::new(
        window.band,
        window.basis,
        window.bounds,
        window.watermarks,
        window.balloon_bytes,
        window.zones.iter().map(|zone| zone.id.clone()),
    );
}

/// The controller thread: hold until told to stop or a safety rule is broken, then give the
/// memory back whatever happened. A failure to hold (the balloon killed, procfs unreadable)
/// ends the hold like an abort, with the error as its reason; only a failure to release is
/// this thread's error.
fn control(shared: &Shared, mut balloon: Balloon, options: &HoldOptions) -> Result<()> {
    if let Err(error) = hold_until_stopped(shared, &mut balloon, options) {
        shared.abort(format!("{error:#}"));
    }
    let released = balloon.release();
    shared.ended.store(true, Ordering::SeqCst);
    released
}

/// The watchdog thread: kills the balloon when the controller's step is late and free memory
/// is below the high watermark (the kernel may be reclaiming, out of memory, and the controller
/// cannot shrink), or when the step is far too late whatever free memory is. It allocates
/// nothing while it watches.
fn watch(shared: &Shared, killer: &Killer) {
    let page = page_size();
    while !shared.ended.load(Ordering::SeqCst) {
        std::thread::sleep(WATCH_INTERVAL);
        let Some(late) = shared.late() else {
            continue;
        };
        // Unreadable counts as below: the safe side.
        let free = reach::free_ram_bytes().map_or(0, |bytes| bytes / page);
        let reclaim_below = shared.reclaim_below.load(Ordering::SeqCst);
        if let Some(verdict) = LateStep::judge(late, free, reclaim_below) {
            // The kill first: it frees the memory everything else, the reason's words
            // included, may be waiting for.
            killer.kill();
            shared.abort(verdict.reason(late, free));
            return;
        }
    }
}

/// Why a late step ends the hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LateStep {
    /// Free memory is below the high watermark: the step may be stalled in reclaim.
    Reclaiming,
    /// Far too late, with free memory above high all along.
    TooSlow,
}

impl LateStep {
    /// Whether a step `late` past its limit, with `free` pages free machine-wide, ends the
    /// hold; `None` to keep waiting. Allocates nothing.
    fn judge(late: Duration, free: u64, reclaim_below: u64) -> Option<LateStep> {
        if free < reclaim_below {
            Some(LateStep::Reclaiming)
        } else if late > LATE_LIMIT {
            Some(LateStep::TooSlow)
        } else {
            None
        }
    }

    fn reason(self, late: Duration, free: u64) -> String {
        match self {
            LateStep::Reclaiming => format!(
                "a balloon step ran {:.1} s past its limit with free memory below the high \
                 watermark, where the kernel reclaims (stalled for memory, the controller could \
                 not shrink the balloon): the balloon was killed to give its memory back",
                late.as_secs_f64()
            ),
            LateStep::TooSlow => format!(
                "a balloon step ran {} s past its limit with {} free, above the high watermark, \
                 where the kernel neither reclaims nor throttles: the machine hands out memory \
                 too slowly to hold a band (a hypervisor backing guest memory on first touch), \
                 so the balloon was killed to give its memory back",
                late.as_secs(),
                units::pages(free)
            ),
        }
    }
}

fn hold_until_stopped(shared: &Shared, balloon: &mut Balloon, options: &HoldOptions) -> Result<()> {
    let page = page_size();
    let mut next = Instant::now();
    while !shared.stop.load(Ordering::SeqCst) {
        if shared.lock().aborted.is_some() {
            return Ok(());
        }
        let reading = shared.watched(STEP_LIMIT, Reading::take)?;
        let mut state = shared.lock();
        let action = step::step(&mut state, &reading, &options.safety, balloon.bytes(), page)?;
        shared.reclaim_below.store(
            reading
                .reach
                .free_ram_pages_for(reading.reach.watermarks.high),
            Ordering::SeqCst,
        );
        let adjust = match action {
            Action::Abort(reason) => {
                drop(state);
                shared.abort(reason);
                shared.watched(STEP_LIMIT, || balloon.resize(0))?;
                let mut state = shared.lock();
                state.window.balloon_bytes = 0;
                return Ok(());
            }
            Action::Hold(adjust) => adjust,
        };
        let band = state.band;
        let settled = state.settled;
        drop(state);

        if let Some(adjust) = adjust {
            let before = balloon.bytes();
            let growth = adjust.touches(before / page) * page;
            let limit = STEP_LIMIT + Duration::from_secs(growth / GROW_BYTES_PER_SECOND);
            let held = shared.watched(limit, || balloon.adjust(&adjust))?;
            let mut state = shared.lock();
            let zone_of = |state: &State, pfns: &Range<u64>| {
                let (_, aims) = state.last.as_ref()?;
                let held = aims.held.iter().find(|h| h.pfns.as_ref() == Some(pfns))?;
                held.zone.clone()
            };
            match &adjust {
                Adjust::Give { pfns, .. } if held == before => {
                    let zone = zone_of(&state, pfns);
                    Learnt::note(&mut state.learnt.holds_none, zone);
                }
                Adjust::Take { pfns, .. } if held == before => {
                    let zone = zone_of(&state, pfns);
                    Learnt::note(&mut state.learnt.refused, zone);
                }
                _ if held > before => {
                    state.learnt.holds_none.clear();
                    if let Adjust::Take { pfns, .. } = &adjust {
                        let zone = zone_of(&state, pfns);
                        state
                            .learnt
                            .refused
                            .retain(|refused| Some(refused) != zone.as_ref());
                    }
                }
                _ => {}
            }
            state.window.adjustments += 1;
            state.window.balloon_bytes = held;
            state.window.max_balloon_bytes = state.window.max_balloon_bytes.max(held);
        }
        shared.changed.notify_all();
        if let Some(samples) = &options.samples {
            // A caller that stopped listening does not stop the hold.
            let _ = samples.send(HoldSample {
                at: Instant::now(),
                wall: SystemTime::now(),
                band,
                settled,
                reach: reading.reach,
                balloon_bytes: balloon.bytes(),
                psi: reading.psi,
                meminfo: reading.meminfo,
            });
        }
        next += options.interval;
        let now = Instant::now();
        match next.checked_duration_since(now) {
            Some(wait) => std::thread::sleep(wait),
            None => next = now,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record;
    use crate::record::Row;

    fn reading(zoneinfo: &str) -> Reach {
        reach::parse(zoneinfo).unwrap()
    }

    /// A hold without its threads, its last reading taken from the captured zoneinfo.
    fn held_after_one_reading() -> HeldBalloon {
        let reach = reading(include_str!("../../sample/testdata/zoneinfo"));
        let aims = Aims::new(Basis::Summed, Band::High, &reach, &Safety::default(), false).unwrap();
        let mut window = BandHeld::new(
            Band::High,
            Basis::Summed,
            aims.summed.bounds,
            reach.watermarks,
            0,
            reach.zones.iter().map(|zone| zone.id.clone()),
        );
        window.record(&reach, &aims, 1 << 30);
        window.balloon_bytes = 1 << 30;
        HeldBalloon {
            shared: Arc::new(Shared::new(State {
                band: Band::High,
                settled: true,
                in_band_streak: SETTLED_READS,
                below_floor: false,
                window,
                last: Some((reach, aims)),
                eased: None,
                aborted: None,
                learnt: Learnt::default(),
            })),
            thread: None,
            watchdog: None,
            balloon_pid: 0,
        }
    }

    /// A late step ends the hold at once only when free memory is below the high watermark;
    /// above it, only once the step is a minute late.
    #[test]
    fn a_late_step_is_killed_below_high_at_once_and_above_it_after_a_minute() {
        let second = Duration::from_secs(1);
        assert_eq!(LateStep::judge(second, 2000, 1000), None);
        assert_eq!(LateStep::judge(LATE_LIMIT, 2000, 1000), None);
        assert_eq!(
            LateStep::judge(second, 999, 1000),
            Some(LateStep::Reclaiming)
        );
        let too_late = LATE_LIMIT + second;
        assert_eq!(
            LateStep::judge(too_late, 2000, 1000),
            Some(LateStep::TooSlow)
        );
        let slow = LateStep::TooSlow.reason(too_late, 2000);
        assert!(slow.contains("61 s past its limit"), "{slow}");
        assert!(slow.contains("above the high watermark"), "{slow}");
        // Before the first reading, every late step counts as one below high.
        assert_eq!(
            LateStep::judge(second, u64::MAX - 1, u64::MAX),
            Some(LateStep::Reclaiming)
        );
    }

    /// An entry shorter than the reading interval still says where free memory was; once a
    /// safety rule stopped the hold, no later entry claims a band or a balloon.
    #[test]
    fn a_window_opens_with_the_last_reading_unless_the_hold_was_aborted() {
        let held = held_after_one_reading();
        held.reset_window();
        let window = held.held();
        assert_eq!((window.reads, window.in_band_reads), (1, 0));
        assert_eq!(window.balloon_bytes, 1 << 30);
        assert_eq!(window.aborted, None);

        held.shared.abort("below the floor".to_string());
        held.reset_window();
        let window = held.held();
        assert_eq!(window.reads, 0);
        assert_eq!(window.balloon_bytes, 0);
        assert_eq!(window.aborted.as_deref(), Some("below the floor"));
    }

    /// commands.csv needs the same columns for every entry, read or not.
    #[test]
    fn a_window_writes_the_same_documented_columns_before_and_after_readings() {
        let captured = reading(include_str!("../../sample/testdata/zoneinfo"));
        let marks = captured.watermarks;
        let aims = Aims::new(
            Basis::PerZone,
            Band::High,
            &captured,
            &Safety::default(),
            false,
        )
        .unwrap();
        let mut window = BandHeld::new(
            Band::High,
            Basis::PerZone,
            aims.summed.bounds,
            marks,
            0,
            captured.zones.iter().map(|zone| zone.id.clone()),
        );
        let zones: Vec<ZoneId> = captured.zones.iter().map(|zone| zone.id.clone()).collect();
        let mut none = Row::default();
        BandHeld::write_cells(None, &zones, &mut none);
        assert!(none.values().all(|v| v.is_empty()));
        let mut empty = Row::default();
        BandHeld::write_cells(Some(&window), &[], &mut empty);
        assert_eq!(
            none.names().collect::<Vec<_>>(),
            empty.names().collect::<Vec<_>>()
        );
        assert_eq!(empty.csv("pressure_min_free_kb").as_deref(), Some(""));
        assert_eq!(
            empty.csv("pressure_zone_0_Normal_lowest_band").as_deref(),
            Some("")
        );

        window.record(&captured, &aims, 4096);
        let at_low = reading(&include_str!("../../sample/testdata/zoneinfo").replacen(
            "pages free     2080781",
            "pages free     16426",
            1,
        ));
        window.record(&at_low, &aims, 8192);
        let mut read = Row::default();
        BandHeld::write_cells(Some(&window), &[], &mut read);
        assert_eq!(
            empty.names().collect::<Vec<_>>(),
            read.names().collect::<Vec<_>>()
        );
        assert_eq!(read.csv("pressure_reads").as_deref(), Some("2"));
        assert_eq!(
            read.csv("pressure_lowest_band").as_deref(),
            Some("baseline")
        );
        assert_eq!(
            read.csv("pressure_zone_0_Normal_lowest_band").as_deref(),
            Some("low")
        );
        assert_eq!(
            read.csv("pressure_zone_0_DMA_lowest_band").as_deref(),
            Some("")
        );
        assert_eq!(read.csv("pressure_balloon_max_kb").as_deref(), Some("8"));
        for name in read.names() {
            assert!(
                record::documentation(name).is_some(),
                "{name} is not in record::columns()"
            );
        }
    }
}
