//! `skillprof watch` on the real Pharia hosts, the 2024 kernel and the 0.15 engine, which do
//! not mark their work: the watch starts each (its profile, the real binary) and records it
//! in windows while requests load it. Per host: what the watch said on stderr, which probes
//! went live, the host series it served and the per-skill series it could not
//! (`skillprof_watch_per_skill_series`), the requests and compiles it counted against what
//! was sent, the host's CPU against the watch's own, a scrape's time, and whether `skillprof
//! report` draws the recorded windows. Figures only, no pass/fail.
//!
//!     cargo bench -p skillprof --bench watch_real_hosts [-- --only 2024|2025 --seconds 40]
//!
//! The binaries come from `scripts/build-real-hosts.sh --source DIR` (build/real-hosts/);
//! a missing one is named with the command that builds it. About a minute per host. Needs
//! root (the probes) and a release build of skillprof.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use skillprof::producers::hostctl::client::Http;
use skillprof::producers::hostctl::{Client, SampleSkills, SkillsDir, sample_input};
use skillprof::producers::sample::{PROC, process};
use skillprof::record::process::ticks_to_seconds;
use skillprof::record::profile::HostProfile;

mod common;
use common::{REAL_HOSTS, RealHost, real_host_named, sample, skillprof_binary};

/// Skills (copies of the Rust sample) and the load's concurrency.
const SKILLS: usize = 4;
const CONNECTIONS: usize = 4;
/// The recording's window: several per host.
const WINDOW_S: u64 = 10;

fn main() -> Result<()> {
    let (hosts, seconds) = parse_options()?;
    ensure!(
        rustix::process::geteuid().is_root(),
        "the watch_real_hosts benchmark loads BPF probes: run it as root"
    );
    let skillprof = skillprof_binary()?;
    let runtime = tokio::runtime::Runtime::new()?;
    println!(
        "skillprof watch on the real hosts, this machine ({} CPUs), {SKILLS} skills, \
         {CONNECTIONS} connections, {seconds} s of load, {WINDOW_S} s windows recorded",
        std::thread::available_parallelism().map_or(0, usize::from)
    );
    for real in hosts {
        let binary = real.binary()?;
        runtime.block_on(watch_one(&skillprof, real, &binary, seconds))?;
    }
    Ok(())
}

/// skillprof watch on the real 2024 and 2025 hosts.
#[derive(clap::Parser)]
struct Flags {
    /// One host only: 2024 or 2025.
    #[arg(long)]
    only: Option<String>,
    /// Seconds each host is watched.
    #[arg(long, default_value_t = 40)]
    seconds: u64,
}

fn parse_options() -> Result<(Vec<&'static RealHost>, u64)> {
    let Flags { only, seconds } = common::flags();
    let hosts = match only {
        Some(name) => vec![real_host_named(&name)?],
        None => REAL_HOSTS.iter().collect(),
    };
    Ok((hosts, seconds))
}

