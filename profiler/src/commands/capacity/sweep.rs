//! `skillprof sweep`: one workload run at several emulated core counts (`skillprof run
//! --cores N`), the rounds interleaved so that a drift of the machine spreads over every
//! count, and how each ingredient of capacity depends on the count: dependence.md and
//! dependence.json in the sweep's folder, whose runs `skillprof capacity --cores N` reads.

use std::fmt::Write as _;
use std::fs::{self, File};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command as Process, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde::Serialize;

use super::dependence::{self, Point};
use crate::ground::cmds::{self, Command, InFlightCap, SkillKind};

const LONG_ABOUT: &str = "\
Run one workload at several emulated core counts and measure how the memory of skills depends \
on the machine's parallelism.

What a compile leaves behind grows with the cores: Cranelift compiles on one thread per core, \
and glibc gives each thread a malloc arena of its own (up to 8 per core), where what the \
compile frees stays. For each count (--cores) and round (--rounds) this runs `skillprof run \
FILE --cores N` into a folder of the sweep's, the rounds interleaved (counts up, then down) so \
that a drift of the machine spreads over every count. Then it tabulates per count: the host's \
threads at most, malloc's arenas, the first skill's growth and its split (heap in use, kept by \
the allocator, compiled code), each further skill's cost with its 95% interval, the warm-up and \
the transient: dependence.md and dependence.json.

The workload must start with add_py or add_rs (the first skill) and add more after it (the \
slope): cmds/cores.cmds does. `skillprof capacity SWEEP --memory 64G --cores 16` then predicts \
for a 16-core machine from the runs at 16 (or between the counts around it).

Examples:
  sudo skillprof sweep cmds/cores.cmds                                  # 1 to 32 cores, 2 rounds
  sudo skillprof sweep cmds/cores.cmds --cores 2,16 --rounds 3 --out runs/c
  sudo skillprof sweep cmds/cores.cmds --run-arg=--no-probes --run-arg=--memory-max=3G";

#[derive(clap::Args, Debug)]
#[command(about = "Run a workload at several emulated core counts: how skills' memory depends on them", long_about = LONG_ABOUT)]
pub struct SweepArgs {
    /// The workload: a cmds file that starts with add_py or add_rs and adds more after it.
    #[arg(value_name = "FILE.cmds")]
    pub cmds: PathBuf,

    /// The core counts to emulate, comma-separated.
    #[arg(
        long,
        value_name = "N,N,...",
        value_delimiter = ',',
        default_value = "1,2,4,8,16,32",
        value_parser = clap::value_parser!(u32).range(1..=1024)
    )]
    pub cores: Vec<u32>,

    /// Runs per count: two or more give each figure an interval.
    #[arg(long, default_value_t = 2, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: u32,

    /// The sweep's folder, made if missing and refused unless empty [default:
    /// runs/sweep-YYMMDD_HHMMSS].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,

    /// An argument for every `skillprof run` (repeatable): `--run-arg=--no-probes`,
    /// `--run-arg=--memory-max=3G`, `--run-arg=--host-profile=pharia-kernel-2024`.
    #[arg(long = "run-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub run_args: Vec<String>,
}

/// The flags a sweep sets on each run itself.
const OWN_FLAGS: [&str; 5] = ["--cores", "--run-dir", "--out", "--attach", "--json"];

/// dependence.json.
#[derive(Serialize)]
struct Document {
    workload: String,
    cores: Vec<u32>,
    rounds: u32,
    /// This machine's cores: every count shares them.
    real_cores: u64,
    kinds: Vec<KindDependence>,
}

#[derive(Serialize)]
struct KindDependence {
    kind: SkillKind,
    points: Vec<Point>,
}

