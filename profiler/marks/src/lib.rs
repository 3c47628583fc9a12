//! Marks for a wasmtime host: the host says which request, skill and phase each of its
//! threads works on, and skillprof attributes the host's memory, faults, CPU and time to
//! them (per-skill series, skills.csv). While skillprof profiles the host, each mark adds the
//! thread's faults, CPU and time since its previous mark to the skill's row in the host's
//! ledger, a memfd skillprof maps; in exact mode a uprobe on the marker function
//! (`skillhost_mark`) also attributes each page fault and mmap call. Unwatched, a mark costs
//! a few atomic operations. The ledger, the function and their numbering are skillprof's
//! (`skillprof_common`).
//!
//! A host registers each skill once ([`SkillTag::new`]), makes a [`Work`] per request, holds
//! [`Work::answering`]'s guard until the request is answered (its latency), and marks the
//! phases it runs: [`Work::begin`] on the thread that compiles, instantiates,
//! calls or resets (drops the request's store), [`Work::leave`] after, or [`Work::track`]
//! around an async call that moves between threads. A tracked call also says where its time
//! between polls went: pending until something woke it, then queued until a thread polled it
//! again. docs/own-host.md walks through it, and `examples/marked_host.rs` is a whole host.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use skillprof_common::ledger;
pub use skillprof_common::{
    FAILED_DEADLINE, FAILED_ERROR, FAILED_INPUT, FAILED_NO_SLOT, FAILED_OUTPUT, FAILED_TRAP,
    FAILED_UNLOADABLE, PHASE_CALL, PHASE_COMPILE, PHASE_INSTANTIATE, PHASE_RESET,
};
use skillprof_common::{PHASE_FIRST, PHASE_HELPER, PHASE_IDLE};

/// A skill as markers name it: its row in the ledger, which holds its name.
#[derive(Clone, Copy, Debug)]
pub struct SkillTag {
    id: u32,
}

impl SkillTag {
    /// A new id: each registration of a skill (a changed file too) gets its own.
    pub fn new(name: &str) -> Self {
        SkillTag {
            id: ledger::register(name),
        }
    }
}

/// The host failed a request of `skill` for `reason` (a `FAILED_*` index), counted in the
/// skill's row of the ledger.
pub fn failed(skill: &SkillTag, reason: usize) {
    ledger::failed(skill.id, reason);
}

/// `--no-marks`: the host marks nothing and keeps no ledger, as a host that does not know
/// skillprof. Call it before any skill is registered.
pub fn never() {
    ledger::disable();
}

/// `--mark-repeat`: each mark is recorded `times` times (a benchmark's amplifier).
pub fn repeat(times: u32) {
    ledger::repeat(times);
}

/// Creates the ledger now, so that a profiler attaching before the first skill finds it.
pub fn ready() {
    ledger::open();
}

/// One request's work for one skill.
#[derive(Clone, Debug)]
pub struct Work {
    request: u64,
    skill: SkillTag,
    /// When the host took the request (0: nobody profiled it then).
    started_ns: u64,
}

impl Work {
    /// The host takes a request of `skill`: its latency runs from here to [`Work::answering`]'s
    /// end.
    pub fn new(skill: &SkillTag) -> Self {
        static REQUESTS: AtomicU64 = AtomicU64::new(1);
        Work {
            request: REQUESTS.fetch_add(1, Ordering::Relaxed),
            skill: *skill,
            started_ns: ledger::started(),
        }
    }

    /// A guard that counts the request as answered when dropped, with its latency since
    /// [`Work::new`], in the skill's row (`skillprof_skill_latency_seconds`): hold it until
    /// the answer is ready, on every path, failures included.
    pub fn answering(&self) -> Answering<'_> {
        Answering(self)
    }

    fn mark(&self, phase: u32) {
        ledger::mark(self.request, self.skill.id, phase);
    }

    /// This thread begins an instance of `phase` (counted once).
    pub fn begin(&self, phase: u32) {
        self.mark(phase | PHASE_FIRST);
    }

    /// This thread helps with `phase` (a compile's worker thread): its events count for the
    /// phase, its time does not.
    pub fn help(&self, phase: u32) {
        self.mark(phase | PHASE_HELPER);
    }

    /// This thread stops working for the skill.
    pub fn leave(&self) {
        self.mark(PHASE_IDLE);
    }

    /// Marks every poll of `future` with the phase it is in: a request's future moves
    /// between runtime threads, and between polls its thread runs other requests. While
    /// skillprof records, the time between two polls counts as the phase's pending time
    /// (until the future was woken) and queued time (woken, until polled).
    pub fn track<'a, F: Future>(&'a self, phase: &'a PhaseCell, future: F) -> Tracked<'a, F> {
        Tracked {
            work: self,
            phase,
            between: Between::default(),
            future,
        }
    }
}

