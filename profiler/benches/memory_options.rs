//! What skillhost's memory options buy: cmds/bench.cmds and cmds/p_execute_all.cmds (the
//! pydantic skill) under each option, and under the default twice, the second time as the
//! control. Each round runs every condition in a random order, so that drift on a noisy
//! machine hits all alike. Per condition and figure the table gives the median over the
//! rounds and, against the default of the same round, the median ratio as a change with a
//! bootstrap 95% interval; the control's interval shows the smallest effect the machine's
//! noise lets the benchmark see. Figures only, no pass/fail.
//!
//!     cargo bench -p skillprof --bench memory_options [-- --rounds N --only NAME,... --cores N]
//!
//! `--cores N` runs every condition as on an N-core machine (`skillprof run --cores N`: N
//! compile threads and async workers, 8 × N malloc arenas), so the table says what each
//! option is worth on a server with N cores rather than on this one.
//! The figures, from each run's typed records (entries.jsonl): the RSS the first `add_py`
//! leaves and its peak, the RSS after five skills (`4 add_py`), what `p_add_py 10` leaves and
//! its peak (ten compiles asked for at once), and the compile time (those three entries'
//! took_ms, summed). A round takes about 2.5 minutes per condition on a 2-core machine (7
//! conditions, 3 rounds by default: about 55 minutes). `--malloc jemalloc` needs the system's
//! libjemalloc2 (scripts/setup.sh installs it). Needs root (the probes) and a release
//! build of skillprof and skillhost.

use std::path::Path;

use anyhow::{Context, Result, ensure};
use skillprof::ground::stats;
use skillprof::record::EntryRecord;

mod common;
use common::{change, run_records, skillprof_binary};

/// A host configuration: its name in the table and skillhost's flags.
struct Condition {
    name: &'static str,
    host_flags: &'static [&'static str],
}

const CONDITIONS: [Condition; 7] = [
    Condition {
        name: "default",
        host_flags: &[],
    },
    Condition {
        name: "default again (control)",
        host_flags: &[],
    },
    Condition {
        name: "--trim-after-compile",
        host_flags: &["--trim-after-compile"],
    },
    Condition {
        name: "--max-concurrent-compiles 1",
        host_flags: &["--max-concurrent-compiles", "1"],
    },
    Condition {
        name: "both",
        host_flags: &["--trim-after-compile", "--max-concurrent-compiles", "1"],
    },
    Condition {
        name: "--malloc jemalloc",
        host_flags: &["--malloc", "jemalloc"],
    },
    Condition {
        name: "--malloc jemalloc --max-concurrent-compiles 1",
        host_flags: &["--malloc", "jemalloc", "--max-concurrent-compiles", "1"],
    },
];

/// The figures, in the table's order, with their units.
const FIGURES: [(&str, &str); 6] = [
    ("first add_py: RSS after", "MiB"),
    ("first add_py: peak", "MiB"),
    ("five skills: RSS after", "MiB"),
    ("p_add_py 10: RSS after", "MiB"),
    ("p_add_py 10: peak", "MiB"),
    ("compile time", "ms"),
];

struct Options {
    rounds: usize,
    /// `--cores N`: the machine each run emulates (none: this one).
    cores: Option<u32>,
    /// Indices into CONDITIONS; the default always runs, as every ratio's base.
    conditions: Vec<usize>,
}

fn main() -> Result<()> {
    let options = parse_options()?;
    ensure!(
        rustix::process::geteuid().is_root(),
        "the memory_options benchmark loads BPF probes: run it as root"
    );
    let skillprof = skillprof_binary()?;
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = tempfile::tempdir()?;
    let mut rng = fastrand::Rng::with_seed(0x3e3_0b71);
    // rounds × conditions × figures
    let mut measured: Vec<Vec<[f64; FIGURES.len()]>> = Vec::new();
    for round in 1..=options.rounds {
        let mut order = options.conditions.clone();
        rng.shuffle(&mut order);
        let mut figures = vec![[f64::NAN; FIGURES.len()]; CONDITIONS.len()];
        for &index in &order {
            let condition = &CONDITIONS[index];
            let bench = run(
                &skillprof,
                &repo,
                "bench.cmds",
                condition,
                options.cores,
                out.path(),
            )?;
            let parallel = run(
                &skillprof,
                &repo,
                "p_execute_all.cmds",
                condition,
                options.cores,
                out.path(),
            )?;
            figures[index] = figures_of(&bench, &parallel)?;
            eprintln!(
                "round {round}/{}: {}: first add_py {:.0} MiB (peak {:.0}), p_add_py 10 peak \
                 {:.0} MiB, compile {:.0} ms",
                options.rounds,
                condition.name,
                figures[index][0],
                figures[index][1],
                figures[index][4],
                figures[index][5]
            );
        }
        measured.push(figures);
    }
    report(&options, &measured);
    Ok(())
}

