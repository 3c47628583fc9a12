//! Does `skillprof pool`'s advice hold when checked? For each workload (a small Rust request,
//! cmds/pool.cmds; a memory-heavy one, cmds/pool_heavy.cmds) it runs the experiment over a
//! grid of knobs, takes the configuration the answer names and the change against pooling
//! at its defaults it printed (host CPU per request and RSS peak, with their intervals), then
//! runs a second experiment of fresh interleaved rounds with only that configuration and
//! reports the change measured again, and whether it falls inside the printed interval.
//! Where the answer is pooling at its defaults, on-demand's change against it is what is
//! checked. Figures only, no pass/fail.
//!
//!     cargo bench -p skillprof --bench pool_advice [-- --rounds N --goal cpu|memory --keep DIR]
//!
//! About 10 s per run on a 2-core machine: the first experiment runs 7 configurations, the
//! second 4, so about 25 minutes at 5 rounds. Needs root (the probes) and a release build of
//! skillprof and skillhost.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, ensure};
use skillprof::commands::pool::advice::choose;
use skillprof::commands::pool::compare::{Change, summary};
use skillprof::record::pool::{BASE, CPU, FIGURES, PoolExperiment, RSS_PEAK};

mod common;
use common::skillprof_binary;

#[derive(clap::Parser)]
struct Flags {
    /// Interleaved rounds of each experiment (at least 5: fewer give no interval).
    #[arg(long, default_value_t = 5)]
    rounds: u32,
    /// The goal the advice is for.
    #[arg(long, default_value = "cpu")]
    goal: String,
    /// Keep the experiments' folders here (default: a temporary folder, removed).
    #[arg(long, value_name = "DIR")]
    keep: Option<std::path::PathBuf>,
}

/// Each workload with the grid its experiment tries.
const WORKLOADS: [(&str, &[&str]); 2] = [
    ("pool.cmds", &["keep-resident=0,4M", "decommit-batch=1,8"]),
    (
        "pool_heavy.cmds",
        &["keep-resident=0,64M", "warm-slots=0,100"],
    ),
];

fn main() -> Result<()> {
    let flags: Flags = common::flags();
    ensure!(
        flags.rounds as usize >= skillprof::commands::pool::compare::MIN_ROUNDS,
        "--rounds must be at least {} for an interval",
        skillprof::commands::pool::compare::MIN_ROUNDS
    );
    ensure!(
        rustix::process::geteuid().is_root(),
        "the pool_advice benchmark runs skillprof pool, which loads BPF probes: run it as root"
    );
    let skillprof = skillprof_binary()?;
    let temporary = tempfile::tempdir()?;
    let out = flags.keep.as_deref().unwrap_or(temporary.path());
    for (workload, grid) in WORKLOADS {
        let cmds = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../cmds")
            .join(workload);
        let knobs: Vec<String> = grid.iter().map(|k| format!("--knob={k}")).collect();
        let first = experiment(
            &skillprof,
            &cmds,
            &flags,
            &knobs,
            &out.join(format!("{workload}-advice")),
        )?;
        let (best, _) = choose(&first);
        let best = best.context("the experiment recommended nothing")?;
        let config = &first.configs[best];
        // The configuration again, alone: its knobs as a grid of one value each.
        let again_knobs: Vec<String> = config
            .knobs
            .iter()
            .map(|(k, v)| format!("--knob={k}={v}"))
            .collect();
        let second = experiment(
            &skillprof,
            &cmds,
            &flags,
            &again_knobs,
            &out.join(format!("{workload}-check")),
        )?;
        // What is checked: the recommended configuration against pooling; for pooling
        // itself, on-demand against it.
        let (checked, label) = match best {
            BASE => (0, "on-demand (the answer was pooling at its defaults)"),
            0 => (0, "on-demand (the answer)"),
            _ => (second.configs.len() - 1, config.name.as_str()),
        };
        let predicted_index = if best == BASE { 0 } else { best };
        println!(
            "\n{workload}: the answer for --goal {}: {} ({})",
            flags.goal,
            config.name,
            config.setting()
        );
        for figure in [CPU, RSS_PEAK] {
            let predicted =
                summary(&first, predicted_index, &FIGURES[figure]).and_then(|s| s.change);
            let measured = summary(&second, checked, &FIGURES[figure]).and_then(|s| s.change);
            println!(
                "  {label}, {}: predicted {}, measured again {}: {}",
                FIGURES[figure].name,
                words(predicted),
                words(measured),
                verdict(predicted, measured)
            );
        }
        let control = summary(&second, 2, &FIGURES[CPU]).and_then(|s| s.change);
        println!(
            "  the second experiment's control (pooling against itself), CPU: {}",
            words(control)
        );
    }
    Ok(())
}

fn experiment(
    skillprof: &Path,
    cmds: &Path,
    flags: &Flags,
    knobs: &[String],
    folder: &Path,
) -> Result<PoolExperiment> {
    let status = Command::new(skillprof)
        .arg("pool")
        .arg(cmds)
        .args([
            "--rounds",
            &flags.rounds.to_string(),
            "--goal",
            &flags.goal,
            "--run-dir",
        ])
        .arg(folder)
        .args(knobs)
        .status()
        .context("running skillprof pool")?;
    ensure!(status.success(), "skillprof pool {} failed", cmds.display());
    skillprof::commands::pool::output::read(folder)
}

fn words(change: Option<Change>) -> String {
    change.map_or("no interval".to_owned(), |c| c.words())
}

/// Whether the change measured again lies inside the printed interval.
fn verdict(predicted: Option<Change>, measured: Option<Change>) -> &'static str {
    match (predicted, measured) {
        (Some(p), Some(m)) if (p.lo..=p.hi).contains(&m.pct) => "holds",
        (Some(_), Some(_)) => "DOES NOT HOLD",
        _ => "cannot tell",
    }
}
