#![no_std]
//! `#[repr(C)]` types and numbering shared by the BPF programs and skillprof userspace.
//!
//! Both sides read the same bytes, so every type here is `#[repr(C)]`, `Copy`, and made of
//! fixed-width integers only (no padding the two compilers could disagree on). The BPF side
//! only adds numbers into the fields named here; their column names, units and documentation
//! are decided once in userspace (`profiler/src/producers/probes/metrics.rs`).

// ---------------------------------------------------------------------------------------------
// Syscalls
// ---------------------------------------------------------------------------------------------

/// The address-space syscalls skillprof counts, in `SYS_*` order.
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
/// The host's ledger reads its thread's counters with getrusage(2) at each mark, just after
/// storing the mark in the thread's mark slot: the exact mode reads the slot there.
pub const NR_GETRUSAGE: u32 = 98;
/// mmap's and mprotect's `prot` bit that makes pages executable (`libc::PROT_EXEC`).
pub const PROT_EXEC: u64 = 4;

/// The errnos counted apart (Linux UAPI numbers, the same on every architecture skillprof
/// supports).
pub const ENOMEM: i64 = 12;
pub const EINVAL: i64 = 22;
pub const EAGAIN: i64 = 11;

/// Which `SYS_*` kind a syscall number counts as, if any.
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

/// Merges the per-CPU copies of a counter group (userspace reads one copy per CPU).
pub trait Combine {
    fn combine(&mut self, other: &Self);
}

impl<T: Combine, const N: usize> Combine for [T; N] {
    fn combine(&mut self, other: &Self) {
        for (mine, theirs) in self.iter_mut().zip(other.iter()) {
            mine.combine(theirs);
        }
    }
}

