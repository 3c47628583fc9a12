//! Exact counts against the real kernel: a deterministic workload does known syscalls and
//! touches a known number of pages, one step per entry, and the probes must attribute exactly
//! that to each entry. Also: the fallback mechanisms count the same as the preferred ones,
//! and `--events` streams what the aggregates counted.
//!
//! Root only (CI runs these as root); without root they fail loudly.

mod probes_support;

use std::collections::BTreeMap;

use probes_support::{Exercise, int, minflt, require_root, row};
use skillprof::{
    probes::{Mechanism, ProbeOptions, ProbeSession, columns},
    record::Row,
};

const KIB: u64 = 1024;
const MIB: u64 = 1 << 20;

/// The workload, one step per entry (entry 0 is everything before the first step).
const STEPS: &[(&str, &[&str])] = &[
    ("mmap", &["mmap 16 1048576", "mmap 8 262144"]),
    ("touch", &["touch 4000"]),
    ("munmap", &["munmap 3"]),
    ("madvise", &["madvise-dontneed"]),
    ("munmap-bad", &["munmap-bad"]),
    ("brk", &["brk 65536"]),
];
const TOUCHED: u64 = 4000;

/// Runs the workload with a boundary before each step in every session; returns the rows of
/// each session per entry, and the kernel's minflt delta per entry.
fn run_workload(exercise: &mut Exercise, sessions: &[&ProbeSession]) -> (Vec<Vec<Row>>, Vec<u64>) {
    let pid = exercise.pid();
    let mut minflt_deltas = Vec::new();
    for (i, (_, commands)) in STEPS.iter().enumerate() {
        let entry = i as u32 + 1;
        for session in sessions {
            session.begin_entry(entry).unwrap();
        }
        let before = minflt(pid);
        for command in *commands {
            exercise.cmd(command);
        }
        minflt_deltas.push(minflt(pid) - before);
    }
    let end = STEPS.len() as u32 + 1;
    for session in sessions {
        session.begin_entry(end).unwrap();
    }
    let rows = sessions
        .iter()
        .map(|session| {
            (1..end)
                .map(|entry| row(&session.entry(entry).unwrap()))
                .collect()
        })
        .collect();
    (rows, minflt_deltas)
}

fn options() -> ProbeOptions {
    ProbeOptions {
        max_entries: STEPS.len() as u32 + 2,
        ..ProbeOptions::default()
    }
}

/// The syscall columns every step expects; anything not listed must be 0.
fn expected_syscalls(step: &str) -> BTreeMap<&'static str, u64> {
    let mapped = 16 * MIB + 8 * 256 * KIB;
    match step {
        "mmap" => [("mmap_calls", 24), ("mmap_bytes", mapped)].into(),
        "munmap" => [("munmap_calls", 3), ("munmap_bytes", 3 * MIB)].into(),
        "madvise" => [
            // The oldest remaining mapping: the 4th 1 MiB one.
            ("madvise_calls", 1),
            ("madvise_bytes", MIB),
            ("madv_dontneed_calls", 1),
            ("madv_dontneed_bytes", MIB),
        ]
        .into(),
        "munmap-bad" => [
            ("munmap_calls", 1),
            ("munmap_bytes", 4 * KIB),
            ("munmap_errors", 1),
        ]
        .into(),
        "brk" => [("brk_calls", 1), ("brk_bytes", 64 * KIB)].into(),
        _ => BTreeMap::new(),
    }
}

fn syscall_count_columns() -> impl Iterator<Item = &'static str> {
    columns()
        .iter()
        .filter(|c| c.probe == "syscalls" && !c.name.contains("_lat_"))
        .map(|c| c.name.as_str())
}

