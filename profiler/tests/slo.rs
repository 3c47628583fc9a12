//! `skillprof slo` and traffic at a rate, for real: skillhost on a CPU of its own, the load
//! generator on the other, open-loop steps measured from each request's scheduled send.
//! The host is stopped (SIGSTOP) for a second in the middle of one step, and the step must
//! show it in its p99 and max and miss the target; then killed in the next, which must end
//! as failed with the evidence while the steps before it are kept. Root: the host's ledger
//! is mapped through /proc (CI runs the suite as root; without root it fails loudly).
//!
//! Each test that sends traffic holds the machine (`common::machine`): each pins a generator
//! and a host to CPUs, and two at once on the same CPUs make each other's sends late (one
//! suite run: every step "Generator").

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::cli::{describe, skillprof, write_cmds};
use common::require_root;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;
use skillprof::record::slo::{SloReport, Verdict};

/// An experiment's slo.json, read as capacity reads it.
fn slo_report(folder: &std::path::Path) -> SloReport {
    skillprof::commands::slo::output::read(folder).unwrap()
}

const ROOT: &str = "skillprof slo maps the host's ledger";

/// The host's CPUs as its own status says, while it runs.
fn allowed_cpus(pid: i32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim()
        .to_owned()
}

/// Why the generator could not send each step judged `Generator`, in slo's words.
fn judged_generator(steps: &[skillprof::record::slo::SloStep]) -> Vec<String> {
    steps
        .iter()
        .filter(|step| step.verdict == Verdict::Generator)
        .map(|step| {
            format!(
                "{}/s: {}",
                step.rps,
                step.traffic.generator_limited().unwrap_or_default()
            )
        })
        .collect()
}