async fn watch_one(skillprof: &Path, real: &RealHost, binary: &Path, seconds: u64) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let profile = HostProfile::load(real.profile)?;
    let skills = SkillsDir::create(&dir.path().join("skills"), profile.registry.clone())?;
    let samples = SampleSkills::beside_executable(profile.registry.world)?;
    let names: Vec<String> = (1..=SKILLS).map(|i| format!("watched_rs{i}")).collect();
    for name in &names {
        skills.add(name, &samples.path("sample_rs")?)?;
    }
    let (host_port, listen) = (free_port()?, free_port()?);
    let record = dir.path().join("record");
    let stderr = dir.path().join("watch.err");
    let mut watch = Command::new(skillprof)
        .arg("watch")
        .args(["--host-profile", real.profile])
        .arg("--host-bin")
        .arg(binary)
        .arg("--skills-dir")
        .arg(skills.path())
        .args(["--host-port", &host_port.to_string()])
        .args(["--listen", &format!("127.0.0.1:{listen}")])
        .arg("--record")
        .arg(&record)
        .args(["--window", &WINDOW_S.to_string(), "--run-windows", "100"])
        .stdout(Stdio::null())
        .stderr(fs::File::create(&stderr)?)
        .spawn()
        .context("starting skillprof watch")?;
    let metrics = Http::new(&format!("http://127.0.0.1:{listen}"));
    let started = Instant::now();
    while metrics
        .send(hyper::Method::GET, "/metrics", [], None)
        .await
        .is_err()
    {
        if started.elapsed() > Duration::from_secs(120) || watch.try_wait()?.is_some() {
            let _ = watch.kill();
            bail!(
                "the watch of the {} host did not serve: {}",
                real.profile,
                fs::read_to_string(&stderr)?
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let said = fs::read_to_string(&stderr)?;
    let host_pid: u32 = said
        .split("skillprof watch: host ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next()?.parse().ok())
        .context("no started host on the watch's stderr")?;
    let client = Client::new(&format!("http://127.0.0.1:{host_port}"), profile.dialect);
    client
        .wait_until_listed(&names, Duration::from_secs(60))
        .await?;

    // Load: CONNECTIONS loops over the skills for `seconds`.
    let cpu_before = host_cpu_s(host_pid)?;
    let until = Instant::now() + Duration::from_secs(seconds);
    let (client, names) = (Arc::new(client), Arc::new(names));
    let mut loops = tokio::task::JoinSet::new();
    for connection in 0..CONNECTIONS {
        let (client, names) = (client.clone(), names.clone());
        loops.spawn(async move {
            let (mut ok, mut failed, mut first_error) = (0u64, 0u64, None);
            let mut i = connection;
            while Instant::now() < until {
                let name = &names[i % names.len()];
                match client.execute(name, &sample_input("watched", 64, 0)).await {
                    Ok(reply) if reply.is_ok() => ok += 1,
                    Ok(reply) => {
                        failed += 1;
                        first_error.get_or_insert(reply.error_message());
                    }
                    Err(e) => {
                        failed += 1;
                        first_error.get_or_insert(format!("{e:#}"));
                    }
                }
                i += 1;
            }
            (ok, failed, first_error)
        });
    }
    let results: Vec<(u64, u64, Option<String>)> = loops.join_all().await;
    let host_cpu = host_cpu_s(host_pid)? - cpu_before;
    let ok: u64 = results.iter().map(|r| r.0).sum();
    let failed: u64 = results.iter().map(|r| r.1).sum();

    // One scrape after the load, timed, and what it holds.
    let mut took = Vec::new();
    let mut text = String::new();
    for _ in 0..10 {
        let begun = Instant::now();
        text = metrics
            .send(hyper::Method::GET, "/metrics", [], None)
            .await?
            .text();
        took.push(begun.elapsed().as_secs_f64() * 1e3);
    }
    took.sort_by(f64::total_cmp);
    // The watch and what it waited for once reaped: the recording runs, and the host it
    // started, whose CPU (read just before) is taken out.
    let host_life_cpu = host_cpu_s(host_pid)?;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(watch.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )?;
    let children_before = children_cpu_s();
    let status = watch.wait()?;
    let skillprof_cpu = children_cpu_s() - children_before - host_life_cpu;
    let said = fs::read_to_string(&stderr)?;

    println!("\n{} ({}):", real.profile, binary.display());
    println!(
        "  requests: {ok} answered, {failed} failed{}",
        match results.iter().find_map(|r| r.2.clone()) {
            Some(error) => format!(" (first: {error})"),
            None => String::new(),
        }
    );
    println!(
        "  watch stderr: {}",
        said.lines()
            .filter(|line| line.starts_with("skillprof watch:"))
            .collect::<Vec<_>>()
            .join("\n                ")
    );
    println!("  watch exit: {status}");
    let live: Vec<&str> = text
        .lines()
        .filter_map(|line| line.strip_prefix("skillprof_watch_probe_live{probe=\""))
        .filter_map(|rest| rest.strip_suffix("\"} 1"))
        .collect();
    println!("  probes live: {}", live.join(", "));
    for series in [
        "skillprof_watch_per_skill_series",
        "skillprof_host_code_publishes_total",
        "skillprof_host_held_heap_kb",
        "skillprof_host_held_code_kb",
        "skillprof_host_held_wasm_kb",
        "skillprof_host_held_arenas",
        "skillprof_host_mappings",
        "skillprof_self_cpu_ms_total",
    ] {
        println!(
            "  {series} = {}",
            sample(&text, series).map_or("(absent)".to_owned(), |v| v.to_string())
        );
    }
    let skill_series = text
        .lines()
        .filter(|line| line.starts_with("skillprof_skill_"))
        .count();
    println!("  skillprof_skill_* samples: {skill_series}");
    let own_cpu_s = sample(&text, "skillprof_self_cpu_ms_total").unwrap_or(0.0) / 1e3;
    println!(
        "  host CPU under the load {host_cpu:.2} s ({:.0} µs a request); skillprof's over the \
         whole watch {skillprof_cpu:.2} s ({:.1}% of the host's over the same time, \
         {host_life_cpu:.2} s), of which the watch process {own_cpu_s:.2} s and the recording \
         runs the rest",
        host_cpu * 1e6 / ok.max(1) as f64,
        100.0 * skillprof_cpu / host_life_cpu
    );
    println!(
        "  a scrape: median {:.1} ms, max {:.1} ms ({} KiB)",
        took[took.len() / 2],
        took[took.len() - 1],
        text.len() / 1024
    );
    report_on(skillprof, &record)?;
    Ok(())
}

/// `skillprof report` on each folder the watch recorded: its windows and whether it draws.
fn report_on(skillprof: &Path, record: &Path) -> Result<()> {
    let mut folders: Vec<PathBuf> = fs::read_dir(record)?
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.join("meta.json").is_file())
        .collect();
    folders.sort();
    for folder in folders {
        let windows = fs::read_to_string(folder.join("commands.csv"))
            .map(|text| text.lines().count().saturating_sub(1))
            .unwrap_or(0);
        let report = Command::new(skillprof)
            .arg("report")
            .arg(&folder)
            .output()?;
        println!(
            "  recorded {}: {windows} window(s); skillprof report: {}",
            folder.display(),
            if report.status.success() {
                "drawn".to_owned()
            } else {
                format!("FAILED: {}", String::from_utf8_lossy(&report.stderr).trim())
            }
        );
    }
    Ok(())
}

/// The host's CPU time so far (user + system, every thread), in seconds.
fn host_cpu_s(pid: u32) -> Result<f64> {
    let read = process::read(Path::new(PROC), pid).map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(ticks_to_seconds(read.cpu_ticks))
}

/// CPU time (user + system) of this process's reaped children and theirs, in seconds.
fn children_cpu_s() -> f64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: a valid out pointer; the call fills it.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, usage.as_mut_ptr()) };
    // SAFETY: zeroed, then filled by the call.
    let usage = unsafe { usage.assume_init() };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    s(usage.ru_utime) + s(usage.ru_stime)
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}