fn check_exact(rows: &[Row], minflt_deltas: &[u64], label: &str) {
    for (i, ((step, _), row)) in STEPS.iter().zip(rows).enumerate() {
        let expected = expected_syscalls(step);
        for column in syscall_count_columns() {
            let want = expected.get(column).copied().unwrap_or(0);
            assert_eq!(
                int(row, column),
                want,
                "{label}: entry {} ({step}): {column}",
                i + 1
            );
        }
        // Every completed call has a latency, and no call takes longer than the sum.
        for name in ["mmap", "munmap", "madvise", "brk"] {
            let calls = int(row, &format!("{name}_calls"));
            let total: f64 = row.get(&format!("{name}_lat_us")).unwrap().parse().unwrap();
            let max: f64 = row
                .get(&format!("{name}_lat_max_us"))
                .unwrap()
                .parse()
                .unwrap();
            assert_eq!(calls > 0, total > 0.0, "{label}: {step}: {name} latency");
            assert!(max <= total + 0.001, "{label}: {step}: {name} max > total");
        }
    }
    // The touch step: at least one fault per page, and the kernel's own count within 0.5%.
    let touch = STEPS.iter().position(|(s, _)| *s == "touch").unwrap();
    let faults = int(&rows[touch], "faults_user");
    let writes = int(&rows[touch], "faults_user_write");
    let kernel = minflt_deltas[touch];
    println!(
        "{label}: touch step: {faults} faults ({writes} writes, faults_major={:?}), kernel \
         minflt delta {kernel}",
        rows[touch].get("faults_major")
    );
    assert!(
        faults >= TOUCHED,
        "{label}: {faults} faults for {TOUCHED} pages touched"
    );
    assert!(
        writes >= TOUCHED,
        "{label}: {writes} write faults for {TOUCHED} pages"
    );
    let off = faults.abs_diff(kernel) as f64 / kernel as f64;
    assert!(
        off <= 0.005,
        "{label}: {faults} faults counted, the kernel's minflt delta is {kernel} ({:.2}% off)",
        off * 100.0
    );
}

#[test]
fn exact_counts_are_attributed_to_their_entries() {
    require_root();
    let mut exercise = Exercise::start();
    let session = ProbeSession::start(exercise.pid(), &options()).unwrap();
    for status in session.statuses() {
        println!(
            "{:15} {:12} attached={} {}",
            status.probe, status.mechanism, status.attached, status.detail
        );
    }
    for probe in ["syscalls", "page_faults"] {
        assert!(
            session
                .statuses()
                .iter()
                .any(|s| s.probe == probe && s.attached),
            "probe {probe} did not attach: {:#?}",
            session.statuses()
        );
    }
    let (rows, minflt_deltas) = run_workload(&mut exercise, &[&session]);
    check_exact(&rows[0], &minflt_deltas, "preferred");

    // The profiler's own cost: every syscall/fault program ran and has a cost per run.
    let costs = session.costs().unwrap();
    assert!(costs.stats.is_some(), "BPF stats not enabled: {costs:#?}");
    for cost in &costs.programs {
        println!(
            "cost: {:15} {:28} {:10} runs {:>9.1} ns/run",
            cost.probe,
            cost.program,
            cost.runs,
            cost.ns_per_run.unwrap_or(0.0)
        );
    }
    for probe in ["syscalls", "page_faults"] {
        let programs: Vec<_> = costs.programs.iter().filter(|c| c.probe == probe).collect();
        assert!(
            programs.iter().any(|c| c.runs > 0),
            "no program of {probe} ran: {costs:#?}"
        );
        // A program that ran has a cost (programs for syscalls the workload never makes,
        // e.g. fentry on mremap, may not have run).
        for cost in programs.iter().filter(|c| c.runs > 0) {
            assert!(cost.ns_per_run.is_some_and(|ns| ns > 0.0), "{cost:#?}");
        }
    }
    assert!(costs.diagnostics.is_empty(), "{:#?}", costs.diagnostics);
}