/// The host's memory and compile time under each engine option, interleaved.
#[derive(clap::Parser)]
struct Flags {
    /// Interleaved rounds (at least 2, for an interval).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Emulate a machine of this many cores (skillprof run --cores).
    #[arg(long)]
    cores: Option<u32>,
    /// Only these conditions (comma-separated names), beside the two baselines.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
}

fn parse_options() -> Result<Options> {
    let flags: Flags = common::flags();
    let mut conditions: Vec<usize> = (0..CONDITIONS.len()).collect();
    if !flags.only.is_empty() {
        conditions = vec![0, 1];
        for name in &flags.only {
            let index = CONDITIONS
                .iter()
                .position(|c| c.name == name.as_str())
                .with_context(|| {
                    let known: Vec<&str> = CONDITIONS.iter().map(|c| c.name).collect();
                    format!("--only {name}: the conditions are {}", known.join(", "))
                })?;
            if !conditions.contains(&index) {
                conditions.push(index);
            }
        }
    }
    let options = Options {
        rounds: flags.rounds,
        cores: flags.cores,
        conditions,
    };
    ensure!(
        options.rounds >= 2,
        "--rounds must be at least 2 for an interval"
    );
    Ok(options)
}

/// One `skillprof run` of cmds/`workload` under `condition`; its records.
fn run(
    skillprof: &Path,
    repo: &Path,
    workload: &str,
    condition: &Condition,
    cores: Option<u32>,
    out: &Path,
) -> Result<Vec<EntryRecord>> {
    let cores = cores.map(|cores| cores.to_string());
    let args: Vec<&str> = match &cores {
        Some(cores) => vec!["--cores", cores],
        None => Vec::new(),
    };
    run_records(
        skillprof,
        &repo.join("cmds").join(workload),
        &args,
        condition.host_flags,
        out,
        condition.name,
    )
}

fn figures_of(bench: &[EntryRecord], parallel: &[EntryRecord]) -> Result<[f64; FIGURES.len()]> {
    let entry = |records: &[EntryRecord], cmd: &str| -> Result<EntryRecord> {
        let record = records
            .iter()
            .find(|r| r.measure.cmd == cmd)
            .with_context(|| format!("no entry {cmd}"))?;
        ensure!(
            record.measure.outcome.errors == 0,
            "{cmd} had failed requests: {:?}",
            record.measure.outcome.first_error
        );
        Ok(record.clone())
    };
    let (first, five, ten) = (
        entry(bench, "add_py")?,
        entry(bench, "4 add_py")?,
        entry(parallel, "p_add_py 10")?,
    );
    let mib = |kb: u64| kb as f64 / 1024.0;
    let peak = |record: &EntryRecord| record.sampling.rss_peak_kb.map_or(f64::NAN, mib);
    Ok([
        mib(first.measure.rss_after_kb()),
        peak(&first),
        mib(five.measure.rss_after_kb()),
        mib(ten.measure.rss_after_kb()),
        peak(&ten),
        first.measure.took_ms() + five.measure.took_ms() + ten.measure.took_ms(),
    ])
}

fn report(options: &Options, measured: &[Vec<[f64; FIGURES.len()]>]) {
    println!(
        "\nskillhost's memory options, bench.cmds and p_execute_all.cmds with the pydantic \
         skill, {} rounds in random order, {}; each figure: the median, and its change against \
         the default of the same round [95% CI]",
        measured.len(),
        match options.cores {
            Some(cores) => format!("as on a {cores}-core machine (--cores {cores})"),
            None => "with this machine's cores".to_owned(),
        }
    );
    let width = options
        .conditions
        .iter()
        .map(|&index| CONDITIONS[index].name.len())
        .max()
        .unwrap_or(0);
    for (figure, (name, unit)) in FIGURES.iter().enumerate() {
        println!("\n{name} ({unit})");
        for &index in &options.conditions {
            let values: Vec<f64> = measured.iter().map(|round| round[index][figure]).collect();
            let mut sorted = values.clone();
            sorted.sort_by(f64::total_cmp);
            let line = format!(
                "  {:<width$} {:>7.0}",
                CONDITIONS[index].name,
                stats::median(&sorted)
            );
            if index == 0 {
                println!("{line}");
                continue;
            }
            let ratios: Vec<f64> = measured
                .iter()
                .map(|round| round[index][figure] / round[0][figure])
                .collect();
            println!("{line}  {}", change(&ratios, (figure * 10 + index) as u64));
        }
    }
}
