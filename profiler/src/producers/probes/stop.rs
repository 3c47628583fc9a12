//! The stop breakdown: from "SIGTERM sent" (the runner) to "reaped" (the runner's wait
//! returned), cut at the kernel instants the exit probes recorded.
//!
//! The parts, in order, each from the previous instant to its own:
//! 1. `signal`: SIGTERM sent → dequeued by a host thread (`signal_deliver`);
//! 2. `drain`: → exit_group entered (the host's graceful shutdown; its munmaps are counted);
//! 3. `exit`: → the address-space teardown starts (threads stopping);
//! 4. `teardown`: `exit_mmap`, timed by fentry/fexit where allowed; otherwise bounded by the
//!    first and last change of the host mm's RSS counters after exit began (`rss_stat`),
//!    which leaves page-table and VMA freeing after the last decrement to the next part;
//! 5. `last_thread`: → the last thread notified the parent (SIGCHLD generated): the rest of
//!    do_exit;
//! 6. `reap`: → the runner's wait returned.
//!
//! The parts add up to the total by construction: each part ends at an instant clamped into
//! [previous instant, reaped]. An instant that was not observed gives a zero part marked
//! `observed: false`, and one observed out of order is clamped and marked too; so the
//! breakdown never invents time, and says where it could not cut.

use crate::record::probes::{StopBreakdown, StopPart, StopPhase, TeardownSource};
use serde::Serialize;
use skillprof_common::StopState;

const PAGE: u64 = 4096;

impl TeardownSource {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ExitMmap => "exit_mmap",
            Self::RssStat => "rss_stat",
        }
    }
}

/// Kernel-side instants of the host's shutdown, CLOCK_MONOTONIC ns (`None`: not observed).
#[derive(Clone, Debug, Default, Serialize)]
pub struct StopTimeline {
    /// SIGTERM (or SIGKILL) dequeued by a host thread, and which.
    pub signal_delivered_ns: Option<u64>,
    pub signal: Option<u32>,
    pub exit_group_ns: Option<u64>,
    pub first_thread_exit_ns: Option<u64>,
    pub last_thread_exit_ns: Option<u64>,
    pub thread_exits: u64,
    /// exit_mmap entry/return (fentry/fexit or kprobes).
    pub exit_mmap_ns: Option<(u64, u64)>,
    /// First and last RSS counter change of the host's mm after exit began.
    pub rss_teardown_ns: Option<(u64, u64)>,
    pub rss_teardown_events: u64,
    /// Pages the teardown freed (RSS counters before it minus after it, all members).
    pub teardown_pages_freed: Option<u64>,
    /// SIGCHLD generated to the parent by the exiting host.
    pub parent_notified_ns: Option<u64>,
    pub drain_munmap_calls: u64,
    pub drain_munmap_bytes: u64,
    /// Whether the probes these instants need were attached.
    pub exit_probes_attached: bool,
    pub syscall_probes_attached: bool,
    pub exit_mmap_attached: bool,
    pub rss_stat_attached: bool,
}

impl StopTimeline {
    pub(super) fn from_state(s: &StopState) -> Self {
        let opt = |ns: u64| (ns != 0).then_some(ns);
        let pages_freed = (s.rss_after_seen != 0).then(|| {
            (0..4)
                .filter(|m| s.rss_after_seen & (1 << m) != 0)
                .map(|m| s.rss_before[m].saturating_sub(s.rss_after[m]) / PAGE)
                .sum()
        });
        StopTimeline {
            signal_delivered_ns: opt(s.signal_ns),
            signal: (s.signal_ns != 0).then_some(s.signal),
            exit_group_ns: opt(s.exit_group_ns),
            first_thread_exit_ns: opt(s.first_exit_ns),
            last_thread_exit_ns: opt(s.last_exit_ns),
            thread_exits: s.exits,
            exit_mmap_ns: (s.exit_mmap_start_ns != 0 && s.exit_mmap_end_ns != 0)
                .then_some((s.exit_mmap_start_ns, s.exit_mmap_end_ns)),
            rss_teardown_ns: (s.rss_first_ns != 0).then_some((s.rss_first_ns, s.rss_last_ns)),
            rss_teardown_events: s.rss_events,
            teardown_pages_freed: pages_freed,
            parent_notified_ns: opt(s.notify_ns),
            drain_munmap_calls: s.drain_munmap_calls,
            drain_munmap_bytes: s.drain_munmap_bytes,
            ..StopTimeline::default()
        }
    }

