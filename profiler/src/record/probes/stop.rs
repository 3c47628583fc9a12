//! Where a stop's time went: its parts, from SIGTERM sent to the host reaped.

use serde::{Deserialize, Serialize};

use crate::record::field::{Row, fields};

/// How the teardown was bounded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TeardownSource {
    /// fentry/fexit (or kprobes) on exit_mmap.
    ExitMmap,
    /// The first and last rss_stat change of the host's mm after exit began.
    RssStat,
}

/// One part of the stop time.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StopPart {
    #[serde(rename = "name")]
    pub phase: StopPhase,
    /// CLOCK_MONOTONIC ns at which the part starts.
    pub start_ns: u64,
    pub duration_ns: u64,
    /// Whether its end instant was observed in order (false: zero or clamped).
    pub observed: bool,
    /// One sentence for the explanation.
    pub detail: String,
}

/// The stop time cut into parts that sum to it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StopBreakdown {
    pub total_ns: u64,
    pub parts: Vec<StopPart>,
    pub teardown_source: Option<TeardownSource>,
    pub teardown_pages_freed: Option<u64>,
    pub drain_munmap_calls: u64,
    pub drain_munmap_bytes: u64,
}

/// The parts of a stop, in order (the stop_*_ms columns); every breakdown has exactly these.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopPhase {
    /// SIGTERM sent → delivered.
    Signal,
    /// Delivered → exit_group: the host's graceful drain.
    Drain,
    /// exit_group → the address-space teardown starts.
    Exit,
    /// The address-space teardown.
    Teardown,
    /// Teardown → the last thread exits and the parent is notified.
    LastThread,
    /// Notified → reaped.
    Reap,
}

impl StopPhase {
    pub const ALL: [StopPhase; 6] = [
        StopPhase::Signal,
        StopPhase::Drain,
        StopPhase::Exit,
        StopPhase::Teardown,
        StopPhase::LastThread,
        StopPhase::Reap,
    ];

    /// As its column and entries.jsonl spell it.
    pub fn name(self) -> &'static str {
        match self {
            StopPhase::Signal => "signal",
            StopPhase::Drain => "drain",
            StopPhase::Exit => "exit",
            StopPhase::Teardown => "teardown",
            StopPhase::LastThread => "last_thread",
            StopPhase::Reap => "reap",
        }
    }

    /// What it spans, in a report's words.
    pub fn span(self) -> &'static str {
        match self {
            StopPhase::Signal => "signal (SIGTERM sent → delivered)",
            StopPhase::Drain => "drain (graceful shutdown → exit_group)",
            StopPhase::Exit => "exit (→ teardown starts)",
            StopPhase::Teardown => "address-space teardown",
            StopPhase::LastThread => "last thread (→ parent notified)",
            StopPhase::Reap => "reap (→ reaped)",
        }
    }
}

// The stop's columns: the parts in `StopPhase::ALL` order, then what the drain and the
// teardown did.
fields! {
    impl StopBreakdown: pub fn write_cells(stop: Option<&StopBreakdown>, row: &mut Row) -> row {
        let ms = |ns: u64| ns as f64 / 1e6;
        let part = |phase| stop.and_then(|s| s.part(phase)).map(|p| ms(p.duration_ns));
    }
    STOP_TOTAL "stop_total_ms" Ms "stop only: from SIGTERM sent to the host reaped; the parts below sum to it" = stop.map(|s| ms(s.total_ns));
    STOP_SIGNAL "stop_signal_ms" Ms "stop only: SIGTERM sent → delivered" = part(StopPhase::Signal);
    STOP_DRAIN "stop_drain_ms" Ms "stop only: delivered → exit_group (the host's graceful drain)" = part(StopPhase::Drain);
    STOP_EXIT "stop_exit_ms" Ms "stop only: exit_group → the address-space teardown starts" = part(StopPhase::Exit);
    STOP_TEARDOWN "stop_teardown_ms" Ms "stop only: the address-space teardown" = part(StopPhase::Teardown);
    STOP_LAST_THREAD "stop_last_thread_ms" Ms "stop only: teardown → the last thread exits and the parent is notified" = part(StopPhase::LastThread);
    STOP_REAP "stop_reap_ms" Ms "stop only: notified → reaped" = part(StopPhase::Reap);
    STOP_DRAIN_MUNMAPS "stop_drain_munmaps" Count "stop only: munmap calls the host made while draining (between SIGTERM and exit_group)" = stop.map(|s| s.drain_munmap_calls);
    STOP_DRAIN_MUNMAP_BYTES "stop_drain_munmap_bytes" Bytes "stop only: what those munmap calls unmapped" = stop.map(|s| s.drain_munmap_bytes);
    STOP_TEARDOWN_PAGES "stop_teardown_pages" Count "stop only: pages the teardown freed" = stop.and_then(|s| s.teardown_pages_freed);
    STOP_TEARDOWN_BY "stop_teardown_by" Text "stop only: how the teardown was timed: exit_mmap (function probes) or rss_stat (the first to the last RSS decrement)" = stop.and_then(|s| s.teardown_source).map(|t| t.as_str());
}
