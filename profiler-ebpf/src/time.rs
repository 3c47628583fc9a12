//! Where the host's time goes: on a CPU, sampled by the profile clock, and off one, timed
//! from the scheduler's switches. Both count into `TIME`, by entry, skill and phase (the
//! thread's mark slot, read from its TLS), the thread's state, and its user and kernel
//! stacks. Userspace names the stacks and folds them into profiles.
//!
//! On a CPU: a software cpu-clock perf event per CPU runs `profile_sample` every period of
//! that CPU's time; it counts only when a host thread was running (the interrupted task), so
//! a host thread's samples times the period estimate its CPU time. Per CPU rather than per
//! thread: a per-thread event would be switched in and out with each of the host's context
//! switches, and threads come and go; a per-CPU one costs nothing between its ticks.
//!
//! Off a CPU: at each switch, a host thread that leaves the CPU is stamped with the instant,
//! its state and (with `OFF_CPU_EVERY_STACK`) its stacks; when it runs again its interval is
//! counted, the part asleep in the state it left in and the part since it became runnable
//! (waiting for a CPU), which the kernel's own sched_info says at that switch (so no program
//! runs at the machine's wakeups; a kernel without it in its BTF gets a wakeup program). With
//! `OFF_CPU_WAITS`, the part asleep gets its kernel stack then, if it was long enough to pay
//! for the walk (or by chance in proportion to its length). Every other task's switch costs
//! two loads and a compare.

use aya_ebpf::{
    EbpfContext as _, Global,
    bindings::{BPF_F_NO_PREALLOC, BPF_F_USER_STACK, BPF_NOEXIST},
    macros::{btf_tracepoint, map, perf_event},
    maps::{Array, HashMap, LruHashMap, PerCpuArray, RingBuf, StackTrace},
    programs::{BtfTracePointContext, PerfEventContext, tracing::StackIdContext},
};
use skillprof_common::{
    HOST_SKILL, NO_STACK, OFF_CPU_EVERY_STACK, OFF_CPU_WAITS, OffCpu, TIME_BLOCKED, TIME_ON_CPU,
    TIME_RUNNABLE, TIME_SLEEPING, TimeKey, TimeSample, TimeValue, WAIT_STACK_DEPTH, WAIT_STACK_ID,
    WaitStack,
};

use aya_ebpf::helpers::{bpf_get_current_pid_tgid, bpf_get_prandom_u32, bpf_get_task_stack};

use crate::{
    TASK_PID, TASK_TGID, add, add_unpreempted, counters, current_entry, ids, is_host, marks, now,
    stacks,
};

/// Which stacks the switch programs take (`OFF_CPU_*`): the cause of a wait is in its kernel
/// stack, and whose wait it is in its user stack. A load-time constant: the verifier removes
/// the walks a run does not ask for.
#[unsafe(no_mangle)]
static OFF_CPU_STACKS: Global<u32> = Global::new(crate::UNSET);

/// With `OFF_CPU_WAITS`: the time asleep (ns) from which every wait's kernel stack is
/// walked. A load-time constant.
#[unsafe(no_mangle)]
static WAIT_WALK_NS: Global<u64> = Global::new(crate::UNSET as u64);

/// The same for a wait in no skill's work, in a host that marks its work: longer, since the
/// explanations name the waits inside the skills' work, and the host's idle threads (runtime
/// workers parked between requests, the epoch ticker) sleep as long as the wall clock runs,
/// which at one walk per `WAIT_WALK_NS` asleep was most of the walks. A load-time constant.
#[unsafe(no_mangle)]
static WAIT_WALK_IDLE_NS: Global<u64> = Global::new(crate::UNSET as u64 + 2);

/// Wait stack id → its kernel stack. Never cleared in a session: a host's waits come from
/// a few hundred places.
#[map]
static WAIT_STACKS: HashMap<u32, WaitStack> = HashMap::with_max_entries(4096, BPF_F_NO_PREALLOC);