/// Declares a counter group: a `#[repr(C)]` struct of u64 fields, each merged across CPUs by
/// `sum` or `max`. A new counter is one line here; userspace names and documents it once
/// (`profiler/src/producers/probes/metrics.rs`).
macro_rules! counters {
    ($(#[$meta:meta])* pub struct $name:ident { $($(#[$doc:meta])* $field:ident: $op:ident,)* }) => {
        $(#[$meta])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        #[cfg_attr(feature = "user", derive(serde::Serialize, serde::Deserialize))]
        // A counter added later reads as 0 from records written before it.
        #[cfg_attr(feature = "user", serde(default))]
        pub struct $name {
            $($(#[$doc])* pub $field: u64,)*
        }

        impl Combine for $name {
            fn combine(&mut self, other: &Self) {
                $(self.$field = counters!(@$op self.$field, other.$field);)*
            }
        }
    };
    (@sum $a:expr, $b:expr) => { $a.wrapping_add($b) };
    (@max $a:expr, $b:expr) => { if $b > $a { $b } else { $a } };
}

counters! {
    /// One address-space syscall kind of the host.
    pub struct SyscallCounts {
        /// Calls completed (enter and exit both seen).
        calls: sum,
        /// mmap/munmap/mprotect/madvise: the length argument; mremap: the new length; brk: how
        /// far the break moved, either way.
        bytes: sum,
        /// Calls that failed (a return in -4095..=-1; brk: the break did not move as asked).
        errors: sum,
        /// ... of which with ENOMEM: out of memory, or of mappings (vm.max_map_count).
        enomem: sum,
        /// ... with EINVAL.
        einval: sum,
        /// ... with EAGAIN (locked memory, RLIMIT_MEMLOCK).
        eagain: sum,
        /// Enter→exit time, summed over calls.
        lat_ns: sum,
        /// The longest enter→exit time.
        lat_max_ns: max,
    }
}

counters! {
    /// Calls and their bytes: madvise calls of one advice class, a skill's calls of one
    /// syscall kind.
    pub struct CallCounts {
        calls: sum,
        bytes: sum,
    }
}

counters! {
    /// Page faults of the host.
    pub struct FaultCounts {
        /// Taken in user mode.
        user: sum,
        /// ... of which writes.
        user_write: sum,
        /// ... of which major (only the fexit `handle_mm_fault` mechanism sees this).
        major: sum,
        /// Taken in kernel mode on the host's user addresses (copy_to_user into a fresh buffer).
        kernel: sum,
        /// Taken for get_user_pages (MAP_POPULATE, mlock, MADV_POPULATE_*, O_DIRECT I/O): no
        /// exception, so only the fexit `handle_mm_fault` mechanism sees them. The kernel
        /// counts them in minflt all the same.
        gup: sum,
    }
}

counters! {
    /// kswapd, system-wide.
    pub struct KswapdCounts {
        wakes: sum,
        sleeps: sum,
        /// Time kswapd was awake, counted when it goes to sleep.
        awake_ns: sum,
        /// Allocations that asked kswapd to wake, in the host's context.
        woken_by_host: sum,
        /// ... in any other context.
        woken_by_others: sum,
    }
}

counters! {
    /// Direct or memcg (limit) reclaim: in the host's context, and by other processes.
    pub struct ReclaimCounts {
        host: sum,
        host_ns: sum,
        host_max_ns: max,
        host_pages: sum,
        others: sum,
        others_pages: sum,
    }
}

counters! {
    /// LRU shrinking (`shrink_{inactive,active}_list`) in one reclaim context.
    pub struct LruCounts {
        calls: sum,
        /// Inactive: pages scanned; active: pages taken.
        scanned: sum,
        /// Inactive only.
        reclaimed: sum,
    }
}

counters! {
    /// `shrink_node` (fentry/fexit or kprobes) in one reclaim context.
    pub struct ShrinkNodeCounts {
        calls: sum,
        ns: sum,
    }
}

counters! {
    /// The host's mmap and mprotect calls that made memory executable (PROT_EXEC) and
    /// succeeded: code being published, which any wasmtime host does for each module it
    /// compiles or loads.
    pub struct ExecCounts {
        calls: sum,
        /// Their lengths.
        bytes: sum,
    }
}

counters! {
    /// Slab shrinkers, system-wide and in the host's context.
    pub struct SlabCounts {
        shrinks: sum,
        /// Objects freed.
        freed: sum,
        ns: sum,
        host_shrinks: sum,
        host_ns: sum,
    }
}

counters! {
    /// Reclaim throttling (`mm_vmscan_throttled`), system-wide and in the host's context.
    pub struct ThrottleCounts {
        count: sum,
        /// Microseconds delayed.
        us: sum,
        host_count: sum,
        host_us: sum,
    }
}

counters! {
    /// The pooling allocator's batched decommits: wasmtime's `decommit_pages` with more than
    /// one range, which it gives back with one process_madvise(2) call.
    pub struct ProcessMadviseCounts {
        /// Batches.
        calls: sum,
        /// Address ranges they named (process_madvise's `vlen`).
        ranges: sum,
        /// Bytes they named, the sum of the ranges' lengths.
        bytes: sum,
        /// Ranges beyond the first 128 of a batch, whose lengths were not read.
        unread: sum,
    }
}

counters! {
    /// The pooling allocator's scans of its memories before reusing them in place: wasmtime's
    /// ioctl(PAGEMAP_SCAN) on /proc/self/pagemap, which finds the pages the last instance
    /// wrote (its `pagemap_scan` setting, with pages kept resident).
    pub struct PagemapScanCounts {
        /// ioctl(PAGEMAP_SCAN) calls.
        calls: sum,
        /// Bytes of address space they were asked to walk (`end - start`).
        bytes: sum,
    }
}

counters! {
    /// Code the host published: wasmtime's `CodeMemory::publish`, which makes one compiled
    /// module's code executable, once per module compiled or loaded from a cache.
    pub struct PublishCounts {
        calls: sum,
    }
}

/// Publish instants kept per CPU: a compile publishes a few modules, and more than this many on
/// one CPU within one entry keeps the count exact and the latest instants.
pub const PUBLISH_TIMES: usize = 32;
const _: () = assert!(PUBLISH_TIMES.is_power_of_two(), "the ring index is masked");

/// Per CPU: the instants (CLOCK_MONOTONIC ns) of its latest publishes, in a ring, and how many
/// it has seen; userspace reads the ones it has not read yet at each entry's end.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PublishTimes {
    pub seen: u64,
    pub at: [u64; PUBLISH_TIMES],
}

/// `PAGEMAP_SCAN`: `_IOWR('f', 16, struct pm_scan_arg)`, the struct being 96 bytes.
pub const PAGEMAP_SCAN: u32 = 0xc060_6610;
/// Byte offsets of `start` and `end` in `struct pm_scan_arg` (after `size` and `flags`).
pub const PM_SCAN_ARG_START: u64 = 16;
pub const PM_SCAN_ARG_END: u64 = 24;

counters! {
    /// The host's markers (skill attribution).
    pub struct MarkCounts {
        /// Marks the host's ledger counted (each began or ended a stretch of a skill's phase);
        /// filled from the ledger by userspace.
        hits: sum,
        /// Marks for skills beyond the ledger's rows, and (calls and exact modes) memory calls
        /// counted in the unattributed row because the skill table was full or another
        /// thread's mark held the thread's place (threads whose ids share their low 16 bits).
        overflow: sum,
    }
}

counters! {
    /// `--stacks`: user stacks walked at the host's faults and address-space syscalls.
    pub struct StackCounts {
        /// Stacks counted.
        sampled: sum,
        /// Events whose stack was not kept (the stack map full, or a hash collision).
        lost: sum,
    }
}

counters! {
    /// `--events`: the ring buffer.
    pub struct EventCounts {
        /// Events written.
        sent: sum,
        /// Events that did not fit.
        lost: sum,
    }
}

/// Everything attributed to one entry on one CPU: the value type of the `COUNTERS` per-CPU
/// array, indexed by entry. Arrays are indexed by the `SYS_*`, advice class and `CTX_*`
/// numbers above.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(serde::Serialize, serde::Deserialize))]
// A group added later reads as zeros from records written before it.
#[cfg_attr(feature = "user", serde(default))]
pub struct Counters {
    pub syscalls: [SyscallCounts; SYSCALLS],
    pub madvise: [CallCounts; ADVICES],
    pub exec: ExecCounts,
    pub faults: FaultCounts,
    pub kswapd: KswapdCounts,
    pub direct: ReclaimCounts,
    pub memcg: ReclaimCounts,
    pub lru: [LruCounts; CONTEXTS],
    /// LRU shrinking in the host's own context (direct or memcg reclaim).
    pub lru_host: LruCounts,
    pub shrink_node: [ShrinkNodeCounts; CONTEXTS],
    pub shrink_node_host: ShrinkNodeCounts,
    pub slab: SlabCounts,
    pub throttle: ThrottleCounts,
    pub marks: MarkCounts,
    pub stacks: StackCounts,
    pub events: EventCounts,
    pub process_madvise: ProcessMadviseCounts,
    pub pagemap_scan: PagemapScanCounts,
    pub publish: PublishCounts,
    pub time: TimeCounts,
}

impl Counters {
    /// LRU shrinking over every reclaim context (the host's own is a subset of these).
    pub fn lru_total(&self) -> LruCounts {
        let mut total = LruCounts::default();
        for ctx in &self.lru {
            total.combine(ctx);
        }
        total
    }
}

impl Combine for Counters {
    fn combine(&mut self, other: &Self) {
        self.syscalls.combine(&other.syscalls);
        self.madvise.combine(&other.madvise);
        self.exec.combine(&other.exec);
        self.faults.combine(&other.faults);
        self.kswapd.combine(&other.kswapd);
        self.direct.combine(&other.direct);
        self.memcg.combine(&other.memcg);
        self.lru.combine(&other.lru);
        self.lru_host.combine(&other.lru_host);
        self.shrink_node.combine(&other.shrink_node);
        self.shrink_node_host.combine(&other.shrink_node_host);
        self.slab.combine(&other.slab);
        self.throttle.combine(&other.throttle);
        self.marks.combine(&other.marks);
        self.stacks.combine(&other.stacks);
        self.events.combine(&other.events);
        self.process_madvise.combine(&other.process_madvise);
        self.pagemap_scan.combine(&other.pagemap_scan);
        self.publish.combine(&other.publish);
        self.time.combine(&other.time);
    }
}

// ---------------------------------------------------------------------------------------------
// Per-thread syscall state
// ---------------------------------------------------------------------------------------------

/// With `--syscall-latency`: saved at syscall entry, per thread of the host (key: tid),
/// consumed at exit.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SysEnter {
    pub ts_ns: u64,
    /// The syscall number.
    pub nr: u32,
    pub _pad: u32,
}

#[cfg(any(feature = "user", feature = "marker"))]
pub mod ledger;

#[cfg(any(feature = "user", feature = "marker"))]
pub mod host_metrics;

// ---------------------------------------------------------------------------------------------
// Skill attribution: the host's markers
// ---------------------------------------------------------------------------------------------

/// The marker function a host calls, `extern "C"`, at each mark (see [`ledger::mark`]):
/// `skillhost_mark(request: u64, skill: u32, phase: u32)`. `phase` is a `PHASE_*` number,
/// with [`PHASE_FIRST`] on the first stretch of a phase instance (one compile, one
/// instantiation, one call), and [`PHASE_IDLE`] when the thread stops working for it. A
/// uprobe follows it only to stream each mark (`--events`): the default mode reads the host's
/// ledger at the boundaries, and the exact mode's programs read the thread's mark slot.
pub const MARKER_SYMBOL: &str = "skillhost_mark";

pub const PHASE_IDLE: u32 = 0;
pub const PHASE_COMPILE: u32 = 1;
pub const PHASE_INSTANTIATE: u32 = 2;
pub const PHASE_CALL: u32 = 3;
/// Dropping a request's store: on demand the instance's memories are unmapped; pooled, its
/// slots are reset (zeroed in place or decommitted) and given back to the pool.
pub const PHASE_RESET: u32 = 4;
/// Phase names, by number: work outside any phase is the host's own.
pub const PHASE_NAMES: [&str; PHASES] = ["host", "compile", "instantiate", "call", "reset"];
pub const PHASES: usize = 5;
/// Or'ed into the phase of a phase instance's first stretch: counts the instance once.
pub const PHASE_FIRST: u32 = 0x100;
/// Or'ed into the phase of a helper thread's stretch (a compile's worker threads): its events
/// count for the phase, its time does not (the thread that runs the phase already counts it).
pub const PHASE_HELPER: u32 = 0x200;

/// The skill id of work no marker covers: the runtime, the allocator, background threads.
pub const HOST_SKILL: u32 = u32::MAX;
/// Bytes of a skill name kept (the host's names are at most 64).
pub const SKILL_NAME_LEN: usize = 64;

/// The marker: kept by name, so that a uprobe finds it in the symbol table, and a call the
/// compiler cannot see into. With nothing attached, a mark is a call and a return.
///
/// On x86_64 it begins with a 5-byte nop: Linux 6.18 and later turn a uprobe on such a nop
/// into a call to a trampoline (`arch_uprobe_optimize`) instead of a breakpoint trap, which
/// is most of what a mark costs the host.
#[cfg(all(feature = "marker", target_arch = "x86_64"))]
#[unsafe(no_mangle)]
#[unsafe(naked)]
pub extern "C" fn skillhost_mark(_request: u64, _skill: u32, _phase: u32) {
    // nopl 0x0(%rax,%rax,1), then return: the arguments stay in their registers for the probe.
    core::arch::naked_asm!(".byte 0x0f, 0x1f, 0x44, 0x00, 0x00", "ret")
}

/// The marker elsewhere: never inlined, its arguments kept alive.
#[cfg(all(feature = "marker", not(target_arch = "x86_64")))]
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn skillhost_mark(request: u64, skill: u32, phase: u32) {
    core::hint::black_box((request, skill, phase));
}

/// Key of the per-skill counters: an entry, a skill, a phase.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SkillKey {
    pub entry: u32,
    pub skill: u32,
    pub phase: u32,
    pub _pad: u32,
}

counters! {
    /// Time and instances of one phase of one skill.
    pub struct PhaseCounts {
        /// Phase instances begun (compiles, instantiations, calls).
        runs: sum,
        /// Time in the phase: a compile from start to end, an instantiation or call the sum
        /// of its polls (time on a thread, not time waiting to be polled).
        ns: sum,
        /// An instantiation's or call's time between its polls: pending (until something
        /// woke it) and queued (woken, until its next poll).
        pending_ns: sum,
        queued_ns: sum,
    }
}

counters! {
    /// What the kernel counted for the threads while they worked on one skill's phase: the
    /// change of each thread's own counters from one of its marks to the next, as the host's
    /// ledger kept them (no program runs per fault or per mark).
    pub struct TaskCounts {
        /// Minor faults (task_struct min_flt).
        minflt: sum,
        /// Major faults (maj_flt).
        majflt: sum,
        /// CPU time on the threads (se.sum_exec_runtime).
        cpu_ns: sum,
    }
}

/// Why the host failed a request of a skill. Each reason belongs to the phase the request
/// failed in ([`FAILURE_PHASES`]); the host counts them in its ledger.
pub const FAILURES: usize = 7;
pub const FAILED_UNLOADABLE: usize = 0;
pub const FAILED_NO_SLOT: usize = 1;
pub const FAILED_INPUT: usize = 2;
pub const FAILED_ERROR: usize = 3;
pub const FAILED_TRAP: usize = 4;
pub const FAILED_OUTPUT: usize = 5;
pub const FAILED_DEADLINE: usize = 6;
pub const FAILURE_NAMES: [&str; FAILURES] = [
    "unloadable",
    "no_slot",
    "input",
    "error",
    "trap",
    "output",
    "deadline",
];
/// The phase of each reason: the module would not compile or load; the pooling allocator had
/// no free slot for the instance; then the call's: the skill rejected its input, reported an
/// error, trapped, answered something not JSON, or ran past the deadline.
pub const FAILURE_PHASES: [u32; FAILURES] = [
    PHASE_COMPILE,
    PHASE_INSTANTIATE,
    PHASE_CALL,
    PHASE_CALL,
    PHASE_CALL,
    PHASE_CALL,
    PHASE_CALL,
];

/// A skill phase's failed requests, by reason (an index of [`FAILURE_NAMES`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(serde::Serialize, serde::Deserialize))]
pub struct FailureCounts {
    pub by_reason: [u64; FAILURES],
}

impl Combine for FailureCounts {
    fn combine(&mut self, other: &Self) {
        for (mine, theirs) in self.by_reason.iter_mut().zip(other.by_reason) {
            *mine = mine.wrapping_add(theirs);
        }
    }
}

/// What one skill's phase did in one entry. In the `SKILLS` map (exact mode, per CPU) the
/// programs count `syscalls`: every call the entry's [`Counters`] count is counted in
/// exactly one row (the [`HOST_SKILL`] row takes the unmarked ones), so they sum to the
/// entry. `phase`, `task` (the faults and CPU by skill) and `failed` come from the host's
/// ledger, in every mode.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(serde::Serialize, serde::Deserialize))]
// Records from before `task` read it as 0; their per-skill `faults` (exact mode until the
// programs stopped counting faults by skill) are left unread.
#[cfg_attr(feature = "user", serde(default))]
pub struct SkillCounters {
    pub phase: PhaseCounts,
    pub syscalls: [CallCounts; SYSCALLS],
    /// From the threads' own counters, in every mode.
    pub task: TaskCounts,
    /// The requests the host failed in the phase, from its ledger, in every mode.
    pub failed: FailureCounts,
}

impl Combine for SkillCounters {
    fn combine(&mut self, other: &Self) {
        self.task.combine(&other.task);
        self.phase.combine(&other.phase);
        self.syscalls.combine(&other.syscalls);
        self.failed.combine(&other.failed);
    }
}

/// Buckets of the requests' latency: bucket `i` holds the requests answered in under
/// [`latency_bound_ns`]`(i)` (and at least the bucket below's bound), the last any longer.
/// Powers of two from 16 µs (a warm Rust skill answers in about 200 µs) to 69 s (a Python
/// skill's first request compiles for tens of seconds).
pub const LATENCY_BUCKETS: usize = 24;
const LATENCY_FIRST_SHIFT: u32 = 14;

/// The upper bound of latency bucket `bucket`, in ns (`u64::MAX` for the last).
pub const fn latency_bound_ns(bucket: usize) -> u64 {
    match bucket + 1 >= LATENCY_BUCKETS {
        true => u64::MAX,
        false => (1 << LATENCY_FIRST_SHIFT) << bucket,
    }
}

/// The bucket of a request answered in `ns`.
pub const fn latency_bucket(ns: u64) -> usize {
    let bits = (64 - (ns >> LATENCY_FIRST_SHIFT).leading_zeros()) as usize;
    match bits < LATENCY_BUCKETS {
        true => bits,
        false => LATENCY_BUCKETS - 1,
    }
}

/// A skill's requests answered, by latency (the host's time from taking a request to its
/// answer), from its ledger: a histogram, so that percentiles over any window are the
/// difference of two readings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(serde::Serialize, serde::Deserialize))]
pub struct Latency {
    pub buckets: [u64; LATENCY_BUCKETS],
    /// The latencies' sum.
    pub ns: u64,
}

impl Latency {
    /// Requests answered.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }
}

impl Combine for Latency {
    fn combine(&mut self, other: &Self) {
        for (mine, theirs) in self.buckets.iter_mut().zip(other.buckets) {
            *mine = mine.wrapping_add(theirs);
        }
        self.ns = self.ns.wrapping_add(other.ns);
    }
}

// ---------------------------------------------------------------------------------------------
// User stacks (`--stacks`)
// ---------------------------------------------------------------------------------------------

/// What a stack was walked for.
pub const STACK_FAULT: u32 = 0;
pub const STACK_SYSCALL: u32 = 1;

/// Key of the stack counts: an entry, the skill the thread worked for ([`HOST_SKILL`] if
/// none), the kind of event, and the stack's id in the stack-trace map.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StackKey {
    pub entry: u32,
    pub skill: u32,
    pub kind: u32,
    pub stack: u32,
}

