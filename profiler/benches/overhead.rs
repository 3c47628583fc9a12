//! What measuring costs: runs a workload alternately with probes on and off, N pairs, and
//! prints the median ratio of the workload's wall time (probes on / off) and, per BPF
//! program, runs and ns per run. Pairs alternate so that drift on a noisy machine hits both
//! sides alike; the median resists the odd slow run. Figures only, no pass/fail.
//!
//!     cargo bench -p skillprof --bench overhead [-- --pairs N --cmds FILE [-- HOST_FLAGS]]
//!
//! FILE is relative to the repository root (default cmds/bench.cmds, 3 pairs).
//!
//! Needs root (the probes) and a release build of skillprof and skillhost.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;
use skillprof::stats;

struct Options {
    pairs: usize,
    cmds: PathBuf,
    host_flags: Vec<String>,
}

/// One run's figures.
struct Measured {
    workload_ms: f64,
    /// program → (runs, run_ns), probes-on runs only.
    programs: BTreeMap<String, (u64, u64)>,
}

fn main() -> Result<()> {
    let options = parse_options()?;
    let skillprof = skillprof_binary()?;
    let out = tempfile::tempdir()?;
    let (mut on, mut off) = (Vec::new(), Vec::new());
    for pair in 1..=options.pairs {
        // Alternate which goes first, so warm-up effects do not favour one side.
        let order = if pair % 2 == 1 {
            [true, false]
        } else {
            [false, true]
        };
        for probes in order {
            let measured = run(&skillprof, &options, probes, out.path())?;
            eprintln!(
                "pair {pair}/{}: probes {}: {:.0} ms",
                options.pairs,
                if probes { "on " } else { "off" },
                measured.workload_ms
            );
            if probes {
                on.push(measured)
            } else {
                off.push(measured)
            }
        }
    }
    report(&options, &on, &off);
    Ok(())
}

fn parse_options() -> Result<Options> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()?;
    let mut options = Options {
        pairs: 3,
        cmds: repo.join("cmds/bench.cmds"),
        host_flags: Vec::new(),
    };
    // cargo bench passes `--bench`; skip what is not ours.
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--pairs" => options.pairs = args.next().context("--pairs N")?.parse()?,
            // cargo runs benches in profiler/: relative paths are taken from the repo root.
            "--cmds" => options.cmds = repo.join(args.next().context("--cmds FILE")?),
            "--" => options.host_flags = args.by_ref().collect(),
            _ => {}
        }
    }
    ensure!(options.pairs > 0, "--pairs must be at least 1");
    Ok(options)
}

fn skillprof_binary() -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let release = exe
        .parent()
        .and_then(Path::parent)
        .context("no target directory")?;
    let binary = release.join("skillprof");
    ensure!(
        binary.is_file(),
        "{} is missing: cargo build --release --workspace",
        binary.display()
    );
    Ok(binary)
}

fn run(skillprof: &Path, options: &Options, probes: bool, out: &Path) -> Result<Measured> {
    let before: Vec<PathBuf> = folders(out)?;
    let mut command = Command::new(skillprof);
    command.arg("run").arg(&options.cmds).arg("--out").arg(out);
    if !probes {
        command.arg("--no-probes");
    }
    if !options.host_flags.is_empty() {
        command.arg("--").args(&options.host_flags);
    }
    let output = command.output().context("running skillprof")?;
    if !output.status.success() {
        bail!(
            "skillprof run failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let folder = folders(out)?
        .into_iter()
        .find(|f| !before.contains(f))
        .context("the run left no folder")?;
    let workload_ms = workload_ms(&folder.join("commands.csv"))?;
    let meta: Value = serde_json::from_str(&fs::read_to_string(folder.join("meta.json"))?)?;
    let mut programs = BTreeMap::new();
    for program in meta["probes"]["costs"]["programs"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let name = format!(
            "{}/{}",
            program["probe"].as_str().unwrap_or("?"),
            program["program"].as_str().unwrap_or("?")
        );
        let runs = program["runs"].as_u64().unwrap_or(0);
        let run_ns = program["run_ns"].as_u64().unwrap_or(0);
        programs.insert(name, (runs, run_ns));
    }
    Ok(Measured {
        workload_ms,
        programs,
    })
}

fn folders(out: &Path) -> Result<Vec<PathBuf>> {
    Ok(fs::read_dir(out)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?)
}

/// The workload's own wall time: the sum of took_ms over its entries (host start-up and
/// the profiler's set-up excluded; they are not what the probes slow down).
fn workload_ms(commands: &Path) -> Result<f64> {
    let mut csv = csv::Reader::from_path(commands)?;
    let took = csv
        .headers()?
        .iter()
        .position(|h| h == "took_ms")
        .context("took_ms")?;
    let mut total = 0.0;
    for record in csv.records() {
        total += record?[took].parse::<f64>()?;
    }
    Ok(total)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    stats::median(&values)
}

fn report(options: &Options, on: &[Measured], off: &[Measured]) {
    let ratios: Vec<f64> = on
        .iter()
        .zip(off)
        .map(|(on, off)| on.workload_ms / off.workload_ms)
        .collect();
    println!(
        "\nprobe overhead on {} ({} pairs)",
        options.cmds.display(),
        options.pairs
    );
    println!(
        "workload wall time, probes off: median {:.0} ms",
        median(off.iter().map(|m| m.workload_ms).collect())
    );
    println!(
        "workload wall time, probes on:  median {:.0} ms",
        median(on.iter().map(|m| m.workload_ms).collect())
    );
    let ratio = median(ratios.clone());
    println!(
        "median ratio on/off: {ratio:.3} ({:+.1}%); per pair: {}",
        (ratio - 1.0) * 100.0,
        ratios
            .iter()
            .map(|r| format!("{r:.3}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "\n{:<44} {:>14} {:>10}",
        "BPF program (probe/program)", "runs per run", "ns/run"
    );
    let mut totals: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for measured in on {
        for (name, (runs, ns)) in &measured.programs {
            let total = totals.entry(name).or_default();
            total.0 += runs;
            total.1 += ns;
        }
    }
    for (name, (runs, ns)) in totals {
        let per_run = if runs > 0 {
            format!("{:.0}", ns as f64 / runs as f64)
        } else {
            "-".into()
        };
        println!("{name:<44} {:>14} {per_run:>10}", runs / on.len() as u64);
    }
}
