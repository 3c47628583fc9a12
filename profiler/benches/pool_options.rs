//! What the pooling allocator's reset settings buy (cmds/pool.cmds on a pooled skillhost):
//! a decommit batch of 8 against wasmtime's default of 1 (one process_madvise per batch
//! instead of one madvise per freed range), and, with 1 MiB of each memory kept resident,
//! the PAGEMAP_SCAN ioctl against resetting all of it. Each round runs every condition in
//! a random order; each figure is the median over the rounds and, against its base in the
//! same round, the median ratio as a change with a bootstrap 95% interval; the default run
//! again is the control, the smallest effect the machine's noise lets the benchmark see.
//! Runs are in the default probe mode, whose pool probes count the process_madvise calls
//! and scans (the exact mode's syscall probes would cost the host more in the conditions
//! that make more calls). Figures only, no pass/fail.
//!
//!     cargo bench -p skillprof --bench pool_options [-- --rounds N]
//!
//! About 20 s per run on a 2-core machine: 5 conditions, 5 rounds by default, about 9
//! minutes. Needs root (the probes), a release build of skillprof and skillhost, and a kernel
//! of 6.13 or later for process_madvise's batch (6.7 for PAGEMAP_SCAN): where the kernel
//! refuses them wasmtime falls back, and the counts say so.

use std::path::Path;

use anyhow::{Result, ensure};
use skillprof::record::EntryRecord;
use skillprof::record::probes::Probe;
use skillprof::stats;

mod common;
use common::{change, run_records, skillprof_binary};

/// A pool configuration: its name in the table, skillhost's flags, and the condition its
/// ratios are taken against.
struct Condition {
    name: &'static str,
    host_flags: &'static [&'static str],
    base: usize,
}

const POOLING: [&str; 2] = ["--allocator", "pooling"];
const KEEP: [&str; 2] = ["--pool-keep-resident", "1048576"];

const CONDITIONS: [Condition; 5] = [
    Condition {
        name: "batch 1, nothing kept (default)",
        host_flags: &[],
        base: 0,
    },
    Condition {
        name: "default again (control)",
        host_flags: &[],
        base: 0,
    },
    Condition {
        name: "decommit batch 8",
        host_flags: &["--pool-decommit-batch-size", "8"],
        base: 0,
    },
    Condition {
        name: "1 MiB kept, reset whole",
        host_flags: &KEEP,
        base: 0,
    },
    Condition {
        name: "1 MiB kept, PAGEMAP_SCAN",
        host_flags: &[KEEP[0], KEEP[1], "--pool-pagemap-scan"],
        base: 3,
    },
];

/// The figures, in the table's order, with their units.
const FIGURES: [(&str, &str); 6] = [
    ("host CPU per request", "µs"),
    ("wall time per request", "µs"),
    ("RSS after", "MiB"),
    ("process_madvise calls per request", "calls"),
    ("bytes given back by process_madvise per request", "KiB"),
    ("PAGEMAP_SCAN ioctls per request", "calls"),
];

fn main() -> Result<()> {
    let rounds = parse_rounds()?;
    ensure!(
        rustix::process::geteuid().is_root(),
        "the pool_options benchmark loads BPF probes: run it as root"
    );
    let skillprof = skillprof_binary()?;
    let cmds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../cmds/pool.cmds");
    let out = tempfile::tempdir()?;
    let mut rng = fastrand::Rng::with_seed(0x9001_0b75);
    let mut measured: Vec<[[f64; FIGURES.len()]; CONDITIONS.len()]> = Vec::new();
    for round in 1..=rounds {
        let mut order: Vec<usize> = (0..CONDITIONS.len()).collect();
        rng.shuffle(&mut order);
        let mut figures = [[f64::NAN; FIGURES.len()]; CONDITIONS.len()];
        for index in order {
            let condition = &CONDITIONS[index];
            let flags: Vec<&str> = POOLING
                .iter()
                .chain(condition.host_flags)
                .copied()
                .collect();
            let records = run_records(&skillprof, &cmds, &[], &flags, out.path(), condition.name)?;
            figures[index] = figures_of(&records)?;
            eprintln!(
                "round {round}/{rounds}: {}: {:.0} µs CPU per request, {:.0} MiB after",
                condition.name, figures[index][0], figures[index][2]
            );
        }
        measured.push(figures);
    }
    report(&measured);
    Ok(())
}