// ---------------------------------------------------------------------------------------------
// Where the host's time goes: CPU samples and the time its threads spend off a CPU
// ---------------------------------------------------------------------------------------------

/// What a thread was doing for the time a [`TimeKey`] counts: on a CPU (a sample of the
/// profile clock), or off one, and then in which scheduler state.
pub const TIME_ON_CPU: u32 = 0;
/// Off a CPU but runnable: preempted, or woken and not yet running (waiting for a CPU).
pub const TIME_RUNNABLE: u32 = 1;
/// Asleep and wakeable (TASK_INTERRUPTIBLE): a futex, epoll, a socket, a timer.
pub const TIME_SLEEPING: u32 = 2;
/// Asleep and not wakeable by a signal (TASK_UNINTERRUPTIBLE): a page fault's I/O, mmap_lock,
/// a disk wait.
pub const TIME_BLOCKED: u32 = 3;
pub const TIME_STATES: usize = 4;
pub const TIME_STATE_NAMES: [&str; TIME_STATES] = ["on_cpu", "runnable", "sleeping", "blocked"];

/// A stack id that is not one: no stack of that kind (a sample in user mode has no kernel
/// stack), or a walk that failed (counted in [`TimeCounts::stacks_lost`]).
pub const NO_STACK: i32 = -1;

