//! `skillprof slo`: how many requests per second a host serves within a latency target, with
//! which configuration. For each configuration (worker threads × CPUs × allocator) it starts
//! the host with the skill, searches the highest rate whose open-loop step meets the target
//! (steps, then bisection), then runs the table: every configuration at fractions of the
//! highest peak (swan's experiment), each cell the step's latency at the target's quantile,
//! against the target. Every step carries the evidence of what bounded it.
//!
//! The host runs on the configuration's CPUs (the last ones of the machine) and the load
//! generator on the others, when any are left: on a 2-core machine, a 1-CPU host and its
//! generator each have a CPU of their own.

mod evidence;
pub mod output;
pub mod search;
mod table;
pub mod target;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use clap::Args;

use crate::producers::hostctl::{HostProcess, HostStartArgs, SampleSkills, SkillsDir};
use crate::producers::probes::ledger::HostLedger;
use crate::producers::probes::time::{DEFAULT_HZ, OffCpuMode, TimeArgs};
use crate::producers::probes::{ProbeOptions, ProbeSession};
use crate::producers::traffic::generator::{self, StepPlan, Targets};
use crate::record::probes::ProbeMode;
use crate::record::profile::{HostProfile, Registry, SkillWorld};
use crate::record::slo::{ConfigPeak, HostConfig, SloReport, SloStep, Stage, Target, Verdict};
use crate::record::traffic::{Arrivals, Load};
use search::Search;

const LONG_ABOUT: &str = "\
How much traffic a host serves within a latency target, and with which configuration.

For each host configuration (--workers × --cpus × --allocator) skillprof starts the host with \
the skill (--skill), and sends it open-loop traffic: requests on a schedule, each one's \
latency counted from its scheduled send, so a stall is charged to every request it delayed. \
It searches the highest rate whose step meets the target (--target, e.g. p99<=10ms): from \
--start-rps, doubling until a step misses, then bisecting to within 5%. A step is sustained \
when at least 90% of the rate was answered, nothing failed and the latency was not still \
growing at its end. Then the table: every configuration at --points fractions of the highest \
peak, each cell the step's latency against the target (met; 101-150%; above 150%; FAIL when \
not sustained), and the fewest CPUs and workers that meet the target at each load named.

Every step says what bounded it: the host's CPU against the CPUs it had (and by phase of its \
work, from its ledger), the time its threads waited for a CPU, its faults and the machine's \
TLB shootdowns per request, the generator's own CPU. A step the generator could not send is \
marked as such, never taken for the host's limit.

The host runs on the last CPUs of the machine (as many as the configuration has), the \
generator on the others when any are left. The experiment folder (--out/slo-STAMP or \
--run-dir) holds steps.csv, slo.json, explain.md, report.html and openmetrics.txt; \
`skillprof capacity --rate R --slo DIR` turns it into servers for a fleet.

Examples:
  sudo skillprof slo --skill hello --target p99<=10ms
  sudo skillprof slo --skill rust --target p99<=20ms --workers 1,2 --cpus 1,2
  sudo skillprof slo --skill python --target p99<=50ms --rps 20,40    # fixed rates, no search
  sudo skillprof slo --component weather.wasm --input @rain.json --target p99<=20ms";

/// Which sample skill the traffic calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SkillChoice {
    /// hello: answers a greeting and does nothing else (the host's cost per request).
    Hello,
    /// sample_rs: the Rust sample, allocating --memory-kb and sleeping --wait-ms.
    Rust,
    /// sample_py: the Python sample (pure Python), the same work.
    Python,
}

impl SkillChoice {
    fn component(self) -> &'static str {
        match self {
            SkillChoice::Hello => "hello",
            SkillChoice::Rust => "sample_rs",
            SkillChoice::Python => "sample_py",
        }
    }
}

#[derive(Args, Debug)]
#[command(about = "How much traffic a host serves within a latency target, per configuration", long_about = LONG_ABOUT)]
pub struct SloArgs {
    /// The latency target: a quantile (p50, p90, p99, p99.9), <=, a time with its unit.
    #[arg(long, value_name = "pN<=TIME", value_parser = target::parse)]
    pub target: Target,

    /// The sample skill the requests call.
    #[arg(long, value_enum, default_value = "hello")]
    pub skill: SkillChoice,

    /// Your own component instead of a sample: the host is started with it alone, named after
    /// the file, and it must be of the host profile's world (checked before anything starts).
    #[arg(long, value_name = "FILE", conflicts_with = "skill")]
    pub component: Option<PathBuf>,

