//! The BPF object built by `cargo xtask build-ebpf`, embedded in this binary (see
//! profiler/build.rs for why), and the names of what is inside it.

use anyhow::{Context as _, Result};
use aya::{Btf, Ebpf, EbpfLoader, programs::BtfTracePoint};

use super::task_layout;

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
const PIDNS_DEV: &str = "PIDNS_DEV";
const PIDNS_INO: &str = "PIDNS_INO";
const STREAM_EVENTS: &str = "STREAM_EVENTS";
const TASK_FSBASE: &str = "TASK_FSBASE";
const MARK_SLOT: &str = "MARK_SLOT";
const MARK_SLOT_IN_CALL: &str = "MARK_SLOT_IN_CALL";
const ATTRIBUTE_CALLS: &str = "ATTRIBUTE_CALLS";
const TASK_PID: &str = "TASK_PID";
const TASK_TGID: &str = "TASK_TGID";
const OFF_CPU_STACKS: &str = "OFF_CPU_STACKS";
const WAIT_WALK_NS: &str = "WAIT_WALK_NS";
const WAIT_WALK_IDLE_NS: &str = "WAIT_WALK_IDLE_NS";
const TASK_LAST_QUEUED: &str = "TASK_LAST_QUEUED";
const TASK_RUN_DELAY: &str = "TASK_RUN_DELAY";
const TASK_CFS_RQ: &str = "TASK_CFS_RQ";
const CFS_RQ_RQ: &str = "CFS_RQ_RQ";
const RQ_CLOCK: &str = "RQ_CLOCK";
pub const WAIT_STACKS: &str = "WAIT_STACKS";
const TIMELINE: &str = "TIMELINE";
const SYSCALL_LATENCY: &str = "SYSCALL_LATENCY";
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
pub const TIME_STACKS: &str = "TIME_STACKS";
pub const TIME: &str = "TIME";
pub const ENTRY_BEGAN: &str = "ENTRY_BEGAN";
pub const TIME_SAMPLES: &str = "TIME_SAMPLES";

/// Distinct user stacks the stack map holds with `--stacks` (each up to 127 frames, about 1 KiB
/// of kernel memory): enough for the few thousand stacks a host's faults come from.
const STACK_TRACES_STACKS: u32 = 16384;
/// Buckets of the time profile's stack map, user and kernel stacks alike, cleared as each
/// entry (or watch window) is read. A stack whose hash lands in a bucket another stack holds
/// is lost (counted in `time_stacks_lost`): a Python skill's compile (2,900 samples at 97 Hz,
/// nearly all of them distinct stacks, and 4,000 switches) lost 16% of its stacks with 16,384
/// buckets and 3% with 65,536 (`skillprof run cmds/time_reference.cmds`, 2026-11-28). Each
/// bucket holds up to 127 frames: 68 MiB of kernel memory, charged to skillprof's cgroup.
const TIME_STACKS_STACKS: u32 = 65536;
/// The timeline's ring: 40 bytes a sample, 200 samples a second on two CPUs at 97 Hz; a
/// megabyte holds two minutes of them, more than a step lasts between drains.
const TIME_SAMPLES_BYTES: u32 = 1 << 20;

/// The ring buffer when events are streamed: 16 MiB holds ~350k events, a second of faults
/// at full speed, while the drain thread catches up. Without streaming it is one page (the
/// programs never write it: the verifier removed that code).
const RING_BYTES_STREAMING: u32 = 16 << 20;
const RING_BYTES_IDLE: u32 = 4096;

/// Where the programs find the skill of the current thread of the host.
#[derive(Clone, Copy, Debug)]
pub struct MarkSlots {
    /// The offset of `thread.fsbase` in the kernel's `struct task_struct`.
    pub task_fsbase: u64,
    /// The host's mark slot's distance from a thread's FS base.
    pub mark_slot: u64,
    /// The host's marks pass the slot in their getrusage call too.
    pub in_call: bool,
}

/// What the time profile's programs need.
#[derive(Clone, Copy, Debug)]
pub struct TimeSettings {
    /// Which stacks the switch programs take (`skillprof_common::OFF_CPU_*`).
    pub off_cpu_stacks: u32,
    /// With `OFF_CPU_WAITS`: the time asleep from which each wait's stack is walked (ns),
    /// inside a skill's work and in a host that does not mark its work; and in no skill's
    /// work of a host that does.
    pub wait_walk_ns: u64,
    pub wait_walk_idle_ns: u64,
    /// The scheduler's own accounting of a wait for a CPU, where the kernel's BTF has it;
    /// `None`: the wakeup program stamps the wakeups.
    pub sched_info: Option<task_layout::SchedInfo>,
    /// Put each CPU sample on the timeline too.
    pub timeline: bool,
}

/// What the programs are loaded for: load-time constants and map sizes.
pub struct Settings {
    /// The process whose events are counted.
    pub tgid: u32,
    /// Entries the run can have.
    pub max_entries: u32,
    /// Stream every event to the ring buffer (`--events`).
    pub stream_events: bool,
    /// Where each thread's mark slot is, when the host keeps one and a program reads it.
    pub mark_slots: Option<MarkSlots>,
    /// Per-event skill attribution of the memory calls (exact mode, with `mark_slots`).
    pub attribute_calls: bool,
    /// The time profile's programs, when they run.
    pub time: Option<TimeSettings>,
    /// Time each memory call (`--syscall-latency`).
    pub syscall_latency: bool,
    /// Walk the user stack at each fault and memory call (`--stacks`).
    pub stacks: bool,
}

