//! A many-core machine on this one (`skillprof run --cores N`): the host really gets an N-core
//! machine's compile threads, async workers and arena limit, through skillhost's own profile
//! and through another profile; an attached host is refused with the reason; with a 16-core
//! machine's arenas the composition still puts malloc's memory under the heap, not wasm; and a
//! host skillprof started never outlives it.

use std::fs;
use std::time::Duration;

use serde_json::Value;

mod common;
use common::cli::{
    alive, describe, entries, eventually, host_pid, long_workload, meta, run, run_ok, skillprof,
    start_long_run,
};

/// The host's environment variable `name`, read from /proc.
fn host_env(pid: i32, name: &str) -> Option<String> {
    let environ = fs::read(format!("/proc/{pid}/environ")).unwrap();
    environ.split(|b| *b == 0).find_map(|entry| {
        let entry = String::from_utf8_lossy(entry);
        entry.strip_prefix(&format!("{name}=")).map(str::to_owned)
    })
}

/// The host's threads whose name starts with `prefix`.
fn threads_named(pid: i32, prefix: &str) -> usize {
    fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter(|task| {
            let comm = task.as_ref().unwrap().path().join("comm");
            fs::read_to_string(comm).is_ok_and(|name| name.starts_with(prefix))
        })
        .count()
}

fn interrupt(child: std::process::Child) {
    // SAFETY: kill(2) on our child's pid.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(130), "{}", describe(&output));
}

#[test]
fn the_host_runs_with_an_n_core_machines_parallelism_through_any_profile() {
    let dir = tempfile::tempdir().unwrap();
    let profiles: [&[&str]; 2] = [
        &["--no-probes", "--cores", "6"],
        &[
            "--no-probes",
            "--cores",
            "6",
            "--host-profile",
            "pharia-kernel-2024",
            "--",
            "--skills-dir",
            "{skills_dir}",
            "--port",
            "{port}",
            "--api",
            "pharia-2024",
        ],
    ];
    for (index, extra) in profiles.iter().enumerate() {
        let here = dir.path().join(index.to_string());
        fs::create_dir_all(&here).unwrap();
        let (child, folder) = start_long_run(&here, &long_workload(&here), extra);
        let pid = host_pid(&folder);
        for (name, value) in [
            ("RAYON_NUM_THREADS", "6"),
            ("TOKIO_WORKER_THREADS", "6"),
            ("MALLOC_ARENA_MAX", "48"),
            ("MALLOC_CONF", "narenas:24"),
        ] {
            assert_eq!(host_env(pid, name).as_deref(), Some(value), "{name}");
        }
        // tokio names its workers so (and its blocking threads, a few more): six at least, as
        // on six cores; two on this machine without the emulation.
        let workers = threads_named(pid, "tokio-rt-worker");
        assert!(workers >= 6, "{workers} tokio threads with {extra:?}");
        let cores = meta(&folder).cores.unwrap();
        assert_eq!((cores.cores, cores.arena_max), (6, 48));
        interrupt(child);
        let explain = fs::read_to_string(folder.join("explain.md")).unwrap();
        assert!(
            explain.contains("emulated a 6-core machine's parallelism")
                && explain.contains("Not emulated: memory bandwidth"),
            "{explain}"
        );
    }
}

#[test]
fn an_attached_host_is_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let output = skillprof()
        .args(["run", "--cores", "16", "--attach", "1", "--host-url"])
        .arg("http://127.0.0.1:1")
        .arg("--skills-dir")
        .arg(dir.path())
        .arg(long_workload(dir.path()))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("already running")
            && stderr.contains("RAYON_NUM_THREADS=16 TOKIO_WORKER_THREADS=16 MALLOC_ARENA_MAX=128"),
        "{stderr}"
    );
    // And a host environment that sets one of the emulation's variables itself.
    let output = run(
        &long_workload(dir.path()),
        &dir.path().join("runs"),
        &[
            "--no-probes",
            "--cores",
            "4",
            "--host-env",
            "MALLOC_ARENA_MAX=2",
        ],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && stderr.contains("drop one of the two"),
        "{stderr}"
    );
}

