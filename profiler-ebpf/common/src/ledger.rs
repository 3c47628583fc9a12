//! The host's ledger: what each skill's phases cost, kept by the host itself in memory that
//! skillprof maps too, so that a mark never enters the kernel through a probe.
//!
//! At each mark a host thread reads its own counters with one `getrusage(RUSAGE_THREAD)` and
//! adds their change since its previous mark to the row of the stretch that ends. The rows
//! live in a memfd named [`LEDGER_NAME`]; skillprof finds it in `/proc/PID/maps`, maps it,
//! and reads the rows at each boundary. Nothing is recorded unless skillprof holds a lease
//! (a CLOCK_MONOTONIC deadline it renews), so a host nobody profiles pays one load per mark,
//! and a SIGKILLed skillprof stops the recording when its lease runs out.
//!
//! Each mark also stores the skill and phase the thread works on now in a thread-local of
//! the host's (its "mark slot"), whose distance from the thread pointer the header gives. The
//! exact mode's programs read it from the thread's own TLS at each fault and call, a page the
//! thread keeps hot, so that they know the skill without a probe on the marks (a uprobe trip
//! cost a busy host about 3.2 µs per mark).

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::{FAILURES, LATENCY_BUCKETS, PHASE_IDLE, PHASES, SKILL_NAME_LEN, latency_bucket};

/// The memfd's name: `/proc/PID/maps` shows it as `/memfd:skillhost-ledger (deleted)`.
pub const LEDGER_NAME: &str = "skillhost-ledger";
/// The first word of the mapping; its last byte is the layout's version.
pub const LEDGER_MAGIC: u64 = u64::from_le_bytes(*b"skledgr\x06");
/// Skill registrations the ledger holds (each registration of a skill takes a row); marks
/// for later ones are counted in [`LedgerHeader::overflow`] only.
pub const LEDGER_ROWS: usize = 16384;
/// How far ahead skillprof sets the lease, and how often it renews it.
pub const LEASE_NS: u64 = 30_000_000_000;
pub const LEASE_RENEW_NS: u64 = 10_000_000_000;

/// The mapping's first 64 bytes.
#[repr(C, align(64))]
pub struct LedgerHeader {
    pub magic: AtomicU64,
    /// Rows in the mapping.
    pub rows: AtomicU32,
    /// Rows registered so far (may exceed `rows`: those are not kept).
    pub used: AtomicU32,
    /// CLOCK_MONOTONIC ns until which the host records; 0: nobody profiles it.
    pub lease_until_ns: AtomicU64,
    /// Marks for a skill registered beyond the last row.
    pub overflow: AtomicU64,
    /// Where each thread's mark slot is: its address minus the thread pointer (the FS base
    /// on x86_64), the same for every thread; [`NO_MARK_SLOT`] if the host could not say.
    pub mark_slot: AtomicU64,
    /// 1 when each mark's getrusage also passes the new slot's value as the call's third
    /// argument, which the kernel ignores: the exact mode's program at that call reads it
    /// from a register instead of the thread's TLS (a user-memory read, about 150 ns). 0 in
    /// a ledger from before, whose marks do not.
    pub slot_in_call: AtomicU64,
}

/// [`LedgerHeader::mark_slot`] of a host that could not find its mark slot.
pub const NO_MARK_SLOT: u64 = 0;

/// A mark slot's value: the skill id in the low 32 bits, the phase (a `PHASE_*` number
/// without its flags) in the high 32; `PHASE_IDLE` (0) when the thread works for no skill.
#[inline(always)]
pub const fn mark_slot(skill: u32, phase: u32) -> u64 {
    ((phase as u64) << 32) | skill as u64
}

