//! `--self-cost`'s floor: a program that does nothing, attached only while BPF stats are on.
//! The kernel times each run of a program from one clock read to the next, so every program's
//! count includes the call into it and a clock read; this one's count is only that, the floor
//! under every other's, measured in the same run. On the scheduler's wakeups: frequent enough
//! for a steady figure, and rare beside the host's page faults, where its own runs (a clock
//! read more each) took 2% of the host's CPU in a default lab run.

use aya_ebpf::{macros::btf_tracepoint, programs::BtfTracePointContext};

#[btf_tracepoint(function = "sched_wakeup")]
pub fn btf_count_floor(_ctx: BtfTracePointContext) -> i32 {
    0
}