/// Where a wait's stack is put together, too big for the BPF stack.
#[map]
static WAIT_SCRATCH: PerCpuArray<WaitStack> = PerCpuArray::with_max_entries(1, 0);

/// 1 when each CPU sample is also put on the timeline (`TIME_SAMPLES`), for a step's
/// stalls: a load-time constant.
#[unsafe(no_mangle)]
static TIMELINE: Global<u32> = Global::new(crate::UNSET);

/// The timeline's samples; userspace sizes it (one page without the timeline).
#[map]
static TIME_SAMPLES: RingBuf = RingBuf::with_byte_size(4096, 0);

/// Stack id → frames, user and kernel stacks alike. Userspace sizes it.
#[map]
static TIME_STACKS: StackTrace = StackTrace::with_max_entries(1, 0);

/// (entry, skill, phase, state, stacks) → samples or intervals, and their time.
#[map]
static TIME: HashMap<TimeKey, TimeValue> = HashMap::with_max_entries(65536, BPF_F_NO_PREALLOC);

/// Per host thread (key: the kernel's tid, which the switched tasks carry): its latest
/// switch out. LRU, so exited threads age out.
#[map]
static OFF_CPU: LruHashMap<u32, OffCpu> = LruHashMap::with_max_entries(16384, 0);

/// Where a thread's wait for a CPU is, in the kernel's own accounting (`struct sched_info`,
/// CONFIG_SCHED_INFO, which schedstat reads): the offsets in `struct task_struct` of
/// `sched_info.last_queued` (when it was queued on a CPU's run queue, 0 while it runs or
/// sleeps) and `sched_info.run_delay`, and the path to its run queue's clock
/// (`se.cfs_rq`, `cfs_rq.rq`, `rq.clock`, updated as the switch began). Load-time constants;
/// `TASK_LAST_QUEUED` 0 where the kernel's BTF does not have them, and the wakeup program
/// stamps the wakeups instead.
#[unsafe(no_mangle)]
static TASK_LAST_QUEUED: Global<u64> = Global::new(crate::UNSET as u64 + 3);
#[unsafe(no_mangle)]
static TASK_RUN_DELAY: Global<u64> = Global::new(crate::UNSET as u64 + 4);
#[unsafe(no_mangle)]
static TASK_CFS_RQ: Global<u64> = Global::new(crate::UNSET as u64 + 5);
#[unsafe(no_mangle)]
static CFS_RQ_RQ: Global<u64> = Global::new(crate::UNSET as u64 + 6);
#[unsafe(no_mangle)]
static RQ_CLOCK: Global<u64> = Global::new(crate::UNSET as u64 + 7);

#[inline(always)]
fn sched_info_known() -> bool {
    TASK_LAST_QUEUED.load() != 0
}

/// A task's `sched_info.run_delay` (ns).
#[inline(always)]
fn run_delay(task: *const u8) -> u64 {
    // SAFETY: `task` is a task the verifier types from BTF; a load at a constant offset of
    // one of its fields is checked at load time.
    unsafe { *(task.add(TASK_RUN_DELAY.load() as usize) as *const u64) }
}

/// How long task `next`, about to run, was runnable without a CPU since `since_run_delay`
/// (its run_delay as it left its CPU): the waits the kernel has summed since (it moved
/// between queues), and the one ending now, from when it was queued to its run queue's
/// clock, which the switch set. The kernel's own figure, the one schedstat gives.
#[inline(always)]
fn runnable_since(next: *const u8, since_run_delay: u64) -> u64 {
    // SAFETY: as in `run_delay`; the run queue is reached through pointers the verifier
    // types from BTF too, and a load through them that faults reads 0.
    let (queued, clock) = unsafe {
        let queued = *(next.add(TASK_LAST_QUEUED.load() as usize) as *const u64);
        let cfs_rq = *(next.add(TASK_CFS_RQ.load() as usize) as *const *const u8);
        let rq = *(cfs_rq.add(CFS_RQ_RQ.load() as usize) as *const *const u8);
        (queued, *(rq.add(RQ_CLOCK.load() as usize) as *const u64))
    };
    let waiting = match queued {
        0 => 0,
        queued => clock.saturating_sub(queued),
    };
    run_delay(next).saturating_sub(since_run_delay) + waiting
}

