//! Markers: the host says which request, skill and phase each of its threads works on, by
//! calling `skillhost_mark`, an exported function that does nothing. skillprof attaches a
//! uprobe to it and so attributes the kernel's events (page faults, mmap calls) to skills and
//! phases. The function and its numbering are skillprof's (`skillprof_common`).

use std::ffi::CString;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::task::{Context, Poll};

pub use skillprof_common::{PHASE_CALL, PHASE_COMPILE, PHASE_INSTANTIATE};
use skillprof_common::{PHASE_FIRST, PHASE_HELPER, PHASE_IDLE, skillhost_mark};

/// A skill as markers name it: a number for every mark, and the name behind it.
#[derive(Clone, Debug)]
pub struct SkillTag {
    id: u32,
    name: Arc<CString>,
}

impl SkillTag {
    /// A new id: each registration of a skill (a changed file too) gets its own.
    pub fn new(name: &str) -> Self {
        static IDS: AtomicU32 = AtomicU32::new(0);
        SkillTag {
            id: IDS.fetch_add(1, Ordering::Relaxed),
            // Skill names are validated identifiers: no NUL inside.
            name: Arc::new(CString::new(name).unwrap_or_default()),
        }
    }
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
            skill: skill.clone(),
        }
    }

    fn mark(&self, phase: u32) {
        skillhost_mark(self.request, self.skill.id, phase, self.skill.name.as_ptr());
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
