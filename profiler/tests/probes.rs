//! `skillprof probes` against the real kernel: every probe is listed with its mechanism, the
//! syscall probe counts skillprof's own mmaps, forcing the fallbacks works, and without
//! privileges it says so and refuses.
//!
//! Which mechanism attaches is asserted per kernel (`SKILLPROF_EXPECT_MECHANISMS`: this
//! machine's kernel must give the fallbacks, a stock kernel the function probes), and the
//! reports are saved for the kernel matrix's tables (`SKILLPROF_MATRIX_OUT`).
//!
//! These tests load BPF programs, so they need root (CI runs them as root). Without root they
//! fail loudly: a skipped probe test would pass while proving nothing.

mod common;

use std::{os::unix::process::CommandExt as _, process::Command};

use common::exercise::{Selection, assert_mechanisms, save_result};
use common::require_root;
use serde_json::Value;
use skillprof::producers::probes::PROBES;
use skillprof::record::probes::ProbeStatus;

fn skillprof_probes() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_skillprof"));
    command.arg("probes");
    command
}

fn report(args: &[&str]) -> Value {
    let out = skillprof_probes()
        .args(["--json", "--seconds", "1"])
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "skillprof probes {args:?} failed ({})\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    serde_json::from_str(&stdout).expect("stdout is one JSON object")
}

fn statuses(report: &Value) -> Vec<ProbeStatus> {
    serde_json::from_value(report["probes"].clone()).expect("the report's probes are statuses")
}

fn probe<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["probes"]
        .as_array()
        .and_then(|probes| probes.iter().find(|probe| probe["probe"] == name))
        .unwrap_or_else(|| panic!("no {name} probe in {report:#}"))
}

/// What these tests do that needs root.
const ROOT: &str = "the probe tests load BPF programs";

#[test]
fn every_probe_is_listed_and_the_syscall_probe_counts_skillprofs_own_mmaps() {
    require_root(ROOT);
    let report = report(&["--self-cost"]);
    save_result("probes", report.clone());
    assert!(report["kernel"].as_str().is_some_and(|k| !k.is_empty()));
    assert_mechanisms(&statuses(&report), Selection::All);
    for expected in PROBES {
        let status = probe(&report, expected.probe.name());
        // Every mechanism of the plan is accounted for, in plan order.
        let attempts = status["attempts"].as_array().unwrap();
        assert_eq!(attempts.len(), expected.plan.len(), "{status:#}");
        if status["attached"] == false {
            // Only the function-probe-only probes may be missing, and they say why.
            assert!(
                !skillprof::producers::probes::is_required(expected.probe),
                "required probe {} did not attach: {status:#}",
                expected.probe.name()
            );
            assert!(!status["detail"].as_str().unwrap().is_empty());
        }
    }
    assert_eq!(probe(&report, "major_faults")["attached"], true);

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
    // The cost of each attached program is reported.
    let programs = report["costs"]["programs"].as_array().unwrap();
    assert!(
        programs
            .iter()
            .any(|p| p["probe"] == "syscalls" && p["runs"].as_u64() > Some(0)),
        "{report:#}"
    );
}

#[test]
fn forcing_the_fallback_attaches_each_plans_last_mechanism() {
    require_root(ROOT);
    let report = report(&["--force-fallback"]);
    save_result("probes-forced-fallback", report.clone());
    assert_eq!(report["force_fallback"], true);
    assert_mechanisms(&statuses(&report), Selection::ForcedFallback);
    // Without --self-cost BPF stats stay off, and no cost is made up.
    assert!(report["costs"]["stats"].is_null(), "{:#}", report["costs"]);
    assert_eq!(report["costs"]["programs"], serde_json::json!([]));
    // Classic tracepoints, but for syscalls the raw ones: the classic per-syscall
    // tracepoints are cheaper for the rest of the machine, so they come before.
    for (name, last) in [
        ("syscalls", "tp_btf"),
        ("page_faults", "tracepoint"),
        ("kswapd", "tracepoint"),
        ("lru_shrink", "tracepoint"),
        ("exit", "tracepoint"),
        ("rss_stat", "tracepoint"),
    ] {
        let status = probe(&report, name);
        assert_eq!(status["attached"], true, "{status:#}");
        assert_eq!(status["mechanism"], last, "{status:#}");
    }
    assert!(report["mmap"]["calls"].as_u64() >= report["self_mmaps"].as_u64());
}

#[test]
fn a_mechanism_can_be_selected() {
    require_root(ROOT);
    let report = report(&["--mechanism", "tp_btf,tracepoint"]);
    let syscalls = probe(&report, "syscalls");
    let attempts = syscalls["attempts"].as_array().unwrap();
    assert_eq!(attempts[0]["mechanism"], "fentry");
    assert_eq!(attempts[0]["outcome"], "skipped", "{syscalls:#}");
}

#[test]
fn without_fentry_kprobes_attach_where_the_kernel_has_them() {
    require_root(ROOT);
    // On a kernel with kprobes, syscalls, shrink_node and exit_mmap attach kprobes, and the
    // self-check (at least skillprof's own mmaps counted) runs through them; on this
    // machine's kernel the kprobe attempts fail and the classic syscall tracepoints count instead.
    let report = report(&["--mechanism", "kprobe,tp_btf,tracepoint"]);
    save_result("probes-no-fentry", report.clone());
    assert_mechanisms(&statuses(&report), Selection::NoFentry);
    assert!(report["mmap"]["calls"].as_u64() >= report["self_mmaps"].as_u64());
    assert!(report["self_mmaps"].as_u64() > Some(0), "{report:#}");
}

fn assert_refuses(mut command: Command, how: &str) {
    let out = command.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success(),
        "skillprof probes succeeded {how}\nstdout:\n{stdout}"
    );
    assert!(
        stderr.contains("needs root")
            && stderr.contains("CAP_BPF")
            && stderr.contains("sudo skillprof probes"),
        "{how}: stderr:\n{stderr}"
    );
    // It never pretends: no probe table, no counts.
    assert!(stdout.trim().is_empty(), "{how}: stdout:\n{stdout}");
}

#[test]
fn without_privileges_it_says_root_is_needed() {
    require_root(ROOT);
    // `nobody`: switching away from uid 0 clears the effective capabilities.
    let mut command = skillprof_probes();
    command.uid(65534).gid(65534);
    assert_refuses(command, "as nobody");
}

#[test]
fn as_root_without_capabilities_it_says_so_too() {
    require_root(ROOT);
    // uid 0, but no capabilities at all (bounding set emptied before exec).
    let mut command = Command::new("setpriv");
    command
        .args(["--inh-caps=-all", "--bounding-set=-all", "--"])
        .arg(env!("CARGO_BIN_EXE_skillprof"))
        .arg("probes");
    assert_refuses(command, "as root without capabilities");
}