/// Key of the time counts: an entry, the skill and phase the thread worked on ([`HOST_SKILL`]
/// and [`PHASE_IDLE`] if none), its state (`TIME_*`), and its user and kernel stacks' ids in
/// the time stack map, or a kernel stack's in the wait stack map ([`WAIT_STACK_ID`] set;
/// [`NO_STACK`] where there is none).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TimeKey {
    pub entry: u32,
    pub skill: u32,
    pub phase: u32,
    pub state: u32,
    pub user_stack: i32,
    pub kernel_stack: i32,
    /// 1: waits shorter than the walk threshold whose stack was taken, each with a chance of
    /// its length over the threshold ([`OFF_CPU_WAITS`]); 0 otherwise.
    pub sampled: u32,
}

/// The switch programs' ways with stacks (a load-time constant): none, every wait's user and
/// kernel stacks as the thread leaves its CPU, or the kernel stack of the waits worth it,
/// taken as the thread comes back ([`OFF_CPU_WAITS`]).
pub const OFF_CPU_NO_STACKS: u32 = 0;
pub const OFF_CPU_EVERY_STACK: u32 = 1;
/// A wait at least the threshold long gets its kernel stack, walked when the thread is
/// switched back in (bpf_get_task_stack: it is still the stack it slept on); a shorter one
/// gets it with a chance of its length over the threshold, so each kind of wait's share of
/// the short waits' time can be estimated without bias while walks stay at most one per
/// threshold of a thread's time asleep. Runnable time needs no stack (it is a wait for a
/// CPU), and no user stack is walked: another task's cannot be.
pub const OFF_CPU_WAITS: u32 = 2;

