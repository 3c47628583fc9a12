//! The pooling allocator scanning a memory before reusing it in place: wasmtime issues
//! ioctl(PAGEMAP_SCAN) through rustix's `_ioctl(fd, request, arg)`, a function in the host's
//! own binary. A uprobe on it, scoped to the host's process, sees every rustix ioctl of the
//! host (few: wasmtime makes no other) and counts the scans by their request number, so
//! nothing runs for another process and it is on in every mode.

use aya_ebpf::{helpers::bpf_probe_read_user, macros::uprobe, programs::ProbeContext};
use skillprof_common::{PAGEMAP_SCAN, PM_SCAN_ARG_END, PM_SCAN_ARG_START};

use crate::{add, counters, current_entry, ids, is_host};

#[uprobe]
pub fn uprobe_pagemap_scan(ctx: ProbeContext) -> u32 {
    let (_, tgid) = ids();
    if !is_host(tgid) {
        return 0;
    }
    let request = ctx.arg::<u64>(1).unwrap_or(0) as u32;
    if request != PAGEMAP_SCAN {
        return 0;
    }
    let arg: u64 = ctx.arg(2).unwrap_or(0);
    // SAFETY: checked reads of the host's memory.
    let (start, end) = unsafe {
        (
            bpf_probe_read_user((arg + PM_SCAN_ARG_START) as *const u64).unwrap_or(0),
            bpf_probe_read_user((arg + PM_SCAN_ARG_END) as *const u64).unwrap_or(0),
        )
    };
    if let Some(counters) = counters(current_entry()) {
        let scans = &mut counters.pagemap_scan;
        add(&mut scans.calls, 1);
        add(&mut scans.bytes, end.saturating_sub(start));
    }
    0
}
