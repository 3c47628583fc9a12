//! skillhost against `wasmtime serve`, the peer of wasmCloud's throughput study (March 2024:
//! `hey -z 20s -c 150` against a hello component, 22-23k req/s on one 16-core node). Both
//! serve the hello skill on the machine's last CPU; every generator runs on the others. Each
//! host runs on both of wasmtime's allocators: on demand (skillhost's default) and pooling
//! (`wasmtime serve`'s where a 42-bit reservation works), so that hosts are compared like
//! with like, and what the allocator alone changes is seen for each.
//!
//! - the peak: `skillprof slo --target p99<=10ms --cpus 1` for each host and allocator, in
//!   interleaved rounds (the four in an order rotated every round, then the round's first
//!   again), each peak divided by the host CPU it used at that rate: skillhost / wasmtime
//!   serve on each allocator, and pooling / on demand for each host, as median ratios with
//!   their 95% bootstrap intervals, and a round's first run / its last (the same host: the
//!   off-versus-off control);
//! - wasmCloud's measurement reproduced: `hey -z 20s -c 150` against each host (closed loop:
//!   saturation throughput, each latency measured from its own send), beside skillprof's
//!   closed loop of 150 senders and its open loop at the host's median peak (each latency
//!   from the scheduled send).
//!
//!     scripts/build-peers.sh
//!   cargo bench -p skillprof --bench peer_throughput [-- --rounds N --step-s S --hey-s S]
//!
//! Needs the release build, the sample skills (`cargo xtask build-skills`, which builds the
//! wasi:http ones too) and build/peers/; no root.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use skillprof::ground::cpus::CpuList;
use skillprof::producers::hostctl::{Client, HostProcess, SampleSkills, SkillsDir};
use skillprof::producers::traffic::generator::{self, StepPlan, Targets};
use skillprof::record::profile::{HostProfile, HostSpec, SkillWorld};
use skillprof::record::slo::{SloReport, Stage};
use skillprof::record::traffic::{Arrivals, Load, TrafficStep};

mod common;
use common::{change, skillprof_binary};

const TARGET: &str = "p99<=10ms";
const WASMTIME: &str = "wasmtime-50.0.1";
const HEY: &str = "hey-v0.1.4";

/// A host under test: its profile, and the world of the hello it serves.
#[derive(Clone, Copy, PartialEq)]
enum Host {
    Skillhost,
    WasmtimeServe,
}

/// A host on one of wasmtime's allocators.
#[derive(Clone, Copy, PartialEq)]
struct Peer {
    host: Host,
    pooled: bool,
}

/// Every host on both allocators, in the order of a round's rotation.
const PEERS: [Peer; 4] = [
    Peer {
        host: Host::Skillhost,
        pooled: false,
    },
    Peer {
        host: Host::WasmtimeServe,
        pooled: true,
    },
    Peer {
        host: Host::Skillhost,
        pooled: true,
    },
    Peer {
        host: Host::WasmtimeServe,
        pooled: false,
    },
];

impl Peer {
    fn name(self) -> String {
        let host = match self.host {
            Host::Skillhost => "skillhost",
            Host::WasmtimeServe => "wasmtime serve",
        };
        let allocator = match self.pooled {
            true => "pooling",
            false => "on demand",
        };
        format!("{host} ({allocator})")
    }

    fn profile(self) -> &'static str {
        match self.host {
            Host::Skillhost => "skillhost",
            Host::WasmtimeServe => "wasmtime-serve",
        }
    }

    fn world(self) -> SkillWorld {
        match self.host {
            Host::Skillhost => SkillWorld::Skillprof,
            Host::WasmtimeServe => SkillWorld::WasiHttp,
        }
    }

    /// The host's binary, where it is not skillhost next to skillprof.
    fn bin(self) -> Result<Option<PathBuf>> {
        match self.host {
            Host::Skillhost => Ok(None),
            Host::WasmtimeServe => peer_binary(WASMTIME).map(Some),
        }
    }

    /// How the host is started on its allocator, as (flags after its profile's arguments,
    /// arguments instead of them): skillhost's flag, or `wasmtime serve`'s profile arguments
    /// with `-O pooling-allocator=n` after the subcommand, off its default.
    fn start(self) -> Result<(Vec<String>, Vec<String>)> {
        Ok(match (self.host, self.pooled) {
            (Host::Skillhost, true) => (
                vec!["--allocator".to_owned(), "pooling".to_owned()],
                Vec::new(),
            ),
            (Host::Skillhost, false) | (Host::WasmtimeServe, true) => (Vec::new(), Vec::new()),
            (Host::WasmtimeServe, false) => {
                let mut args = HostProfile::load(self.profile())?.start.args;
                ensure!(
                    args.first().is_some_and(|first| first == "serve"),
                    "the wasmtime-serve profile's arguments no longer start with serve: {args:?}"
                );
                args.insert(1, "-Opooling-allocator=n".to_owned());
                (Vec::new(), args)
            }
        })
    }
}

