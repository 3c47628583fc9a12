//! The stop breakdown against the real kernel: a process holding more than 1 GiB is stopped
//! with SIGTERM (it drains some memory with munmap, then exits), and the breakdown's parts,
//! cut at the instants the exit probes recorded, must account for the measured stop time.
//!
//! Where fexit on `exit_mmap` attaches (a stock kernel: the kernel matrix's guest), it times
//! the address-space teardown directly, and the rss_stat-bounded estimate this machine's
//! kernel relies on must agree with it (see [`TEARDOWN_TOLERANCE`]). The breakdowns are saved
//! for the kernel matrix (`SKILLPROF_MATRIX_OUT`).
//!
//! Root only (CI runs it as root); without root it fails loudly.

mod common;

use common::exercise::{
    Exercise, KernelKind, Selection, assert_attached, assert_mechanisms, int, kernel_kind, row,
    save_result,
};
use common::require_root;
use serde_json::json;
use skillprof::producers::hostctl::process::monotonic_ns;
use skillprof::producers::probes::{ProbeOptions, ProbeSession, StopTimeline, stop_breakdown};
use skillprof::record::Row;
use skillprof::record::probes::{ProbeMode, StopBreakdown, TeardownSource};

/// What these tests do that needs root.
const ROOT: &str = "the probe tests load BPF programs";

const HOLD_MIB: u64 = 1280;
const DRAIN_MIB: u64 = 128;

/// How much of the exit_mmap time the rss_stat bounds may miss.
///
/// The rss_stat window (first to last change of the mm's RSS counters) lies inside exit_mmap
/// by construction: the counters change while exit_mmap zaps the page tables. It misses the
/// start of exit_mmap (mmu notifiers, LRU drain, up to the first batch of zapped PTEs) and the
/// end (the last TLB batch's pages freed, then the page tables and the VMAs). Measured in the
/// kernel matrix's Debian 6.1 guest (qemu software emulation, 2 vCPUs; `scripts/kernel-matrix.sh
/// --stop-runs 10`, twice), 1154 MiB torn down in 728-1396 ms: over 20 runs the window missed
/// 0.67-1.22% of exit_mmap (median 1.07%), 0.15-0.37 ms at the start and 7.7-15 ms at the
/// end. 3% is 2.5 times the largest miss seen: scheduling noise in the emulated guest passes,
/// while an estimate that loses a real part of the teardown (say, the page-table freeing
/// growing to tens of ms, or RSS updates batched away from the zap) fails.
const TEARDOWN_TOLERANCE: f64 = 0.03;

