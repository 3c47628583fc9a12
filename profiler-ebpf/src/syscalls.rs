//! Address-space syscalls of the host: mmap, munmap, mremap, mprotect, madvise, brk (calls,
//! bytes, errors; with `--syscall-latency` the time from enter to exit), and the
//! `exit_group` instant.
//!
//! A call is counted once, at its exit, where the return value is: its arguments are still
//! in the user registers the kernel saved at entry (`task_pt_regs`), so no program runs at
//! the call's entry and no per-thread state is kept, unless a latency is asked for. Then the
//! entry programs keep each thread's entry instant (`SYS_ENTER`), and the clock is read twice
//! per call.
//!
//! Mechanisms (userspace attaches one set): fexit on `__x64_sys_*` (fentry too for exit_group
//! and latency), kretprobes on the same functions, tp_btf on the raw `sys_enter`/`sys_exit`,
//! or the classic `syscalls:sys_{enter,exit}_*` tracepoints. All of them end in [`enter`]
//! and [`exit`].

use aya_ebpf::{
    EbpfContext, Global,
    helpers::{bpf_get_current_task_btf, bpf_task_pt_regs},
    macros::{btf_tracepoint, fentry, fexit, kprobe, kretprobe, map, tracepoint},
    maps::{Array, LruHashMap},
    programs::{
        BtfTracePointContext, FEntryContext, FExitContext, ProbeContext, RetProbeContext,
        TracePointContext, tracing::StackIdContext,
    },
};
use skillprof_common::{
    EAGAIN, EINVAL, ENOMEM, ExitGroupEvent, NR_BRK, NR_EXIT_GROUP, NR_GETRUSAGE, NR_MADVISE,
    NR_MMAP, NR_MPROTECT, NR_MREMAP, NR_MUNMAP, PROT_EXEC, STACK_SYSCALL, SYS_BRK, SYS_MADVISE,
    SYS_MREMAP, SYS_MUNMAP, SysEnter, SyscallEvent, advice_class, syscall_kind,
};

use crate::{
    PtRegs, add_by, counters, current_entry, emit, ids, is_host, marks, max, now, stacks,
    stop_state,
};

/// 1 with `--syscall-latency`: a load-time constant, so without it the verifier removes the
/// clock reads and the per-thread state from every syscall program.
#[unsafe(no_mangle)]
static SYSCALL_LATENCY: Global<u32> = Global::new(crate::UNSET);

/// Per host thread (key: tid), with `--syscall-latency` only: the syscall in flight and when
/// it entered. A thread's slot is inserted at its first syscall and then written in place, so
/// a call costs two lookups rather than an insert and a delete. LRU: the slots of threads
/// that have exited age out instead of filling the map.
#[map]
static SYS_ENTER: LruHashMap<u32, SysEnter> = LruHashMap::with_max_entries(16384, 0);

/// `SysEnter::nr` of a slot whose call has been timed (or that holds none).
const CONSUMED: u32 = u32::MAX;

/// The host's program break after its last brk, to measure how far each brk moves it.
#[map]
static BRK_LAST: Array<u64> = Array::with_max_entries(1, 0);

#[inline(always)]
fn latency_on() -> bool {
    SYSCALL_LATENCY.load() != 0
}

/// A syscall of the host entered: a mark (getrusage), the exit_group instant, or (with
/// latency) the call's.
#[inline(always)]
fn enter<C: EbpfContext>(ctx: &C, tid: u32, nr: u32, first_arg: u64) {
    if nr == NR_GETRUSAGE {
        marks::marked(tid);
        return;
    }
    if nr == NR_EXIT_GROUP {
        if let Some(stop) = stop_state()
            && stop.exit_group_ns == 0
        {
            stop.exit_group_ns = now();
        }
        emit(current_entry(), tid, ExitGroupEvent { code: first_arg });
        return;
    }
    if !latency_on() || syscall_kind(nr).is_none() {
        return;
    }
    let state = SysEnter {
        ts_ns: now(),
        nr,
        _pad: 0,
    };
    match SYS_ENTER.get_ptr_mut(&tid) {
        // SAFETY: a live map value, written only by its own thread (the key is its tid).
        Some(slot) => unsafe { *slot = state },
        None => {
            if SYS_ENTER.insert(&tid, &state, 0).is_err() {
                // The call is counted at its exit all the same; only its time is lost.
                aya_log_ebpf::warn!(
                    ctx,
                    "syscall state map full: the time of syscall {} of thread {} is lost",
                    nr,
                    tid
                );
            }
        }
    }
}

