//! `l_execute_all` and `lo_execute` for real: Locust's master and workers (build/venv-locust,
//! from scripts/setup.sh), the workers in network namespaces the run makes, against skillhost
//! on the run's bridge. The counts agree with the host's own, an open loop from two workers
//! charges a stall of the host to every request it delayed, and nothing the run made is left
//! after a normal end, Ctrl-C or SIGKILL of skillprof. Bad lines are refused before anything
//! runs.

mod common;

use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use skillprof::record::Status;

use common::cli::{
    alive, cell, csv_rows, describe, eventually, host_pid, meta, run, run_ok, skillprof,
    start_long_run, write_cmds,
};
use common::require_root;

/// What these tests do that needs root.
const ROOT: &str = "the load tests make network namespaces, veth links and a cgroup";

fn cmds(dir: &Path, duration_s: u32) -> PathBuf {
    write_cmds(
        dir,
        "load.cmds",
        &format!("p_add_rs 2\nl_execute_all World 0 200 20 2 {duration_s}\n"),
    )
}

/// No namespace, link, cgroup or Locust process of the run is left.
fn assert_nothing_left(folder: &Path, limit: Duration) {
    let meta = meta(folder);
    let load = meta
        .load
        .expect("meta.json lists what the run made for Locust");
    let namespaces = &load.network.namespaces;
    assert!(namespaces.len() >= 3, "{namespaces:?}");
    eventually(limit, "the load namespaces", || {
        let left: Vec<&String> = namespaces
            .iter()
            .filter(|ns| Path::new("/run/netns").join(ns).exists())
            .collect();
        (!left.is_empty()).then(|| format!("still there: {left:?}"))
    });
    let link = &load.network.link;
    eventually(limit, "the host's veth link", || {
        Path::new("/sys/class/net")
            .join(link)
            .exists()
            .then(|| format!("{link} is still there"))
    });
    let cgroup = &load.cgroup;
    eventually(limit, "Locust's cgroup", || {
        Path::new(cgroup)
            .exists()
            .then(|| format!("{cgroup} is still there"))
    });
    let locustfile = folder.join("locust/locustfile.py").display().to_string();
    eventually(limit, "Locust's processes", || {
        let left = processes_running(&locustfile);
        (!left.is_empty()).then(|| format!("still running: {left:?}"))
    });
}

/// Processes whose command line names `needle`.
fn processes_running(needle: &str) -> Vec<u32> {
    fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains(needle))
        })
        .collect()
}

#[test]
fn a_swarm_from_two_namespaces_counts_what_the_host_served_and_leaves_nothing() {
    require_root(ROOT);
    let _machine = common::machine();
    let dir = tempfile::tempdir().unwrap();
    let (output, folder) = run_ok(&cmds(dir.path(), 15), &dir.path().join("runs"), &[]);
    let commands = csv_rows(&folder.join("commands.csv"));
    let entry = commands
        .iter()
        .find(|row| row["cmd"].starts_with("l_execute_all"))
        .expect("the l_execute_all entry");
    let requests = cell::<f64>(entry, "load_requests");
    // 20 users, each request sleeping 200 ms, for 15 s: about 1,500 requests.
    assert!(
        requests > 300.0,
        "{requests} requests\n{}",
        describe(&output)
    );
    assert_eq!(
        cell::<f64>(entry, "load_failures"),
        0.0,
        "{}",
        describe(&output)
    );
    assert_eq!(cell::<f64>(entry, "requests"), requests);
    let served = cell::<f64>(entry, "load_host_served");
    // Users finish the request they are in when stopped: at most one per user is in flight
    // at either edge of the window.
    assert!(
        (served - requests).abs() <= 20.0,
        "Locust counted {requests}, the host served {served}"
    );
    assert!(cell::<f64>(entry, "load_p50_ms") >= 200.0, "{entry:?}");
    // Locust's percentiles are its histogram's buckets (two significant digits above
    // 100 ms: 476 ms reads 480), its max the exact time: the p99 may round past the max.
    let (p99, max) = (
        cell::<f64>(entry, "load_p99_ms"),
        cell::<f64>(entry, "load_max_ms"),
    );
    assert!(max >= p99 * 0.95, "p99 {p99} ms, max {max} ms");
    assert!(cell::<f64>(entry, "took_ms") >= 15_000.0, "{entry:?}");
    // load.csv: one row per skill and the total, which is commands.csv's.
    let load = csv_rows(&folder.join("load.csv"));
    let skills: Vec<&str> = load.iter().map(|row| row["skill"].as_str()).collect();
    assert_eq!(skills, ["sample_rs1", "sample_rs2", "Aggregated"]);
    let per_skill: f64 = load[..2]
        .iter()
        .map(|row| cell::<f64>(row, "requests"))
        .sum();
    assert_eq!(per_skill, requests);
    assert!(
        load[..2]
            .iter()
            .all(|row| cell::<f64>(row, "requests") > 0.0),
        "every skill gets users: {load:?}"
    );
    let explain = fs::read_to_string(folder.join("explain.md")).unwrap();
    assert!(
        explain.contains("Locust held 20 users on 2 worker(s)"),
        "{explain}"
    );
    // The host listened on the bridge only, where the run pointed it.
    let host = meta(&folder).host.address.unwrap();
    assert!(host.starts_with("http://10.213."), "{host}");
    assert_nothing_left(&folder, Duration::from_secs(5));
}

