//! Code the host published: wasmtime's `CodeMemory::publish`, in the host's own binary, makes
//! a compiled module's code executable, once per module compiled or loaded from a cache. A
//! uprobe on it, scoped to the host's process, counts each and keeps its instant, so that a
//! compile is seen on any wasmtime host, markers or not, and the requests in flight at that
//! instant name the skills compiled. Hit a few times per compile: nothing per request.

use aya_ebpf::{macros::uprobe, programs::ProbeContext};
use skillprof_common::PUBLISH_TIMES;

use crate::{PUBLISHED, add, counters, current_entry, ids, is_host, now};

#[uprobe]
pub fn uprobe_publish(_ctx: ProbeContext) -> u32 {
    let (_, tgid) = ids();
    if !is_host(tgid) {
        return 0;
    }
    if let Some(counters) = counters(current_entry()) {
        add(&mut counters.publish.calls, 1);
    }
    // SAFETY: this CPU's slot of a live map value; uprobe programs run with preemption
    // disabled, so no other run on this CPU interleaves.
    if let Some(times) = PUBLISHED.get_ptr_mut(0).map(|p| unsafe { &mut *p }) {
        let slot = (times.seen as usize) & (PUBLISH_TIMES - 1);
        times.at[slot] = now();
        times.seen += 1;
    }
    0
}
