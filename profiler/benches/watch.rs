//! What `skillprof watch` costs, on a skillhost with many skills (copies of the Rust sample)
//! under steady load from hey:
//! - the host's CPU per round of requests with a watch attached against without, in rounds
//!   of watch / off / off again in random order: the median ratio with its bootstrap
//!   interval, and the off/off control beside it;
//! - a scrape's time with every skill's series (each skill executed, so each has rows);
//! - skillprof's own RSS, CPU and scrape time over a long watch, scraped every 15 s as
//!   Prometheus would, under load throughout, with a client attached that reads its answer a
//!   byte a second.
//!
//! Run as:
//!
//!     cargo bench -p skillprof --bench watch [-- --rounds 8 --skills 500 --minutes 60]
//!     cargo bench -p skillprof --bench watch -- --rounds 1 --skills 10000 --minutes 60
//!
//! Needs root (the probes), a release build (skillprof, skillhost), the sample skills and hey
//! (scripts/test.sh installs it). Figures only, no pass/fail.

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use hyper::Method;
use skillprof::ground::machine::Machine;
use skillprof::producers::hostctl::client::Http;
use skillprof::producers::hostctl::{Client, SampleSkills};
use skillprof::producers::probes::cost_model::{self, CostModel};
use skillprof::producers::sample::{PROC, process};
use skillprof::record::probes::{Counted, Mechanism, Per, Probe};
use skillprof::record::process::ticks_to_seconds;
use skillprof::record::profile::{HostProfile, SkillWorld};

mod common;
use common::{change, sample, skillprof_binary};

/// Requests per round: about 5 s of the host's CPU, so that the kernel's 10 ms ticks of
/// CPU time are a fifth of a percent of it.
const REQUESTS: u32 = 30_000;
const CONNECTIONS: u32 = 4;
/// Prometheus' default scrape interval.
const SCRAPE_EVERY: Duration = Duration::from_secs(15);

struct Options {
    rounds: usize,
    skills: usize,
    max_skills: usize,
    minutes: u64,
}

fn main() -> Result<()> {
    let options = parse_options()?;
    ensure!(
        rustix::process::geteuid().is_root(),
        "the watch benchmark loads BPF probes: run it as root"
    );
    let skillprof = skillprof_binary()?;
    let hey = hey()?;
    let dir = tempfile::tempdir()?;
    let host = Host::start(&skillprof, dir.path(), options.skills)?;
    let max_skills = options.max_skills.to_string();
    let watch_flags = ["--max-skills", max_skills.as_str()];
    println!(
        "skillprof watch --max-skills {} on skillhost with {} skills (copies of sample_rs), \
         this machine ({} CPUs)",
        options.max_skills,
        options.skills,
        std::thread::available_parallelism().map_or(0, usize::from)
    );

    // The host's CPU per round, interleaved.
    let (mut watched, mut control) = (Vec::new(), Vec::new());
    // The host's marks while watched, from the watch's own count, and the CPU of that round.
    let mut marked: Vec<(f64, f64)> = Vec::new();
    for round in 0..options.rounds {
        let mut order = [Condition::Watch, Condition::Off, Condition::OffAgain];
        fastrand::shuffle(&mut order);
        let mut cpu = [0.0; 3];
        for condition in order {
            let watch = match condition {
                Condition::Watch => Some(Watch::start(&skillprof, &host, &watch_flags)?),
                _ => None,
            };
            cpu[condition as usize] = host.cpu_of(|| load(&hey, &host, REQUESTS))?;
            if let Some(watch) = watch {
                let marks = sample(&watch.scrape()?, "skillprof_host_marks_hits_total")
                    .context("the watch serves no marks count")?;
                marked.push((marks, cpu[condition as usize]));
                watch.stop()?;
            }
        }
        eprintln!(
            "round {}: host CPU watch {:.2} s, off {:.2} s, off again {:.2} s",
            round + 1,
            cpu[0],
            cpu[1],
            cpu[2]
        );
        watched.push(cpu[0] / cpu[1]);
        control.push(cpu[2] / cpu[1]);
    }
    println!(
        "host CPU per {REQUESTS} requests ({CONNECTIONS} connections), {} rounds:",
        options.rounds
    );
    println!("  watch / off: {}", change(&watched, 1));
    println!("  control, off again / off: {}", change(&control, 2));
    marks_modelled(&marked);

    // A scrape of every skill's series: the watch counts what happens while it watches, so
    // every skill runs once under it first.
    let watch = Watch::start(&skillprof, &host, &watch_flags)?;
    host.execute_each()?;
    let mut took = Vec::new();
    let mut size = 0;
    for _ in 0..30 {
        let (ms, bytes) = watch.timed_scrape()?;
        took.push(ms);
        size = bytes;
    }
    took.sort_by(f64::total_cmp);
    println!(
        "a scrape with {} skills' series: median {:.1} ms, max {:.1} ms ({} KiB of text, 30 \
         scrapes)",
        options.skills,
        skillprof::ground::stats::median(&took),
        took[took.len() - 1],
        size / 1024
    );

    if options.minutes > 0 {
        long_watch(&watch, &hey, &host, options.minutes)?;
    }
    watch.stop()?;
    Ok(())
}

