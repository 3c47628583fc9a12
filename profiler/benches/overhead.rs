//! What a run costs the host it profiles: a short workload run again and again with the
//! probes as a lab run has them by default (no flag: the mode the kernel decides, `calls`
//! where function probes trace the memory calls, else `host-only`), the same without markers
//! (`--no-markers`), with the memory calls traced (`--probes calls`), in exact mode
//! (`--probes exact`: also a program on every fault), and off (`--no-probes`), a second
//! probes-off run as the control, and the default with every mark recorded K times
//! (skillhost's `--mark-repeat K`), which amplifies the marks' cost above the machine's noise
//! to measure a mark's cost in the busy host.
//! Each round runs its conditions in a random order, so that drift on a noisy machine hits all
//! alike. Metrics per run, from the run's own typed records (entries.jsonl): the host's CPU
//! time (utime + stime of every host thread, summed over the entries), the workload's wall
//! time (took_ms summed), and the median request latency of its busiest entry. Per round,
//! default/off, exact/off and off-again/off are ratios; the figure is the median ratio with
//! a bootstrap 95% interval, and the control's interval shows how small an effect the
//! machine's noise lets the benchmark see. Beside the direct comparison, the default's marks'
//! cost by the machine's cost model (probe_cost's figure per mark times the runs' marks).
//! Figures only, no pass/fail.
//!
//!     cargo bench -p skillprof --bench overhead [-- --rounds N --cmds FILE --amplify K
//!         --default-only | --exact-only | --time-only [-- HOST_FLAGS]]
//!
//! `--default-only` leaves out calls, exact and --no-markers (rounds take half as long). Both
//! end with the default's cost in parts: its programs by the kernel's count in one more
//! run with `--self-cost` (and the count's own floor within it), its marks at the busy
//! host's price, what is left of the measured median, and skillprof's sampler beside.
//! `--exact-only` runs host-only, exact, off and off again, and compares exact mode with the
//! host-only mode directly (host CPU, and the busiest entry's p50: a pooled burst's with
//! `--cmds cmds/pooled.cmds -- --allocator pooling`).
//!
//! `--time-only` measures the time profile (docs/time.md#what-it-costs): the host-only mode
//! with it at its defaults (a started host: the profile clock at 97 Hz and the switch
//! programs naming the waits worth it, `--off-cpu waits`), with `--off-cpu stacks`, with
//! `--off-cpu states`, with `--off-cpu off` (the profile clock
//! only), all against `--no-profile` and a second `--no-profile` as the control; then one
//! run of each with `--self-cost`, the kernel's own count of the programs' run time against
//! the host's CPU, and how many of the switch programs' runs were the host's.
//!
//! FILE is relative to the repository root (default cmds/overhead.cmds, about 10 s; 30
//! rounds, about 20 minutes). Needs root (the probes) and a release build of skillprof and
//! skillhost.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, ensure};
use skillprof::ground::machine::Machine;
use skillprof::ground::stats;
use skillprof::producers::probes::cost_model::{self, CostModel};
use skillprof::record::probes::{Counted, Mechanism, Per, Probe};

mod common;
use common::{change, run_records, skillprof_binary};

/// What profiling costs the host: each mode against no profiler, interleaved.
#[derive(clap::Parser)]
struct Flags {
    /// Interleaved rounds (at least 2, for an interval).
    #[arg(long, default_value_t = 30)]
    rounds: usize,
    /// The workload, from the repository's root.
    #[arg(long, default_value = "cmds/overhead.cmds")]
    cmds: PathBuf,
    /// The amplified condition's skillhost --mark-repeat (2 to 1000).
    #[arg(long, default_value_t = 33)]
    amplify: u32,
    /// Only the lab default's conditions.
    #[arg(long)]
    default_only: bool,
    /// Only the exact mode's conditions.
    #[arg(long)]
    exact_only: bool,
    /// Only the time profile's conditions.
    #[arg(long)]
    time_only: bool,
    /// The host's own flags, after `--`.
    #[arg(last = true)]
    host_flags: Vec<String>,
}