struct Options {
    rounds: usize,
    step_s: u32,
    hey_s: u32,
}

/// skillhost against wasmtime serve, each serving the same component.
#[derive(clap::Parser)]
struct Flags {
    /// Interleaved rounds (at least 2, for an interval).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Seconds of each step of the search.
    #[arg(long, default_value_t = 3)]
    step_s: u32,
    /// Seconds of hey's closed loop.
    #[arg(long, default_value_t = 20)]
    hey_s: u32,
}

fn options() -> Result<Options> {
    let Flags {
        rounds,
        step_s,
        hey_s,
    } = common::flags();
    let options = Options {
        rounds,
        step_s,
        hey_s,
    };
    ensure!(options.rounds >= 2, "--rounds: at least 2 for an interval");
    Ok(options)
}

fn peer_binary(name: &str) -> Result<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../build/peers")
        .join(name);
    ensure!(
        path.is_file(),
        "{} is missing: scripts/build-peers.sh builds it",
        path.display()
    );
    Ok(path)
}

/// One host's peak at the target on one CPU, from one `skillprof slo`.
struct Peak {
    rps: u32,
    /// The host's CPU used at the peak step, in CPUs.
    cpus_used: f64,
}

impl Peak {
    fn per_cpu(&self) -> f64 {
        f64::from(self.rps) / self.cpus_used.max(1e-9)
    }
}

fn slo_peak(skillprof: &Path, peer: Peer, step_s: u32, out: &Path) -> Result<Peak> {
    let folder = out.join("slo");
    let mut command = Command::new(skillprof);
    command
        .args(["slo", "--skill", "hello", "--target", TARGET, "--cpus", "1"])
        .args(["--points", "1", "--start-rps", "1000"])
        .args([
            "--step-s",
            &step_s.to_string(),
            "--host-profile",
            peer.profile(),
        ])
        .arg("--run-dir")
        .arg(&folder);
    if let Some(bin) = peer.bin()? {
        command.arg("--host-bin").arg(bin);
    }
    let (flags, args) = peer.start()?;
    for arg in args {
        command.arg(format!("--host-arg={arg}"));
    }
    if !flags.is_empty() {
        command.arg("--").args(flags);
    }
    let output = command.output().context("running skillprof slo")?;
    ensure!(
        output.status.success(),
        "skillprof slo against {} failed: {}",
        peer.name(),
        String::from_utf8_lossy(&output.stderr)
    );
    let report: SloReport = skillprof::commands::slo::read(&folder)?;
    std::fs::remove_dir_all(&folder)?;
    let rps = report.configs[0]
        .peak_rps
        .with_context(|| format!("{} met {TARGET} at no rate", peer.name()))?;
    let step = report
        .steps
        .iter()
        .find(|s| s.stage == Stage::Search && s.rps == rps)
        .context("the peak's step is missing")?;
    Ok(Peak {
        rps,
        cpus_used: step.evidence.cpu_share(1),
    })
}