/// What the host's threads counted for one phase of one skill, since the host started.
#[repr(C)]
#[derive(Default)]
pub struct LedgerCounts {
    /// Marks that began or ended a stretch of this phase.
    pub marks: AtomicU64,
    /// Phase instances ended (compiles, instantiations, calls).
    pub runs: AtomicU64,
    /// Time on a thread in the phase (a helper thread's stretches do not count).
    pub ns: AtomicU64,
    /// The threads' own minor and major faults and CPU time while in the phase.
    pub minflt: AtomicU64,
    pub majflt: AtomicU64,
    pub cpu_ns: AtomicU64,
    /// A tracked phase's time between its polls (an async instantiation or call, which moves
    /// between threads): pending, from a poll's end until something woke it (a timer, I/O,
    /// a host call's answer), and queued, from that wake until its next poll (ready, waiting
    /// for a thread of the runtime).
    pub pending_ns: AtomicU64,
    pub queued_ns: AtomicU64,
}

/// One skill registration: its name, its phases by `PHASE_*` number (0 unused), and its
/// failed requests by reason (`FAILURE_NAMES`).
#[repr(C)]
pub struct LedgerRow {
    /// NUL-padded; valid once `named` is 1.
    pub name: [AtomicU64; SKILL_NAME_LEN / 8],
    pub named: AtomicU64,
    pub phases: [LedgerCounts; PHASES],
    /// Counted whether or not skillprof holds a lease: a failure is rare and costs one add.
    pub failed: [AtomicU64; FAILURES],
    /// Requests answered while skillprof held its lease, by latency
    /// ([`crate::latency_bucket`]), and the latencies' sum.
    pub answered: [AtomicU64; LATENCY_BUCKETS],
    pub answered_ns: AtomicU64,
}

/// The mapping's size in bytes.
pub const LEDGER_BYTES: usize =
    core::mem::size_of::<LedgerHeader>() + LEDGER_ROWS * core::mem::size_of::<LedgerRow>();

/// A view of a mapping of [`LEDGER_BYTES`] bytes: its header and rows.
pub struct LedgerView<'a> {
    pub header: &'a LedgerHeader,
    pub rows: &'a [LedgerRow],
}

impl<'a> LedgerView<'a> {
    /// # Safety
    /// `base` is the start of a shared mapping of at least [`LEDGER_BYTES`] bytes, aligned to
    /// a page, that stays mapped for `'a`; every field is an atomic, so concurrent writers
    /// (other threads, the host's) are fine.
    pub unsafe fn at(base: *mut u8) -> LedgerView<'a> {
        // SAFETY: by the caller's promise; the header is 64 bytes, the rows follow it.
        unsafe {
            LedgerView {
                header: &*(base as *const LedgerHeader),
                rows: core::slice::from_raw_parts(
                    base.add(core::mem::size_of::<LedgerHeader>()) as *const LedgerRow,
                    LEDGER_ROWS,
                ),
            }
        }
    }

    /// The name of row `id`, NUL-padded, if the host has written it.
    pub fn name(&self, id: usize) -> Option<[u8; SKILL_NAME_LEN]> {
        let row = self.rows.get(id)?;
        if row.named.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut bytes = [0u8; SKILL_NAME_LEN];
        for (chunk, word) in bytes.as_chunks_mut::<8>().0.iter_mut().zip(&row.name) {
            *chunk = word.load(Ordering::Relaxed).to_le_bytes();
        }
        Some(bytes)
    }

    /// Rows registered and kept.
    pub fn used(&self) -> usize {
        (self.header.used.load(Ordering::Acquire) as usize).min(self.rows.len())
    }
}

/// A thread's counters at one instant, as `getrusage(RUSAGE_THREAD)` gives them.
#[derive(Clone, Copy, Default)]
pub struct ThreadCounts {
    pub now_ns: u64,
    pub minflt: u64,
    pub majflt: u64,
    /// As the scheduler last accounted it (a tick or a switch), not as of now.
    pub cpu_ns: u64,
    /// Voluntary and involuntary context switches: fresh, unlike the CPU time.
    pub switches: u64,
}

