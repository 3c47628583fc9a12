//! skillprof's BPF programs. They filter by the target process and aggregate in maps;
//! everything else (what to attach, how to read, what it means) belongs to userspace.
//!
//! Attribution: userspace writes the current entry index into `ENTRY[0]` at each boundary;
//! every program reads it and adds into `COUNTERS[entry]`, a per-CPU array whose value is one
//! `Counters` struct of named counter groups (declared in `skillprof-common`). Why this layout:
//! - per CPU: no atomics and no cache-line contention on the hot paths (faults, syscalls);
//! - one value per entry: userspace reads an entry with one lookup, and a program touches
//!   one map value (one lookup) however many counters it updates;
//! - an array, not a hash: entries are dense (0..plan length), lookups are inlined by the
//!   verifier and can never fail for lack of room; userspace sizes it at load time.
//!
//! Skill attribution (`marks`): where the host marks its work, each fault and syscall of a
//! host thread is also added to the row of the skill and phase the thread works on (read from
//! the thread's mark slot in its TLS), so the rows of an entry sum to its counters.
//!
//! Events in kernel threads (kswapd, LRU shrinking from kswapd) are attributed to the entry
//! current when they happen. Syscalls are counted at their exit, in the entry current then.
//!
//! Each event has programs for several attach mechanisms (fentry/fexit, kprobes, tp_btf,
//! classic tracepoints); userspace attaches one of them per probe and the shared logic lives
//! in plain functions, so the mechanisms count exactly the same things.
#![no_std]
#![no_main]
// `atomic_xadd`: the BPF target has no `AtomicU64::fetch_add`, but LLVM lowers an atomic add
// whose result is unused to BPF_XADD, which every kernel skillprof supports.
#![feature(core_intrinsics)]
#![allow(internal_features)]

mod decommits;
mod exit;
mod faults;
mod floor;
mod marks;
mod pagemap_scan;
mod publish;
mod stacks;
mod syscalls;
mod time;
mod vmscan;

use core::intrinsics::{AtomicOrdering, atomic_xadd};

use aya_ebpf::{
    Global,
    bindings::bpf_pidns_info,
    helpers::{
        bpf_get_current_pid_tgid, bpf_get_current_task_btf, bpf_get_ns_current_pid_tgid,
        bpf_ktime_get_ns,
    },
    macros::map,
    maps::{Array, HashMap, PerCpuArray, RingBuf},
};
use skillprof_common::{
    Counters, Event, EventBody, EventHeader, PublishTimes, ReclaimState, StopState,
};

/// The initial value of every load-time constant: userspace overrides each one at load
/// (`EbpfLoader::override_global`), and the linker may fold an unnamed read-only constant
/// of the same bytes into a named one (a `&0` passed to a map insert once read a constant's
/// overridden value). No constant of the programs' has these bytes.
pub const UNSET: u32 = 0x5e7b_9f1d;

/// The tgid (process id) whose events are counted. A load-time constant set by userspace
/// with `EbpfLoader::override_global`: no map lookup on the hot path.
#[unsafe(no_mangle)]
static TARGET_TGID: Global<u32> = Global::new(UNSET);

/// The PID namespace skillprof runs in (its nsfs device, in the kernel's encoding, and
/// inode), when it is not the initial one, as in a container: then [`ids`] reads each task's
/// ids as that namespace numbers them, the numbers skillprof and its /proc know the host by.
/// 0 (the initial namespace): the kernel's own ids. Load-time constants.
#[unsafe(no_mangle)]
static PIDNS_DEV: Global<u64> = Global::new(UNSET as u64 + 2);
#[unsafe(no_mangle)]
static PIDNS_INO: Global<u64> = Global::new(UNSET as u64 + 3);

/// The tgid [`ids`] gives a task outside skillprof's PID namespace (a kernel thread, another
/// container's process): no process of the namespace has it, so it is never the host.
const OUTSIDE: u32 = u32::MAX;

/// 1 when `--events` streams raw events. A load-time constant, so with streaming off the
/// verifier removes the ring-buffer code from every program (no cost at all).
#[unsafe(no_mangle)]
static STREAM_EVENTS: Global<u32> = Global::new(UNSET);

/// `ENTRY[0]`: the entry index events are attributed to; written by userspace.
#[map]
static ENTRY: Array<u32> = Array::with_max_entries(1, 0);

/// Per CPU, per entry: the counters. Userspace sets the number of entries at load time.
#[map]
static COUNTERS: PerCpuArray<Counters> = PerCpuArray::with_max_entries(1, 0);

/// Per CPU: the instants of the host's latest code publishes (`publish`).
#[map]
static PUBLISHED: PerCpuArray<PublishTimes> = PerCpuArray::with_max_entries(1, 0);

/// The host's shutdown instants (one slot).
#[map]
static STOP: Array<StopState> = Array::with_max_entries(1, 0);

/// Per reclaiming thread, system-wide (key: tid).
#[map]
static RECLAIM: HashMap<u32, ReclaimState> = HashMap::with_max_entries(16384, 0);

/// Raw events for `--events`; userspace sizes it (one page when streaming is off).
#[map]
static EVENTS: RingBuf = RingBuf::with_byte_size(4096, 0);

#[inline(always)]
fn now() -> u64 {
    // SAFETY: a helper without arguments.
    unsafe { bpf_ktime_get_ns() }
}

/// Where the kernel keeps a task's thread id and process id in `struct task_struct` (from
/// its BTF): the scheduler's tracepoints pass tasks other than the current one, and [`ids`]
/// reads the current one's there. Load-time constants; 0 where the BTF did not say.
#[unsafe(no_mangle)]
static TASK_PID: Global<u64> = Global::new(UNSET as u64);
#[unsafe(no_mangle)]
static TASK_TGID: Global<u64> = Global::new(UNSET as u64 + 1);