#[test]
fn a_stalled_host_misses_the_target_in_that_step_and_a_killed_one_ends_its_step_failed() {
    require_root(ROOT);
    let _one = common::machine();
    let (_dir, folder, report, said) = common::generator::on_time(
        || {
            let dir = tempfile::tempdir().unwrap();
            let folder = dir.path().join("slo");
            let mut child = skillprof()
                .args(["slo", "--skill", "hello", "--target", "p99<=50ms"])
                .args(["--rps", "200,200,200", "--step-s", "5"])
                .arg("--run-dir")
                .arg(&folder)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
            let mut said = String::new();
            let mut next = |what: &str| -> String {
                for line in lines.by_ref() {
                    let line = line.unwrap();
                    said.push_str(&line);
                    said.push('\n');
                    if line.contains(what) {
                        return line;
                    }
                }
                panic!("slo ended before saying {what:?}:\n{said}");
            };
            let started = next("host pid");
            let pid: i32 = started
                .split("host pid ")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|pid| pid.parse().ok())
                .unwrap_or_else(|| panic!("{started}"));
            // The host on the machine's last CPU, the generator on the other.
            assert!(started.contains("on CPU(s) 1, generator on 0"), "{started}");
            assert_eq!(allowed_cpus(pid), "1");

            // Step 1 runs clean. Step 2 starts as soon as it ends: 2 s in (past its 1 s of
            // warm-up), the host stops for a second.
            next("table 200/s");
            let second = Instant::now();
            std::thread::sleep(Duration::from_secs(2));
            kill(Pid::from_raw(pid), Signal::SIGSTOP).unwrap();
            std::thread::sleep(Duration::from_secs(1));
            kill(Pid::from_raw(pid), Signal::SIGCONT).unwrap();
            next("table 200/s");
            assert!(second.elapsed() < Duration::from_secs(12));
            // Step 3: killed 2 s in.
            std::thread::sleep(Duration::from_secs(2));
            kill(Pid::from_raw(pid), Signal::SIGKILL).unwrap();
            let status = child.wait().unwrap();
            for line in lines {
                said.push_str(&line.unwrap());
                said.push('\n');
            }
            assert!(
                !status.success(),
                "a dead host ends the experiment incomplete:\n{said}"
            );

            let report = slo_report(&folder);
            (dir, folder, report, said)
        },
        // Step 1 must run clean; the stalled and killed steps may be judged anything.
        |(_, _, report, _)| judged_generator(&report.steps[..1]),
    );
    let steps = &report.steps;
    assert_eq!(steps.len(), 3, "every step kept:\n{said}");
    let p99 = |i: usize| steps[i].traffic.latency.p99_ms;
    let max = |i: usize| steps[i].traffic.latency.max_ms;
    assert_eq!(steps[0].verdict, Verdict::Met, "{:#?}", steps[0]);
    assert!(p99(0) < 50.0, "{:#?}", steps[0]);
    assert_eq!(steps[0].traffic.generator_cpus, "0");
    // The second's worth of requests scheduled while the host was stopped waited for it:
    // from their scheduled sends, the slowest waited about a second, and over 1% of the
    // step's did (200 of 800 measured), so the p99 shows it too.
    assert!(max(1) > 800.0, "{:#?}", steps[1]);
    assert!(p99(1) > 500.0, "{:#?}", steps[1]);
    assert_ne!(steps[1].verdict, Verdict::Met, "{:#?}", steps[1]);
    // The tail came from one stall, found when and for how long it was; in it the profile's
    // timeline has next to none of the host's threads' samples: they were stopped.
    let stall = steps[1].traffic.stall.as_ref().expect("the stall is found");
    assert!(
        (400.0..1600.0).contains(&stall.begins_ms) && (800.0..1600.0).contains(&stall.lasted_ms),
        "{stall:?}"
    );
    let seen = steps[1]
        .evidence
        .stall
        .as_ref()
        .expect("the profile's timeline looked at the stall");
    assert!(
        seen.possible >= 50.0 && (seen.samples as f64) <= 0.1 * seen.possible,
        "{seen:?}"
    );
    // The host's death ends its step as failed, with how it ended.
    assert_eq!(steps[2].verdict, Verdict::Fail, "{:#?}", steps[2]);
    let died = steps[2].evidence.died.as_deref().unwrap_or_default();
    assert!(died.contains("is gone"), "{:#?}", steps[2]);
    assert!(!report.complete);

    // The table and the words.
    let explain = std::fs::read_to_string(folder.join("explain.md")).unwrap();
    assert!(
        explain.contains("## Table: p99 in ms at each rate"),
        "{explain}"
    );
    assert!(explain.contains("INCOMPLETE: the host died"), "{explain}");
    assert!(
        explain.contains("## Steps that missed the target") && explain.contains("the host died"),
        "{explain}"
    );
    // The stalled step is explained by its stall, unless its generator was late: slo then
    // says so first and does not judge the host on it. One suite run (2026-11-29) had 23 of
    // 800 sends late in the stalled step (send lag p99 2.03 ms), after a first attempt whose
    // clean step was late too; the stall itself was found and seen as above either way.
    let stall_said = explain.contains("the tail came from one stall")
        && explain.contains("so they were mostly off their CPUs");
    let generator_said =
        steps[1].verdict == Verdict::Generator && explain.contains("generator-limited");
    assert!(stall_said || generator_said, "{explain}");
    let page = std::fs::read_to_string(folder.join("report.html")).unwrap();
    assert!(
        page.contains("class=\"met\"") && page.contains("class=\"fail\""),
        "{page}"
    );
    let csv = std::fs::read_to_string(folder.join("steps.csv")).unwrap();
    assert_eq!(csv.lines().count(), 4, "{csv}");
    let metrics = std::fs::read_to_string(folder.join("openmetrics.txt")).unwrap();
    assert!(
        metrics.contains("skillprof_slo_p99_ms{config="),
        "{metrics}"
    );
}

