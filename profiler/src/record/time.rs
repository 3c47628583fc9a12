//! Where an entry's time went: the host's threads sampled on their CPUs by a profile clock,
//! and timed off them at the scheduler's switches, each sample and interval by skill, phase,
//! state and stack. [`TimeProfile`] is an entry's whole profile, its stacks named
//! (profile/ENTRY.json; the folded stacks, flamegraphs and pprof files are views of it);
//! [`EntryTime`] is what it came to, in the entry's record (commands.csv's `cpu_*` and
//! `offcpu_*` columns, explain.md's sentences).

use serde::{Deserialize, Serialize};
use skillprof_common::{PHASE_NAMES, PHASES};

use super::field::{Row, fields};
use super::probes::Phase;

/// What a thread was doing for the time a stack counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeState {
    /// On a CPU: a sample of the profile clock.
    OnCpu,
    /// Off a CPU but runnable: preempted, or woken and not running yet.
    Runnable,
    /// Asleep and wakeable: a futex, epoll, a socket, a timer.
    Sleeping,
    /// Asleep and not wakeable by a signal: a page fault's I/O, mmap_lock, a disk.
    Blocked,
}

impl TimeState {
    /// By the programs' `TIME_*` number.
    pub const ALL: [TimeState; 4] = [
        TimeState::OnCpu,
        TimeState::Runnable,
        TimeState::Sleeping,
        TimeState::Blocked,
    ];

    pub fn as_str(self) -> &'static str {
        skillprof_common::TIME_STATE_NAMES[self as usize]
    }
}

/// Why a thread was off its CPU, from its state and its kernel stack as it left.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Wait {
    /// Runnable: waiting for a CPU (preempted, or woken and not yet running).
    Cpu,
    /// A futex: a lock, a condition variable, a parked runtime thread.
    Futex,
    /// epoll, poll or select: an event loop waiting for sockets or timers.
    Epoll,
    /// Inside a socket call (accept, read, write, connect).
    Network,
    /// A page fault waiting (for a page's I/O, or a page being worked on).
    PageFault,
    /// The address space's lock (mmap_lock), held by another thread's mmap, munmap, mprotect
    /// or fault.
    MmapLock,
    /// A timed sleep (nanosleep, clock_nanosleep).
    Sleep,
    /// Other I/O (a file, a pipe, a disk).
    Io,
    /// Anything else, or a kernel stack that did not say.
    Other,
    /// Not a thread's wait but a request's: an instantiation or call between its polls,
    /// pending until something woke it (a timer, I/O, a host call's answer), from the
    /// host's marks.
    Pending,
    /// A request's too: woken, queued until a thread of the host's runtime polled it again.
    Queued,
    /// Stopped by a signal (SIGSTOP, SIGTSTP) or held by a debugger, until SIGCONT. Last, so
    /// that the `by_wait` arrays of older records keep their places.
    Stopped,
}

impl Wait {
    pub const ALL: [Wait; 12] = [
        Wait::Cpu,
        Wait::Futex,
        Wait::Epoll,
        Wait::Network,
        Wait::PageFault,
        Wait::MmapLock,
        Wait::Sleep,
        Wait::Io,
        Wait::Other,
        Wait::Pending,
        Wait::Queued,
        Wait::Stopped,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Wait::Cpu => "cpu",
            Wait::Futex => "futex",
            Wait::Epoll => "epoll",
            Wait::Network => "network",
            Wait::PageFault => "page_fault",
            Wait::MmapLock => "mmap_lock",
            Wait::Sleep => "sleep",
            Wait::Io => "io",
            Wait::Other => "other",
            Wait::Pending => "pending",
            Wait::Queued => "queued",
            Wait::Stopped => "stopped",
        }
    }

    /// In words, as explain.md says it.
    pub fn words(self) -> &'static str {
        match self {
            Wait::Cpu => "waiting for a CPU",
            Wait::Futex => "in a futex (a lock, or a parked runtime thread)",
            Wait::Epoll => "in epoll (the event loop waiting for sockets or timers)",
            Wait::Network => "in a socket call",
            Wait::PageFault => "in a page fault",
            Wait::MmapLock => "waiting for the address space's lock (mmap_lock)",
            Wait::Sleep => "in a timed sleep",
            Wait::Io => "in other I/O",
            Wait::Other => "off the CPU for another reason",
            Wait::Pending => {
                "pending between polls (the skill's own waits: a timer, I/O, a host call)"
            }
            Wait::Queued => "woken and queued for a thread of the host's runtime",
            Wait::Stopped => "stopped by a signal (SIGSTOP, SIGTSTP) or a debugger, until SIGCONT",
        }
    }

    /// A request's time between its polls rather than a thread's time off a CPU.
    pub fn between_polls(self) -> bool {
        matches!(self, Wait::Pending | Wait::Queued)
    }
}

