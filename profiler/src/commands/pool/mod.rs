//! `skillprof pool`: what wasmtime's pooling allocator costs and saves for one workload, and
//! what to set. Every configuration (on-demand, pooling at skillhost's defaults, that again as
//! the control, and each combination of the knobs' values the user names) runs the workload
//! as a `skillprof run` of its own, with the probes; the rounds run every configuration once
//! each, in a new random order, so that a difference is a ratio within a round with an
//! interval, not two runs an hour apart. The answer names the configuration for the goal,
//! its flags, and why, from the kernel's evidence.

pub mod advice;
pub mod compare;
mod figures;
pub mod knobs;
pub mod output;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use anyhow::{Context as _, Result, bail, ensure};
use clap::Args;

use crate::ground::cmds::{self, InFlightCap};
use crate::record::pool::{Goal, PoolConfig, PoolExperiment, PoolRun};
use crate::record::profile::HostProfile;
use knobs::KnobValues;

/// More configurations than this need `--yes`.
const MANY: usize = 64;
/// The host whose knobs are flags, and whose `--check-config` says what a pool reserves.
const SKILLHOST: &str = "skillhost";

const LONG_ABOUT: &str = "\
What wasmtime's pooling allocator costs and saves for a workload, and what to set.

Runs the workload (a cmds file) under each allocator configuration: on-demand, pooling at \
skillhost's defaults (wasmtime's for every knob that shapes how slots are reset), pooling \
again as the control, and every combination of the values given with --knob. Each run is a \
`skillprof run` of its own, probes and all. A round runs every configuration once, in a new \
random order; a difference is the median over the rounds of its ratio to pooling in the same \
round, with a bootstrap 95% interval, and the control's difference is the smallest one the \
machine lets the experiment see.

Per configuration: host CPU per request (instantiate, call, reset: dropping the request's \
store, which unmaps its memories on demand and resets its slots pooled; and the rest), the \
kernel's share of it and of each phase, RSS peak and what the warm slots keep resident, \
memory calls, page faults and TLB shootdowns per request, address space reserved (skillhost \
--check-config) and mappings; p50 and p99 latency; for a workload of o_execute lines (traffic \
at rising rates), the peak: the highest rate sustained with its p99 within --p99-ms. The answer: \
for --goal cpu the least CPU per request (within --memory), for --goal memory the least RSS peak \
(within --p99-ms), for --goal peak the highest peak (within --memory); configurations within the \
control's spread of it are told apart by the other figure (RSS peak, or CPU), then by the fewest \
knobs; the flags that set it, and why, in words.

The workload's entries that executed skills are measured, except those in which the host \
compiled one: a skill's first request compiles it, which add lines do.

Every configuration is checked by skillhost before anything runs; one the host refuses stops \
the experiment with its reason. A run that fails is reported and the rest go on.

The knobs (--knob NAME=V1,V2,...; sizes take K, M, G), each with skillhost's default and flag:
";

#[derive(Args, Debug)]
#[command(about = "What the pooling allocator costs and saves for a workload, and what to set",
          long_about = long_about())]
pub struct PoolArgs {
    /// The workload: a cmds file whose execute lines are what is measured.
    #[arg(value_name = "CMDS")]
    pub cmds: PathBuf,

    /// A knob and the values to try, repeatable; every combination is a configuration.
    #[arg(long = "knob", value_name = "NAME=V1,V2", value_parser = knobs::parse_knob)]
    pub knobs: Vec<KnobValues>,

    /// Rounds: each runs every configuration once. A change gets an interval from 5 rounds.
    #[arg(long, default_value_t = 5, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: u32,

    /// What the answer optimises.
    #[arg(long, value_enum, default_value = "cpu")]
    pub goal: Goal,

    /// --goal cpu or peak: the most RSS peak a configuration may take (e.g. 512M).
    #[arg(long, value_name = "SIZE", value_parser = crate::ground::units::parse_size)]
    pub memory: Option<u64>,

    /// --goal memory: the slowest p99 execute latency, of any entry, a configuration may
    /// have. --goal peak: the p99 within which a configuration's o_execute rates count.
    #[arg(long, value_name = "MS")]
    pub p99_ms: Option<f64>,

    /// Run a grid of more than 64 configurations.
    #[arg(long)]
    pub yes: bool,

    /// The seed of the rounds' orders [default: from the clock; pool.json keeps it].
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,