/// skillprof's RSS, CPU and scrape time over `minutes` of scrapes every 15 s under load, with
/// a slow client attached throughout: the first tenth of the scrapes against the last. Then
/// what the watch cost the host over those minutes, its two parts: its BPF programs (the
/// profile clock) by the kernel's count, BPF stats on for the long watch, and its marks by
/// the machine's cost per mark, against the host's CPU in the same minutes.
fn long_watch(watch: &Watch, hey: &Path, host: &Host, minutes: u64) -> Result<()> {
    let _stats = aya::sys::enable_stats(aya::sys::Stats::RunTime)
        .context("turning BPF stats on (BPF_ENABLE_STATS)")?;
    let programs_before = programs_run()?;
    let marks_before = sample(&watch.scrape()?, "skillprof_host_marks_hits_total")
        .context("the watch serves no marks count")?;
    let host_ticks = || -> Result<u64> {
        Ok(process::read(Path::new(PROC), host.pid())
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .cpu_ticks)
    };
    let host_before = host_ticks()?;
    let slow = SlowClient::attach(watch.port)?;
    let until = Instant::now() + Duration::from_secs(minutes * 60);
    // (RSS KiB, CPU ticks, scrape ms) after each scrape.
    let mut points: Vec<(u64, u64, f64)> = Vec::new();
    while Instant::now() < until {
        load(hey, host, REQUESTS / 10)?;
        let (took, _) = watch.timed_scrape()?;
        let own =
            process::read(Path::new(PROC), watch.child.id()).map_err(|e| anyhow::anyhow!("{e}"))?;
        points.push((own.rss_kb, own.cpu_ticks, took));
        std::thread::sleep(SCRAPE_EVERY.saturating_sub(Duration::from_secs(1)));
    }
    let read = slow.detach();
    ensure!(
        points.len() >= 2,
        "too few scrapes to compare: {}",
        points.len()
    );
    let tenth = (points.len() / 10).max(2);
    let (first, last) = (&points[..tenth], &points[points.len() - tenth..]);
    let rss = |part: &[(u64, u64, f64)]| part.iter().map(|p| p.0).max().unwrap_or(0) as f64;
    // CPU per scrape interval, the watch's work included (its samples, its probes' reads).
    let cpu_ms = |part: &[(u64, u64, f64)]| {
        1e3 * ticks_to_seconds(part[part.len() - 1].1 - part[0].1) / (part.len() - 1) as f64
    };
    let scrape_ms = |part: &[(u64, u64, f64)]| {
        let mut took: Vec<f64> = part.iter().map(|p| p.2).collect();
        took.sort_by(f64::total_cmp);
        skillprof::ground::stats::median(&took)
    };
    println!(
        "skillprof over {minutes} min of watching under load ({} scrapes, a slow client \
         attached that read {read} bytes), first tenth against last tenth of the scrapes:",
        points.len()
    );
    println!(
        "  RSS (max) {:.0} → {:.0} KiB ({:+.1}%); largest of all {} KiB",
        rss(first),
        rss(last),
        (rss(last) / rss(first) - 1.0) * 100.0,
        points.iter().map(|p| p.0).max().unwrap_or(0)
    );
    println!(
        "  CPU per scrape interval {:.0} → {:.0} ms; scrape (median) {:.1} → {:.1} ms",
        cpu_ms(first),
        cpu_ms(last),
        scrape_ms(first),
        scrape_ms(last)
    );
    let host_s = ticks_to_seconds(host_ticks()? - host_before);
    let (runs, run_ns) = programs_run()?;
    let (runs, run_ns) = (runs - programs_before.0, run_ns - programs_before.1);
    let marks = sample(&watch.scrape()?, "skillprof_host_marks_hits_total")
        .context("the watch serves no marks count")?
        - marks_before;
    let share = |ns: f64| 100.0 * ns / (host_s * 1e9);
    println!(
        "  the host's CPU over the {minutes} min: {host_s:.1} s; the watch's BPF programs (the \
         profile clock) by the kernel's count: {runs} runs, {:.0} ms, {:.2}% of it",
        run_ns as f64 / 1e6,
        share(run_ns as f64)
    );
    match Machine::read()
        .map_err(|e| format!("{e:#}"))
        .and_then(|machine| CostModel::load(Path::new(cost_model::DEFAULT_PATH), &machine))
        .and_then(|model| {
            model.apply(&[Counted {
                probe: Probe::Markers,
                mechanism: Mechanism::Ledger,
                per: Per::Mark,
                events: marks as u64,
            }])
        }) {
        Ok(modelled) => println!(
            "  its marks: {marks:.0} × the cost per mark = {:.2}% [{:.2}, {:.2}] of it \
             ({modelled}); the watch in all: {:.2}% [{:.2}, {:.2}]",
            share(modelled.total_ns.median),
            share(modelled.total_ns.lo),
            share(modelled.total_ns.hi),
            share(modelled.total_ns.median + run_ns as f64),
            share(modelled.total_ns.lo + run_ns as f64),
            share(modelled.total_ns.hi + run_ns as f64),
        ),
        Err(why) => println!("  its marks: {marks:.0}, their cost NOT COMPUTED ({why})"),
    }
    Ok(())
}

