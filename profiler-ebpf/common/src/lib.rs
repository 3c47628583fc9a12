#![no_std]
//! `#[repr(C)]` types and numbering shared by the BPF programs and skillprof userspace.
//!
//! Both sides read the same bytes, so every type here is `#[repr(C)]`, `Copy`, and made of
//! fixed-width integers only (no padding the two compilers could disagree on). The BPF side
//! only adds numbers into the slots named here; what they mean is decided in userspace
//! (`profiler/src/probes/metrics.rs`).

// ---------------------------------------------------------------------------------------------
// Syscalls
// ---------------------------------------------------------------------------------------------

/// The address-space syscalls skillprof counts, in slot order.
pub const SYSCALL_NAMES: [&str; SYSCALLS] =
    ["mmap", "munmap", "mremap", "mprotect", "madvise", "brk"];
pub const SYSCALLS: usize = 6;
pub const SYS_MMAP: usize = 0;
pub const SYS_MUNMAP: usize = 1;
pub const SYS_MREMAP: usize = 2;
pub const SYS_MPROTECT: usize = 3;
pub const SYS_MADVISE: usize = 4;
pub const SYS_BRK: usize = 5;

/// Syscall numbers (x86_64; userspace asserts they match `libc::SYS_*` at compile time).
pub const NR_MMAP: u32 = 9;
pub const NR_MPROTECT: u32 = 10;
pub const NR_MUNMAP: u32 = 11;
pub const NR_BRK: u32 = 12;
pub const NR_MREMAP: u32 = 25;
pub const NR_MADVISE: u32 = 28;
pub const NR_EXIT_GROUP: u32 = 231;

/// Which slot a syscall number counts in, if any.
#[inline(always)]
pub const fn syscall_kind(nr: u32) -> Option<usize> {
    match nr {
        NR_MMAP => Some(SYS_MMAP),
        NR_MUNMAP => Some(SYS_MUNMAP),
        NR_MREMAP => Some(SYS_MREMAP),
        NR_MPROTECT => Some(SYS_MPROTECT),
        NR_MADVISE => Some(SYS_MADVISE),
        NR_BRK => Some(SYS_BRK),
        _ => None,
    }
}

/// Per syscall: calls completed (enter and exit both seen).
pub const SC_CALLS: usize = 0;
/// Per syscall: bytes (mmap/munmap/mprotect/madvise: the length argument; mremap: the new
/// length; brk: how far the break moved, either way).
pub const SC_BYTES: usize = 1;
/// Per syscall: calls that failed (a return in -4095..=-1; brk: the break did not move to
/// the requested address).
pub const SC_ERRORS: usize = 2;
/// Per syscall: enter→exit time, summed over calls, ns.
pub const SC_LAT_NS: usize = 3;
/// Per syscall: the longest enter→exit time, ns (a maximum, not a sum).
pub const SC_LAT_MAX_NS: usize = 4;
const SC_STRIDE: usize = 5;

/// The counter slot of `field` (an `SC_*`) for syscall slot `kind` (a `SYS_*`).
#[inline(always)]
pub const fn sc(kind: usize, field: usize) -> usize {
    C_SYSCALL_BASE + kind * SC_STRIDE + field
}

// ---------------------------------------------------------------------------------------------
// madvise advice classes
// ---------------------------------------------------------------------------------------------

pub const ADVICE_NAMES: [&str; ADVICES] = [
    "dontneed",
    "free",
    "remove",
    "willneed",
    "hugepage",
    "nohugepage",
    "cold",
    "pageout",
    "populate",
    "collapse",
    "other",
];
pub const ADVICES: usize = 11;

/// The advice class of a `madvise` advice value (Linux UAPI numbers, the same on every
/// architecture skillprof supports).
#[inline(always)]
pub const fn advice_class(advice: u64) -> usize {
    match advice {
        4 => 0,       // MADV_DONTNEED
        8 => 1,       // MADV_FREE
        9 => 2,       // MADV_REMOVE
        3 => 3,       // MADV_WILLNEED
        14 => 4,      // MADV_HUGEPAGE
        15 => 5,      // MADV_NOHUGEPAGE
        20 => 6,      // MADV_COLD
        21 => 7,      // MADV_PAGEOUT
        22 | 23 => 8, // MADV_POPULATE_READ / _WRITE
        25 => 9,      // MADV_COLLAPSE
        _ => 10,
    }
}

