//! Reclaim: kswapd (wakeups, who woke it, time awake), direct and memcg reclaim (count,
//! latency, pages), LRU shrinking and `shrink_node` split by reclaim context, slab shrinkers,
//! and throttling.
//!
//! Most of this runs outside the host (kswapd, other processes' reclaim) and is counted
//! system-wide, attributed to the entry current at the time; the host's own share is counted
//! separately. The reclaim context of a thread is tracked in `RECLAIM` (key: tid) by the
//! begin/end tracepoints, for every thread, so LRU and slab events can be classified.

use aya_ebpf::{
    EbpfContext as _,
    macros::{btf_tracepoint, fentry, fexit, kprobe, kretprobe, map, tracepoint},
    maps::Array,
    programs::{
        BtfTracePointContext, FEntryContext, FExitContext, ProbeContext, RetProbeContext,
        TracePointContext,
    },
};
use skillprof_common::{
    CTX_DIRECT, CTX_KSWAPD, CTX_MEMCG, CTX_OTHER, DirectReclaimEvent, KswapdSleepEvent,
    KswapdWakeEvent, LruActiveEvent, LruCounts, LruInactiveEvent, MemcgReclaimEvent,
    RECLAIM_DIRECT, RECLAIM_KSWAPD, RECLAIM_MEMCG, ReclaimState, ShrinkNodeEvent, ShrinkSlabEvent,
    ThrottledEvent, WakeupKswapdEvent,
};

use crate::{RECLAIM, add, counters, current_entry, emit, ids, is_host, max, now};

/// Per NUMA node: when kswapd last woke (0: asleep, or woke before we attached).
#[map]
static KSWAPD_WOKE: Array<u64> = Array::with_max_entries(MAX_NODES, 0);
const MAX_NODES: u32 = 64;

#[inline(always)]
fn state(tid: u32) -> Option<&'static mut ReclaimState> {
    // SAFETY: a live hash map value of this thread; only this thread's programs write it.
    RECLAIM.get_ptr_mut(&tid).map(|p| unsafe { &mut *p })
}

/// This thread's state, created empty if missing.
#[inline(always)]
fn state_or_new(tid: u32) -> Option<&'static mut ReclaimState> {
    if let Some(state) = state(tid) {
        return Some(state);
    }
    let _ = RECLAIM.insert(&tid, &ReclaimState::default(), 0);
    state(tid)
}

/// Drops the state of a thread that is no longer in any reclaim (kswapd's stays).
#[inline(always)]
fn forget_if_idle(tid: u32, state: &ReclaimState) {
    if state.kinds == 0
        && state.slab_start_ns == 0
        && state.shrink_node_start_ns == 0
        && state.direct_start_ns == 0
        && state.memcg_start_ns == 0
    {
        let _ = RECLAIM.remove(&tid);
    }
}

/// The reclaim context of a thread in `state` (memcg wins over direct: a memcg charge can
/// reclaim from within an allocation).
#[inline(always)]
fn context_of(state: Option<&ReclaimState>) -> usize {
    match state {
        Some(s) if s.kinds & RECLAIM_MEMCG != 0 => CTX_MEMCG,
        Some(s) if s.kinds & RECLAIM_DIRECT != 0 => CTX_DIRECT,
        Some(s) if s.kinds & RECLAIM_KSWAPD != 0 => CTX_KSWAPD,
        _ => CTX_OTHER,
    }
}

// ---- the shared logic ----------------------------------------------------------------------

#[inline(always)]
fn kswapd_wake(nid: i32, order: i32) {
    let (tid, _) = ids();
    // kswapd_wake fires in kswapd itself: remember this thread as kswapd.
    match state(tid) {
        Some(s) => s.kinds |= RECLAIM_KSWAPD,
        None => {
            let marked = ReclaimState {
                kinds: RECLAIM_KSWAPD,
                ..ReclaimState::default()
            };
            let _ = RECLAIM.insert(&tid, &marked, 0);
        }
    }
    if let Some(woke) = KSWAPD_WOKE.get_ptr_mut(nid as u32) {
        // SAFETY: a live array slot.
        unsafe { *woke = now() };
    }
    let entry = current_entry();
    if let Some(c) = counters(entry) {
        add(&mut c.kswapd.wakes, 1);
    }
    emit(
        entry,
        tid,
        KswapdWakeEvent {
            nid: nid as u32,
            _pad: 0,
            order: order as u64,
        },
    );
}

