//! Exact counts against the real kernel: a deterministic workload does known syscalls and
//! touches a known number of pages, one step per entry, and the probes must attribute exactly
//! that to each entry. Also: the fallback mechanisms count the same as the preferred ones,
//! and `--events` streams what the aggregates counted.
//!
//! Which mechanisms attach is asserted per kernel (`SKILLPROF_EXPECT_MECHANISMS`), and the
//! counts are saved (`SKILLPROF_MATRIX_OUT`) so that the kernel matrix can check that two
//! kernels, attaching by different mechanisms, attribute the same counts.
//!
//! Root only (CI runs these as root); without root they fail loudly.

mod common;

use std::collections::BTreeMap;

use common::exercise::{
    Exercise, Selection, assert_attached, assert_mechanisms, cell_json, int, kernel_stat,
    mechanisms_json, row, save_result,
};
use common::require_root;
use serde_json::{Value, json};
use skillprof::record::probes::{Mechanism, Probe, ProbeMode};
use skillprof::{
    producers::probes::{ProbeOptions, ProbeSession},
    record::Row,
    record::probes::probe_columns,
};

/// What these tests do that needs root.
const ROOT: &str = "the probe tests load BPF programs";

const KIB: u64 = 1024;
const MIB: u64 = 1 << 20;

/// The workload, one step per entry (entry 0 is everything before the first step).
const STEPS: &[(&str, &[&str])] = &[
    ("mmap", &["mmap 16 1048576", "mmap 8 262144"]),
    // Marked as skillhost marks a call (259: PHASE_CALL | PHASE_FIRST; 0: idle), so the
    // skill rows must carry exactly the touch step's faults.
    ("touch", &["mark 259", "touch 4000", "mark 0"]),
    ("read-into", &["read-into 500"]),
    ("populate", &["populate 100"]),
    ("munmap", &["munmap 3"]),
    ("madvise", &["madvise-dontneed"]),
    ("munmap-bad", &["munmap-bad"]),
    ("brk", &["brk 65536"]),
    ("mprotect-exec", &["mprotect-exec"]),
];
const TOUCHED: u64 = 4000;
/// Pages the kernel faults in while it copies into them (kernel-mode faults).
const READ_INTO: u64 = 500;
/// Pages populated through get_user_pages (MADV_POPULATE_WRITE): 44 left in the 7th 256 KiB
/// mapping after the steps before, then 56 in the 8th, so two calls.
const POPULATED: u64 = 100;

/// The kernel's own fault counts of the workload per entry (/proc/PID/stat deltas).
struct KernelFaults {
    minflt: Vec<u64>,
    /// Faults the kernel counted as major: those that read from disk, and those that were
    /// retried (FAULT_FLAG_TRIED), e.g. on a file page under I/O.
    majflt: Vec<u64>,
}

