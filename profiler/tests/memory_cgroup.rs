//! `--memory-max` on whichever hierarchy holds the memory controller: this machine's cgroup v1,
//! and cgroup v2, which most current distributions use, in the kernel matrix's guest (where
//! scripts/kernel-matrix.sh mounts cgroup2 with the memory controller and sets
//! SKILLPROF_EXPECT_CGROUP=v2). A limit holds, the kernel's account is read, the OOM
//! killer's kill is seen, and the cgroup (and the controller, where the run enabled it) is
//! gone afterwards. Root is needed: without it these fail loudly, never skip.

use std::fs;
use std::path::Path;

use skillprof::record::memcg::Version;

mod common;
use common::cli::{describe, entries, meta, run, run_folder, write_cmds};
use common::require_root;

/// What these tests do that needs root.
const ROOT: &str = "the memory cgroup tests make cgroups";

/// The hierarchy the run must use: the kernel matrix's guest names it; elsewhere, the one
/// this machine holds the memory controller in (v2 if its root offers it).
fn expected_version() -> Version {
    let named = std::env::var("SKILLPROF_EXPECT_CGROUP").ok();
    let v2 = match named.as_deref() {
        Some(name) => name == "v2",
        None => fs::read_to_string("/sys/fs/cgroup/cgroup.controllers")
            .is_ok_and(|text| text.split_whitespace().any(|c| c == "memory")),
    };
    if v2 { Version::V2 } else { Version::V1 }
}

#[test]
fn a_limit_holds_and_the_oom_killer_is_seen_on_the_memory_controllers_hierarchy() {
    require_root(ROOT);
    let version = expected_version();
    let dir = tempfile::tempdir().unwrap();

    // 20 MB touched in one request, under 96 MiB: it fits, and the kernel's account holds it.
    let fits = write_cmds(
        dir.path(),
        "fits.cmds",
        "add_rs\nexecute_skill sample_rs1 Fits 20000 0\n",
    );
    let out = dir.path().join("fits");
    let output = run(&fits, &out, &["--no-probes", "--memory-max", "96M"]);
    assert!(output.status.success(), "{}", describe(&output));
    let folder = run_folder(&out);
    let cgroup = meta(&folder).memory_cgroup.unwrap();
    assert_eq!(cgroup.version, version, "{cgroup:?}");
    let recorded = entries(&folder);
    let request = recorded[1]
        .memcg
        .expect("a run with --memory-max reads its cgroup");
    assert_eq!(request.limit_bytes, 96 << 20, "{request:?}");
    let peak = request.after.peak_bytes;
    assert!(
        peak >= 20_000 * 1024,
        "the peak holds the request's 20 MB: {request:?}"
    );
    assert!(peak <= 96 << 20, "{request:?}");
    assert!(!Path::new(&cgroup.dir).exists(), "the cgroup is removed");

    // 200 MB in one request: the OOM killer takes the host, and the run says so.
    let greedy = write_cmds(
        dir.path(),
        "greedy.cmds",
        "add_rs\nexecute_skill sample_rs1 Greedy 200000 0\n",
    );
    let out = dir.path().join("oom");
    let output = run(&greedy, &out, &["--no-probes", "--memory-max", "96M"]);
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    let folder = run_folder(&out);
    let meta = meta(&folder);
    assert!(
        meta.oom_killed
            .as_ref()
            .is_some_and(|oom| oom.contains("oom_kill 1")),
        "{meta:?}"
    );
    assert_eq!(
        entries(&folder)[1].memcg.map(|memcg| memcg.oom_kills()),
        Some(1)
    );
    assert!(
        !Path::new(&meta.memory_cgroup.unwrap().dir).exists(),
        "the cgroup is removed"
    );
}
