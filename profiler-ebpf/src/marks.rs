//! Skill attribution in exact mode. At each mark the host stores the skill and phase the
//! thread works on now in a thread-local of its own, its mark slot (skillprof_common::ledger),
//! and then reads its counters with getrusage(2). At that syscall's entry a program reads the
//! slot from the thread's TLS and keeps it per thread (`MARKS`); the syscall programs then add
//! each memory call to that skill's and phase's counters (`SKILLS`) besides the entry's, or to
//! the entry's unattributed row when the thread works for no skill. Reading user memory costs
//! a program a few hundred ns on the machines skillprof is measured on: once per mark, not
//! once per event. The marker's uprobe (`uprobe_mark`) only streams each mark with `--events`.
//!
//! Faults are not attributed here: the host's ledger has each skill's faults from its
//! threads' own counters.

use aya_ebpf::{
    Global,
    bindings::{BPF_F_NO_PREALLOC, BPF_NOEXIST},
    helpers::{bpf_get_current_task_btf, bpf_probe_read_user},
    macros::{map, uprobe},
    maps::{Array, PerCpuHashMap},
    programs::ProbeContext,
};
use skillprof_common::{HOST_SKILL, MarkEvent, PHASE_IDLE, PHASES, SkillCounters, SkillKey};

use crate::{add, counters, current_entry, emit, ids, is_host};

/// Where the FS base is in the kernel's `struct task_struct` (`thread.fsbase`, from the
/// kernel's BTF): a load-time constant, 0 where the host keeps no mark slot, so that the
/// verifier removes the slot reads from the programs.
#[unsafe(no_mangle)]
static TASK_FSBASE: Global<u64> = Global::new(crate::UNSET as u64);

/// The host's mark slot's distance from a thread's FS base (the ledger's header says it).
#[unsafe(no_mangle)]
static MARK_SLOT: Global<u64> = Global::new(crate::UNSET as u64 + 1);

/// 1 when the host's marks pass the slot as their getrusage's third argument
/// (`LedgerHeader::slot_in_call`): the mark's program reads it from the saved registers
/// rather than the thread's TLS. A load-time constant.
#[unsafe(no_mangle)]
static MARK_SLOT_IN_CALL: Global<u32> = Global::new(crate::UNSET);

/// 1 when the memory calls are attributed to skills (exact mode, a host with a mark slot):
/// without it the verifier removes the attribution from the syscall programs. The time
/// profile reads the slot whenever the host keeps one.
#[unsafe(no_mangle)]
static ATTRIBUTE_CALLS: Global<u32> = Global::new(crate::UNSET);

/// A host thread's mark slot as read at its latest mark, with the thread's id.
#[derive(Clone, Copy)]
#[repr(C)]
struct ThreadMark {
    tid: u32,
    _pad: u32,
    slot: u64,
}

/// How many threads' marks `MARKS` keeps: a thread's place is its id's low bits.
const THREAD_PLACES: u32 = 1 << 16;

/// Per host thread, at its id's low bits: its latest mark. An array rather than a hash by
/// tid: its lookup is an address the verifier computes inline, where a hash lookup and an
/// LRU's write in place cost a mark 45 ns more and each memory call 15 (cmds/overhead.cmds,
/// `--self-cost`). Two threads whose ids share their low 16 bits share a place: the latest
/// to mark holds it, and the other's calls count in the host's row (`marks_overflow`) until
/// its own next mark. Exited threads need no ageing out: their place is simply taken.
#[map]
static MARKS: Array<ThreadMark> = Array::with_max_entries(THREAD_PLACES, 0);

/// Per CPU, per (entry, skill, phase): the counters. Allocated as rows appear, since the
/// number of skills is not known in advance. Userspace creates each entry's unattributed row
/// up front, so that row can always be counted in, even when the map is full.
#[map]
static SKILLS: PerCpuHashMap<SkillKey, SkillCounters> =
    PerCpuHashMap::with_max_entries(65536, BPF_F_NO_PREALLOC);

/// A new row's counters. A static, not a value made on the stack: zeroing the row there is
/// a call to memset, after which LLVM read a scratch register the BPF calling convention
/// does not keep (Linux 6.1's verifier refused the program: "R5 !read_ok").
static EMPTY_ROW: SkillCounters = unsafe { core::mem::zeroed() };

/// The counters of `skill`'s `phase` in `entry`; `None` without attribution.
#[inline(always)]
pub fn row(entry: u32, skill: u32, phase: u32) -> Option<&'static mut SkillCounters> {
    if !attributing() {
        return None;
    }
    let key = SkillKey {
        entry,
        skill,
        phase,
        _pad: 0,
    };
    if let Some(p) = SKILLS.get_ptr_mut(&key) {
        // SAFETY: this CPU's copy of a live map value, valid while the program runs.
        return Some(unsafe { &mut *p });
    }
    // NOEXIST: of two CPUs creating the same row, the second fails here and finds the first's
    // below, instead of replacing it (and the counts already in it).
    let _ = SKILLS.insert(&key, &EMPTY_ROW, BPF_NOEXIST as u64);
    if let Some(p) = SKILLS.get_ptr_mut(&key) {
        // SAFETY: as above.
        return Some(unsafe { &mut *p });
    }
    if let Some(counters) = counters(entry) {
        add(&mut counters.marks.overflow, 1);
    }
    let host = SkillKey {
        entry,
        skill: HOST_SKILL,
        phase: PHASE_IDLE,
        _pad: 0,
    };
    // SAFETY: as above.
    SKILLS.get_ptr_mut(&host).map(|p| unsafe { &mut *p })
}