/// Runs the workload with a boundary before each step in every session; returns the rows of
/// each session per entry, and the kernel's own fault counts per entry.
fn run_workload(
    exercise: &mut Exercise,
    sessions: &[&ProbeSession],
) -> (Vec<Vec<Row>>, KernelFaults) {
    let pid = exercise.pid();
    let mut minflt_deltas = Vec::new();
    let mut majflt_deltas = Vec::new();
    for (i, (_, commands)) in STEPS.iter().enumerate() {
        let entry = i as u32 + 1;
        for session in sessions {
            session.begin_entry(entry).unwrap();
        }
        let before = kernel_stat(pid);
        for command in *commands {
            exercise.cmd(command);
        }
        let after = kernel_stat(pid);
        minflt_deltas.push(after.minflt - before.minflt);
        majflt_deltas.push(after.majflt - before.majflt);
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
    let kernel = KernelFaults {
        minflt: minflt_deltas,
        majflt: majflt_deltas,
    };
    (rows, kernel)
}

fn options() -> ProbeOptions {
    ProbeOptions {
        mode: ProbeMode::Exact,
        // Timed too: the latency probe attaches by each mechanism the syscalls probe does.
        syscall_latency: true,
        max_entries: STEPS.len() as u32 + 2,
        ..ProbeOptions::default()
    }
}

fn options_for(selection: Selection) -> ProbeOptions {
    ProbeOptions {
        force_fallback: selection.force_fallback(),
        mechanisms: selection.mechanisms(),
        ..options()
    }
}

/// One session's counts per entry, as the kernel matrix compares them across kernels.
fn session_json(selection: Selection, session: &ProbeSession, rows: &[Row]) -> Value {
    let counted: Vec<&str> = syscall_count_columns()
        .chain([
            "faults_user",
            "faults_user_write",
            "faults_major",
            "faults_kernel",
            "faults_gup",
        ])
        .collect();
    let entries: Vec<Value> = STEPS
        .iter()
        .zip(rows)
        .enumerate()
        .map(|(i, ((step, _), row))| {
            let counts: serde_json::Map<String, Value> = counted
                .iter()
                .map(|c| (c.to_string(), cell_json(row, c)))
                .collect();
            // Faults the kernel counts that this mechanism cannot see: the populate step's,
            // without fexit.
            let unseen = if *step == "populate" && row.csv("faults_gup").as_deref() == Some("") {
                POPULATED
            } else {
                0
            };
            json!({"entry": i + 1, "step": step, "counts": counts, "unseen_faults": unseen})
        })
        .collect();
    json!({
        "selection": selection.label(),
        "mechanisms": mechanisms_json(session.statuses()),
        "entries": entries,
    })
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
            // The errno, counted apart: a misaligned address is EINVAL.
            ("munmap_einval", 1),
        ]
        .into(),
        "populate" => [
            ("madvise_calls", 2),
            ("madvise_bytes", POPULATED * 4 * KIB),
            ("madv_populate_calls", 2),
            ("madv_populate_bytes", POPULATED * 4 * KIB),
        ]
        .into(),
        "brk" => [("brk_calls", 1), ("brk_bytes", 64 * KIB)].into(),
        // Code published: one page made executable.
        "mprotect-exec" => [
            ("mprotect_calls", 1),
            ("mprotect_bytes", 4 * KIB),
            ("exec_calls", 1),
            ("exec_bytes", 4 * KIB),
        ]
        .into(),
        _ => BTreeMap::new(),
    }
}

fn syscall_count_columns() -> impl Iterator<Item = &'static str> {
    probe_columns()
        .iter()
        // The ring buffer's own counts (events_*) sit with the syscalls but are not calls.
        .filter(|c| {
            c.probe == Probe::Syscalls
                && !c.column.name.contains("_lat_")
                && !c.column.name.starts_with("events_")
        })
        .map(|c| &*c.column.name)
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
            let total: f64 = row.csv(&format!("{name}_lat_us")).unwrap().parse().unwrap();
            let max: f64 = row
                .csv(&format!("{name}_lat_max_us"))
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
    assert_near_minflt(label, faults, kernel);

    // The read-into step: the kernel faults the fresh pages in while it copies, in kernel
    // mode; user-mode and kernel-mode faults together are the kernel's own count.
    let read = STEPS.iter().position(|(s, _)| *s == "read-into").unwrap();
    let in_kernel = int(&rows[read], "faults_kernel");
    let total = int(&rows[read], "faults_user") + in_kernel;
    let kernel = minflt_deltas[read];
    println!(
        "{label}: read-into step: {in_kernel} kernel-mode faults, {total} in all, kernel minflt \
         delta {kernel}"
    );
    assert!(
        in_kernel >= READ_INTO,
        "{label}: {in_kernel} kernel-mode faults for {READ_INTO} pages read into"
    );
    assert_near_minflt(label, total, kernel);

    // The populate step: get_user_pages faults, no exception. Only fexit handle_mm_fault sees
    // them; with any other mechanism they are exactly what the kernel counted beyond the
    // probes (and faults_gup is empty, not 0).
    let populate = STEPS.iter().position(|(s, _)| *s == "populate").unwrap();
    let row = &rows[populate];
    let seen = int(row, "faults_user") + int(row, "faults_kernel");
    let kernel = minflt_deltas[populate];
    let gup = row.csv("faults_gup").filter(|cell| !cell.is_empty());
    println!(
        "{label}: populate step: faults_gup={gup:?}, {seen} others, kernel minflt delta {kernel}"
    );
    match gup {
        Some(gup) => {
            let gup: u64 = gup.parse().unwrap();
            assert!(
                gup >= POPULATED,
                "{label}: {gup} get_user_pages faults for {POPULATED} pages"
            );
            assert_near_minflt(label, seen + gup, kernel);
        }
        None => assert_near_minflt(label, seen + POPULATED, kernel),
    }
}

