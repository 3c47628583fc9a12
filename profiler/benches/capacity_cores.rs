//! Whether capacity's prediction holds at each emulated core count: per count, a source run
//! (the Rust sample, then a hundred more, in a 1 GiB memory cgroup it never reaches), then
//! `skillprof capacity --cores N` from it for a 64 MiB limit, and a fill of a 64 MiB cgroup at
//! the same count: the skills predicted against the skills that fitted. A prediction that
//! ignored the cores would be about 40% off at 8 (18 malloc arenas against 2). The suite's
//! test (tests/capacity.rs) checks that the dependence is measured, interpolated between runs
//! and refused beyond them; this benchmark says how close the answer comes. Figures only.
//!
//!     cargo bench -p skillprof --bench capacity_cores [-- --cores 1,8 --rounds N --limit 64M]
//!
//! About 40 s a core count and round on a 2-core machine. Needs root (the memory cgroups) and
//! a release build of skillprof and skillhost.

use std::fs;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, ensure};
use clap::Parser;
use serde_json::Value;
use skillprof::views::output::entries_jsonl;

mod common;
use common::{flags, skillprof_binary};

/// What the prediction is held against: a 64 MiB cgroup filled with Rust skills at each count.
#[derive(Parser)]
struct Options {
    /// The emulated core counts (`skillprof run --cores N`).
    #[arg(long, value_delimiter = ',', default_value = "1,8")]
    cores: Vec<u32>,
    /// Rounds: each runs every core count once.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// The memory limit predicted for and filled.
    #[arg(long, default_value = "64M")]
    limit: String,
}

/// The host lists new skills within 50 ms instead of a second: the runs add a hundred.
const FAST_LISTING: [&str; 2] = ["--", "--scan-interval-ms=50"];

fn main() -> Result<()> {
    let options: Options = flags();
    let skillprof = skillprof_binary()?;
    let dir = tempfile::tempdir()?;
    let source = dir.path().join("source.cmds");
    fs::write(&source, "add_rs\n100 add_rs\n")?;
    let fill = dir.path().join("fill.cmds");
    fs::write(&fill, "add_rs\nfill_rs 1000\n")?;
    println!(
        "capacity at each emulated core count: Rust skills predicted for {} from a run of 101, \
         against a fill of {} at the same count",
        options.limit, options.limit
    );
    println!("round  cores  predicted [interval]  fitted  apart");
    let mut apart: Vec<(u32, f64)> = Vec::new();
    for round in 1..=options.rounds {
        for &cores in &options.cores {
            let here = dir.path().join(format!("{round}-{cores}"));
            let cores_flag = cores.to_string();
            let run_dir = here.join("source");
            run(
                &skillprof,
                &source,
                &run_dir,
                &["--no-probes", "--memory-max", "1G", "--cores", &cores_flag],
            )?;
            let predicted = predict(&skillprof, &run_dir, &options.limit, &cores_flag)?;
            let filled = here.join("fill");
            run(
                &skillprof,
                &fill,
                &filled,
                &[
                    "--no-probes",
                    "--memory-max",
                    &options.limit,
                    "--cores",
                    &cores_flag,
                ],
            )?;
            let records = entries_jsonl::read(&filled.join(entries_jsonl::FILE))?;
            let fill = records
                .get(1)
                .and_then(|record| record.measure.outcome.fill)
                .context("the fill run has no fill entry")?;
            // The first skill, then the fill's.
            let fitted = 1.0 + f64::from(fill.fitted);
            let error = (predicted.0 - fitted) / fitted;
            println!(
                "{round:>5}  {cores:>5}  {:>9.0} [{:.0}-{:.0}]  {fitted:>6.0}  {:+.1}%",
                predicted.0,
                predicted.1,
                predicted.2,
                error * 100.0
            );
            apart.push((cores, error.abs()));
            fs::remove_dir_all(&here)?;
        }
    }
    for &cores in &options.cores {
        let mut errors: Vec<f64> = apart
            .iter()
            .filter(|(c, _)| *c == cores)
            .map(|(_, e)| *e)
            .collect();
        errors.sort_by(f64::total_cmp);
        println!(
            "--cores {cores}: the prediction {:.1}% from the fill (median of {}), at most {:.1}%",
            skillprof::ground::stats::median(&errors) * 100.0,
            errors.len(),
            errors.last().copied().unwrap_or_default() * 100.0
        );
    }
    Ok(())
}

/// `skillprof run CMDS --run-dir FOLDER ARGS -- --scan-interval-ms=50`; a fill ends at its
/// limit, which the run reports as its end, so only a run without records fails here.
fn run(skillprof: &Path, cmds: &Path, folder: &Path, args: &[&str]) -> Result<()> {
    let output = common::run_kept(skillprof, cmds, folder, &[args, &FAST_LISTING[..]].concat())?;
    ensure!(
        folder.join(entries_jsonl::FILE).is_file(),
        "skillprof run {} left no records: {}",
        cmds.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

/// `skillprof capacity` from the run in `folder` at `cores`: the Rust skills that fit in
/// `limit`, with the prediction's interval.
fn predict(skillprof: &Path, folder: &Path, limit: &str, cores: &str) -> Result<(f64, f64, f64)> {
    let output = Command::new(skillprof)
        .args([
            "capacity",
            "--memory",
            limit,
            "--headroom",
            "0",
            "--kind",
            "rust",
        ])
        .args(["--json", "--cores", cores, "--out"])
        .arg(folder)
        .arg(folder)
        .output()?;
    ensure!(
        output.status.success(),
        "skillprof capacity: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let capacity: Value = serde_json::from_slice(&output.stdout)?;
    let skills = &capacity["kinds"][0]["predicted"]["skills"];
    let number = |key: &str| {
        skills[key]
            .as_f64()
            .with_context(|| format!("capacity.json has no predicted skills {key}: {skills}"))
    };
    Ok((number("value")?, number("low")?, number("high")?))
}