/// What a knee looks like: a search on one CPU brackets the peak between a rate met and one
/// missed, and the words give the evidence of the step that missed. Where the knee falls is
/// the machine's business, not the test's: on a fresh CI machine a hello host missed 10 ms at
/// 1,000/s with 0.43 of its CPU, its tail one 99 ms stall (the stalls docs/pooling.md traces),
/// and on this one it ran to its CPU above that.
#[test]
fn a_search_brackets_the_peak_and_says_what_bound_the_step_above_it() {
    require_root(ROOT);
    let _one = common::machine();
    let (dir, folder, report) = common::generator::on_time(
        || {
            let dir = tempfile::tempdir().unwrap();
            let folder = dir.path().join("slo");
            let output = skillprof()
                .args(["slo", "--skill", "hello", "--target", "p99<=10ms"])
                .args(["--step-s", "2", "--points", "2", "--start-rps", "2000"])
                .arg("--run-dir")
                .arg(&folder)
                .output()
                .unwrap();
            assert!(output.status.success(), "{}", describe(&output));
            let report = slo_report(&folder);
            (dir, folder, report)
        },
        // Generator steps above the knee are the search's business; a search the generator
        // held back from every rate leaves no peak to judge.
        |(_, _, report)| match report.configs[0].peak_rps {
            Some(_) => Vec::new(),
            None => judged_generator(&report.steps),
        },
    );
    let peak = report.configs[0].peak_rps.unwrap();
    let missed = report.configs[0].missed_rps.unwrap();
    assert!(peak > 0 && missed > peak, "{report:#?}");
    // The skill's own phases hold a real share of the host's CPU, though each lasts far less
    // than a scheduler tick (read as getrusage's stale CPU time, they held 0.2% and the idle
    // wait that followed them took the rest).
    let first = &report.steps[0].evidence;
    let skills: f64 = first
        .phases_cpu_ms
        .iter()
        .filter(|(phase, _)| phase != "host")
        .map(|(_, ms)| ms)
        .sum();
    assert!(skills > 0.1 * first.host_cpu_ms, "{first:#?}");
    let explain = std::fs::read_to_string(folder.join("explain.md")).unwrap();
    let peaks = explain
        .lines()
        .find(|line| line.starts_with("- default workers, 1 CPU:"))
        .unwrap_or_else(|| panic!("{explain}"));
    // The knee in words, with the host's CPU against its one CPU as the evidence, whatever
    // bound it ("CPU-bound: 0.9 of its 1 CPU at ..." or "not CPU-bound: the host used 0.43
    // of its 1 CPU at ...; the tail came from one stall ...").
    assert!(
        peaks.contains("meets p99 ≤ 10 ms")
            && (peaks.contains("of its 1 CPU at") || peaks.contains("the generator could not")),
        "{peaks}"
    );
    assert_eq!(report.load_points.len(), 2);

    // The fleet for a rate: capacity reads the experiment beside a run's memory answer (the
    // stored run was made at 2 cores). One CPU count measured: a 2-core server's rate is a
    // stated range, not a measurement. The rate is hello's and the memory sample_rs's: joined
    // only when told, and then said.
    let run = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/rerender/run");
    let out = dir.path().join("capacity");
    let fleet = |told: &[&str]| {
        skillprof()
            .arg("capacity")
            .arg(&run)
            .args(["--memory", "1G", "--kind", "rust", "--cores", "2"])
            .args(["--rate", "20000", "--fleet-skills", "100", "--slo"])
            .arg(&folder)
            .arg("--out")
            .arg(&out)
            .args(told)
            .output()
            .unwrap()
    };
    let refused = fleet(&[]);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success()
            && said.contains("the rate was measured on hello (input {")
            && said.contains("and the memory on sample_rs: a fleet joined from two skill sets")
            && said.contains("--mixed-workloads"),
        "{}",
        describe(&refused)
    );
    assert!(!out.join("capacity.json").exists());
    let output = fleet(&["--mixed-workloads"]);
    assert!(output.status.success(), "{}", describe(&output));
    let section = String::from_utf8_lossy(&output.stdout);
    assert!(
        section.contains("### Traffic: 20,000/s of hello within p99 ≤ 10 ms")
            && section.contains("The rate's workload: hello with the input `{")
            && section.contains("**Mixed workloads (--mixed-workloads):** the memory is sample_rs's, the rate hello's")
            && section.contains("so this is a bound, not a measurement")
            && section.contains("server(s)** by rate")
            && section.contains("The skills of the fleet (Rust, sample_rs)")
            && section.contains("the fleet needs"),
        "{section}"
    );
    let capacity: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("capacity.json")).unwrap()).unwrap();
    let servers = &capacity["traffic"]["rate"]["servers"];
    assert!(
        servers[0].as_u64().unwrap() <= servers[1].as_u64().unwrap(),
        "{capacity:#}"
    );
    assert_eq!(capacity["traffic"]["rate"]["basis"], "bounded");
}

