//! Host benchmark: prints what the skill host costs, with the on-demand and the pooling
//! allocator side by side, measured in the same run, and what its markers cost a hello
//! request, with skillprof's uprobe attached and without. Figures only, no pass/fail: these
//! machines are noisy, so compare the ratios.
//!
//!     cargo bench -p skillhost --bench host [-- --copies N --seconds S] [--markers-only]
//!
//! Needs `cargo xtask build-skills`, a release skillhost, and `hey` (scripts/test.sh installs it).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use skillprof::ground::stats::{median, median_ci, nearest_rank};
use skillprof::producers::hostctl::{Client, HostProcess, SampleSkills, SkillsDir};
use skillprof::producers::probes::{ProbeOptions, ProbeSession};
use skillprof::record::probes::Mechanism;
use skillprof::record::profile::{HostProfile, HostSpec, SkillWorld};

const ALLOCATORS: [&str; 2] = ["on-demand", "pooling"];
const LATENCY_REQUESTS: usize = 200;
const HEY_CONNECTIONS: usize = 150;
/// Interleaved rounds of the marker comparison: off, attached, off again.
const MARKER_ROUNDS: usize = 15;

struct Options {
    copies: usize,
    seconds: u64,
    /// Only the markers' cost (minutes less).
    markers_only: bool,
}

#[derive(Default)]
struct Figures {
    rows: Vec<(String, f64)>,
}

impl Figures {
    fn add(&mut self, name: impl Into<String>, value: f64) {
        let name = name.into();
        eprintln!("  {name}: {value:.1}");
        self.rows.push((name, value));
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let options = parse_options()?;
    let samples = SampleSkills::beside_executable(SkillWorld::Skillprof)?;
    if !options.markers_only {
        let hey = find_hey()?;
        let mut results = Vec::new();
        for allocator in ALLOCATORS {
            eprintln!("allocator {allocator}:");
            results.push(measure(allocator, &samples, &hey, &options).await?);
        }
        print_table(&results);
    }
    markers(&samples).await
}

/// What the markers cost a hello request. Unattached (no lease on the ledger), a mark is a
/// load and a call: timed here over millions of calls, times the marks a request makes.
/// Attached (skillprof's ledger alone, no BPF program of the plan): round-trip p50 over sequential requests with the uprobe against the mean
/// of the blocks before and after without it, in interleaved rounds; the ratio of the two
/// blocks without is the control, the noise the comparison is read against.
async fn markers(samples: &SampleSkills) -> Result<()> {
    eprintln!("markers:");
    let calls = 10_000_000u32;
    let started = Instant::now();
    for i in 0..calls {
        skillprof_common::ledger::mark(u64::from(i), 0, 0);
    }
    let call_ns = started.elapsed().as_secs_f64() * 1e9 / f64::from(calls);
    if !skillprof::producers::system::running_as_root() {
        println!(
            "\nmarkers: an unattached mark costs {call_ns:.2} ns; attached: NOT MEASURED, the \
             uprobe needs root (sudo -E cargo bench -p skillhost --bench host)"
        );
        return Ok(());
    }
    let bench = Bench::start("on-demand", None).await?;
    bench.load("hello", &samples.path("hello")?).await?;
    let only_markers = ProbeOptions {
        mechanisms: Some(vec![Mechanism::Ledger]),
        max_entries: 1,
        ..ProbeOptions::default()
    };
    let (mut attached, mut control, mut off_p50, mut hits_per_request) =
        (Vec::new(), Vec::new(), Vec::new(), 0.0);
    for round in 0..MARKER_ROUNDS {
        let before = round_trip_p50(bench.client()).await?;
        let session = ProbeSession::start(bench.host.pid(), &only_markers)?;
        let on = round_trip_p50(bench.client()).await?;
        let hits = session
            .entry(0)?
            .read(skillprof::record::probes::Probe::Markers, |c| c.marks.hits)
            .context("the host's ledger was not read")?;
        hits_per_request = hits as f64 / LATENCY_REQUESTS as f64;
        drop(session);
        let after = round_trip_p50(bench.client()).await?;
        eprintln!(
            "  round {round}: off {before:.1} µs, attached {on:.1} µs, off {after:.1} µs ({hits_per_request:.1} marks/request)"
        );
        attached.push(on / ((before + after) / 2.0));
        control.push(after / before);
        off_p50.push((before + after) / 2.0);
    }
    bench.stop().await?;
    off_p50.sort_by(f64::total_cmp);
    let p50_us = median(&off_p50);
    let ratio = |values: &mut Vec<f64>| {
        values.sort_by(f64::total_cmp);
        let (low, high) = median_ci(values, 2000, 15);
        format!("{:.4} [95% CI {low:.4}, {high:.4}]", median(values))
    };
    println!(
        "\nmarkers (hello, {MARKER_ROUNDS} interleaved rounds of {LATENCY_REQUESTS} sequential requests, round-trip p50 {p50_us:.1} µs):"
    );
    println!(
        "  unattached: {call_ns:.2} ns per mark × {hits_per_request:.1} marks per request = {:.5}% of p50",
        100.0 * call_ns * hits_per_request / (p50_us * 1e3)
    );
    println!(
        "  attached / unattached p50, median of rounds: {}",
        ratio(&mut attached)
    );
    println!(
        "  control, unattached / unattached:            {}",
        ratio(&mut control)
    );
    Ok(())
}

/// The client's round-trip p50 of sequential hello requests, in microseconds.
async fn round_trip_p50(client: &Client) -> Result<f64> {
    let mut samples = Vec::with_capacity(LATENCY_REQUESTS);
    for _ in 0..LATENCY_REQUESTS {
        let started = Instant::now();
        let reply = client
            .execute("hello", &json!({"topic": "markers"}))
            .await?;
        anyhow::ensure!(reply.is_ok(), "hello failed: {}", reply.error_message());
        samples.push(started.elapsed().as_secs_f64() * 1e6);
    }
    samples.sort_by(f64::total_cmp);
    Ok(nearest_rank(&samples, 0.50))
}

/// skillhost's own throughput and memory with copies of a skill.
#[derive(clap::Parser)]
struct Flags {
    /// Copies of the sample skill the host holds.
    #[arg(long, default_value_t = 10)]
    copies: usize,
    /// Seconds of each load.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Only the markers' cost.
    #[arg(long)]
    markers_only: bool,
}

fn parse_options() -> Result<Options> {
    use clap::Parser as _;
    // cargo bench passes `--bench`: not ours.
    let flags = Flags::parse_from(std::env::args().filter(|arg| arg != "--bench"));
    Ok(Options {
        copies: flags.copies,
        seconds: flags.seconds,
        markers_only: flags.markers_only,
    })
}

struct Bench {
    host: HostProcess,
    skills: SkillsDir,
    _dir: tempfile::TempDir,
}

impl Bench {
    async fn start(allocator: &str, cache: Option<&Path>) -> Result<Bench> {
        let dir = tempfile::tempdir()?;
        let skills = SkillsDir::create(
            &dir.path().join("skills"),
            HostProfile::skillhost().registry,
        )?;
        let mut flags = vec!["--allocator".to_owned(), allocator.to_owned()];
        flags.extend(["--scan-interval-ms".to_owned(), "50".to_owned()]);
        if let Some(cache) = cache {
            flags.extend(["--cache-dir".to_owned(), cache.display().to_string()]);
        }
        let host = HostProcess::start(
            &HostSpec::skillhost(&flags)?,
            skills.path(),
            &dir.path().join("host.log"),
            &dir.path().join("workdir"),
            None,
            std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 0),
            Duration::from_secs(30),
        )
        .await?;
        Ok(Bench {
            host,
            skills,
            _dir: dir,
        })
    }