    /// What every request sends, JSON or @FILE [default: a sample's input from --memory-kb and
    /// --wait-ms, `{}` for --component]. Checked before anything starts; the skill's own
    /// first answer to it must be a success.
    #[arg(long, value_name = "JSON|@FILE", conflicts_with_all = ["memory_kb", "wait_ms"])]
    pub input: Option<String>,

    /// A mix of your components instead of one skill: a JSON array of `{"skill": NAME,
    /// "component": FILE, "input": JSON, "weight": N}` (o_mix's file, each skill with its
    /// component beside the file). The host is started with those components alone, and each
    /// request goes to one of them in proportion to the weights.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["skill", "component", "input", "memory_kb", "wait_ms"])]
    pub mix: Option<PathBuf>,

    /// KiB each request asks the skill to allocate (rust, python).
    #[arg(long, default_value_t = 0, value_name = "KIB")]
    pub memory_kb: u64,

    /// ms each request asks the skill to sleep (rust, python).
    #[arg(long, default_value_t = 0, value_name = "MS")]
    pub wait_ms: u64,

    /// The host's async worker threads to try (TOKIO_WORKER_THREADS), comma-separated
    /// [default: the host's own default].
    #[arg(long, value_name = "N,...", value_delimiter = ',')]
    pub workers: Vec<u32>,

    /// How many CPUs to give the host, comma-separated: it runs on the machine's last ones.
    #[arg(long, value_name = "N,...", value_delimiter = ',', default_value = "1")]
    pub cpus: Vec<usize>,

    /// skillhost's allocators to try, comma-separated (on-demand, pooling) [default: the
    /// host's].
    #[arg(long, value_name = "NAME,...", value_delimiter = ',')]
    pub allocator: Vec<String>,

    /// Fixed rates to run, comma-separated, instead of searching each configuration's peak;
    /// the table is then these rates.
    #[arg(long, value_name = "RPS,...", value_delimiter = ',')]
    pub rps: Vec<u32>,

    /// The search's first rate.
    #[arg(long, default_value_t = 100, value_name = "RPS")]
    pub start_rps: u32,

    /// The search's highest rate.
    #[arg(long, default_value_t = 200_000, value_name = "RPS")]
    pub max_rps: u32,

    /// Load points of the table: 1/N, 2/N, ... N/N of the highest peak.
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub points: u32,

    /// Seconds of each step; its first fifth warms up and is not measured.
    #[arg(long, default_value_t = 5, value_name = "S")]
    pub step_s: u32,

    /// The spacing of the sends.
    #[arg(long, value_enum, default_value = "constant")]
    pub arrivals: ArrivalsChoice,

    /// Folder under which the experiment's folder is made.
    #[arg(long, default_value = "runs", value_name = "DIR")]
    pub out: PathBuf,

    /// The experiment's folder itself (created if missing, refused unless empty).
    #[arg(long, value_name = "DIR", conflicts_with = "out")]
    pub run_dir: Option<PathBuf>,

    /// The host: a built-in profile (`skillhost`, `pharia-kernel-2024`, `pharia-engine-2025`,
    /// `wasmtime-serve`) or a TOML file (docs/profiles.md).
    #[arg(long, value_name = "NAME|FILE", default_value = "skillhost")]
    pub host_profile: String,

    #[command(flatten)]
    pub host: HostStartArgs,

    /// The time profile of each step (where the host's CPU went, and what its threads did in
    /// a stall), from probes attached in the host-only mode; off a CPU off by default: a
    /// program on each of the host's switches would be part of what the steps measure.
    #[command(flatten)]
    pub time: TimeArgs,

    /// How long the host may take to answer its health route, in seconds.
    #[arg(long, default_value_t = 60, value_name = "S")]
    pub ready_timeout_s: u64,

