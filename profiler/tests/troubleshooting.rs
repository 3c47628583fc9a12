//! The messages docs/troubleshooting.md quotes, produced for real where this machine can
//! produce them (the others are tested where their feature is: no root in tests/probes.rs
//! and tests/run.rs, a refused fentry and its fallbacks in tests/probes.rs, a low
//! vm.max_map_count in tests/pool.rs).

mod common;

use std::fs;
use std::net::TcpListener;
use std::process::Command;

use common::cli::{describe, run_ok, skillprof, write_cmds};

/// A port someone else holds: skillhost and the watch each name the address and the
/// kernel's reason, and stop.
#[test]
fn a_port_in_use_is_named_with_the_kernels_reason() {
    common::require_root("skillprof watch loads BPF probes before it serves");
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap();
    let skills = tempfile::tempdir().unwrap();
    let skillhost =
        std::path::Path::new(env!("CARGO_BIN_EXE_skillprof")).with_file_name("skillhost");
    let host = Command::new(skillhost)
        .arg("--skills-dir")
        .arg(skills.path())
        .args(["--port", &address.port().to_string()])
        .output()
        .unwrap();
    assert_eq!(host.status.code(), Some(2), "{}", describe(&host));
    assert!(
        String::from_utf8_lossy(&host.stderr).contains(&format!(
            "skillhost: error: binding {address}: Address already in use (os error 98)"
        )),
        "{}",
        describe(&host)
    );
    let watch = skillprof()
        .args(["watch", "--skills-dir"])
        .arg(skills.path())
        .args(["--listen", &address.to_string()])
        .output()
        .unwrap();
    assert!(!watch.status.success(), "{}", describe(&watch));
    assert!(
        String::from_utf8_lossy(&watch.stderr).contains(&format!(
            "--listen {address}: cannot bind: Address already in use (os error 98)"
        )),
        "{}",
        describe(&watch)
    );
}

/// A stripped host runs, profiled by entry; each uprobe that needs the host's symbols says
/// why it was left out, and what counts instead.
#[test]
fn a_stripped_host_runs_and_each_uprobe_left_out_says_why() {
    common::require_root("the probes");
    let dir = tempfile::tempdir().unwrap();
    let stripped = dir.path().join("skillhost");
    fs::copy(
        std::path::Path::new(env!("CARGO_BIN_EXE_skillprof")).with_file_name("skillhost"),
        &stripped,
    )
    .unwrap();
    let strip = Command::new("strip").arg(&stripped).output().unwrap();
    assert!(strip.status.success(), "{}", describe(&strip));
    let cmds = write_cmds(
        dir.path(),
        "strip.cmds",
        "add_rs\nexecute_skill sample_rs1 Alice 100 0\n",
    );
    let host_bin = format!("--host-bin={}", stripped.display());
    let (output, _) = run_ok(&cmds, &dir.path().join("runs"), &[&host_bin]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let shown = stripped.display();
    for said in [
        format!("{shown} has no wasmtime CodeMemory::publish (not a wasmtime host, or stripped)"),
        format!("{shown} has no wasmtime with batched decommits"),
        format!("{shown} has no wasmtime that resets slots with PAGEMAP_SCAN"),
    ] {
        assert!(stderr.contains(&said), "{said}:\n{stderr}");
    }
}

/// `probes --host-bin`, the check before a run: the built skillhost offers every host probe
/// its function and names the wasmtime of Cargo.lock; stripped, it offers none, each with the
/// reason a run would print, and still names its wasmtime (the source paths are data, not
/// symbols). No BPF is loaded: it needs no root.
#[test]
fn probes_host_bin_names_each_host_probes_function_or_why_not() {
    let built = std::path::Path::new(env!("CARGO_BIN_EXE_skillprof")).with_file_name("skillhost");
    let dir = tempfile::tempdir().unwrap();
    let stripped = common::stripped_skillhost(dir.path());
    let output = skillprof()
        .args(["probes", "--json", "--host-bin"])
        .arg(&built)
        .arg("--host-bin")
        .arg(&stripped)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", describe(&output));
    let checks: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let lock = fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.lock")).unwrap();
    let wasmtime = lock
        .split("[[package]]")
        .find(|package| package.contains("name = \"wasmtime\"\n"))
        .and_then(|package| package.split("version = \"").nth(1)?.split('"').next())
        .unwrap();
    for check in checks.as_array().unwrap() {
        assert_eq!(check["wasmtime"], wasmtime, "{check}");
    }
    let follows = |check: &serde_json::Value| -> Vec<(String, bool, String)> {
        check["probes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|probe| {
                let (found, text) = match probe["follows"].get("Ok") {
                    Some(function) => (true, function),
                    None => (false, &probe["follows"]["Err"]),
                };
                (
                    probe["probe"].as_str().unwrap().to_owned(),
                    found,
                    text.as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    let whole = follows(&checks[0]);
    assert_eq!(
        whole
            .iter()
            .map(|(probe, found, _)| (probe.as_str(), *found))
            .collect::<Vec<_>>(),
        [
            ("markers", true),
            ("code_publish", true),
            ("decommits", true),
            ("pagemap_scan", true)
        ],
        "{whole:?}"
    );
    let shown = stripped.display();
    let reasons: Vec<String> = follows(&checks[1])
        .into_iter()
        .map(|(_, found, why)| {
            assert!(!found, "{why}");
            why
        })
        .collect();
    for said in [
        format!("{shown} has no `skillhost_mark` marker (not skillhost, or stripped)"),
        format!("{shown} has no wasmtime CodeMemory::publish (not a wasmtime host, or stripped)"),
        format!("{shown} has no wasmtime with batched decommits"),
        format!("{shown} has no wasmtime that resets slots with PAGEMAP_SCAN"),
    ] {
        assert!(
            reasons.iter().any(|why| why.starts_with(&said)),
            "{said}: {reasons:?}"
        );
    }
}

/// `sudo scripts/test.sh` where rustup lives in the user's home: sudo's secure_path leaves
/// it out of PATH, and the set-up says what is missing before it changes anything.
#[test]
fn a_path_without_rustup_stops_the_set_up_saying_so() {
    let setup = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/setup.sh");
    let output = Command::new("bash")
        .arg(setup)
        .env_clear()
        .env("HOME", std::env::var_os("HOME").unwrap_or_default())
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .output()
        .unwrap();
    assert!(!output.status.success(), "{}", describe(&output));
    // common.sh's die() says it on stderr.
    assert!(
        String::from_utf8_lossy(&output.stderr)
            .contains("setup: FAILED: rustup is missing: install it from https://rustup.rs"),
        "{}",
        describe(&output)
    );
}