    fn client(&self) -> &Client {
        &self.host.client
    }

    /// Registers `name`, executes it once (which compiles or loads it) and returns the
    /// host's own load time and where the code came from.
    async fn load(&self, name: &str, artifact: &Path) -> Result<(f64, String)> {
        self.skills.add(name, artifact)?;
        self.client()
            .wait_until_listed(&[name.to_owned()], Duration::from_secs(10))
            .await?;
        let reply = self
            .client()
            .execute(name, &json!({"topic": "bench"}))
            .await?;
        if !reply.is_ok() {
            bail!("{name}: {} {}", reply.status, reply.error_message());
        }
        let status: Value = self.client().get_json(&format!("/skills/{name}")).await?;
        let load_ms = status["load_ms"].as_f64().context("load_ms")?;
        Ok((load_ms, status["origin"].as_str().unwrap_or("?").to_owned()))
    }

    fn rss_mib(&self) -> Result<f64> {
        let pid = i32::try_from(self.host.pid())?;
        let status = procfs::process::Process::new(pid)?.status()?;
        Ok(status.vmrss.context("VmRSS")? as f64 / 1024.0)
    }

    fn vms_gib(&self) -> Result<f64> {
        let pid = i32::try_from(self.host.pid())?;
        let status = procfs::process::Process::new(pid)?.status()?;
        Ok(status.vmsize.context("VmSize")? as f64 / (1024.0 * 1024.0))
    }

    async fn stop(self) -> Result<()> {
        self.host.stop(Duration::from_secs(30)).await?;
        Ok(())
    }
}