/// `[0]`: the host's process id as the kernel numbers it, learnt from its first switch out,
/// where skillprof runs in a PID namespace of its own: the switched tasks carry the kernel's
/// ids, and `TARGET_TGID` is the namespace's.
#[map]
static HOST_KERNEL_TGID: Array<u32> = Array::with_max_entries(1, 0);

/// The host's process id as the kernel numbers it. Outside a PID namespace, the target's
/// own (a load-time constant: the verifier drops the other branch).
#[inline(always)]
fn host_kernel_tgid() -> u32 {
    match crate::in_pid_namespace() {
        false => crate::TARGET_TGID.load(),
        true => HOST_KERNEL_TGID.get(0).copied().unwrap_or(0),
    }
}

/// Per host thread (key: tid): its CPU samples over the whole session, which userspace checks
/// against the kernel's own count of each thread's CPU time (schedstat).
#[map]
static THREAD_SAMPLES: HashMap<u32, u64> = HashMap::with_max_entries(16384, BPF_F_NO_PREALLOC);

/// `ENTRY_BEGAN[0]`: when the current entry began (CLOCK_MONOTONIC ns), written by userspace
/// with the entry index, so an interval that spans a boundary is split at it.
#[map]
static ENTRY_BEGAN: Array<u64> = Array::with_max_entries(1, 0);

/// x86_64 `pt_regs.ip` and `pt_regs.cs` (whose low two bits are the privilege level the
/// sample interrupted).
const PT_REGS_IP: usize = 16 * 8;
const PT_REGS_CS: usize = 17 * 8;

/// Adds `ns` of time in `state` to a key of `entry`, and one sample or interval.
#[inline(always)]
fn count(entry: u32, skill: u32, phase: u32, state: u32, stacks: (i32, i32, u32), ns: u64) {
    let key = TimeKey {
        entry,
        skill,
        phase,
        state,
        user_stack: stacks.0,
        kernel_stack: stacks.1,
        sampled: stacks.2,
    };
    if TIME.get_ptr_mut(&key).is_none() {
        // NOEXIST: of two CPUs adding a new key at once, the second fails here and adds to
        // the first's value below, instead of replacing it.
        let _ = TIME.insert(&key, &TimeValue::default(), BPF_NOEXIST as u64);
    }
    match TIME.get_ptr_mut(&key) {
        // SAFETY: a live map value; atomic adds, since several CPUs may share a key.
        Some(value) => unsafe {
            add(&mut (*value).count, 1);
            add(&mut (*value).ns, ns);
        },
        None => {
            if let Some(counters) = counters(entry) {
                add_unpreempted(&mut counters.time.lost, 1);
            }
        }
    }
}

/// The stack of the current thread `flags` asks for (user or kernel), or [`NO_STACK`] with
/// the loss counted. The user stack is read with page faults disabled, and a fault the walk
/// takes is the profiler's, so the fault programs are told to leave it out.
#[inline(always)]
fn stack<C: StackIdContext>(ctx: &C, entry: u32, flags: u64) -> i32 {
    let user = flags & BPF_F_USER_STACK as u64 != 0;
    if user {
        stacks::set_walking(1);
    }
    let walked = ctx.get_stackid(&TIME_STACKS, flags);
    if user {
        stacks::set_walking(0);
    }
    match walked {
        Ok(id) => id as i32,
        Err(_) => {
            if let Some(counters) = counters(entry) {
                add_unpreempted(&mut counters.time.stacks_lost, 1);
            }
            NO_STACK
        }
    }
}