/// Loads the object into the kernel (maps created, no program loaded yet) as `settings` say.
/// Whatever a setting turns off, the verifier removes from every program.
///
/// BPF memory is charged to the memory cgroup (kernel >= 5.11); RLIMIT_MEMLOCK is not raised
/// (it cannot be on the machines skillprof runs on).
pub fn load(settings: &Settings) -> Result<Ebpf> {
    let object = object()?;
    let stream = u32::from(settings.stream_events);
    let (task_fsbase, mark_slot, in_call) = settings.mark_slots.map_or((0, 0, 0), |slots| {
        (slots.task_fsbase, slots.mark_slot, u32::from(slots.in_call))
    });
    let attribute_calls = u32::from(settings.attribute_calls && settings.mark_slots.is_some());
    let (task_pid, task_tgid) = task_layout::ids_offsets().unwrap_or((0, 0));
    let off_cpu_stacks = settings.time.map_or(0, |time| time.off_cpu_stacks);
    let wait_walk_ns = settings.time.map_or(1, |time| time.wait_walk_ns.max(1));
    let wait_walk_idle_ns = settings
        .time
        .map_or(1, |time| time.wait_walk_idle_ns.max(1));
    let sched = settings
        .time
        .and_then(|time| time.sched_info)
        .unwrap_or_default();
    let timeline = settings.time.is_some_and(|time| time.timeline);
    let latency = u32::from(settings.syscall_latency);
    let walk = u32::from(settings.stacks);
    let pid_namespace = pid_namespace()?;
    EbpfLoader::new()
        .override_global(TARGET_TGID, &settings.tgid, true)
        .override_global(PIDNS_DEV, &pid_namespace.0, true)
        .override_global(PIDNS_INO, &pid_namespace.1, true)
        .override_global(STREAM_EVENTS, &stream, true)
        .override_global(TASK_FSBASE, &task_fsbase, true)
        .override_global(MARK_SLOT, &mark_slot, true)
        .override_global(MARK_SLOT_IN_CALL, &in_call, true)
        .override_global(ATTRIBUTE_CALLS, &attribute_calls, true)
        .override_global(TASK_PID, &task_pid, true)
        .override_global(TASK_TGID, &task_tgid, true)
        .override_global(OFF_CPU_STACKS, &off_cpu_stacks, true)
        .override_global(WAIT_WALK_NS, &wait_walk_ns, true)
        .override_global(WAIT_WALK_IDLE_NS, &wait_walk_idle_ns, true)
        .override_global(TASK_LAST_QUEUED, &sched.last_queued, true)
        .override_global(TASK_RUN_DELAY, &sched.run_delay, true)
        .override_global(TASK_CFS_RQ, &sched.cfs_rq, true)
        .override_global(CFS_RQ_RQ, &sched.cfs_rq_rq, true)
        .override_global(RQ_CLOCK, &sched.rq_clock, true)
        .override_global(TIMELINE, &u32::from(timeline), true)
        .override_global(SYSCALL_LATENCY, &latency, true)
        .override_global(STACKS, &walk, true)
        .map_max_entries(
            STACK_TRACES,
            if settings.stacks {
                STACK_TRACES_STACKS
            } else {
                1
            },
        )
        .map_max_entries(
            TIME_STACKS,
            if settings.time.is_some() {
                TIME_STACKS_STACKS
            } else {
                1
            },
        )
        .map_max_entries(
            TIME_SAMPLES,
            if timeline {
                TIME_SAMPLES_BYTES
            } else {
                RING_BYTES_IDLE
            },
        )
        .map_max_entries(COUNTERS, settings.max_entries.max(1))
        .map_max_entries(
            EVENTS,
            if settings.stream_events {
                RING_BYTES_STREAMING
            } else {
                RING_BYTES_IDLE
            },
        )
        .load(object)
        .context("loading the BPF object into the kernel")
}

/// The initial PID namespace's inode (the kernel's PROC_PID_INIT_INO).
const INITIAL_PID_NAMESPACE: u64 = 0xEFFF_FFFC;

/// The PID namespace skillprof runs in, as the programs' PIDNS_DEV and PIDNS_INO take it:
/// (0, 0) in the initial one; else its nsfs device in the kernel's encoding (major << 20 |
/// minor, which a stat's st_dev is not) and its inode.
fn pid_namespace() -> Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let namespace = std::fs::metadata("/proc/self/ns/pid")
        .context("reading /proc/self/ns/pid, the PID namespace skillprof runs in")?;
    if namespace.ino() == INITIAL_PID_NAMESPACE {
        return Ok((0, 0));
    }
    let dev = namespace.dev();
    let kernel_dev = (u64::from(libc::major(dev)) << 20) | u64::from(libc::minor(dev));
    Ok((kernel_dev, namespace.ino()))
}

/// Loads the object's tp_btf program `name` for `tracepoint` and attaches it (for the probes
/// outside the attach plans: the switch programs, and the count's floor).
pub fn attach_tp_btf(ebpf: &mut Ebpf, btf: &Btf, name: &str, tracepoint: &str) -> Result<()> {
    let program: &mut BtfTracePoint = ebpf
        .program_mut(name)
        .with_context(|| format!("the BPF object has no {name}"))?
        .try_into()?;
    program
        .load(tracepoint, btf)
        .with_context(|| format!("loading {name}"))?;
    program
        .attach()
        .with_context(|| format!("attaching tp_btf/{tracepoint}"))?;
    Ok(())
}
