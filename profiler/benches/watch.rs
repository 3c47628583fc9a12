//! What `skillprof watch` costs, on a skillhost with many skills (copies of the Rust sample)
//! under steady load from hey:
//! - the host's CPU per round of requests with a watch attached against without, in rounds
//!   of watch / off / off again in random order: the median ratio with its bootstrap
//!   interval, and the off/off control beside it;
//! - a scrape's time with every skill's series (each skill executed, so each has rows);
//! - skillprof's own RSS over a long watch, scraped every 15 s as Prometheus would, under
//!   load throughout.
//!
//!     cargo bench -p skillprof --bench watch [-- --rounds 8 --skills 500 --minutes 60]
//!
//! Needs root (the probes), a release build (skillprof, skillhost), the sample skills and hey
//! (scripts/test.sh installs it). Figures only, no pass/fail.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use hyper::Method;
use skillprof::hostctl::client::Http;
use skillprof::hostctl::{Client, HostProfile, SampleSkills, SkillWorld};
use skillprof::machine::Machine;
use skillprof::probes::Mechanism;
use skillprof::probes::cost_model::{self, CostModel, Counted, Per};
use skillprof::record::probes::Probe;
use skillprof::record::process::ticks_to_seconds;
use skillprof::sample::{PROC, process};

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
    println!(
        "skillprof watch on skillhost with {} skills (copies of sample_rs), this machine ({} \
         CPUs)",
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
                Condition::Watch => Some(Watch::start(&skillprof, &host)?),
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
    let watch = Watch::start(&skillprof, &host)?;
    host.execute_each()?;
    let mut took = Vec::new();
    let mut size = 0;
    for _ in 0..30 {
        let started = Instant::now();
        size = watch.scrape()?.len();
        took.push(started.elapsed().as_secs_f64() * 1e3);
    }
    took.sort_by(f64::total_cmp);
    println!(
        "a scrape with {} skills' series: median {:.1} ms, max {:.1} ms ({} KiB of text, 30 \
         scrapes)",
        options.skills,
        skillprof::stats::median(&took),
        took[took.len() - 1],
        size / 1024
    );

    // skillprof's RSS over a long watch under load.
    if options.minutes > 0 {
        let until = Instant::now() + Duration::from_secs(options.minutes * 60);
        let mut rss = Vec::new();
        while Instant::now() < until {
            load(&hey, &host, REQUESTS / 10)?;
            watch.scrape()?;
            rss.push(watch.rss_kb()?);
            std::thread::sleep(SCRAPE_EVERY.saturating_sub(Duration::from_secs(1)));
        }
        let first = rss[0] as f64;
        let last = rss[rss.len() - 1] as f64;
        let max = rss.iter().copied().max().unwrap_or(0);
        println!(
            "skillprof's RSS over {} min of watching under load ({} scrapes): first {} KiB, \
             last {} KiB ({:+.1}%), max {} KiB",
            options.minutes,
            rss.len(),
            first,
            last,
            (last / first - 1.0) * 100.0,
            max
        );
    }
    watch.stop()?;
    Ok(())
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
        skillprof::stats::median(&values)
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
    /// Minutes of the long watch.
    #[arg(long, default_value_t = 5)]
    minutes: u64,
}

fn parse_options() -> Result<Options> {
    let Flags {
        rounds,
        skills,
        minutes,
    } = common::flags();
    let options = Options {
        rounds,
        skills,
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
    fn start(skillprof: &Path, host: &Host) -> Result<Watch> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let child = Command::new(skillprof)
            .args(["watch", "--attach", &host.pid().to_string()])
            .args(["--host-url", &host.url])
            .args(["--listen", &format!("127.0.0.1:{port}")])
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

    fn scrape(&self) -> Result<String> {
        let http = Http::new(&format!("http://127.0.0.1:{}", self.port));
        let reply = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(http.send(Method::GET, "/metrics", [], None))?;
        ensure!(reply.is_ok(), "scrape answered {}", reply.status);
        Ok(reply.text())
    }

    fn rss_kb(&self) -> Result<u64> {
        Ok(process::read(Path::new(PROC), self.child.id())
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .rss_kb)
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