struct Options {
    rounds: usize,
    cmds: PathBuf,
    host_flags: Vec<String>,
    /// The amplified condition's `--mark-repeat`.
    amplify: u32,
    default_only: bool,
    exact_only: bool,
    time_only: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Condition {
    /// A lab run's default: no flag, the probe mode the kernel decides, and the time profile
    /// at a started host's defaults.
    Default,
    /// The memory calls traced whatever the kernel (`--probes calls`).
    Calls,
    /// The host-only mode (`--attach`'s default): the base of `--time-only`'s conditions
    /// and of `--exact-only`'s comparison.
    HostOnly,
    Exact,
    Off,
    OffAgain,
    /// The lab default with `--no-markers`: what the markers cost, in the host, by difference.
    NoMarkers,
    /// The lab default with every mark recorded `--amplify` times.
    Amplified,
    /// The host-only mode with the switch programs taking no stacks (`--off-cpu states`).
    OffCpuStates,
    /// The host-only mode with every wait's stacks walked (`--off-cpu stacks`, the default of
    /// a started host until 2026-12-05).
    OffCpuStacks,
    /// The host-only mode with the profile clock only (`--off-cpu off`).
    SamplingOnly,
    /// The host-only mode without the time profile (`--no-profile`), and again as the control.
    NoProfile,
    NoProfileAgain,
}

const CONDITIONS: usize = 13;

/// One run's figures.
#[derive(Clone, Copy, Default)]
struct Measured {
    host_cpu_ms: f64,
    /// The host's CPU in the entries that serve requests only (`execute` in their command):
    /// the compiles' CPU varies by more between runs than the probes can add.
    serving_cpu_ms: f64,
    wall_ms: f64,
    /// Marks the host's ledger counted (0 with probes off).
    marks: u64,
    /// The median latency of the requests of the entry with the most of them.
    p50_ms: f64,
}

fn main() -> Result<()> {
    let options = parse_options()?;
    ensure!(
        rustix::process::geteuid().is_root(),
        "the overhead benchmark loads BPF probes: run it as root"
    );
    let skillprof = skillprof_binary()?;
    let out = tempfile::tempdir()?;
    let mut rng = fastrand::Rng::with_seed(0x0ae7_4ead);
    let mut rounds: Vec<[Measured; CONDITIONS]> = Vec::new();
    for round in 1..=options.rounds {
        let mut order = vec![Condition::Default, Condition::Off, Condition::OffAgain];
        if options.time_only {
            order = vec![
                Condition::HostOnly,
                Condition::OffCpuStacks,
                Condition::OffCpuStates,
                Condition::SamplingOnly,
                Condition::NoProfile,
                Condition::NoProfileAgain,
            ];
        } else if options.exact_only {
            order = vec![Condition::HostOnly, Condition::Off, Condition::OffAgain];
        } else {
            order.push(Condition::Amplified);
        }
        if !options.default_only && !options.time_only {
            order.push(Condition::Exact);
        }
        if !options.default_only && !options.exact_only && !options.time_only {
            order.extend([Condition::Calls, Condition::NoMarkers]);
        }
        rng.shuffle(&mut order);
        let mut measured = [Measured::default(); CONDITIONS];
        for condition in order {
            let figures = run(&skillprof, &options, condition, out.path())?;
            eprintln!(
                "round {round}/{}: {condition:?}: host CPU {:.0} ms, wall {:.0} ms, p50 {:.1} ms",
                options.rounds, figures.host_cpu_ms, figures.wall_ms, figures.p50_ms
            );
            measured[condition as usize] = figures;
        }
        rounds.push(measured);
    }
    match (options.time_only, options.exact_only) {
        (true, _) => report_time(&skillprof, &options, &rounds, out.path())?,
        (false, true) => report_exact(&options, &rounds),
        (false, false) => {
            let marks = report(&options, &rounds);
            split(&skillprof, &options, &rounds, marks, out.path())?;
        }
    }
    Ok(())
}

fn parse_options() -> Result<Options> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()?;
    let flags: Flags = common::flags();
    let options = Options {
        rounds: flags.rounds,
        // cargo runs benches in profiler/: relative paths are taken from the repo root.
        cmds: repo.join(flags.cmds),
        host_flags: flags.host_flags,
        amplify: flags.amplify,
        default_only: flags.default_only,
        exact_only: flags.exact_only,
        time_only: flags.time_only,
    };
    ensure!(
        options.rounds >= 2,
        "--rounds must be at least 2 for an interval"
    );
    ensure!(
        [options.default_only, options.exact_only, options.time_only]
            .iter()
            .filter(|&&only| only)
            .count()
            <= 1,
        "--default-only, --exact-only and --time-only leave out each other's conditions: \
         choose one"
    );
    ensure!(
        (2..=1000).contains(&options.amplify),
        "--amplify K: 2 to 1000 (skillhost's --mark-repeat)"
    );
    Ok(options)
}

