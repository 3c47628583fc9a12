//! `skillprof watch` end to end: a real Prometheus server (Debian's) scrapes it while it
//! watches a skillhost under load, and the series it stores are checked against the host's
//! own counts; a host without markers gets the host series and says why it has no others; a
//! watch without --attach starts its host and stops it.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use hyper::Method;
use serde_json::json;
use skillprof::producers::hostctl::client::Http;

mod common;
use common::cli::eventually;
use common::outside_host::OutsideHost;
use common::prometheus::{
    Reaped, free_port, get, query, runtime, scrape, spawn_watch_of, start_prometheus_with, targets,
};
use common::{loaded_ids, loaded_since, require_root, taxing_programs};

/// Every program loaded since `before` is gone (the kernel frees them when their last file
/// descriptor closes).
fn nothing_left_since(before: &std::collections::BTreeSet<u32>) {
    eventually(
        Duration::from_secs(10),
        "the watch's programs to go",
        || {
            let left = loaded_since(before);
            (!left.is_empty()).then(|| format!("still loaded: {left:?}"))
        },
    );
}

/// `skillprof watch` on `host`, serving on a port of its own, its stderr in `dir`.
fn start_watch(host: &OutsideHost, dir: &Path) -> (Reaped, u16, PathBuf) {
    start_watch_with(host, dir, &[])
}

/// The same with further arguments.
fn start_watch_with(host: &OutsideHost, dir: &Path, args: &[&str]) -> (Reaped, u16, PathBuf) {
    let pid = host.child.id().to_string();
    let url = host.url();
    spawn_watch(
        dir,
        &[&["--attach", &pid, "--host-url", &url], args].concat(),
    )
}

/// `skillprof watch ARGS`, serving on a port of its own, its stderr in `dir`, once it serves.
fn spawn_watch(dir: &Path, args: &[&str]) -> (Reaped, u16, PathBuf) {
    spawn_watch_of(Path::new(env!("CARGO_BIN_EXE_skillprof")), dir, args)
}

/// The value of the sample `name{labels}` in an exposition, if there.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|value| value.split(' ').next()?.parse().ok())
}

/// `signal` to the watch (SIGINT: as a person stopping it would); its exit status.
fn signalled(mut watch: Reaped, signal: nix::sys::signal::Signal) -> std::process::ExitStatus {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(watch.0.id() as i32), signal).unwrap();
    watch.0.wait().unwrap()
}

/// A real Prometheus server scraping `target` every second, on a port of its own.
fn start_prometheus(dir: &Path, target: u16) -> (Reaped, u16) {
    start_prometheus_with(
        dir,
        &format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - \
             {}\nscrape_configs:\n  - job_name: skillprof\n    static_configs:\n      - \
             targets: ['127.0.0.1:{target}']\n",
            grafana().join("recording-rules.yml").display()
        ),
    )
}

/// The start of most tests here: root, the machine to themselves, a folder, and a skillhost
/// started by hand. `why`: what needs root.
fn watched_host(
    why: &str,
) -> (
    std::sync::MutexGuard<'static, ()>,
    tempfile::TempDir,
    OutsideHost,
) {
    require_root(why);
    let one = common::machine();
    let dir = tempfile::tempdir().unwrap();
    let host = OutsideHost::start(dir.path());
    (one, dir, host)
}

/// `skill` run `times` times on `host`, each answered well.
fn execute(host: &OutsideHost, skill: &str, times: usize) {
    runtime().block_on(async {
        for _ in 0..times {
            let reply = host.client().execute(skill, &json!({})).await.unwrap();
            assert!(reply.is_ok(), "{}", reply.text());
        }
    })
}

/// The dashboard and recording rules shipped for watch's series.
fn grafana() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/grafana")
}

/// The skillprof series a text names (a regex's stem, ending in `_`, is not one).
fn series_named(text: &str) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("skillprof_") {
        let name: String = rest[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !name.ends_with('_') {
            names.insert(name.clone());
        }
        rest = &rest[at + name.len()..];
    }
    names
}