    /// Flags for the host, after `--`.
    #[arg(last = true, value_name = "HOST_FLAGS")]
    pub host_flags: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ArrivalsChoice {
    Constant,
    Poisson,
}

pub use output::read;

pub fn run(args: SloArgs) -> Result<ExitCode> {
    let machine_cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let configs = configurations(&args, machine_cpus)?;
    let profile = HostProfile::load(&args.host_profile)?;
    let sent = sent(&args, &profile)?;
    ensure!(
        sent.0.len() == 1 || profile.dialect.routes.registry().is_ok(),
        "--mix: the host profile {} serves the one component it is started with, and the mix \
         has {}; serve each alone (--component), or use a host that lists skills",
        args.host_profile,
        sent.0.len()
    );
    let folder =
        crate::views::output::experiment_folder(args.run_dir.as_deref(), &args.out, "slo")?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let report = runtime.block_on(experiment(
        &args,
        profile,
        &sent,
        configs,
        machine_cpus,
        &folder,
    ))?;
    output::write(&folder, &report)?;
    eprintln!("{}", output::summary(&report));
    eprintln!("slo: experiment folder {}", folder.display());
    Ok(match report.complete {
        true => ExitCode::SUCCESS,
        false => ExitCode::FAILURE,
    })
}

/// Every configuration to try, checked against this machine before anything starts.
fn configurations(args: &SloArgs, machine_cpus: usize) -> Result<Vec<HostConfig>> {
    ensure!(
        args.step_s >= 2,
        "--step-s must be at least 2 (a fifth warms up)"
    );
    ensure!(args.points >= 1, "--points must be at least 1");
    ensure!(
        args.rps.iter().all(|&rps| rps >= 1) && args.start_rps >= 1,
        "a rate must be at least 1 request per second"
    );
    ensure!(
        args.max_rps >= args.start_rps,
        "--max-rps is below --start-rps"
    );
    ensure!(
        args.workers.iter().all(|&w| w >= 1),
        "--workers: a host needs at least 1 worker thread"
    );
    for &cpus in &args.cpus {
        ensure!(
            (1..=machine_cpus).contains(&cpus),
            "--cpus {cpus}: this machine has {machine_cpus} CPUs"
        );
    }
    ensure!(
        args.host.host_cpus.is_none(),
        "--host-cpus: slo places the host itself (on the last --cpus CPUs of the machine)"
    );
    if !args.allocator.is_empty() && args.host_profile != "skillhost" {
        bail!(
            "--allocator is skillhost's flag; for host profile {} pass the host's own flags \
             after --",
            args.host_profile
        );
    }
    for allocator in &args.allocator {
        ensure!(
            ["on-demand", "pooling"].contains(&allocator.as_str()),
            "--allocator {allocator}: skillhost's allocators are on-demand and pooling"
        );
    }
    let workers: Vec<Option<u32>> = match args.workers.is_empty() {
        true => vec![None],
        false => args.workers.iter().copied().map(Some).collect(),
    };
    let allocators: Vec<Option<String>> = match args.allocator.is_empty() {
        true => vec![None],
        false => args.allocator.iter().cloned().map(Some).collect(),
    };
    let mut configs = Vec::new();
    for &cpus in &args.cpus {
        for &workers in &workers {
            for allocator in &allocators {
                configs.push(HostConfig {
                    workers,
                    cpus: (machine_cpus - cpus..machine_cpus).collect(),
                    allocator: allocator.clone(),
                });
            }
        }
    }
    Ok(configs)
}

/// The CPUs the generator runs on beside a host on `host`: the rest of the machine, or
/// `None` when the host has every CPU.
fn generator_cpus(host: &[usize], machine_cpus: usize) -> Option<Vec<usize>> {
    let rest: Vec<usize> = (0..machine_cpus).filter(|c| !host.contains(c)).collect();
    (!rest.is_empty()).then_some(rest)
}

/// What the traffic sends: each skill's component, the name the host and the report give it,
/// its input and its share of the requests.
struct Sent(Vec<SentSkill>);

struct SentSkill {
    name: String,
    component: PathBuf,
    input: serde_json::Value,
    weight: u32,
}

impl Sent {
    /// The report's skill: the one skill's name, or the mix with its weights.
    fn label(&self) -> String {
        self.targets().label()
    }

    /// The report's input: the one skill's, or the mix as `[{skill, input, weight}]`.
    fn input(&self) -> serde_json::Value {
        match self.0.as_slice() {
            [one] => one.input.clone(),
            mix => mix
                .iter()
                .map(|s| serde_json::json!({"skill": s.name, "input": s.input, "weight": s.weight}))
                .collect(),
        }
    }