impl ThreadCounts {
    /// The CPU time the thread ran from `since` to now. getrusage's CPU time is only as fresh
    /// as the scheduler's last tick or switch, so a stretch shorter than a tick would read 0
    /// and hand its time to whichever stretch holds the next switch (the host's idle wait).
    /// A thread that was not switched out ran the whole stretch: its CPU time is the elapsed
    /// time (interrupts and a hypervisor's steal included). One that was is credited
    /// getrusage's change, never more than the elapsed time.
    pub fn cpu_since(&self, since: &ThreadCounts) -> u64 {
        let elapsed = self.now_ns.saturating_sub(since.now_ns);
        if self.switches == since.switches {
            elapsed
        } else {
            self.cpu_ns.saturating_sub(since.cpu_ns).min(elapsed)
        }
    }
}

/// The stretch a thread is in: its row and phase, since when, and its counters then.
#[derive(Clone, Copy)]
pub struct Stretch {
    pub row: u32,
    pub phase: u32,
    /// The phase instance's first stretch: its end counts the instance.
    pub first: bool,
    /// A helper's stretch: its events count, its time does not.
    pub helper: bool,
    pub since: ThreadCounts,
}

impl LedgerView<'_> {
    /// Ends `previous` (if any) at `now` and counts the mark that ends it or begins `next`;
    /// returns the stretch the thread is in from now on.
    pub fn record(
        &self,
        previous: Option<Stretch>,
        row: u32,
        marked: u32,
        now: ThreadCounts,
    ) -> Option<Stretch> {
        let add = |counter: &AtomicU64, n: u64| {
            if n != 0 {
                counter.fetch_add(n, Ordering::Relaxed);
            }
        };
        let phase = marked & !(crate::PHASE_FIRST | crate::PHASE_HELPER);
        let next = (phase != PHASE_IDLE && (phase as usize) < PHASES).then_some(Stretch {
            row,
            phase,
            first: marked & crate::PHASE_FIRST != 0,
            helper: marked & crate::PHASE_HELPER != 0,
            since: now,
        });
        if let Some(ended) = previous
            && let Some(counts) = self.counts(ended.row, ended.phase)
        {
            if ended.first {
                add(&counts.runs, 1);
            }
            if !ended.helper {
                add(&counts.ns, now.now_ns.saturating_sub(ended.since.now_ns));
            }
            add(
                &counts.minflt,
                now.minflt.saturating_sub(ended.since.minflt),
            );
            add(
                &counts.majflt,
                now.majflt.saturating_sub(ended.since.majflt),
            );
            add(&counts.cpu_ns, now.cpu_since(&ended.since));
            if next.is_none() {
                add(&counts.marks, 1);
            }
        }
        if let Some(begun) = next {
            match self.counts(begun.row, begun.phase) {
                Some(counts) => add(&counts.marks, 1),
                None => {
                    add(&self.header.overflow, 1);
                    return None;
                }
            }
        }
        next
    }

    /// A tracked phase of `row` waited `pending_ns` and then `queued_ns` between two polls.
    pub fn waited(&self, row: u32, phase: u32, pending_ns: u64, queued_ns: u64) {
        if let Some(counts) = self.counts(row, phase) {
            counts.pending_ns.fetch_add(pending_ns, Ordering::Relaxed);
            counts.queued_ns.fetch_add(queued_ns, Ordering::Relaxed);
        }
    }

    /// A request of `row` was answered `ns` after the host took it.
    pub fn answered(&self, row: u32, ns: u64) {
        if let Some(row) = self.rows.get(row as usize) {
            row.answered[latency_bucket(ns)].fetch_add(1, Ordering::Relaxed);
            row.answered_ns.fetch_add(ns, Ordering::Relaxed);
        }
    }

    fn counts(&self, row: u32, phase: u32) -> Option<&LedgerCounts> {
        self.rows.get(row as usize)?.phases.get(phase as usize)
    }
}