#[test]
fn prometheus_stores_each_skills_executions_as_the_host_counts_them_and_a_compile_again() {
    let (_one, dir, host) = watched_host("skillprof watch loads BPF probes");
    let ours = ["watched_a", "watched_b"].map(str::to_owned);
    for name in &ours {
        fs::copy(
            common::sample_component("sample_rs"),
            host.skills.join(format!("{name}.wasm")),
        )
        .unwrap();
    }
    // And a skill that fails on purpose, one way per request's `mode`.
    fs::copy(
        common::sample_component("trap"),
        host.skills.join("watched_failing.wasm"),
    )
    .unwrap();
    let client = host.client();
    let listed = [&ours[..], &["watched_failing".to_owned()]].concat();
    runtime()
        .block_on(client.wait_until_listed(&listed, Duration::from_secs(10)))
        .unwrap();
    let before = loaded_ids();
    let (watch, watch_port, stderr) = start_watch(&host, dir.path());
    // Host-only by default: no program on any syscall or fault path of the machine.
    let loaded = loaded_since(&before);
    let taxing: Vec<String> = loaded.intersection(&taxing_programs()).cloned().collect();
    assert!(
        taxing.is_empty() && !loaded.is_empty(),
        "the watch loaded {loaded:?}, of which every process pays for {taxing:?}"
    );
    let (_prometheus, prometheus_port) = start_prometheus(dir.path(), watch_port);

    // Load: rounds of concurrent requests, 3 to watched_a and 2 to watched_b each; then
    // watched_a evicted and asked again, which compiles it a second time.
    let input = json!({"topic": "watched", "memory_kb": 100, "wait_ms": 5});
    runtime().block_on(async {
        for _ in 0..20 {
            let requests = [
                "watched_a",
                "watched_a",
                "watched_a",
                "watched_b",
                "watched_b",
            ]
            .map(|skill| client.execute(skill, &input));
            for reply in futures_join(requests).await {
                assert!(reply.unwrap().is_ok());
            }
        }
        assert!(client.drop_cached("watched_a").await.unwrap().is_ok());
        assert!(client.execute("watched_a", &input).await.unwrap().is_ok());
        for (mode, times) in [("trap", 3), ("error", 2), ("invalid", 1)] {
            for _ in 0..times {
                let reply = client
                    .execute("watched_failing", &json!({ "mode": mode }))
                    .await
                    .unwrap();
                assert!(!reply.is_ok(), "{mode} answered {}", reply.status);
            }
        }
    });
    // Each failure under its skill, in the call phase, by why the host failed it.
    let text = scrape(watch_port).unwrap();
    let failed = |reason: &str| {
        sample(
            &text,
            &format!(
                "skillprof_skill_failed_total{{skill=\"watched_failing\",phase=\"call\",reason=\"{reason}\"}}"
            ),
        )
    };
    assert_eq!(
        ["trap", "error", "input", "output", "deadline"].map(failed),
        [Some(3.0), Some(2.0), Some(1.0), Some(0.0), Some(0.0)],
        "{}",
        text.lines()
            .filter(|line| line.contains("failed"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_eq!(
        sample(
            &text,
            "skillprof_skill_failed_total{skill=\"watched_a\",phase=\"call\",reason=\"trap\"}"
        ),
        Some(0.0)
    );

    // The host's own count of each skill's executions, and what Prometheus stored.
    let host_metrics = host
        .runtime()
        .block_on(client.get("/metrics"))
        .unwrap()
        .text();
    let counted = |skill: &str| {
        sample(
            &host_metrics,
            &format!("skillhost_executions_total{{skill=\"{skill}\"}}"),
        )
        .unwrap_or_else(|| panic!("the host counts no executions of {skill}"))
    };
    assert_eq!((counted("watched_a"), counted("watched_b")), (61.0, 40.0));
    eventually(
        Duration::from_secs(30),
        "Prometheus to store the executions",
        || {
            let stored = query(
                prometheus_port,
                "skillprof_skill_runs_total{phase=\"call\",skill=~\"watched_.*\"}",
            );
            let of = |skill: &str| {
                stored
                    .iter()
                    .find(|(labels, _)| labels["skill"] == skill)
                    .map(|(_, value)| *value)
            };
            let again = query(
                prometheus_port,
                "skillprof_skill_compiles_again_total{skill=\"watched_a\"}",
            );
            let seen = (of("watched_a"), of("watched_b"), again.first().map(|s| s.1));
            (seen
                != (
                    Some(counted("watched_a")),
                    Some(counted("watched_b")),
                    Some(1.0),
                ))
                .then(|| format!("Prometheus has (a, b, a compiled again) = {seen:?}"))
        },
    );
    // The shipped recording rules evaluate on what Prometheus stored, and every series the
    // rules and the dashboard read is one the watch serves.
    let rules = grafana().join("recording-rules.yml");
    let checked = Command::new("promtool")
        .args(["check", "rules"])
        .arg(&rules)
        .output()
        .unwrap();
    assert!(checked.status.success(), "{checked:?}");
    eventually(
        Duration::from_secs(30),
        "the recording rules to record",
        || {
            let missing: Vec<&str> = ["skill:executions:rate5m", "host:mappings:headroom"]
                .into_iter()
                .filter(|rule| query(prometheus_port, rule).is_empty())
                .collect();
            (!missing.is_empty()).then(|| format!("nothing recorded for {missing:?}"))
        },
    );
    let served: std::collections::BTreeSet<String> = scrape(watch_port)
        .unwrap()
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.split(['{', ' ']).next().map(str::to_owned))
        .collect();
    for shipped in ["recording-rules.yml", "skillprof-watch.json"] {
        let text = fs::read_to_string(grafana().join(shipped)).unwrap();
        let unknown: Vec<String> = series_named(&text)
            .into_iter()
            .filter(|name| !served.contains(name))
            .collect();
        assert!(
            unknown.is_empty(),
            "{shipped} reads series no watch serves: {unknown:?}"
        );
    }

    // The per-host series are there too, with the field table's names.
    eventually(
        Duration::from_secs(30),
        "Prometheus to store four compiles (watched_a twice)",
        || {
            let up = query(prometheus_port, "skillprof_host_code_publishes_total");
            (up.first().map(|s| s.1) != Some(4.0)).then(|| format!("{up:?}"))
        },
    );
    assert_eq!(
        query(prometheus_port, "skillprof_watch_per_skill_series")
            .first()
            .map(|s| s.1),
        Some(1.0)
    );
    // The memory cgroup the host is charged to, when it is in one below the root: v2's, if
    // the memory controller is there, else v1's memory line of /proc/PID/cgroup.
    let lines = fs::read_to_string(format!("/proc/{}/cgroup", host.child.id())).unwrap();
    let line_path = |controller: &str| {
        lines.lines().find_map(|line| {
            let (_, rest) = line.split_once(':')?;
            let (controllers, path) = rest.split_once(':')?;
            let named = if controller.is_empty() {
                controllers.is_empty()
            } else {
                controllers.split(',').any(|c| c == controller)
            };
            (named && path != "/").then_some(path)
        })
    };
    let v2 = line_path("").filter(|path| {
        ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
            .iter()
            .any(|root| Path::new(&format!("{root}{path}/memory.current")).exists())
    });
    let charged = query(prometheus_port, "skillprof_host_cgroup_usage_bytes");
    match v2.or_else(|| line_path("memory")) {
        Some(cgroup) => assert!(
            charged
                .first()
                .is_some_and(|(labels, bytes)| labels["cgroup"] == cgroup && *bytes > 0.0),
            "the host is charged to {cgroup}; Prometheus has {charged:?}"
        ),
        None => assert!(charged.is_empty(), "the host is in no cgroup: {charged:?}"),
    }

    // Stopping detaches and leaves the host serving.
    let status = signalled(watch, nix::sys::signal::Signal::SIGINT);
    let said = fs::read_to_string(&stderr).unwrap();
    assert!(status.success(), "{status}: {said}");
    assert!(said.contains("probes detached"), "{said}");
    nothing_left_since(&before);
    runtime().block_on(async {
        assert!(client.healthy().await);
        assert!(client.execute("watched_b", &input).await.unwrap().is_ok());
    });
}

/// Awaits every future of `requests`, concurrently.
async fn futures_join<F: std::future::Future>(requests: [F; 5]) -> Vec<F::Output> {
    let [a, b, c, d, e] = requests;
    let (a, b, c, d, e) = tokio::join!(a, b, c, d, e);
    vec![a, b, c, d, e]
}

#[test]
fn a_host_without_markers_gets_the_host_series_and_a_series_saying_why_no_skill_series() {
    require_root("skillprof watch loads BPF probes");
    let _one = common::machine();
    let dir = tempfile::tempdir().unwrap();
    // skillhost without its symbols and told not to mark: no ledger, no marker, and no
    // wasmtime function to follow, as a host that does not know skillprof. Pooled: its pool's
    // gauges are host series, read from its own metrics, markers or not.
    let stripped = common::stripped_skillhost(dir.path());
    let host = OutsideHost::start_from(
        &stripped,
        dir.path(),
        &["--no-marks", "--allocator", "pooling"],
    );
    let before = loaded_ids();
    let (watch, port, stderr) = start_watch(&host, dir.path());
    runtime().block_on(async {
        let reply = host
            .client()
            .execute("their_own", &json!({}))
            .await
            .unwrap();
        assert!(reply.is_ok(), "{}", reply.text());
    });
    let text = scrape(port).unwrap();
    assert_eq!(sample(&text, "skillprof_watch_per_skill_series"), Some(0.0));
    assert_eq!(
        sample(&text, "skillprof_watch_probe_live{probe=\"markers\"}"),
        Some(0.0)
    );
    assert!(!text.contains("skillprof_skill_"), "{text}");
    // The host series: memory by holder, faults from the kernel's counters, the machine.
    for series in [
        "skillprof_host_held_heap_kb",
        "skillprof_host_mappings",
        "skillprof_machine_max_map_count",
        "skillprof_self_cpu_ms_total",
    ] {
        assert!(sample(&text, series).is_some(), "no {series} in\n{text}");
    }
    // The request's freed slot is kept warm; none is in use once it was answered.
    let warm = sample(
        &text,
        "skillprof_host_pool_slots{kind=\"unused_warm_memories\"}",
    );
    assert!(warm.is_some_and(|warm| warm >= 1.0), "{text}");
    assert_eq!(
        sample(&text, "skillprof_host_pool_slots{kind=\"memories\"}"),
        Some(0.0),
        "{text}"
    );
    assert!(
        sample(
            &text,
            "skillprof_host_pool_unused_resident_bytes{kind=\"memory\"}"
        )
        .is_some(),
        "{text}"
    );
    assert!(
        text.contains("# HELP skillprof_watch_per_skill_series 1 when the host marks its work"),
        "{text}"
    );
    let said = fs::read_to_string(&stderr).unwrap();
    assert!(
        said.contains("per-skill series need a host that marks its work"),
        "{said}"
    );
    // A SIGKILL leaves nothing attached either, and the host serving.
    let status = signalled(watch, nix::sys::signal::Signal::SIGKILL);
    assert!(!status.success());
    nothing_left_since(&before);
    assert!(runtime().block_on(host.client().healthy()));
}

#[test]
fn a_recorded_watch_leaves_run_folders_of_windows_that_report_draws() {
    let (_one, dir, host) = watched_host("skillprof watch loads BPF probes");
    // And a skill of the host's that fails: the windows say which and why.
    fs::copy(
        common::sample_component("trap"),
        host.skills.join("their_failing.wasm"),
    )
    .unwrap();
    runtime()
        .block_on(
            host.client()
                .wait_until_listed(&["their_failing".to_owned()], Duration::from_secs(10)),
        )
        .unwrap();
    let recorded = dir.path().join("recorded");
    let before = loaded_ids();
    // A folder that cannot be made fails the watch before anything is attached.
    let refused = Command::new(env!("CARGO_BIN_EXE_skillprof"))
        .args(["watch", "--attach", &host.child.id().to_string()])
        .args(["--host-url", &host.url()])
        .args(["--listen", &format!("127.0.0.1:{}", free_port())])
        .args(["--record", "/proc/self/no-such-folder"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && said.contains("--record /proc/self/no-such-folder"),
        "{said}"
    );
    assert!(loaded_since(&before).is_empty(), "{said}");
    let (watch, _, stderr) = start_watch_with(
        &host,
        dir.path(),
        &[
            "--record",
            recorded.to_str().unwrap(),
            "--window",
            "2",
            "--run-windows",
            "2",
            "--keep",
            "2",
        ],
    );
    // The host's own traffic while the windows run: runs of requests, until three recording
    // runs have finished (two kept, the first removed). Each run's summary in record.log ends
    // with its folder. (Counting "not run: " here, a line a run no longer prints since the
    // attached host's stop became part of each run, kept this test waiting its full 90 s.)
    let finished = || {
        fs::read_to_string(recorded.join("record.log"))
            .unwrap_or_default()
            .matches("\nrun folder: ")
            .count()
    };
    let started = std::time::Instant::now();
    runtime().block_on(async {
        let client = host.client();
        while finished() < 3 {
            assert!(
                started.elapsed() < Duration::from_secs(90),
                "three recording runs did not finish in 90 s:\n{}",
                fs::read_to_string(recorded.join("record.log")).unwrap_or_default()
            );
            assert!(
                client
                    .execute("their_own", &json!({}))
                    .await
                    .unwrap()
                    .is_ok()
            );
            let trapped = client
                .execute("their_failing", &json!({"mode": "trap"}))
                .await
                .unwrap();
            assert!(!trapped.is_ok());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let status = signalled(watch, nix::sys::signal::Signal::SIGTERM);
    let said = fs::read_to_string(&stderr).unwrap();
    assert!(status.success(), "{status}: {said}");
    nothing_left_since(&before);
    assert!(runtime().block_on(host.client().healthy()));

    // The folders kept: at most two of this watch's, the older a whole run of two `watch 2`
    // entries (the newer was cut short by the stop).
    let mut folders: Vec<PathBuf> = fs::read_dir(&recorded)
        .unwrap()
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.join("meta.json").exists())
        .collect();
    folders.sort();
    assert!(
        (1..=2).contains(&folders.len()),
        "--keep 2 kept {folders:?}\n{said}"
    );
    let full = &folders[0];
    let commands = common::cli::csv_rows(&full.join("commands.csv"));
    assert_eq!(
        commands.len(),
        2,
        "two windows in {}: {commands:?}",
        full.display()
    );
    for window in &commands {
        assert_eq!(window["cmd"], "watch 2");
        let took: f64 = window["took_ms"].parse().unwrap();
        assert!((2000.0..2500.0).contains(&took), "{window:?}");
    }
    // The host's requests, by skill, from its ledger: a production window as a cmds entry.
    let skills = common::cli::csv_rows(&full.join("skills.csv"));
    assert!(
        skills.iter().any(|row| row["skill"] == "their_own"
            && row["phase"] == "call"
            && row["runs"].parse::<u64>().unwrap() > 0),
        "{skills:?}"
    );
    let reported = Command::new(env!("CARGO_BIN_EXE_skillprof"))
        .arg("report")
        .arg(full)
        .output()
        .unwrap();
    assert!(reported.status.success(), "{reported:?}");
    let page = fs::read_to_string(full.join("report.html")).unwrap();
    assert!(page.contains("watch 2"), "the report names no window");
    // skillprof sent nothing; the host's ledger says which of its requests failed, and why.
    assert!(
        page.contains("the host failed requests of their_failing: ") && page.contains(" trapped"),
        "the report does not say which skill failed and why"
    );
}

#[test]
fn a_watch_without_attach_starts_its_host_serves_its_skills_and_stops_it() {
    require_root("skillprof watch loads BPF probes");
    let _one = common::machine();
    let dir = tempfile::tempdir().unwrap();
    let skills = dir.path().join("skills");
    fs::create_dir_all(&skills).unwrap();
    fs::copy(
        common::sample_component("sample_rs"),
        skills.join("served.wasm"),
    )
    .unwrap();
    let before = loaded_ids();
    let host_port = free_port();
    let log = dir.path().join("host.log");
    let args = [
        "--skills-dir",
        skills.to_str().unwrap(),
        "--host-port",
        &host_port.to_string(),
        "--host-log",
        log.to_str().unwrap(),
    ];
    let (watch, port, stderr) = spawn_watch(dir.path(), &args);
    let said = fs::read_to_string(&stderr).unwrap();
    let host_pid = started_host(&said);
    assert!(
        said.contains(&format!("serving http://127.0.0.1:{host_port}")),
        "{said}"
    );
    let client = skillprof::producers::hostctl::Client::new(
        &format!("http://127.0.0.1:{host_port}"),
        skillprof::record::profile::HostProfile::skillhost().dialect,
    );
    runtime().block_on(async {
        client
            .wait_until_listed(&["served".to_owned()], Duration::from_secs(10))
            .await
            .unwrap();
        for _ in 0..3 {
            let reply = client
                .execute("served", &json!({"topic": "started"}))
                .await
                .unwrap();
            assert!(reply.is_ok(), "{}", reply.text());
        }
    });
    let text = scrape(port).unwrap();
    assert_eq!(
        sample(
            &text,
            "skillprof_skill_runs_total{skill=\"served\",phase=\"call\"}"
        ),
        Some(3.0),
        "{text}"
    );
    // On demand, the host has no pool to show.
    assert!(!text.contains("skillprof_host_pool_"), "{text}");
    // A skill is 63 series, as watch.md and --max-skills' help say when sizing a target.
    let series = text
        .lines()
        .filter(|line| !line.starts_with('#') && line.contains("skill=\"served\""))
        .count();
    assert_eq!(series, 63, "{text}");
    assert!(fs::metadata(&log).unwrap().is_file());

    // The continuous profile: the host's CPU over the next 2 s as a pprof file, which go
    // tool pprof reads, the skill's burn in it by name and labelled with the skill.
    let burning = std::thread::spawn(move || {
        runtime().block_on(client.execute("served", &json!({"burn_ms": 1500})))
    });
    std::thread::sleep(Duration::from_millis(200));
    let http = Http::new(&format!("http://127.0.0.1:{port}"));
    let profile = runtime()
        .block_on(http.send(Method::GET, "/debug/pprof/profile?seconds=2", [], None))
        .unwrap();
    assert_eq!(profile.status.as_u16(), 200, "{}", profile.text());
    assert!(burning.join().unwrap().unwrap().is_ok());
    let pprof = dir.path().join("watch.pb.gz");
    fs::write(&pprof, &profile.body).unwrap();
    common::pprof_top_lists(
        &pprof,
        &["-tagfocus", "skill=served"],
        "served!sample_rs::burn",
    );
    let (status, said) = get(port, "/debug/pprof/profile?seconds=0").unwrap();
    assert_eq!(
        (status, said.as_str()),
        (400, "seconds must be a whole number from 1 to 60\n")
    );

    // Stopping the watch stops the host it started, and leaves nothing attached.
    let status = signalled(watch, nix::sys::signal::Signal::SIGTERM);
    let said = fs::read_to_string(&stderr).unwrap();
    assert!(status.success(), "{status}: {said}");
    assert!(
        said.contains(&format!(
            "the host {host_pid} it started stopped (exit status: 0"
        )),
        "{said}"
    );
    assert!(!Path::new(&format!("/proc/{host_pid}")).exists(), "{said}");
    nothing_left_since(&before);

    // A started host that dies under the watch ends it, with how the host ended.
    let (watch, _, stderr) = spawn_watch(dir.path(), &args);
    let host_pid = started_host(&fs::read_to_string(&stderr).unwrap());
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(host_pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let mut watch = watch;
    let status = watch.0.wait().unwrap();
    let said = fs::read_to_string(&stderr).unwrap();
    assert_eq!(status.code(), Some(3), "{said}");
    assert!(
        said.contains(&format!(
            "the host {host_pid} it started exited (signal: 9 (SIGKILL))"
        )),
        "{said}"
    );
    assert!(said.contains("the end of its log"), "{said}");
    nothing_left_since(&before);
}

/// The pid of the host a watch started, as its stderr says.
fn started_host(said: &str) -> i32 {
    said.split("skillprof watch: host ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no started host in {said}"))
}

/// The endpoint protected as Prometheus' exporters protect theirs: a real Prometheus scrapes
/// it over TLS with a client certificate and basic auth and stores its series; the same
/// Prometheus with a wrong password gets 401, and without the certificate or over plain
/// HTTP gets no answer, and none of those stores a skillprof series. Off loopback without a
/// web configuration, the watch refuses to start.
#[test]
fn prometheus_scrapes_the_watch_over_tls_with_basic_auth_and_wrong_credentials_get_nothing() {
    let (_one, dir, host) = watched_host("skillprof watch loads BPF probes");
    let pid = host.child.id().to_string();
    let url = host.url();

    let refused = Command::new(env!("CARGO_BIN_EXE_skillprof"))
        .args([
            "watch",
            "--attach",
            &pid,
            "--host-url",
            &url,
            "--listen",
            "0.0.0.0:0",
        ])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success()
            && said.contains("--web-config")
            && said.contains("--insecure-listen"),
        "{said}"
    );

    let certs = dir.path().join("certs");
    fs::create_dir(&certs).unwrap();
    common::tls::certificates(&certs);
    let hash = bcrypt::hash("scrape-s3cret", 6).unwrap();
    let web = certs.join("web.yml");
    fs::write(
        &web,
        format!(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  \
             client_ca_file: ca.crt\n  client_auth_type: RequireAndVerifyClientCert\n\
             basic_auth_users:\n  prometheus: '{hash}'\n"
        ),
    )
    .unwrap();
    let port = free_port();
    let stderr = dir.path().join("watch.err");
    let watch = Reaped(
        Command::new(env!("CARGO_BIN_EXE_skillprof"))
            .args(["watch", "--attach", &pid, "--host-url", &url])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .arg("--web-config")
            .arg(&web)
            .stdout(Stdio::null())
            .stderr(fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap(),
    );
    eventually(Duration::from_secs(30), "the watch to serve", || {
        let said = fs::read_to_string(&stderr).unwrap_or_default();
        (!said.contains(&format!("serving https://127.0.0.1:{port}/metrics"))).then_some(said)
    });
    let said = fs::read_to_string(&stderr).unwrap();
    assert!(
        said.contains("(TLS (client certificates required), basic auth (1 user(s), bcrypt))"),
        "{said}"
    );
    assert_eq!(get(port, "/metrics"), None, "plain HTTP gets no answer");

    // One Prometheus, four jobs against the one endpoint.
    let job = |name: &str, scheme: &str, tls: &str, password: &str| {
        format!(
            "  - job_name: {name}\n    scheme: {scheme}\n{tls}    basic_auth:\n      username: \
             prometheus\n      password: {password}\n    static_configs:\n      - targets: \
             ['127.0.0.1:{port}']\n"
        )
    };
    let ca = certs.join("ca.crt");
    let with_cert = format!(
        "    tls_config:\n      ca_file: {}\n      cert_file: {}\n      key_file: {}\n",
        ca.display(),
        certs.join("client.crt").display(),
        certs.join("client.key").display()
    );
    let without_cert = format!("    tls_config:\n      ca_file: {}\n", ca.display());
    let (_prometheus, prometheus_port) = start_prometheus_with(
        dir.path(),
        &format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n{}{}{}{}",
            job("good", "https", &with_cert, "scrape-s3cret"),
            job("wrong_password", "https", &with_cert, "guess"),
            job("no_client_cert", "https", &without_cert, "scrape-s3cret"),
            job("plain_http", "http", "", "scrape-s3cret"),
        ),
    );
    eventually(Duration::from_secs(60), "every job scraped once", || {
        let seen = targets(prometheus_port);
        let scraped = seen.len() == 4
            && seen
                .iter()
                .all(|(job, health, _)| health == if job == "good" { "up" } else { "down" });
        (!scraped).then(|| format!("{seen:?}"))
    });
    let seen = targets(prometheus_port);
    let error_of = |name: &str| {
        seen.iter()
            .find(|(job, _, _)| job == name)
            .map(|(_, _, error)| error.clone())
            .unwrap()
    };
    // The status, not "401" alone: the errors name the target's port, and one suite run's
    // was 40123.
    let unauthorized = "HTTP status 401";
    assert!(
        error_of("wrong_password").contains(unauthorized),
        "{seen:?}"
    );
    assert!(
        !error_of("no_client_cert").contains(unauthorized),
        "no HTTP answer at all: {seen:?}"
    );
    assert!(
        !error_of("plain_http").contains(unauthorized),
        "no HTTP answer at all: {seen:?}"
    );
    eventually(Duration::from_secs(30), "the good job's series", || {
        let stored = query(prometheus_port, "skillprof_self_cpu_ms_total{job=\"good\"}");
        stored.is_empty().then(|| format!("{seen:?}"))
    });
    for job in ["wrong_password", "no_client_cert", "plain_http"] {
        let stored = query(
            prometheus_port,
            &format!("{{job=\"{job}\", __name__=~\"skillprof_.*\"}}"),
        );
        assert!(stored.is_empty(), "{job} stored {stored:?}");
    }
    let status = signalled(watch, nix::sys::signal::Signal::SIGTERM);
    assert!(status.success(), "{}", fs::read_to_string(&stderr).unwrap());
}

/// `--follow`: the attached host killed and started again (a new process on the same port,
/// in the same cgroup, as systemd restarts a crashed unit) is watched again: the watch keeps
/// serving, says what happened, re-attaches, counts the restart, and counts the new host's
/// requests from 0.
#[test]
fn a_host_killed_and_restarted_under_follow_is_watched_again_and_its_new_requests_counted() {
    follows_a_restarted_host(&["--follow"], |_| {});
}

/// `--user` where the watch attaches again (`--follow`): it becomes nobody at once, holding
/// exactly the documented capabilities (permitted, effective, ambient, bounding; never
/// CAP_SYS_ADMIN), and as nobody it follows the restarted host.
#[test]
fn with_user_and_follow_the_watch_holds_only_what_attaching_needs_and_follows_as_that_user() {
    use skillprof::producers::probes::privileges::{BPF, PERFMON, SYS_ADMIN};
    use skillprof::producers::probes::privileges::{
        CHECKPOINT_RESTORE, DAC_READ_SEARCH, SYS_PTRACE,
    };
    let documented = [
        BPF,
        PERFMON,
        CHECKPOINT_RESTORE,
        SYS_PTRACE,
        DAC_READ_SEARCH,
    ]
    .iter()
    .fold(0u64, |mask, cap| mask | (1 << cap.bit));
    assert_eq!(documented.count_ones() as usize, DOCUMENTED_CAPS.len());
    follows_a_restarted_host(&["--follow", "--user", "nobody"], |watch| {
        let status = status_of(watch);
        assert_eq!(status["Uid"], "65534\t65534\t65534\t65534", "{status:?}");
        assert_eq!(status["NoNewPrivs"], "1");
        for set in ["CapPrm", "CapEff", "CapAmb", "CapBnd"] {
            let held = u64::from_str_radix(&status[set], 16).unwrap();
            assert_eq!(held, documented, "{set} {status:?}");
            assert!(!SYS_ADMIN.held_in(held));
        }
    });
}

/// `--user` with `--record`: each recording run (a `skillprof run --attach` the watch starts)
/// runs as nobody with the documented capabilities only, from a copy of skillprof apart from
/// the repository, and records the host's requests by skill.
#[test]
fn with_user_and_record_each_recording_run_attaches_as_that_user() {
    use std::os::unix::fs::MetadataExt;
    let (_one, dir, host) = watched_host("--user changes users");
    let bin = binary_for_nobody(dir.path());
    let recorded = dir.path().join("recorded");
    fs::create_dir(&recorded).unwrap();
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
    std::os::unix::fs::chown(&recorded, Some(nobody.uid.as_raw()), None).unwrap();
    let (pid, url) = (host.child.id().to_string(), host.url());
    let (watch, _, stderr) = spawn_watch_of(
        &bin,
        dir.path(),
        &[
            "--attach",
            &pid,
            "--host-url",
            &url,
            "--user",
            "nobody",
            "--record",
            recorded.to_str().unwrap(),
            "--window",
            "2",
            "--run-windows",
            "1",
        ],
    );
    let folders = || -> Vec<PathBuf> {
        let mut folders: Vec<PathBuf> = fs::read_dir(&recorded)
            .unwrap()
            .flatten()
            .map(|entry| entry.path())
            .filter(|path| path.join("skills.csv").exists())
            .collect();
        folders.sort();
        folders
    };
    let started = std::time::Instant::now();
    // Two finished runs, so that the first holds a whole window of requests.
    while folders().len() < 3 && started.elapsed() < Duration::from_secs(60) {
        execute(&host, "their_own", 1);
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = signalled(watch, nix::sys::signal::Signal::SIGTERM);
    let said = fs::read_to_string(&stderr).unwrap();
    assert!(status.success(), "{status}: {said}");
    assert!(
        said.contains(
            "running as nobody (uid 65534, gid 65534) holding only CAP_BPF, \
                       CAP_PERFMON, CAP_CHECKPOINT_RESTORE, CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH"
        ),
        "{said}"
    );
    let folders = folders();
    assert!(folders.len() >= 2, "{folders:?}\n{said}");
    let first = &folders[0];
    assert_eq!(
        fs::metadata(first.join("skills.csv")).unwrap().uid(),
        nobody.uid.as_raw(),
        "written by the run as nobody"
    );
    let skills = common::cli::csv_rows(&first.join("skills.csv"));
    assert!(
        skills.iter().any(|row| row["skill"] == "their_own"
            && row["phase"] == "call"
            && row["runs"].parse::<u64>().unwrap() > 0),
        "{skills:?}\n{said}"
    );
}

/// A full disk under `--record` (a tmpfs of 640 KiB, room for a few windows with their
/// profiles): the recording
/// ends with a line that says the disk is full and why, the endpoint keeps serving the host's
/// series, and every window that finished stays whole in its folder.
#[test]
fn a_full_disk_ends_the_recording_with_a_line_saying_so_and_the_endpoint_keeps_serving() {
    struct Mounted(PathBuf);
    impl Drop for Mounted {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let (_one, dir, host) = watched_host("mounting a tmpfs needs root");
    let full = dir.path().join("full");
    fs::create_dir(&full).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=640k", "tmpfs"])
        .arg(&full)
        .status()
        .unwrap();
    assert!(mounted.success(), "mount -t tmpfs: {mounted}");
    let _mounted = Mounted(full.clone());
    let (watch, port, stderr) = start_watch_with(
        &host,
        dir.path(),
        &[
            "--record",
            full.to_str().unwrap(),
            "--window",
            "2",
            "--run-windows",
            "2",
        ],
    );
    eventually(Duration::from_secs(120), "the disk to fill", || {
        execute(&host, "their_own", 1);
        let said = fs::read_to_string(&stderr).unwrap();
        (!said.contains("recording ended")).then_some(said)
    });
    let said = fs::read_to_string(&stderr).unwrap();
    assert!(
        said.contains(&format!(
            "recording ended: the disk of {} is full",
            full.display()
        )) && said.contains("No space left on device")
            && said.contains("the endpoint keeps serving"),
        "{said}"
    );
    execute(&host, "their_own", 2);
    let text = scrape(port).expect("the watch serves after the recording ended");
    let runs = "skillprof_skill_runs_total{skill=\"their_own\",phase=\"call\"}";
    assert!(
        sample(&text, runs).is_some_and(|runs| runs >= 2.0),
        "{text}"
    );
    let status = signalled(watch, nix::sys::signal::Signal::SIGTERM);
    assert!(status.success(), "{status}: {said}");

    // Every folder's record reads whole; a run that finished holds both its windows.
    let mut windows = 0;
    for folder in fs::read_dir(&full)
        .unwrap()
        .flatten()
        .map(|entry| entry.path())
    {
        if !folder.join("meta.json").is_file() {
            continue;
        }
        let entries = skillprof::views::output::entries_jsonl::read(&folder.join("entries.jsonl"))
            .unwrap_or_else(|e| panic!("{}: {e:#}", folder.display()));
        if common::cli::meta(&folder).status == skillprof::record::Status::Complete {
            assert_eq!(entries.len(), 2, "{}", folder.display());
        }
        windows += entries.len();
    }
    assert!(windows >= 2, "{windows} windows kept\n{said}");
}

/// Watches a host with `args`, checks the watch process with `check` (its pid) once it
/// serves, then kills and restarts the host and finds it followed, its new requests counted
/// from 0.
fn follows_a_restarted_host(args: &[&str], check: impl Fn(u32)) {
    let (_one, dir, host) = watched_host("skillprof watch loads BPF probes");
    let first = host.child.id();
    let (watch, port, stderr) = start_watch_with(&host, dir.path(), args);
    check(watch.0.id());
    let runs = "skillprof_skill_runs_total{skill=\"their_own\",phase=\"call\"}";
    execute(&host, "their_own", 3);
    assert_eq!(sample(&scrape(port).unwrap(), runs), Some(3.0));

    let host = host.restarted();
    let second = host.child.id();
    eventually(
        Duration::from_secs(20),
        "the watch to follow the host",
        || {
            let said = fs::read_to_string(&stderr).unwrap();
            (!said.contains(&format!(
                "following the host: {second} took {first}'s place"
            )))
            .then_some(said)
        },
    );
    let said = fs::read_to_string(&stderr).unwrap();
    assert!(
        said.contains(&format!(
            "the host {first} exited; --follow is waiting for its successor"
        )),
        "{said}"
    );
    let text = scrape(port).expect("the watch serves the new host");
    assert_eq!(
        sample(&text, "skillprof_watch_host_restarts_total"),
        Some(1.0),
        "{text}"
    );
    execute(&host, "their_own", 2);
    let text = scrape(port).unwrap();
    assert_eq!(
        sample(&text, runs),
        Some(2.0),
        "the new host's requests, from 0: {text}"
    );

    let status = signalled(watch, nix::sys::signal::Signal::SIGTERM);
    let said = fs::read_to_string(&stderr).unwrap();
    assert!(status.success(), "{status}: {said}");
    assert!(
        said.contains(&format!("host {second} left running")),
        "{said}"
    );
    assert!(runtime().block_on(host.client().healthy()));
}

/// /proc/PID/status by field name: who the kernel says the process is and what it holds.
fn status_of(pid: u32) -> std::collections::BTreeMap<String, String> {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.to_owned(), value.trim().to_owned()))
        .collect()
}

/// The capabilities docs/watch.md documents for a host of another user.
const DOCUMENTED_CAPS: [&str; 5] = [
    "bpf",
    "perfmon",
    "checkpoint_restore",
    "sys_ptrace",
    "dac_read_search",
];

/// A copy of skillprof that `nobody` may run (the repository may sit in a folder only root
/// can enter), in `dir`.
fn binary_for_nobody(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let folder = dir.join("bin");
    fs::create_dir_all(&folder).unwrap();
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(&folder, fs::Permissions::from_mode(0o755)).unwrap();
    let copy = folder.join("skillprof");
    fs::copy(env!("CARGO_BIN_EXE_skillprof"), &copy).unwrap();
    copy
}

/// `skillprof watch` on `host` as `nobody`, holding `caps` (setpriv's names) and no others.
fn watch_as_nobody(
    bin: &Path,
    host: &OutsideHost,
    caps: &[&str],
    dir: &Path,
) -> (Command, PathBuf) {
    let (pid, url) = (host.child.id().to_string(), host.url());
    as_nobody(
        bin,
        caps,
        dir,
        &["watch", "--attach", &pid, "--host-url", &url],
    )
}

/// `skillprof ARGS` as `nobody`, holding `caps` (setpriv's names) and no others; its stderr's
/// file.
fn as_nobody(bin: &Path, caps: &[&str], dir: &Path, args: &[&str]) -> (Command, PathBuf) {
    let caps = caps
        .iter()
        .map(|cap| format!("+{cap}"))
        .collect::<Vec<_>>()
        .join(",");
    let stderr = dir.join(format!("{}-{}.err", args[0], caps.replace([',', '+'], "_")));
    let mut command = Command::new("setpriv");
    command
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        .arg(format!("--inh-caps=-all,{caps}"))
        .arg(format!("--ambient-caps={caps}"))
        .arg(bin)
        .args(args)
        .stdout(Stdio::null())
        .stderr(fs::File::create(&stderr).unwrap());
    (command, stderr)
}

/// `skillprof run --attach` as `nobody`: with the documented capabilities it profiles a root
/// host, its requests counted by skill from the ledger; without CAP_CHECKPOINT_RESTORE it
/// refuses before anything runs and names it.
#[test]
fn run_attach_runs_with_the_documented_capabilities_only() {
    let (_one, dir, host) = watched_host("setpriv changes users");
    let bin = binary_for_nobody(dir.path());
    let cmds = dir.path().join("window.cmds");
    fs::write(&cmds, "watch 2\n").unwrap();
    let out = dir.path().join("runs");
    fs::create_dir(&out).unwrap();
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
    std::os::unix::fs::chown(&out, Some(nobody.uid.as_raw()), None).unwrap();
    let (pid, url) = (host.child.id().to_string(), host.url());
    let args = [
        "run",
        cmds.to_str().unwrap(),
        "--attach",
        &pid,
        "--host-url",
        &url,
        "--out",
        out.to_str().unwrap(),
    ];

    let (mut command, stderr) = as_nobody(&bin, &DOCUMENTED_CAPS, dir.path(), &args);
    let mut run = Reaped(command.spawn().unwrap());
    let status = loop {
        if let Some(status) = run.0.try_wait().unwrap() {
            break status;
        }
        execute(&host, "their_own", 1);
        std::thread::sleep(Duration::from_millis(100));
    };
    let said = fs::read_to_string(&stderr).unwrap();
    assert!(status.success(), "{status}: {said}");
    let folder = fs::read_dir(&out)
        .unwrap()
        .flatten()
        .map(|entry| entry.path())
        .find(|path| path.join("skills.csv").is_file())
        .unwrap_or_else(|| panic!("no run folder in {}: {said}", out.display()));
    let skills = common::cli::csv_rows(&folder.join("skills.csv"));
    assert!(
        skills.iter().any(|row| row["skill"] == "their_own"
            && row["phase"] == "call"
            && row["runs"].parse::<u64>().unwrap() > 0),
        "{skills:?}\n{said}"
    );

    let caps: Vec<&str> = DOCUMENTED_CAPS
        .into_iter()
        .filter(|cap| *cap != "checkpoint_restore")
        .collect();
    let (mut command, stderr) = as_nobody(&bin, &caps, dir.path(), &args);
    let status = command.status().unwrap();
    let said = fs::read_to_string(&stderr).unwrap();
    assert!(!status.success(), "{said}");
    assert!(
        said.contains("skillprof run --attach lacks 1 capability")
            && said.contains("CAP_CHECKPOINT_RESTORE: to map the host's ledger"),
        "{said}"
    );
}

/// Least privilege: as `nobody` with the documented capabilities the watch serves per-skill
/// series of a root host; without one of them it refuses and names it; started as root with
/// `--user nobody` it ends up as nobody with no capability at all, and still serves them.
#[test]
fn the_watch_runs_with_the_documented_capabilities_only_and_drops_them_all_with_user() {
    let (_one, dir, host) = watched_host("setpriv and --user change users");
    let bin = binary_for_nobody(dir.path());
    let runs = "skillprof_skill_runs_total{skill=\"their_own\",phase=\"call\"}";
    let serves_skill_series = |port: u16, stderr: &Path| {
        eventually(Duration::from_secs(30), "the watch to serve", || {
            scrape(port)
                .is_none()
                .then(|| fs::read_to_string(stderr).unwrap_or_default())
        });
        execute(&host, "their_own", 2);
        let text = scrape(port).unwrap();
        assert_eq!(sample(&text, runs), Some(2.0), "{text}");
        assert!(
            sample(&text, "skillprof_host_held_heap_kb").is_some(),
            "{text}"
        );
    };

    // The documented set: per-skill series.
    let port = free_port();
    let (mut command, stderr) = watch_as_nobody(&bin, &host, &DOCUMENTED_CAPS, dir.path());
    let watch = Reaped(
        command
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .spawn()
            .unwrap(),
    );
    serves_skill_series(port, &stderr);
    let said = fs::read_to_string(&stderr).unwrap();
    assert!(
        said.contains("without CAP_SYS_ADMIN it does not attach the host's uprobes"),
        "{said}"
    );
    assert!(signalled(watch, nix::sys::signal::Signal::SIGTERM).success());

    // One fewer: refused, the missing one named with what it is for.
    for (left_out, named) in [
        (
            "checkpoint_restore",
            "CAP_CHECKPOINT_RESTORE: to map the host's ledger",
        ),
        ("perfmon", "CAP_PERFMON: to attach the tracing programs"),
    ] {
        let caps: Vec<&str> = DOCUMENTED_CAPS
            .into_iter()
            .filter(|cap| *cap != left_out)
            .collect();
        let (mut command, stderr) = watch_as_nobody(&bin, &host, &caps, dir.path());
        let status = command.args(["--listen", "127.0.0.1:0"]).status().unwrap();
        let said = fs::read_to_string(&stderr).unwrap();
        assert!(!status.success(), "{said}");
        assert!(
            said.contains("lacks 1 capability") && said.contains(named),
            "{said}"
        );
    }

    // Root, then nobody with nothing.
    let (watch, port, stderr) = start_watch_with(&host, dir.path(), &["--user", "nobody"]);
    let status = status_of(watch.0.id());
    assert_eq!(status["Uid"], "65534\t65534\t65534\t65534", "{status:?}");
    for caps in ["CapPrm", "CapEff", "CapAmb", "CapInh"] {
        assert_eq!(status[caps], "0000000000000000", "{caps} {status:?}");
    }
    assert_eq!(status["NoNewPrivs"], "1");
    serves_skill_series(port, &stderr);
    let said = fs::read_to_string(&stderr).unwrap();
    assert!(
        said.contains("now running as nobody (uid 65534, gid 65534) with no capabilities"),
        "{said}"
    );
    assert!(signalled(watch, nix::sys::signal::Signal::SIGINT).success());
}

/// The shipped units are ones systemd accepts.
#[test]
fn the_systemd_units_verify() {
    let dir = tempfile::tempdir().unwrap();
    let units = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/systemd");
    let skillhost = Path::new(env!("CARGO_BIN_EXE_skillprof")).with_file_name("skillhost");
    let mut paths = Vec::new();
    for unit in ["skillhost.service", "skillprof-watch.service"] {
        let text = fs::read_to_string(units.join(unit)).unwrap();
        // The binaries where they are built, not where the guide installs them.
        let text = text
            .replace("/usr/local/bin/skillhost", skillhost.to_str().unwrap())
            .replace("/usr/local/bin/skillprof", env!("CARGO_BIN_EXE_skillprof"));
        let path = dir.path().join(unit);
        fs::write(&path, text).unwrap();
        paths.push(path);
    }
    let output = Command::new("systemd-analyze")
        .arg("verify")
        .args(&paths)
        .output()
        .expect("systemd-analyze (systemd)");
    assert!(
        output.status.success() && output.stderr.is_empty(),
        "{}",
        common::cli::describe(&output)
    );
}

/// Bounds: with `--max-skills 1` the busier skill's series are served and the other is
/// counted as left out; a client that reads its answer a byte a second holds up none of 20
/// scrapes made meanwhile (each answers while the slow one is still reading).
#[test]
fn a_slow_client_holds_up_no_scrape_and_skills_beyond_the_cap_are_counted_not_served() {
    use std::io::{Read, Write};
    let (_one, dir, host) = watched_host("skillprof watch loads BPF probes");
    fs::copy(
        host.skills.join("their_own.wasm"),
        host.skills.join("second.wasm"),
    )
    .unwrap();
    let (watch, port, _) = start_watch_with(&host, dir.path(), &["--max-skills", "1"]);
    runtime().block_on(async {
        let client = host.client();
        client
            .wait_until_listed(&["second".to_owned()], Duration::from_secs(10))
            .await
            .unwrap();
    });
    execute(&host, "their_own", 3);
    execute(&host, "second", 1);
    let text = scrape(port).unwrap();
    let runs = |skill: &str| {
        sample(
            &text,
            &format!("skillprof_skill_runs_total{{skill=\"{skill}\",phase=\"call\"}}"),
        )
    };
    assert_eq!(
        (runs("their_own"), runs("second")),
        (Some(3.0), None),
        "{text}"
    );
    assert_eq!(
        sample(&text, "skillprof_watch_skills_left_out"),
        Some(1.0),
        "{text}"
    );

    // A slow reader: its request sent whole, its answer taken a byte a second through a
    // receive buffer of 2 KiB, so the watch's writes of the answer fill it and wait.
    let mut slow = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let small: libc::c_int = 2048;
    // SAFETY: a valid socket and an int option of the size given.
    let set = unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&slow),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&small as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(set, 0);
    slow.write_all(b"GET /metrics HTTP/1.1\r\nHost: slow\r\n\r\n")
        .unwrap();
    let reader = std::thread::spawn(move || {
        let mut byte = [0u8; 1];
        for _ in 0..8 {
            slow.read_exact(&mut byte).unwrap();
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    std::thread::sleep(Duration::from_secs(1));
    let started = std::time::Instant::now();
    let scrapes: Vec<_> = (0..20)
        .map(|_| std::thread::spawn(move || (scrape(port).is_some(), std::time::Instant::now())))
        .collect();
    for handle in scrapes {
        let (answered, at) = handle.join().unwrap();
        assert!(answered);
        assert!(
            !reader.is_finished() && at.duration_since(started) < Duration::from_secs(5),
            "a scrape waited for the slow client: {:?}",
            at.duration_since(started)
        );
    }
    reader.join().unwrap();
    assert!(signalled(watch, nix::sys::signal::Signal::SIGTERM).success());
}

/// The own-host guide's example (profiler/marks/examples/marked_host.rs, built with the
/// workspace's tests): a wasmtime host of its own that marks its work with skillprof-marks
/// and speaks its own routes, described by the profile beside it. Watched through that
/// profile, its skill's instantiations and calls are counted per skill, each request once.
#[test]
fn the_guides_example_host_marks_its_work_and_the_watch_counts_it_per_skill() {
    require_root("skillprof watch loads BPF probes");
    let _one = common::machine();
    let marks = Path::new(env!("CARGO_MANIFEST_DIR")).join("marks/examples");
    let bin = Path::new(env!("CARGO_BIN_EXE_skillprof")).with_file_name("examples/marked_host");
    assert!(
        bin.is_file(),
        "{} is missing: `cargo test --workspace` builds it (or cargo build --release -p \
         skillprof-marks --example marked_host)",
        bin.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let skills = dir.path().join("skills");
    fs::create_dir(&skills).unwrap();
    fs::copy(
        common::sample_component("sample_rs"),
        skills.join("their_own.wasm"),
    )
    .unwrap();
    let port = free_port();
    let host = Reaped(
        Command::new(&bin)
            .arg(&skills)
            .arg(port.to_string())
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let url = format!("http://127.0.0.1:{port}");
    let profile = skillprof::record::profile::HostProfile::load(
        marks.join("marked-host.toml").to_str().unwrap(),
    )
    .unwrap();
    let client = skillprof::producers::hostctl::Client::new(&url, profile.dialect);
    eventually(
        Duration::from_secs(30),
        "the example host to answer",
        || (!runtime().block_on(client.healthy())).then(|| "not yet".to_owned()),
    );
    let (pid, profile_path) = (host.0.id().to_string(), marks.join("marked-host.toml"));
    let (watch, port, stderr) = spawn_watch(
        dir.path(),
        &[
            "--attach",
            &pid,
            "--host-url",
            &url,
            "--host-profile",
            profile_path.to_str().unwrap(),
        ],
    );
    runtime().block_on(async {
        for _ in 0..3 {
            let reply = client
                .execute("their_own", &json!({"topic": "mine"}))
                .await
                .unwrap();
            assert!(reply.is_ok(), "{}", reply.text());
        }
    });
    let text = scrape(port).unwrap();
    for phase in ["instantiate", "call"] {
        let runs = format!("skillprof_skill_runs_total{{skill=\"their_own\",phase=\"{phase}\"}}");
        assert_eq!(sample(&text, &runs), Some(3.0), "{phase}: {text}");
    }
    assert_eq!(
        sample(&text, "skillprof_watch_per_skill_series"),
        Some(1.0),
        "{text}"
    );
    let status = signalled(watch, nix::sys::signal::Signal::SIGTERM);
    let said = fs::read_to_string(&stderr).unwrap();
    assert!(status.success(), "{status}: {said}");
}