    fn targets(&self) -> Targets {
        let targets = self
            .0
            .iter()
            .map(|s| generator::Target {
                skill: s.name.clone(),
                input: s.input.clone(),
                weight: s.weight,
            })
            .collect();
        Targets::mix(targets).expect("a checked mix has a weight above 0")
    }
}

/// The component at `file`, refused unless it is one of `world`'s; `flag` names where it came
/// from in the error.
fn checked_component(file: &Path, registry: &Registry, flag: &str, profile: &str) -> Result<()> {
    let exports = crate::ground::component::read(file).map_err(anyhow::Error::msg)?;
    match registry.refuses(&exports, profile) {
        Some(why) => anyhow::bail!("{flag} {} {why}", file.display()),
        None => Ok(()),
    }
}

/// The sample, the user's component or the mix `args` name, with the inputs: a component of
/// another world, a file that is not one, or an input that is not JSON is refused here,
/// before anything starts.
fn sent(args: &SloArgs, profile: &HostProfile) -> Result<Sent> {
    let world = profile.registry.world;
    if let Some(mix) = &args.mix {
        let skills = crate::ground::cmds::read_mix(mix).map_err(anyhow::Error::msg)?;
        let dir = mix.parent().unwrap_or(Path::new("."));
        return skills
            .into_iter()
            .map(|skill| {
                let Some(component) = &skill.component else {
                    anyhow::bail!(
                        "--mix {}: {} has no \"component\": slo starts its host with the mix's \
                         components, each a file beside the mix",
                        mix.display(),
                        skill.skill
                    );
                };
                let component = dir.join(component);
                let flag = format!("--mix {}: {}'s component", mix.display(), skill.skill);
                checked_component(&component, &profile.registry, &flag, &args.host_profile)?;
                Ok(SentSkill {
                    name: skill.skill,
                    component,
                    input: skill.input,
                    weight: skill.weight,
                })
            })
            .collect::<Result<_>>()
            .map(Sent);
    }
    let (name, component) = match &args.component {
        Some(file) => {
            checked_component(file, &profile.registry, "--component", &args.host_profile)?;
            (crate::ground::cmds::CopyNames::stem(file), file.clone())
        }
        None => {
            ensure!(
                !(world == SkillWorld::WasiHttp && args.skill == SkillChoice::Python),
                "--skill python: the Python samples are not built as wasi:http/proxy components \
                 (the world of host profile {}); hello and rust are",
                args.host_profile
            );
            let samples = SampleSkills::beside_executable(world)?;
            let name = args.skill.component();
            (name.to_owned(), samples.path(name)?)
        }
    };
    let input = match (&args.input, &args.component) {
        (Some(given), _) => crate::ground::cmds::read_input(given, |file| Ok(file.into()))
            .map_err(|why| anyhow::anyhow!("--input {given}: {why}"))?,
        (None, Some(_)) => serde_json::json!({}),
        (None, None) => {
            crate::producers::hostctl::sample_input("slo", args.memory_kb, args.wait_ms)
        }
    };
    Ok(Sent(vec![SentSkill {
        name,
        component,
        input,
        weight: 1,
    }]))
}

/// A started host with its skills listed and answering.
struct Started {
    host: HostProcess,
    /// Where the requests go.
    targets: Targets,
    ledger: Option<HostLedger>,
    /// The time profile's probes, where they attached.
    probes: Option<ProbeSession>,
}

/// The steps a probe session of one host can count (an entry each): a search takes a few
/// dozen at most, a table its points.
const MAX_STEPS: u32 = 1024;

/// The time profile's probes on the host, its samples put on a timeline for the steps'
/// stalls; none (said on stderr, and in the steps by what they lack) where they cannot load.
fn probe(args: &SloArgs, pid: u32, skills: &Path) -> Result<Option<ProbeSession>> {
    let Some(mut time) = args.time.options(OffCpuMode::Off, DEFAULT_HZ)? else {
        return Ok(None);
    };
    time.timeline = true;
    let options = ProbeOptions {
        mode: ProbeMode::HostOnly,
        max_entries: MAX_STEPS,
        time: Some(time),
        skills_dir: Some(skills.to_path_buf()),
        ..ProbeOptions::default()
    };
    match ProbeSession::start(pid, &options) {
        Ok(session) => Ok(Some(session)),
        Err(error) => {
            eprintln!("slo: no time profile of the steps: {error:#}");
            Ok(None)
        }
    }
}

async fn start(
    args: &SloArgs,
    profile: &HostProfile,
    sent: &Sent,
    config: &HostConfig,
    folder: &Path,
    index: usize,
) -> Result<Started> {
    let dir = folder.join(format!("host-{index}"));
    let skills = SkillsDir::create(&SkillsDir::of_run(&dir), profile.registry.clone())?;
    for skill in &sent.0 {
        skills.add(&skill.name, &skill.component)?;
    }
    let mut flags = args.host_flags.clone();
    if let Some(allocator) = &config.allocator {
        flags.extend(["--allocator".to_owned(), allocator.clone()]);
    }
    let env: Vec<(String, String)> = config
        .workers
        .map(|w| ("TOKIO_WORKER_THREADS".to_owned(), w.to_string()))
        .into_iter()
        .collect();
    let mut spec = args.host.spec(profile.clone(), &flags, &env)?;
    spec.cpus = Some(crate::ground::cpus::CpuList(config.cpus.clone()));
    let host = HostProcess::start(
        &spec,
        skills.path(),
        &crate::producers::hostctl::profile::log(&dir),
        &dir.join("work"),
        None,
        std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 0),
        Duration::from_secs(args.ready_timeout_s),
    )
    .await?;
    let names: Vec<String> = sent.0.iter().map(|s| s.name.clone()).collect();
    host.client
        .wait_until_listed(&names, Duration::from_secs(60))
        .await?;
    for skill in &sent.0 {
        let first = host.client.execute(&skill.name, &skill.input).await?;
        ensure!(
            first.is_ok(),
            "the host did not run {} with the input {}: {} {}",
            skill.name,
            skill.input,
            first.status,
            first.error_message()
        );
    }
    // The probes first: a session that fails to load gives up its lease on the host's ledger
    // as it drops, which would leave the steps' own reader without marks until it renews.
    let probes = probe(args, host.pid(), skills.path())?;
    // The ledger gives the CPU by phase where the host keeps one; without, the steps say less.
    let ledger = HostLedger::open(host.pid()).ok();
    eprintln!(
        "slo: [{}] host pid {} on CPU(s) {}, generator on {}",
        config.label(),
        host.pid(),
        crate::ground::cpus::format_list(&config.cpus),
        generator_cpus(
            &config.cpus,
            std::thread::available_parallelism().map_or(1, |n| n.get())
        )
        .map_or("the same CPUs".to_owned(), |cpus| {
            crate::ground::cpus::format_list(&cpus)
        })
    );
    Ok(Started {
        host,
        targets: sent.targets(),
        ledger,
        probes,
    })
}