/// Counter slot of madvise calls with advice class `class`.
#[inline(always)]
pub const fn madv_calls(class: usize) -> usize {
    C_MADV_BASE + class * 2
}
/// Counter slot of madvise bytes with advice class `class`.
#[inline(always)]
pub const fn madv_bytes(class: usize) -> usize {
    C_MADV_BASE + class * 2 + 1
}

// ---------------------------------------------------------------------------------------------
// Reclaim contexts
// ---------------------------------------------------------------------------------------------

/// Who is reclaiming when LRU lists are shrunk: kswapd, a task in direct reclaim, a task in
/// memcg (limit) reclaim, or anything else (proactive reclaim, node reclaim).
pub const CTX_NAMES: [&str; CONTEXTS] = ["kswapd", "direct", "memcg", "other"];
pub const CONTEXTS: usize = 4;
pub const CTX_KSWAPD: usize = 0;
pub const CTX_DIRECT: usize = 1;
pub const CTX_MEMCG: usize = 2;
pub const CTX_OTHER: usize = 3;

/// Bits of [`ReclaimState::kinds`].
pub const RECLAIM_KSWAPD: u32 = 1;
pub const RECLAIM_DIRECT: u32 = 2;
pub const RECLAIM_MEMCG: u32 = 4;

/// Per thread (key: tid), system-wide: which reclaim the thread is in, and since when.
/// kswapd threads are marked once (userspace seeds them; `kswapd_wake` marks them too).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReclaimState {
    pub kinds: u32,
    pub _pad: u32,
    pub direct_start_ns: u64,
    pub memcg_start_ns: u64,
    pub slab_start_ns: u64,
    pub shrink_node_start_ns: u64,
}

// ---------------------------------------------------------------------------------------------
// The per-entry counters
// ---------------------------------------------------------------------------------------------

const C_SYSCALL_BASE: usize = 0;
const C_MADV_BASE: usize = C_SYSCALL_BASE + SYSCALLS * SC_STRIDE; // 30

/// User-mode page faults of the host.
pub const C_FAULTS: usize = C_MADV_BASE + ADVICES * 2; // 52
/// ... of which writes.
pub const C_FAULTS_WRITE: usize = C_FAULTS + 1;
/// ... of which major (only the fexit `handle_mm_fault` mechanism sees this).
pub const C_FAULTS_MAJOR: usize = C_FAULTS + 2;

/// kswapd woke up (system-wide).
pub const C_KSWAPD_WAKE: usize = C_FAULTS + 3;
/// kswapd went back to sleep (system-wide).
pub const C_KSWAPD_SLEEP: usize = C_KSWAPD_WAKE + 1;
/// Time kswapd was awake, ns, counted when it goes to sleep.
pub const C_KSWAPD_AWAKE_NS: usize = C_KSWAPD_WAKE + 2;
/// Allocations that asked kswapd to wake, in the host's context.
pub const C_KSWAPD_WOKEN_BY_HOST: usize = C_KSWAPD_WAKE + 3;
/// ... in any other context.
pub const C_KSWAPD_WOKEN_BY_OTHERS: usize = C_KSWAPD_WAKE + 4;

/// Direct reclaim in the host's context: count, total ns, max ns, pages reclaimed.
pub const C_DIRECT_HOST: usize = C_KSWAPD_WAKE + 5;
pub const C_DIRECT_HOST_NS: usize = C_DIRECT_HOST + 1;
pub const C_DIRECT_HOST_MAX_NS: usize = C_DIRECT_HOST + 2;
pub const C_DIRECT_HOST_RECLAIMED: usize = C_DIRECT_HOST + 3;
/// Direct reclaim by other processes: count, pages reclaimed.
pub const C_DIRECT_OTHERS: usize = C_DIRECT_HOST + 4;
pub const C_DIRECT_OTHERS_RECLAIMED: usize = C_DIRECT_HOST + 5;

/// Memcg (limit) reclaim in the host's context, and by others: same layout as direct.
pub const C_MEMCG_HOST: usize = C_DIRECT_HOST + 6;
pub const C_MEMCG_HOST_NS: usize = C_MEMCG_HOST + 1;
pub const C_MEMCG_HOST_MAX_NS: usize = C_MEMCG_HOST + 2;
pub const C_MEMCG_HOST_RECLAIMED: usize = C_MEMCG_HOST + 3;
pub const C_MEMCG_OTHERS: usize = C_MEMCG_HOST + 4;
pub const C_MEMCG_OTHERS_RECLAIMED: usize = C_MEMCG_HOST + 5;