fn run(skillprof: &Path, options: &Options, condition: Condition, out: &Path) -> Result<Measured> {
    let args = condition_args(condition);
    let repeat = options.amplify.to_string();
    let mut host_flags: Vec<&str> = options.host_flags.iter().map(String::as_str).collect();
    if condition == Condition::Amplified {
        host_flags.extend(["--mark-repeat", &repeat]);
    }
    let records = run_records(
        skillprof,
        &options.cmds,
        args,
        &host_flags,
        out,
        &format!("{condition:?}"),
    )?;
    Ok(measured(&records))
}

fn condition_args(condition: Condition) -> &'static [&'static str] {
    match condition {
        Condition::Default | Condition::Amplified => &[],
        Condition::Calls => &["--probes", "calls"],
        Condition::HostOnly => &["--probes", "host-only"],
        Condition::Exact => &["--probes", "exact"],
        Condition::Off | Condition::OffAgain => &["--no-probes"],
        Condition::NoMarkers => &["--no-markers"],
        Condition::OffCpuStates => &["--probes", "host-only", "--off-cpu", "states"],
        Condition::OffCpuStacks => &["--probes", "host-only", "--off-cpu", "stacks"],
        Condition::SamplingOnly => &["--probes", "host-only", "--off-cpu", "off"],
        Condition::NoProfile | Condition::NoProfileAgain => {
            &["--probes", "host-only", "--no-profile"]
        }
    }
}

/// One run's figures from its records.
fn measured(records: &[skillprof::record::EntryRecord]) -> Measured {
    let busiest = records
        .iter()
        .filter_map(|record| {
            Some((
                record.measure.outcome.latencies.len(),
                record.measure.latency()?,
            ))
        })
        .max_by_key(|(requests, _)| *requests)
        .map_or(f64::NAN, |(_, latency)| latency.p50_ms);
    // Host start-up and the profiler's set-up are not what the probes slow down, and after
    // `stop` the host's CPU time is no longer readable: the workload's entries only.
    records
        .iter()
        .filter(|record| record.measure.cmd != "stop")
        .fold(
            Measured {
                p50_ms: busiest,
                ..Measured::default()
            },
            |sum, record| Measured {
                host_cpu_ms: sum.host_cpu_ms + record.measure.host_cpu_ms().unwrap_or(0.0),
                serving_cpu_ms: sum.serving_cpu_ms
                    + match record.measure.cmd.contains("execute") {
                        true => record.measure.host_cpu_ms().unwrap_or(0.0),
                        false => 0.0,
                    },
                wall_ms: sum.wall_ms + record.measure.took_ms(),
                marks: sum.marks + record.probe(Probe::Markers, |c| c.marks.hits).unwrap_or(0),
                p50_ms: sum.p50_ms,
            },
        )
}