/// What kind of code a frame is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FrameKind {
    /// A skill's WebAssembly function, compiled by wasmtime.
    Wasm,
    /// A function of the host's executable or one of its libraries.
    Native,
    /// A function of the kernel.
    Kernel,
    /// An address without a function's name: only the file it is in is known
    /// (`[libc.so.6]`, `[anon]`).
    Unnamed,
}

/// A frame, as the profile names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Frame {
    pub name: String,
    pub kind: FrameKind,
}

/// One stack's time in an entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TimeStack {
    /// The skill the thread worked for; `None`: the host's own work.
    pub skill: Option<String>,
    pub phase: Phase,
    pub state: TimeState,
    /// Off a CPU: why (`None` on a CPU).
    pub wait: Option<Wait>,
    /// Indexes into [`TimeProfile::frames`], outermost first: the user stack, then the kernel
    /// stack (empty where it was not walked).
    pub frames: Vec<u32>,
    /// Samples (on a CPU) or intervals (off one), and their time.
    pub count: u64,
    pub ns: u64,
}

/// An entry's profile, its stacks named.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TimeProfile {
    /// The profile clock's period: each CPU sample stands for this much of a thread's CPU.
    pub period_ns: u64,
    pub frames: Vec<Frame>,
    pub stacks: Vec<TimeStack>,
}

impl TimeProfile {
    /// A stack's frames, outermost first.
    pub fn frames_of<'a>(&'a self, stack: &'a TimeStack) -> impl Iterator<Item = &'a Frame> {
        stack.frames.iter().map(|&i| &self.frames[i as usize])
    }

    /// Whether a stack's sample was taken in the kernel: a kernel frame in it.
    pub fn in_kernel(&self, stack: &TimeStack) -> bool {
        self.frames_of(stack).any(|f| f.kind == FrameKind::Kernel)
    }

    /// The stacks of one state.
    pub fn in_state(&self, state: TimeState) -> impl Iterator<Item = &TimeStack> {
        self.stacks.iter().filter(move |stack| stack.state == state)
    }
}

/// What the code a sample ran was doing, from its frames: the groups explain.md and the
/// `cpu_work_*_pct` columns name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Work {
    /// Compiling a skill: Cranelift, wasmtime's compiler, validating the module.
    Compile,
    /// Running a skill's WebAssembly.
    Wasm,
    /// The kernel zeroing pages for a fault (first touch of memory).
    PageZeroing,
    /// The rest of the kernel's page-fault work.
    PageFaults,
    /// The kernel's work in mmap, munmap, mprotect, madvise, brk and friends.
    MemoryCalls,
    /// TLB flushes and the IPIs that send them to other CPUs.
    TlbFlush,
    /// The allocator (malloc, free).
    Malloc,
    /// Copying and filling memory (memcpy, memmove, memset).
    Memcpy,
    /// HTTP, the async runtime and their syscalls.
    Serving,
    /// wasmtime's runtime: instantiating, entering and leaving wasm, its WASI calls.
    Runtime,
    /// Other kernel work.
    Kernel,
    /// Other code of the host.
    Host,
}

impl Work {
    pub const ALL: [Work; 12] = [
        Work::Compile,
        Work::Wasm,
        Work::PageZeroing,
        Work::PageFaults,
        Work::MemoryCalls,
        Work::TlbFlush,
        Work::Malloc,
        Work::Memcpy,
        Work::Serving,
        Work::Runtime,
        Work::Kernel,
        Work::Host,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Work::Compile => "compile",
            Work::Wasm => "wasm",
            Work::PageZeroing => "page_zeroing",
            Work::PageFaults => "page_faults",
            Work::MemoryCalls => "memory_calls",
            Work::TlbFlush => "tlb_flush",
            Work::Malloc => "malloc",
            Work::Memcpy => "memcpy",
            Work::Serving => "serving",
            Work::Runtime => "runtime",
            Work::Kernel => "kernel",
            Work::Host => "host",
        }
    }

    /// In words, as explain.md says it ("61% of the host's CPU compiling").
    pub fn words(self) -> &'static str {
        match self {
            Work::Compile => "compiling",
            Work::Wasm => "running the skills' wasm",
            Work::PageZeroing => "in the kernel zeroing pages in faults",
            Work::PageFaults => "in the kernel's other page-fault work",
            Work::MemoryCalls => "in the kernel's mmap, munmap, mprotect and madvise",
            Work::TlbFlush => "flushing TLBs",
            Work::Malloc => "in malloc and free",
            Work::Memcpy => "copying memory",
            Work::Serving => "serving HTTP and running the async runtime",
            Work::Runtime => {
                "in wasmtime's runtime (instantiating, entering and leaving wasm, WASI)"
            }
            Work::Kernel => "in other kernel work",
            Work::Host => "in other host code",
        }
    }
}

