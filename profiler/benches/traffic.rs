//! The load generator measured: does it send what it is asked, does it see a stall, and what
//! does a request cost it. skillhost serves the hello skill on the machine's last CPU, the
//! generator runs on the first.
//!
//! - fidelity: open-loop steps at rates the host holds easily; per step the asked and
//!   achieved rates and the send lag's p99 (targets: within 1%, under 1 ms);
//! - stall: one open-loop step and one closed-loop step (`hey -c N`'s way), each with the host
//!   stopped (SIGSTOP) for a second in its middle: the open loop's p99 and max show the
//!   stall, the closed loop's p99 does not (its senders wait, so the stalled second holds
//!   only N requests);
//! - cost: closed loops of many senders against hello: the generator's CPU per request, and
//!   the requests per second one core of it drives (target: 20,000 or more).
//!
//!     cargo bench -p skillprof --bench traffic [-- --seconds S]
//!
//! Needs the release build of skillprof and skillhost and the sample skills; no root.

use std::time::Duration;

use anyhow::{Result, ensure};
use skillprof::producers::hostctl::{Client, SampleSkills};
use skillprof::producers::traffic::generator::{self, StepPlan, Targets};
use skillprof::record::profile::{HostProfile, SkillWorld};
use skillprof::record::traffic::{Arrivals, Load, TrafficStep};

mod common;
use common::{Host, skillprof_binary};

/// The load generator against skillhost, each on a CPU of its own.
#[derive(clap::Parser)]
struct Flags {
    /// Seconds of each step.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
}

fn main() -> Result<()> {
    let Flags { seconds } = common::flags();
    let cpus = std::thread::available_parallelism()?.get();
    ensure!(cpus >= 2, "the generator and the host need a CPU each");
    let (host_cpu, generator_cpu) = (vec![cpus - 1], vec![0]);
    let skillprof = skillprof_binary()?;
    let dir = tempfile::tempdir()?;
    let skills = dir.path().join("skills");
    std::fs::create_dir_all(&skills)?;
    let samples = SampleSkills::beside_executable(SkillWorld::Skillprof)?;
    std::fs::copy(samples.path("hello")?, skills.join("hello.wasm"))?;
    let host = Host::start(&skillprof, &skills, &[], Some(&host_cpu))?;
    let client = Client::new(
        &format!("http://127.0.0.1:{}", host.port),
        HostProfile::skillhost().dialect,
    );
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        client
            .wait_until_listed(&["hello".to_owned()], Duration::from_secs(30))
            .await
    })?;
    let step = |load: Load, seconds: u64| -> Result<TrafficStep> {
        let plan = StepPlan {
            targets: Targets::one("hello", serde_json::json!({})),
            load,
            length: Duration::from_secs(seconds),
            cpus: Some(generator_cpu.clone()),
        };
        runtime.block_on(generator::run(&client, plan))
    };
    let open = |rps| Load::Open {
        rps,
        arrivals: Arrivals::Constant,
    };

    println!(
        "\nthe generator on CPU 0, skillhost (hello) on CPU {}, steps of {seconds} s (a fifth warm-up)",
        cpus - 1
    );
    println!("\nfidelity: asked / achieved, send lag p99, late sends");
    for rps in [500, 1000, 2000, 4000] {
        let s = step(open(rps), seconds)?;
        println!(
            "  {rps:>6}/s: achieved {:>8.1}/s ({:+.2}%), send lag p99 {:.3} ms, {} late of {}, p99 {:.2} ms",
            s.achieved_rps(),
            (s.achieved_rps() / f64::from(rps) - 1.0) * 100.0,
            s.send_lag_p99_ms,
            s.late_sends,
            s.sent,
            s.latency.p99_ms
        );
    }

    println!("\nstall: the host stopped (SIGSTOP) for 1 s in the middle of the step");
    let stalled = |load: Load| -> Result<TrafficStep> {
        let pid = host.pid();
        let length = seconds.max(5);
        let stopper = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(length * 1000 / 2));
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGSTOP,
            );
            std::thread::sleep(Duration::from_secs(1));
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGCONT,
            );
        });
        let s = step(load, length);
        let _ = stopper.join();
        s
    };
    for (name, load) in [
        ("open loop 500/s", open(500)),
        ("closed loop, 4 senders", Load::Closed { concurrency: 4 }),
    ] {
        let s = stalled(load)?;
        println!(
            "  {name:<24} p50 {:>8.2} ms, p99 {:>8.2} ms, max {:>8.1} ms, {} answered",
            s.latency.p50_ms, s.latency.p99_ms, s.latency.max_ms, s.ok
        );
    }

    println!("\ncost: closed loops against hello (the host on its own CPU sets the rate)");
    for concurrency in [16, 64] {
        let s = step(Load::Closed { concurrency }, seconds)?;
        let requests = s.ok as f64 * (1.0 + s.warmup_s / s.measured_s);
        let per_request_us = s.generator_cpu_ms * 1e3 / requests.max(1.0);
        println!(
            "  {concurrency:>3} senders: {:>8.1}/s answered, generator {:.0} ms of CPU, {:.1} µs \
             per request: one core of it drives {:.0}/s",
            s.achieved_rps(),
            s.generator_cpu_ms,
            per_request_us,
            1e6 / per_request_us
        );
    }
    drop(host);
    Ok(())
}