/// `lo_execute` from two workers, the host stopped for a second in the middle: the workers'
/// merged latencies count from each scheduled send, so the stall shows in the p99 and the
/// max; every worker's sends are summed, and Locust's merged count is theirs.
#[test]
fn an_open_loop_from_two_workers_is_measured_from_its_schedule_and_sees_a_stall() {
    require_root(ROOT);
    let _machine = common::machine();
    let dir = tempfile::tempdir().unwrap();
    let cmds = write_cmds(
        dir.path(),
        "open.cmds",
        "add_rs\nlo_execute sample_rs1 200 10 2\n",
    );
    let (child, folder) = start_long_run(dir.path(), &cmds, &[]);
    let pid = host_pid(&folder);
    // The swarm is under way once the host works: its CPU time moves.
    let cpu_ticks = || -> u64 {
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .unwrap()
            .1
            .split_whitespace()
            .collect();
        fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
    };
    let idle = cpu_ticks();
    eventually(Duration::from_secs(60), "the swarm's requests", || {
        (cpu_ticks() < idle + 5).then(|| "the host has not started working".to_owned())
    });
    std::thread::sleep(Duration::from_secs(2));
    let host = nix::unistd::Pid::from_raw(pid);
    nix::sys::signal::kill(host, nix::sys::signal::Signal::SIGSTOP).unwrap();
    std::thread::sleep(Duration::from_secs(1));
    nix::sys::signal::kill(host, nix::sys::signal::Signal::SIGCONT).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{}", describe(&output));
    let commands = csv_rows(&folder.join("commands.csv"));
    let entry = commands
        .iter()
        .find(|row| row["cmd"].starts_with("lo_execute"))
        .expect("the lo_execute entry");
    assert_eq!(cell::<f64>(entry, "load_asked_rps"), 200.0);
    assert_eq!(cell::<f64>(entry, "load_workers"), 2.0);
    let requests = cell::<f64>(entry, "load_requests");
    // 10 s at 200/s from two schedules of 100/s each.
    assert!(
        (1_900.0..=2_010.0).contains(&requests),
        "{requests} requests\n{}",
        describe(&output)
    );
    assert_eq!(cell::<f64>(entry, "load_failures"), 0.0, "{entry:?}");
    // About 200 requests were due while the host was stopped, the first kept a second: from
    // their scheduled sends, they are the slowest tenth.
    let (p50, p99, max) = (
        cell::<f64>(entry, "load_p50_ms"),
        cell::<f64>(entry, "load_p99_ms"),
        cell::<f64>(entry, "load_max_ms"),
    );
    assert!(p50 < 100.0, "p50 {p50} ms: {entry:?}");
    assert!(max >= 900.0, "max {max} ms: {entry:?}");
    assert!(p99 >= 500.0, "p99 {p99} ms: {entry:?}");
    // Each worker wrote what its schedule sent; Locust's merged count is their sum.
    let written: Vec<serde_json::Value> = fs::read_dir(folder.join("locust"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_str().unwrap();
            name.contains(".schedule.") && name.ends_with(".json")
        })
        .map(|p| serde_json::from_slice(&fs::read(p).unwrap()).unwrap())
        .collect();
    assert_eq!(written.len(), 2, "{written:?}");
    let field = |name: &str| -> f64 { written.iter().map(|w| w[name].as_f64().unwrap()).sum() };
    assert_eq!(field("sent") - field("unanswered"), requests, "{written:?}");
    assert_eq!(cell::<f64>(entry, "load_late_sends"), field("late_sends"));
    let explain = fs::read_to_string(folder.join("explain.md")).unwrap();
    assert!(
        explain.contains("Locust's 2 worker(s) sent an open loop at 200/s in all")
            && explain.contains("latency from each scheduled send"),
        "{explain}"
    );
    assert_nothing_left(&folder, Duration::from_secs(5));
}

/// Starts a 60 s swarm and returns once it is being held.
fn start_swarm(dir: &Path) -> (std::process::Child, PathBuf) {
    let (child, folder) = start_long_run(dir, &cmds(dir, 60), &[]);
    // The workers' logs appear as they start; the swarm is held once the master's API said
    // every worker connected, a few seconds later.
    let started = Instant::now();
    while !folder.join("locust/1.worker2.log").exists() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no Locust workers started"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(8));
    assert!(
        !processes_running(&folder.join("locust/locustfile.py").display().to_string()).is_empty(),
        "Locust is running"
    );
    (child, folder)
}