    /// An option for every `skillprof run`, repeatable (e.g. --run-arg=--no-probes). Each
    /// run traces the host's memory calls (`--probes calls`) unless one of these decides the
    /// probes.
    #[arg(long = "run-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub run_args: Vec<String>,

    /// Folder under which the experiment's folder is made.
    #[arg(long, default_value = "runs", value_name = "DIR")]
    pub out: PathBuf,

    /// The experiment's folder itself (created if missing, refused unless empty).
    #[arg(long, value_name = "DIR", conflicts_with = "out")]
    pub run_dir: Option<PathBuf>,

    /// The host. skillhost exposes every knob as a flag; a host whose profile has a
    /// `[pooling]` switch (both Pharia engines: USE_POOLING_ALLOCATOR) runs on demand, pooled
    /// at wasmtime's defaults, and pooled again as the control, with no --knob. Give its
    /// binary with --run-arg=--host-bin=PATH.
    #[arg(long, value_name = "NAME", default_value = "skillhost")]
    pub host_profile: String,

    /// Flags every configuration's host gets first, after `--`.
    #[arg(last = true, value_name = "HOST_FLAGS")]
    pub host_flags: Vec<String>,
}

fn long_about() -> String {
    format!(
        "{LONG_ABOUT}{}\n\nExamples:\n  sudo skillprof pool cmds/pool.cmds\n  \
             sudo skillprof pool cmds/pool.cmds --knob keep-resident=0,1M --knob decommit-batch=1,8\n  \
             sudo skillprof pool cmds/pool_rate.cmds --goal peak --p99-ms 20 --knob keep-resident=0,4M\n  \
             sudo skillprof pool cmds/pool_chunks.cmds --goal memory --p99-ms 2000 --rounds 3",
        knobs::help()
    )
}