/// One step at `rps` on a started host, with its evidence and verdict.
#[allow(clippy::too_many_arguments)]
async fn step(
    args: &SloArgs,
    started: &Started,
    config: (usize, &HostConfig),
    stage: Stage,
    rps: u32,
    machine_cpus: usize,
    (index, folder): (usize, &Path),
) -> Result<SloStep> {
    let exit = started.host.exit_watch()?;
    let pid = started.host.pid();
    let cpus = &config.1.cpus;
    if let Some(probes) = &started.probes {
        probes.begin_entry(index as u32)?;
        // The samples of the time between steps are no step's.
        probes.timeline()?;
    }
    let before = evidence::read(pid, started.ledger.as_ref(), cpus)?;
    let plan = StepPlan {
        targets: started.targets.clone(),
        load: Load::Open {
            rps,
            arrivals: match args.arrivals {
                ArrivalsChoice::Constant => Arrivals::Constant,
                ArrivalsChoice::Poisson => Arrivals::Poisson,
            },
        },
        length: Duration::from_secs(u64::from(args.step_s)),
        cpus: generator_cpus(&config.1.cpus, machine_cpus),
    };
    // The counters at the schedule's end: the drain after it (up to 10 s for the answers a
    // saturated host still owes) is no part of the load, and would dilute the host's CPU share.
    let length = plan.length;
    let at_end = async {
        tokio::time::sleep(generator::START_DELAY + length).await;
        evidence::read(pid, started.ledger.as_ref(), cpus)
    };
    let (traffic, alive) = tokio::join!(generator::run(&started.host.client, plan), at_end);
    let traffic = traffic?;
    let answered = traffic.answered_by_end;
    let exited = tokio::time::timeout(Duration::from_millis(5), exit.exited())
        .await
        .is_ok();
    let (mut found, died) = match (&alive, exited) {
        (Ok(after), false) => (evidence::between(&before, after, answered), None),
        _ => (
            Default::default(),
            Some(format!(
                "process {pid} is gone; {}",
                started.host.log_tail()
            )),
        ),
    };
    found.died = died;
    if found.died.is_none()
        && let Some(probes) = &started.probes
    {
        profile_step(probes, &mut found, &traffic, (index, folder), cpus.len())?;
    }
    let verdict = match found.died {
        Some(_) => Verdict::Fail,
        None => args.target.verdict(&traffic),
    };
    let step = SloStep {
        config: config.0,
        stage,
        rps,
        verdict,
        traffic,
        evidence: found,
    };
    eprintln!(
        "slo: [{}] {} {rps}/s: {} {} ms, {:.0}/s answered, {} ({})",
        config.1.label(),
        match stage {
            Stage::Search => "search",
            Stage::Table => "table",
        },
        args.target.quantile,
        args.target.latency_ms(&step.traffic),
        step.traffic.achieved_rps(),
        verdict.name(),
        evidence::bound(&step.traffic, &step.evidence, config.1)
    );
    Ok(step)
}

