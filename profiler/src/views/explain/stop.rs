//! The stop in one sentence whose parts add up to its total:
//!
//! > stop: 1,220 ms = 0.1 ms signal + 38 ms drain (312 munmap, 3.20 GiB) + 0.2 ms exit +
//! > 1,151 ms address-space teardown (5.6 M pages freed, timed by exit_mmap) + 0.8 ms last
//! > thread + 31 ms reap; exit status: 0.

use crate::ground::units::{bytes, count, many, ms};
use crate::record::EntryRecord;
use crate::record::probes::{StopBreakdown, StopPhase};

/// How a sentence says a part of the stop breakdown.
fn words(phase: StopPhase) -> &'static str {
    match phase {
        StopPhase::Teardown => "address-space teardown",
        StopPhase::LastThread => "last thread",
        other => other.name(),
    }
}

pub fn sentence(record: &EntryRecord) -> String {
    let took = record.measure.took.as_secs_f64() * 1e3;
    let stopped = record.measure.stopped.as_ref();
    let status = stopped
        .and_then(|s| s.status)
        .map_or("exit status unknown".to_owned(), |s| s.to_string());
    let killed = if stopped.is_some_and(|s| s.killed) {
        ", SIGKILLed after ignoring SIGTERM"
    } else {
        ""
    };
    let Some(stop) = &record.stop else {
        return format!(
            "stop: {} until the host was reaped ({status}{killed}); no breakdown without probes.",
            ms(took)
        );
    };
    let parts: Vec<String> = stop
        .parts()
        .map(|(phase, duration, _)| {
            let duration = duration.as_secs_f64() * 1e3;
            format!("{} {}{}", ms(duration), words(phase), detail(stop, phase))
        })
        .collect();
    format!(
        "stop: {} = {}; {status}{killed}.",
        ms(stop.total_ns as f64 / 1e6),
        parts.join(" + ")
    )
}

fn detail(stop: &StopBreakdown, phase: StopPhase) -> String {
    match phase {
        StopPhase::Drain if stop.drain_munmap_calls > 0 => format!(
            " ({} munmap, {})",
            count(stop.drain_munmap_calls as f64),
            bytes(stop.drain_munmap_bytes as f64)
        ),
        StopPhase::Teardown => {
            let pages = stop
                .teardown_pages_freed
                .map(|p| format!("{} pages freed", many(p as f64)));
            let by = stop
                .teardown_source
                .map(|by| format!("timed by {}", by.as_str()));
            let said: Vec<String> = pages.into_iter().chain(by).collect();
            if said.is_empty() {
                String::new()
            } else {
                format!(" ({})", said.join(", "))
            }
        }
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt as _;
    use std::process::ExitStatus;
    use std::time::Duration;

    use crate::record::fixture::record;
    use crate::record::host::Stopped;
    use crate::record::probes::StopBreakdown;
    use crate::record::probes::StopPart;
    use crate::record::probes::StopPhase;
    use crate::record::probes::TeardownSource;
    use crate::views::explain::paragraph;

    fn stopped(took_ms: f64) -> Option<Stopped> {
        Some(Stopped {
            status: Some(ExitStatus::from_raw(0)),
            killed: false,
            took: Duration::from_secs_f64(took_ms / 1e3),
            signalled_ns: 0,
            reaped_ns: 0,
        })
    }

    #[test]
    fn the_parts_read_in_order_with_their_evidence() {
        let mut stop = record("stop", 1220.3);
        stop.measure.after = None;
        stop.measure.stopped = stopped(1220.3);
        let part = |phase, ms: f64| StopPart {
            phase,
            start_ns: 0,
            duration_ns: (ms * 1e6) as u64,
            observed: true,
            detail: String::new(),
        };
        stop.stop = Some(StopBreakdown {
            total_ns: 1_220_300_000,
            parts: vec![
                part(StopPhase::Signal, 0.1),
                part(StopPhase::Drain, 38.0),
                part(StopPhase::Exit, 0.2),
                part(StopPhase::Teardown, 1151.0),
                part(StopPhase::LastThread, 0.8),
                part(StopPhase::Reap, 30.2),
            ],
            teardown_source: Some(TeardownSource::ExitMmap),
            teardown_pages_freed: Some(5_600_000),
            drain_munmap_calls: 312,
            drain_munmap_bytes: 3435973837,
        });
        assert_eq!(
            paragraph(&stop, &[], None),
            "stop: 1,220 ms = 0.1 ms signal + 38 ms drain (312 munmap, 3.20 GiB) + 0.2 ms exit + \
             1,151 ms address-space teardown (5.6 M pages freed, timed by exit_mmap) + 0.8 ms last \
             thread + 30 ms reap; exit status: 0."
        );
    }

    #[test]
    fn without_probes_it_says_so() {
        let mut stop = record("stop", 84.0);
        stop.measure.after = None;
        stop.measure.stopped = stopped(84.0);
        assert_eq!(
            paragraph(&stop, &[], None),
            "stop: 84 ms until the host was reaped (exit status: 0); no breakdown without probes."
        );
    }
}
