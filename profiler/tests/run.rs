//! `skillprof run` end to end: the real binary runs workloads against the real skillhost,
//! and the files it leaves are checked against each other and against the workload.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use skillprof::ground::cmds::{self, InFlightCap};
use skillprof::record::Status;
use skillprof::record::host::TrimBy;
use skillprof::record::probes::{Mechanism, Outcome, Probe, ProbeMode};
use skillprof::record::profile::SkillWorld;
use skillprof::views::output::harness_log::RunLog;

mod common;
use common::cli::{
    CsvRow, alive, cell, csv_rows, describe, host_pid, long_workload, meta, repo_cmds, run,
    run_folder, run_ok, skillprof, smoke_cmds, start_long_run, write_cmds,
};
use common::outside_host::OutsideHost;
use common::prometheus::spin_every_cpu;

/// A CSV file's header and its rows by column name.
fn read_csv(path: &Path) -> (Vec<String>, Vec<CsvRow>) {
    let mut reader = csv::Reader::from_path(path).unwrap();
    let header = reader
        .headers()
        .unwrap()
        .iter()
        .map(str::to_owned)
        .collect();
    (header, csv_rows(path))
}

/// `name`, once the header says the file has it.
fn column<'a>(header: &[String], name: &'a str) -> &'a str {
    assert!(
        header.iter().any(|h| h == name),
        "no column {name} in {header:?}"
    );
    name
}

fn int(row: &CsvRow, column: &str) -> i64 {
    cell(row, column)
}

#[test]
fn smoke_run_leaves_four_consistent_files() {
    let out = tempfile::tempdir().unwrap();
    let cmds_file = smoke_cmds();
    // --self-cost: the probes' own cost measured (BPF stats on), checked in meta.json below.
    let (output, folder) = run_ok(&cmds_file, out.path(), &["--self-cost"]);
    let plan = cmds::read(&cmds_file, InFlightCap::DEFAULT).unwrap();

    // The harness log: the workload's hash and one line per entry, names as in the plan.
    let log =
        RunLog::read(&skillprof::views::output::harness_log::locate(&folder).unwrap()).unwrap();
    assert_eq!(log.header.cmds.hash, plan.hash);
    let names: Vec<&str> = log.entries.iter().map(|e| e.cmd.as_str()).collect();
    let planned: Vec<&str> = plan.entries.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, planned);

    // commands.csv: one row per entry, its diffs consistent with its before/after.
    let (header, rows) = read_csv(&folder.join("commands.csv"));
    assert_eq!(rows.len(), plan.entries.len());
    let [before, after, diff] =
        ["rss_before_kb", "rss_after_kb", "rss_diff_kb"].map(|c| column(&header, c));
    let [peak, errors] = ["rss_peak_kb", "request_errors"].map(|c| column(&header, c));
    for row in &rows {
        assert_eq!(
            int(row, diff),
            int(row, after) - int(row, before),
            "{row:?}"
        );
        assert!(
            int(row, peak) >= int(row, before).max(int(row, after)),
            "{row:?}"
        );
        assert_eq!(int(row, errors), 0, "{row:?}");
    }
    let stop = rows.last().unwrap();
    assert_eq!(stop[column(&header, "cmd")], "stop");
    assert_eq!(
        int(stop, diff),
        -int(stop, before),
        "stop frees everything: {stop:?}"
    );
    assert_eq!(int(stop, after), 0);
    assert_eq!(stop[column(&header, "exit_status")], "exit status: 0");
    for (row, logged) in rows.iter().zip(&log.entries) {
        assert_eq!(
            int(row, diff),
            logged.rss_diff_kb,
            "the log and the CSV agree"
        );
    }

    // The scheduler's counts of the host's threads: each entry before `stop` put one on a
    // CPU (a request wakes a thread to serve it), and `stop`, with the host gone, has none.
    let timeslices = column(&header, "sched_timeslices");
    for row in &rows[..rows.len() - 1] {
        assert!(int(row, timeslices) >= 1, "{row:?}");
    }
    assert_eq!(stop[timeslices], "", "{stop:?}");

    // Kernel evidence, attributed to the right entry, without a flag. The skill touches
    // every page of the 1,000 KB it allocates, so that entry saw at least 250 page faults by
    // the kernel's own count, which is all the faults a lab run's default has (no program on
    // every fault of the machine). Where the kernel traces the memory calls without a
    // syscall tracepoint (calls mode), the instance's memory was mapped and unmapped; where
    // it would take tracepoints (host-only, this VM), there are no call counts at all.
    let lab_default = meta(&folder).probes.unwrap().mode.unwrap();
    let [
        executions,
        minflt,
        faults_user,
        mmap_calls,
        munmap_calls,
        mmap_lat,
    ] = [
        "executions",
        "minflt",
        "faults_user",
        "mmap_calls",
        "munmap_calls",
        "mmap_lat_us",
    ]
    .map(|c| column(&header, c));
    let instantiate = column(&header, "host_instantiate_ms");
    let execute_skill = rows
        .iter()
        .find(|r| r["cmd"].starts_with("execute_skill"))
        .unwrap();
    assert_eq!(int(execute_skill, executions), 1);
    assert!(int(execute_skill, minflt) >= 250, "{execute_skill:?}");
    assert!(
        rows.iter().all(|row| row[faults_user].is_empty()),
        "no fault program, no fault column: {rows:?}"
    );
    match lab_default {
        ProbeMode::Calls => {
            assert!(int(execute_skill, mmap_calls) > 0, "{execute_skill:?}");
            assert!(int(execute_skill, munmap_calls) > 0, "{execute_skill:?}");
        }
        _ => assert!(
            rows.iter().all(|row| row[mmap_calls].is_empty()),
            "calls counted in {lab_default:?} mode: {rows:?}"
        ),
    }
    assert_eq!(
        execute_skill[mmap_lat], "",
        "calls timed without --syscall-latency: {execute_skill:?}"
    );
    // The host's descriptors against its limit, which it inherits from skillprof.
    let [fds_peak, fds_limit] = ["fds_peak", "fds_limit"].map(|c| column(&header, c));
    // SAFETY: getrlimit writes into the struct it is given.
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    assert_eq!(
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) },
        0
    );
    assert!(int(execute_skill, fds_peak) > 3, "{execute_skill:?}");
    assert_eq!(int(execute_skill, fds_limit) as u64, limit.rlim_cur);
    for row in rows.iter().filter(|r| int(r, executions) > 0) {
        assert!(
            !row[instantiate].is_empty(),
            "the host's Server-Timing split: {row:?}"
        );
    }
    // The stop breakdown's parts add up to its total, which is the stop's wall time.
    let number = |row: &CsvRow, name: &str| cell::<f64>(row, column(&header, name));
    let parts: f64 = ["signal", "drain", "exit", "teardown", "last_thread", "reap"]
        .iter()
        .map(|part| number(stop, &format!("stop_{part}_ms")))
        .sum();
    let total = number(stop, "stop_total_ms");
    assert!(
        (parts - total).abs() < 0.01,
        "parts {parts} vs total {total}"
    );
    assert!((total - number(stop, "took_ms")).abs() < 1.0, "{stop:?}");

    // delete_skill is timed as the 2024 harness timed it, the file's removal only: its wait
    // for the host to stop listing the skill is in listing_ms, and the next entry starts
    // after both.
    let deletes: Vec<usize> = (0..rows.len())
        .filter(|&i| rows[i]["cmd"].starts_with("delete_skill"))
        .collect();
    assert!(!deletes.is_empty());
    for i in deletes {
        let (delete, next) = (&rows[i], &rows[i + 1]);
        let listing = number(delete, "listing_ms");
        assert!(listing > 0.0, "{delete:?}");
        let between_ms = 1e3 * (number(next, "started_s") - number(delete, "started_s"));
        assert!(
            between_ms + 2.0 >= number(delete, "took_ms") + listing,
            "the wait is not in took_ms but still before the next entry: {delete:?} {next:?}"
        );
    }

    // One paragraph per entry, in order.
    let explanation = fs::read_to_string(folder.join("explain.md")).unwrap();
    assert!(
        explanation.contains("- probe cost mode: measured (--self-cost: BPF stats on)"),
        "the head says how the probes' cost was taken:\n{explanation}"
    );
    // And what it came to against the host's CPU in the entries.
    assert!(
        explanation.contains("% of the host's") && explanation.contains("of CPU in the entries"),
        "the head gives the probes' cost as a share of the host's CPU:\n{explanation}"
    );
    let paragraphs: Vec<&str> = explanation
        .split("\n\n")
        .filter(|p| !p.trim().is_empty() && !p.starts_with('#') && !p.starts_with("- "))
        .collect();
    assert_eq!(paragraphs.len(), plan.entries.len());
    // drop_cached_skill evicted sample_rs1 and sample_rs2, so the next execute_all compiled
    // them again, which the markers' compile rows name.
    let recompiled = paragraphs
        .iter()
        .find(|p| p.starts_with("execute_all Smoke 0 0:"))
        .unwrap();
    assert!(
        recompiled.contains("sample_rs2 was compiled again (")
            && recompiled.contains("first in entry 1, `p_add_rs 2`"),
        "{recompiled}"
    );
    let deleted = paragraphs
        .iter()
        .find(|p| p.starts_with("delete_skill"))
        .unwrap();
    assert!(
        deleted.contains("the time counts removing the file only"),
        "{deleted}"
    );
    for (paragraph, entry) in paragraphs.iter().zip(&plan.entries) {
        assert!(
            paragraph.starts_with(&format!("{}: ", entry.name)),
            "{paragraph:?}"
        );
    }

    // samples.csv: a constant column count, entries tagged in order.
    let (header, samples) = read_csv(&folder.join("samples.csv"));
    assert!(
        samples.len() >= plan.entries.len(),
        "at least the boundary samples"
    );
    let entry = column(&header, "entry");
    let tags: Vec<i64> = samples
        .iter()
        .filter(|r| !r[entry].is_empty())
        .map(|r| int(r, entry))
        .collect();
    assert!(tags.windows(2).all(|w| w[0] <= w[1]), "entries in order");
    assert_eq!(*tags.last().unwrap() as usize, plan.entries.len() - 1);

    let meta = meta(&folder);
    assert_eq!(meta.status, Status::Complete);
    assert_eq!(meta.cmds.hash, plan.hash);
    assert_eq!(meta.entries_run, plan.entries.len());
    assert!(meta.host.sha1.len() == 40);
    assert_eq!(
        meta.host.config.as_ref().unwrap()["engine"]["allocator"],
        "on-demand",
        "the host's own config (the host's document, not skillprof's)"
    );
    let probes = meta.probes.as_ref().unwrap();
    assert!(probes.enabled);
    // The mode is the kernel's, and the run says why: the memory calls traced by function
    // probes, or left out where only syscall tracepoints would trace them.
    let why = probes.mode_why.as_deref().expect("why the kernel's mode");
    let statuses = &probes.statuses;
    let syscalls = statuses
        .iter()
        .find(|s| s.probe == Probe::Syscalls)
        .unwrap();
    match lab_default {
        ProbeMode::Calls => assert!(
            syscalls.attached
                && matches!(syscalls.mechanism, Mechanism::Fentry | Mechanism::Kprobe)
                && why.contains("function probes"),
            "{why}: {syscalls:?}"
        ),
        ProbeMode::HostOnly => {
            // Each function probe's refusal named.
            assert!(
                syscalls.exact_only()
                    && why.contains("fentry: ")
                    && why.contains("kprobe: ")
                    && why.contains("--probes calls"),
                "{why}: {syscalls:?}"
            );
        }
        ProbeMode::Exact => panic!("exact mode without a flag: {why}"),
    }
    for exact_only in [Probe::PageFaults, Probe::MajorFaults] {
        assert!(
            statuses.iter().any(|s| s.probe == exact_only
                && !s.attached
                && s.attempts[0].outcome == Outcome::ExactOnly),
            "{exact_only} is not left to exact mode: {statuses:?}"
        );
    }
    // The calls' latency: not asked for where the calls are traced, else left with them.
    let unasked = match lab_default.traces_calls() {
        true => Outcome::NotAsked,
        false => Outcome::ExactOnly,
    };
    assert!(
        statuses.iter().any(|s| s.probe == Probe::SyscallLatency
            && !s.attached
            && s.attempts[0].outcome == unasked),
        "{statuses:?}"
    );
    let explain = fs::read_to_string(folder.join("explain.md")).unwrap();
    assert!(
        explain.contains(&format!("probe mode: {} ({why})", lab_default.as_str())),
        "{explain}"
    );
    let costs = probes.costs.as_ref().unwrap();
    assert!(costs.total_runs > 0, "the profiler's own cost");
    // The count's own floor, measured beside the programs, not among them, and said.
    let floor = costs
        .floor
        .unwrap_or_else(|| panic!("no floor: {:?}", costs.floor_error));
    assert!(
        floor.runs > 0
            && floor.ns_per_run().is_some_and(|ns| ns > 0.0)
            && !costs
                .programs
                .iter()
                .any(|p| p.program == "btf_count_floor"),
        "{floor:?}"
    );
    assert!(
        explain.contains("an empty program on the scheduler's wakeups reads"),
        "{explain}"
    );

    // The run prints its own comparison-style table.
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.starts_with("Evaluating: cmds="), "{stdout}");
    assert!(stdout.contains("Total time (ms)"), "{stdout}");
}