pub fn run(args: SweepArgs) -> Result<()> {
    let kind = first_kind(&args.cmds)?;
    if let Some(flag) = args.run_args.iter().find(|arg| {
        OWN_FLAGS
            .iter()
            .any(|own| arg.split('=').next() == Some(*own))
    }) {
        bail!("--run-arg {flag}: the sweep sets it on each run itself");
    }
    let mut counts = args.cores.clone();
    counts.sort_unstable();
    counts.dedup();
    let out = args.out.clone().unwrap_or_else(|| {
        PathBuf::from("runs").join(format!(
            "sweep-{}",
            chrono::Local::now().format("%y%m%d_%H%M%S")
        ))
    });
    fs::create_dir_all(&out).with_context(|| format!("making {}", out.display()))?;
    if fs::read_dir(&out)?.next().is_some() {
        bail!(
            "{} is not empty: a sweep's folder holds its own runs only",
            out.display()
        );
    }
    let exe = std::env::current_exe().context("locating skillprof")?;
    let plan = order(&counts, args.rounds);
    let real_cores = crate::ground::machine::Machine::read()?.cores;
    eprintln!(
        "sweep: {} runs of {} ({} counts × {} rounds) into {}, on this {real_cores}-core machine",
        plan.len(),
        args.cmds.display(),
        counts.len(),
        args.rounds,
        out.display()
    );
    for (done, (cores, round)) in plan.iter().enumerate() {
        let name = format!("cores-{cores:03}-round-{round}");
        let (folder, log) = (out.join(&name), out.join(format!("{name}.log")));
        let started = Instant::now();
        eprint!(
            "[{}/{}] --cores {cores}, round {round} ... ",
            done + 1,
            plan.len()
        );
        let output = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let mut child = Process::new(&exe);
        child
            .arg("run")
            .arg(&args.cmds)
            .arg("--cores")
            .arg(cores.to_string())
            .arg("--run-dir")
            .arg(&folder)
            .args(&args.run_args)
            .stdin(Stdio::null())
            .stdout(output.try_clone()?)
            .stderr(output);
        // A run ends (cleanly: SIGTERM is a run's Ctrl-C) when the sweep does.
        // SAFETY: prctl is async-signal-safe and touches no memory of the parent's.
        unsafe {
            child.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let status = child
            .status()
            .with_context(|| format!("running {}", exe.display()))?;
        if !status.success() {
            eprintln!("failed");
            bail!(
                "the run --cores {cores}, round {round} failed ({status}); the end of its log {}:\n{}\n\
                 The runs before it are in {}.",
                log.display(),
                tail(&log),
                out.display()
            );
        }
        eprintln!("{:.0} s", started.elapsed().as_secs_f64());
    }
    let loaded: Vec<_> = super::load_all(&out)?
        .into_iter()
        .map(|loaded| loaded.run)
        .collect();
    let (points, lacking) = dependence::points(&loaded, &cmds::Copies::Sample(kind));
    if let Some((cores, missing)) = lacking.first() {
        bail!(
            "the runs at {cores} cores lack {}: add `{}` to {}",
            missing[0].figure,
            missing[0].add,
            args.cmds.display()
        );
    }
    let text = document_text(&args, &counts, real_cores, kind, &points);
    fs::write(out.join("dependence.md"), &text)?;
    let document = Document {
        workload: args.cmds.display().to_string(),
        cores: counts,
        rounds: args.rounds,
        real_cores,
        kinds: vec![KindDependence { kind, points }],
    };
    fs::write(
        out.join("dependence.json"),
        serde_json::to_string_pretty(&document)? + "\n",
    )?;
    print!("{text}");
    eprintln!(
        "\nwritten: {0}/dependence.md and {0}/dependence.json; predict with `skillprof capacity \
         {0} --memory 64G --cores 16`",
        out.display()
    );
    Ok(())
}

/// The skill kind the workload's first line adds; refused unless it adds one and more follow.
fn first_kind(path: &Path) -> Result<SkillKind> {
    let plan = cmds::read(path, InFlightCap::DEFAULT)?;
    let kind_of = |command: &Command| match command {
        Command::AddPy | Command::PAddPy(_) => Some(SkillKind::Python),
        Command::AddRs | Command::PAddRs(_) => Some(SkillKind::Rust),
        Command::Fill { kind, .. } => Some(*kind),
        _ => None,
    };
    let Some(first) = plan.entries.first() else {
        bail!("{} has no entries", path.display());
    };
    let kind = match (&first.command, first.repeat) {
        (Command::AddPy, 1) => SkillKind::Python,
        (Command::AddRs, 1) => SkillKind::Rust,
        _ => bail!(
            "{} must start with one add_py or add_rs: the first skill is what the sweep \
             measures at each count",
            path.display()
        ),
    };
    let further = plan.entries[1..]
        .iter()
        .any(|entry| kind_of(&entry.command) == Some(kind));
    if !further {
        bail!(
            "{} adds no skill after the first: add `8 add_{}` for the cost of each further one",
            path.display(),
            kind.prefix().trim_start_matches("sample_")
        );
    }
    Ok(kind)
}

/// Every (count, round), counts up in odd rounds and down in even ones.
fn order(counts: &[u32], rounds: u32) -> Vec<(u32, u32)> {
    (1..=rounds)
        .flat_map(|round| {
            let mut these: Vec<u32> = counts.to_vec();
            if round % 2 == 0 {
                these.reverse();
            }
            these.into_iter().map(move |cores| (cores, round))
        })
        .collect()
}

fn document_text(
    args: &SweepArgs,
    counts: &[u32],
    real_cores: u64,
    kind: SkillKind,
    points: &[Point],
) -> String {
    let mut text = format!(
        "# How {} skills' memory depends on the cores\n\n`skillprof sweep {} --cores {} --rounds {}{}` \
         on a {real_cores}-core machine: each count's compile threads, async workers and malloc \
         arena limit emulated (`skillprof run --cores N`); memory bandwidth and parallel wall \
         time are this machine's.\n\n",
        match kind {
            SkillKind::Python => "Python",
            SkillKind::Rust => "Rust",
        },
        args.cmds.display(),
        counts
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(","),
        args.rounds,
        args.run_args
            .iter()
            .map(|arg| format!(" --run-arg={arg}"))
            .collect::<String>(),
    );
    if let Some(scaled) = dependence::scaled(points) {
        let _ = writeln!(text, "{scaled}\n");
    }
    text.push_str(&dependence::table(points));
    text.push_str(
        "\nFirst skill: the first entry's growth (median [min-max] over the rounds); of it, the \
         heap's growth split into what malloc has in use and what it keeps, and compiled code; \
         its transient: the peak over what stayed. Each further skill: the Theil-Sen slope over \
         every later add, with its bootstrap 95% interval; the warm-up: what the first further \
         skills pay once above it. Arenas: malloc's thread arenas after the first skill, from \
         glibc's heap headers. Memory is as the runs measured it: RSS, or what the host's \
         cgroup was charged with `--run-arg=--memory-max=SIZE`.\n",
    );
    text
}

fn tail(log: &Path) -> String {
    let text = fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_go_up_then_down_so_a_drift_spreads_over_every_count() {
        assert_eq!(
            order(&[1, 4, 16], 2),
            [(1, 1), (4, 1), (16, 1), (16, 2), (4, 2), (1, 2)]
        );
    }

    #[test]
    fn a_workload_without_a_first_skill_or_further_ones_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let write = |text: &str| {
            let path = dir.path().join("w.cmds");
            fs::write(&path, text).unwrap();
            path
        };
        let why = first_kind(&write("skills\nadd_rs\n"))
            .unwrap_err()
            .to_string();
        assert!(
            why.contains("must start with one add_py or add_rs"),
            "{why}"
        );
        let why = first_kind(&write("add_rs\nskills\n"))
            .unwrap_err()
            .to_string();
        assert!(why.contains("add `8 add_rs`"), "{why}");
        assert_eq!(
            first_kind(&write("add_py\n8 add_py\n")).unwrap(),
            SkillKind::Python
        );
    }
}