/// `--time-only`: each profile mode against none, round by round, beside the control; then
/// the kernel's own count of the programs' run time in one `--self-cost` run of each.
fn report_time(
    skillprof: &Path,
    options: &Options,
    rounds: &[[Measured; CONDITIONS]],
    out: &Path,
) -> Result<()> {
    let ratios = |over: Condition, metric: fn(&Measured) -> f64| -> Vec<f64> {
        rounds
            .iter()
            .map(|round| {
                metric(&round[over as usize]) / metric(&round[Condition::NoProfile as usize])
            })
            .collect()
    };
    println!(
        "\ntime profile overhead on {}, {} rounds of its defaults / --off-cpu states / \
         --off-cpu off / --no-profile / --no-profile again in random order, all --probes \
         host-only",
        options.cmds.display(),
        rounds.len()
    );
    println!(
        "--no-profile: median host CPU {:.0} ms, wall {:.0} ms",
        median_of(rounds, Condition::NoProfile, |m| m.host_cpu_ms),
        median_of(rounds, Condition::NoProfile, |m| m.wall_ms)
    );
    let lines = [
        ("defaults (--off-cpu waits) / none", Condition::HostOnly),
        ("--off-cpu stacks / none", Condition::OffCpuStacks),
        ("--off-cpu states / none", Condition::OffCpuStates),
        (
            "--off-cpu off (sampling only) / none",
            Condition::SamplingOnly,
        ),
        ("control, none again / none", Condition::NoProfileAgain),
    ];
    for (seed, (label, condition)) in lines.iter().enumerate() {
        let seed = 2 * seed as u64;
        println!(
            "{label}: {} (host CPU), {} (wall), {} (busiest entry's p50)",
            change(&ratios(*condition, |m| m.host_cpu_ms), seed + 1),
            change(&ratios(*condition, |m| m.wall_ms), seed + 2),
            change(&ratios(*condition, |m| m.p50_ms), seed + 31),
        );
    }
    println!("\nthe kernel's count of the programs' run time (one --self-cost run each):");
    for (label, condition) in &lines[..4] {
        let mut args = condition_args(*condition).to_vec();
        args.push("--self-cost");
        let host_flags: Vec<&str> = options.host_flags.iter().map(String::as_str).collect();
        let (records, meta) =
            common::run_folder(skillprof, &options.cmds, &args, &host_flags, out, label)?;
        let host_ms = measured(&records).host_cpu_ms;
        let switches: u64 = records
            .iter()
            .filter_map(|r| r.time.as_ref()?.off_cpu.as_ref().map(|o| o.switches))
            .sum();
        let costs = meta.probes.and_then(|p| p.costs);
        for probe in [Probe::CpuProfile, Probe::OffCpu] {
            let programs: Vec<_> = costs
                .iter()
                .flat_map(|c| &c.programs)
                .filter(|p| p.probe == probe)
                .collect();
            if programs.is_empty() {
                continue;
            }
            let run_ns: u64 = programs.iter().map(|p| p.run_ns).sum();
            let each = programs
                .iter()
                .map(|p| {
                    format!(
                        "{} {} runs at {:.0} ns",
                        p.program,
                        p.runs,
                        p.ns_per_run.unwrap_or(0.0)
                    )
                })
                .collect::<Vec<_>>()
                .join(", ");
            println!(
                "{label}: {}: {:.1} ms = {:.2}% of the host's {host_ms:.0} ms of CPU ({each}{})",
                probe.name(),
                run_ns as f64 / 1e6,
                100.0 * run_ns as f64 / (host_ms * 1e6),
                match probe {
                    Probe::OffCpu =>
                        format!("; {switches} of the switches were the host's threads'"),
                    _ => String::new(),
                }
            );
        }
    }
    Ok(())
}