#[test]
fn stop_breakdown_of_a_process_holding_over_a_gigabyte_adds_up() {
    require_root(ROOT);
    let mut exercise = Exercise::start();
    let pid = exercise.pid();
    let mut session = ProbeSession::start(
        pid,
        &ProbeOptions {
            mode: ProbeMode::Exact,
            max_entries: 3,
            ..ProbeOptions::default()
        },
    )
    .unwrap();
    assert_attached(session.statuses(), &["syscalls", "exit", "rss_stat"]);
    assert_mechanisms(session.statuses(), Selection::All);

    session.begin_entry(1).unwrap();
    exercise.cmd(&format!("hold {HOLD_MIB}"));
    exercise.cmd(&format!("drain-on-sigterm {DRAIN_MIB}"));
    let rss_kb = procfs_rss_kb(pid);
    assert!(rss_kb >= 1 << 20, "the workload holds only {rss_kb} kB");

    session.begin_entry(2).unwrap();
    session.arm_stop().unwrap();
    exercise.send("wait-sigterm");
    assert_eq!(exercise.read_line(), "ok waiting");
    let sent = monotonic_ns();
    // SAFETY: signals our own child, which is alive (it just answered).
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGTERM) }, 0);
    let status = exercise.child.wait().unwrap();
    let reaped = monotonic_ns();
    assert!(status.success(), "the workload exited with {status}");

    let timeline = session.stop_timeline().unwrap();
    println!("{timeline:#?}");
    let breakdown = stop_breakdown(&timeline, sent, reaped);
    // The estimate this machine's kernel gives: the same timeline without exit_mmap.
    let estimate = stop_breakdown(
        &StopTimeline {
            exit_mmap_ns: None,
            ..timeline.clone()
        },
        sent,
        reaped,
    );
    let measured = reaped - sent;
    println!("stop took {:.3} ms:", measured as f64 / 1e6);
    for part in &breakdown.parts {
        println!(
            "  {:12} {:>10.3} ms  {}{}",
            part.phase.name(),
            part.duration_ns as f64 / 1e6,
            part.detail,
            if part.observed { "" } else { " [NOT OBSERVED]" }
        );
    }
    let agreement = teardown_agreement(&timeline);
    save_result(
        "stop",
        json!({
            "hold_mib": HOLD_MIB,
            "drain_mib": DRAIN_MIB,
            "measured_ms": measured as f64 / 1e6,
            "timeline": timeline,
            "breakdown": breakdown,
            "breakdown_rss_stat": estimate,
            "agreement": agreement,
        }),
    );
    // fexit exit_mmap times the teardown wherever the kernel has function probes; the
    // rss_stat estimate agrees with it.
    match kernel_kind() {
        KernelKind::Preferred => {
            assert!(timeline.exit_mmap_attached, "{timeline:#?}");
            let agreement = agreement.expect("exit_mmap and rss_stat both observed");
            assert!(
                agreement.contained,
                "the rss_stat window is not inside exit_mmap: {agreement:#?}"
            );
            assert!(
                agreement.missed <= TEARDOWN_TOLERANCE,
                "the rss_stat estimate misses {:.2}% of exit_mmap's {:.3} ms (tolerance \
                 {:.0}%): {agreement:#?}",
                agreement.missed * 100.0,
                agreement.exit_mmap_ms,
                TEARDOWN_TOLERANCE * 100.0
            );
        }
        KernelKind::Fallback => {
            assert!(!timeline.exit_mmap_attached, "{timeline:#?}");
            assert_eq!(timeline.exit_mmap_ns, None);
        }
    }

    // The parts add up to the measured stop time (within 5%; by construction, exactly).
    let sum: u64 = breakdown.parts.iter().map(|p| p.duration_ns).sum();
    assert!(
        sum.abs_diff(measured) * 20 <= measured,
        "parts sum to {sum} ns, the stop took {measured} ns"
    );
    // ... and every cut was observed by the kernel, in order, inside the measured window:
    // nothing is made up by clamping.
    for part in &breakdown.parts {
        assert!(
            part.observed,
            "part {} was not observed: {breakdown:#?}",
            part.phase.name()
        );
    }
    // The kernel saw the SIGTERM, the drain, exit_group and the teardown.
    assert_eq!(timeline.signal, Some(libc::SIGTERM as u32));
    assert_eq!(timeline.drain_munmap_calls, DRAIN_MIB / 64);
    assert_eq!(timeline.drain_munmap_bytes, DRAIN_MIB << 20);
    assert!(timeline.exit_group_ns.is_some());
    let (start, end, source) = timeline.teardown().expect("no teardown observed");
    assert!(end > start, "an empty teardown");
    let expected = if timeline.exit_mmap_attached {
        TeardownSource::ExitMmap
    } else {
        TeardownSource::RssStat
    };
    assert_eq!(source, expected);
    // The teardown freed what was still held after the drain (within 5%).
    let pages = timeline
        .teardown_pages_freed
        .expect("no pages freed observed");
    let held_pages = (HOLD_MIB - DRAIN_MIB) * 256;
    assert!(
        pages * 100 >= held_pages * 95,
        "teardown freed {pages} pages; {held_pages} were held"
    );
    // The teardown of > 1 GiB is a real part of the stop.
    assert!(
        breakdown
            .part(skillprof::record::probes::StopPhase::Teardown)
            .unwrap()
            .duration_ns
            > 0
    );

    // The drain's munmaps are in the stop entry too.
    let stop = row(&session.entry(2).unwrap());
    assert_eq!(int(&stop, "munmap_calls"), DRAIN_MIB / 64);
    assert_eq!(int(&stop, "munmap_bytes"), DRAIN_MIB << 20);
    // The result record's stop columns.
    let mut cells = Row::default();
    StopBreakdown::write_cells(Some(&breakdown), &mut cells);
    assert_eq!(
        cells.csv("stop_teardown_by").as_deref(),
        Some(source.as_str()),
        "{cells:?}"
    );
    assert_eq!(int(&cells, "stop_drain_munmaps"), DRAIN_MIB / 64);
}

/// exit_mmap's timing against the rss_stat bounds, where both were observed.
#[derive(Debug, serde::Serialize)]
struct Agreement {
    exit_mmap_ms: f64,
    rss_stat_ms: f64,
    /// exit_mmap entry → first RSS change.
    start_gap_ms: f64,
    /// Last RSS change → exit_mmap return.
    end_gap_ms: f64,
    /// Whether the rss_stat window lies inside exit_mmap.
    contained: bool,
    /// The share of exit_mmap's time outside the rss_stat window.
    missed: f64,
    tolerance: f64,
}

fn teardown_agreement(timeline: &StopTimeline) -> Option<Agreement> {
    let (exit_start, exit_end) = timeline.exit_mmap_ns?;
    let (rss_start, rss_end) = timeline.rss_teardown_ns?;
    let ms = |ns: i128| ns as f64 / 1e6;
    let exit_ns = exit_end as i128 - exit_start as i128;
    let rss_ns = rss_end as i128 - rss_start as i128;
    let agreement = Agreement {
        exit_mmap_ms: ms(exit_ns),
        rss_stat_ms: ms(rss_ns),
        start_gap_ms: ms(rss_start as i128 - exit_start as i128),
        end_gap_ms: ms(exit_end as i128 - rss_end as i128),
        contained: rss_start >= exit_start && rss_end <= exit_end,
        missed: 1.0 - rss_ns as f64 / exit_ns.max(1) as f64,
        tolerance: TEARDOWN_TOLERANCE,
    };
    println!("teardown: {agreement:?}");
    Some(agreement)
}

fn procfs_rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap()
}
