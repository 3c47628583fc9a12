//! `skillprof probes` against the real kernel: the mmap tracepoint attaches and counts.
//!
//! These tests load BPF programs, so they need root (CI runs them as root). Without root they
//! fail loudly: a skipped probe test would pass while proving nothing.

use std::{os::unix::process::CommandExt as _, process::Command};

use serde_json::Value;

fn require_root() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "this test needs root: run as root / via sudo (e.g. `sudo -E cargo test -p skillprof --test probes`)"
    );
}

fn skillprof_probes() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_skillprof"));
    command.arg("probes");
    command
}

#[test]
fn mmap_tracepoint_attaches_and_counts_skillprofs_own_mmaps() {
    require_root();
    let out = skillprof_probes()
        .args(["--json", "--seconds", "1"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "skillprof probes failed ({})\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    let report: Value = serde_json::from_str(&stdout).expect("stdout is one JSON object");

    let mmap_probe = report["probes"]
        .as_array()
        .and_then(|probes| probes.iter().find(|probe| probe["probe"] == "mmap"))
        .unwrap_or_else(|| panic!("no mmap probe in {report:#}"));
    assert_eq!(mmap_probe["attached"], true, "{mmap_probe:#}");
    assert_eq!(mmap_probe["mechanism"], "tracepoint", "{mmap_probe:#}");

    let calls = report["mmap"]["calls"]
        .as_u64()
        .unwrap_or_else(|| panic!("no mmap count in {report:#}"));
    let own = report["self_mmaps"].as_u64().unwrap();
    assert!(own > 0, "skillprof made no mmaps of its own: {report:#}");
    assert!(
        calls >= own,
        "counted {calls} mmap calls, fewer than the {own} skillprof made itself"
    );
    assert!(report["mmap"]["bytes"].as_u64() > Some(0), "{report:#}");
}

#[test]
fn without_privileges_it_says_root_is_needed() {
    require_root();
    // `nobody`: switching away from uid 0 clears the effective capabilities.
    let out = skillprof_probes().uid(65534).gid(65534).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "skillprof probes succeeded without privileges"
    );
    assert!(
        stderr.contains("needs root") && stderr.contains("sudo skillprof probes"),
        "stderr:\n{stderr}"
    );
}