#[cfg(feature = "marker")]
pub use writer::{
    answered, disable, failed, lease_until, mark, now_ns, open, register, repeat, started, waited,
};

/// The host's side: the mapping, each thread's stretch, and the marks.
#[cfg(feature = "marker")]
mod writer {
    extern crate std;

    use core::cell::Cell;
    use core::sync::atomic::{AtomicU32, Ordering};
    use std::sync::OnceLock;

    use super::{
        LEDGER_BYTES, LEDGER_MAGIC, LEDGER_NAME, LEDGER_ROWS, LedgerView, Stretch, ThreadCounts,
    };

    /// The host's mapping of its ledger.
    struct LedgerWriter {
        // Kept for the mapping's lifetime; the view points into it.
        _map: memmap2::MmapRaw,
        view: LedgerView<'static>,
    }

    /// `None`: marks do nothing (the host was told not to mark, or the memfd failed).
    static LEDGER: OnceLock<Option<LedgerWriter>> = OnceLock::new();
    /// How many times a mark is recorded (1 but in the overhead benchmark, which amplifies a
    /// mark's cost to measure it in a busy host: the rows then count each mark that often).
    static REPEAT: AtomicU32 = AtomicU32::new(1);

    std::thread_local! {
        static STRETCH: Cell<Option<Stretch>> = const { Cell::new(None) };
        /// What the thread works on now ([`super::mark_slot`]). A const-initialised
        /// thread-local without a destructor: a static in the executable's TLS block, at one
        /// distance from every thread's thread pointer.
        static MARK_SLOT: Cell<u64> = const { Cell::new(0) };
    }