/// Set in a [`TimeKey::kernel_stack`] that names a wait stack map entry, not a stack map id
/// (those are below the stack map's size, far below this bit).
pub const WAIT_STACK_ID: i32 = 1 << 30;

/// Frames kept of a wait's kernel stack, innermost first: a wait's cause is within its
/// innermost frames, and the syscall or fault that led to it within a few dozen.
pub const WAIT_STACK_DEPTH: usize = 48;

/// A wait's kernel stack: its return addresses, innermost first, zero after the last.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitStack {
    pub ips: [u64; WAIT_STACK_DEPTH],
}

/// What a [`TimeKey`] counted: CPU samples (each one period of the profile clock) or off-CPU
/// intervals, and their time.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimeValue {
    pub count: u64,
    pub ns: u64,
}

/// A host thread off a CPU, from its switch out until it runs again: per thread (key: tid).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OffCpu {
    /// When it was switched out, and when it was woken (0: not yet; only where the wakeup
    /// program runs).
    pub since_ns: u64,
    pub woken_ns: u64,
    /// Its `sched_info.run_delay` as it left: the kernel's sum of its waits for a CPU, which
    /// grows by a wait only when the wait ends (or the task moves to another CPU's queue).
    pub run_delay_ns: u64,
    pub entry: u32,
    pub skill: u32,
    pub phase: u32,
    /// `TIME_RUNNABLE`, `TIME_SLEEPING` or `TIME_BLOCKED` as it left the CPU.
    pub state: u32,
    pub user_stack: i32,
    pub kernel_stack: i32,
}