/// A share of the samples: what, and how many.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Share {
    pub what: String,
    pub samples: u64,
}

/// What an entry's profile came to.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EntryTime {
    /// Whether the profile clock ran: without it the CPU figures are unmeasured, not 0.
    #[serde(default)]
    pub clock: bool,
    /// The profile clock's period, ns.
    pub period_ns: u64,
    /// CPU samples of the host's threads: each stands for one period of a thread's CPU.
    pub samples: u64,
    /// Of them: in kernel mode; with a wasm function innermost; with no function's name
    /// innermost.
    pub kernel: u64,
    pub wasm: u64,
    pub unnamed: u64,
    /// By phase, in [`Phase`] order (host, compile, instantiate, call, reset).
    pub by_phase: [u64; PHASES],
    /// By what the code was doing, in [`Work::ALL`] order.
    pub by_work: [u64; Work::ALL.len()],
    /// The largest parts of the largest work (a compile's register allocation, instruction
    /// selection, ...), largest first.
    pub parts: Vec<Share>,
    /// The functions most samples were in (innermost frame), largest first.
    pub top: Vec<Share>,
    /// Off a CPU, when its programs ran.
    pub off_cpu: Option<OffCpuTime>,
    /// Samples or intervals counted without their stack, and not counted at all.
    pub stacks_lost: u64,
    pub lost: u64,
}

/// The host's threads' time off a CPU in an entry.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OffCpuTime {
    /// Times a thread left its CPU.
    pub switches: u64,
    /// Waits whose kernel stack was walked (`--off-cpu waits`); 0 in records from before.
    #[serde(default)]
    pub walks: u64,
    /// By state: runnable, sleeping, blocked (ns).
    pub runnable_ns: u64,
    pub sleeping_ns: u64,
    pub blocked_ns: u64,
    /// By why, in [`Wait::ALL`] order (ns); `None` without the stacks that say why. The
    /// requests' time between polls is in it too (pending, queued), not in the states.
    #[serde(deserialize_with = "by_wait")]
    pub by_wait: Option<[u64; Wait::ALL.len()]>,
    /// The part in a skill's phase (the rest was the host's own threads, mostly idle ones
    /// waiting for work), by state: runnable, sleeping, blocked (ns).
    pub in_skills_ns: [u64; 3],
    /// That part by why, as `by_wait`.
    #[serde(default, deserialize_with = "by_wait")]
    pub in_skills_by_wait: Option<[u64; Wait::ALL.len()]>,
}

/// A `by_wait` array as recorded, shorter in records from before a wait was added (those
/// waits are last, and read 0).
fn by_wait<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<[u64; Wait::ALL.len()]>, D::Error> {
    let recorded: Option<Vec<u64>> = Deserialize::deserialize(deserializer)?;
    recorded
        .map(|ns| {
            let mut all = [0; Wait::ALL.len()];
            if ns.len() > all.len() {
                return Err(serde::de::Error::invalid_length(
                    ns.len(),
                    &"one figure a wait",
                ));
            }
            all[..ns.len()].copy_from_slice(&ns);
            Ok(all)
        })
        .transpose()
}

impl EntryTime {
    /// The CPU time the samples stand for, ms.
    pub fn sampled_ms(&self) -> f64 {
        (self.samples * self.period_ns) as f64 / 1e6
    }

    /// `part` of the samples, in percent; `None` without samples.
    pub fn pct(&self, part: u64) -> Option<f64> {
        (self.samples > 0).then(|| 100.0 * part as f64 / self.samples as f64)
    }
}

/// One skill's phase in an entry's profile (a row of skills.csv).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SkillTime {
    pub period_ns: u64,
    pub samples: u64,
    /// Of them, in kernel mode.
    #[serde(default)]
    pub kernel: u64,
    /// Off a CPU by state (runnable, sleeping, blocked), ns; `None` without the switch
    /// programs.
    pub off_cpu_ns: Option<[u64; 3]>,
}

impl SkillTime {
    pub fn sampled_ms(&self) -> f64 {
        (self.samples * self.period_ns) as f64 / 1e6
    }