/// With latency: the ns since thread `tid` entered syscall `nr`; 0 if its entry was not
/// seen (or latency is off). A number, not an `Option`: LLVM reads the payload of a `None`
/// into a register it never wrote, which the verifier refuses ("R5 !read_ok").
#[inline(always)]
fn latency(tid: u32, nr: u32) -> u64 {
    if !latency_on() {
        return 0;
    }
    let Some(slot) = SYS_ENTER.get_ptr_mut(&tid) else {
        return 0;
    };
    // SAFETY: as in `enter`; copied out, then marked consumed.
    let saved = unsafe { *slot };
    unsafe { (*slot).nr = CONSUMED };
    // A stale slot (its exit was missed, e.g. attached mid-call) is not this call.
    match saved.nr == nr {
        true => now().saturating_sub(saved.ts_ns).max(1),
        false => 0,
    }
}

/// A syscall `nr` of the host returned `ret`; `args` are its first three arguments.
/// `PREEMPTIBLE`: how the mechanism adds (`add_by`).
#[inline(always)]
fn exit<const PREEMPTIBLE: bool, C: StackIdContext>(
    ctx: &C,
    tid: u32,
    nr: u32,
    args: [u64; 3],
    ret: i64,
) {
    let Some(kind) = syscall_kind(nr) else {
        return;
    };
    let entry = current_entry();
    stacks::sample(ctx, tid, entry, STACK_SYSCALL);
    let failed_errno = (-4095..=-1).contains(&ret);
    let (bytes, failed) = match nr {
        NR_MMAP | NR_MUNMAP | NR_MPROTECT | NR_MADVISE => (args[1], failed_errno),
        NR_MREMAP => (args[2], failed_errno),
        NR_BRK => brk_moved(args[0], ret as u64),
        _ => (0, failed_errno),
    };
    let (skill, phase) = marks::current(tid);
    if let Some(row) = marks::row(entry, skill, phase)
        && let Some(counts) = row.syscalls.get_mut(kind)
    {
        add_by::<PREEMPTIBLE>(&mut counts.calls, 1);
        add_by::<PREEMPTIBLE>(&mut counts.bytes, bytes);
    }
    let Some(c) = counters(entry) else {
        return;
    };
    let took = latency(tid, nr);
    if let Some(counts) = c.syscalls.get_mut(kind) {
        add_by::<PREEMPTIBLE>(&mut counts.calls, 1);
        add_by::<PREEMPTIBLE>(&mut counts.bytes, bytes);
        if failed {
            add_by::<PREEMPTIBLE>(&mut counts.errors, 1);
            match -ret {
                ENOMEM => add_by::<PREEMPTIBLE>(&mut counts.enomem, 1),
                EINVAL => add_by::<PREEMPTIBLE>(&mut counts.einval, 1),
                EAGAIN => add_by::<PREEMPTIBLE>(&mut counts.eagain, 1),
                _ => {}
            }
        }
        if took > 0 {
            add_by::<PREEMPTIBLE>(&mut counts.lat_ns, took);
            max(&mut counts.lat_max_ns, took);
        }
    }
    if matches!(nr, NR_MMAP | NR_MPROTECT) && !failed && args[2] & PROT_EXEC != 0 {
        add_by::<PREEMPTIBLE>(&mut c.exec.calls, 1);
        add_by::<PREEMPTIBLE>(&mut c.exec.bytes, bytes);
    }
    if kind == SYS_MADVISE
        && let Some(advice) = c.madvise.get_mut(advice_class(args[2]))
    {
        add_by::<PREEMPTIBLE>(&mut advice.calls, 1);
        add_by::<PREEMPTIBLE>(&mut advice.bytes, bytes);
    }
    if kind == SYS_MUNMAP
        && let Some(stop) = stop_state()
        && stop.signal_ns != 0
        && stop.exit_group_ns == 0
    {
        // The graceful drain: between the termination signal and exit_group.
        stop.drain_munmap_calls += 1;
        stop.drain_munmap_bytes += bytes;
    }
    // The event's argument: the length (mremap: the new length; brk: the requested break).
    let arg = match kind {
        SYS_BRK => args[0],
        SYS_MREMAP => args[2],
        _ => args[1],
    };
    let advice = if kind == SYS_MADVISE {
        args[2] as u32
    } else {
        0
    };
    emit(
        entry,
        tid,
        SyscallEvent {
            syscall: kind as u32,
            advice,
            arg,
            ret,
            lat_ns: took,
        },
    );
}