#[inline(always)]
fn attributing() -> bool {
    ATTRIBUTE_CALLS.load() != 0 && TASK_FSBASE.load() != 0
}

/// The current thread's mark slot, read from its TLS; 0 (the host's own work) where the host
/// keeps none or the slot's page is not present.
#[inline(always)]
fn read_slot() -> u64 {
    if TASK_FSBASE.load() == 0 {
        return 0;
    }
    // SAFETY: the task is a BTF pointer the verifier types: a load at a constant offset of
    // one of its fields is checked at load time and compiled to a plain load (no helper).
    // The slot, in the current thread's TLS in the host's address space, is read with the
    // helper, which checks the address.
    unsafe {
        let task = bpf_get_current_task_btf() as *const u8;
        let fs_base = *(task.add(TASK_FSBASE.load() as usize) as *const u64);
        bpf_probe_read_user(fs_base.wrapping_add(MARK_SLOT.load()) as *const u64).unwrap_or(0)
    }
}

/// A mark slot's skill and phase (the unattributed row for the host's own work).
#[inline(always)]
fn decode(slot: u64) -> (u32, u32) {
    match (slot >> 32) as u32 {
        PHASE_IDLE => (HOST_SKILL, PHASE_IDLE),
        phase if phase as usize >= PHASES => (HOST_SKILL, PHASE_IDLE),
        phase => (slot as u32, phase),
    }
}

/// Whether the host keeps a mark slot (it marks its work).
#[inline(always)]
pub fn keeps_slots() -> bool {
    TASK_FSBASE.load() != 0
}

/// The skill and phase the current thread `tid` of the host works on now, for the time
/// profile's samples and switches. In exact mode, as its latest mark left it (`MARKS`): a
/// map lookup, where a read of its TLS costs about 180 ns (a default lab run's switches
/// spent 7 ms of their 79 in it); they are the same slot, since a mark writes the slot and
/// then enters getrusage. Otherwise from its TLS.
#[inline(always)]
pub fn slot_now(tid: u32) -> (u32, u32) {
    match attributing() {
        true => held(tid).0,
        false => decode(read_slot()),
    }
}

/// Thread `tid` of the host marked (it entered getrusage): its mark slot, read from its TLS,
/// is what its memory calls count for until its next mark.
#[inline(always)]
pub fn marked(tid: u32) {
    if !attributing() {
        return;
    }
    // An unreadable slot (a page of the TLS not present) counts for the host's own work.
    let slot = match MARK_SLOT_IN_CALL.load() {
        // SAFETY: the task's saved user registers, a BTF pointer the verifier types.
        1 => unsafe { (*crate::syscalls::current_regs()).dx },
        _ => read_slot(),
    };
    if let Some(kept) = MARKS.get_ptr_mut(tid % THREAD_PLACES) {
        // SAFETY: a live array value; of two threads sharing it, the latest mark wins.
        unsafe { *kept = ThreadMark { tid, _pad: 0, slot } };
    }
}

/// The skill and phase thread `tid` of the host works on now (the unattributed row if none),
/// for a memory call, which counts in skills.csv's host row when another thread's mark holds
/// the thread's place: `marks_overflow` counts those calls.
#[inline(always)]
pub fn current(tid: u32) -> (u32, u32) {
    let (slot, shared) = held(tid);
    if shared && let Some(counters) = counters(current_entry()) {
        add(&mut counters.marks.overflow, 1);
    }
    slot
}

/// The skill and phase thread `tid`'s latest mark left, and whether another thread's mark
/// holds its place instead (one sharing the low bits, live, or exited before this one's
/// first mark, when its work was the host's own anyway).
#[inline(always)]
pub fn held(tid: u32) -> ((u32, u32), bool) {
    let unattributed = (HOST_SKILL, PHASE_IDLE);
    if !attributing() {
        return (unattributed, false);
    }
    match MARKS.get(tid % THREAD_PLACES) {
        Some(kept) if kept.tid == tid => (decode(kept.slot), false),
        // No thread has marked at this place.
        Some(kept) if kept.tid == 0 => (unattributed, false),
        Some(_) => (unattributed, true),
        None => (unattributed, false),
    }
}

/// `skillhost_mark(request: u64, skill: u32, phase: u32)`: one event per mark, attached only
/// when events are streamed.
#[uprobe]
pub fn uprobe_mark(ctx: ProbeContext) -> u32 {
    let (tid, tgid) = ids();
    if !is_host(tgid) {
        return 0;
    }
    emit(
        current_entry(),
        tid,
        MarkEvent {
            request: ctx.arg(0).unwrap_or(0),
            skill: ctx.arg::<u64>(1).unwrap_or(0) as u32,
            phase: ctx.arg::<u64>(2).unwrap_or(0) as u32,
        },
    );
    0
}
