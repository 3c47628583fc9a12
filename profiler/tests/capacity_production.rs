//! `skillprof capacity --prometheus`: the capacity answers from what a watch recorded, read
//! through a real Prometheus (Debian's, which scripts/test.sh installs). Held against the lab:
//! the same cmds workload, driven into a watched skillhost, answers from its run folder and
//! from Prometheus within each other's intervals. A fleet of three watched hosts scraped by
//! one Prometheus gets an answer per host and one for the fleet. Bad input is refused before
//! any work, each with its own error.
//!
//! The watched hosts need root (the watch's probes); without it those tests fail loudly.

use std::fs;
use std::io::{Read as _, Write as _};
use std::net::TcpListener;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use serde_json::Value;

mod common;
use common::cli::{describe, eventually, run_ok, skillprof, write_cmds};
use common::outside_host::OutsideHost;
use common::prometheus::{Reaped, free_port, get, query, spawn_watch_of, start_prometheus_with};
use common::require_root;

const ROOT: &str = "the production capacity tests watch their hosts with BPF probes";

/// `skillprof capacity --prometheus http://127.0.0.1:PORT ARGS`.
fn capacity(port: u16, args: &[&str]) -> Output {
    skillprof()
        .args([
            "capacity",
            "--prometheus",
            &format!("http://127.0.0.1:{port}"),
        ])
        .args(args)
        .output()
        .unwrap()
}

/// The same, which must succeed, as its --json document.
fn capacity_json(port: u16, args: &[&str]) -> Value {
    let output = capacity(port, &[args, &["--json"]].concat());
    assert!(output.status.success(), "{}", describe(&output));
    serde_json::from_slice(&output.stdout).expect("stdout is one JSON document")
}

/// The error a refused capacity says.
fn refused(output: &Output) -> String {
    assert!(!output.status.success(), "{}", describe(output));
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// An HTTP server on a loopback port of its own that answers every request with `status`
/// and `body`, for as long as the test runs.
fn answering(status: &'static str, body: &'static str) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request);
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

/// A Prometheus scraping `targets` (host:port) every second as job `skillprof`, once ready.
fn prometheus(dir: &Path, targets: &[String]) -> (Reaped, u16) {
    let list = targets
        .iter()
        .map(|t| format!("'{t}'"))
        .collect::<Vec<_>>()
        .join(", ");
    let config = format!(
        "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: skillprof\n    \
         static_configs:\n      - targets: [{list}]\n"
    );
    fs::create_dir_all(dir).unwrap();
    let (server, port) = start_prometheus_with(dir, &config);
    eventually(
        Duration::from_secs(30),
        "Prometheus to be ready",
        || match get(port, "/-/ready") {
            Some((200, _)) => None,
            other => Some(format!("{other:?}")),
        },
    );
    (server, port)
}

