//! What the host did and said, as data: its own counters (/metrics), how it ended, how a
//! trim reached its allocator, and the machine its start emulated.

use std::process::ExitStatus;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// skillhost's counters at one moment, or (from [`HostCounters::since`]) over an entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostCounters {
    /// execute_skill requests answered, any status.
    pub requests: u64,
    /// Of those, answered with a status outside 2xx.
    pub failed: u64,
    /// Components compiled by Cranelift (not loaded from a cache or shared).
    pub compilations: u64,
    /// Skill instances created.
    pub instances: u64,
    /// Gauges, as they were at the reading (at an entry's end, from `since`): the bytes the
    /// host's malloc has handed out, and the freed bytes it keeps; `None` when the host does
    /// not say (another host, or skillhost under another allocator).
    #[serde(default)]
    pub heap_in_use_bytes: Option<u64>,
    #[serde(default)]
    pub heap_free_bytes: Option<u64>,
    /// Gauges of the pooling allocator, as they were at the reading: freed memory slots kept
    /// warm, and the bytes their memories and tables still hold resident; `None` on demand.
    #[serde(default)]
    pub pool_warm_memories: Option<u64>,
    #[serde(default)]
    pub pool_warm_resident_bytes: Option<u64>,
}

/// How a host ended.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Stopped {
    /// `None` for a host skillprof attached to: only its parent can reap it and learn how it
    /// ended.
    #[serde(with = "wait_status")]
    pub status: Option<ExitStatus>,
    /// It ignored SIGTERM for the whole grace period and was SIGKILLed.
    pub killed: bool,
    /// From SIGTERM to reaped.
    pub took: Duration,
    /// SIGTERM sent and the host reaped, on CLOCK_MONOTONIC: the clock BPF programs
    /// timestamp with, so kernel events can be placed between the two.
    pub signalled_ns: u64,
    pub reaped_ns: u64,
}

#[derive(
    Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum TrimBy {
    /// The host profile's trim route.
    Route,
    /// glibc's `malloc_trim(0)`, called in one of the host's threads through ptrace.
    Ptrace,
}

/// What one `trim` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trimmed {
    /// By ptrace, the call made in the host; `None` through the route.
    pub call: Option<Call>,
    /// How long the host was held: the route's answer, or the thread stopped and calling.
    pub held_us: u64,
}

/// An N-core machine's parallelism, as given to the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cores {
    /// The machine emulated.
    pub cores: u32,
    /// The machine the host really ran on.
    pub real_cores: u32,
    /// RAYON_NUM_THREADS: threads of a parallel compile.
    pub compile_threads: u32,
    /// TOKIO_WORKER_THREADS: the async runtime's workers.
    pub async_workers: u32,
    /// MALLOC_ARENA_MAX: glibc's limit of malloc arenas.
    pub arena_max: u32,
    /// MALLOC_CONF=narenas: jemalloc's arenas, for a host that runs on it (runs from before
    /// it: none set).
    #[serde(default)]
    pub jemalloc_arenas: Option<u32>,
}

/// An exit status on disk as the raw wait status it was read from, so that it reads back as
/// the same status (exit code or signal); `null` when unknown.
mod wait_status {
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(
        status: &Option<ExitStatus>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        status.map(ExitStatus::into_raw).serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<ExitStatus>, D::Error> {
        Ok(Option::<i32>::deserialize(deserializer)?.map(ExitStatus::from_raw))
    }
}

/// The call made in the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Call {
    /// The thread that made it.
    pub thread: u32,
    /// `malloc_trim`'s answer: 1 if it gave memory back.
    pub returned: u64,
}

use super::field::{Row, fields};

fields! {
    impl HostCounters: pub fn write_cells(entry: Option<&HostCounters>, row: &mut Row) -> row {}
    COUNTED_REQUESTS "counted_requests" Count "the host's own count over the entry, from its Prometheus /metrics (skillhost's; empty for a host without them, and for stop): execute_skill requests it answered" = entry.map(|c| c.requests);
    COUNTED_FAILED "counted_failed" Count "of those, answered outside 2xx (the host's count)" = entry.map(|c| c.failed);
    COUNTED_COMPILATIONS "counted_compilations" Count "components Cranelift compiled (the host's count): a second compile of a skill shows here" = entry.map(|c| c.compilations);
    COUNTED_INSTANCES "counted_instances" Count "instances created (the host's count)" = entry.map(|c| c.instances);
    HEAP_IN_USE "host_heap_in_use_kb" Kib "the host's malloc at the end of the entry, as it reports it on /metrics (skillhost, with glibc's mallinfo2; empty for a host without it): handed out, not yet freed" = entry.and_then(|c| c.heap_in_use_bytes).map(|b| b / 1024);
    HEAP_FREE "host_heap_free_kb" Kib "the host's malloc: freed, and kept in malloc's arenas instead of being returned (resident where it was touched)" = entry.and_then(|c| c.heap_free_bytes).map(|b| b / 1024);
    POOL_WARM "host_pool_warm_memories" Count "the pooling allocator's freed memory slots kept warm at the end of the entry (skillhost's /metrics; empty on demand): reused first, up to --pool-max-unused-warm-slots" = entry.and_then(|c| c.pool_warm_memories);
    POOL_WARM_RESIDENT "host_pool_warm_resident_kb" Kib "bytes those warm slots' memories and tables still hold resident (kept by --pool-keep-resident and --pool-table-keep-resident, or not yet decommitted): RSS no instance uses" = entry.and_then(|c| c.pool_warm_resident_bytes).map(|b| b / 1024);
}

fields! {
    impl Stopped: pub fn write_cells(stopped: Option<&Stopped>, row: &mut Row) -> row {}
    EXIT_STATUS "exit_status" Text "stop only: how the host ended (exit code or signal)" = stopped.and_then(|s| s.status).map(|s| s.to_string());
    KILLED "killed" Count "stop only: 1 if the host ignored SIGTERM and was SIGKILLed" = stopped.map(|s| u8::from(s.killed));
}