#[test]
fn ctrl_c_mid_swarm_ends_the_run_and_removes_everything() {
    require_root(ROOT);
    let _machine = common::machine();
    let dir = tempfile::tempdir().unwrap();
    let (child, folder) = start_swarm(dir.path());
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let output = child.wait_with_output().unwrap();
    assert!(!output.status.success(), "{}", describe(&output));
    assert_eq!(
        meta(&folder).status,
        Status::Incomplete,
        "{}",
        describe(&output)
    );
    assert_nothing_left(&folder, Duration::from_secs(10));
}

#[test]
fn sigkill_of_skillprof_leaves_the_guardians_to_remove_everything() {
    require_root(ROOT);
    let _machine = common::machine();
    let dir = tempfile::tempdir().unwrap();
    let (mut child, folder) = start_swarm(dir.path());
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    assert_nothing_left(&folder, Duration::from_secs(30));
    // The host is not the load's: no guardian of this run stops it. Stop it for the tests
    // that follow.
    let host = host_pid(&folder);
    if alive(host as u64) {
        unsafe { libc::kill(host, libc::SIGKILL) };
    }
}

/// No worker can connect within 0 s: the entry fails with the reason, the run goes on to its
/// next entry, and the swarm's processes are gone.
#[test]
fn workers_that_do_not_connect_in_time_fail_the_entry_and_the_run_goes_on() {
    require_root(ROOT);
    let _machine = common::machine();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("timeout.cmds");
    fs::write(&path, "add_rs\nl_execute_all World 0 100 4 2 5\nskills\n").unwrap();
    let out = dir.path().join("runs");
    let output = run(&path, &out, &["--locust-timeout-s", "0", "--no-probes"]);
    assert!(output.status.success(), "{}", describe(&output));
    let folder = common::cli::run_folder(&out);
    let commands = csv_rows(&folder.join("commands.csv"));
    let cmds: Vec<&str> = commands.iter().map(|row| row["cmd"].as_str()).collect();
    assert_eq!(
        cmds,
        [
            "add_rs",
            "l_execute_all World 0 100 4 2 5",
            "skills",
            "stop"
        ]
    );
    let entry = &commands[1];
    assert_eq!(entry["request_errors"], "1");
    assert!(
        entry["first_error"].contains("Locust workers connected to the master within 0 s"),
        "{entry:?}"
    );
    assert_eq!(commands[2]["request_errors"], "0", "the run went on");
    assert_nothing_left(&folder, Duration::from_secs(5));
}

#[test]
fn bad_load_lines_are_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.cmds");
    fs::write(
        &path,
        "add_rs\nl_execute_all World 0 100 0 2 15\nl_execute_all World 0 100 20 2 0\n\
         l_execute_all World 0 100 20 99 15\n2 l_execute_all World 0 100 20 2 15\n",
    )
    .unwrap();
    let out = dir.path().join("runs");
    let output = run(&path, &out, &[]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    for expected in [
        "bad.cmds:2: l_execute_all takes TOPIC MEMORY_KB WAIT_MS USERS WORKERS DURATION_S; USERS must be at least 1, got 0",
        "bad.cmds:3: l_execute_all takes TOPIC MEMORY_KB WAIT_MS USERS WORKERS DURATION_S; DURATION_S must be at least 1, got 0",
        "bad.cmds:4: l_execute_all takes TOPIC MEMORY_KB WAIT_MS USERS WORKERS DURATION_S; WORKERS must be at most 32, got 99",
        "bad.cmds:5: l_execute_all takes no repeat count",
    ] {
        assert!(stderr.contains(expected), "{expected:?} not in:\n{stderr}");
    }
    assert!(!out.exists(), "nothing runs, no run folder");

    // A Locust flag without a load line would be ignored: it is refused instead.
    fs::write(&path, "add_rs\n").unwrap();
    let output = run(&path, &out, &["--no-probes", "--locust-timeout-s", "5"]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--locust-timeout-s is for l_execute_all and lo_execute lines"),
        "{}",
        describe(&output)
    );
    assert!(!out.exists(), "nothing runs, no run folder");

    // Locust missing: the message names the set-up that installs it.
    fs::write(&path, "add_rs\nl_execute_all World 0 100 20 2 15\n").unwrap();
    let output = skillprof()
        .arg("run")
        .arg(&path)
        .arg("--out")
        .arg(&out)
        .args(["--locust", "/nonexistent/locust"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    let expected = if skillprof::producers::system::running_as_root() {
        "scripts/setup.sh"
    } else {
        "needs root"
    };
    assert!(stderr.contains(expected), "{}", describe(&output));
    assert!(!out.exists(), "nothing runs, no run folder");
}