/// `recorded`: the entries in the files; the host's death keeps the entry it died in, an
/// interruption does not.
fn assert_incomplete_but_whole(folder: &Path, reason: &str, recorded: usize) {
    let meta = meta(folder);
    assert_eq!(meta.status, Status::Incomplete, "{meta:?}");
    let why = meta.reason.as_deref().unwrap();
    assert!(
        why.contains(reason),
        "reason {why:?} should mention {reason:?}"
    );
    let entries = [
        "0: add_rs",
        "1: execute_skill sample_rs1 Long 0 60000",
        "2: skills",
        "3: stop",
    ];
    assert_eq!(meta.entries_not_run, entries[recorded..]);
    // Every file is there and parses, with the recorded entries in each.
    let log =
        RunLog::read(&skillprof::views::output::harness_log::locate(folder).unwrap()).unwrap();
    assert_eq!(log.entries.len(), recorded);
    let (_, rows) = read_csv(&folder.join("commands.csv"));
    assert_eq!(rows.len(), recorded);
    let (_, samples) = read_csv(&folder.join("samples.csv"));
    assert!(!samples.is_empty());
}

#[test]
fn a_host_killed_mid_run_leaves_whole_files_and_a_failed_run() {
    let out = tempfile::tempdir().unwrap();
    let (child, folder) = start_long_run(out.path(), &long_workload(out.path()), &[]);
    // SAFETY: kill(2) on the host's pid.
    assert_eq!(unsafe { libc::kill(host_pid(&folder), libc::SIGKILL) }, 0);
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    assert_incomplete_but_whole(&folder, "the host exited on its own", 2);
    assert!(
        meta(&folder).oom_killed.is_none(),
        "a plain SIGKILL is no OOM kill"
    );
    assert!(
        meta(&folder)
            .reason
            .is_some_and(|why| why.contains("signal: 9"))
    );
}