/// An exposition as a watch served it before 2026-12-06 (its series of that day, cut to a few):
/// skillprof's series, without the ones capacity reads.
const OLDER_WATCH: &str = "\
# TYPE skillprof_watch_per_skill_series gauge
skillprof_watch_per_skill_series 1
# TYPE skillprof_host_minflt counter
skillprof_host_minflt_total 1200
# TYPE skillprof_skill_runs counter
skillprof_skill_runs_total{skill=\"hello\",phase=\"call\"} 40
";

#[test]
fn bad_input_is_refused_before_any_work_each_with_its_own_error() {
    let dir = tempfile::tempdir().unwrap();

    // Nothing answers.
    let said = refused(&capacity(free_port(), &[]));
    assert!(said.contains("does not answer"), "{said}");

    // It wants credentials.
    let locked = answering("401 Unauthorized", "");
    let said = refused(&capacity(locked, &[]));
    assert!(
        said.contains("answered 401") && said.contains("credentials"),
        "{said}"
    );

    // Not Prometheus' API at all.
    let other = answering("200 OK", "<html>a web page</html>");
    let said = refused(&capacity(other, &[]));
    assert!(said.contains("not Prometheus' query API"), "{said}");

    // A Prometheus whose window has no skillprof series: it scrapes one target that is none.
    let not_a_watch = answering("200 OK", "# TYPE up_since gauge\nup_since 1\n");
    let (_empty, port) = prometheus(
        &dir.path().join("empty"),
        &[format!("127.0.0.1:{not_a_watch}")],
    );
    let said = refused(&capacity(port, &["--since", "5m"]));
    assert!(said.contains("has no skillprof series"), "{said}");

    // Series from an older skillprof.
    let older = answering("200 OK", OLDER_WATCH);
    let (_old, port) = prometheus(&dir.path().join("old"), &[format!("127.0.0.1:{older}")]);
    eventually(Duration::from_secs(30), "the older series stored", || {
        query(port, "skillprof_watch_per_skill_series")
            .is_empty()
            .then(|| "none yet".to_owned())
    });
    let said = refused(&capacity(port, &["--since", "5m"]));
    assert!(said.contains("older skillprof"), "{said}");

    // A flag that makes no sense is refused by the parser, with nothing read.
    let said = refused(&capacity(port, &["--since", "a week"]));
    assert!(said.contains("--since"), "{said}");
    // Production's flags with runs would be ignored there: refused instead.
    let with_runs = skillprof()
        .args(["capacity", "--memory", "1G", "--since", "1h"])
        .arg(dir.path())
        .output()
        .unwrap();
    let said = refused(&with_runs);
    assert!(said.contains("--since") && said.contains("RUN"), "{said}");
}

/// `n` requests to `skill` on `host`, each answered well.
fn execute(host: &OutsideHost, skill: &str, n: usize) {
    let client = host.client();
    host.runtime().block_on(async {
        for _ in 0..n {
            let reply = client.execute(skill, &serde_json::json!({})).await.unwrap();
            assert!(reply.is_ok(), "{}", reply.text());
        }
    });
}

/// A skillhost watched by `skillprof watch --attach`; the watch's address.
fn watched(dir: &Path) -> (OutsideHost, Reaped, String) {
    let host = OutsideHost::start(dir);
    let (pid, url) = (host.child.id().to_string(), host.url());
    let (watch, port, _) = spawn_watch_of(
        Path::new(env!("CARGO_BIN_EXE_skillprof")),
        dir,
        &["--attach", &pid, "--host-url", &url],
    );
    (host, watch, format!("127.0.0.1:{port}"))
}

#[test]
fn production_answers_fall_inside_the_labs_for_the_same_workload() {
    require_root(ROOT);
    let _one = common::machine();
    let dir = tempfile::tempdir().unwrap();
    let (host, _watch, target) = watched(dir.path());
    let (_prometheus, port) = prometheus(&dir.path().join("prometheus"), &[target]);

    // The workload, driven by a cmds file into the watched host: skills added three at a
    // time, each three followed by requests to every skill, so that the scrapes see the skills
    // held grow step by step while the host serves. Sixty further skills: malloc grows in
    // chunks a few skills wide, and fewer leave either slope to a chunk's luck.
    let mut workload = String::from("add_rs\n");
    for _ in 0..20 {
        workload.push_str("150 execute_all Capacity 0 0\n3 add_rs\n");
    }
    workload.push_str("150 execute_all Capacity 0 0\n");
    let cmds = write_cmds(dir.path(), "production.cmds", &workload);
    let (pid, url) = (host.child.id().to_string(), host.url());
    let (_, run) = run_ok(
        &cmds,
        &dir.path().join("runs"),
        &[
            "--attach",
            &pid,
            "--host-url",
            &url,
            "--skills-dir",
            host.skills.to_str().unwrap(),
            "--no-probes",
        ],
    );
    // Two scrapes past the end, so that the window holds all of it.
    std::thread::sleep(Duration::from_secs(3));

    // The lab's answer, from the run folder: the Rust skills a 512 MiB machine holds.
    let out = dir.path().join("lab");
    let lab = skillprof()
        .args([
            "capacity",
            "--memory",
            "512M",
            "--headroom",
            "0",
            "--kind",
            "rust",
            "--json",
        ])
        .arg("--out")
        .arg(&out)
        .arg(&run)
        .output()
        .unwrap();
    assert!(lab.status.success(), "{}", describe(&lab));
    let lab: Value = serde_json::from_slice(&lab.stdout).unwrap();
    let lab = &lab["kinds"][0]["predicted"]["skills"];
    let (lab_low, lab_high) = (lab["low"].as_f64().unwrap(), lab["high"].as_f64().unwrap());

    // Production's, from the watch's series over the same minutes, for the same machine.
    let production = capacity_json(
        port,
        &[
            "--since",
            "3m",
            "--step",
            "1",
            "--memory",
            "512M",
            "--headroom",
            "0",
        ],
    );
    let hosts = production["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), 1, "{production}");
    let answer = &hosts[0];
    let skills = &answer["skills"];
    let now = skills["now"]
        .as_f64()
        .expect("skills held, from skillhost_skills");
    let more = &skills["more"];
    let (low, high) = (
        now + more["low"].as_f64().unwrap(),
        now + more["high"].as_f64().unwrap(),
    );
    println!(
        "skills in 512 MiB: lab {} [{lab_low}, {lab_high}], production {} [{low}, {high}] \
         ({} held, {} bytes a skill)",
        lab["value"],
        now + more["value"].as_f64().unwrap(),
        now,
        skills["bytes_per_skill"]["value"]
    );
    assert!(
        low <= lab_high && lab_low <= high,
        "production [{low}, {high}] and lab [{lab_low}, {lab_high}] do not overlap: {answer}"
    );
    assert_eq!(skills["bound"], "memory", "{answer}");

    // The rate: the window's requests counted as the host answered them, and a rate (the
    // CPU's bound: p99 of warm requests never grows here) with the basis said.
    let executions: f64 = common::cli::entries(&run)
        .iter()
        .map(|record| record.measure.outcome.latencies.len() as f64)
        .sum();
    let requests = answer["requests"].as_f64().unwrap();
    assert!(
        (requests - executions).abs() <= executions * 0.01 + 2.0,
        "Prometheus counted {requests} requests answered, the run {executions}"
    );
    assert_eq!(answer["rate"]["basis"], "cpu_bound", "{answer}");
    assert!(
        answer["rate"]["within"]["value"].as_f64().unwrap() > 0.0,
        "{answer}"
    );
    let cannot: Vec<&str> = answer["cannot_tell"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        cannot.iter().any(|why| why.contains("a bound")),
        "the bound is said to be one: {cannot:?}"
    );

    // Its text says the same, with the evidence.
    let text = capacity(port, &["--since", "3m", "--step", "1", "--memory", "512M"]);
    assert!(text.status.success(), "{}", describe(&text));
    let said = String::from_utf8_lossy(&text.stdout);
    assert!(
        said.contains("memory binds first") && said.contains("requests answered"),
        "{said}"
    );
    println!("{said}");
}

#[test]
fn a_fleet_of_three_gets_an_answer_per_host_and_one_for_the_fleet() {
    require_root(ROOT);
    let _one = common::machine();
    let dir = tempfile::tempdir().unwrap();
    let mut hosts = Vec::new();
    for n in 0..3 {
        let folder = dir.path().join(format!("host{n}"));
        fs::create_dir_all(&folder).unwrap();
        hosts.push(watched(&folder));
    }
    let targets: Vec<String> = hosts.iter().map(|(_, _, target)| target.clone()).collect();
    let (_prometheus, port) = prometheus(&dir.path().join("prometheus"), &targets);
    let stored = |promql: &str, want: f64| {
        eventually(Duration::from_secs(30), promql, || {
            let got = query(port, promql).first().map(|(_, v)| *v);
            (got != Some(want)).then(|| format!("{got:?}, not {want}"))
        })
    };
    stored("count(skillprof_host_cpus)", 3.0);
    // Each serves its own traffic: the third three times the first's.
    for round in 0..6 {
        for (n, (host, _, _)) in hosts.iter().enumerate() {
            execute(host, "their_own", 40 * (n + 1));
        }
        if round == 2 {
            std::thread::sleep(Duration::from_secs(1));
        }
    }
    stored("sum(skillprof_skill_latency_seconds_count)", 1440.0);

    let fleet = capacity_json(port, &["--since", "2m", "--step", "1"]);
    let answers = fleet["hosts"].as_array().unwrap();
    let mut seen: Vec<&str> = answers
        .iter()
        .map(|h| h["host"].as_str().unwrap())
        .collect();
    seen.sort();
    let mut expected: Vec<&str> = targets.iter().map(String::as_str).collect();
    expected.sort();
    assert_eq!(seen, expected, "{fleet}");
    let requests: Vec<f64> = targets
        .iter()
        .map(|t| {
            answers.iter().find(|h| h["host"] == t.as_str()).unwrap()["requests"]
                .as_f64()
                .unwrap()
        })
        .collect();
    assert_eq!(requests, [240.0, 480.0, 720.0], "{fleet}");
    let summary = &fleet["fleet"];
    assert_eq!(summary["hosts"], 3, "{fleet}");
    let peaks: f64 = answers
        .iter()
        .map(|h| h["rate"]["peak"].as_f64().unwrap())
        .sum();
    assert!(
        (summary["peak"].as_f64().unwrap() - peaks).abs() < 1e-6,
        "{fleet}"
    );
    assert!(
        summary["servers"]["value"].as_f64().unwrap() >= 1.0,
        "{fleet}"
    );
    assert!(summary["rate_binds_first"].is_string(), "{fleet}");

    // A selector meant for one host that matches the three is refused, naming them.
    let said = refused(&capacity(
        port,
        &["--since", "2m", "--selector", "job=\"skillprof\""],
    ));
    assert!(said.contains("matches 3 hosts"), "{said}");
    for target in &targets {
        assert!(said.contains(target.as_str()), "{said}");
    }
    // One named: that host alone, and no fleet.
    let one = capacity_json(
        port,
        &[
            "--since",
            "2m",
            "--step",
            "1",
            "--selector",
            &format!("instance=\"{}\"", targets[1]),
        ],
    );
    assert_eq!(one["hosts"].as_array().unwrap().len(), 1, "{one}");
    assert_eq!(one["hosts"][0]["host"], targets[1].as_str(), "{one}");
    assert!(one["fleet"].is_null(), "{one}");
}