/// One tick of a CPU's profile clock: counts the interrupted thread if it is the host's.
#[perf_event]
pub fn profile_sample(ctx: PerfEventContext) -> u32 {
    let (tid, tgid) = ids();
    if tid == 0 || !is_host(tgid) {
        return 0;
    }
    let entry = current_entry();
    let (skill, phase) = marks::slot_now(tid);
    // SAFETY: the program's context, a `bpf_perf_event_data`: its registers, then the
    // period, both readable by a perf_event program.
    let (ip, cs, period) = unsafe {
        let data = ctx.as_ptr() as *const u8;
        (
            *(data.add(PT_REGS_IP) as *const u64),
            *(data.add(PT_REGS_CS) as *const u64),
            (*ctx.ctx).sample_period,
        )
    };
    // A sample in user mode has no kernel stack to walk.
    let kernel = match cs & 3 {
        3 => NO_STACK,
        _ => stack(&ctx, entry, 0),
    };
    let user = stack(&ctx, entry, BPF_F_USER_STACK as u64);
    if let Some(counters) = counters(entry) {
        add_unpreempted(&mut counters.time.samples, 1);
    }
    count(entry, skill, phase, TIME_ON_CPU, (user, kernel, 0), period);
    if TIMELINE.load() != 0 {
        let sample = TimeSample {
            ts_ns: now(),
            ip,
            tid,
            skill,
            phase,
            kernel: u32::from(cs & 3 != 3),
        };
        if TIME_SAMPLES.output(&sample, 0).is_err()
            && let Some(counters) = counters(entry)
        {
            add_unpreempted(&mut counters.time.timeline_lost, 1);
        }
    }
    match THREAD_SAMPLES.get_ptr_mut(&tid) {
        // SAFETY: a live map value; only this thread's samples add to it, one CPU at a time.
        Some(samples) => unsafe { *samples += 1 },
        None => {
            let _ = THREAD_SAMPLES.insert(&tid, &1, BPF_NOEXIST as u64);
        }
    }
    0
}

/// `sched_switch(bool preempt, struct task_struct *prev, struct task_struct *next,
/// unsigned int prev_state)`: the current task is `prev`.
#[btf_tracepoint(function = "sched_switch")]
pub fn btf_sched_switch(ctx: BtfTracePointContext) -> u32 {
    let (tid, tgid) = ids();
    if is_host(tgid) && tid != 0 {
        // The kernel's ids differ from `ids()`'s only in a PID namespace of skillprof's own.
        let kernel_tid = match crate::in_pid_namespace() {
            true => {
                let kernel = bpf_get_current_pid_tgid();
                if let Some(host) = HOST_KERNEL_TGID.get_ptr_mut(0) {
                    // SAFETY: a live map value; every writer writes the same number.
                    unsafe { *host = (kernel >> 32) as u32 };
                }
                kernel as u32
            }
            false => tid,
        };
        let preempt: u64 = ctx.arg(0);
        let prev_state: u64 = ctx.arg(3);
        // TASK_INTERRUPTIBLE 0x1, TASK_UNINTERRUPTIBLE 0x2; a preempted task is runnable
        // whatever its state says (it may have been on its way to sleep). __TASK_STOPPED 0x4
        // and __TASK_TRACED 0x8 (SIGSTOP, a debugger) are off the run queue until SIGCONT
        // wakes them: counted asleep, which their kernel stack (do_signal_stop) says why,
        // not runnable, which read a stopped host as one waiting for a CPU.
        let state = match (preempt & 1, prev_state & 3, prev_state & 0xc) {
            (0, 1, _) => TIME_SLEEPING,
            (0, 2, _) | (0, 3, _) => TIME_BLOCKED,
            (0, 0, stopped) if stopped != 0 => TIME_SLEEPING,
            _ => TIME_RUNNABLE,
        };
        switched_out(&ctx, ctx.arg(1), tid, kernel_tid, state);
    }
    let next: *const u8 = ctx.arg(2);
    // SAFETY: `next` is a task the verifier types from BTF; loads at constant offsets of its
    // fields are checked at load time.
    let (next_tid, next_tgid) = unsafe {
        (
            *(next.add(TASK_PID.load() as usize) as *const u32),
            *(next.add(TASK_TGID.load() as usize) as *const u32),
        )
    };
    if next_tgid == host_kernel_tgid() && next_tid != 0 {
        switched_in(next, next_tid);
    }
    0
}

