//! The host's shutdown, as kernel instants in `STOP`: the termination signal dequeued, thread
//! exits, the address-space teardown (fexit `exit_mmap` where allowed, otherwise bounded by the
//! host mm's `rss_stat` decrements, which also give the pages freed), and the exit notification
//! to the parent. (`exit_group` is recorded by the syscall programs.)

use aya_ebpf::{
    EbpfContext as _,
    macros::{btf_tracepoint, fentry, fexit, kprobe, kretprobe, tracepoint},
    programs::{
        BtfTracePointContext, FEntryContext, FExitContext, ProbeContext, RetProbeContext,
        TracePointContext,
    },
};
use skillprof_common::{
    ExitMmapEvent, NotifyParentEvent, ProcessExitEvent, RssTeardownEvent, SignalDeliverEvent,
    StopState,
};

use crate::{current_entry, emit, ids, is_host, now, stop_state};

const SIGKILL: i32 = 9;
const SIGTERM: i32 = 15;
const SIGCHLD: i32 = 17;

#[inline(always)]
fn signal_deliver(sig: i32) {
    let (tid, tgid) = ids();
    if !is_host(tgid) || (sig != SIGTERM && sig != SIGKILL) {
        return;
    }
    if let Some(stop) = stop_state()
        && stop.signal_ns == 0
    {
        stop.signal_ns = now();
        stop.signal = sig as u32;
    }
    emit(
        current_entry(),
        tid,
        SignalDeliverEvent { signal: sig as u64 },
    );
}

#[inline(always)]
fn process_exit() {
    let (tid, tgid) = ids();
    if !is_host(tgid) {
        return;
    }
    if let Some(stop) = stop_state() {
        let t = now();
        if stop.first_exit_ns == 0 {
            stop.first_exit_ns = t;
        }
        stop.last_exit_ns = t;
        stop.exits += 1;
    }
    emit(current_entry(), tid, ProcessExitEvent {});
}

/// A host thread generated SIGCHLD: the exit notification to the parent (the host does not
/// send SIGCHLD otherwise; its own children's exits run in the children's context).
#[inline(always)]
fn signal_generate(sig: i32) {
    let (tid, tgid) = ids();
    if !is_host(tgid) || sig != SIGCHLD {
        return;
    }
    if let Some(stop) = stop_state() {
        stop.notify_ns = now();
    }
    emit(
        current_entry(),
        tid,
        NotifyParentEvent { signal: sig as u64 },
    );
}

#[inline(always)]
fn exiting(stop: &StopState) -> bool {
    stop.exit_group_ns != 0 || stop.first_exit_ns != 0 || stop.signal == SIGKILL as u32
}

#[inline(always)]
fn exit_mmap(end: bool) {
    let (tid, tgid) = ids();
    if !is_host(tgid) {
        return;
    }
    if let Some(stop) = stop_state() {
        if end {
            stop.exit_mmap_end_ns = now();
        } else if stop.exit_mmap_start_ns == 0 {
            stop.exit_mmap_start_ns = now();
        }
    }
    emit(current_entry(), tid, ExitMmapEvent { end: end as u64 });
}

// ---- kmem:rss_stat (classic only: tp_btf gets (mm, member), not the counter value) --------

/// `kmem:rss_stat`: mm_id @8 (u32), curr @12 (u32), member @16 (i32), size @24 (i64, bytes).
#[repr(C)]
struct RssStat {
    _common: u64,
    mm_id: u32,
    curr: u32,
    member: i32,
    _pad: i32,
    size: i64,
}

/// Runs on every RSS counter change system-wide (every fault): two compares and one array
/// lookup before returning for everything that is not the host's mm.
#[tracepoint]
pub fn tp_rss_stat(ctx: TracePointContext) -> u32 {
    let (tid, tgid) = ids();
    let record = ctx.as_ptr().cast::<RssStat>();
    // SAFETY: tracepoint programs read their record directly; the verifier bounds-checks it.
    let (mm_id, curr, member, size) = unsafe {
        (
            (*record).mm_id,
            (*record).curr,
            (*record).member,
            (*record).size,
        )
    };
    let Some(stop) = stop_state() else {
        return 0;
    };
    let host = is_host(tgid);
    let size = if size > 0 { size as u64 } else { 0 };
    if host && curr == 1 {
        // The host changing its own mm: learn the mm's id, and the counters before teardown.
        stop.mm_id = mm_id;
        stop.mm_id_known = 1;
        if stop.rss_first_ns == 0
            && let Some(before) = stop.rss_before.get_mut(member as usize)
        {
            *before = size;
        }
        return 0;
    }
    if !exiting(stop) {
        return 0;
    }
    let ours = (stop.mm_id_known == 1 && mm_id == stop.mm_id) || (host && curr == 0);
    if !ours {
        return 0;
    }
    let t = now();
    if stop.rss_first_ns == 0 {
        stop.rss_first_ns = t;
    }
    stop.rss_last_ns = t;
    stop.rss_events += 1;
    if let Some(after) = stop.rss_after.get_mut(member as usize) {
        *after = size;
        stop.rss_after_seen |= 1 << (member as u32 & 3);
    }
    emit(
        current_entry(),
        tid,
        RssTeardownEvent {
            member: member as u32,
            own_task: curr,
            bytes: size,
        },
    );
    0
}

// ---- classic tracepoints ------------------------------------------------------------------

/// `signal:signal_deliver`: sig @8.
#[tracepoint]
pub fn tp_signal_deliver(ctx: TracePointContext) -> u32 {
    // SAFETY: as above.
    let sig = unsafe { *ctx.as_ptr().cast::<u8>().add(8).cast::<i32>() };
    signal_deliver(sig);
    0
}

/// `signal:signal_generate`: sig @8.
#[tracepoint]
pub fn tp_signal_generate(ctx: TracePointContext) -> u32 {
    // SAFETY: as above.
    let sig = unsafe { *ctx.as_ptr().cast::<u8>().add(8).cast::<i32>() };
    signal_generate(sig);
    0
}

#[tracepoint]
pub fn tp_sched_process_exit(_ctx: TracePointContext) -> u32 {
    process_exit();
    0
}

// ---- tp_btf --------------------------------------------------------------------------------

/// (sig, info, ka)
#[btf_tracepoint(function = "signal_deliver")]
pub fn btf_signal_deliver(ctx: BtfTracePointContext) -> i32 {
    signal_deliver(ctx.arg(0));
    0
}

/// (sig, info, task, group, result)
#[btf_tracepoint(function = "signal_generate")]
pub fn btf_signal_generate(ctx: BtfTracePointContext) -> i32 {
    signal_generate(ctx.arg(0));
    0
}

#[btf_tracepoint(function = "sched_process_exit")]
pub fn btf_sched_process_exit(_ctx: BtfTracePointContext) -> i32 {
    process_exit();
    0
}

// ---- exit_mmap: fentry/fexit, or kprobe/kretprobe ------------------------------------------

#[fentry(function = "exit_mmap")]
pub fn fentry_exit_mmap(_ctx: FEntryContext) -> i32 {
    exit_mmap(false);
    0
}

#[fexit(function = "exit_mmap")]
pub fn fexit_exit_mmap(_ctx: FExitContext) -> i32 {
    exit_mmap(true);
    0
}

#[kprobe]
pub fn kprobe_exit_mmap(_ctx: ProbeContext) -> u32 {
    exit_mmap(false);
    0
}

#[kretprobe]
pub fn kretprobe_exit_mmap(_ctx: RetProbeContext) -> u32 {
    exit_mmap(true);
    0
}