/// One CPU sample in time, for the timeline of a step (`skillprof slo`): when, which thread,
/// for which skill and phase, and the address it was interrupted at (in the kernel when
/// `kernel` is 1).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimeSample {
    pub ts_ns: u64,
    pub ip: u64,
    pub tid: u32,
    pub skill: u32,
    pub phase: u32,
    pub kernel: u32,
}

counters! {
    /// The profile: CPU samples of the host's threads and their time off a CPU.
    pub struct TimeCounts {
        /// CPU samples that landed on a host thread.
        samples: sum,
        /// Times a host thread left a CPU.
        switches_out: sum,
        /// Samples or intervals counted without a stack they should have had (the stack map
        /// full, or a hash collision in it).
        stacks_lost: sum,
        /// Samples or intervals not counted at all (the time map full).
        lost: sum,
        /// Samples not put on the timeline (its ring full).
        timeline_lost: sum,
        /// Waits whose kernel stack was walked (`OFF_CPU_WAITS`): the part of the switch
        /// programs' cost that grows with the time the host's threads sleep.
        walks: sum,
    }
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

/// What a streamed event's body is: each kind has its own `#[repr(C)]` body type below.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    Syscall = 1,
    UserFault = 2,
    HandledFault = 3,
    KswapdWake = 4,
    KswapdSleep = 5,
    WakeupKswapd = 6,
    DirectReclaim = 7,
    MemcgReclaim = 8,
    LruInactive = 9,
    LruActive = 10,
    ShrinkNode = 11,
    ShrinkSlab = 12,
    Throttled = 13,
    SignalDeliver = 14,
    ExitGroup = 15,
    ProcessExit = 16,
    ExitMmap = 17,
    RssTeardown = 18,
    NotifyParent = 19,
    KernelFault = 20,
    Mark = 21,
}