    /// The teardown bounds: exit_mmap where it was timed, else the rss_stat bounds.
    pub fn teardown(&self) -> Option<(u64, u64, TeardownSource)> {
        if let Some((start, end)) = self.exit_mmap_ns
            && end >= start
        {
            return Some((start, end, TeardownSource::ExitMmap));
        }
        self.rss_teardown_ns
            .map(|(start, end)| (start, end, TeardownSource::RssStat))
    }

    /// When the exit began: exit_group or, if the signal killed the host outright, the first
    /// thread exit (or the teardown, whichever came first).
    fn exit_started(&self) -> Option<u64> {
        self.exit_group_ns.or_else(|| {
            [
                self.first_thread_exit_ns,
                self.teardown().map(|(start, _, _)| start),
            ]
            .into_iter()
            .flatten()
            .min()
        })
    }
}

impl StopBreakdown {
    pub fn part(&self, phase: StopPhase) -> Option<&StopPart> {
        self.parts.iter().find(|p| p.phase == phase)
    }

    /// (phase, duration, detail) for the explanation sentence.
    pub fn parts(&self) -> impl Iterator<Item = (StopPhase, std::time::Duration, &str)> {
        self.parts.iter().map(|p| {
            (
                p.phase,
                std::time::Duration::from_nanos(p.duration_ns),
                p.detail.as_str(),
            )
        })
    }
}

/// Builds the breakdown of a stop from `sigterm_sent_ns` to `reaped_ns` (the runner's
/// instants, CLOCK_MONOTONIC ns) and the kernel's timeline. The parts sum to
/// `reaped_ns - sigterm_sent_ns` exactly.
pub fn stop_breakdown(
    timeline: &StopTimeline,
    sigterm_sent_ns: u64,
    reaped_ns: u64,
) -> StopBreakdown {
    let reaped_ns = reaped_ns.max(sigterm_sent_ns);
    let teardown = timeline.teardown();
    let signal_name = match timeline.signal {
        Some(9) => "SIGKILL",
        _ => "SIGTERM",
    };
    let mib = timeline.drain_munmap_bytes as f64 / (1 << 20) as f64;
    let pages = timeline
        .teardown_pages_freed
        .map_or("pages freed unknown".to_string(), |p| {
            format!(
                "{p} pages ({:.1} MiB) freed",
                (p * PAGE) as f64 / (1 << 20) as f64
            )
        });
    let teardown_detail = match teardown {
        Some((_, _, TeardownSource::ExitMmap)) => {
            format!("address-space teardown (exit_mmap, timed by function probes): {pages}")
        }
        Some((_, _, TeardownSource::RssStat)) => format!(
            "address-space teardown, from the first to the last RSS decrement of the host's mm \
             (rss_stat; page tables and VMAs freed after it count in the next part): {pages}"
        ),
        None => "address-space teardown: not observed".to_string(),
    };
    let ends: [(StopPhase, Option<u64>, String); StopPhase::ALL.len()] = [
        (
            StopPhase::Signal,
            timeline.signal_delivered_ns,
            format!("SIGTERM sent → {signal_name} dequeued by a host thread"),
        ),
        (
            StopPhase::Drain,
            timeline.exit_started(),
            format!(
                "graceful drain until exit_group: {} munmap calls, {mib:.1} MiB",
                timeline.drain_munmap_calls
            ),
        ),
        (
            StopPhase::Exit,
            teardown.map(|(start, _, _)| start),
            format!(
                "exit_group until the teardown starts: threads stopping ({} thread exits)",
                timeline.thread_exits
            ),
        ),
        (
            StopPhase::Teardown,
            teardown.map(|(_, end, _)| end),
            teardown_detail,
        ),
        (
            StopPhase::LastThread,
            timeline.parent_notified_ns,
            "the rest of the last thread's exit, until the parent was notified".to_string(),
        ),
        (
            StopPhase::Reap,
            Some(reaped_ns),
            "exit notification → the runner's wait returned".to_string(),
        ),
    ];
    let mut parts = Vec::with_capacity(ends.len());
    let mut previous = sigterm_sent_ns;
    for (phase, end, mut detail) in ends {
        let (at, observed) = match end {
            Some(t) if t >= previous && t <= reaped_ns => (t, true),
            Some(t) => {
                let clamped = t.clamp(previous, reaped_ns);
                detail.push_str(&format!(
                    " (observed {} µs out of order; clamped)",
                    t.abs_diff(clamped) / 1000
                ));
                (clamped, false)
            }
            None => {
                detail.push_str(" (not observed)");
                (previous, false)
            }
        };
        parts.push(StopPart {
            phase,
            start_ns: previous,
            duration_ns: at - previous,
            observed,
            detail,
        });
        previous = at;
    }
    StopBreakdown {
        total_ns: reaped_ns - sigterm_sent_ns,
        parts,
        teardown_source: teardown.map(|(_, _, source)| source),
        teardown_pages_freed: timeline.teardown_pages_freed,
        drain_munmap_calls: timeline.drain_munmap_calls,
        drain_munmap_bytes: timeline.drain_munmap_bytes,
    }
}