/// slo over a component of the user's own, with its own input: the report names it, and an
/// input the skill refuses stops the experiment at its first request, saying why.
#[test]
fn a_users_component_is_served_at_a_rate_with_its_own_input() {
    require_root(ROOT);
    let _one = common::machine();
    let dir = tempfile::tempdir().unwrap();
    let weather = dir.path().join("weather.wasm");
    std::fs::copy(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../build/skills/sample_rs.wasm"),
        &weather,
    )
    .unwrap();
    let input = dir.path().join("input.json");
    std::fs::write(&input, r#"{"topic": "rain", "memory": 64}"#).unwrap();
    let folder = dir.path().join("slo");
    // One step of 100/s to what `sends` names, into `folder`.
    let serve = |sends: &[String], folder: &std::path::Path| {
        skillprof()
            .args([
                "slo",
                "--target",
                "p99<=50ms",
                "--rps",
                "100",
                "--step-s",
                "2",
            ])
            .args(sends)
            .arg("--run-dir")
            .arg(folder)
            .output()
            .unwrap()
    };
    let component = format!("--component={}", weather.display());
    let output = serve(
        &[component.clone(), format!("--input=@{}", input.display())],
        &folder,
    );
    assert!(output.status.success(), "{}", describe(&output));
    let report = slo_report(&folder);
    assert_eq!(report.skill, "weather");
    assert_eq!(
        report.input,
        serde_json::json!({"topic": "rain", "memory": 64})
    );
    assert_eq!(report.steps[0].traffic.errors.total(), 0, "{report:#?}");
    // A mix of two components, each with its input and weight.
    std::fs::copy(&weather, dir.path().join("forecast.wasm")).unwrap();
    let mix = dir.path().join("mix.json");
    std::fs::write(
        &mix,
        r#"[{"skill": "weather", "component": "weather.wasm", "input": {"memory": 64}, "weight": 3},
            {"skill": "forecast", "component": "forecast.wasm", "input": {}, "weight": 1}]"#,
    )
    .unwrap();
    let mixed = dir.path().join("mixed");
    let output = serve(&[format!("--mix={}", mix.display())], &mixed);
    assert!(output.status.success(), "{}", describe(&output));
    let report = slo_report(&mixed);
    assert_eq!(report.skill, "mix: weather ×3, forecast ×1");
    assert_eq!(report.input[1]["skill"], "forecast", "{}", report.input);
    assert_eq!(report.steps[0].traffic.errors.total(), 0, "{report:#?}");
    let refused = serve(
        &[component, r#"--input={"memory": -1}"#.to_owned()],
        &dir.path().join("refused"),
    );
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success()
            && said.contains("the host did not run weather with the input {\"memory\":-1}: 400"),
        "{}",
        describe(&refused)
    );
}