impl EventKind {
    const ALL: [EventKind; 21] = [
        Self::Syscall,
        Self::UserFault,
        Self::HandledFault,
        Self::KswapdWake,
        Self::KswapdSleep,
        Self::WakeupKswapd,
        Self::DirectReclaim,
        Self::MemcgReclaim,
        Self::LruInactive,
        Self::LruActive,
        Self::ShrinkNode,
        Self::ShrinkSlab,
        Self::Throttled,
        Self::SignalDeliver,
        Self::ExitGroup,
        Self::ProcessExit,
        Self::ExitMmap,
        Self::RssTeardown,
        Self::NotifyParent,
        Self::KernelFault,
        Self::Mark,
    ];

    /// The kind a header's tag names (the tag crosses from the kernel as a plain u32, so an
    /// unknown value is possible and must not become an invalid enum).
    pub fn from_tag(tag: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| *kind as u32 == tag)
    }
}

/// The start of every event in the `EVENTS` ring buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventHeader {
    /// bpf_ktime_get_ns (CLOCK_MONOTONIC).
    pub ts_ns: u64,
    /// The entry the event is attributed to.
    pub entry: u32,
    pub tid: u32,
    /// An [`EventKind`], which names the body that follows.
    pub kind: u32,
    pub _pad: u32,
}

/// One event as written to the ring: the header, then the body of its kind.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Event<B> {
    pub header: EventHeader,
    pub body: B,
}

/// A body type, and the one kind it is sent as.
pub trait EventBody: Copy {
    const KIND: EventKind;
}