/// Skill attribution: in every entry the skill rows sum to the entry's counts of memory calls;
/// the touch step's faults are the marked skill's (in `call`, by its thread's own count),
/// and no other step marked a skill.
fn check_skill_rows(session: &ProbeSession, rows: &[Row]) {
    use skillprof::record::probes::Phase;
    for (i, ((step, _), row)) in STEPS.iter().zip(rows).enumerate() {
        let entry = i as u32 + 1;
        let skills = session
            .entry(entry)
            .unwrap()
            .skills
            .expect("markers attached");
        let sum = |read: fn(&skillprof_common::SkillCounters) -> u64| -> u64 {
            skills.iter().map(|r| read(&r.counts)).sum()
        };
        let summed = [
            ("mmap_calls", sum(|c| c.syscalls[0].calls)),
            ("mmap_bytes", sum(|c| c.syscalls[0].bytes)),
            ("munmap_calls", sum(|c| c.syscalls[1].calls)),
            ("madvise_calls", sum(|c| c.syscalls[4].calls)),
            ("brk_calls", sum(|c| c.syscalls[5].calls)),
        ];
        for (column, value) in summed {
            assert_eq!(
                value,
                int(row, column),
                "entry {entry} ({step}): skill rows' {column}"
            );
        }
        let marked: Vec<_> = skills.iter().filter(|r| r.skill.is_some()).collect();
        if *step == "touch" {
            let [called] = marked.as_slice() else {
                panic!("touch: expected one skill row, got {skills:#?}");
            };
            assert_eq!(called.name(), "exercise");
            assert_eq!(called.phase, Phase::Call);
            assert_eq!(called.counts.phase.runs, 1);
            assert!(called.counts.task.minflt >= TOUCHED, "{called:#?}");
            println!(
                "skill rows: touch step: {} faults in exercise/call of {} in the entry",
                called.counts.task.minflt,
                int(row, "faults_user")
            );
        } else {
            assert!(
                marked.is_empty(),
                "{step}: no skill was marked: {marked:#?}"
            );
        }
    }
}

/// The probes' fault count of a step is the kernel's own (its minflt delta) within 0.5%.
fn assert_near_minflt(label: &str, counted: u64, kernel: u64) {
    let off = counted.abs_diff(kernel) as f64 / kernel as f64;
    assert!(
        off <= 0.005,
        "{label}: {counted} faults counted, the kernel's minflt delta is {kernel} ({:.2}% off)",
        off * 100.0
    );
}