/// A host started on `cpus` from its profile, as `skillprof slo` starts it, serving hello.
async fn start(peer: Peer, cpus: &[usize], dir: &Path) -> Result<HostProcess> {
    let profile = HostProfile::load(peer.profile())?;
    let (flags, args) = peer.start()?;
    let folder = dir.join(format!("{}-{}", peer.profile(), peer.pooled));
    let skills = SkillsDir::create(&folder.join("skills"), profile.registry.clone())?;
    skills.add(
        "hello",
        &SampleSkills::beside_executable(peer.world())?.path("hello")?,
    )?;
    let mut spec = HostSpec::new(profile, peer.bin()?, &args, &flags, &[])?;
    spec.cpus = Some(CpuList(cpus.to_vec()));
    let host = HostProcess::start(
        &spec,
        skills.path(),
        &folder.join("host.log"),
        &folder.join("work"),
        None,
        SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0),
        Duration::from_secs(60),
    )
    .await?;
    host.client
        .wait_until_listed(&["hello".to_owned()], Duration::from_secs(60))
        .await?;
    Ok(host)
}

/// hey's summary: requests per second and its p99, ms.
fn hey(client: &Client, seconds: u32, cpus: &[usize]) -> Result<(f64, f64)> {
    use std::os::unix::process::CommandExt as _;
    let dialect = client.dialect();
    let route = &dialect.routes.execute;
    let input = serde_json::json!({});
    let mut command = Command::new(peer_binary(HEY)?);
    command
        .args(["-z", &format!("{seconds}s"), "-c", "150"])
        .args(["-m", route.method.as_str(), "-T", "application/json"])
        .args(["-d", &dialect.execute_body("hello", &input)])
        .arg(format!("{}{}", client.base(), dialect.path(route, "hello")));
    let cpus = cpus.to_vec();
    // SAFETY: sched_setaffinity is async-signal-safe.
    unsafe {
        command.pre_exec(move || skillprof::producers::system::affinity::pin_current_thread(&cpus));
    }
    let output = command.output().context("running hey")?;
    let text = String::from_utf8_lossy(&output.stdout);
    ensure!(output.status.success(), "hey failed: {text}");
    let rate = text
        .lines()
        .find_map(|line| line.trim().strip_prefix("Requests/sec:"))
        .and_then(|rate| rate.trim().parse().ok())
        .with_context(|| format!("no Requests/sec in hey's output: {text}"))?;
    let p99_s: f64 = text
        .lines()
        .find_map(|line| line.trim().strip_prefix("99% in "))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .with_context(|| format!("no 99% line in hey's output: {text}"))?;
    let statuses = text
        .lines()
        .skip_while(|line| !line.contains("Status code distribution"))
        .skip(1)
        .take_while(|line| !line.trim().is_empty())
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(", ");
    ensure!(
        statuses.starts_with("[200]") && !statuses.contains(','),
        "hey got answers other than 200: {statuses}"
    );
    Ok((rate, p99_s * 1e3))
}

