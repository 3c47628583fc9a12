//! Skill attribution. The host calls a marker function (`skillhost_mark`) whenever one of its
//! threads starts or stops working for a skill; a uprobe on it keeps, per thread, the request,
//! skill and phase the thread works on now (`MARKS`). The fault and syscall programs then add
//! each event to that skill's and phase's counters (`SKILLS`) besides the entry's, or to the
//! entry's unattributed row when the thread works for no skill.
//!
//! The uprobe fires per poll of a request's future and per phase, never per page: a hit
//! costs about a microsecond, a page fault a fraction of that.
//!
//! At each mark it also reads the thread's own counters (faults and CPU time, from its
//! task_struct at offsets userspace takes from the kernel's BTF) and adds their change since
//! the thread's previous mark to the skill and phase of the stretch that ends: faults and
//! CPU per skill without any program that runs per fault, so in every mode.

use aya_ebpf::{
    Global,
    bindings::{BPF_F_NO_PREALLOC, BPF_NOEXIST},
    helpers::{bpf_get_current_task, bpf_probe_read_kernel, bpf_probe_read_user_str_bytes},
    macros::{map, uprobe},
    maps::{HashMap, LruHashMap, PerCpuHashMap},
    programs::ProbeContext,
};
use skillprof_common::{
    HOST_SKILL, Mark, MarkEvent, PHASE_FIRST, PHASE_HELPER, PHASE_IDLE, SKILL_NAME_LEN,
    SkillCounters, SkillKey, TaskCounts,
};

use crate::{add, counters, current_entry, emit, ids, is_host, now};

/// 1 when the marker's uprobe attached: a load-time constant, so without markers the
/// verifier removes the attribution code from the fault and syscall programs.
#[unsafe(no_mangle)]
static ATTRIBUTE_SKILLS: Global<u32> = Global::new(0);

/// Byte offsets in `struct task_struct` of `min_flt`, `maj_flt` and
/// `se.sum_exec_runtime`, set at load time from the kernel's BTF; 0 where BTF did not say.
#[unsafe(no_mangle)]
static TASK_MIN_FLT: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
static TASK_MAJ_FLT: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
static TASK_CPU_NS: Global<u32> = Global::new(0);

/// The current thread's own counters now; `None` where they cannot be read.
#[inline(always)]
fn task_now() -> Option<TaskCounts> {
    let (min_flt, maj_flt, cpu_ns) = (TASK_MIN_FLT.load(), TASK_MAJ_FLT.load(), TASK_CPU_NS.load());
    if min_flt == 0 || maj_flt == 0 || cpu_ns == 0 {
        return None;
    }
    // SAFETY: the helper returns the current task's address; every read below goes through
    // bpf_probe_read_kernel, which checks it.
    let task = unsafe { bpf_get_current_task() } as *const u8;
    let at = |offset: u32| task.wrapping_add(offset as usize);
    // min_flt and maj_flt sit side by side in task_struct: one read for both where they do.
    let [minflt, majflt] = if maj_flt == min_flt + 8 {
        // SAFETY: a checked read of two u64 inside the current task_struct.
        unsafe { bpf_probe_read_kernel(at(min_flt) as *const [u64; 2]) }.ok()?
    } else {
        // SAFETY: checked reads of a u64 each inside the current task_struct.
        unsafe {
            [
                bpf_probe_read_kernel(at(min_flt) as *const u64).ok()?,
                bpf_probe_read_kernel(at(maj_flt) as *const u64).ok()?,
            ]
        }
    };
    Some(TaskCounts {
        minflt,
        majflt,
        // SAFETY: a checked read of a u64 inside the current task_struct.
        cpu_ns: unsafe { bpf_probe_read_kernel(at(cpu_ns) as *const u64) }.ok()?,
    })
}

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

/// Skill id → its name (NUL-terminated), copied from the host once per skill.
#[map]
static SKILL_NAMES: HashMap<u32, [u8; SKILL_NAME_LEN]> =
    HashMap::with_max_entries(65536, BPF_F_NO_PREALLOC);

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

/// Copies skill `skill`'s name from the host (`name`, NUL-terminated) unless it is known.
#[inline(always)]
fn name_skill(skill: u32, name: u64) {
    // SAFETY: a plain lookup.
    if name == 0 || unsafe { SKILL_NAMES.get(&skill) }.is_some() {
        return;
    }
    let mut copy = [0u8; SKILL_NAME_LEN];
    // SAFETY: the helper checks the user address; a failed read leaves the name out.
    if unsafe { bpf_probe_read_user_str_bytes(name as *const u8, &mut copy) }.is_ok() {
        let _ = SKILL_NAMES.insert(&skill, &copy, 0);
    }
}

/// `skillhost_mark(request: u64, skill: u32, phase: u32, name: *const c_char)`.
///
/// Its cost is the host's: one map lookup per mark (the thread's own slot) and one more when
/// a stretch of work ends (its skill and phase's row), where the counts of the stretch that
/// ends all go, its phase instance included; the skill's name is looked up once per row and
/// CPU, not per mark.
#[uprobe]
pub fn uprobe_mark(ctx: ProbeContext) -> u32 {
    let (tid, tgid) = ids();
    if !is_host(tgid) {
        return 0;
    }
    let request: u64 = ctx.arg(0).unwrap_or(0);
    let skill = ctx.arg::<u64>(1).unwrap_or(0) as u32;
    let marked = ctx.arg::<u64>(2).unwrap_or(0) as u32;
    let name: u64 = ctx.arg(3).unwrap_or(0);
    let phase = marked & !(PHASE_FIRST | PHASE_HELPER);
    let entry = current_entry();
    let ts = now();
    let task = task_now();
    if let Some(counters) = counters(entry) {
        add(&mut counters.marks.hits, 1);
    }
    let next = Mark {
        request,
        since_ns: if marked & PHASE_HELPER != 0 { 0 } else { ts },
        skill,
        phase,
        minflt: task.map_or(0, |t| t.minflt),
        majflt: task.map_or(0, |t| t.majflt),
        cpu_ns: task.map_or(0, |t| t.cpu_ns),
        counted: u32::from(task.is_some()),
        first: u32::from(phase != PHASE_IDLE && marked & PHASE_FIRST != 0),
        name,
    };
    match MARKS.get_ptr_mut(&tid) {
        Some(slot) => {
            // SAFETY: a live map value, written only by its own thread (the key is its tid).
            let previous = unsafe { *slot };
            // The stretch that ends now is counted in the entry current at its end.
            if previous.phase != PHASE_IDLE
                && let Some(row) = row(entry, previous.skill, previous.phase)
            {
                if previous.first != 0 {
                    add(&mut row.phase.runs, 1);
                }
                if previous.since_ns != 0 {
                    add(&mut row.phase.ns, ts.saturating_sub(previous.since_ns));
                }
                // A helper's stretch too: a compile's faults are in its helper threads.
                if previous.counted != 0
                    && let Some(task) = task
                {
                    add(&mut row.task.minflt, task.minflt.saturating_sub(previous.minflt));
                    add(&mut row.task.majflt, task.majflt.saturating_sub(previous.majflt));
                    add(&mut row.task.cpu_ns, task.cpu_ns.saturating_sub(previous.cpu_ns));
                }
                if row.named == 0 {
                    row.named = 1;
                    name_skill(previous.skill, previous.name);
                }
            }
            unsafe { *slot = next };
        }
        None => {
            let _ = MARKS.insert(&tid, &next, 0);
        }
    }
    emit(
        entry,
        tid,
        MarkEvent {
            request,
            skill,
            phase: marked,
        },
    );
    0
}