/// brk(requested) returned `new`: the bytes the break moved, and whether the call failed
/// (asked for a new break and did not get it). brk(0) only queries.
#[inline(always)]
fn brk_moved(requested: u64, new: u64) -> (u64, bool) {
    let Some(last) = BRK_LAST.get_ptr_mut(0) else {
        return (0, false);
    };
    // SAFETY: the only slot of a live array map.
    let last = unsafe { &mut *last };
    let moved = if *last == 0 { 0 } else { new.abs_diff(*last) };
    *last = new;
    (moved, requested != 0 && new != requested)
}

/// The first three syscall arguments, from the user registers the kernel saved at syscall
/// entry. `regs` is a BTF pointer (a tp_btf or fentry argument, or `current_regs`): the
/// verifier checks each load against `struct pt_regs` and compiles it to a plain load.
#[inline(always)]
fn user_args(regs: *const PtRegs) -> [u64; 3] {
    // SAFETY: see above; a load the verifier could not type would refuse the program.
    unsafe { [(*regs).di, (*regs).si, (*regs).dx] }
}

/// The syscall number, from the same registers.
#[inline(always)]
fn user_nr(regs: *const PtRegs) -> u32 {
    // SAFETY: as in `user_args`.
    unsafe { (*regs).orig_ax as u32 }
}

/// The current thread's user registers, as the kernel saved them at syscall entry.
#[inline(always)]
pub fn current_regs() -> *const PtRegs {
    // SAFETY: both helpers take and give BTF pointers the verifier types.
    unsafe { bpf_task_pt_regs(bpf_get_current_task_btf()) as *const PtRegs }
}

// ---- classic tracepoints: syscalls:sys_enter_<name> / sys_exit_<name> ---------------------

/// `struct syscall_trace_enter`: 8-byte common header, the syscall number, six arguments.
#[repr(C)]
struct TraceEnter {
    _common: u64,
    nr: i32,
    _pad: i32,
    args: [u64; 6],
}

/// `struct syscall_trace_exit`: 8-byte common header, the syscall number, the return value.
#[repr(C)]
struct TraceExit {
    _common: u64,
    nr: i32,
    _pad: i32,
    ret: i64,
}

/// Attached to `sys_enter_{exit_group,getrusage}`, and with latency to `sys_enter_{mmap,
/// munmap,mremap,mprotect,madvise,brk}`.
#[tracepoint]
pub fn tp_sys_enter(ctx: TracePointContext) -> u32 {
    let (tid, tgid) = ids();
    if !is_host(tgid) {
        return 0;
    }
    let record = ctx.as_ptr().cast::<TraceEnter>();
    // SAFETY: the number and the first argument are in every record these are attached to.
    let (nr, first_arg) = unsafe { ((*record).nr as u32, (*record).args[0]) };
    enter(&ctx, tid, nr, first_arg);
    0
}

/// Attached to `sys_exit_{mmap,munmap,mremap,mprotect,madvise,brk}`.
#[tracepoint]
pub fn tp_sys_exit(ctx: TracePointContext) -> u32 {
    let (tid, tgid) = ids();
    if !is_host(tgid) {
        return 0;
    }
    let record = ctx.as_ptr().cast::<TraceExit>();
    // SAFETY: as above.
    let (nr, ret) = unsafe { ((*record).nr as u32, (*record).ret) };
    exit::<false, _>(&ctx, tid, nr, user_args(current_regs()), ret);
    0
}

// ---- tp_btf: raw_syscalls sys_enter(regs, id) / sys_exit(regs, ret) -----------------------

#[btf_tracepoint(function = "sys_enter")]
pub fn btf_sys_enter(ctx: BtfTracePointContext) -> i32 {
    let (tid, tgid) = ids();
    if !is_host(tgid) {
        return 0;
    }
    let id: i64 = ctx.arg(1);
    let nr = id as u32;
    if nr != NR_EXIT_GROUP && nr != NR_GETRUSAGE && (!latency_on() || syscall_kind(nr).is_none()) {
        return 0;
    }
    let regs: *const PtRegs = ctx.arg(0);
    enter(&ctx, tid, nr, user_args(regs)[0]);
    0
}

