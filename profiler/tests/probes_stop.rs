//! The stop breakdown against the real kernel: a process holding more than 1 GiB is stopped
//! with SIGTERM (it drains some memory with munmap, then exits), and the breakdown's parts,
//! cut at the instants the exit probes recorded, must account for the measured stop time.
//!
//! Root only (CI runs it as root); without root it fails loudly.

mod probes_support;

use probes_support::{Exercise, int, monotonic_ns, require_root, row};
use skillprof::probes::{ProbeOptions, ProbeSession, TeardownSource, stop_breakdown};

const HOLD_MIB: u64 = 1280;
const DRAIN_MIB: u64 = 128;

#[test]
fn stop_breakdown_of_a_process_holding_over_a_gigabyte_adds_up() {
    require_root();
    let mut exercise = Exercise::start();
    let pid = exercise.pid();
    let session = ProbeSession::start(
        pid,
        &ProbeOptions {
            max_entries: 3,
            ..ProbeOptions::default()
        },
    )
    .unwrap();
    for probe in ["syscalls", "exit", "rss_stat"] {
        assert!(
            session
                .statuses()
                .iter()
                .any(|s| s.probe == probe && s.attached),
            "probe {probe} did not attach: {:#?}",
            session.statuses()
        );
    }

    session.begin_entry(1).unwrap();
    exercise.cmd(&format!("hold {HOLD_MIB}"));
    exercise.cmd(&format!("drain-on-sigterm {DRAIN_MIB}"));
    let rss_kb = procfs_rss_kb(pid);
    assert!(rss_kb >= 1 << 20, "the workload holds only {rss_kb} kB");

    session.begin_entry(2).unwrap();
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
    let measured = reaped - sent;
    println!("stop took {:.3} ms:", measured as f64 / 1e6);
    for part in &breakdown.parts {
        println!(
            "  {:12} {:>10.3} ms  {}{}",
            part.name,
            part.duration_ns as f64 / 1e6,
            part.detail,
            if part.observed { "" } else { " [NOT OBSERVED]" }
        );
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
            part.name
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
    assert!(breakdown.part("teardown").unwrap().duration_ns > 0);

    // The drain's munmaps are in the stop entry too.
    let stop = row(&session.entry(2).unwrap());
    assert_eq!(int(&stop, "munmap_calls"), DRAIN_MIB / 64);
    assert_eq!(int(&stop, "munmap_bytes"), DRAIN_MIB << 20);
    // The result record's stop columns.
    let cells = row(&breakdown);
    assert_eq!(
        cells.get("stop_teardown_by"),
        Some(source.as_str()),
        "{cells:?}"
    );
    assert_eq!(int(&cells, "stop_drain_munmaps"), DRAIN_MIB / 64);
}

fn procfs_rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap()
}