/// Counts its request as answered when dropped ([`Work::answering`]).
#[must_use = "the request is counted as answered when this guard drops"]
pub struct Answering<'a>(&'a Work);

impl Drop for Answering<'_> {
    fn drop(&mut self) {
        ledger::answered(self.0.skill.id, self.0.started_ns);
    }
}

/// The phase a tracked future is in; the future's own code moves it on.
#[derive(Debug)]
pub struct PhaseCell(AtomicU32);

impl PhaseCell {
    /// Starts in `phase`; its first poll begins the instance.
    pub fn new(phase: u32) -> Self {
        PhaseCell(AtomicU32::new(phase | PHASE_FIRST))
    }

    /// Moves on to `phase` from inside the future (so on the thread polling it).
    pub fn enter(&self, work: &Work, phase: u32) {
        self.0.store(phase, Ordering::Relaxed);
        work.begin(phase);
    }
}

thread_local! {
    /// Set by [`yielding`] inside a tracked future's poll, taken when the poll returns.
    static YIELDING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The tracked future being polled on this thread yields: it is ready, and returns Pending
/// only to let others run. Its time until the next poll is queued, however late its runtime
/// wakes it (tokio's `yield_now` wakes a task only once its worker has run the others).
pub fn yielding() {
    YIELDING.with(|yielding| yielding.set(true));
}

/// When a tracked future was last woken: its runtime's waker, wrapped so the wake is timed.
#[derive(Default)]
struct WakeClock {
    woken_ns: AtomicU64,
    inner: Mutex<Option<Waker>>,
}

impl Wake for WakeClock {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken_ns.store(ledger::now_ns(), Ordering::Relaxed);
        if let Some(waker) = self
            .inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            waker.wake_by_ref();
        }
    }
}

/// A tracked future's polls, as far as its time between them is concerned.
#[derive(Default)]
struct Between {
    clock: Option<Arc<WakeClock>>,
    /// The last poll's start and end (0: none yet), and the phase it left the future in.
    started_ns: u64,
    ended_ns: u64,
    phase: u32,
    /// The last poll returned Pending as a yield ([`yielding`]).
    yielded: bool,
}

impl Between {
    /// A poll begins at `now`: the time since the last one's end, split at the wake.
    fn poll_begins(&mut self, skill: u32, now: u64) {
        if self.ended_ns == 0 {
            return;
        }
        let woken = self
            .clock
            .as_ref()
            .map_or(0, |clock| clock.woken_ns.load(Ordering::Relaxed));
        // Yielded, or woken during the last poll (a waker woken at once): queued from its
        // end. Not woken since it began (polled anyway, by a combinator): pending all along.
        let woken = match (self.yielded, woken >= self.started_ns) {
            (true, _) => self.ended_ns,
            (false, true) => woken.clamp(self.ended_ns, now),
            (false, false) => now,
        };
        ledger::waited(skill, self.phase, woken - self.ended_ns, now - woken);
    }

    /// The waker to poll the future with: the runtime's, behind the clock.
    fn waker(&mut self, runtime: &Waker) -> Waker {
        let clock = self.clock.get_or_insert_with(Arc::default);
        let mut inner = clock.inner.lock().unwrap_or_else(|e| e.into_inner());
        if !inner.as_ref().is_some_and(|kept| kept.will_wake(runtime)) {
            *inner = Some(runtime.clone());
        }
        drop(inner);
        Waker::from(clock.clone())
    }
}

pin_project_lite::pin_project! {
    pub struct Tracked<'a, F> {
        work: &'a Work,
        phase: &'a PhaseCell,
        between: Between,
        #[pin]
        future: F,
    }
}

impl<F: Future> Future for Tracked<'_, F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        // The first poll takes the FIRST bit: the instance is counted once.
        let phase = this.phase.0.fetch_and(!PHASE_FIRST, Ordering::Relaxed);
        this.work.mark(phase);
        // Nobody records: the runtime's own waker, and no clock read.
        let until = ledger::lease_until();
        let now = match until {
            0 => 0,
            _ => ledger::now_ns(),
        };
        let between = this.between;
        let polled = if now != 0 && now < until {
            between.poll_begins(this.work.skill.id, now);
            let waker = between.waker(cx.waker());
            between.started_ns = now;
            YIELDING.with(|yielding| yielding.set(false));
            let polled = this.future.poll(&mut Context::from_waker(&waker));
            between.ended_ns = ledger::now_ns();
            between.yielded = YIELDING.with(|yielding| yielding.replace(false));
            between.phase = this.phase.0.load(Ordering::Relaxed) & !PHASE_FIRST;
            polled
        } else {
            // A gap that began unrecorded is not counted when recording resumes.
            between.ended_ns = 0;
            this.future.poll(cx)
        };
        this.work.leave();
        polled
    }
}