/// `--exact-only`: exact mode against the host-only mode, round by round, beside the
/// control.
fn report_exact(options: &Options, rounds: &[[Measured; CONDITIONS]]) {
    let ratios = |over: Condition, base: Condition, metric: fn(&Measured) -> f64| -> Vec<f64> {
        rounds
            .iter()
            .map(|round| metric(&round[over as usize]) / metric(&round[base as usize]))
            .collect()
    };
    println!(
        "\nexact mode against the host-only mode on {}{}, {} rounds of host-only / exact / off \
         / off again in random order",
        options.cmds.display(),
        match options.host_flags.is_empty() {
            true => String::new(),
            false => format!(" (host: {})", options.host_flags.join(" ")),
        },
        rounds.len()
    );
    type Metric = (&'static str, fn(&Measured) -> f64);
    let metrics: [Metric; 4] = [
        ("host CPU", |m| m.host_cpu_ms),
        ("host CPU while serving", |m| m.serving_cpu_ms),
        ("wall", |m| m.wall_ms),
        ("busiest entry's p50", |m| m.p50_ms),
    ];
    for (name, metric) in metrics {
        println!(
            "{name}: host-only {:.1}, exact {:.1} (medians, ms); exact / host-only {}; \
             exact / off {}; control, off again / off {}",
            median_of(rounds, Condition::HostOnly, metric),
            median_of(rounds, Condition::Exact, metric),
            change(&ratios(Condition::Exact, Condition::HostOnly, metric), 3),
            change(&ratios(Condition::Exact, Condition::Off, metric), 5),
            change(&ratios(Condition::OffAgain, Condition::Off, metric), 7),
        );
    }
}

/// The lab default against off, the control, and a mark's price in the busy host. Returns
/// the lab default's marks at that price, in % of the host's CPU: median, low, high.
fn report(options: &Options, rounds: &[[Measured; CONDITIONS]]) -> [f64; 3] {
    let ratios = |condition: Condition, metric: fn(&Measured) -> f64| -> Vec<f64> {
        rounds
            .iter()
            .map(|round| {
                metric(&round[condition as usize]) / metric(&round[Condition::Off as usize])
            })
            .collect()
    };
    let cpu = |m: &Measured| m.host_cpu_ms;
    let serving = |m: &Measured| m.serving_cpu_ms;
    let wall = |m: &Measured| m.wall_ms;
    let exact = !options.default_only;
    println!(
        "\nprobe overhead on {}, {} rounds of default / off / off again / default with marks \
         recorded ×{}{} in random order",
        options.cmds.display(),
        rounds.len(),
        options.amplify,
        if exact {
            " / calls / exact / --no-markers"
        } else {
            ""
        }
    );
    println!(
        "probes off: median host CPU {:.0} ms, wall {:.0} ms",
        median_of(rounds, Condition::Off, cpu),
        median_of(rounds, Condition::Off, wall)
    );
    let mut lines = vec![
        ("lab default / off", Condition::Default),
        ("control, off again / off", Condition::OffAgain),
        ("marks recorded ×K / off", Condition::Amplified),
    ];
    if exact {
        lines.extend([
            ("calls mode / off", Condition::Calls),
            ("exact mode / off", Condition::Exact),
            (
                "lab default without markers (--no-markers) / off",
                Condition::NoMarkers,
            ),
        ]);
    }
    for (seed, (label, condition)) in lines.iter().enumerate() {
        let seed = 2 * seed as u64;
        println!(
            "{label}: {} (host CPU), {} (wall); while serving (the execute entries, compiles \
             left out) {}",
            change(&ratios(*condition, cpu), seed + 1),
            change(&ratios(*condition, wall), seed + 2),
            change(&ratios(*condition, serving), seed + 21),
        );
    }
    // A mark in the busy host: the amplified runs' CPU above the lab default's, per extra
    // recording of a mark, round by round.
    let per_mark: Vec<f64> = rounds
        .iter()
        .map(|round| {
            let amplified = round[Condition::Amplified as usize];
            let default = round[Condition::Default as usize];
            (amplified.host_cpu_ms - default.host_cpu_ms) * 1e6
                / (default.marks.max(1) * u64::from(options.amplify - 1)) as f64
        })
        .collect();
    let mut sorted = per_mark.clone();
    sorted.sort_by(f64::total_cmp);
    let (lo, hi) = stats::median_ci(&per_mark, 10_000, 9);
    let mark_ns = stats::median(&sorted);
    println!(
        "a mark in the busy host: {mark_ns:+.0} ns [{lo:+.0}, {hi:+.0}] of host CPU (marks \
         recorded ×{} minus once, per extra recording, median of rounds)",
        options.amplify
    );
    // What the lab default's marks cost the host at that price.
    let marks = median_of(rounds, Condition::Default, |m| m.marks as f64);
    let off_ms = median_of(rounds, Condition::Off, cpu);
    let percent = |ns: f64| 100.0 * marks * ns / (off_ms * 1e6);
    println!(
        "lab default's marks at that price: {:.0} marks × {mark_ns:.0} ns = {:+.2}% [{:+.2}%, \
         {:+.2}%] of the host's CPU with probes off",
        marks,
        percent(mark_ns),
        percent(lo),
        percent(hi)
    );
    modelled(rounds);
    [percent(mark_ns), percent(lo), percent(hi)]
}

/// The lab default's cost in parts, beside the measured total (default / off, above):
/// - its BPF programs, by the kernel's count in one more run of the lab default with
///   `--self-cost`, against that run's host CPU: an upper bound of what they add to the host,
///   since the count includes the runs on other processes' events, and the part of it that
///   is the count's own floor (an empty program's time a run, times the runs);
/// - its marks, at the busy host's price (above);
/// - skillprof's own threads (the sampler: /proc, smaps, PSI, the ledger's rows), which run
///   on the machine's CPUs beside the host, not in its CPU time: said, not summed.
///
/// What is left, the total less the parts, is what no part accounts for.
fn split(
    skillprof: &Path,
    options: &Options,
    rounds: &[[Measured; CONDITIONS]],
    marks_pct: [f64; 3],
    out: &Path,
) -> Result<()> {
    let ratios: Vec<f64> = rounds
        .iter()
        .map(|round| {
            round[Condition::Default as usize].host_cpu_ms
                / round[Condition::Off as usize].host_cpu_ms
        })
        .collect();
    let mut sorted = ratios.clone();
    sorted.sort_by(f64::total_cmp);
    let total = (stats::median(&sorted) - 1.0) * 100.0;
    let (lo, hi) = stats::median_ci(&ratios, 5_000, 1);
    let (lo, hi) = ((lo - 1.0) * 100.0, (hi - 1.0) * 100.0);
    let mut args = condition_args(Condition::Default).to_vec();
    args.push("--self-cost");
    let host_flags: Vec<&str> = options.host_flags.iter().map(String::as_str).collect();
    let (records, meta) =
        common::run_folder(skillprof, &options.cmds, &args, &host_flags, out, "split")?;
    let host_ms = measured(&records).host_cpu_ms;
    let share = |ns: f64| 100.0 * ns / (host_ms * 1e6);
    let costs = meta
        .probes
        .as_ref()
        .and_then(|p| p.costs.clone())
        .context("the --self-cost run recorded no costs")?;
    let programs = share(costs.total_run_ns as f64);
    let each: Vec<String> = costs
        .programs
        .iter()
        .filter(|p| p.run_ns > 0)
        .map(|p| format!("{} {:.2}%", p.program, share(p.run_ns as f64)))
        .collect();
    let floor = costs
        .floor
        .and_then(|f| f.ns_per_run())
        .map(|ns| (ns, share(ns * costs.total_runs as f64)));
    let probes = meta.probes.as_ref();
    println!(
        "\nthe lab default's cost in parts (shares of the host's CPU); its mode on this kernel: \
         {} ({})",
        probes
            .and_then(|p| p.mode)
            .map_or("none recorded", |mode| mode.as_str()),
        probes
            .and_then(|p| p.mode_why.as_deref())
            .unwrap_or("no reason recorded")
    );
    println!("measured: {total:+.1}% [{lo:+.1}, {hi:+.1}] (default / off, above)");
    println!(
        "BPF programs, by the kernel's count in one --self-cost run: {programs:.2}% ({}){}",
        each.join(", "),
        floor.map_or(String::new(), |(ns, pct)| format!(
            "; {pct:.2}% of it at the count's floor (an empty program reads {ns:.0} ns a run \
             on the wakeups)"
        ))
    );
    println!(
        "the marks: {:+.2}% [{:+.2}, {:+.2}]",
        marks_pct[0], marks_pct[1], marks_pct[2]
    );
    let parts = programs + marks_pct[0];
    println!(
        "the parts: {parts:.2}% ({:.2}% without the count's floor), {} the measured \
         interval; left: {:+.2} points",
        parts - floor.map_or(0.0, |f| f.1),
        match (lo..=hi).contains(&parts) {
            true => "inside",
            false => "OUTSIDE",
        },
        total - parts
    );
    println!(
        "skillprof's sampler thread (/proc, smaps, PSI, the ledger's rows): {:.0} ms, {:.2}% of \
         the host's CPU, on the machine's CPUs beside the host",
        meta.sampler_cpu_ms.unwrap_or(0.0),
        100.0 * meta.sampler_cpu_ms.unwrap_or(0.0) / host_ms
    );
    Ok(())
}

/// The median over the rounds of one condition's `metric`.
fn median_of(
    rounds: &[[Measured; CONDITIONS]],
    condition: Condition,
    metric: fn(&Measured) -> f64,
) -> f64 {
    let mut values: Vec<f64> = rounds
        .iter()
        .map(|round| metric(&round[condition as usize]))
        .collect();
    values.sort_by(f64::total_cmp);
    stats::median(&values)
}

/// What the lab default's marks add by the machine's cost model: each mark's reading into the
/// ledger, the runs' marks times probe_cost's figure per mark, against the host CPU of the
/// same runs (its programs are the kernel's count, in the split). An interval far narrower
/// than the direct comparison's, which this machine's run-to-run noise widens.
fn modelled(rounds: &[[Measured; CONDITIONS]]) {
    let machine = match Machine::read() {
        Ok(machine) => machine,
        Err(e) => return println!("lab default, modelled: NOT COMPUTED ({e:#})"),
    };
    let model = match CostModel::load(Path::new(cost_model::DEFAULT_PATH), &machine) {
        Ok(model) => model,
        Err(why) => return println!("lab default, modelled: NOT COMPUTED ({why})"),
    };
    let marks = median_of(rounds, Condition::Default, |m| m.marks as f64);
    let cpu_ms = median_of(rounds, Condition::Default, |m| m.host_cpu_ms);
    let counted = [Counted {
        probe: Probe::Markers,
        mechanism: Mechanism::Ledger,
        per: Per::Mark,
        events: marks as u64,
    }];
    match model.apply(&counted) {
        Ok(modelled) => {
            let percent = |ns: f64| format!("{:+.2}%", 100.0 * ns / (cpu_ms * 1e6));
            println!(
                "lab default's marks, modelled: {modelled}; {} [{}, {}] of the host's median CPU",
                percent(modelled.total_ns.median),
                percent(modelled.total_ns.lo),
                percent(modelled.total_ns.hi)
            );
        }
        Err(why) => println!("lab default, modelled: NOT COMPUTED ({why})"),
    }
}
