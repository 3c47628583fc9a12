//! Only the host pays: in the host-only mode (the default of a session, of `run --attach` and
//! of `watch`) no program that runs for every process's syscalls or page faults is in the
//! kernel, read back from the kernel's own list of loaded BPF programs; in exact mode they
//! are, which shows the check can fail. The host-only mode's fault count is the kernel's
//! count of the process's faults, its per-skill rows come from the host's ledger with no
//! program per mark (exact mode reads each thread's skill from its slot in the ledger; the
//! marker's uprobe only streams marks with --events), and a detached session leaves the
//! ledger's lease at 0 (the host stops recording).
//!
//! One test in its own binary: the other probe tests load the same programs in parallel, and
//! the kernel's list is machine-wide. Root only (CI runs it as root); without root it fails
//! loudly.

mod common;

use common::exercise::Exercise;
use common::{loaded_ids, loaded_since, programs_of, require_root, taxing_programs};
use skillprof::producers::probes::{ProbeOptions, ProbeSession};
use skillprof::producers::sample::process;
use skillprof::record::probes::{Probe, ProbeMode};

const ROOT: &str = "the probe mode test loads BPF programs";

#[test]
fn the_default_mode_loads_no_program_that_taxes_other_processes() {
    require_root(ROOT);
    let taxing = taxing_programs();
    assert!(
        taxing.len() >= 4,
        "the syscall and fault plans name too few programs: {taxing:?}"
    );
    let mut exercise = Exercise::start();
    let pid = exercise.pid();

    let before = loaded_ids();
    let default = ProbeSession::start(
        pid,
        &ProbeOptions {
            max_entries: 2,
            ..ProbeOptions::default()
        },
    )
    .unwrap();
    let ours = loaded_since(&before);
    println!("default mode loaded: {ours:?}");
    assert!(
        !ours.contains("uprobe_mark"),
        "the default mode put a probe on the exercise's marker: {ours:?}"
    );
    let markers = default
        .statuses()
        .iter()
        .find(|status| status.probe == Probe::Markers)
        .unwrap();
    assert!(
        markers.attached && markers.detail.contains("ledger"),
        "{markers:?}"
    );
    assert!(lease(pid) > 0, "the session holds no lease on the ledger");
    let taxing_loaded: Vec<&String> = ours.intersection(&taxing).collect();
    assert!(
        taxing_loaded.is_empty(),
        "the default mode loaded programs that run for every process: {taxing_loaded:?}"
    );
    for probe in [Probe::Syscalls, Probe::PageFaults, Probe::MajorFaults] {
        let status = default
            .statuses()
            .iter()
            .find(|status| status.probe == probe)
            .unwrap();
        assert!(status.exact_only(), "{probe}: {status:?}");
        let flag = match probe {
            Probe::Syscalls => "--probes calls",
            _ => "--probes exact",
        };
        assert!(
            status.detail.contains(flag),
            "{probe} does not say how to get it: {}",
            status.detail
        );
    }

    // Its fault count is the kernel's: the probes count none, the process's own counter
    // moves by what the workload touched.
    exercise.cmd("mmap 1 4194304");
    let minflt_before = process::read(std::path::Path::new("/proc"), pid)
        .unwrap()
        .minflt;
    default.begin_entry(1).unwrap();
    exercise.cmd("mark 259");
    exercise.cmd("touch 1024");
    exercise.cmd("mark 0");
    let minflt_after = process::read(std::path::Path::new("/proc"), pid)
        .unwrap()
        .minflt;
    let metrics = default.entry(1).unwrap();
    assert_eq!(
        metrics.read(Probe::PageFaults, |c| c.faults.user),
        None,
        "the default mode counted faults with a program"
    );
    assert!(
        minflt_after - minflt_before >= 1024,
        "the kernel counted {} faults for 1,024 pages touched",
        minflt_after - minflt_before
    );
    // The ledger's row: the marked stretch's faults, its one call, and its two marks.
    let skills = metrics.skills.as_ref().expect("the ledger was read");
    let [called] = skills
        .iter()
        .filter(|row| row.skill.is_some())
        .collect::<Vec<_>>()[..]
    else {
        panic!("expected one skill row: {skills:#?}");
    };
    assert_eq!(called.name(), "exercise");
    assert_eq!(called.counts.phase.runs, 1, "{called:#?}");
    assert!(
        (1024..=minflt_after - minflt_before).contains(&called.counts.task.minflt),
        "the row has {} faults, the kernel counted {} around 1,024 touched",
        called.counts.task.minflt,
        minflt_after - minflt_before
    );
    assert_eq!(metrics.read(Probe::Markers, |c| c.marks.hits), Some(2));
    drop(default);
    assert_eq!(
        lease(pid),
        0,
        "the detached session left its lease on the ledger"
    );

    // Exact mode: the same programs are in the kernel while it runs.
    let before = loaded_ids();
    let exact = ProbeSession::start(
        pid,
        &ProbeOptions {
            max_entries: 2,
            mode: ProbeMode::Exact,
            ..ProbeOptions::default()
        },
    )
    .unwrap();
    let ours = loaded_since(&before);
    println!("exact mode loaded: {ours:?}");
    // Each call's skill comes from the thread's mark slot in its TLS: no probe on the marks.
    assert!(!ours.contains("uprobe_mark"), "{ours:?}");
    let markers = exact
        .statuses()
        .iter()
        .find(|status| status.probe == Probe::Markers)
        .unwrap();
    assert!(
        markers.attached && markers.detail.contains("from the thread's mark slot"),
        "{markers:?}"
    );
    assert!(
        ours.intersection(&taxing).next().is_some(),
        "exact mode loaded none of the syscall and fault programs {taxing:?}: {ours:?}"
    );
    drop(exact);

    // The calls mode (a lab run's default): the memory calls' programs, none on the faults,
    // whose counts are the kernel's as in the host-only mode.
    let before = loaded_ids();
    let calls = ProbeSession::start(
        pid,
        &ProbeOptions {
            max_entries: 2,
            mode: ProbeMode::Calls,
            ..ProbeOptions::default()
        },
    )
    .unwrap();
    let ours = loaded_since(&before);
    println!("calls mode loaded: {ours:?}");
    let syscalls = programs_of(|probe| probe == Probe::Syscalls);
    let faults = programs_of(|probe| probe == Probe::PageFaults);
    assert!(
        ours.intersection(&syscalls).next().is_some(),
        "the calls mode loaded none of the memory calls' programs {syscalls:?}: {ours:?}"
    );
    assert!(
        ours.intersection(&faults).next().is_none(),
        "the calls mode loaded a fault program: {ours:?}"
    );
    for probe in [Probe::PageFaults, Probe::MajorFaults] {
        let status = calls
            .statuses()
            .iter()
            .find(|status| status.probe == probe)
            .unwrap();
        assert!(
            status.exact_only() && status.detail.contains("--probes exact"),
            "{probe}: {status:?}"
        );
    }
    calls.begin_entry(1).unwrap();
    exercise.cmd("mark 259");
    exercise.cmd("mmap 1 4194304");
    exercise.cmd("mark 0");
    let metrics = calls.entry(1).unwrap();
    assert_eq!(metrics.read(Probe::PageFaults, |c| c.faults.user), None);
    let skills = metrics.skills.as_ref().expect("the ledger was read");
    assert!(
        skills
            .iter()
            .any(|row| row.skill.is_some()
                && row.counts.syscalls[skillprof_common::SYS_MMAP].calls >= 1),
        "the marked mmap is not the skill's: {skills:#?}"
    );
    drop(calls);

    // --no-markers: neither the ledger nor the marker's uprobe, and the probe table says why.
    let before = loaded_ids();
    let unmarked = ProbeSession::start(
        pid,
        &ProbeOptions {
            max_entries: 2,
            no_markers: true,
            ..ProbeOptions::default()
        },
    )
    .unwrap();
    let ours = loaded_since(&before);
    assert!(!ours.contains("uprobe_mark"), "{ours:?}");
    let markers = unmarked
        .statuses()
        .iter()
        .find(|status| status.probe == Probe::Markers)
        .unwrap();
    assert!(
        !markers.attached && markers.detail.contains("--no-markers"),
        "{markers:?}"
    );
    assert_eq!(lease(pid), 0, "--no-markers took a lease on the ledger");
    drop(unmarked);
    exercise.send("exit");
    let _ = exercise.child.wait();
}

/// The lease on process `pid`'s ledger (CLOCK_MONOTONIC ns; 0: nobody records), read from its
/// memfd through /proc as any other reader would.
fn lease(pid: u32) -> u64 {
    use std::io::Read as _;
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let line = maps
        .lines()
        .find(|line| line.contains("/memfd:skillhost-ledger"))
        .expect("the exercise keeps a ledger");
    let range = line.split_whitespace().next().unwrap();
    let mut header = [0u8; 24];
    std::fs::File::open(format!("/proc/{pid}/map_files/{range}"))
        .unwrap()
        .read_exact(&mut header)
        .unwrap();
    // magic (8), rows (4), used (4), then the lease.
    u64::from_le_bytes(header[16..24].try_into().unwrap())
}