/// The step's time profile into its evidence and the experiment's profile/ folder, and what
/// the host's threads did in its stall.
fn profile_step(
    probes: &ProbeSession,
    evidence: &mut crate::record::slo::Evidence,
    traffic: &crate::record::traffic::TrafficStep,
    (index, folder): (usize, &Path),
    cpus: usize,
) -> Result<()> {
    let metrics = probes.entry(index as u32)?;
    let timeline = probes.timeline()?;
    let Some((profile, time)) = probes.time(index as u32, &metrics)? else {
        return Ok(());
    };
    let span = crate::views::output::pprof::Span::ended_now(Duration::from_secs_f64(
        traffic.warmup_s + traffic.measured_s,
    ));
    crate::views::output::profile::write(folder, index, &format!("step {index}"), &profile, span)?;
    evidence.stall = evidence::stall_seen(traffic, &timeline, profile.period_ns, cpus);
    evidence.time = Some(time);
    Ok(())
}

async fn experiment(
    args: &SloArgs,
    profile: HostProfile,
    sent: &Sent,
    configs: Vec<HostConfig>,
    machine_cpus: usize,
    folder: &Path,
) -> Result<SloReport> {
    let mut report = SloReport {
        target: args.target.clone(),
        skill: sent.label(),
        input: sent.input(),
        arrivals: match args.arrivals {
            ArrivalsChoice::Constant => Arrivals::Constant,
            ArrivalsChoice::Poisson => Arrivals::Poisson,
        },
        step_s: args.step_s,
        host_profile: args.host_profile.clone(),
        machine_cpus,
        configs: configs
            .iter()
            .map(|config| ConfigPeak {
                config: config.clone(),
                peak_rps: None,
                missed_rps: None,
            })
            .collect(),
        load_points: args.rps.clone(),
        steps: Vec::new(),
        started: chrono::Local::now().to_rfc3339(),
        complete: true,
    };
    // The search, configuration by configuration (skipped for fixed rates).
    if args.rps.is_empty() {
        for (index, config) in configs.iter().enumerate() {
            let started = start(args, &profile, sent, config, folder, index).await?;
            let mut search = Search::new(args.start_rps, args.max_rps);
            while let Some(rps) = search.next() {
                let step = step(
                    args,
                    &started,
                    (index, config),
                    Stage::Search,
                    rps,
                    machine_cpus,
                    (report.steps.len(), folder),
                )
                .await?;
                // A step the generator could not send brackets the search from above like a
                // miss, and is marked as such: the peak comes from steps it did send.
                search.record(rps, step.verdict.met());
                if step.evidence.died.is_some() {
                    search.stop();
                    report.complete = false;
                }
                let died = step.evidence.died.is_some();
                report.steps.push(step);
                output::write(folder, &report)?;
                if died {
                    break;
                }
            }
            let (met, missed) = search.bracket();
            report.configs[index].peak_rps = met;
            report.configs[index].missed_rps = missed;
            stop(started).await;
        }
        report.load_points = table::load_points(report.best_peak(), args.points);
    }
    // The table: every configuration at every load point.
    for (index, config) in configs.iter().enumerate() {
        let started = start(args, &profile, sent, config, folder, index).await?;
        for &rps in &report.load_points.clone() {
            let step = step(
                args,
                &started,
                (index, config),
                Stage::Table,
                rps,
                machine_cpus,
                (report.steps.len(), folder),
            )
            .await?;
            let died = step.evidence.died.is_some();
            report.complete &= !died;
            report.steps.push(step);
            output::write(folder, &report)?;
            if died {
                break;
            }
        }
        if !args.rps.is_empty() {
            let (met, missed) = table::bracket(&report, index);
            report.configs[index].peak_rps = met;
            report.configs[index].missed_rps = missed;
        }
        stop(started).await;
    }
    Ok(report)
}

/// Stops a host (its own reason to end is in the steps if it died).
async fn stop(started: Started) {
    drop(started.probes);
    drop(started.ledger);
    let _ = started.host.stop(Duration::from_secs(30)).await;
}