/// `sched_wakeup(struct task_struct *p)`: a host thread asleep becomes runnable.
#[btf_tracepoint(function = "sched_wakeup")]
pub fn btf_sched_wakeup(ctx: BtfTracePointContext) -> u32 {
    let task: *const u8 = ctx.arg(0);
    // SAFETY: as in `btf_sched_switch`.
    let (tid, tgid) = unsafe {
        (
            *(task.add(TASK_PID.load() as usize) as *const u32),
            *(task.add(TASK_TGID.load() as usize) as *const u32),
        )
    };
    if tgid != host_kernel_tgid() || tgid == 0 {
        return 0;
    }
    if let Some(off) = OFF_CPU.get_ptr_mut(&tid) {
        // SAFETY: a live map value; a thread is woken once per sleep.
        unsafe {
            if (*off).since_ns != 0 && (*off).woken_ns == 0 {
                (*off).woken_ns = now();
            }
        }
    }
    0
}

/// Host thread `tid` (the task `prev`, `kernel_tid` as the kernel numbers it) leaves its CPU
/// in `state`.
#[inline(always)]
fn switched_out(
    ctx: &BtfTracePointContext,
    prev: *const u8,
    tid: u32,
    kernel_tid: u32,
    state: u32,
) {
    let entry = current_entry();
    let (skill, phase) = marks::slot_now(tid);
    let stacks = if OFF_CPU_STACKS.load() == OFF_CPU_EVERY_STACK {
        (
            stack(ctx, entry, BPF_F_USER_STACK as u64),
            stack(ctx, entry, 0),
        )
    } else {
        (NO_STACK, NO_STACK)
    };
    let run_delay_ns = match sched_info_known() {
        true => run_delay(prev),
        false => 0,
    };
    let off = OffCpu {
        since_ns: now(),
        woken_ns: 0,
        run_delay_ns,
        entry,
        skill,
        phase,
        state,
        user_stack: stacks.0,
        kernel_stack: stacks.1,
    };
    match OFF_CPU.get_ptr_mut(&kernel_tid) {
        // SAFETY: a live map value, written only at its own thread's switches.
        Some(kept) => unsafe { *kept = off },
        None => {
            let _ = OFF_CPU.insert(&kernel_tid, &off, 0);
        }
    }
    if let Some(counters) = counters(entry) {
        add_unpreempted(&mut counters.time.switches_out, 1);
    }
}

/// Thread `tid` (the task `next`) runs again: its interval off the CPU is counted.
#[inline(always)]
fn switched_in(next: *const u8, tid: u32) {
    let Some(off) = OFF_CPU.get_ptr_mut(&tid) else {
        // Switched out before the programs were attached.
        return;
    };
    // SAFETY: a live map value, written only at its own thread's switches and wakeups.
    let off = unsafe { &mut *off };
    if off.since_ns == 0 {
        return;
    }
    let now = now();
    let entry = current_entry();
    // Asleep until woken (a runnable thread was never asleep), then waiting for a CPU.
    let woken = match (off.state, sched_info_known()) {
        (TIME_RUNNABLE, _) => off.since_ns,
        (_, true) => now
            .saturating_sub(runnable_since(next, off.run_delay_ns))
            .max(off.since_ns),
        _ if off.woken_ns >= off.since_ns => off.woken_ns,
        // Woken before the programs saw it: all of it counts as the state it left in.
        _ => now,
    };
    let mut stacks = (off.user_stack, off.kernel_stack, 0);
    if OFF_CPU_STACKS.load() == OFF_CPU_WAITS && off.state != TIME_RUNNABLE {
        let asleep = woken - off.since_ns;
        let threshold = match off.skill == HOST_SKILL && marks::keeps_slots() {
            true => WAIT_WALK_IDLE_NS.load(),
            false => WAIT_WALK_NS.load(),
        };
        // A draw below `threshold`: under `asleep` with a chance of asleep / threshold.
        // SAFETY: a helper without arguments.
        let draw = (u64::from(unsafe { bpf_get_prandom_u32() }) * threshold) >> 32;
        if asleep >= threshold || draw < asleep {
            if let Some(counters) = counters(entry) {
                add_unpreempted(&mut counters.time.walks, 1);
            }
            stacks.1 = wait_stack(next, entry);
            stacks.2 = u32::from(asleep < threshold);
        }
    }
    span(off, off.state, stacks, off.since_ns, woken, entry);
    let left_with = (off.user_stack, off.kernel_stack, 0);
    span(off, TIME_RUNNABLE, left_with, woken, now, entry);
    off.since_ns = 0;
}

