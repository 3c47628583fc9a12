//! How soon `skillprof watch --follow` watches a restarted host again: a skillhost SIGKILLed
//! and started again on its port (as systemd restarts a unit), `--restarts` times. For each,
//! the time from the new host answering its health route to the watch serving it (its
//! restart counted in a scrape), against Prometheus' default scrape interval; and the new
//! host's requests made once it is served, against what the watch counts of them.
//!
//!     cargo bench -p skillprof --bench follow [-- --restarts 10]
//!
//! Needs root (the probes) and a release build (skillprof, skillhost, the sample skills).
//! Figures only, no pass/fail.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use hyper::Method;
use skillprof::producers::hostctl::client::Http;
use skillprof::producers::hostctl::{Client, SampleSkills};
use skillprof::record::profile::{HostProfile, SkillWorld};

mod common;
use common::{sample, skillprof_binary};

/// Prometheus' default scrape interval.
const SCRAPE_EVERY: Duration = Duration::from_secs(15);
/// Requests to the new host once it is served.
const REQUESTS: usize = 20;
const RUNS: &str = "skillprof_skill_runs_total{skill=\"followed\",phase=\"call\"}";

/// What --follow costs in time after a restart.
#[derive(clap::Parser)]
struct Flags {
    /// Times the host is killed and started again.
    #[arg(long, default_value_t = 10)]
    restarts: u32,
}

fn main() -> Result<()> {
    let Flags { restarts } = common::flags();
    ensure!(restarts > 0, "--restarts: at least 1");
    ensure!(
        rustix::process::geteuid().is_root(),
        "the follow benchmark loads BPF probes: run it as root"
    );
    let skillprof = skillprof_binary()?;
    let dir = tempfile::tempdir()?;
    let skills = dir.path().join("skills");
    std::fs::create_dir_all(&skills)?;
    let component = SampleSkills::beside_executable(SkillWorld::Skillprof)?.path("sample_rs")?;
    std::fs::copy(&component, skills.join("followed.wasm"))?;
    let port = free_port()?;
    let host_url = format!("http://127.0.0.1:{port}");
    let start_host = || -> Result<Child> {
        Command::new(skillprof.with_file_name("skillhost"))
            .args(["--skills-dir", skills.to_str().context("a UTF-8 path")?])
            .args(["--port", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting skillhost")
    };
    let runtime = tokio::runtime::Runtime::new()?;
    let client = Client::new(&host_url, HostProfile::skillhost().dialect);
    let answers = || -> Result<()> {
        runtime.block_on(async {
            let started = Instant::now();
            while !client.healthy().await {
                ensure!(
                    started.elapsed() < Duration::from_secs(30),
                    "skillhost did not start"
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Ok(())
        })
    };
    let mut host = Reaped(start_host()?);
    answers()?;

    let watch_port = free_port()?;
    let mut watch = Reaped(
        Command::new(&skillprof)
            .args(["watch", "--attach", &host.0.id().to_string(), "--follow"])
            .args(["--host-url", &host_url])
            .args(["--listen", &format!("127.0.0.1:{watch_port}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting skillprof watch")?,
    );
    let scrape = || -> Option<String> {
        let http = Http::new(&format!("http://127.0.0.1:{watch_port}"));
        let reply = runtime
            .block_on(http.send(Method::GET, "/metrics", [], None))
            .ok()?;
        reply.is_ok().then(|| reply.text())
    };
    let until = |what: &str, limit: Duration, done: &dyn Fn() -> bool| -> Result<()> {
        let started = Instant::now();
        while !done() {
            ensure!(started.elapsed() < limit, "{what} within {limit:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    };
    until("the watch serving", Duration::from_secs(30), &|| {
        scrape().is_some()
    })?;

    println!(
        "skillprof watch --follow, skillhost SIGKILLed and started again {restarts} times, \
         this machine ({} CPUs)",
        std::thread::available_parallelism().map_or(0, usize::from)
    );
    let (mut after_up, mut after_kill) = (Vec::new(), Vec::new());
    let (mut sent, mut counted) = (0, 0);
    for restart in 1..=restarts {
        let killed = Instant::now();
        host.0.kill()?;
        host.0.wait()?;
        host = Reaped(start_host()?);
        answers()?;
        let up = Instant::now();
        until("the watch following the host", 2 * SCRAPE_EVERY, &|| {
            scrape().and_then(|text| sample(&text, "skillprof_watch_host_restarts_total"))
                == Some(f64::from(restart))
        })?;
        after_up.push(up.elapsed().as_secs_f64());
        after_kill.push(killed.elapsed().as_secs_f64());
        runtime.block_on(async {
            client
                .wait_until_listed(&["followed".to_owned()], Duration::from_secs(30))
                .await?;
            for _ in 0..REQUESTS {
                let reply = client.execute("followed", &serde_json::json!({})).await?;
                ensure!(reply.is_ok(), "followed: {}", reply.text());
            }
            anyhow::Ok(())
        })?;
        sent += REQUESTS;
        counted += scrape().and_then(|text| sample(&text, RUNS)).unwrap_or(0.0) as usize;
        eprintln!(
            "restart {restart}: served again {:.2} s after the new host answered, {:.2} s after \
             the kill",
            after_up[after_up.len() - 1],
            after_kill[after_kill.len() - 1]
        );
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(watch.0.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )?;
    watch.0.wait()?;

    let summary = |mut values: Vec<f64>| {
        values.sort_by(f64::total_cmp);
        format!(
            "median {:.2} s, max {:.2} s",
            skillprof::ground::stats::median(&values),
            values[values.len() - 1]
        )
    };
    let within = after_up
        .iter()
        .filter(|s| **s <= 2.0 * SCRAPE_EVERY.as_secs_f64())
        .count();
    println!(
        "  served again after the new host answered: {}; within 2 scrape intervals (30 s): {within} \
         of {restarts}",
        summary(after_up)
    );
    println!("  served again after the kill: {}", summary(after_kill));
    println!(
        "  the new hosts' requests once served: {counted} counted of {sent} sent (each host's \
         from 0)"
    );
    Ok(())
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// A child killed and reaped however the benchmark ends.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
