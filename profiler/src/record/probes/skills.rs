//! The host's work by skill and phase (its markers' rows): skills.csv.

use std::sync::LazyLock;

use serde::{Deserialize, Serialize};
use skillprof_common::{FAILURE_NAMES, FAILURE_PHASES, Latency, SYSCALL_NAMES, SkillCounters};

use crate::record::field::{Row, fields};

/// What a host thread was doing for a skill when an event happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// No marker covered it: the runtime, the allocator, background threads.
    Host,
    Compile,
    Instantiate,
    Call,
    /// Dropping the request's store: unmapping its memories, or resetting its pool slots.
    Reset,
}

/// One skill's phase in one entry: what its threads did in it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SkillRow {
    /// The skill's name; `None` for the unattributed row.
    pub skill: Option<String>,
    pub phase: Phase,
    pub counts: SkillCounters,
    /// The requests answered, by latency, from the host's ledger: the call phase's row only.
    #[serde(default)]
    pub answered: Latency,
    /// The time profile's part of the row, where it ran.
    #[serde(default)]
    pub time: Option<crate::record::time::SkillTime>,
}

/// The family members' names, made once: a scrape of a host with thousands of skills writes
/// them for every skill and phase.
struct CellNames {
    syscalls: Vec<SyscallNames>,
    failed: Vec<String>,
}

struct SyscallNames {
    calls: String,
    bytes: String,
}

static CELL_NAMES: LazyLock<CellNames> = LazyLock::new(|| CellNames {
    syscalls: SYSCALL_NAMES
        .iter()
        .map(|name| SyscallNames {
            calls: format!("{name}_calls"),
            bytes: format!("{name}_bytes"),
        })
        .collect(),
    failed: FAILURE_NAMES
        .iter()
        .map(|name| format!("failed_{name}"))
        .collect(),
});

/// skills.csv's columns after the entry's own: one row per skill and phase of an entry.
pub mod skill_columns {
    use super::{CELL_NAMES, FAILURE_PHASES, Row, SkillRow, fields};
    use crate::record::time::TimeState;

    fields! {
        impl SkillRow: pub fn write_cells(&self, row: &mut Row, calls_counted: bool) -> row {
            let c = &self.counts;
        }
        SKILL "skill" Text "the skill the host's markers named, or host: what no marker covered (the runtime, the allocator, background threads)" = self.skill.as_deref().unwrap_or("host");
        PHASE "phase" Text "compile, instantiate, call, reset (dropping the request's store: unmapping its memories, or resetting its pool slots), or host" = self.phase.as_str();
        RUNS "runs" Count "times the phase ran for the skill in the entry" = c.phase.runs;
        TIME_MS "time_ms" Ms "time inside the phase, summed over its runs (a compile's worker threads included)" = c.phase.ns as f64 / 1e6;
        PENDING_MS "pending_ms" Ms "an instantiation's or call's time between its polls until something woke it: the skill's own waits (a timer, I/O, a host call's answer), from the host's tracked futures (their waker, timed); a yield (a poll with a zero timeout, Python's time.sleep(0)) is queued, not pending; in every mode" = c.phase.pending_ns as f64 / 1e6;
        QUEUED_MS "queued_ms" Ms "an instantiation's or call's time from a wake (or a yield) until its next poll: ready, waiting for a thread of the host's runtime (a queue, or no CPU)" = c.phase.queued_ns as f64 / 1e6;
        TASK_MINFLT "task_minflt" Count "minor page faults of the threads while they worked on the phase: each thread's own counter (getrusage RUSAGE_THREAD) from one of its marks to the next, kept by the host in its ledger, in every mode; the host row has none (the entry's minflt less the skills' is what no mark covered)" = c.task.minflt;
        TASK_MAJFLT "task_majflt" Count "major page faults, the same way" = c.task.majflt;
        TASK_CPU_MS "task_cpu_ms" Ms "CPU time the threads ran for the phase, the same way: a stretch's elapsed time when its thread was not switched out in it, getrusage's CPU time (as the scheduler last accounted it, at most the elapsed time) when it was" = c.task.cpu_ns as f64 / 1e6;
        CPU_SAMPLES "cpu_samples" Count "the time profile's CPU samples of the threads while they worked on the phase (profile/ENTRY.json has them by stack)" = self.time.as_ref().map(|t| t.samples);
        CPU_SAMPLED "cpu_sampled_ms" Ms "the threads' CPU time in the phase as the profile saw it: samples times the clock's period" = self.time.as_ref().map(|t| t.sampled_ms());
        CPU_KERNEL "cpu_kernel_pct" Percent "share of the phase's samples taken in the kernel (a syscall, a fault, an interrupt)" = self.time.as_ref().and_then(|t| t.kernel_pct());
        OFF_RUNNABLE "offcpu_runnable_ms" Ms "time the threads working on the phase were off a CPU but runnable (preempted, or woken and not yet running)" = self.time.as_ref().and_then(|t| t.off_cpu_ms(TimeState::Runnable));
        OFF_SLEEPING "offcpu_sleeping_ms" Ms "time the threads working on the phase slept wakeably inside a poll or a compile (a futex, a socket, a timer); the time between polls is pending_ms" = self.time.as_ref().and_then(|t| t.off_cpu_ms(TimeState::Sleeping));
        OFF_BLOCKED "offcpu_blocked_ms" Ms "time the threads working on the phase slept unwakeably (a page fault's I/O, mmap_lock)" = self.time.as_ref().and_then(|t| t.off_cpu_ms(TimeState::Blocked));
        // Each kind's calls and bytes side by side: mmap_calls, mmap_bytes, munmap_calls, ...
        SYSCALL_CALLS "*_calls" Count "per address-space syscall kind (mmap, munmap, mremap, mprotect, madvise, brk): <kind>_calls, the calls in the phase" => {
            for (name, calls) in CELL_NAMES.syscalls.iter().zip(&c.syscalls) {
                row.put_in(&SYSCALL_CALLS, name.calls.as_str(), calls_counted.then_some(calls.calls))
                    .put_in(&SYSCALL_BYTES, name.bytes.as_str(), calls_counted.then_some(calls.bytes));
            }
        };
        SYSCALL_BYTES "*_bytes" Bytes "per address-space syscall kind: <kind>_bytes, the lengths of those calls" => {};
        ANSWERED "answered" Count "the skill's requests the host answered, failures included, in the call phase's row (empty in the others): the count of the watch's skillprof_skill_latency_seconds histogram, from the host's ledger (a ledger from before 2026-12-06 has none)" = (self.phase == super::Phase::Call && self.skill.is_some()).then_some(self.answered.count());
        FAILED "failed_*" Count "per reason the host failed one of the skill's requests in the phase, from its ledger in every mode (empty in the other phases): failed_unloadable (compile: the module did not compile or load), failed_no_slot (instantiate: the pooling allocator had no free slot), and the call's failed_input (the skill rejected its input), failed_error (it reported an error), failed_trap (it trapped: a panic, an out-of-bounds access, memory growth refused), failed_output (its answer was not JSON), failed_deadline (it ran past the host's deadline)" for CELL_NAMES.failed.iter().enumerate().map(|(reason, name)| {
            let in_phase = FAILURE_PHASES[reason] == self.phase as u32 && self.skill.is_some();
            (name.as_str(), in_phase.then_some(c.failed.by_reason[reason]))
        });
    }
}