/// The kernel stack task `next` slept on (it has not run since), as a wait stack id, or
/// [`NO_STACK`] with the loss counted.
#[inline(always)]
fn wait_stack(next: *const u8, entry: u32) -> i32 {
    let lost = || {
        if let Some(counters) = counters(entry) {
            add_unpreempted(&mut counters.time.stacks_lost, 1);
        }
        NO_STACK
    };
    let Some(walk) = WAIT_SCRATCH.get_ptr_mut(0) else {
        return lost();
    };
    // SAFETY: this CPU's scratch value; nothing else runs on the CPU meanwhile.
    let walk = unsafe { &mut *walk };
    // SAFETY: `next` is a task the verifier types from BTF; the buffer is the map value's.
    let bytes = unsafe {
        bpf_get_task_stack(
            next as *mut _,
            walk.ips.as_mut_ptr() as *mut _,
            core::mem::size_of::<WaitStack>() as u32,
            0,
        )
    };
    if bytes <= 0 {
        return lost();
    }
    let frames = bytes as usize / 8;
    // FNV-1a over the frames; the rest of the scratch zeroed, so one stack is one value.
    let mut hash: u32 = 0x811c_9dc5;
    for i in 0..WAIT_STACK_DEPTH {
        if i >= frames {
            walk.ips[i] = 0;
        }
        let ip = walk.ips[i];
        hash = (hash ^ ip as u32).wrapping_mul(0x0100_0193);
        hash = (hash ^ (ip >> 32) as u32).wrapping_mul(0x0100_0193);
    }
    let id = (hash & (WAIT_STACK_ID as u32 - 1)) | WAIT_STACK_ID as u32;
    // SAFETY: a plain read of a live map value.
    let Some(kept) = (unsafe { WAIT_STACKS.get(&id) }) else {
        // A new stack (most walks find theirs already kept: one lookup, no insert). Refused
        // when the map is full, or when another CPU kept the same id a moment before.
        return match WAIT_STACKS.insert(&id, walk, BPF_NOEXIST as u64) {
            Ok(()) => id as i32,
            Err(_) => lost(),
        };
    };
    // The same stack, or another with the same hash (which loses this one).
    // A loop, not `==`: BPF has no memcmp to call.
    for i in 0..WAIT_STACK_DEPTH {
        if kept.ips[i] != walk.ips[i] {
            return lost();
        }
    }
    id as i32
}

/// Counts `[start, end)` in `state` for the thread of `off`, with `stacks`: to the current
/// entry, but for the part before it began, which goes to the entry the thread left its CPU
/// in.
#[inline(always)]
fn span(off: &OffCpu, state: u32, stacks: (i32, i32, u32), start: u64, end: u64, entry: u32) {
    if end <= start {
        return;
    }
    // The boundary is read only for an interval that crossed one: most stay in one entry.
    let began = match off.entry == entry {
        true => 0,
        false => ENTRY_BEGAN.get(0).copied().unwrap_or(0),
    };
    let split = if began > start {
        let split = began.min(end);
        count(
            off.entry,
            off.skill,
            off.phase,
            state,
            stacks,
            split - start,
        );
        split
    } else {
        start
    };
    if end > split {
        count(entry, off.skill, off.phase, state, stacks, end - split);
    }
}