#[test]
fn ctrl_c_stops_the_host_finishes_the_files_and_exits_130() {
    let out = tempfile::tempdir().unwrap();
    let (child, folder) = start_long_run(out.path(), &long_workload(out.path()), &[]);
    let host = host_pid(&folder);
    // SAFETY: kill(2) on our child's pid.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(130), "{}", describe(&output));
    assert_incomplete_but_whole(&folder, "SIGINT", 1);
    assert!(!alive(host as u64), "the host was stopped");
}

#[test]
fn an_invalid_workload_is_refused_before_anything_starts() {
    let out = tempfile::tempdir().unwrap();
    let cmds_file = out.path().join("bad.cmds");
    fs::write(
        &cmds_file,
        "add_py\nexecute_skill sample_py1 Alice lots\n0 skills\nfly_away\n",
    )
    .unwrap();
    let runs = out.path().join("runs");
    let output = run(&cmds_file, &runs, &[]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    let file = cmds_file.display();
    for line in [2, 3, 4] {
        assert!(
            stderr.contains(&format!("{file}:{line}: ")),
            "line {line} reported:\n{stderr}"
        );
    }
    assert!(!runs.exists(), "nothing started");
}

/// A short workload for the tests that only need a host doing something.
fn short_workload(dir: &Path) -> PathBuf {
    let path = dir.join("short.cmds");
    fs::write(&path, "add_rs\nexecute_skill sample_rs1 Short 1000 0\n").unwrap();
    path
}

#[test]
fn without_probes_the_probe_columns_are_empty_not_zero() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs");
    let cmds_file = short_workload(dir.path());
    let (output, folder) = run_ok(&cmds_file, &out, &["--no-probes"]);
    let (header, rows) = read_csv(&folder.join("commands.csv"));
    for name in [
        "faults_user",
        "mmap_calls",
        "direct_reclaim_count",
        "stop_total_ms",
    ] {
        let index = column(&header, name);
        assert!(
            rows.iter().all(|r| r[index].is_empty()),
            "{name} must be empty without probes"
        );
    }
    assert!(
        int(&rows[1], column(&header, "minflt")) > 0,
        "procfs still measures"
    );
    assert!(!meta(&folder).probes.unwrap().enabled);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("probes off (--no-probes)"),
        "says so loudly: {stderr}"
    );
}

/// Runs `skillprof run` as the unprivileged user nobody.
/// `--json` prints the typed records on stdout and nothing else, with the figures
/// commands.csv shows; `--run-dir` is the exact folder, and a second run into it is refused
/// with the first run's files untouched.
#[test]
fn json_puts_the_records_on_stdout_and_run_dir_is_the_exact_folder() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("exact");
    let cmds_file = short_workload(dir.path());
    let json_run = |extra: &[&str]| {
        skillprof()
            .arg("run")
            .arg(&cmds_file)
            .arg("--run-dir")
            .arg(&folder)
            .args(["--no-probes", "--json"])
            .args(extra)
            .output()
            .unwrap()
    };
    let output = json_run(&[]);
    assert!(output.status.success(), "{}", describe(&output));
    let document: serde_json::Value =
        serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
            panic!(
                "stdout is one JSON document ({error}): {}",
                describe(&output)
            )
        });
    assert_eq!(document["run_dir"], folder.display().to_string());
    assert_eq!(document["meta"]["status"], "complete");
    assert_eq!(
        document["meta"]["cmds"]["hash"],
        meta(&folder).cmds.hash.as_str()
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("run folder:"),
        "the prose goes to stderr: {stderr}"
    );

    let (header, rows) = read_csv(&folder.join("commands.csv"));
    let entries = document["entries"].as_array().unwrap();
    assert_eq!(entries.len(), rows.len());
    let mut read_after = 0;
    for (entry, row) in entries.iter().zip(&rows) {
        let measure = &entry["measure"];
        assert_eq!(measure["cmd"], row[column(&header, "cmd")].as_str());
        // The closing stop has no host left to read afterwards.
        if !measure["after"].is_null() {
            let after = |field: &str| measure["after"][field].as_i64().unwrap();
            let before = measure["before"]["minflt"].as_i64().unwrap();
            assert_eq!(after("rss_kb"), int(row, column(&header, "rss_after_kb")));
            assert_eq!(
                after("minflt") - before,
                int(row, column(&header, "minflt"))
            );
            read_after += 1;
        }
        let took_ms = measure["took"]["secs"].as_f64().unwrap() * 1e3
            + measure["took"]["nanos"].as_f64().unwrap() / 1e6;
        let csv_ms: f64 = row[column(&header, "took_ms")].parse().unwrap();
        assert!(
            (took_ms - csv_ms).abs() < 0.01,
            "{took_ms} against {csv_ms}"
        );
    }
    assert!(
        read_after >= 2,
        "add_rs and execute_skill read the host afterwards"
    );

    let files = |folder: &Path| {
        let mut names: Vec<_> = fs::read_dir(folder)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        names
    };
    let before = files(&folder);
    let again = json_run(&[]);
    assert!(!again.status.success(), "{}", describe(&again));
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(stderr.contains("is not empty"), "{stderr}");
    assert!(again.stdout.is_empty(), "no document for a refused run");
    assert_eq!(
        files(&folder),
        before,
        "the first run's files stay as they were"
    );
}

fn run_as_nobody(dir: &Path, extra: &[&str]) -> Output {
    let out = dir.join("runs");
    fs::create_dir_all(&out).unwrap();
    // nobody needs to write the run folder and read the workload.
    Command::new("chmod")
        .args(["-R", "a+rwx"])
        .arg(dir)
        .status()
        .unwrap();
    Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .arg(env!("CARGO_BIN_EXE_skillprof"))
        .arg("run")
        .arg(short_workload(dir))
        .arg("--out")
        .arg(&out)
        .args(extra)
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("setpriv (util-linux) runs the binary unprivileged")
}

#[test]
fn without_root_a_run_refuses_and_starts_nothing_unless_told_no_probes() {
    let dir = tempfile::tempdir().unwrap();
    let refused = run_as_nobody(dir.path(), &[]);
    assert!(!refused.status.success(), "{}", describe(&refused));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("needs root") && stderr.contains("--no-probes"),
        "{stderr}"
    );
    assert_eq!(
        fs::read_dir(dir.path().join("runs")).unwrap().count(),
        0,
        "nothing started"
    );

    // A balloon squeezes the whole machine: no pressure without root either.
    let squeezed = run_as_nobody(dir.path(), &["--no-probes", "--pressure", "high"]);
    assert!(!squeezed.status.success(), "{}", describe(&squeezed));
    let stderr = String::from_utf8_lossy(&squeezed.stderr);
    assert!(
        stderr.contains("--pressure high") && stderr.contains("needs root"),
        "{stderr}"
    );
    assert_eq!(fs::read_dir(dir.path().join("runs")).unwrap().count(), 0);

    let procfs_only = run_as_nobody(dir.path(), &["--no-probes"]);
    assert!(procfs_only.status.success(), "{}", describe(&procfs_only));
    let folder = run_folder(&dir.path().join("runs"));
    assert!(!meta(&folder).probes.unwrap().enabled);
}