pub fn run(args: PoolArgs) -> Result<ExitCode> {
    let mut configs = check(&args)?;
    if args.host_profile == SKILLHOST {
        for config in &mut configs {
            config.reserved_bytes = Some(reserved(&args.host_flags, config)?);
        }
    }
    let folder =
        crate::views::output::experiment_folder(args.run_dir.as_deref(), &args.out, "pool")?;
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    });
    let machine = crate::ground::machine::Machine::read()?;
    let mut experiment = PoolExperiment {
        workload: args.cmds.display().to_string(),
        rounds: args.rounds,
        seed,
        goal: args.goal,
        memory_within_kb: args.memory.map(|bytes| bytes / 1024),
        p99_within_ms: args.p99_ms,
        common_flags: args.host_flags.clone(),
        cpus: machine.cores as usize,
        kernel: machine.kernel_release,
        configs,
        complete: false,
    };
    let mut rng = fastrand::Rng::with_seed(seed);
    let total = experiment.rounds as usize * experiment.configs.len();
    let started = Instant::now();
    let mut done = 0;
    for round in 1..=experiment.rounds {
        let mut order: Vec<usize> = (0..experiment.configs.len()).collect();
        rng.shuffle(&mut order);
        for (position, &index) in order.iter().enumerate() {
            let config = &experiment.configs[index];
            let run_folder = folder.join("runs").join(format!("c{index:02}-r{round:02}"));
            let began = Instant::now();
            let outcome = run_once(&args, config, &run_folder);
            let seconds = began.elapsed().as_secs_f64();
            done += 1;
            let (figures, failed) = match outcome {
                Ok(figures) => (Some(figures), None),
                Err(error) => (None, Some(format!("{error:#}"))),
            };
            eprintln!(
                "pool: round {round}/{}, {done}/{total}: {} {} in {seconds:.0} s{}",
                experiment.rounds,
                experiment.configs[index].name,
                if failed.is_some() { "FAILED" } else { "ran" },
                remaining(started.elapsed().as_secs_f64(), done, total)
            );
            if let Some(why) = &failed {
                eprintln!("pool:   {why}");
            }
            experiment.configs[index].runs.push(PoolRun {
                round,
                position,
                folder: run_folder.display().to_string(),
                seconds,
                figures,
                failed,
            });
            // Rewritten after every run: an interrupted experiment keeps what it measured.
            output::write(&folder, &experiment)?;
        }
    }
    experiment.complete = experiment
        .configs
        .iter()
        .all(|config| config.runs.iter().all(|run| run.failed.is_none()));
    output::write(&folder, &experiment)?;
    eprintln!("{}", output::summary(&experiment));
    eprintln!("pool: experiment folder {}", folder.display());
    Ok(if experiment.complete {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Everything that can be refused before anything runs.
fn check(args: &PoolArgs) -> Result<Vec<PoolConfig>> {
    let switch = match args.host_profile.as_str() {
        SKILLHOST => None,
        name => {
            let profile = HostProfile::load(name)?;
            let switch = profile.pooling.with_context(|| {
                format!(
                    "--host-profile {name}: its profile says nothing of a pooling allocator (a \
                     [pooling] switch, as the Pharia engines' USE_POOLING_ALLOCATOR); the \
                     knobs are skillhost's flags"
                )
            })?;
            ensure!(
                args.knobs.is_empty(),
                "--knob: host profile {name} has no pooling knob; its pooling allocator is \
                 switched on by {}, at wasmtime's defaults (docs/pooling.md#the-real-engines)",
                switch.setting()
            );
            Some(switch)
        }
    };
    ensure!(
        args.memory.is_none() || args.goal != Goal::Memory,
        "--memory bounds the configurations --goal cpu or peak may choose; --goal memory \
         chooses the least memory already (bound it with --p99-ms)"
    );
    ensure!(
        args.p99_ms.is_none() || args.goal != Goal::Cpu,
        "--p99-ms bounds the configurations --goal memory may choose, and is the target of \
         --goal peak; with --goal cpu, bound the memory with --memory"
    );
    ensure!(
        args.p99_ms.is_some() || args.goal != Goal::Peak,
        "--goal peak needs the latency target its rates are held to: --p99-ms MS"
    );
    let plan = cmds::read(&args.cmds, InFlightCap::DEFAULT)?;
    ensure!(
        plan.entries.iter().any(|entry| entry.command.executes()),
        "{}: no execute line: the experiment measures the workload's executions",
        args.cmds.display()
    );
    ensure!(
        args.goal != Goal::Peak
            || plan.entries.iter().any(|entry| {
                matches!(&entry.command, cmds::Command::Traffic(traffic)
                    if matches!(traffic.load, cmds::TrafficLoad::Open { .. }))
            }),
        "{}: --goal peak finds the highest rate a configuration sustains within --p99-ms, \
         and the workload has no rate to try: give it o_execute lines, one per rate (e.g. \
         o_execute sample_rs1 500 10, then 1000, 2000)",
        args.cmds.display()
    );
    for flag in &args.host_flags {
        let name = flag.split('=').next().unwrap_or_default();
        ensure!(
            name != "--allocator" && !knobs::KNOBS.iter().any(|knob| knob.flag() == name),
            "{name} after --: the experiment sets the allocator and the knobs itself (--knob); \
             leave it out of the host flags"
        );
    }
    let configs = match &switch {
        Some(switch) => knobs::switched(switch),
        None => knobs::configurations(&args.knobs)?,
    };
    let runs = configs.len() * args.rounds as usize;
    if configs.len() > MANY && !args.yes {
        bail!(
            "the knobs make {} configurations, {runs} runs with {} rounds: more than {MANY} \
             configurations need --yes",
            configs.len(),
            args.rounds
        );
    }
    if !args.run_args.iter().any(|arg| arg == "--no-probes") {
        crate::producers::probes::require_bpf_for_run()?;
    }
    Ok(configs)
}

/// The address space skillhost reserves with `config`, from its `--check-config`; a
/// configuration it refuses is refused here, with its reason.
fn reserved(common: &[String], config: &PoolConfig) -> Result<u64> {
    let skillhost = crate::producers::hostctl::process::find_skillhost()?;
    let output = Command::new(&skillhost)
        .args(["--skills-dir", "/nonexistent", "--check-config"])
        .args(common)
        .args(&config.flags)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {}", skillhost.display()))?;
    if !output.status.success() {
        bail!(
            "configuration '{}' ({}): skillhost refuses it: {}",
            config.name,
            config.flags.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let answer: serde_json::Value = serde_json::from_slice(&output.stdout)
        .context("reading skillhost --check-config's answer")?;
    answer["reserved_bytes"]
        .as_u64()
        .context("skillhost --check-config gave no reserved_bytes")
}

/// `--probes calls` unless `run_args` decide the probes: the allocators differ by their
/// memory calls (an instance's mmap and munmap on demand, a slot's madvise pooled), which a
/// lab run leaves out by default on a kernel that would trace them with tracepoints only.
fn traced_calls(run_args: &[String]) -> &'static [&'static str] {
    let decides = |arg: &String| {
        [
            "--probes",
            "--no-probes",
            "--stacks",
            "--events",
            "--trace-syscalls",
        ]
        .iter()
        .any(|flag| arg == flag || arg.starts_with(&format!("{flag}=")))
    };
    match run_args.iter().any(decides) {
        true => &[],
        false => &["--probes", "calls"],
    }
}

/// One run of the workload under `config`, and its figures.
fn run_once(
    args: &PoolArgs,
    config: &PoolConfig,
    folder: &Path,
) -> Result<crate::record::pool::RunFigures> {
    let skillprof = std::env::current_exe().context("locating skillprof")?;
    fs::create_dir_all(folder.parent().context("a run folder has a parent")?)?;
    let output = Command::new(&skillprof)
        .arg("run")
        .arg(&args.cmds)
        .arg("--run-dir")
        .arg(folder)
        .args(["--host-profile", &args.host_profile])
        .args(
            config
                .env
                .iter()
                .flat_map(|(key, value)| ["--host-env".to_owned(), format!("{key}={value}")]),
        )
        .args(traced_calls(&args.run_args))
        .args(&args.run_args)
        .arg("--")
        .args(&args.host_flags)
        .args(&config.flags)
        .stdin(Stdio::null())
        .output()
        .context("running skillprof run")?;
    fs::write(folder.with_extension("log"), &output.stderr).ok();
    if !output.status.success() {
        bail!(
            "skillprof run exited with {}: {}",
            output.status,
            why_it_failed(&String::from_utf8_lossy(&output.stderr))
        );
    }
    figures::read(folder, args.p99_ms)
}

/// The last three lines of a failed run's stderr that say something: a host that panicked
/// while it died ends its log with a backtrace and notes, and the panic's message (what the
/// kernel refused) comes before them.
fn why_it_failed(stderr: &str) -> String {
    let says = |line: &&str| {
        let line = line.trim();
        let frame = line
            .split_once(':')
            .is_some_and(|(number, _)| number.chars().all(|c| c.is_ascii_digit()));
        !(line.is_empty()
            || frame
            || line.starts_with("at ")
            || line.starts_with("note: ")
            || line.starts_with("stack backtrace:")
            || line.starts_with("not run: ")
            || line.starts_with("fatal runtime error: failed to initiate panic"))
    };
    let why: Vec<&str> = stderr.lines().filter(says).collect();
    why[why.len().saturating_sub(3)..].join(" | ")
}

fn remaining(elapsed: f64, done: usize, total: usize) -> String {
    if done >= total {
        return String::new();
    }
    let left = elapsed / done as f64 * (total - done) as f64;
    format!(", about {:.0} min left", (left / 60.0).ceil())
}

#[cfg(test)]
mod tests {
    /// A pooled host under `vm.max_map_count=2048` that died as a new thread could not map
    /// its signal stack's guard page (the end of a real run's stderr, 2026-11-29): the reason
    /// names the refused mapping, not the backtrace's last notes.
    #[test]
    fn a_failed_runs_reason_is_what_its_stderr_says_not_its_backtrace() {
        let stderr = "vm.max_map_count: 65530 -> 2048 for the run
run incomplete: the host exited (signal: 6 (SIGABRT)) before it was ready; the end of its log host.log:

thread 'tokio-rt-worker' (12053) panicked at library/std/src/sys/pal/unix/stack_overflow.rs:234:13:
failed to set up alternative stack guard page: Cannot allocate memory (os error 12)
stack backtrace:
   0: __rustc::rust_begin_unwind
             at library/std/src/panicking.rs:679:5
   7: <unknown>
note: Some details are omitted, run with `RUST_BACKTRACE=full` for a verbose backtrace.
fatal runtime error: failed to initiate panic, error 5, aborting
not run: 0: add_rs, 1: stop
";
        let why = super::why_it_failed(stderr);
        assert!(why.starts_with("run incomplete: the host exited"), "{why}");
        assert!(
            why.ends_with("failed to set up alternative stack guard page: Cannot allocate memory (os error 12)"),
            "{why}"
        );
    }
}