async fn measure(
    allocator: &str,
    samples: &SampleSkills,
    hey: &Path,
    options: &Options,
) -> Result<Figures> {
    let mut figures = Figures::default();
    let cache = tempfile::tempdir()?;
    let py = samples.path("sample_py")?;
    let rs = samples.path("sample_rs")?;

    // Compilation, request latency and throughput, on a host that fills the disk cache.
    let bench = Bench::start(allocator, Some(cache.path())).await?;
    figures.add("VMS of an idle host (GiB)", bench.vms_gib()?);
    for (name, artifact) in [("sample_py1", &py), ("sample_rs1", &rs)] {
        let (ms, origin) = bench.load(name, artifact).await?;
        anyhow::ensure!(
            origin == "compiled",
            "{name} was {origin}, expected a compilation"
        );
        figures.add(format!("compile {name} (ms)"), ms);
    }
    bench.load("hello", &samples.path("hello")?).await?;
    for skill in ["hello", "sample_rs1", "sample_py1"] {
        let (p50, p99) = latency(bench.client(), skill).await?;
        figures.add(format!("instantiate+call {skill} p50 (ms)"), p50);
        figures.add(format!("instantiate+call {skill} p99 (ms)"), p99);
    }
    figures.add(
        format!("hello requests/s, {HEY_CONNECTIONS} connections (hey)"),
        requests_per_second(hey, bench.client(), options.seconds)?,
    );
    bench.stop().await?;

    // Loading from the warm cache: mmap-backed, so copies share the page cache.
    let bench = Bench::start(allocator, Some(cache.path())).await?;
    for (name, artifact) in [("sample_py1", &py), ("sample_rs1", &rs)] {
        let (ms, origin) = bench.load(name, artifact).await?;
        anyhow::ensure!(
            origin == "disk_cache",
            "{name} was {origin}, expected the disk cache"
        );
        figures.add(format!("warm-cache load {name} (ms)"), ms);
    }
    bench.stop().await?;

    for (label, cache) in [("compiled", None), ("from disk cache", Some(cache.path()))] {
        let bench = Bench::start(allocator, cache).await?;
        for copy in 1..=options.copies {
            bench.load(&format!("sample_py{copy}"), &py).await?;
            if copy == 1 || copy == 2 || copy == options.copies {
                figures.add(
                    format!("RSS with {copy} sample_py, {label} (MiB)"),
                    bench.rss_mib()?,
                );
            }
        }
        bench.stop().await?;
    }
    Ok(figures)
}

/// p50 and p99 of the host's instantiate+call time over sequential requests.
async fn latency(client: &Client, skill: &str) -> Result<(f64, f64)> {
    let mut samples = Vec::with_capacity(LATENCY_REQUESTS);
    for _ in 0..LATENCY_REQUESTS {
        let reply = client.execute(skill, &json!({"topic": "latency"})).await?;
        let instantiate = reply
            .server_timing("instantiate")
            .context("Server-Timing instantiate")?;
        let call = reply.server_timing("call").context("Server-Timing call")?;
        samples.push(instantiate + call);
    }
    samples.sort_by(f64::total_cmp);
    Ok((nearest_rank(&samples, 0.50), nearest_rank(&samples, 0.99)))
}

fn requests_per_second(hey: &Path, client: &Client, seconds: u64) -> Result<f64> {
    let started = Instant::now();
    let output = Command::new(hey)
        .args([
            "-z",
            &format!("{seconds}s"),
            "-c",
            &HEY_CONNECTIONS.to_string(),
        ])
        .args(["-m", "POST", "-T", "application/json"])
        .args(["-d", r#"{"skill": "hello", "input": {"topic": "hey"}}"#])
        .arg(format!("{}/execute_skill", client.base()))
        .output()
        .with_context(|| format!("running {}", hey.display()))?;
    let report = String::from_utf8_lossy(&output.stdout);
    anyhow::ensure!(
        output.status.success(),
        "hey failed after {:?}: {report}",
        started.elapsed()
    );
    let not_ok: Vec<&str> = report
        .lines()
        .filter(|line| line.trim_start().starts_with('[') && !line.contains("[200]"))
        .collect();
    anyhow::ensure!(not_ok.is_empty(), "hey saw failed requests: {not_ok:?}");
    report
        .lines()
        .find_map(|line| line.trim().strip_prefix("Requests/sec:"))
        .and_then(|value| value.trim().parse().ok())
        .with_context(|| format!("no Requests/sec in hey's report:\n{report}"))
}

fn find_hey() -> Result<PathBuf> {
    let repo_bin = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../build/bin/hey");
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .map(|dir| dir.join("hey"))
        .chain([repo_bin])
        .find(|candidate| candidate.is_file())
        .context("hey is not installed: run scripts/test.sh (it puts hey in build/bin)")
}

fn print_table(results: &[Figures]) {
    let [on_demand, pooling] = results else {
        unreachable!("two allocators")
    };
    let width = on_demand
        .rows
        .iter()
        .map(|(name, _)| name.len())
        .max()
        .unwrap_or(0);
    println!(
        "\n{:width$}  {:>12}  {:>12}  {:>8}",
        "host benchmark", ALLOCATORS[0], ALLOCATORS[1], "ratio"
    );
    for ((name, a), (_, b)) in on_demand.rows.iter().zip(&pooling.rows) {
        println!("{name:width$}  {a:>12.1}  {b:>12.1}  {:>8.2}", b / a);
    }
}