/// The 2024 host end to end: skillhost speaking its dialect and running only its world
/// (`--api pharia-2024`), driven through the `pharia-kernel-2024` profile (namespaced names,
/// the bearer header, unsorted listings, the encoded drop route, the `pharia:skill@0.2`
/// samples) over the two reference workloads that use every command kind they share with
/// the 2024 harness: bench.cmds and p_execute_all.cmds.
#[test]
fn the_pharia_2024_host_runs_bench_and_p_execute_all_with_its_own_skills_without_errors() {
    // The 2024 host compiled one skill at a time: the fifteen Python copies of the two
    // workloads took six minutes of the suite. They are one file, compiled once here: the
    // dialect is what this test is about, and the first add still compiles.
    runs_through_its_profile(
        "pharia-kernel-2024",
        &["--api", "pharia-2024", "--share-identical"],
        &["bench.cmds", "p_execute_all.cmds"],
    );
}

/// The 2025 engine's dialect end to end (`--api pharia-2025`) through the
/// `pharia-engine-2025` profile: the skill named in the path, the input as the body, the
/// two-segment drop route, statuses of success per route.
#[test]
fn the_pharia_2025_host_runs_bench_with_its_own_skills_without_errors() {
    // With the engine's incremental compilation cache, as the real_hosts benchmark emulates it.
    runs_through_its_profile(
        "pharia-engine-2025",
        &["--api", "pharia-2025", "--incremental-cache-mib", "128"],
        &["bench.cmds"],
    );
}

/// skillhost started with `emulation` (`--api` first) through the host profile `profile`,
/// over `workloads`: no request fails, the host counts every execution, the exact mode's
/// probes attribute its faults.
fn runs_through_its_profile(profile: &str, emulation: &[&str], workloads: &[&str]) {
    let api = emulation[1];
    let dir = tempfile::tempdir().unwrap();
    let host = [
        // The probes' per-call counts of the host, below, whatever the kernel's default.
        "--probes",
        "calls",
        "--host-profile",
        profile,
        "--",
        "--skills-dir",
        "{skills_dir}",
        "--port",
        "{port}",
        "--scan-interval-ms",
        "50",
    ];
    let host = [&host[..], emulation].concat();
    for &workload in workloads {
        let out = dir.path().join(workload);
        let (output, folder) = run_ok(&repo_cmds(workload), &out, &host);
        let meta = meta(&folder);
        assert_eq!(meta.request_errors, 0, "{}", describe(&output));
        assert_eq!(meta.status, Status::Complete);
        assert_eq!(meta.host.spec.profile, profile);
        assert_eq!(meta.host.spec.registry.world, SkillWorld::Pharia);
        assert_eq!(meta.host.spec.dialect.namespace.as_deref(), Some("dev"));
        assert_eq!(meta.host.config.as_ref().unwrap()["api"], api);
        let explanation = fs::read_to_string(folder.join("explain.md")).unwrap();
        assert!(
            explanation.contains(&format!("({profile} profile)"))
                && explanation.contains("built for pharia:skill@0.2"),
            "{explanation}"
        );
        // Every entry ran its requests, and the host counted them; the probes attributed
        // the host's faults and syscalls.
        let (header, rows) = read_csv(&folder.join("commands.csv"));
        let [cmd, requests, errors, executions, counted] = [
            "cmd",
            "requests",
            "request_errors",
            "executions",
            "counted_requests",
        ]
        .map(|name| column(&header, name));
        for row in &rows {
            assert_eq!(int(row, errors), 0, "{row:?}");
            if row[cmd] != "stop" {
                assert!(int(row, requests) > 0, "{row:?}");
                assert_eq!(int(row, counted), int(row, executions), "{row:?}");
            }
        }
        let first_add = &rows[0];
        assert!(
            int(first_add, column(&header, "minflt")) > 10_000
                && int(first_add, column(&header, "mmap_calls")) > 0,
            "{first_add:?}"
        );
        if workload == "bench.cmds" {
            // The run compares like any other.
            let compared = skillprof()
                .args(["compare"])
                .arg(&folder)
                .arg(&folder)
                .output()
                .unwrap();
            assert!(compared.status.success(), "{}", describe(&compared));
            assert!(String::from_utf8_lossy(&compared.stdout).contains("add_py"));
        }
    }
}

/// A skill file copied in place, as the 2024 harness copied it (`--no-atomic-copy`): the
/// host lists it half-written; add_py then compiles the whole file, the host sees the file
/// changed and registers it again, and the next request compiles it a second time.
/// explain.md names that second compile, from the host's marks, and the host's own count of
/// compilations agrees.
#[test]
fn a_skill_copied_in_place_is_compiled_again_and_explain_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let (output, folder) = run_ok(
        &repo_cmds("in_place.cmds"),
        &dir.path().join("runs"),
        &["--no-atomic-copy", "--python-sample", "pure"],
    );
    let meta = meta(&folder);
    assert!(!meta.atomic_copy);
    assert_eq!(meta.request_errors, 0, "{}", describe(&output));
    let (header, rows) = read_csv(&folder.join("commands.csv"));
    let compilations = column(&header, "counted_compilations");
    assert_eq!(
        rows[..2]
            .iter()
            .map(|row| int(row, compilations))
            .collect::<Vec<_>>(),
        [1, 1],
        "{rows:?}"
    );
    let explanation = fs::read_to_string(folder.join("explain.md")).unwrap();
    let execute = explanation
        .lines()
        .find(|line| line.starts_with("execute_skill sample_py1"))
        .unwrap_or_else(|| panic!("{explanation}"));
    assert!(
        execute.contains("sample_py1 was compiled again (")
            && execute.contains("first in entry 0, `add_py`)"),
        "{execute}"
    );
    assert!(
        explanation.contains("written in place (--no-atomic-copy)"),
        "{explanation}"
    );
}

/// A host without markers still shows its compiles: wasmtime's `CodeMemory::publish`, seen by
/// a uprobe, once per component compiled, as often as the host's own count of compilations;
/// the requests in flight name the skill, and an eviction's second compile is "again".
#[test]
fn without_markers_a_compile_is_seen_as_code_published_and_named_by_the_request_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let cmds = dir.path().join("publish.cmds");
    fs::write(
        &cmds,
        "add_rs\nexecute_skill sample_rs1 Bob 0 0\ndrop_cached_skill sample_rs1\n\
         execute_skill sample_rs1 Bob 0 0\n",
    )
    .unwrap();
    let (output, folder) = run_ok(&cmds, &dir.path().join("runs"), &["--no-markers"]);
    let (header, rows) = read_csv(&folder.join("commands.csv"));
    let (publishes, compilations) = (
        column(&header, "code_publishes"),
        column(&header, "counted_compilations"),
    );
    let per_entry = |index| {
        rows[..4]
            .iter()
            .map(|row| int(row, index))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        per_entry(compilations),
        [1, 0, 0, 1],
        "{}",
        describe(&output)
    );
    assert_eq!(per_entry(publishes), per_entry(compilations));
    let explanation = fs::read_to_string(folder.join("explain.md")).unwrap();
    let line = |cmd: &str| {
        explanation
            .lines()
            .rfind(|line| line.starts_with(cmd))
            .unwrap_or_else(|| panic!("no {cmd} in {explanation}"))
    };
    assert!(
        line("add_rs:")
            .contains("1 module's code published (compiles), during requests for sample_rs1 (1):"),
        "{explanation}"
    );
    assert!(
        line("execute_skill sample_rs1").contains("during requests for sample_rs1 (1, again)"),
        "{explanation}"
    );
}

