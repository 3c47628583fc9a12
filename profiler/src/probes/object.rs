//! The BPF object built by `cargo xtask build-ebpf`, embedded in this binary (see
//! profiler/build.rs for why), and the names of what is inside it.

use anyhow::{Context as _, Result};
use aya::{Ebpf, EbpfLoader};

#[cfg(not(skillprof_no_bpf_object))]
fn object() -> Result<&'static [u8]> {
    static OBJECT: &[u8] = aya::include_bytes_aligned!(env!("SKILLPROF_BPF_OBJECT"));
    Ok(OBJECT)
}

/// profiler/build.rs lets the crate build without the object so that `cargo check` and clippy
/// need no BPF toolchain; such a binary fails here, where the probes would load.
#[cfg(skillprof_no_bpf_object)]
fn object() -> Result<&'static [u8]> {
    anyhow::bail!(
        "the BPF object was not built: run `cargo xtask build-ebpf` (scripts/setup.sh installs its tools)"
    )
}

/// Globals in the object.
const TARGET_TGID: &str = "TARGET_TGID";
const STREAM_EVENTS: &str = "STREAM_EVENTS";
const ATTRIBUTE_SKILLS: &str = "ATTRIBUTE_SKILLS";
const STACKS: &str = "STACKS";
/// Maps in the object.
pub const ENTRY: &str = "ENTRY";
pub const COUNTERS: &str = "COUNTERS";
pub const STOP: &str = "STOP";
pub const RECLAIM: &str = "RECLAIM";
pub const EVENTS: &str = "EVENTS";
pub const BRK_LAST: &str = "BRK_LAST";
pub const SKILLS: &str = "SKILLS";
pub const STACK_TRACES: &str = "STACK_TRACES";
pub const STACK_COUNTS: &str = "STACK_COUNTS";

/// Distinct user stacks the stack map holds with `--stacks` (each up to 127 frames, about 1 KiB
/// of kernel memory): enough for the few thousand stacks a host's faults come from.
const STACK_TRACES_STACKS: u32 = 16384;

/// The ring buffer when events are streamed: 16 MiB holds ~350k events, a second of faults
/// at full speed, while the drain thread catches up. Without streaming it is one page (the
/// programs never write it: the verifier removed that code).
const RING_BYTES_STREAMING: u32 = 16 << 20;
const RING_BYTES_IDLE: u32 = 4096;

/// Loads the object into the kernel (maps created, no program loaded yet) with its filter set
/// to `tgid`, room for `max_entries` entries, and the ring buffer, per-event skill
/// attribution (exact mode, when the host has markers) and stack walks on or off.
///
/// BPF memory is charged to the memory cgroup (kernel >= 5.11); RLIMIT_MEMLOCK is not raised
/// (it cannot be on the machines skillprof runs on).
pub fn load(
    tgid: u32,
    max_entries: u32,
    stream_events: bool,
    skills: bool,
    stacks: bool,
) -> Result<Ebpf> {
    let object = object()?;
    let stream = u32::from(stream_events);
    let (skills, walk) = (u32::from(skills), u32::from(stacks));
    EbpfLoader::new()
        .override_global(TARGET_TGID, &tgid, true)
        .override_global(STREAM_EVENTS, &stream, true)
        .override_global(ATTRIBUTE_SKILLS, &skills, true)
        .override_global(STACKS, &walk, true)
        .map_max_entries(STACK_TRACES, if stacks { STACK_TRACES_STACKS } else { 1 })
        .map_max_entries(COUNTERS, max_entries.max(1))
        .map_max_entries(
            EVENTS,
            if stream_events {
                RING_BYTES_STREAMING
            } else {
                RING_BYTES_IDLE
            },
        )
        .load(object)
        .context("loading the BPF object into the kernel")
}