impl StopBreakdown {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record;
    use crate::record::Row;

    fn timeline() -> StopTimeline {
        StopTimeline {
            signal_delivered_ns: Some(1_100),
            signal: Some(15),
            exit_group_ns: Some(5_000),
            first_thread_exit_ns: Some(5_100),
            last_thread_exit_ns: Some(5_200),
            thread_exits: 2,
            rss_teardown_ns: Some((5_300, 9_000)),
            teardown_pages_freed: Some(262_144),
            parent_notified_ns: Some(9_500),
            ..StopTimeline::default()
        }
    }

    #[test]
    fn parts_sum_to_the_total_and_follow_the_instants() {
        let breakdown = stop_breakdown(&timeline(), 1_000, 10_000);
        let sum: u64 = breakdown.parts.iter().map(|p| p.duration_ns).sum();
        assert_eq!(sum, 9_000);
        assert_eq!(breakdown.total_ns, 9_000);
        let durations: Vec<_> = breakdown.parts.iter().map(|p| p.duration_ns).collect();
        assert_eq!(durations, [100, 3_900, 300, 3_700, 500, 500]);
        assert!(breakdown.parts.iter().all(|p| p.observed));
        assert_eq!(breakdown.teardown_source, Some(TeardownSource::RssStat));
    }

    #[test]
    fn exit_mmap_wins_and_missing_or_late_instants_are_clamped() {
        let mut t = timeline();
        t.exit_mmap_ns = Some((5_250, 9_100));
        t.parent_notified_ns = None;
        t.signal_delivered_ns = Some(900); // before SIGTERM was sent: clamped
        let breakdown = stop_breakdown(&t, 1_000, 10_000);
        assert_eq!(breakdown.part(StopPhase::Signal).unwrap().duration_ns, 0);
        assert!(!breakdown.part(StopPhase::Signal).unwrap().observed);
        assert_eq!(
            breakdown.part(StopPhase::Teardown).unwrap().duration_ns,
            3_850
        );
        assert_eq!(
            breakdown.part(StopPhase::LastThread).unwrap().duration_ns,
            0
        );
        assert_eq!(breakdown.part(StopPhase::Reap).unwrap().duration_ns, 900);
        let sum: u64 = breakdown.parts.iter().map(|p| p.duration_ns).sum();
        assert_eq!(sum, 9_000);
    }

    #[test]
    fn stop_columns_are_documented_and_the_same_without_a_breakdown() {
        let mut row = Row::default();
        StopBreakdown::write_cells(Some(&stop_breakdown(&timeline(), 1_000, 10_000)), &mut row);
        let mut empty = Row::default();
        StopBreakdown::write_cells(None, &mut empty);
        assert!(row.names().eq(empty.names()));
        assert!(empty.values().all(|v| v.is_empty()));
        for name in row.names() {
            assert!(
                record::documentation(name).is_some(),
                "{name} is undocumented"
            );
        }
    }
}