    /// The mark slot's distance from the thread pointer, or [`super::NO_MARK_SLOT`].
    #[cfg(target_arch = "x86_64")]
    fn mark_slot_offset() -> u64 {
        /// arch_prctl(2)'s code for reading the FS base (asm/prctl.h).
        const ARCH_GET_FS: libc::c_long = 0x1003;
        let mut fs_base: u64 = 0;
        // SAFETY: ARCH_GET_FS writes the calling thread's FS base into the given u64.
        let got =
            unsafe { libc::syscall(libc::SYS_arch_prctl, ARCH_GET_FS, &mut fs_base as *mut u64) };
        let slot = MARK_SLOT.with(|slot| slot.as_ptr() as u64);
        match got == 0 && fs_base != 0 {
            true => slot.wrapping_sub(fs_base),
            false => super::NO_MARK_SLOT,
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn mark_slot_offset() -> u64 {
        super::NO_MARK_SLOT
    }

    impl LedgerWriter {
        fn create() -> std::io::Result<LedgerWriter> {
            let name = std::ffi::CString::new(LEDGER_NAME).expect("no NUL in the name");
            // SAFETY: a valid C string; the fd returned is owned below.
            let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // SAFETY: a fresh fd this function owns.
            let file = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
            file.set_len(LEDGER_BYTES as u64)?;
            let map = memmap2::MmapRaw::map_raw(&file)?;
            // SAFETY: a shared mapping of LEDGER_BYTES, page-aligned, kept with the view.
            let view = unsafe { LedgerView::at(map.as_mut_ptr()) };
            view.header
                .rows
                .store(LEDGER_ROWS as u32, Ordering::Relaxed);
            view.header
                .mark_slot
                .store(mark_slot_offset(), Ordering::Relaxed);
            view.header.slot_in_call.store(1, Ordering::Relaxed);
            view.header.magic.store(LEDGER_MAGIC, Ordering::Release);
            Ok(LedgerWriter { _map: map, view })
        }
    }

    fn ledger() -> Option<&'static LedgerWriter> {
        LEDGER
            .get_or_init(|| match LedgerWriter::create() {
                Ok(writer) => Some(writer),
                Err(e) => {
                    std::eprintln!("skill marks off: no ledger ({LEDGER_NAME}): {e}");
                    None
                }
            })
            .as_ref()
    }

    /// Creates the ledger now (so that a profiler attaching before the first mark finds it);
    /// false if there is none.
    pub fn open() -> bool {
        ledger().is_some()
    }

    /// Marks do nothing from now on (a host that does not mark its work); call it before
    /// the first mark or registration.
    pub fn disable() {
        let _ = LEDGER.set(None);
    }

    /// A new skill id, and its row's name: each registration of a skill (a changed file
    /// too) gets its own. Creates the ledger on first use.
    pub fn register(name: &str) -> u32 {
        static WITHOUT_LEDGER: AtomicU32 = AtomicU32::new(0);
        let Some(ledger) = ledger() else {
            return WITHOUT_LEDGER.fetch_add(1, Ordering::Relaxed);
        };
        let view = &ledger.view;
        let id = view.header.used.fetch_add(1, Ordering::AcqRel);
        if let Some(row) = view.rows.get(id as usize) {
            let mut bytes = [0u8; crate::SKILL_NAME_LEN];
            // Keeps a NUL at the end.
            let len = name.len().min(bytes.len() - 1);
            bytes[..len].copy_from_slice(&name.as_bytes()[..len]);
            // The row's pages are faulted in here, not at its first mark, where the fault
            // would count in the stretch that mark begins.
            for counts in &row.phases {
                counts.marks.store(0, Ordering::Relaxed);
                counts.cpu_ns.store(0, Ordering::Relaxed);
            }
            for counter in row.failed.iter().chain(&row.answered) {
                counter.store(0, Ordering::Relaxed);
            }
            for (word, chunk) in row.name.iter().zip(bytes.as_chunks::<8>().0) {
                word.store(u64::from_le_bytes(*chunk), Ordering::Relaxed);
            }
            row.named.store(1, Ordering::Release);
        }
        id
    }

    /// Each mark is recorded `times` times: its counters read and added that often.
    pub fn repeat(times: u32) {
        REPEAT.store(times.max(1), Ordering::Relaxed);
    }

    /// The current thread begins (or, with `PHASE_IDLE`, ends) a stretch of work for skill
    /// `skill`'s phase: stored in the thread's mark slot (the exact mode's programs read
    /// it), counted in the ledger while skillprof holds its lease, and passed to the marker
    /// function (a uprobe there streams each mark with `--events`).
    pub fn mark(request: u64, skill: u32, phase: u32) {
        let Some(ledger) = ledger() else {
            return;
        };
        let flags = crate::PHASE_FIRST | crate::PHASE_HELPER;
        MARK_SLOT.set(super::mark_slot(skill, phase & !flags));
        let view = &ledger.view;
        let until = view.header.lease_until_ns.load(Ordering::Relaxed);
        let previous = STRETCH.get();
        let mut next = None;
        if until != 0 {
            for _ in 0..REPEAT.load(Ordering::Relaxed) {
                next = thread_counts(MARK_SLOT.get())
                    .filter(|now| now.now_ns < until)
                    .and_then(|now| view.record(previous, skill, phase, now));
            }
        }
        STRETCH.set(next);
        crate::skillhost_mark(request, skill, phase);
    }

    /// Until when (CLOCK_MONOTONIC ns) skillprof holds the ledger's lease: the marks record
    /// only before it; 0 when nobody profiles the host (one load, no clock read).
    pub fn lease_until() -> u64 {
        ledger().map_or(0, |ledger| {
            ledger.view.header.lease_until_ns.load(Ordering::Relaxed)
        })
    }

    /// A tracked phase of skill `skill` waited `pending_ns` for a wake and then `queued_ns`
    /// for its next poll; counted while skillprof holds the lease.
    pub fn waited(skill: u32, phase: u32, pending_ns: u64, queued_ns: u64) {
        if let Some(ledger) = ledger() {
            ledger.view.waited(skill, phase, pending_ns, queued_ns);
        }
    }

    /// When a request is taken, for [`answered`]: now while skillprof holds the lease, else 0
    /// (one load, no clock read).
    pub fn started() -> u64 {
        match lease_until() {
            0 => 0,
            until => Some(now_ns()).filter(|&now| now < until).unwrap_or(0),
        }
    }

    /// A request of skill `skill` taken at `started` (by [`started`]) is answered: its
    /// latency counts in the skill's row while skillprof holds the lease, as it did when the
    /// request was taken.
    pub fn answered(skill: u32, started: u64) {
        if started == 0 {
            return;
        }
        let Some(ledger) = ledger() else {
            return;
        };
        let now = now_ns();
        if now < ledger.view.header.lease_until_ns.load(Ordering::Relaxed) {
            ledger.view.answered(skill, now.saturating_sub(started));
        }
    }

    /// CLOCK_MONOTONIC now, ns (the clock the ledger, the lease and the kernel's programs
    /// share).
    pub fn now_ns() -> u64 {
        let mut ts = core::mem::MaybeUninit::<libc::timespec>::zeroed();
        // SAFETY: a valid out pointer.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, ts.as_mut_ptr()) };
        // SAFETY: clock_gettime(CLOCK_MONOTONIC) does not fail with a valid pointer.
        let ts = unsafe { ts.assume_init() };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }

    /// The host failed a request of skill `skill` for `reason` (an index of `FAILURE_NAMES`).
    pub fn failed(skill: u32, reason: usize) {
        if let Some(ledger) = ledger()
            && let Some(counter) = ledger
                .view
                .rows
                .get(skill as usize)
                .and_then(|row| row.failed.get(reason))
        {
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The time and this thread's own counters: `getrusage(RUSAGE_THREAD)` (faults, context
    /// switches, and CPU time as the scheduler last accounted it) and the monotonic clock
    /// (vDSO). The call carries `slot` too, as a third argument getrusage ignores
    /// ([`super::LedgerHeader::slot_in_call`]).
    fn thread_counts(slot: u64) -> Option<ThreadCounts> {
        let mut usage = core::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: a valid out pointer; the kernel reads two arguments of getrusage, and the
        // third is only a register it saved.
        let got = unsafe {
            libc::syscall(
                libc::SYS_getrusage,
                libc::RUSAGE_THREAD,
                usage.as_mut_ptr(),
                slot,
            )
        };
        if got != 0 {
            return None;
        }
        // SAFETY: filled by the successful call.
        let usage = unsafe { usage.assume_init() };
        let micros = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
        Some(ThreadCounts {
            now_ns: now_ns(),
            minflt: usage.ru_minflt as u64,
            majflt: usage.ru_majflt as u64,
            cpu_ns: (micros(usage.ru_utime) + micros(usage.ru_stime)) * 1000,
            switches: (usage.ru_nvcsw + usage.ru_nivcsw) as u64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::ThreadCounts;

    fn at(now_ns: u64, cpu_ns: u64, switches: u64) -> ThreadCounts {
        ThreadCounts {
            now_ns,
            cpu_ns,
            switches,
            ..ThreadCounts::default()
        }
    }

    #[test]
    fn a_stretch_without_a_switch_ran_all_of_it_though_getrusage_has_not_moved() {
        assert_eq!(at(1_150_000, 0, 7).cpu_since(&at(1_000_000, 0, 7)), 150_000);
    }

    #[test]
    fn a_stretch_with_a_switch_takes_getrusages_change_never_more_than_it_lasted() {
        let since = at(1_000_000, 5_000_000, 7);
        assert_eq!(at(3_000_000, 5_400_000, 8).cpu_since(&since), 400_000);
        // Stale at its start by a tick of earlier stretches' time: capped.
        assert_eq!(at(1_200_000, 6_000_000, 9).cpu_since(&since), 200_000);
    }
}