#[inline(always)]
fn kswapd_sleep(nid: i32) {
    let (tid, _) = ids();
    let mut awake = 0;
    if let Some(woke) = KSWAPD_WOKE.get_ptr_mut(nid as u32) {
        // SAFETY: a live array slot.
        let woke = unsafe { &mut *woke };
        if *woke != 0 {
            awake = now().saturating_sub(*woke);
            *woke = 0;
        }
    }
    let entry = current_entry();
    if let Some(c) = counters(entry) {
        add(&mut c.kswapd.sleeps, 1);
        add(&mut c.kswapd.awake_ns, awake);
    }
    emit(
        entry,
        tid,
        KswapdSleepEvent {
            nid: nid as u32,
            _pad: 0,
            awake_ns: awake,
        },
    );
}

#[inline(always)]
fn wakeup_kswapd(nid: i32, order: i32, gfp: u64) {
    let (tid, tgid) = ids();
    let host = is_host(tgid);
    let entry = current_entry();
    if let Some(c) = counters(entry) {
        let kswapd = &mut c.kswapd;
        add(
            if host {
                &mut kswapd.woken_by_host
            } else {
                &mut kswapd.woken_by_others
            },
            1,
        );
    }
    emit(
        entry,
        tid,
        WakeupKswapdEvent {
            nid: nid as u32,
            by_host: host as u32,
            order: order as u64,
            gfp,
        },
    );
}

#[inline(always)]
fn reclaim_begin(kind: u32) {
    let (tid, _) = ids();
    if let Some(s) = state_or_new(tid) {
        s.kinds |= kind;
        if kind == RECLAIM_DIRECT {
            s.direct_start_ns = now();
        } else {
            s.memcg_start_ns = now();
        }
    }
}

#[inline(always)]
fn reclaim_end(kind: u32, reclaimed: u64) {
    let (tid, tgid) = ids();
    let Some(s) = state(tid) else {
        return;
    };
    let start = if kind == RECLAIM_DIRECT {
        core::mem::take(&mut s.direct_start_ns)
    } else {
        core::mem::take(&mut s.memcg_start_ns)
    };
    s.kinds &= !kind;
    forget_if_idle(tid, s);
    if start == 0 {
        return;
    }
    let took = now().saturating_sub(start);
    let host = is_host(tgid);
    let entry = current_entry();
    if let Some(c) = counters(entry) {
        let counts = if kind == RECLAIM_DIRECT {
            &mut c.direct
        } else {
            &mut c.memcg
        };
        if host {
            add(&mut counts.host, 1);
            add(&mut counts.host_ns, took);
            max(&mut counts.host_max_ns, took);
            add(&mut counts.host_pages, reclaimed);
        } else {
            add(&mut counts.others, 1);
            add(&mut counts.others_pages, reclaimed);
        }
    }
    let by_host = host as u64;
    if kind == RECLAIM_DIRECT {
        emit(
            entry,
            tid,
            DirectReclaimEvent {
                reclaimed,
                ns: took,
                by_host,
            },
        );
    } else {
        emit(
            entry,
            tid,
            MemcgReclaimEvent {
                reclaimed,
                ns: took,
                by_host,
            },
        );
    }
}

#[inline(always)]
fn lru_add(counts: &mut LruCounts, scanned: u64, reclaimed: u64) {
    add(&mut counts.calls, 1);
    add(&mut counts.scanned, scanned);
    add(&mut counts.reclaimed, reclaimed);
}

#[inline(always)]
fn lru_shrink(nid: i32, scanned: u64, reclaimed: u64, active: bool, other: u64) {
    let (tid, tgid) = ids();
    let ctx = context_of(state(tid).map(|s| &*s));
    let entry = current_entry();
    if let Some(c) = counters(entry) {
        if let Some(counts) = c.lru.get_mut(ctx) {
            lru_add(counts, scanned, reclaimed);
        }
        if is_host(tgid) {
            lru_add(&mut c.lru_host, scanned, reclaimed);
        }
    }
    let (ctx, nid) = (ctx as u32, nid as u32);
    if active {
        emit(
            entry,
            tid,
            LruActiveEvent {
                ctx,
                nid,
                taken: scanned,
                deactivated: other,
            },
        );
    } else {
        emit(
            entry,
            tid,
            LruInactiveEvent {
                ctx,
                nid,
                scanned,
                reclaimed,
            },
        );
    }
}

#[inline(always)]
fn slab_start() {
    let (tid, _) = ids();
    if let Some(s) = state_or_new(tid) {
        s.slab_start_ns = now();
    }
}

#[inline(always)]
fn slab_end(freed: i32) {
    let (tid, tgid) = ids();
    let Some(s) = state(tid) else {
        return;
    };
    let start = core::mem::take(&mut s.slab_start_ns);
    forget_if_idle(tid, s);
    if start == 0 {
        return;
    }
    let took = now().saturating_sub(start);
    let freed = if freed > 0 { freed as u64 } else { 0 };
    let entry = current_entry();
    if let Some(c) = counters(entry) {
        let slab = &mut c.slab;
        add(&mut slab.shrinks, 1);
        add(&mut slab.freed, freed);
        add(&mut slab.ns, took);
        if is_host(tgid) {
            add(&mut slab.host_shrinks, 1);
            add(&mut slab.host_ns, took);
        }
    }
    emit(entry, tid, ShrinkSlabEvent { freed, ns: took });
}