#[test]
fn bad_input_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let refused = |args: &[&str], says: &str| {
        let folder = dir.path().join("never");
        let output = skillprof()
            .arg("slo")
            .args(args)
            .arg("--run-dir")
            .arg(&folder)
            .output()
            .unwrap();
        assert!(!output.status.success(), "{args:?}: {}", describe(&output));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(!folder.exists(), "{args:?} made {}", folder.display());
    };
    refused(&["--target", "p99<=10"], "no unit");
    refused(&["--target", "p99<=10ms", "--rps", "0"], "at least 1");
    refused(
        &["--target", "p99<=10ms", "--cpus", "64"],
        "this machine has",
    );
    refused(
        &["--target", "p99<=10ms", "--workers", "0"],
        "at least 1 worker",
    );
    refused(
        &["--target", "p99<=10ms", "--allocator", "slab"],
        "allocators are on-demand and pooling",
    );
    refused(
        &[
            "--target",
            "p99<=10ms",
            "--host-profile",
            "wasmtime-serve",
            "--skill",
            "python",
        ],
        "not built as wasi:http/proxy",
    );
    // A component of the user's own: of the host's world, and a component at all.
    let built = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../build/skills");
    let pharia = built.join("pharia-skill/sample_rs.wasm");
    let notes = dir.path().join("notes.wasm");
    std::fs::write(&notes, "notes\n").unwrap();
    let (pharia, notes) = (pharia.to_str().unwrap(), notes.to_str().unwrap());
    refused(
        &["--target", "p99<=10ms", "--component", pharia],
        "sample_rs.wasm is a pharia:skill@0.2 component, and the host profile skillhost serves \
         skillprof:skill and wasi:http/proxy components",
    );
    refused(
        &["--target", "p99<=10ms", "--component", notes],
        "notes.wasm is not WebAssembly",
    );
    refused(
        &["--target", "p99<=10ms", "--input", "{\"memory\": "],
        "--input {\"memory\": : the input is not JSON",
    );
    refused(
        &["--target", "p99<=10ms", "--input", "{}", "--memory-kb", "4"],
        "cannot be used with",
    );
    let mix = dir.path().join("mix.json");
    std::fs::write(&mix, r#"[{"skill": "weather", "input": {}, "weight": 1}]"#).unwrap();
    refused(
        &["--target", "p99<=10ms", "--mix", mix.to_str().unwrap()],
        "weather has no \"component\": slo starts its host with the mix's components",
    );
    // wasmtime serve runs the one component it is started with.
    let http = built.join("wasi-http/sample_rs.wasm");
    std::fs::copy(&http, dir.path().join("a.wasm")).unwrap();
    std::fs::copy(&http, dir.path().join("b.wasm")).unwrap();
    std::fs::write(
        &mix,
        r#"[{"skill": "a", "component": "a.wasm", "input": {}, "weight": 1},
            {"skill": "b", "component": "b.wasm", "input": {}, "weight": 1}]"#,
    )
    .unwrap();
    refused(
        &[
            "--target",
            "p99<=10ms",
            "--host-profile",
            "wasmtime-serve",
            "--mix",
            mix.to_str().unwrap(),
        ],
        "--mix: the host profile wasmtime-serve serves the one component it is started with, \
         and the mix has 2",
    );
    // `run` adds and drops skills, which a host of one component cannot.
    let cmds = write_cmds(dir.path(), "one.cmds", "add_rs\nskills\n");
    let output = skillprof()
        .arg("run")
        .arg(&cmds)
        .args(["--no-probes", "--host-profile", "wasmtime-serve", "--out"])
        .arg(dir.path().join("runs"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && stderr.contains("skillprof slo --host-profile wasmtime-serve"),
        "{stderr}"
    );
    assert!(!dir.path().join("runs").exists());
    // And a traffic line of a cmds file.
    let cmds = write_cmds(
        dir.path(),
        "zero.cmds",
        "add_rs\no_execute sample_rs1 0 5\n",
    );
    let output = skillprof()
        .arg("run")
        .arg(&cmds)
        .args(["--out"])
        .arg(dir.path().join("runs"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && stderr.contains("zero.cmds:2") && stderr.contains("RATE"),
        "{stderr}"
    );
    assert!(!dir.path().join("runs").exists());
}

/// An entry of open-loop traffic in a run, with the host and the generator each on a CPU of
/// its own, and the closed loop beside it: the traffic columns and the words.
#[test]
fn a_run_sends_traffic_at_a_rate_and_says_what_it_got() {
    require_root(ROOT);
    let _one = common::machine();
    let dir = tempfile::tempdir().unwrap();
    let cmds = write_cmds(
        dir.path(),
        "traffic.cmds",
        "add_rs\no_execute sample_rs1 300 3 poisson\nc_execute sample_rs1 2 3\n",
    );
    let out = dir.path().join("runs");
    let (output, folder) = common::cli::run_ok(
        &cmds,
        &out,
        &[
            "--host-cpus",
            "1",
            "--load-cpus",
            "0",
            "--probes",
            "host-only",
        ],
    );
    let rows = common::cli::csv_rows(&folder.join("commands.csv"));
    let open = &rows[1];
    assert_eq!(
        open["traffic_load"],
        "open 300/s poisson",
        "{}",
        describe(&output)
    );
    let achieved: f64 = open["traffic_achieved_rps"].parse().unwrap();
    assert!((250.0..=350.0).contains(&achieved), "{open:?}");
    assert_eq!(open["traffic_errors"], "0", "{open:?}");
    let closed = &rows[2];
    assert_eq!(closed["traffic_load"], "closed 2");
    assert_eq!(
        closed["traffic_late_sends"], "",
        "a closed loop has no schedule"
    );
    let explain = std::fs::read_to_string(folder.join("explain.md")).unwrap();
    assert!(
        explain.contains("open loop at 300/s (poisson) to sample_rs1")
            && explain.contains("the generator used")
            && explain.contains("on CPU(s) 0"),
        "{explain}"
    );
}
