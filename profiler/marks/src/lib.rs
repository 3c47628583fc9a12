//! Marks for a wasmtime host: the host says which request, skill and phase each of its
//! threads works on, and skillprof attributes the host's memory, faults, CPU and time to
//! them (per-skill series, skills.csv). While skillprof profiles the host, each mark adds the
//! thread's faults, CPU and time since its previous mark to the skill's row in the host's
//! ledger, a memfd skillprof maps; in exact mode a uprobe on the marker function
//! (`skillhost_mark`) also attributes each page fault and mmap call. Unwatched, a mark costs
//! a few atomic operations. The ledger, the function and their numbering are skillprof's
//! (`skillprof_common`).
//!
//! A host registers each skill once ([`SkillTag::new`]), makes a [`Work`] per request, and
//! marks the phases it runs: [`Work::begin`] on the thread that compiles, instantiates or
//! calls, [`Work::leave`] after, or [`Work::track`] around an async call that moves between
//! threads. docs/own-host.md walks through it, and `examples/marked_host.rs` is a whole host.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::task::{Context, Poll};

use skillprof_common::ledger;
pub use skillprof_common::{
    FAILED_DEADLINE, FAILED_ERROR, FAILED_INPUT, FAILED_NO_SLOT, FAILED_OUTPUT, FAILED_TRAP,
    FAILED_UNLOADABLE, PHASE_CALL, PHASE_COMPILE, PHASE_INSTANTIATE,
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
}

impl Work {
    pub fn new(skill: &SkillTag) -> Self {
        static REQUESTS: AtomicU64 = AtomicU64::new(1);
        Work {
            request: REQUESTS.fetch_add(1, Ordering::Relaxed),
            skill: *skill,
        }
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
    /// between runtime threads, and between polls its thread runs other requests.
    pub fn track<'a, F: Future>(&'a self, phase: &'a PhaseCell, future: F) -> Tracked<'a, F> {
        Tracked {
            work: self,
            phase,
            future,
        }
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

pin_project_lite::pin_project! {
    pub struct Tracked<'a, F> {
        work: &'a Work,
        phase: &'a PhaseCell,
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
        let polled = this.future.poll(cx);
        this.work.leave();
        polled
    }
}