/// Every BPF program's runs and run time in the kernel so far (the watch's are the only ones
/// here while it runs): BPF stats count only while they are on.
fn programs_run() -> Result<(u64, u64)> {
    aya::programs::loaded_programs().try_fold((0, 0), |(runs, ns), info| {
        let info = info.context("listing the kernel's BPF programs")?;
        Ok((
            runs + info.run_count(),
            ns + info.run_time().as_nanos() as u64,
        ))
    })
}

/// A client that asks for /metrics and takes its answer a byte a second, through a receive
/// buffer of 2 KiB, until detached.
struct SlowClient {
    stop: Arc<AtomicBool>,
    reader: std::thread::JoinHandle<u64>,
}

impl SlowClient {
    fn attach(port: u16) -> Result<SlowClient> {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
        let small: libc::c_int = 2048;
        // SAFETY: a valid socket and an int option of the size given.
        let set = unsafe {
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&stream),
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                (&small as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        ensure!(set == 0, "SO_RCVBUF: {}", std::io::Error::last_os_error());
        stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: slow\r\n\r\n")?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let reader = std::thread::spawn(move || {
            let (mut byte, mut read) = ([0u8; 1], 0);
            while !stopped.load(Ordering::Relaxed) && stream.read_exact(&mut byte).is_ok() {
                read += 1;
                std::thread::sleep(Duration::from_secs(1));
            }
            read
        });
        Ok(SlowClient { stop, reader })
    }

    /// Bytes it read.
    fn detach(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.reader.join().unwrap_or(0)
    }
}

#[derive(Clone, Copy)]
enum Condition {
    Watch = 0,
    Off = 1,
    OffAgain = 2,
}

