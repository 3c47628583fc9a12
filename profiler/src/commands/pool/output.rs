//! The experiment's files, each a view of the [`PoolExperiment`]: pool.json (the record) and
//! pool.md (the table of the configurations, every figure by configuration, and the answer);
//! a summary for stderr at the end.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use anyhow::{Context as _, Result};

use super::advice;
use super::compare;
use crate::ground::units::number;
use crate::record::pool::{CPU, FIGURES, PEAK, PoolExperiment, RSS_PEAK};

pub const JSON: &str = "pool.json";

pub fn write(folder: &Path, experiment: &PoolExperiment) -> Result<()> {
    let write = |name: &str, text: String| {
        let path = folder.join(name);
        fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
    };
    write(JSON, serde_json::to_string_pretty(experiment)?)?;
    write("pool.md", markdown(experiment))
}

/// pool.json read back.
pub fn read(folder: &Path) -> Result<PoolExperiment> {
    let path = folder.join(JSON);
    let text = fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

fn cell(experiment: &PoolExperiment, config: usize, index: usize) -> String {
    match compare::summary(experiment, config, &FIGURES[index]) {
        None => "–".to_owned(),
        Some(summary) => match summary.change {
            Some(change) => format!("{} ({})", number(summary.median), change.words()),
            None => number(summary.median),
        },
    }
}

pub fn markdown(experiment: &PoolExperiment) -> String {
    let mut text = format!(
        "# Pooling allocator experiment: {}\n\n{} round(s), seed {}, on a {}-CPU machine \
         (kernel {}); every figure is the median over the rounds, and a change is the median \
         of its ratios to pooling at its defaults in the same round, with a bootstrap 95% \
         interval.{}\n\n",
        experiment.workload,
        experiment.rounds,
        experiment.seed,
        experiment.cpus,
        experiment.kernel,
        match experiment.common_flags.is_empty() {
            true => String::new(),
            false => format!(" Every host had `{}`.", experiment.common_flags.join(" ")),
        }
    );
    // Memory against CPU per request, the latency, and the peak where the workload has rates.
    let position = |name: &str| {
        FIGURES
            .iter()
            .position(|figure| figure.name == name)
            .expect("a figure of FIGURES")
    };
    let mut columns = vec![
        CPU,
        RSS_PEAK,
        position("wall per request"),
        position("p99 latency"),
    ];
    let has_peak = (0..experiment.configs.len())
        .any(|config| compare::summary(experiment, config, &FIGURES[PEAK]).is_some());
    if has_peak {
        columns.push(PEAK);
    }
    let _ = write!(text, "| configuration | runs |");
    for &column in &columns {
        let _ = write!(
            text,
            " {}, {} |",
            FIGURES[column].name, FIGURES[column].unit
        );
    }
    let _ = writeln!(
        text,
        " reserved |\n|---|---|{}---|",
        "---|".repeat(columns.len())
    );
    for (index, config) in experiment.configs.iter().enumerate() {
        let failed = config
            .runs
            .iter()
            .filter(|run| run.failed.is_some())
            .count();
        let runs = match failed {
            0 => config.runs.len().to_string(),
            n => format!("{} ({n} failed)", config.runs.len()),
        };
        let _ = write!(text, "| {} | {runs} |", config.name);
        for &column in &columns {
            let _ = write!(text, " {} |", cell(experiment, index, column));
        }
        let _ = writeln!(
            text,
            " {} |",
            config
                .reserved_bytes
                .map_or("–".to_owned(), |b| crate::ground::units::bytes(b as f64))
        );
    }
    let _ = writeln!(text, "\n## Every figure\n");
    let _ = write!(text, "| figure |");
    for config in &experiment.configs {
        let _ = write!(text, " {} |", config.name);
    }
    let _ = writeln!(text, "\n|---|{}", "---|".repeat(experiment.configs.len()));
    for figure in FIGURES {
        let _ = write!(text, "| {}, {} |", figure.name, figure.unit);
        for index in 0..experiment.configs.len() {
            let value = compare::summary(experiment, index, figure)
                .map_or("–".to_owned(), |summary| number(summary.median));
            let _ = write!(text, " {value} |");
        }
        text.push('\n');
    }
    text.push('\n');
    text += &advice::markdown(experiment);
    let failures: Vec<String> = experiment
        .configs
        .iter()
        .flat_map(|config| {
            config.runs.iter().filter_map(move |run| {
                Some(format!(
                    "- {} (round {}): {}",
                    config.name,
                    run.round,
                    run.failed.as_ref()?
                ))
            })
        })
        .collect();
    if !failures.is_empty() {
        let _ = writeln!(text, "\n## Runs that failed\n\n{}", failures.join("\n"));
    }
    // A peak below the workload's top rate is read with the reason its next step missed.
    let unsustained: Vec<String> = experiment
        .configs
        .iter()
        .flat_map(|config| {
            config.runs.iter().flat_map(move |run| {
                let rates = run.figures.iter().flat_map(|figures| &figures.rates);
                rates.filter_map(move |step| {
                    Some(format!(
                        "- {} (round {}), {}/s: {}",
                        config.name,
                        run.round,
                        number(step.asked_rps),
                        step.unsustained.as_ref()?
                    ))
                })
            })
        })
        .collect();
    if !unsustained.is_empty() {
        let _ = writeln!(
            text,
            "\n## Rates not sustained\n\n{}",
            unsustained.join("\n")
        );
    }
    let _ = writeln!(
        text,
        "\n## The figures\n\n{}",
        FIGURES
            .iter()
            .map(|figure| format!("- {}, {}: {}", figure.name, figure.unit, figure.help))
            .collect::<Vec<_>>()
            .join("\n")
    );
    text
}

/// Each configuration's CPU and memory, and the answer, for stderr.
pub fn summary(experiment: &PoolExperiment) -> String {
    let mut text = format!("pool: {}", experiment.workload);
    for (index, config) in experiment.configs.iter().enumerate() {
        let _ = write!(
            text,
            "\n  {:<28} CPU/request {} µs, RSS peak {} MiB",
            config.name,
            cell(experiment, index, CPU),
            cell(experiment, index, RSS_PEAK)
        );
        if let Some(peak) = compare::summary(experiment, index, &FIGURES[PEAK]) {
            let _ = write!(text, ", peak {} req/s", number(peak.median));
        }
    }
    if let (Some(best), _) = advice::choose(experiment) {
        let goal = clap::ValueEnum::to_possible_value(&experiment.goal)
            .expect("every goal has a name")
            .get_name()
            .to_owned();
        let (name, setting) = (
            &experiment.configs[best].name,
            experiment.configs[best].setting(),
        );
        let _ = match advice::told(experiment, best) {
            advice::Told::Apart => write!(
                text,
                "\npool: for --goal {goal}: {name} ({setting}); the reasons are in pool.md"
            ),
            advice::Told::NoInterval => write!(
                text,
                "\npool: for --goal {goal}: no answer to act on, the control has no interval \
                 with {} rounds (--rounds {} or more); the least by its median: {name} \
                 ({setting}); see pool.md",
                experiment.rounds,
                compare::MIN_ROUNDS
            ),
            advice::Told::Tied { names, noise, .. } => write!(
                text,
                "\npool: for --goal {goal}: {} configurations tie, within the control's spread \
                 ({noise:.1}%) of the best; of them {name} ({setting}); see pool.md",
                names.len()
            ),
        };
    }
    text
}