#[inline(always)]
fn throttled(nid: i32, delayed_us: i32, reason: i32) {
    let (tid, tgid) = ids();
    let delayed = if delayed_us > 0 { delayed_us as u64 } else { 0 };
    let entry = current_entry();
    if let Some(c) = counters(entry) {
        let throttle = &mut c.throttle;
        add(&mut throttle.count, 1);
        add(&mut throttle.us, delayed);
        if is_host(tgid) {
            add(&mut throttle.host_count, 1);
            add(&mut throttle.host_us, delayed);
        }
    }
    emit(
        entry,
        tid,
        ThrottledEvent {
            nid: nid as u32,
            reason: reason as u32,
            delayed_us: delayed,
        },
    );
}

#[inline(always)]
fn shrink_node_start() {
    let (tid, _) = ids();
    if let Some(s) = state_or_new(tid) {
        s.shrink_node_start_ns = now();
    }
}

#[inline(always)]
fn shrink_node_end() {
    let (tid, tgid) = ids();
    let Some(s) = state(tid) else {
        return;
    };
    let start = core::mem::take(&mut s.shrink_node_start_ns);
    let ctx = context_of(Some(s));
    forget_if_idle(tid, s);
    if start == 0 {
        return;
    }
    let took = now().saturating_sub(start);
    let entry = current_entry();
    if let Some(c) = counters(entry) {
        if let Some(counts) = c.shrink_node.get_mut(ctx) {
            add(&mut counts.calls, 1);
            add(&mut counts.ns, took);
        }
        if is_host(tgid) {
            add(&mut c.shrink_node_host.calls, 1);
            add(&mut c.shrink_node_host.ns, took);
        }
    }
    emit(
        entry,
        tid,
        ShrinkNodeEvent {
            ctx: ctx as u32,
            _pad: 0,
            ns: took,
        },
    );
}

// ---- classic tracepoints (vmscan:*) --------------------------------------------------------
// Records: an 8-byte common header, then the fields at the offsets in each event's format
// file (userspace checks those offsets against tracefs before attaching).

/// Reads a field of a classic tracepoint record at a fixed offset.
#[inline(always)]
fn field<T: Copy>(ctx: &TracePointContext, offset: usize) -> T {
    // SAFETY: tracepoint programs read their record directly; the verifier bounds-checks it.
    unsafe { *ctx.as_ptr().cast::<u8>().add(offset).cast::<T>() }
}

#[tracepoint]
pub fn tp_kswapd_wake(ctx: TracePointContext) -> u32 {
    kswapd_wake(field(&ctx, 8), field(&ctx, 16));
    0
}

#[tracepoint]
pub fn tp_kswapd_sleep(ctx: TracePointContext) -> u32 {
    kswapd_sleep(field(&ctx, 8));
    0
}

#[tracepoint]
pub fn tp_wakeup_kswapd(ctx: TracePointContext) -> u32 {
    wakeup_kswapd(field(&ctx, 8), field(&ctx, 16), field(&ctx, 24));
    0
}

#[tracepoint]
pub fn tp_direct_reclaim_begin(_ctx: TracePointContext) -> u32 {
    reclaim_begin(RECLAIM_DIRECT);
    0
}

#[tracepoint]
pub fn tp_direct_reclaim_end(ctx: TracePointContext) -> u32 {
    reclaim_end(RECLAIM_DIRECT, field(&ctx, 8));
    0
}

#[tracepoint]
pub fn tp_memcg_reclaim_begin(_ctx: TracePointContext) -> u32 {
    reclaim_begin(RECLAIM_MEMCG);
    0
}

#[tracepoint]
pub fn tp_memcg_reclaim_end(ctx: TracePointContext) -> u32 {
    reclaim_end(RECLAIM_MEMCG, field(&ctx, 8));
    0
}

#[tracepoint]
pub fn tp_lru_shrink_inactive(ctx: TracePointContext) -> u32 {
    lru_shrink(field(&ctx, 8), field(&ctx, 16), field(&ctx, 24), false, 0);
    0
}

#[tracepoint]
pub fn tp_lru_shrink_active(ctx: TracePointContext) -> u32 {
    // nr_taken @16 counts as scanned; nr_deactivated @32.
    lru_shrink(field(&ctx, 8), field(&ctx, 16), 0, true, field(&ctx, 32));
    0
}