/// What the watch adds to the host's work per request is its marks (the ledger records only
/// while someone holds its lease): their count while watched times the machine's cost per
/// mark (probe_cost's, in a loop; `--bench overhead -- --amplify` measures it in a busy
/// host), against the host's CPU in the same rounds.
fn marks_modelled(marked: &[(f64, f64)]) {
    let median = |values: Vec<f64>| {
        let mut values = values;
        values.sort_by(f64::total_cmp);
        skillprof::ground::stats::median(&values)
    };
    let marks = median(marked.iter().map(|m| m.0).collect());
    let cpu_s = median(marked.iter().map(|m| m.1).collect());
    let model = Machine::read()
        .map_err(|e| format!("{e:#}"))
        .and_then(|machine| CostModel::load(Path::new(cost_model::DEFAULT_PATH), &machine));
    let counted = [Counted {
        probe: Probe::Markers,
        mechanism: Mechanism::Ledger,
        per: Per::Mark,
        events: marks as u64,
    }];
    match model.and_then(|model| model.apply(&counted)) {
        Ok(modelled) => {
            let percent = |ns: f64| 100.0 * ns / (cpu_s * 1e9);
            println!(
                "  the watch's marks, modelled: {:.0} a round ({:.2} a request) × the cost per \
                 mark = {:+.2}% [{:+.2}%, {:+.2}%] of the host's CPU ({modelled})",
                marks,
                marks / f64::from(REQUESTS),
                percent(modelled.total_ns.median),
                percent(modelled.total_ns.lo),
                percent(modelled.total_ns.hi)
            );
        }
        Err(why) => println!("  the watch's marks, modelled: NOT COMPUTED ({why})"),
    }
}

/// skillprof watch's own cost on a host with many skills.
#[derive(clap::Parser)]
struct Flags {
    /// Interleaved rounds.
    #[arg(long, default_value_t = 8)]
    rounds: usize,
    /// Skills the host holds.
    #[arg(long, default_value_t = 500)]
    skills: usize,
    /// The watch's --max-skills [default: --skills, so that every skill is served].
    #[arg(long)]
    max_skills: Option<usize>,
    /// Minutes of the long watch.
    #[arg(long, default_value_t = 5)]
    minutes: u64,
}

fn parse_options() -> Result<Options> {
    let Flags {
        rounds,
        skills,
        max_skills,
        minutes,
    } = common::flags();
    let options = Options {
        rounds,
        skills,
        max_skills: max_skills.unwrap_or(skills),
        minutes,
    };
    ensure!(
        options.rounds > 0 && options.skills > 0,
        "--rounds and --skills: at least 1"
    );
    Ok(options)
}

fn hey() -> Result<PathBuf> {
    let hey = Path::new(env!("CARGO_MANIFEST_DIR")).join("../build/bin/hey");
    ensure!(
        hey.is_file(),
        "{} is missing: scripts/test.sh builds it",
        hey.display()
    );
    Ok(hey)
}

/// `requests` requests to sample_rs1, `CONNECTIONS` at a time.
fn load(hey: &Path, host: &Host, requests: u32) -> Result<()> {
    let status = Command::new(hey)
        .args(["-n", &requests.to_string(), "-c", &CONNECTIONS.to_string()])
        .args(["-m", "POST", "-T", "application/json"])
        .args([
            "-d",
            r#"{"skill": "sample_rs1", "input": {"topic": "watched"}}"#,
        ])
        .arg(format!("{}/execute_skill", host.url))
        .stdout(Stdio::null())
        .status()
        .context("running hey")?;
    ensure!(status.success(), "hey failed: {status}");
    Ok(())
}

/// skillhost with `skills` copies of the Rust sample, each executed once.
struct Host {
    child: Child,
    url: String,
    names: Vec<String>,
}

