//! The pooling allocator giving freed slots back: wasmtime's `decommit_pages(&[iovec])`, in
//! the host's own binary. With more than one range (its decommit batch size above 1) wasmtime
//! hands them to the kernel in one process_madvise(2) call. A uprobe on the function, scoped
//! to the host's process and hit once per batch, so nothing runs for another process, or for
//! the host's other calls, and it is on in every mode.

use aya_ebpf::{helpers::bpf_probe_read_user, macros::uprobe, programs::ProbeContext};

use crate::{add, counters, current_entry, ids, is_host};

/// Ranges of one batch whose lengths are read; beyond, the ranges are counted unread.
const READ_RANGES: usize = 128;

/// `decommit_pages(iov: &[iovec])`: the slice's pointer and length in the first two
/// argument registers. An iovec is `{ iov_base, iov_len }`, 16 bytes.
#[uprobe]
pub fn uprobe_decommit(ctx: ProbeContext) -> u32 {
    let (_, tgid) = ids();
    if !is_host(tgid) {
        return 0;
    }
    let iov: u64 = ctx.arg(0).unwrap_or(0);
    let ranges: u64 = ctx.arg(1).unwrap_or(0);
    // One range goes to madvise(2), which the exact mode counts.
    if ranges < 2 {
        return 0;
    }
    let mut bytes = 0u64;
    for i in 0..READ_RANGES {
        if i as u64 >= ranges {
            break;
        }
        let len = (iov + i as u64 * 16 + 8) as *const u64;
        // SAFETY: a checked read of the host's memory.
        bytes += unsafe { bpf_probe_read_user(len) }.unwrap_or(0);
    }
    if let Some(counters) = counters(current_entry()) {
        let batches = &mut counters.process_madvise;
        add(&mut batches.calls, 1);
        add(&mut batches.ranges, ranges);
        add(&mut batches.bytes, bytes);
        add(
            &mut batches.unread,
            ranges.saturating_sub(READ_RANGES as u64),
        );
    }
    0
}
