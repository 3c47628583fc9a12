//! What the host asks of the kernel through glibc's `syscall()`: wasmtime issues
//! process_madvise(2) that way when it decommits a batch of freed pool slots in one call. A
//! uprobe and a uretprobe on glibc's function, attached for the host's process only, so
//! nothing runs for any other process and they are on in every mode.

use aya_ebpf::{
    macros::{map, uprobe, uretprobe},
    maps::LruHashMap,
    programs::{ProbeContext, RetProbeContext},
};

use crate::{add, counters, current_entry, ids, is_host};

/// x86_64's number of process_madvise(2).
const SYS_PROCESS_MADVISE: u64 = 440;

/// Per host thread (key: tid) inside a process_madvise: the ranges it named, until it
/// returns. LRU, so a thread that never returns (killed mid-call) ages out.
#[map]
static PENDING: LruHashMap<u32, u64> = LruHashMap::with_max_entries(4096, 0);

/// `syscall(long number, ...)`: process_madvise's pidfd, iovec, vlen, advice and flags
/// follow the number.
#[uprobe]
pub fn uprobe_syscall(ctx: ProbeContext) -> u32 {
    let (tid, tgid) = ids();
    if !is_host(tgid) || ctx.arg::<u64>(0) != Some(SYS_PROCESS_MADVISE) {
        return 0;
    }
    let vlen: u64 = ctx.arg(3).unwrap_or(0);
    let _ = PENDING.insert(&tid, &vlen, 0);
    0
}

/// glibc returns the call's result, or -1 with errno set.
#[uretprobe]
pub fn uretprobe_syscall(ctx: RetProbeContext) -> u32 {
    let (tid, tgid) = ids();
    if !is_host(tgid) {
        return 0;
    }
    // SAFETY: a plain copy out of a live map value.
    let Some(vlen) = (unsafe { PENDING.get(&tid) }).copied() else {
        return 0;
    };
    let _ = PENDING.remove(&tid);
    let result: i64 = ctx.ret();
    if let Some(counters) = counters(current_entry()) {
        let calls = &mut counters.process_madvise;
        add(&mut calls.calls, 1);
        add(&mut calls.ranges, vlen);
        if result >= 0 {
            add(&mut calls.bytes, result as u64);
        } else {
            add(&mut calls.errors, 1);
        }
    }
    0
}