impl Host {
    fn start(skillprof: &Path, dir: &Path, skills: usize) -> Result<Host> {
        let folder = dir.join("skills");
        fs::create_dir_all(&folder)?;
        let sample = SampleSkills::beside_executable(SkillWorld::Skillprof)?.path("sample_rs")?;
        let names: Vec<String> = (1..=skills).map(|i| format!("sample_rs{i}")).collect();
        for name in &names {
            fs::copy(&sample, folder.join(format!("{name}.wasm")))?;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let child = Command::new(skillprof.with_file_name("skillhost"))
            .args(["--skills-dir", folder.to_str().context("a UTF-8 path")?])
            .args(["--port", &port.to_string()])
            // Identical copies: compiled once, the others loaded from this cache.
            .args([
                "--cache-dir",
                dir.join("cache").to_str().context("a UTF-8 path")?,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting skillhost")?;
        let host = Host {
            child,
            url: format!("http://127.0.0.1:{port}"),
            names,
        };
        let client = host.client();
        tokio::runtime::Runtime::new()?.block_on(async {
            let started = Instant::now();
            while !client.healthy().await {
                ensure!(
                    started.elapsed() < Duration::from_secs(30),
                    "skillhost did not answer within 30 s"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            client
                .wait_until_listed(&host.names, Duration::from_secs(120))
                .await
        })?;
        host.execute_each()?;
        Ok(host)
    }

    fn client(&self) -> Client {
        Client::new(&self.url, HostProfile::skillhost().dialect)
    }

    /// One request to each skill, one after the other.
    fn execute_each(&self) -> Result<()> {
        let client = self.client();
        tokio::runtime::Runtime::new()?.block_on(async {
            for name in &self.names {
                let reply = client.execute(name, &serde_json::json!({})).await?;
                ensure!(reply.is_ok(), "{name}: {}", reply.text());
            }
            Ok(())
        })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The host's CPU time, user and system, while `work` runs.
    fn cpu_of(&self, work: impl FnOnce() -> Result<()>) -> Result<f64> {
        let ticks = || -> Result<u64> {
            Ok(process::read(Path::new(PROC), self.pid())
                .map_err(|e| anyhow::anyhow!("{e}"))?
                .cpu_ticks)
        };
        let before = ticks()?;
        work()?;
        Ok(ticks_to_seconds(ticks()? - before))
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `skillprof watch` of the host, serving on a port of its own.
struct Watch {
    child: Child,
    port: u16,
}

impl Watch {
    fn start(skillprof: &Path, host: &Host, flags: &[&str]) -> Result<Watch> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let child = Command::new(skillprof)
            .args(["watch", "--attach", &host.pid().to_string()])
            .args(["--host-url", &host.url])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(flags)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting skillprof watch")?;
        let watch = Watch { child, port };
        let started = Instant::now();
        while watch.scrape().is_err() {
            ensure!(
                started.elapsed() < Duration::from_secs(30),
                "skillprof watch did not serve within 30 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(watch)
    }

    /// One scrape as Prometheus times it, from its request to the last byte of its answer,
    /// over a connection of its own (no client library's parsing in the time); its bytes.
    fn timed_scrape(&self) -> Result<(f64, usize)> {
        let started = Instant::now();
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.port))?;
        stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")?;
        let mut answer = Vec::with_capacity(16 << 20);
        stream.read_to_end(&mut answer)?;
        let ms = started.elapsed().as_secs_f64() * 1e3;
        ensure!(
            answer.starts_with(b"HTTP/1.1 200"),
            "scrape answered {}",
            String::from_utf8_lossy(&answer[..answer.len().min(80)])
        );
        Ok((ms, answer.len()))
    }

    fn scrape(&self) -> Result<String> {
        let http = Http::new(&format!("http://127.0.0.1:{}", self.port));
        let reply = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(http.send(Method::GET, "/metrics", [], None))?;
        ensure!(reply.is_ok(), "scrape answered {}", reply.status);
        Ok(reply.text())
    }

    /// SIGINT, and its exit.
    fn stop(mut self) -> Result<()> {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGINT,
        )?;
        let status = self.child.wait()?;
        if !status.success() {
            bail!("skillprof watch ended {status}");
        }
        Ok(())
    }
}