/// LRU shrinking (`shrink_{inactive,active}_list`) per reclaim context: calls, pages
/// scanned (inactive: scanned; active: taken), pages reclaimed (inactive only).
const C_LRU_BASE: usize = C_MEMCG_HOST + 6;
pub const LRU_CALLS: usize = 0;
pub const LRU_SCANNED: usize = 1;
pub const LRU_RECLAIMED: usize = 2;
#[inline(always)]
pub const fn lru(ctx: usize, field: usize) -> usize {
    C_LRU_BASE + ctx * 3 + field
}
/// The same three, for LRU shrinking in the host's own context (direct or memcg reclaim).
#[inline(always)]
pub const fn lru_host(field: usize) -> usize {
    C_LRU_BASE + CONTEXTS * 3 + field
}

/// `shrink_node` (fentry/fexit or kprobes) per reclaim context: calls, ns.
const C_NODE_BASE: usize = C_LRU_BASE + CONTEXTS * 3 + 3;
#[inline(always)]
pub const fn shrink_node_calls(ctx: usize) -> usize {
    C_NODE_BASE + ctx * 2
}
#[inline(always)]
pub const fn shrink_node_ns(ctx: usize) -> usize {
    C_NODE_BASE + ctx * 2 + 1
}
/// `shrink_node` in the host's context: calls, ns.
pub const C_SHRINK_NODE_HOST: usize = C_NODE_BASE + CONTEXTS * 2;
pub const C_SHRINK_NODE_HOST_NS: usize = C_SHRINK_NODE_HOST + 1;

/// Slab shrinkers run (system-wide): calls, objects freed, ns; and in the host's context.
pub const C_SLAB: usize = C_SHRINK_NODE_HOST + 2;
pub const C_SLAB_FREED: usize = C_SLAB + 1;
pub const C_SLAB_NS: usize = C_SLAB + 2;
pub const C_SLAB_HOST: usize = C_SLAB + 3;
pub const C_SLAB_HOST_NS: usize = C_SLAB + 4;

/// Reclaim throttling (`mm_vmscan_throttled`), system-wide and in the host's context:
/// count and microseconds delayed.
pub const C_THROTTLED: usize = C_SLAB + 5;
pub const C_THROTTLED_US: usize = C_THROTTLED + 1;
pub const C_THROTTLED_HOST: usize = C_THROTTLED + 2;
pub const C_THROTTLED_HOST_US: usize = C_THROTTLED + 3;

/// `--events`: events that did not fit in the ring buffer.
pub const C_EVENTS_LOST: usize = C_THROTTLED + 4;
/// `--events`: events written to the ring buffer.
pub const C_EVENTS_SENT: usize = C_EVENTS_LOST + 1;

/// Slots in use; [`Counters`] has room for [`COUNTERS`].
pub const COUNTERS_USED: usize = C_EVENTS_SENT + 1;
pub const COUNTERS: usize = 128;
const _: () = assert!(COUNTERS_USED <= COUNTERS);

/// Whether slot `i` holds a maximum (combined over CPUs with `max`) rather than a sum.
pub const fn is_max_slot(i: usize) -> bool {
    let mut kind = 0;
    while kind < SYSCALLS {
        if i == sc(kind, SC_LAT_MAX_NS) {
            return true;
        }
        kind += 1;
    }
    i == C_DIRECT_HOST_MAX_NS || i == C_MEMCG_HOST_MAX_NS
}

/// Everything attributed to one entry on one CPU: the value type of the `COUNTERS` per-CPU
/// array, indexed by entry. Slots are named by the `C_*` constants and functions above.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counters {
    pub c: [u64; COUNTERS],
}

impl Default for Counters {
    fn default() -> Self {
        Self { c: [0; COUNTERS] }
    }
}

// ---------------------------------------------------------------------------------------------
// Per-thread syscall state
// ---------------------------------------------------------------------------------------------

/// Saved at syscall entry, per thread of the host (key: tid), consumed at exit.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SysEnter {
    pub ts_ns: u64,
    pub args: [u64; 3],
    /// The syscall number.
    pub nr: u32,
    /// The entry current at syscall entry: the call is attributed to it.
    pub entry: u32,
}

// ---------------------------------------------------------------------------------------------
// Shutdown timeline
// ---------------------------------------------------------------------------------------------