/// A 16-core machine's arenas: 16 compile threads each leave an arena behind after the first
/// Python skill. Where they land depends on the run (adjacent, they once passed for a wasm
/// memory's reservation); whatever the layout, the heap holds malloc's memory and wasm
/// memory is nothing once no instance is live.
#[test]
fn with_a_16_core_machines_arenas_malloc_memory_is_heap_and_no_wasm_is_held() {
    let dir = tempfile::tempdir().unwrap();
    let workload = dir.path().join("first.cmds");
    fs::write(&workload, "add_py\n").unwrap();
    let (output, folder) = run_ok(
        &workload,
        &dir.path().join("runs"),
        &["--no-probes", "--cores", "16"],
    );
    let first = entries(&folder).remove(0);
    let held = first.held.expect("smaps read at both ends").after;
    let host = first.host.expect("skillhost's counters read");
    let number = |value: Option<u64>| value.unwrap_or_else(|| panic!("{host:?}"));
    let malloc_kb = (number(host.heap_in_use_bytes) + number(host.heap_free_bytes)) / 1024;
    println!(
        "after add_py at 16 cores: heap {} KiB, wasm {} KiB, {:?} arenas; malloc in use and free {malloc_kb} KiB",
        held.heap_kb, held.wasm_kb, held.arenas
    );
    assert_eq!(
        held.wasm_kb,
        0,
        "no instance is live: {held:?}\n{}",
        describe(&output)
    );
    // mallinfo2 counts chunks whether or not their pages were ever touched (a Vec's unused
    // capacity), so malloc's figure bounds the resident heap from above; what it has in use
    // is touched, and most of what it freed was. Taken for wasm, the heap was 5% of it.
    let (heap_kb, in_use_kb) = (held.heap_kb, number(host.heap_in_use_bytes) / 1024);
    assert!(
        heap_kb >= in_use_kb && heap_kb * 4 >= malloc_kb * 3,
        "the heap must hold malloc's memory ({in_use_kb} KiB in use, {malloc_kb} KiB with \
         what it freed): {held:?}"
    );
    assert!(
        held.arenas.is_some_and(|arenas| arenas >= 8),
        "the compile threads' arenas: {held:?}"
    );
}

/// Without --memory-max (whose cgroup guardian kills the host), a SIGKILLed skillprof must not
/// leave its host holding memory on the machine.
#[test]
fn a_host_skillprof_started_ends_with_it_after_a_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, folder) =
        start_long_run(dir.path(), &long_workload(dir.path()), &["--no-probes"]);
    let host = host_pid(&folder);
    assert!(alive(host as u64));
    child.kill().unwrap();
    child.wait().unwrap();
    eventually(
        Duration::from_secs(10),
        "the host ends with skillprof",
        || alive(host as u64).then(|| format!("host {host} is still running")),
    );
}

/// `skillprof sweep`: a run per count and round into its folder, the dependence tabulated,
/// and the folder read back by `capacity` as runs at those counts.
#[test]
fn a_sweep_runs_each_count_and_capacity_reads_its_folder() {
    let dir = tempfile::tempdir().unwrap();
    let workload = dir.path().join("rust.cmds");
    fs::write(&workload, "add_rs\n4 add_rs\n").unwrap();
    let out = dir.path().join("sweep");
    let output = skillprof()
        .arg("sweep")
        .arg(&workload)
        .args([
            "--cores",
            "1,3",
            "--rounds",
            "1",
            "--run-arg=--no-probes",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", describe(&output));
    for run in ["cores-001-round-1", "cores-003-round-1"] {
        assert!(out.join(run).join("entries.jsonl").is_file(), "{run}");
    }
    let dependence: Value =
        serde_json::from_str(&fs::read_to_string(out.join("dependence.json")).unwrap()).unwrap();
    let points = dependence["kinds"][0]["points"].as_array().unwrap();
    assert_eq!(
        points
            .iter()
            .map(|p| p["cores"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [1, 3]
    );
    let table = fs::read_to_string(out.join("dependence.md")).unwrap();
    assert!(table.contains("| 3 | 1 |"), "{table}");
    let capacity = skillprof()
        .args([
            "capacity", "--memory", "1G", "--kind", "rust", "--json", "--cores", "3",
        ])
        .arg("--out")
        .arg(dir.path().join("capacity"))
        .arg(&out)
        .output()
        .unwrap();
    assert!(capacity.status.success(), "{}", describe(&capacity));
    let document: Value = serde_json::from_slice(&capacity.stdout).unwrap();
    assert_eq!(document["kinds"][0]["source"]["how"], "measured");
    assert_eq!(document["kinds"][0]["source"]["cores"], 3);
}