fn main() -> Result<()> {
    let options = options()?;
    let machine = std::thread::available_parallelism()?.get();
    ensure!(machine >= 2, "the generator and the host need a CPU each");
    let (host_cpus, generator_cpus) = (vec![machine - 1], (0..machine - 1).collect::<Vec<_>>());
    let skillprof = skillprof_binary()?;
    peer_binary(WASMTIME)?;
    peer_binary(HEY)?;
    let dir = tempfile::tempdir()?;

    println!(
        "\nhello on one CPU (CPU {}), generators on CPU(s) {}; {} rounds of skillprof slo \
         --target {TARGET} --step-s {}",
        machine - 1,
        skillprof::ground::cpus::format_list(&generator_cpus),
        options.rounds,
        options.step_s
    );
    // Each round runs the four in an order rotated by one from the last, so that none holds
    // a place in the order, then its first again: the first and last runs of a round are the
    // same host on the same allocator (the control).
    let mut rounds: Vec<Vec<(Peer, Peak)>> = Vec::new();
    for round in 1..=options.rounds {
        let mut order = PEERS;
        order.rotate_left((round - 1) % PEERS.len());
        let mut got = Vec::new();
        for peer in order.into_iter().chain([order[0]]) {
            got.push((
                peer,
                slo_peak(&skillprof, peer, options.step_s, dir.path())?,
            ));
        }
        println!("  round {round}:");
        for (peer, peak) in &got {
            println!(
                "    {:<28} {}/s on {:.2} CPU ({:.0}/s per CPU)",
                peer.name(),
                peak.rps,
                peak.cpus_used,
                peak.per_cpu()
            );
        }
        rounds.push(got);
    }
    // Per round: one peer's mean over another's, and the first run over the last.
    let ratios = |of: fn(&Peak) -> f64, a: Peer, b: Peer| -> Vec<f64> {
        let mean = |round: &[(Peer, Peak)], peer: Peer| {
            let values: Vec<f64> = round
                .iter()
                .filter(|(p, _)| *p == peer)
                .map(|(_, peak)| of(peak))
                .collect();
            values.iter().sum::<f64>() / values.len() as f64
        };
        rounds
            .iter()
            .map(|round| mean(round, a) / mean(round, b))
            .collect()
    };
    let control = |of: fn(&Peak) -> f64| -> Vec<f64> {
        rounds
            .iter()
            .map(|round| of(&round[0].1) / of(&round[round.len() - 1].1))
            .collect()
    };
    println!(
        "\nreq/s per host CPU and peak req/s at {TARGET} (median of {} rounds' ratios, 95% \
         bootstrap interval):",
        options.rounds
    );
    let [on_demand, serve_pooled, pooled, serve_on_demand] = PEERS;
    for (seed, (a, b)) in [
        (on_demand, serve_on_demand),
        (pooled, serve_pooled),
        (pooled, on_demand),
        (serve_pooled, serve_on_demand),
    ]
    .into_iter()
    .enumerate()
    {
        let seed = 45 + 2 * seed as u64;
        println!(
            "  {} / {}: per CPU {}, peak {}",
            a.name(),
            b.name(),
            change(&ratios(Peak::per_cpu, a, b), seed),
            change(&ratios(|peak| f64::from(peak.rps), a, b), seed + 1)
        );
    }
    println!(
        "  control, a round's first run / its last (the same host and allocator): per CPU {}, \
         peak {}",
        change(&control(Peak::per_cpu), 53),
        change(&control(|peak| f64::from(peak.rps)), 54)
    );

    println!(
        "\nwasmCloud's measurement, hey -z {}s -c 150, beside skillprof's generator \
         (latency from the send / from the scheduled send)",
        options.hey_s
    );
    let runtime = tokio::runtime::Runtime::new()?;
    for peer in PEERS {
        let host = runtime.block_on(start(peer, &host_cpus, dir.path()))?;
        let client = host.client.clone();
        let first = runtime.block_on(client.execute("hello", &serde_json::json!({})))?;
        ensure!(
            first.is_ok(),
            "{} did not run hello: {} {}",
            peer.name(),
            first.status,
            first.error_message()
        );
        let (hey_rate, hey_p99) = hey(&client, options.hey_s, &generator_cpus)?;
        let step = |load: Load| -> Result<TrafficStep> {
            runtime.block_on(generator::run(
                &client,
                StepPlan {
                    targets: Targets::one("hello", serde_json::json!({})),
                    load,
                    length: Duration::from_secs(u64::from(options.hey_s)),
                    cpus: Some(generator_cpus.clone()),
                },
            ))
        };
        let closed = step(Load::Closed { concurrency: 150 })?;
        let mut peak_rates: Vec<u32> = rounds
            .iter()
            .flatten()
            .filter(|(p, _)| *p == peer)
            .map(|(_, peak)| peak.rps)
            .collect();
        peak_rates.sort_unstable();
        let median_peak = peak_rates[peak_rates.len() / 2];
        let open = step(Load::Open {
            rps: median_peak,
            arrivals: Arrivals::Constant,
        })?;
        println!(
            "  {:<28} hey: {hey_rate:>8.0}/s, p99 {hey_p99:>6.2} ms | skillprof closed, 150 \
             senders: {:>8.0}/s, p99 {:>6.2} ms | open at {median_peak}/s: {:>8.0}/s, p99 \
             {:>6.2} ms, {} errors",
            peer.name(),
            closed.achieved_rps(),
            closed.latency.p99_ms,
            open.achieved_rps(),
            open.latency.p99_ms,
            open.errors.total()
        );
        runtime.block_on(host.stop(Duration::from_secs(30)))?;
    }
    Ok(())
}
