//! Skill attribution in exact mode. The host calls a marker function (`skillhost_mark`)
//! whenever one of its threads starts or stops working for a skill; a uprobe on it keeps, per
//! thread, the request, skill and phase the thread works on now (`MARKS`). The fault and
//! syscall programs then add each event to that skill's and phase's counters (`SKILLS`)
//! besides the entry's, or to the entry's unattributed row when the thread works for no skill.
//!
//! The default mode attaches none of this: the host's own ledger (skillprof_common::ledger)
//! counts each skill's faults, CPU and time without a trip into the kernel per mark.

use aya_ebpf::{
    Global,
    bindings::{BPF_F_NO_PREALLOC, BPF_NOEXIST},
    macros::{map, uprobe},
    maps::{LruHashMap, PerCpuHashMap},
    programs::ProbeContext,
};
use skillprof_common::{
    HOST_SKILL, Mark, MarkEvent, PHASE_FIRST, PHASE_HELPER, PHASE_IDLE, SkillCounters, SkillKey,
};

use crate::{add, counters, current_entry, emit, ids, is_host};

/// 1 when the marker's uprobe attached: a load-time constant, so without markers the
/// verifier removes the attribution code from the fault and syscall programs.
#[unsafe(no_mangle)]
static ATTRIBUTE_SKILLS: Global<u32> = Global::new(0);

/// Per host thread (key: tid): what it works on. Written in place at every mark, so a mark
/// costs a lookup, not an insert and a delete; LRU, so exited threads age out.
#[map]
static MARKS: LruHashMap<u32, Mark> = LruHashMap::with_max_entries(16384, 0);

/// Per CPU, per (entry, skill, phase): the counters. Allocated as rows appear, since the
/// number of skills is not known in advance. Userspace creates each entry's unattributed row
/// up front, so that row can always be counted in, even when the map is full.
#[map]
static SKILLS: PerCpuHashMap<SkillKey, SkillCounters> =
    PerCpuHashMap::with_max_entries(65536, BPF_F_NO_PREALLOC);

/// The counters of `skill`'s `phase` in `entry`; `None` without markers.
#[inline(always)]
pub fn row(entry: u32, skill: u32, phase: u32) -> Option<&'static mut SkillCounters> {
    if ATTRIBUTE_SKILLS.load() == 0 {
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
    let _ = SKILLS.insert(&key, &SkillCounters::default(), BPF_NOEXIST as u64);
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

/// The skill and phase thread `tid` works on now (the unattributed row if none).
#[inline(always)]
pub fn current(tid: u32) -> (u32, u32) {
    if ATTRIBUTE_SKILLS.load() == 0 {
        return (HOST_SKILL, PHASE_IDLE);
    }
    // SAFETY: a plain copy out of a live map value.
    match unsafe { MARKS.get(&tid) } {
        Some(mark) if mark.phase != PHASE_IDLE => (mark.skill, mark.phase),
        _ => (HOST_SKILL, PHASE_IDLE),
    }
}

/// `skillhost_mark(request: u64, skill: u32, phase: u32)`: one map lookup per mark, the
/// thread's own slot.
#[uprobe]
pub fn uprobe_mark(ctx: ProbeContext) -> u32 {
    let (tid, tgid) = ids();
    if !is_host(tgid) {
        return 0;
    }
    let request: u64 = ctx.arg(0).unwrap_or(0);
    let skill = ctx.arg::<u64>(1).unwrap_or(0) as u32;
    let marked = ctx.arg::<u64>(2).unwrap_or(0) as u32;
    let next = Mark {
        request,
        skill,
        phase: marked & !(PHASE_FIRST | PHASE_HELPER),
    };
    match MARKS.get_ptr_mut(&tid) {
        // SAFETY: a live map value, written only by its own thread (the key is its tid).
        Some(slot) => unsafe { *slot = next },
        None => {
            let _ = MARKS.insert(&tid, &next, 0);
        }
    }
    emit(
        current_entry(),
        tid,
        MarkEvent {
            request,
            skill,
            phase: marked,
        },
    );
    0
}