/// (tid, tgid) of the current task, as skillprof's PID namespace numbers them.
#[inline(always)]
fn ids() -> (u32, u32) {
    if !in_pid_namespace() && TASK_PID.load() != 0 {
        // SAFETY: the current task, typed from BTF: loads at constant offsets of its fields
        // are checked at load time. Two loads where the helper was a call (the page-fault
        // program runs on every fault of the machine).
        return unsafe {
            let task = bpf_get_current_task_btf() as *const u8;
            (
                *(task.add(TASK_PID.load() as usize) as *const u32),
                *(task.add(TASK_TGID.load() as usize) as *const u32),
            )
        };
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    if in_pid_namespace() {
        let ino = PIDNS_INO.load();
        let mut seen = bpf_pidns_info { pid: 0, tgid: 0 };
        let size = core::mem::size_of::<bpf_pidns_info>() as u32;
        // SAFETY: the helper writes `size` bytes into `seen`, a local of that size.
        let found = unsafe { bpf_get_ns_current_pid_tgid(PIDNS_DEV.load(), ino, &mut seen, size) };
        // Outside the namespace the thread keeps its kernel tid: the reclaim programs pair a
        // thread's begin and end by it, and one thread is always read the same way.
        return match found {
            0 => (seen.pid, seen.tgid),
            _ => (pid_tgid as u32, OUTSIDE),
        };
    }
    (pid_tgid as u32, (pid_tgid >> 32) as u32)
}

/// Whether skillprof runs in a PID namespace of its own: `ids` then numbers tasks as it does.
#[inline(always)]
fn in_pid_namespace() -> bool {
    PIDNS_INO.load() != 0
}

#[inline(always)]
fn is_host(tgid: u32) -> bool {
    tgid == TARGET_TGID.load()
}

#[inline(always)]
fn current_entry() -> u32 {
    ENTRY.get(0).copied().unwrap_or(0)
}

/// This CPU's counters of `entry`. `None` only if userspace set an entry beyond the map,
/// which it refuses to do.
#[inline(always)]
fn counters(entry: u32) -> Option<&'static mut Counters> {
    // SAFETY: this CPU's slot of a live map value, valid while the program runs.
    COUNTERS.get_ptr_mut(entry).map(|p| unsafe { &mut *p })
}

/// Adds to a counter with an atomic add (BPF_XADD, no fetch). The counter is per CPU, so
/// there is no contention; the atomic is there because fentry/kprobe programs run with
/// migration, not preemption, disabled: another program run on the same CPU can interleave
/// with a plain read-modify-write and lose an increment, and the counts here must be exact.
#[inline(always)]
fn add(counter: &mut u64, value: u64) {
    // SAFETY: an aligned u64 inside a map value, only ever accessed atomically or by
    // userspace copies.
    unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(counter, value) };
}

/// Adds to a per-CPU counter with a plain add, from a program that runs with preemption off
/// (tp_btf, classic tracepoints) and that nothing interrupting it on its CPU adds to (an
/// interrupt's programs count other fields). Worth a few ns a run on the hottest paths:
/// the user-fault program went from 51 to 48 ns a run by the kernel's count.
#[inline(always)]
fn add_unpreempted(counter: &mut u64, value: u64) {
    *counter += value;
}

/// How a mechanism's program adds to its per-CPU counters: fexit and kprobes run with
/// migration, not preemption, disabled, so another thread's event on the same CPU can
/// interleave with the add, which must be atomic; tp_btf and tracepoint programs run with
/// preemption off, and a plain add is exact.
#[inline(always)]
fn add_by<const PREEMPTIBLE: bool>(counter: &mut u64, value: u64) {
    match PREEMPTIBLE {
        true => add(counter, value),
        false => add_unpreempted(counter, value),
    }
}

#[inline(always)]
fn max(counter: &mut u64, value: u64) {
    if value > *counter {
        *counter = value;
    }
}

#[inline(always)]
fn stop_state() -> Option<&'static mut StopState> {
    // SAFETY: the only slot of a live array map; rare events, a racing write of the same
    // "first seen" instant by two CPUs is harmless.
    STOP.get_ptr_mut(0).map(|p| unsafe { &mut *p })
}

/// Streams one event when `--events` is on; counts it as lost when the ring is full.
#[inline(always)]
fn emit<B: EventBody + 'static>(entry: u32, tid: u32, body: B) {
    if STREAM_EVENTS.load() == 0 {
        return;
    }
    let sent = match EVENTS.reserve::<Event<B>>(0) {
        Some(mut slot) => {
            slot.write(Event {
                header: EventHeader {
                    ts_ns: now(),
                    entry,
                    tid,
                    kind: B::KIND as u32,
                    _pad: 0,
                },
                body,
            });
            slot.submit(0);
            true
        }
        None => false,
    };
    if let Some(counters) = counters(entry) {
        let events = &mut counters.events;
        add(
            if sent {
                &mut events.sent
            } else {
                &mut events.lost
            },
            1,
        );
    }
}

/// The pt_regs layout of x86_64 (the only architecture skillprof's syscall numbers are for).
#[repr(C)]
struct PtRegs {
    r15: u64,
    r14: u64,
    r13: u64,
    r12: u64,
    bp: u64,
    bx: u64,
    r11: u64,
    r10: u64,
    r9: u64,
    r8: u64,
    ax: u64,
    cx: u64,
    dx: u64,
    si: u64,
    di: u64,
    orig_ax: u64,
}

#[unsafe(no_mangle)]
#[unsafe(link_section = "license")]
pub static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";

#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // The verifier rejects any reachable panic path, so this is never run.
    loop {}
}