/// The pooling allocator's options against the on-demand one.
#[derive(clap::Parser)]
struct Flags {
    /// Interleaved rounds of every condition (at least 2, for an interval).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
}

fn parse_rounds() -> Result<usize> {
    let Flags { rounds } = common::flags();
    ensure!(rounds >= 2, "--rounds must be at least 2 for an interval");
    Ok(rounds)
}

/// The requests' entries only: the compiles before them are the same in every condition.
fn figures_of(records: &[EntryRecord]) -> Result<[f64; FIGURES.len()]> {
    let executes: Vec<&EntryRecord> = records
        .iter()
        .filter(|r| r.measure.cmd.contains("execute_all"))
        .collect();
    ensure!(!executes.is_empty(), "the run has no execute_all entry");
    for record in &executes {
        ensure!(
            record.measure.outcome.errors == 0,
            "{} had failed requests: {:?}",
            record.measure.cmd,
            record.measure.outcome.first_error
        );
    }
    let requests: f64 = executes
        .iter()
        .map(|r| r.measure.outcome.requests as f64)
        .sum();
    let sum = |figure: &dyn Fn(&EntryRecord) -> f64| -> f64 {
        executes.iter().map(|r| figure(r)).sum::<f64>() / requests
    };
    let probe = |read: fn(&skillprof_common::Counters) -> u64| {
        move |r: &EntryRecord| r.probe(Probe::Decommits, read).unwrap_or(0) as f64
    };
    let scans = |r: &EntryRecord| {
        r.probe(Probe::PagemapScan, |c| c.pagemap_scan.calls)
            .unwrap_or(0) as f64
    };
    let last = executes.last().expect("checked above");
    Ok([
        sum(&|r| r.measure.host_cpu_ms().unwrap_or(f64::NAN) * 1e3),
        sum(&|r| r.measure.took_ms() * 1e3),
        last.measure.rss_after_kb() as f64 / 1024.0,
        sum(&probe(|c| c.process_madvise.calls)),
        sum(&probe(|c| c.process_madvise.bytes)) / 1024.0,
        sum(&scans),
    ])
}

fn report(measured: &[[[f64; FIGURES.len()]; CONDITIONS.len()]]) {
    println!(
        "\nthe pooling allocator's reset settings, cmds/pool.cmds on a pooled skillhost, {} \
         rounds in random order; each figure: the median, and its change against the base \
         condition of the same round [95% CI]",
        measured.len()
    );
    let width = CONDITIONS.iter().map(|c| c.name.len()).max().unwrap_or(0);
    for (figure, (name, unit)) in FIGURES.iter().enumerate() {
        println!("\n{name} ({unit})");
        for (index, condition) in CONDITIONS.iter().enumerate() {
            let mut values: Vec<f64> = measured.iter().map(|round| round[index][figure]).collect();
            values.sort_by(f64::total_cmp);
            let line = format!(
                "  {:<width$} {:>9.1}",
                condition.name,
                stats::median(&values)
            );
            let base = &CONDITIONS[condition.base];
            let ratios: Vec<f64> = measured
                .iter()
                .map(|round| round[index][figure] / round[condition.base][figure])
                .filter(|ratio| ratio.is_finite())
                .collect();
            if index == condition.base || ratios.len() < 2 {
                println!("{line}");
            } else {
                println!(
                    "{line}  {} against {}",
                    change(&ratios, (figure * 10 + index) as u64),
                    base.name
                );
            }
        }
    }
}
