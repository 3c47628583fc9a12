//! Address-space syscalls of the host: mmap, munmap, mremap, mprotect, madvise, brk (calls,
//! bytes, errors, enter→exit latency per thread), and the `exit_group` instant.
//!
//! Mechanisms (userspace attaches one set): fentry+fexit on `__x64_sys_*`, kprobe+kretprobe
//! on the same functions, tp_btf on the raw `sys_enter`/`sys_exit`, or the classic
//! `syscalls:sys_{enter,exit}_*` tracepoints. All of them end in [`enter`] and [`exit`].

use aya_ebpf::{
    EbpfContext as _,
    helpers::bpf_probe_read_kernel,
    macros::{btf_tracepoint, fentry, fexit, kprobe, kretprobe, map, tracepoint},
    maps::{Array, LruHashMap},
    programs::{
        BtfTracePointContext, FEntryContext, FExitContext, ProbeContext, RetProbeContext,
        TracePointContext, tracing::StackIdContext,
    },
};
use skillprof_common::{
    EAGAIN, EINVAL, ENOMEM, ExitGroupEvent, NR_BRK, NR_EXIT_GROUP, NR_MADVISE, NR_MMAP,
    NR_MPROTECT, NR_MREMAP, NR_MUNMAP, PROT_EXEC, STACK_SYSCALL, SYS_BRK, SYS_MADVISE, SYS_MREMAP, SYS_MUNMAP,
    SysEnter, SyscallEvent, advice_class, syscall_kind,
};

use crate::{
    PtRegs, add, counters, current_entry, emit, ids, is_host, marks, max, now, stacks, stop_state,
};

/// Per host thread (key: tid): the syscall in flight. A thread's slot is inserted at its first
/// syscall and then written in place, so a call costs two lookups rather than an insert and a
/// delete, which each take a bucket lock and move an element between free lists. LRU: the
/// slots of threads that have exited age out instead of filling the map.
#[map]
static SYS_ENTER: LruHashMap<u32, SysEnter> = LruHashMap::with_max_entries(16384, 0);

/// `SysEnter::nr` of a slot whose call has been counted (or that holds none).
const CONSUMED: u32 = u32::MAX;

/// The host's program break after its last brk, to measure how far each brk moves it.
#[map]
static BRK_LAST: Array<u64> = Array::with_max_entries(1, 0);

/// A syscall of the host entered. False if it could not be tracked (no slot could be made for
/// a new thread): the caller logs that, it is the one thing here that loses a count.
#[inline(always)]
fn enter<C: StackIdContext>(ctx: &C, tid: u32, nr: u32, args: [u64; 3]) -> bool {
    if nr == NR_EXIT_GROUP {
        if let Some(stop) = stop_state()
            && stop.exit_group_ns == 0
        {
            stop.exit_group_ns = now();
        }
        emit(current_entry(), tid, ExitGroupEvent { code: args[0] });
        return true;
    }
    if syscall_kind(nr).is_none() {
        return true;
    }
    let entry = current_entry();
    let (skill, phase) = marks::current(tid);
    stacks::sample(ctx, entry, skill, STACK_SYSCALL);
    let state = SysEnter {
        ts_ns: now(),
        args,
        nr,
        entry,
        skill,
        phase,
    };
    match SYS_ENTER.get_ptr_mut(&tid) {
        Some(slot) => {
            // SAFETY: a live map value, written only by its own thread (the key is its tid).
            unsafe { *slot = state };
            true
        }
        None => SYS_ENTER.insert(&tid, &state, 0).is_ok(),
    }
}

/// Reports a call `enter` could not track.
macro_rules! lost_call {
    ($ctx:expr, $tid:expr, $nr:expr) => {
        aya_log_ebpf::warn!(
            $ctx,
            "syscall state map full: syscall {} of thread {} is not counted",
            $nr,
            $tid
        )
    };
}