/// Declares event bodies: `#[repr(C)]` structs of fixed-width fields, each tied to its kind.
macro_rules! event_bodies {
    ($($(#[$meta:meta])* $kind:ident => pub struct $name:ident { $($(#[$doc:meta])* $field:ident: $ty:ty,)* })*) => {
        $(
            $(#[$meta])*
            #[repr(C)]
            #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
            pub struct $name {
                $($(#[$doc])* pub $field: $ty,)*
            }

            impl EventBody for $name {
                const KIND: EventKind = EventKind::$kind;
            }

            #[cfg(feature = "user")]
            // SAFETY: `#[repr(C)]` fixed-width integers laid out without padding, and every
            // bit pattern is valid.
            unsafe impl aya::Pod for $name {}
        )*
    };
}

event_bodies! {
    /// An address-space syscall of the host returned.
    Syscall => pub struct SyscallEvent {
        /// A `SYS_*` kind.
        syscall: u32,
        /// madvise's advice (other syscalls: 0).
        advice: u32,
        /// The length argument (mremap: the new length; brk: the requested break).
        arg: u64,
        ret: i64,
        lat_ns: u64,
    }
    /// A user-mode fault (exception tracepoints).
    UserFault => pub struct UserFaultEvent {
        address: u64,
        /// The x86 error code (bit 1: write).
        error_code: u64,
    }
    /// A fault whose handling finished (fexit `handle_mm_fault`).
    HandledFault => pub struct HandledFaultEvent {
        address: u64,
        /// `FAULT_FLAG_*` (bit 0: write).
        flags: u64,
        /// The `vm_fault_t` result (bit 2: major).
        result: u64,
    }
    /// A kernel-mode fault on a user address of the host.
    KernelFault => pub struct KernelFaultEvent {
        address: u64,
        /// 1 if a write.
        write: u64,
    }
    KswapdWake => pub struct KswapdWakeEvent {
        nid: u32,
        _pad: u32,
        order: u64,
    }
    KswapdSleep => pub struct KswapdSleepEvent {
        nid: u32,
        _pad: u32,
        awake_ns: u64,
    }
    /// An allocation asked kswapd to wake.
    WakeupKswapd => pub struct WakeupKswapdEvent {
        nid: u32,
        /// 1 if the host asked.
        by_host: u32,
        order: u64,
        gfp: u64,
    }
    DirectReclaim => pub struct DirectReclaimEvent {
        reclaimed: u64,
        ns: u64,
        /// 1 if in the host's context.
        by_host: u64,
    }
    MemcgReclaim => pub struct MemcgReclaimEvent {
        reclaimed: u64,
        ns: u64,
        by_host: u64,
    }
    LruInactive => pub struct LruInactiveEvent {
        /// A `CTX_*` reclaim context.
        ctx: u32,
        nid: u32,
        scanned: u64,
        reclaimed: u64,
    }
    LruActive => pub struct LruActiveEvent {
        ctx: u32,
        nid: u32,
        taken: u64,
        deactivated: u64,
    }
    ShrinkNode => pub struct ShrinkNodeEvent {
        ctx: u32,
        _pad: u32,
        ns: u64,
    }
    ShrinkSlab => pub struct ShrinkSlabEvent {
        /// Objects freed.
        freed: u64,
        ns: u64,
    }
    Throttled => pub struct ThrottledEvent {
        nid: u32,
        /// Reason bits.
        reason: u32,
        delayed_us: u64,
    }
    /// A host thread dequeued SIGTERM or SIGKILL.
    SignalDeliver => pub struct SignalDeliverEvent {
        signal: u64,
    }
    ExitGroup => pub struct ExitGroupEvent {
        code: u64,
    }
    /// A host thread exited.
    ProcessExit => pub struct ProcessExitEvent {}
    ExitMmap => pub struct ExitMmapEvent {
        /// 0 at the start of the teardown, 1 at its end.
        end: u64,
    }
    /// An RSS counter of the host's mm changed during the teardown.
    RssTeardown => pub struct RssTeardownEvent {
        /// The `MM_*` counter.
        member: u32,
        /// 1 if the change was in the mm's own task.
        own_task: u32,
        bytes: u64,
    }
    /// A host thread sent its parent the exit notification.
    NotifyParent => pub struct NotifyParentEvent {
        signal: u64,
    }
    /// A host thread began (or with `PHASE_IDLE`, ended) a stretch of work for a skill.
    Mark => pub struct MarkEvent {
        request: u64,
        skill: u32,
        /// As passed to the marker, [`PHASE_FIRST`] included.
        phase: u32,
    }
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY (all): `#[repr(C)]`, only u32/u64 fields and arrays of them laid out without
    // padding, and every bit pattern is valid.
    unsafe impl aya::Pod for super::Counters {}
    unsafe impl aya::Pod for super::SysEnter {}
    unsafe impl aya::Pod for super::StopState {}
    unsafe impl aya::Pod for super::EventHeader {}
    unsafe impl aya::Pod for super::ReclaimState {}
    unsafe impl aya::Pod for super::SkillKey {}
    unsafe impl aya::Pod for super::SkillCounters {}
    unsafe impl aya::Pod for super::StackKey {}
    unsafe impl aya::Pod for super::PublishTimes {}
    unsafe impl aya::Pod for super::TimeKey {}
    unsafe impl aya::Pod for super::TimeValue {}
    unsafe impl aya::Pod for super::OffCpu {}
    unsafe impl aya::Pod for super::TimeSample {}
    unsafe impl aya::Pod for super::WaitStack {}
}