#[test]
fn fallback_mechanisms_count_the_same_as_the_preferred_ones() {
    require_root();
    let mut exercise = Exercise::start();
    // Both at once on the same process: the same events, counted by two mechanisms.
    let preferred = ProbeSession::start(exercise.pid(), &options()).unwrap();
    let fallback = ProbeSession::start(
        exercise.pid(),
        &ProbeOptions {
            force_fallback: true,
            ..options()
        },
    )
    .unwrap();
    let mechanism = |session: &ProbeSession, probe: &str| {
        let status = session
            .statuses()
            .iter()
            .find(|s| s.probe == probe)
            .unwrap();
        assert!(status.attached, "{status:#?}");
        status.mechanism
    };
    for probe in ["syscalls", "page_faults"] {
        let (p, f) = (mechanism(&preferred, probe), mechanism(&fallback, probe));
        println!("{probe}: preferred {p}, fallback {f}");
        assert_eq!(
            f,
            Mechanism::Tracepoint,
            "{probe}: forced fallback attached {f}"
        );
        assert_ne!(
            p, f,
            "{probe}: the preferred mechanism is the fallback here"
        );
    }

    let (rows, minflt_deltas) = run_workload(&mut exercise, &[&preferred, &fallback]);
    check_exact(&rows[0], &minflt_deltas, "preferred");
    check_exact(&rows[1], &minflt_deltas, "fallback");
    let compared: Vec<&str> = columns()
        .iter()
        .filter(|c| matches!(c.probe, "syscalls" | "page_faults") && !c.name.contains("_lat_"))
        .map(|c| c.name.as_str())
        .collect();
    for (entry, (a, b)) in rows[0].iter().zip(&rows[1]).enumerate() {
        for column in &compared {
            // A column only one mechanism measures (faults_major: fexit only) is empty in the
            // other; everything both measure must be equal.
            if a.get(column) == Some("") || b.get(column) == Some("") {
                continue;
            }
            assert_eq!(
                a.get(column),
                b.get(column),
                "entry {}: {column} differs between the preferred and the fallback mechanism",
                entry + 1
            );
        }
    }
}

#[test]
fn events_stream_what_the_aggregates_count() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.csv");
    let mut exercise = Exercise::start();
    let session = ProbeSession::start(
        exercise.pid(),
        &ProbeOptions {
            events: Some(path.clone()),
            ..options()
        },
    )
    .unwrap();
    let (rows, _) = run_workload(&mut exercise, &[&session]);
    let written = session.finish_events().unwrap().unwrap();
    let costs = session.costs().unwrap();
    assert_eq!(costs.events_lost, 0, "{costs:#?}");
    // Everything sent before the stream was finished is in the file (system-wide events, e.g.
    // kswapd, may be sent after it).
    assert!(written > 0 && written <= costs.events_sent, "{costs:#?}");

    let csv = std::fs::read_to_string(&path).unwrap();
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("ts_ns,entry,tid,kind,fields"));
    let events: Vec<Vec<&str>> = lines.map(|l| l.splitn(5, ',').collect()).collect();
    assert_eq!(events.len() as u64, written);
    let count = |entry: u32, kind: &str| {
        events
            .iter()
            .filter(|e| e[1] == entry.to_string() && e[3] == kind)
            .count() as u64
    };
    for (i, row) in rows[0].iter().enumerate() {
        let entry = i as u32 + 1;
        for kind in ["mmap", "munmap", "madvise", "brk"] {
            assert_eq!(
                count(entry, kind),
                int(row, &format!("{kind}_calls")),
                "entry {entry}: {kind} events vs aggregate"
            );
        }
        assert_eq!(
            count(entry, "fault"),
            int(row, "faults_user"),
            "entry {entry} faults"
        );
        assert_eq!(int(row, "events_lost"), 0);
    }
    // CLOCK_MONOTONIC ns (they may interleave across CPUs).
    assert!(events.iter().all(|e| e[0].parse::<u64>().unwrap() > 0));
}