#[tracepoint]
pub fn tp_shrink_slab_start(_ctx: TracePointContext) -> u32 {
    slab_start();
    0
}

#[tracepoint]
pub fn tp_shrink_slab_end(ctx: TracePointContext) -> u32 {
    slab_end(field(&ctx, 48));
    0
}

#[tracepoint]
pub fn tp_throttled(ctx: TracePointContext) -> u32 {
    throttled(field(&ctx, 8), field(&ctx, 16), field(&ctx, 20));
    0
}

// ---- tp_btf (the tracepoints' C arguments) -------------------------------------------------

#[btf_tracepoint(function = "mm_vmscan_kswapd_wake")]
pub fn btf_kswapd_wake(ctx: BtfTracePointContext) -> i32 {
    kswapd_wake(ctx.arg(0), ctx.arg(2));
    0
}

#[btf_tracepoint(function = "mm_vmscan_kswapd_sleep")]
pub fn btf_kswapd_sleep(ctx: BtfTracePointContext) -> i32 {
    kswapd_sleep(ctx.arg(0));
    0
}

#[btf_tracepoint(function = "mm_vmscan_wakeup_kswapd")]
pub fn btf_wakeup_kswapd(ctx: BtfTracePointContext) -> i32 {
    wakeup_kswapd(ctx.arg(0), ctx.arg(2), ctx.arg(3));
    0
}

#[btf_tracepoint(function = "mm_vmscan_direct_reclaim_begin")]
pub fn btf_direct_reclaim_begin(_ctx: BtfTracePointContext) -> i32 {
    reclaim_begin(RECLAIM_DIRECT);
    0
}

#[btf_tracepoint(function = "mm_vmscan_direct_reclaim_end")]
pub fn btf_direct_reclaim_end(ctx: BtfTracePointContext) -> i32 {
    reclaim_end(RECLAIM_DIRECT, ctx.arg(0));
    0
}

#[btf_tracepoint(function = "mm_vmscan_memcg_reclaim_begin")]
pub fn btf_memcg_reclaim_begin(_ctx: BtfTracePointContext) -> i32 {
    reclaim_begin(RECLAIM_MEMCG);
    0
}

#[btf_tracepoint(function = "mm_vmscan_memcg_reclaim_end")]
pub fn btf_memcg_reclaim_end(ctx: BtfTracePointContext) -> i32 {
    reclaim_end(RECLAIM_MEMCG, ctx.arg(0));
    0
}

/// (nid, nr_scanned, nr_reclaimed, stat, priority, file)
#[btf_tracepoint(function = "mm_vmscan_lru_shrink_inactive")]
pub fn btf_lru_shrink_inactive(ctx: BtfTracePointContext) -> i32 {
    lru_shrink(ctx.arg(0), ctx.arg(1), ctx.arg(2), false, 0);
    0
}

/// (nid, nr_taken, nr_active, nr_deactivated, nr_referenced, priority, file)
#[btf_tracepoint(function = "mm_vmscan_lru_shrink_active")]
pub fn btf_lru_shrink_active(ctx: BtfTracePointContext) -> i32 {
    lru_shrink(ctx.arg(0), ctx.arg(1), 0, true, ctx.arg(3));
    0
}

#[btf_tracepoint(function = "mm_shrink_slab_start")]
pub fn btf_shrink_slab_start(_ctx: BtfTracePointContext) -> i32 {
    slab_start();
    0
}

/// (shrinker, nid, freed, unused_scan, new_scan, total_scan)
#[btf_tracepoint(function = "mm_shrink_slab_end")]
pub fn btf_shrink_slab_end(ctx: BtfTracePointContext) -> i32 {
    slab_end(ctx.arg(2));
    0
}

/// (nid, usec_timeout, usec_delayed, reason)
#[btf_tracepoint(function = "mm_vmscan_throttled")]
pub fn btf_throttled(ctx: BtfTracePointContext) -> i32 {
    throttled(ctx.arg(0), ctx.arg(2), ctx.arg(3));
    0
}

// ---- shrink_node: fentry/fexit, or kprobe/kretprobe ----------------------------------------

#[fentry(function = "shrink_node")]
pub fn fentry_shrink_node(_ctx: FEntryContext) -> i32 {
    shrink_node_start();
    0
}

#[fexit(function = "shrink_node")]
pub fn fexit_shrink_node(_ctx: FExitContext) -> i32 {
    shrink_node_end();
    0
}

#[kprobe]
pub fn kprobe_shrink_node(_ctx: ProbeContext) -> u32 {
    shrink_node_start();
    0
}

#[kretprobe]
pub fn kretprobe_shrink_node(_ctx: RetProbeContext) -> u32 {
    shrink_node_end();
    0
}