/// A pooled host that decommits freed slots in batches (a decommit_batch_size of 8) gives
/// memory back with one process_madvise(2) per batch, and with pages kept resident and its
/// pagemap scan on, finds what to reset with ioctl(PAGEMAP_SCAN): the default mode
/// counts each call (uprobes on wasmtime's decommit_pages and rustix's _ioctl), as strace
/// counts them from outside.
#[test]
fn a_pooled_hosts_batched_decommits_and_pagemap_scans_are_counted_as_strace_counts_them() {
    common::require_root("attaching probes and strace to a host");
    let dir = tempfile::tempdir().unwrap();
    // Pages kept resident: wasmtime resets them in place, found by PAGEMAP_SCAN, and
    // decommits the rest in batches of 8.
    let host = OutsideHost::start_with(
        dir.path(),
        &[
            "--allocator",
            "pooling",
            "--pool-decommit-batch-size",
            "8",
            "--pool-keep-resident",
            "65536",
            "--pool-pagemap-scan",
        ],
    );
    let pid = host.child.id().to_string();
    let traced = dir.path().join("strace.txt");
    let mut strace = Command::new("strace")
        .args(["-f", "-qq", "-e", "trace=process_madvise,ioctl", "-o"])
        .arg(&traced)
        .args(["-p", &pid])
        .stderr(Stdio::null())
        .spawn()
        .expect("strace (scripts/test.sh installs it)");
    // strace prints nothing until a call; give it time to seize every thread.
    std::thread::sleep(Duration::from_secs(1));
    let cmds_file = write_cmds(
        dir.path(),
        "pooled.cmds",
        "add_rs\n20 execute_all Pooled 100 0\n5 p_execute_all Pooled 100 0 4\n",
    );
    let (_, folder) = run_ok(
        &cmds_file,
        &dir.path().join("runs"),
        &[
            "--attach",
            &pid,
            "--host-url",
            &host.url(),
            "--skills-dir",
            host.skills.to_str().unwrap(),
        ],
    );
    // SAFETY: a signal to our own child; SIGINT makes strace detach and flush.
    unsafe { libc::kill(strace.id() as i32, libc::SIGINT) };
    strace.wait().unwrap();

    let text = fs::read_to_string(&traced).unwrap();
    let calls = strace_calls(&text);
    let madvised: Vec<i64> = calls
        .iter()
        .filter(|(name, _, _)| name == "process_madvise")
        .map(|(_, _, value)| *value)
        .collect();
    // strace 6.1 does not name PAGEMAP_SCAN: _IOWR('f', 16, 96 bytes).
    let scans = calls
        .iter()
        .filter(|(name, args, _)| {
            name == "ioctl" && (args.contains("PAGEMAP_SCAN") || args.contains("0x66, 0x10, 0x60"))
        })
        .count();
    let (header, rows) = read_csv(&folder.join("commands.csv"));
    let sum = |name: &str| -> i64 {
        let at = column(&header, name);
        rows.iter().map(|row| int(row, at)).sum()
    };
    assert!(
        !madvised.is_empty(),
        "the pooled host made no process_madvise call under strace:\n{text}"
    );
    assert_eq!(
        sum("process_madvise_calls"),
        madvised.len() as i64,
        "{text}"
    );
    assert_eq!(
        sum("process_madvise_bytes"),
        madvised.iter().filter(|r| **r >= 0).sum::<i64>(),
        "{text}"
    );
    assert!(sum("process_madvise_ranges") >= 2 * madvised.len() as i64);
    assert!(
        scans > 0,
        "the pooled host made no PAGEMAP_SCAN ioctl under strace:\n{text}"
    );
    assert_eq!(sum("pagemap_scan_calls"), scans as i64, "{text}");
    // Each scan walks at most a memory of the pool (4 GiB by default) and at least a page.
    let walked = sum("pagemap_scan_bytes");
    assert!(
        walked >= 4096 * scans as i64 && walked <= (4i64 << 30) * scans as i64,
        "{walked} bytes in {scans} scans"
    );
    let explain = fs::read_to_string(folder.join("explain.md")).unwrap();
    assert!(explain.contains(" process_madvise ("), "{explain}");
    assert!(explain.contains(" PAGEMAP_SCAN ("), "{explain}");
}

/// strace's lines as (syscall, arguments, return value), with a call another thread
/// interrupted (`TID name(args <unfinished ...>` then `TID <... name resumed>rest) = R`)
/// joined into one.
fn strace_calls(text: &str) -> Vec<(String, String, i64)> {
    let mut unfinished: std::collections::HashMap<&str, &str> = Default::default();
    let mut calls = Vec::new();
    for line in text.lines() {
        // strace pads the tid to five columns: "7757  ioctl(...", "21914 ioctl(...".
        let Some((tid, rest)) = line.split_once(' ') else {
            continue;
        };
        let rest = rest.trim_start();
        let whole = if let Some(start) = rest.strip_suffix(" <unfinished ...>") {
            unfinished.insert(tid, start);
            continue;
        } else if rest.starts_with("<... ") {
            let Some(start) = unfinished.remove(tid) else {
                continue;
            };
            let tail = rest.split_once(" resumed>").map_or("", |(_, tail)| tail);
            format!("{start}{tail}")
        } else {
            rest.to_owned()
        };
        let (Some((name, args)), Some((_, value))) =
            (whole.split_once('('), whole.rsplit_once(" = "))
        else {
            continue;
        };
        let Some(Ok(value)) = value.split_whitespace().next().map(str::parse) else {
            continue;
        };
        calls.push((name.to_owned(), args.to_owned(), value));
    }
    calls
}