    /// The share of the samples in kernel mode, in percent; `None` without samples.
    pub fn kernel_pct(&self) -> Option<f64> {
        (self.samples > 0).then(|| 100.0 * self.kernel as f64 / self.samples as f64)
    }

    /// Off a CPU in `state` (not on it), ms.
    pub fn off_cpu_ms(&self, state: TimeState) -> Option<f64> {
        let index = (state as usize).checked_sub(1)?;
        self.off_cpu_ns.map(|ns| ms(ns[index]))
    }
}

impl TimeProfile {
    /// The time of `skill`'s `phase`; `off_cpu`: whether the switch programs ran.
    pub fn of_skill(&self, skill: Option<&str>, phase: Phase, off_cpu: bool) -> SkillTime {
        let mut time = SkillTime {
            period_ns: self.period_ns,
            off_cpu_ns: off_cpu.then_some([0; 3]),
            ..SkillTime::default()
        };
        for stack in self.stacks.iter().filter(|s| {
            s.skill.as_deref() == skill
                && s.phase == phase
                && !s.wait.is_some_and(Wait::between_polls)
        }) {
            match (stack.state, &mut time.off_cpu_ns) {
                (TimeState::OnCpu, _) => {
                    time.samples += stack.count;
                    if self.in_kernel(stack) {
                        time.kernel += stack.count;
                    }
                }
                (state, Some(off)) => off[state as usize - 1] += stack.ns,
                (_, None) => {}
            }
        }
        time
    }
}

/// A CPU sample on the timeline: when (CLOCK_MONOTONIC ns), which thread, for which skill
/// and phase, and the function it was in.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TimelineSample {
    pub at_ns: u64,
    pub tid: u32,
    pub skill: Option<String>,
    pub phase: Phase,
    pub function: Frame,
}

/// The profile checked against the kernel: per host thread, its samples times the clock's
/// period against the CPU time the kernel counted for it (`/proc/PID/task/TID/schedstat`),
/// over the session. A thread that ended before the check is not in it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProfileCheck {
    pub period_ns: u64,
    pub threads: Vec<ThreadCheck>,
}

/// One thread of [`ProfileCheck`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThreadCheck {
    pub tid: u32,
    /// Its name (`comm`).
    pub name: String,
    pub samples: u64,
    /// The CPU time the kernel counted for it while the profile ran, ns.
    pub cpu_ns: u64,
}

impl ThreadCheck {
    /// What the samples say the thread ran, ns.
    pub fn sampled_ns(&self, period_ns: u64) -> u64 {
        self.samples * period_ns
    }
}