/// A syscall of the host returned. `nr` is `None` where the mechanism cannot tell (kretprobe):
/// the saved entry state says which syscall it was.
#[inline(always)]
fn exit(tid: u32, nr: Option<u32>, ret: i64) {
    let Some(slot) = SYS_ENTER.get_ptr_mut(&tid) else {
        return;
    };
    // SAFETY: as in `enter`; copied out, then marked consumed.
    let saved = unsafe { *slot };
    unsafe { (*slot).nr = CONSUMED };
    if saved.nr == CONSUMED {
        return;
    }
    if let Some(nr) = nr
        && nr != saved.nr
    {
        // A stale entry (its exit was missed, e.g. attached mid-call): not this call.
        return;
    }
    let Some(kind) = syscall_kind(saved.nr) else {
        return;
    };
    let latency = now().saturating_sub(saved.ts_ns);
    let failed_errno = (-4095..=-1).contains(&ret);
    let (bytes, failed) = match saved.nr {
        NR_MMAP | NR_MUNMAP | NR_MPROTECT | NR_MADVISE => (saved.args[1], failed_errno),
        NR_MREMAP => (saved.args[2], failed_errno),
        NR_BRK => brk_moved(saved.args[0], ret as u64),
        _ => (0, failed_errno),
    };
    if let Some(row) = marks::row(saved.entry, saved.skill, saved.phase)
        && let Some(counts) = row.syscalls.get_mut(kind)
    {
        add(&mut counts.calls, 1);
        add(&mut counts.bytes, bytes);
    }
    let Some(c) = counters(saved.entry) else {
        return;
    };
    if let Some(counts) = c.syscalls.get_mut(kind) {
        add(&mut counts.calls, 1);
        add(&mut counts.bytes, bytes);
        if failed {
            add(&mut counts.errors, 1);
            match -ret {
                ENOMEM => add(&mut counts.enomem, 1),
                EINVAL => add(&mut counts.einval, 1),
                EAGAIN => add(&mut counts.eagain, 1),
                _ => {}
            }
        }
        add(&mut counts.lat_ns, latency);
        max(&mut counts.lat_max_ns, latency);
    }
    if matches!(saved.nr, NR_MMAP | NR_MPROTECT) && !failed && saved.args[2] & PROT_EXEC != 0 {
        add(&mut c.exec.calls, 1);
        add(&mut c.exec.bytes, bytes);
    }
    if kind == SYS_MADVISE
        && let Some(advice) = c.madvise.get_mut(advice_class(saved.args[2]))
    {
        add(&mut advice.calls, 1);
        add(&mut advice.bytes, bytes);
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
        SYS_BRK => saved.args[0],
        SYS_MREMAP => saved.args[2],
        _ => saved.args[1],
    };
    let advice = if kind == SYS_MADVISE {
        saved.args[2] as u32
    } else {
        0
    };
    emit(
        saved.entry,
        tid,
        SyscallEvent {
            syscall: kind as u32,
            advice,
            arg,
            ret,
            lat_ns: latency,
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

/// Reads the first three syscall arguments from the user registers saved at syscall entry.
#[inline(always)]
fn user_args(regs: *const PtRegs) -> [u64; 3] {
    // SAFETY: the helper checks the addresses; a failed read gives 0.
    unsafe {
        [
            bpf_probe_read_kernel(&raw const (*regs).di).unwrap_or(0),
            bpf_probe_read_kernel(&raw const (*regs).si).unwrap_or(0),
            bpf_probe_read_kernel(&raw const (*regs).dx).unwrap_or(0),
        ]
    }
}

#[inline(always)]
fn user_nr(regs: *const PtRegs) -> u32 {
    // SAFETY: as in `user_args`.
    unsafe { bpf_probe_read_kernel(&raw const (*regs).orig_ax).unwrap_or(u64::MAX) as u32 }
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

/// Attached to `sys_enter_{mmap,munmap,mremap,mprotect,madvise,brk,exit_group}`.
///
/// The arguments are read with a helper, not directly: a direct read of the third argument
/// would make the kernel refuse to attach the program to the records that have fewer
/// (munmap, brk, exit_group: `max_ctx_offset` beyond the record). For those, the unused
/// third value is whatever follows the record.
#[tracepoint]
pub fn tp_sys_enter(ctx: TracePointContext) -> u32 {
    let (tid, tgid) = ids();
    if !is_host(tgid) {
        return 0;
    }
    let record = ctx.as_ptr().cast::<TraceEnter>();
    // SAFETY: the number is in every record; the helper checks the other addresses.
    let (nr, args) = unsafe {
        (
            (*record).nr as u32,
            [
                bpf_probe_read_kernel(&raw const (*record).args[0]).unwrap_or(0),
                bpf_probe_read_kernel(&raw const (*record).args[1]).unwrap_or(0),
                bpf_probe_read_kernel(&raw const (*record).args[2]).unwrap_or(0),
            ],
        )
    };
    if !enter(&ctx, tid, nr, args) {
        lost_call!(&ctx, tid, nr);
    }
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
    exit(tid, Some(nr), ret);
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
    if nr != NR_EXIT_GROUP && syscall_kind(nr).is_none() {
        return 0;
    }
    let regs: *const PtRegs = ctx.arg(0);
    if !enter(&ctx, tid, nr, user_args(regs)) {
        lost_call!(&ctx, tid, nr);
    }
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
    exit(tid, Some(nr), ret);
    0
}

// ---- kprobes on __x64_sys_<name>(const struct pt_regs *regs) ------------------------------

/// Attached to every `__x64_sys_<name>`; the syscall number is in the saved user registers.
#[kprobe]
pub fn kprobe_sys_enter(ctx: ProbeContext) -> u32 {
    let (tid, tgid) = ids();
    if !is_host(tgid) {
        return 0;
    }
    let Some(regs) = ctx.arg::<*const PtRegs>(0) else {
        return 0;
    };
    let nr = user_nr(regs);
    if !enter(&ctx, tid, nr, user_args(regs)) {
        lost_call!(&ctx, tid, nr);
    }
    0
}

#[kretprobe]
pub fn kretprobe_sys_exit(ctx: RetProbeContext) -> u32 {
    let (tid, tgid) = ids();
    if !is_host(tgid) {
        return 0;
    }
    let ret: i64 = ctx.ret();
    exit(tid, None, ret);
    0
}

// ---- fentry / fexit on __x64_sys_<name>: one program per function (BTF attach) ------------

macro_rules! fentry_fexit {
    ($function:literal, $fentry:ident, $fexit:ident, $nr:expr) => {
        #[fentry(function = $function)]
        pub fn $fentry(ctx: FEntryContext) -> i32 {
            let (tid, tgid) = ids();
            if !is_host(tgid) {
                return 0;
            }
            let regs: *const PtRegs = ctx.arg(0);
            if !enter(&ctx, tid, $nr, user_args(regs)) {
                lost_call!(&ctx, tid, $nr);
            }
            0
        }

        #[fexit(function = $function)]
        pub fn $fexit(ctx: FExitContext) -> i32 {
            let (tid, tgid) = ids();
            if !is_host(tgid) {
                return 0;
            }
            // fexit's context: the arguments, then the return value.
            let ret: i64 = ctx.arg(1);
            exit(tid, Some($nr), ret);
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

/// exit_group never returns: entry only.
#[fentry(function = "__x64_sys_exit_group")]
pub fn fentry_sys_exit_group(ctx: FEntryContext) -> i32 {
    let (tid, tgid) = ids();
    if !is_host(tgid) {
        return 0;
    }
    let regs: *const PtRegs = ctx.arg(0);
    enter(&ctx, tid, NR_EXIT_GROUP, user_args(regs));
    0
}