#[test]
fn attaching_profiles_a_running_host_and_leaves_it_and_its_skills_alone() {
    let dir = tempfile::tempdir().unwrap();
    let host = OutsideHost::start(dir.path());
    let pid = host.child.id();
    let cmds_file = dir.path().join("attached.cmds");
    fs::write(
        &cmds_file,
        "add_rs\np_add_rs 2\nexecute_all Attached 300 0\n3 execute_all Attached 0 0\n\
         delete_skill\nskills\nstop\n",
    )
    .unwrap();
    let out = dir.path().join("runs");
    let (pid_text, url) = (pid.to_string(), host.url());
    let (output, folder) = run_ok(
        &cmds_file,
        &out,
        &[
            "--probes",
            "exact",
            "--attach",
            &pid_text,
            "--host-url",
            &url,
            "--skills-dir",
            host.skills.to_str().unwrap(),
        ],
    );

    // Left running, and every output says it was attached, not started.
    assert!(alive(pid.into()), "the attached host was stopped");
    let meta = meta(&folder);
    assert!(meta.host.attached);
    assert_eq!(meta.host.pid, Some(pid));
    assert_eq!(meta.request_errors, 0, "{}", describe(&output));
    let not_run = &meta.entries_not_run;
    assert!(
        not_run.len() == 1 && not_run[0].contains("stop"),
        "{not_run:?}"
    );
    let explanation = fs::read_to_string(folder.join("explain.md")).unwrap();
    assert!(
        explanation.contains(&format!(
            "attached to process {pid} (not started by skillprof)"
        )),
        "{explanation}"
    );

    let reported = skillprof().arg("report").arg(&folder).output().unwrap();
    assert!(reported.status.success(), "{}", describe(&reported));
    let page = fs::read_to_string(folder.join("report.html")).unwrap();
    assert!(page.contains(&format!(
        "attached to process {pid}, not started by skillprof"
    )));

    // The host's own count of executions served is the run's.
    let (header, rows) = read_csv(&folder.join("commands.csv"));
    let executions: i64 = rows
        .iter()
        .map(|row| int(row, column(&header, "executions")))
        .sum();
    let metrics = host.get("/metrics.json");
    let served =
        metrics["requests_ok"].as_i64().unwrap() + metrics["requests_failed"].as_i64().unwrap();
    assert_eq!(served, executions, "{metrics}");
    assert_eq!(executions, 1 + 2 + 3 + 3 * 3);
    // Entry by entry, the host's own count (its Prometheus /metrics, read at each boundary)
    // is the runner's; stop is not attached here, so every entry has one.
    for row in &rows {
        let counted = int(row, column(&header, "counted_requests"));
        assert_eq!(counted, int(row, column(&header, "executions")), "{row:?}");
    }
    // The probes followed the attached process.
    let add_rs = rows.iter().find(|row| row["cmd"] == "add_rs").unwrap();
    assert!(
        int(add_rs, column(&header, "faults_user")) > 0,
        "{add_rs:?}"
    );

    // Its own skill was neither executed nor deleted; ours were (sample_rs1 deleted).
    assert!(host.skills.join("their_own.wasm").exists());
    assert_eq!(host.get("/skills/their_own")["state"], "registered");
    assert!(!host.skills.join("sample_rs1.wasm").exists());

    // Attached without --probes, only the host pays: no syscall or fault program.
    let listing = dir.path().join("listing.cmds");
    fs::write(
        &listing, "skills
",
    )
    .unwrap();
    let (_, folder) = run_ok(
        &listing,
        &dir.path().join("host-only"),
        &["--attach", &pid_text, "--host-url", &url],
    );
    let probes = common::cli::meta(&folder).probes.unwrap();
    assert_eq!(probes.mode, Some(ProbeMode::HostOnly), "{probes:?}");
    let statuses = &probes.statuses;
    for taxing in [Probe::Syscalls, Probe::SyscallLatency, Probe::PageFaults] {
        assert!(
            statuses.iter().any(|s| s.probe == taxing
                && !s.attached
                && s.attempts[0].outcome == Outcome::ExactOnly),
            "{taxing} is not left out of an attached run: {statuses:?}"
        );
    }
    let explain = fs::read_to_string(folder.join("explain.md")).unwrap();
    assert!(explain.contains("probe mode: host-only"), "{explain}");
}

/// A request that touches 200 MiB and frees it before it answers: its entry's rss_peak_kb is
/// the kernel's high-water mark (reset at the entry's start), so it holds those 200 MiB
/// although the samples, 5 s apart, see the host only before and after; the after-command
/// RSS, the harness's figure, does not hold them.
#[test]
fn an_entrys_peak_is_the_kernels_high_water_mark_even_between_samples() {
    let dir = tempfile::tempdir().unwrap();
    let cmds_file = dir.path().join("peak.cmds");
    const TOUCHED_KB: i64 = 200 * 1024;
    fs::write(
        &cmds_file,
        format!("add_rs\nexecute_skill sample_rs1 Peak {TOUCHED_KB} 0\n"),
    )
    .unwrap();
    let (output, folder) = run_ok(
        &cmds_file,
        &dir.path().join("runs"),
        &["--interval-ms", "5000"],
    );
    let how = meta(&folder).rss_peak.unwrap_or_default();
    assert!(how.contains("VmHWM"), "{how}\n{}", describe(&output));
    let (header, rows) = read_csv(&folder.join("commands.csv"));
    let execute = rows
        .iter()
        .find(|row| row["cmd"].starts_with("execute_skill"))
        .unwrap();
    let [before, after, peak] =
        ["rss_before_kb", "rss_after_kb", "rss_peak_kb"].map(|c| int(execute, column(&header, c)));
    let held = peak - before;
    assert!(
        (held - TOUCHED_KB).abs() <= TOUCHED_KB / 20,
        "the peak held {held} KB over the entry's start, not {TOUCHED_KB} KB ± 5%: {execute:?}"
    );
    assert!(
        after - before < TOUCHED_KB / 10,
        "the instance's memory was kept: {execute:?}"
    );
}

#[test]
fn attaching_refuses_bad_input_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let host = OutsideHost::start(dir.path());
    let elsewhere = dir.path().join("not-watched");
    fs::create_dir_all(&elsewhere).unwrap();
    let cmds_file = dir.path().join("tiny.cmds");
    fs::write(&cmds_file, "add_rs\n").unwrap();
    let pid = host.child.id().to_string();
    let dead = "4194303".to_string();
    let closed = "http://127.0.0.1:1".to_string();
    let url = host.url();
    let skills = host.skills.to_str().unwrap();
    for (attach, url, dir_arg, why) in [
        (&dead, &url, skills, "no such process"),
        (&pid, &closed, skills, "does not answer"),
        (
            &pid,
            &url,
            elsewhere.to_str().unwrap(),
            "is it the directory the host watches?",
        ),
    ] {
        let out = dir.path().join("runs");
        let output = run(
            &cmds_file,
            &out,
            &[
                "--attach",
                attach,
                "--host-url",
                url,
                "--skills-dir",
                dir_arg,
                "--list-timeout-s",
                "2",
            ],
        );
        assert!(!output.status.success(), "{}", describe(&output));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(why), "{why}: {}", describe(&output));
        assert!(!out.exists(), "a run folder was made for bad input");
    }
    // The probe skill did not stay behind in the directory that is not watched.
    assert_eq!(fs::read_dir(&elsewhere).unwrap().count(), 0);
}

/// What holds the host's memory, entry by entry (`held_*`, from smaps): the parts sum to the
/// host's RSS within 1%. After a first Python compile most of the heap is memory malloc freed
/// and kept: skillhost's own figure of what it has in use is far below the heap's RSS, and
/// `--trim-after-compile` gives most of it back.
#[test]
fn the_hosts_memory_splits_by_holder_and_malloc_keeps_what_a_compile_freed() {
    let dir = tempfile::tempdir().unwrap();
    let cmds_file = dir.path().join("holders.cmds");
    fs::write(
        &cmds_file,
        "add_py\nexecute_skill sample_py1 Alice 1000 0\n",
    )
    .unwrap();
    let heap_after_add = |extra: &[&str]| {
        let out = dir.path().join(extra.len().to_string());
        let mut args = vec!["--python-sample", "pure", "--"];
        args.extend_from_slice(extra);
        let (output, folder) = run_ok(&cmds_file, &out, &args);
        let (header, rows) = read_csv(&folder.join("commands.csv"));
        let [rss, statm, heap, in_use, read_ms] = [
            "rss_after_kb",
            "held_statm_rss_kb",
            "held_heap_kb",
            "host_heap_in_use_kb",
            "held_read_ms",
        ]
        .map(|name| column(&header, name));
        let parts = ["heap", "wasm", "code", "files", "stacks"].map(|part| {
            let name = format!("held_{part}_kb");
            column(&header, &name);
            name
        });
        for row in &rows[..2] {
            let sum: i64 = parts.iter().map(|part| int(row, part)).sum();
            // The host may still be freeing what a compile left (one suite run: 7.9 MB
            // between the two readings after add_py), so the parts are held to the kernel's
            // RSS between its reading at the entry's end and the one right after smaps.
            let (rss, statm) = (int(row, rss), int(row, statm));
            let (low, high) = (rss.min(statm), rss.max(statm));
            assert!(
                sum * 100 >= low * 99 && sum * 100 <= high * 101,
                "the parts sum to {sum} KB, RSS read {rss} KB before them and {statm} KB \
                 after: {row:?}\n{}",
                describe(&output)
            );
            assert!(int(row, in_use) <= rss, "{row:?}");
            assert!(cell::<f64>(row, read_ms) > 0.0, "{row:?}");
        }
        let add = &rows[0];
        (int(add, heap), int(add, in_use))
    };
    let (heap, in_use) = heap_after_add(&[]);
    assert!(
        heap - in_use > 100 * 1024,
        "after the compile the heap holds {heap} KB, {in_use} KB of it in use: malloc kept \
         less than 100 MiB"
    );
    let (trimmed, _) = heap_after_add(&["--trim-after-compile"]);
    assert!(
        trimmed * 2 < heap,
        "--trim-after-compile left {trimmed} KB of heap, against {heap} KB without"
    );
}