#[test]
fn exact_counts_are_attributed_to_their_entries() {
    require_root(ROOT);
    let mut exercise = Exercise::start();
    // With the probes' own cost measured, which the end of this test checks.
    let measured = ProbeOptions {
        mode: ProbeMode::Exact,
        self_cost: true,
        ..options()
    };
    let session = ProbeSession::start(exercise.pid(), &measured).unwrap();
    for status in session.statuses() {
        println!(
            "{:15} {:12} attached={} {}",
            status.probe, status.mechanism, status.attached, status.detail
        );
    }
    assert_mechanisms(session.statuses(), Selection::All);
    // The workload has the marker, so the uprobe must attach on every kernel of the matrix.
    assert_attached(session.statuses(), &["syscalls", "page_faults", "markers"]);
    let (rows, kernel) = run_workload(&mut exercise, &[&session]);
    check_skill_rows(&session, &rows[0]);
    save_result(
        "exact-counts",
        json!({
            "sessions": [session_json(Selection::All, &session, &rows[0])],
            "kernel_minflt": kernel.minflt,
            "kernel_majflt": kernel.majflt,
        }),
    );
    check_exact(&rows[0], &kernel.minflt, "default");

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
    for probe in [Probe::Syscalls, Probe::PageFaults] {
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
    require_root(ROOT);
    let mut exercise = Exercise::start();
    // All at once on the same process: the same events, counted by every mechanism the
    // kernel allows. The preferred ones (fentry/fexit where allowed), fentry excluded
    // (kprobes where the kernel has them), and the forced fallback (each plan's last: the raw
    // syscall tracepoints, the classic fault tracepoints).
    let sessions: Vec<ProbeSession> = Selection::ALL
        .iter()
        .map(|selection| ProbeSession::start(exercise.pid(), &options_for(*selection)).unwrap())
        .collect();
    let mechanism = |session: &ProbeSession, probe: &str| {
        let status = session
            .statuses()
            .iter()
            .find(|s| s.probe.name() == probe)
            .unwrap();
        assert!(status.attached, "{status:#?}");
        status.mechanism
    };
    for (selection, session) in Selection::ALL.iter().zip(&sessions) {
        assert_mechanisms(session.statuses(), *selection);
    }
    let (preferred, fallback) = (&sessions[0], &sessions[2]);
    for (probe, last) in [
        ("syscalls", Mechanism::TpBtf),
        ("page_faults", Mechanism::Tracepoint),
    ] {
        let (p, k, f) = (
            mechanism(preferred, probe),
            mechanism(&sessions[1], probe),
            mechanism(fallback, probe),
        );
        println!("{probe}: preferred {p}, without fentry {k}, fallback {f}");
        assert_eq!(f, last, "{probe}: forced fallback attached {f}");
        assert_ne!(
            p, f,
            "{probe}: the preferred mechanism is the fallback here"
        );
    }

    let session_refs: Vec<&ProbeSession> = sessions.iter().collect();
    let (rows, kernel) = run_workload(&mut exercise, &session_refs);
    save_result(
        "mechanism-counts",
        json!({
            "sessions": Selection::ALL
                .iter()
                .zip(&sessions)
                .zip(&rows)
                .map(|((selection, session), rows)| session_json(*selection, session, rows))
                .collect::<Vec<_>>(),
            "kernel_minflt": kernel.minflt,
            "kernel_majflt": kernel.majflt,
        }),
    );
    for (selection, rows) in Selection::ALL.iter().zip(&rows) {
        check_exact(rows, &kernel.minflt, selection.label());
    }
    let compared: Vec<&str> = probe_columns()
        .iter()
        .filter(|c| {
            matches!(c.probe, Probe::Syscalls | Probe::PageFaults)
                && !c.column.name.contains("_lat_")
                && !c.column.name.starts_with("events_")
        })
        .map(|c| &*c.column.name)
        .collect();
    for (selection, other) in Selection::ALL.iter().zip(&rows).skip(1) {
        for (entry, (a, b)) in rows[0].iter().zip(other).enumerate() {
            for column in &compared {
                // A column only one mechanism measures (faults_major: fexit only) is empty in
                // the other; everything both measure must be equal.
                if a.csv(column).as_deref() == Some("") || b.csv(column).as_deref() == Some("") {
                    continue;
                }
                assert_eq!(
                    a.csv(column),
                    b.csv(column),
                    "entry {}: {column} differs between the preferred mechanism and {}",
                    entry + 1,
                    selection.label()
                );
            }
        }
    }
}

#[test]
fn events_stream_what_the_aggregates_count() {
    require_root(ROOT);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.csv");
    let mut exercise = Exercise::start();
    let session = ProbeSession::start(
        exercise.pid(),
        &ProbeOptions {
            mode: ProbeMode::Exact,
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