#[btf_tracepoint(function = "sys_exit")]
pub fn btf_sys_exit(ctx: BtfTracePointContext) -> i32 {
    let (tid, tgid) = ids();
    if !is_host(tgid) {
        return 0;
    }
    let regs: *const PtRegs = ctx.arg(0);
    let nr = user_nr(regs);
    if syscall_kind(nr).is_none() {
        return 0;
    }
    let ret: i64 = ctx.arg(1);
    exit::<false, _>(&ctx, tid, nr, user_args(regs), ret);
    0
}

// ---- kprobes on __x64_sys_<name>(const struct pt_regs *regs) ------------------------------

/// Attached to `__x64_sys_{exit_group,getrusage}`, and with latency to every
/// `__x64_sys_<name>`; the syscall number is in the saved user registers.
#[kprobe]
pub fn kprobe_sys_enter(ctx: ProbeContext) -> u32 {
    let (tid, tgid) = ids();
    if !is_host(tgid) {
        return 0;
    }
    // The function's argument is the same user registers, but a kprobe sees it as a number:
    // the task's own pointer to them is one the verifier types.
    let regs = current_regs();
    enter(&ctx, tid, user_nr(regs), user_args(regs)[0]);
    0
}

#[kretprobe]
pub fn kretprobe_sys_exit(ctx: RetProbeContext) -> u32 {
    let (tid, tgid) = ids();
    if !is_host(tgid) {
        return 0;
    }
    let regs = current_regs();
    let ret: i64 = ctx.ret();
    exit::<true, _>(&ctx, tid, user_nr(regs), user_args(regs), ret);
    0
}

// ---- fentry / fexit on __x64_sys_<name>: one program per function (BTF attach) ------------

macro_rules! fentry_fexit {
    ($function:literal, $fentry:ident, $fexit:ident, $nr:expr) => {
        /// With latency only: the call's entry instant.
        #[fentry(function = $function)]
        pub fn $fentry(ctx: FEntryContext) -> i32 {
            let (tid, tgid) = ids();
            if !is_host(tgid) {
                return 0;
            }
            enter(&ctx, tid, $nr, 0);
            0
        }

        #[fexit(function = $function)]
        pub fn $fexit(ctx: FExitContext) -> i32 {
            let (tid, tgid) = ids();
            if !is_host(tgid) {
                return 0;
            }
            // fexit's context: the arguments (the user registers), then the return value.
            let regs: *const PtRegs = ctx.arg(0);
            let ret: i64 = ctx.arg(1);
            exit::<true, _>(&ctx, tid, $nr, user_args(regs), ret);
            0
        }
    };
}

fentry_fexit!("__x64_sys_mmap", fentry_sys_mmap, fexit_sys_mmap, NR_MMAP);
fentry_fexit!(
    "__x64_sys_munmap",
    fentry_sys_munmap,
    fexit_sys_munmap,
    NR_MUNMAP
);
fentry_fexit!(
    "__x64_sys_mremap",
    fentry_sys_mremap,
    fexit_sys_mremap,
    NR_MREMAP
);
fentry_fexit!(
    "__x64_sys_mprotect",
    fentry_sys_mprotect,
    fexit_sys_mprotect,
    NR_MPROTECT
);
fentry_fexit!(
    "__x64_sys_madvise",
    fentry_sys_madvise,
    fexit_sys_madvise,
    NR_MADVISE
);
fentry_fexit!("__x64_sys_brk", fentry_sys_brk, fexit_sys_brk, NR_BRK);

/// A mark of the host's (its ledger reads the thread's counters).
#[fentry(function = "__x64_sys_getrusage")]
pub fn fentry_sys_getrusage(_ctx: FEntryContext) -> i32 {
    let (tid, tgid) = ids();
    if is_host(tgid) {
        marks::marked(tid);
    }
    0
}

/// exit_group never returns: entry only.
#[fentry(function = "__x64_sys_exit_group")]
pub fn fentry_sys_exit_group(ctx: FEntryContext) -> i32 {
    let (tid, tgid) = ids();
    if !is_host(tgid) {
        return 0;
    }
    let regs: *const PtRegs = ctx.arg(0);
    enter(&ctx, tid, NR_EXIT_GROUP, user_args(regs)[0]);
    0
}