/// `trim` gives back what the allocator kept after a compile, through skillhost's route and,
/// as for any glibc host, through ptrace. The thread the call borrows is put back as it was:
/// the host serves the next request and exits cleanly.
#[test]
fn trim_gives_back_what_malloc_kept_by_route_and_by_ptrace() {
    let dir = tempfile::tempdir().unwrap();
    let cmds_file = dir.path().join("trim.cmds");
    fs::write(
        &cmds_file,
        "add_py\ntrim\nexecute_skill sample_py1 Alice 1000 0\n",
    )
    .unwrap();
    for (by, trim_by_meta) in [("route", TrimBy::Route), ("ptrace", TrimBy::Ptrace)] {
        let out = dir.path().join(by);
        let (output, folder) = run_ok(
            &cmds_file,
            &out,
            &["--python-sample", "pure", "--trim-by", by],
        );
        let (header, rows) = read_csv(&folder.join("commands.csv"));
        let [heap, in_use, diff, errors, trim_by, exit] = [
            "held_heap_kb",
            "host_heap_in_use_kb",
            "rss_diff_kb",
            "request_errors",
            "trim_by",
            "exit_status",
        ]
        .map(|name| column(&header, name));
        let (add, trim, execute, stop) = (&rows[0], &rows[1], &rows[2], &rows[3]);
        let kept = int(add, heap) - int(add, in_use);
        assert!(kept > 100 * 1024, "malloc kept only {kept} KB: {add:?}");
        assert_eq!(trim[trim_by], by, "{trim:?}");
        let gave = -int(trim, diff);
        assert!(
            gave * 2 > kept,
            "{by}: the trim gave back {gave} KB of the {kept} KB malloc kept\n{}",
            describe(&output)
        );
        for row in [add, trim, execute] {
            assert_eq!(int(row, errors), 0, "{row:?}");
        }
        assert_eq!(
            stop[exit], "exit status: 0",
            "the host did not exit cleanly: {stop:?}"
        );
        assert_eq!(meta(&folder).trim_by, Some(trim_by_meta));
        let explanation = fs::read_to_string(folder.join("explain.md")).unwrap();
        let said = match by {
            "route" => "it had kept free (through the host's trim route",
            _ => "it had kept free (by ptrace: malloc_trim(0) in thread",
        };
        assert!(explanation.contains(said), "{explanation}");
    }

    // --trim-by on a workload without a trim line would do nothing: refused before anything.
    let no_trim = dir.path().join("no_trim.cmds");
    fs::write(&no_trim, "add_rs\n").unwrap();
    let out = dir.path().join("refused");
    let output = run(&no_trim, &out, &["--trim-by", "ptrace"]);
    assert!(!output.status.success(), "{}", describe(&output));
    assert!(
        String::from_utf8_lossy(&output.stderr)
            .contains("--trim-by ptrace says how trim lines reach the host's allocator, and"),
        "{}",
        describe(&output)
    );
    assert!(!out.exists(), "a refused run left {}", out.display());
}

/// A built sample, standing in for a component a user brings.
fn built_component(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../build/skills")
        .join(path)
}

/// A folder holding `weather.wasm`, a user's component (the Rust sample stands in).
fn folder_with_weather() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    fs::copy(
        built_component("sample_rs.wasm"),
        dir.path().join("weather.wasm"),
    )
    .unwrap();
    dir
}

/// `add FILE [NAME]` and `p_add N FILE` register a component the user brings, named after
/// its file or as told, and send it nothing; `execute` and `p_execute` give it its own input.
#[test]
fn a_users_component_is_added_by_file_and_run_with_its_own_input() {
    common::require_root("the probes, which attribute each request to its skill");
    let dir = folder_with_weather();
    let cmds_file = write_cmds(
        dir.path(),
        "own.cmds",
        "add weather.wasm\np_add 2 weather.wasm\nadd weather.wasm forecast\nskills\n\
         execute forecast {\"topic\": \"rain\", \"memory\": 64}\n\
         p_execute 3 weather2 {\"memory\": 512, \"chunk_kb\": 512}\n",
    );
    let (_, folder) = run_ok(&cmds_file, &dir.path().join("runs"), &[]);
    let (header, rows) = read_csv(&folder.join("commands.csv"));
    let (cmd, executions, errors) = (
        column(&header, "cmd"),
        column(&header, "executions"),
        column(&header, "request_errors"),
    );
    let row = |name: &str| {
        rows.iter()
            .find(|row| row[cmd] == name)
            .unwrap_or_else(|| panic!("no entry {name}: {rows:?}"))
    };
    // The adds send nothing: what a skill accepts is the user's to say.
    for add in [
        "add weather.wasm",
        "p_add 2 weather.wasm",
        "add weather.wasm forecast",
    ] {
        assert_eq!(row(add)[executions], "0", "{add}");
        assert_eq!(row(add)[errors], "0", "{add}");
    }
    let execute = row("execute forecast {\"topic\": \"rain\", \"memory\": 64}");
    assert_eq!((&*execute[executions], &*execute[errors]), ("1", "0"));
    let burst = row("p_execute 3 weather2 {\"memory\": 512, \"chunk_kb\": 512}");
    assert_eq!((&*burst[executions], &*burst[errors]), ("3", "0"));
    let (skills_header, skills) = read_csv(&folder.join("skills.csv"));
    let skill = column(&skills_header, "skill");
    let named: std::collections::BTreeSet<&str> =
        skills.iter().map(|row| row[skill].as_str()).collect();
    assert!(
        named.contains("forecast") && named.contains("weather2"),
        "{named:?}"
    );
}