impl ProfileCheck {
    /// The threads with at least `min_cpu_ns` of CPU, as (thread, sampled / counted - 1):
    /// a few samples' worth of CPU cannot be estimated closely by any sampler.
    pub fn errors(&self, min_cpu_ns: u64) -> Vec<(&ThreadCheck, f64)> {
        self.threads
            .iter()
            .filter(|t| t.cpu_ns >= min_cpu_ns)
            .map(|t| {
                (
                    t,
                    t.sampled_ns(self.period_ns) as f64 / t.cpu_ns as f64 - 1.0,
                )
            })
            .collect()
    }
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fields! {
    impl EntryTime: pub fn write_cells(entry: Option<&EntryTime>, row: &mut Row) -> row {
        let time = entry.filter(|t| t.clock);
        let off = entry.and_then(|t| t.off_cpu.as_ref());
    }
    CPU_SAMPLES "cpu_samples" Count "the profile's CPU samples of the host's threads in the entry (a software clock per CPU, counted when a host thread was on it; profile/ENTRY.json and its flamegraphs hold them by stack)" = time.map(|t| t.samples);
    CPU_SAMPLED "cpu_sampled_ms" Ms "the host's CPU time as the profile saw it: samples times the clock's period" = time.map(EntryTime::sampled_ms);
    CPU_KERNEL "cpu_kernel_pct" Percent "share of the samples taken in the kernel (a syscall, a fault, an interrupt)" = time.and_then(|t| t.pct(t.kernel));
    CPU_WASM "cpu_wasm_pct" Percent "share of the samples in a skill's WebAssembly (the innermost frame a wasm function)" = time.and_then(|t| t.pct(t.wasm));
    CPU_UNNAMED "cpu_unnamed_pct" Percent "share of the samples whose innermost frame has no function's name (a library without symbols, code of no known image)" = time.and_then(|t| t.pct(t.unnamed));
    CPU_TOP "cpu_top" Text "the function most samples were in (innermost frame) and its share" = time.and_then(|t| {
        let top = t.top.first()?;
        Some(format!("{} {:.0}%", top.what, t.pct(top.samples)?))
    });
    CPU_PHASE "cpu_phase_*_pct" Percent "share of the samples by the phase the thread worked on: cpu_phase_host_pct (no skill's), _compile_, _instantiate_, _call_, _reset_ (dropping the request's store: unmapping or resetting its memories)" for PHASE_NAMES.iter().enumerate().map(|(i, phase)| {
        (format!("cpu_phase_{phase}_pct"), time.and_then(|t| t.pct(t.by_phase[i])))
    });
    CPU_WORK "cpu_work_*_pct" Percent "share of the samples by what the code was doing, from its frames: compile (Cranelift, wasmtime's compiler, validation), wasm (a skill's code), page_zeroing (the kernel zeroing pages in faults), page_faults (the rest of faults), memory_calls (the kernel's mmap, munmap, mprotect, madvise), tlb_flush, malloc, memcpy, serving (HTTP, the async runtime), runtime (wasmtime's: instantiating, entering and leaving wasm, WASI), kernel (other kernel work), host (other host code)" for Work::ALL.iter().enumerate().map(|(i, work)| {
        (format!("cpu_work_{}_pct", work.as_str()), time.and_then(|t| t.pct(t.by_work[i])))
    });
    OFF_SWITCHES "offcpu_switches" Count "times a host thread left its CPU in the entry (the scheduler's switches)" = off.map(|o| o.switches);
    OFF_WALKS "offcpu_walks" Count "with --off-cpu waits: waits whose kernel stack was walked (each of 1 ms or more inside a skill's work, 100 ms or more in none, and shorter ones by chance), the part of the switch programs' cost that grows with the time the host's threads sleep" = off.map(|o| o.walks);
    OFF_RUNNABLE "offcpu_runnable_ms" Ms "time the host's threads were runnable but not running: preempted, or woken and waiting for a CPU" = off.map(|o| ms(o.runnable_ns));
    OFF_SLEEPING "offcpu_sleeping_ms" Ms "time the host's threads slept wakeably (a futex, epoll, a socket, a timer), idle workers waiting for work included" = off.map(|o| ms(o.sleeping_ns));
    OFF_BLOCKED "offcpu_blocked_ms" Ms "time the host's threads slept unwakeably (a page fault's I/O, mmap_lock, a disk)" = off.map(|o| ms(o.blocked_ns));
    OFF_IN_SKILLS "offcpu_in_skills_ms" Ms "of the time off a CPU, the part of threads working on a skill's phase (not the host's idle workers)" = off.map(|o| ms(o.in_skills_ns.iter().sum()));
    OFF_WAIT "offcpu_wait_*_ms" Ms "time off a CPU by why, from the kernel stack a thread slept on (--off-cpu waits: every wait of 1 ms or more in a skill's work and 100 ms or more in none, and the short waits' time shared by the stacks of those taken by chance; --off-cpu stacks: every wait's): cpu (runnable), futex, epoll, network, page_fault, mmap_lock, sleep, io, other, stopped (SIGSTOP, a debugger); and the requests' time between polls, from the host's marks: pending (until a wake) and queued (woken, until polled)" for Wait::ALL.iter().enumerate().map(|(i, wait)| {
        (format!("offcpu_wait_{}_ms", wait.as_str()), off.and_then(|o| o.by_wait).map(|w| ms(w[i])))
    });
    TIME_STACKS_LOST "time_stacks_lost" Count "samples and intervals counted without their stack (the stack map full, or another stack with the same hash)" = entry.map(|t| t.stacks_lost);
    TIME_LOST "time_lost" Count "samples and intervals not counted at all (the profile's map full)" = entry.map(|t| t.lost);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record from before `stopped` was a wait has 11 figures a wait: they keep their
    /// places, and `stopped` reads 0.
    #[test]
    fn an_older_records_waits_keep_their_places() {
        let older = serde_json::json!({
            "switches": 1, "runnable_ns": 0, "sleeping_ns": 0, "blocked_ns": 0,
            "by_wait": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11],
            "in_skills_ns": [0, 0, 0],
            "in_skills_by_wait": null,
        });
        let off: OffCpuTime = serde_json::from_value(older).unwrap();
        let by_wait = off.by_wait.unwrap();
        assert_eq!(by_wait[Wait::Queued as usize], 11);
        assert_eq!(by_wait[Wait::Stopped as usize], 0);
        assert_eq!(off.in_skills_by_wait, None);
    }
}