/// Kernel-side instants of the host's shutdown (bpf_ktime_get_ns = CLOCK_MONOTONIC, ns;
/// 0 = not seen). One slot of the `STOP` array, written by the exit programs.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StopState {
    /// First SIGTERM or SIGKILL dequeued by a host thread (`signal:signal_deliver`).
    pub signal_ns: u64,
    /// First `exit_group` entered.
    pub exit_group_ns: u64,
    /// First and last host thread in `sched_process_exit`, and how many.
    pub first_exit_ns: u64,
    pub last_exit_ns: u64,
    pub exits: u64,
    /// `exit_mmap` of the host's mm, from fentry/fexit (or kprobes).
    pub exit_mmap_start_ns: u64,
    pub exit_mmap_end_ns: u64,
    /// First and last `kmem:rss_stat` change of the host's mm during the teardown.
    pub rss_first_ns: u64,
    pub rss_last_ns: u64,
    pub rss_events: u64,
    /// Last RSS counter values (bytes, per `MM_*` member) before the teardown, and during it.
    pub rss_before: [u64; 4],
    pub rss_after: [u64; 4],
    /// The exit notification to the parent (SIGCHLD generated by a host thread).
    pub notify_ns: u64,
    /// munmap calls and bytes between the signal and exit_group: the graceful drain.
    pub drain_munmap_calls: u64,
    pub drain_munmap_bytes: u64,
    /// The signal whose delivery `signal_ns` records.
    pub signal: u32,
    /// `rss_stat`'s id of the host's mm (learned from its own faults).
    pub mm_id: u32,
    /// Bit per member: `rss_after[member]` was written.
    pub rss_after_seen: u32,
    /// 1 once `mm_id` is known.
    pub mm_id_known: u32,
}

// ---------------------------------------------------------------------------------------------
// Streamed events (`--events`)
// ---------------------------------------------------------------------------------------------

/// One raw event in the `EVENTS` ring buffer. What `aux`, `a`, `b` and `c` hold depends on
/// `kind` (see the `EV_*` constants).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Event {
    pub ts_ns: u64,
    pub entry: u32,
    pub tid: u32,
    pub kind: u32,
    pub aux: u32,
    pub a: u64,
    pub b: u64,
    pub c: u64,
}

/// aux: syscall slot (madvise: | advice << 8); a: length/address argument; b: return value; c: latency ns.
pub const EV_SYSCALL: u32 = 1;
/// a: address; b: x86 error code (bit 1: write).
pub const EV_FAULT: u32 = 2;
/// a: address; b: fault flags; c: vm_fault_t result (fexit `handle_mm_fault`).
pub const EV_FAULT_FEXIT: u32 = 3;
/// aux: node; a: order.
pub const EV_KSWAPD_WAKE: u32 = 4;
/// aux: node; a: ns awake.
pub const EV_KSWAPD_SLEEP: u32 = 5;
/// aux: node; a: order; b: gfp flags; c: 1 if the host asked.
pub const EV_WAKEUP_KSWAPD: u32 = 6;
/// a: pages reclaimed; b: ns; c: 1 if the host.
pub const EV_DIRECT_RECLAIM: u32 = 7;
/// a: pages reclaimed; b: ns; c: 1 if the host.
pub const EV_MEMCG_RECLAIM: u32 = 8;
/// aux: reclaim context; a: scanned; b: reclaimed; c: node.
pub const EV_LRU_INACTIVE: u32 = 9;
/// aux: reclaim context; a: taken; b: deactivated; c: node.
pub const EV_LRU_ACTIVE: u32 = 10;
/// aux: reclaim context; a: ns.
pub const EV_SHRINK_NODE: u32 = 11;
/// a: objects freed; b: ns.
pub const EV_SHRINK_SLAB: u32 = 12;
/// aux: node; a: usec delayed; b: reason bits.
pub const EV_THROTTLED: u32 = 13;
/// a: signal.
pub const EV_SIGNAL_DELIVER: u32 = 14;
pub const EV_EXIT_GROUP: u32 = 15;
pub const EV_PROCESS_EXIT: u32 = 16;
/// aux: 0 start, 1 end.
pub const EV_EXIT_MMAP: u32 = 17;
/// aux: member; a: size in bytes; b: 1 if the change was in the mm's own task.
pub const EV_RSS_TEARDOWN: u32 = 18;
/// a: signal sent to the parent.
pub const EV_NOTIFY_PARENT: u32 = 19;

#[cfg(feature = "user")]
mod pod {
    // SAFETY (all): `#[repr(C)]`, only u32/u64 fields and arrays of them laid out without
    // padding, and every bit pattern is valid.
    unsafe impl aya::Pod for super::Counters {}
    unsafe impl aya::Pod for super::SysEnter {}
    unsafe impl aya::Pod for super::StopState {}
    unsafe impl aya::Pod for super::Event {}
    unsafe impl aya::Pod for super::ReclaimState {}
}