/// skillhost serves a wasi:http/proxy component a user adds: each execute is `POST /` with
/// the input as its body, the answer's body the output, and a 400 the component answers is
/// input it rejected, counted per skill with its reason.
#[test]
fn a_wasi_http_component_is_served_and_its_400_is_input_it_rejected() {
    common::require_root("the probes, which attribute each request to its skill");
    let dir = tempfile::tempdir().unwrap();
    fs::copy(
        built_component("wasi-http/sample_rs.wasm"),
        dir.path().join("web.wasm"),
    )
    .unwrap();
    let cmds_file = write_cmds(
        dir.path(),
        "web.cmds",
        "add web.wasm
execute web1 {\"topic\": \"rain\", \"memory\": 64}
\
         p_execute 3 web1 {\"memory\": 512, \"chunk_kb\": 512}
\
         execute web1 {\"memory\": \"lots\"}
",
    );
    let (_, folder) = run_ok(&cmds_file, &dir.path().join("runs"), &[]);
    let (header, rows) = read_csv(&folder.join("commands.csv"));
    let [cmd, executions, errors, first] =
        ["cmd", "executions", "request_errors", "first_error"].map(|name| column(&header, name));
    let outcome: Vec<(&str, &str, &str)> = rows
        .iter()
        .filter(|row| row[cmd].contains("execute"))
        .map(|row| (&*row[executions], &*row[errors], &*row[first]))
        .collect();
    assert_eq!(outcome[..2], [("1", "0", ""), ("3", "0", "")], "{rows:?}");
    assert_eq!(outcome[2].1, "1", "{rows:?}");
    assert!(
        outcome[2].2.contains(
            "skill 'web1' rejected its input: answered 400 Bad Request: invalid type: string \
             \"lots\""
        ),
        "{rows:?}"
    );
    // Every burst request touched its 512 KiB in the component's own call, and the rejected
    // one is the skill's, by its phase.
    let (header, skills) = read_csv(&folder.join("skills.csv"));
    let [entry, skill, phase, rejected] =
        ["entry", "skill", "phase", "failed_input"].map(|name| column(&header, name));
    let rejected_in = |at: &str| {
        skills
            .iter()
            .find(|row| row[entry] == at && row[skill] == "web1" && row[phase] == "call")
            .unwrap_or_else(|| panic!("no call of web1 in entry {at}: {skills:?}"))[rejected]
            .clone()
    };
    assert_eq!(rejected_in("2"), "0");
    assert_eq!(rejected_in("3"), "1");
}

/// `o_mix` sends each request to one skill of the mix, with its own input, in proportion to
/// the weights: the probes count each skill's calls.
#[test]
fn a_mix_sends_each_skill_its_share_of_the_rate() {
    common::require_root("the probes, which attribute each request to its skill");
    let dir = folder_with_weather();
    fs::write(
        dir.path().join("mix.json"),
        r#"[{"skill": "weather1", "input": {"topic": "rain", "memory": 64}, "weight": 3},
            {"skill": "sample_rs1", "input": {}, "weight": 1}]"#,
    )
    .unwrap();
    let cmds_file = write_cmds(
        dir.path(),
        "mix.cmds",
        "add weather.wasm\nadd_rs\nexecute weather1 {}\no_mix mix.json 200 3\n",
    );
    let (_, folder) = run_ok(&cmds_file, &dir.path().join("runs"), &[]);
    let (header, rows) = read_csv(&folder.join("commands.csv"));
    let mix = rows
        .iter()
        .find(|row| row[column(&header, "cmd")].starts_with("o_mix"))
        .unwrap();
    assert_eq!(mix[column(&header, "request_errors")], "0", "{mix:?}");
    let (skills_header, skills) = read_csv(&folder.join("skills.csv"));
    let calls = |skill: &str| -> i64 {
        skills
            .iter()
            .filter(|row| {
                row[column(&skills_header, "cmd")].starts_with("o_mix")
                    && row[column(&skills_header, "skill")] == skill
                    && row[column(&skills_header, "phase")] == "call"
            })
            .map(|row| int(row, "runs"))
            .sum()
    };
    // 600 requests in all, warm-up included: 450 and 150.
    let (weather, sample) = (calls("weather1"), calls("sample_rs1"));
    assert!(
        (445..=455).contains(&weather) && (145..=155).contains(&sample),
        "weather1 {weather}, sample_rs1 {sample}"
    );
}

/// A file that is not a component, and a component of another world, are refused before
/// anything starts, each named with what it is.
#[test]
fn a_component_the_host_cannot_serve_is_refused_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    fs::copy(
        built_component("pharia-skill/sample_rs.wasm"),
        dir.path().join("pharia.wasm"),
    )
    .unwrap();
    fs::write(dir.path().join("notes.wasm"), "just notes\n").unwrap();
    fs::write(
        dir.path().join("mix.json"),
        r#"[{"skill": "weather1", "input": {}, "weight": 1}]"#,
    )
    .unwrap();
    let runs = dir.path().join("runs");
    for (text, says) in [
        ("add_rs\nadd pharia.wasm\n", "own.cmds:2: "),
        (
            "add notes.wasm\n",
            "own.cmds:1: add takes FILE [NAME] [JSON...]; ",
        ),
        (
            "p_add 2 missing.wasm\n",
            "own.cmds:1: p_add takes N FILE [JSON...]; cannot read ",
        ),
        (
            "add pharia.wasm a/b\n",
            "NAME \"a/b\" must be ASCII letters",
        ),
        (
            "add_rs\no_mix mix.json 100 2\n",
            "own.cmds:2: the mix sends to \"weather1\", and no line before it registers",
        ),
    ] {
        let cmds_file = write_cmds(dir.path(), "own.cmds", text);
        let output = run(&cmds_file, &runs, &["--no-probes"]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            !output.status.success() && stderr.contains(says),
            "{text}: {stderr}"
        );
        assert!(!runs.exists(), "{text}: nothing started");
    }
    let cmds_file = write_cmds(dir.path(), "own.cmds", "add pharia.wasm\n");
    let stderr =
        String::from_utf8_lossy(&run(&cmds_file, &runs, &["--no-probes"]).stderr).into_owned();
    assert!(
        stderr.contains(
            "pharia.wasm is a pharia:skill@0.2 component, and the host profile \
             skillhost serves skillprof:skill and wasi:http/proxy components"
        ),
        "{stderr}"
    );
    let cmds_file = write_cmds(dir.path(), "own.cmds", "add notes.wasm\n");
    let stderr =
        String::from_utf8_lossy(&run(&cmds_file, &runs, &["--no-probes"]).stderr).into_owned();
    assert!(stderr.contains("notes.wasm is not WebAssembly"), "{stderr}");
}

/// A process spinning on every CPU while the host compiles: the host's threads wait for a
/// CPU, and the entry names what ran instead, the spinners among them, with their pids and
/// cgroups, in sched_ran_instead and in explain.md.
#[test]
fn what_ran_while_the_host_waited_for_a_cpu_is_named_with_its_pid() {
    let _machine = common::machine();
    let spinners = spin_every_cpu();
    let pids: Vec<String> = spinners.iter().map(|s| s.0.id().to_string()).collect();
    let dir = tempfile::tempdir().unwrap();
    let cmds_file = dir.path().join("contended.cmds");
    fs::write(&cmds_file, "add_rs\np_add_rs 2\n").unwrap();
    let (output, folder) = run_ok(&cmds_file, &dir.path().join("runs"), &[]);
    drop(spinners);
    let (header, rows) = read_csv(&folder.join("commands.csv"));
    let [waited, ran] = ["sched_run_delay_ms", "sched_ran_instead"].map(|c| column(&header, c));
    let compile = &rows[1];
    assert!(
        cell::<f64>(compile, waited) >= 1.0,
        "the host hardly waited: {compile:?}"
    );
    // Among the three rather than first: the tests beside this one in the binary run their
    // own hosts (one suite run named another test's skillhost first, compiling 630 ms against
    // the spinners' 320 and 310).
    let named: Vec<&str> = compile[ran].split("; ").collect();
    assert!(
        named.iter().any(|taker| {
            taker.starts_with("sh (pid ")
                && pids
                    .iter()
                    .any(|pid| taker.contains(&format!("pid {pid},")))
        }),
        "no spinner ({pids:?}) is named: {compile:?}\n{}",
        describe(&output)
    );
    let explain = fs::read_to_string(folder.join("explain.md")).unwrap();
    let said = explain
        .lines()
        .find(|line| line.starts_with("p_add_rs 2"))
        .unwrap();
    assert!(
        said.contains("in all runnable for a CPU (schedstat), while these used the CPUs: ")
            && said.contains("sh (pid "),
        "{said}"
    );
}
