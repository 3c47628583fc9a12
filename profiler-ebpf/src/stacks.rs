//! `--stacks`: the host's user stack at each page fault and address-space syscall, counted
//! per entry, skill and stack. The kernel walks the stack by frame pointer into `STACK_TRACES`
//! and returns an id; `STACK_COUNTS` counts the ids. Userspace symbolises them while the host
//! still runs (its maps and wasmtime's perf map are needed) and folds them into flamegraphs.

use aya_ebpf::{
    Global,
    bindings::{BPF_F_NO_PREALLOC, BPF_F_USER_STACK, BPF_NOEXIST},
    macros::map,
    maps::{HashMap, PerCpuArray, StackTrace},
    programs::tracing::StackIdContext,
};
use skillprof_common::StackKey;

use crate::{add, counters, marks};

/// 1 with `--stacks`: a load-time constant, so without it the verifier removes the stack
/// walks from every program.
#[unsafe(no_mangle)]
static STACKS: Global<u32> = Global::new(crate::UNSET);

/// Stack id → frames. Userspace sizes it (one entry without `--stacks`).
#[map]
static STACK_TRACES: StackTrace = StackTrace::with_max_entries(1, 0);

/// (entry, skill, kind, stack id) → events.
#[map]
static STACK_COUNTS: HashMap<StackKey, u64> = HashMap::with_max_entries(65536, BPF_F_NO_PREALLOC);

/// 1 on a CPU while it walks a stack. The walk reads the host's stack through frame pointers
/// with page faults disabled; a frame pointer that is not one (code built without them) can
/// point at a page that is not present, and that fault, taken and refused in kernel mode,
/// is the profiler's, not the host's: the fault programs leave it out.
#[map]
static WALKING: PerCpuArray<u32> = PerCpuArray::with_max_entries(1, 0);

/// Whether this CPU is walking a user stack now (for `--stacks` or the time profile).
#[inline(always)]
pub fn walking() -> bool {
    WALKING.get(0).is_some_and(|w| *w != 0)
}

#[inline(always)]
pub fn set_walking(on: u32) {
    if let Some(flag) = WALKING.get_ptr_mut(0) {
        // SAFETY: this CPU's slot; programs on one CPU do not run in parallel.
        unsafe { *flag = on };
    }
}

/// Counts the current user stack for an event of `kind` (`STACK_*`), by the skill the thread
/// works for.
#[inline(always)]
pub fn sample<C: StackIdContext>(ctx: &C, tid: u32, entry: u32, kind: u32) {
    if STACKS.load() == 0 {
        return;
    }
    let ((skill, _), _) = marks::held(tid);
    let Some(counters) = counters(entry) else {
        return;
    };
    set_walking(1);
    let walked = ctx.get_stackid(&STACK_TRACES, BPF_F_USER_STACK as u64);
    set_walking(0);
    let Ok(stack) = walked else {
        // A full map, or a hash collision with another stack: the event is not in the
        // flamegraph, and the loss is counted.
        add(&mut counters.stacks.lost, 1);
        return;
    };
    let key = StackKey {
        entry,
        skill,
        kind,
        stack: stack as u32,
    };
    if STACK_COUNTS.get_ptr_mut(&key).is_none() {
        // NOEXIST: of two CPUs counting a new stack at once, the second fails here and adds
        // to the first's count below, instead of replacing it.
        let _ = STACK_COUNTS.insert(&key, &0, BPF_NOEXIST as u64);
    }
    match STACK_COUNTS.get_ptr_mut(&key) {
        // SAFETY: a live map value; an atomic add, since several CPUs may share a stack.
        Some(count) => {
            add(unsafe { &mut *count }, 1);
            add(&mut counters.stacks.sampled, 1);
        }
        None => add(&mut counters.stacks.lost, 1),
    }
}
