//! The experiment's files, each a view of the [`SloReport`]: steps.csv (a row per step),
//! slo.json (the report), explain.md (the peaks, the knees in words, the table, the fewest
//! that meets the target at each load), report.html (the table as a heat map) and
//! openmetrics.txt (every step's figures as gauges). Rewritten after every step, so an
//! interrupted experiment keeps what it measured.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use anyhow::{Context as _, Result};
use maud::{DOCTYPE, Markup, html};

use super::{evidence, table};
use crate::ground::units::{count, ms};
use crate::record::slo::{SloReport, SloStep, Stage, Verdict};
use crate::record::traffic::Arrivals;
use crate::views::output::commands_csv::CommandsCsv;
use crate::views::output::openmetrics::{Families, Kind, escape};

pub const JSON: &str = "slo.json";

pub fn write(folder: &Path, report: &SloReport) -> Result<()> {
    let path = folder.join("steps.csv");
    let mut csv = CommandsCsv::create(&path)?;
    for step in &report.steps {
        csv.write(&step.row(report))?;
    }
    let write = |name: &str, text: String| {
        let path = folder.join(name);
        fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
    };
    write(JSON, serde_json::to_string_pretty(report)?)?;
    write(crate::views::explain::FILE, explain(report))?;
    write("report.html", html_page(report).into_string())?;
    write("openmetrics.txt", openmetrics(report))
}

/// slo.json read back.
pub fn read(folder: &Path) -> Result<SloReport> {
    let path = folder.join(JSON);
    let text = fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// The peaks, one line each, for stderr at the end.
pub fn summary(report: &SloReport) -> String {
    let mut text = format!(
        "slo: {} on {}, target {}",
        report.skill, report.host_profile, report.target
    );
    for (index, peak) in report.configs.iter().enumerate() {
        let _ = write!(
            text,
            "\n  {}: {}",
            peak.config.label(),
            peak_words(report, index)
        );
    }
    text
}

/// A load point's column heading: its rate, and for a rate asked for again, which time.
fn point_label(report: &SloReport, point: usize) -> String {
    let rps = count(f64::from(report.load_points[point]));
    match report.asked_before(point) {
        0 => format!("{rps}/s"),
        n => format!("{rps}/s ({})", n + 1),
    }
}

fn peak_words(report: &SloReport, config: usize) -> String {
    let peak = &report.configs[config];
    let words = bracket_words(report, peak);
    let mixed: Vec<String> = table::mixed(report, config)
        .into_iter()
        .map(|(rps, met, steps)| {
            format!(
                "{}/s met it in {met} of its {steps} steps and missed it in {}",
                count(f64::from(rps)),
                steps - met
            )
        })
        .collect();
    match mixed.is_empty() {
        true => words,
        false => format!(
            "{words}; {}: the host does not hold the rate, and the steps that missed say why",
            mixed.join(", ")
        ),
    }
}

fn bracket_words(report: &SloReport, peak: &crate::record::slo::ConfigPeak) -> String {
    match (peak.peak_rps, peak.missed_rps) {
        (Some(met), Some(missed)) => format!(
            "{}/s meets {}, {}/s does not",
            count(f64::from(met)),
            report.target,
            count(f64::from(missed))
        ),
        (Some(met), None) => format!(
            "{}/s meets {} (the highest rate tried)",
            count(f64::from(met)),
            report.target
        ),
        (None, Some(missed)) => format!(
            "no rate met {} ({}/s the lowest tried)",
            report.target,
            count(f64::from(missed))
        ),
        (None, None) => "not measured".to_owned(),
    }
}

/// The step that shows where a configuration's knee is: the lowest rate it missed.
fn knee(report: &SloReport, config: usize) -> Option<&SloStep> {
    let missed = report.configs[config].missed_rps?;
    report
        .steps
        .iter()
        .find(|s| s.config == config && s.rps == missed && !s.verdict.met())
}

fn cell_text(report: &SloReport, step: &SloStep) -> String {
    match step.verdict {
        Verdict::Fail | Verdict::Generator => step.verdict.name().to_owned(),
        _ => format!("{:.1}", report.target.latency_ms(&step.traffic)),
    }
}

fn explain(report: &SloReport) -> String {
    let mut text = String::new();
    let _ = writeln!(
        text,
        "# skillprof slo: {} on {}, target {}\n",
        report.skill, report.host_profile, report.target
    );
    let arrivals = match report.arrivals {
        Arrivals::Constant => "evenly spaced",
        Arrivals::Poisson => "Poisson arrivals",
    };
    let _ = writeln!(
        text,
        "- {} configuration(s); steps of {} s ({} s of warm-up left out), open loop, {arrivals}: \
         each request's latency counts from its scheduled send, so a stall is charged to \
         every request it delayed.",
        report.configs.len(),
        report.step_s,
        f64::from(report.step_s) / 5.0
    );
    let _ = writeln!(
        text,
        "- A step meets the target when at least 90% of its rate was answered, nothing \
         failed, its latency was not still growing at the end, and its {} was within {} ms.",
        report.target.quantile, report.target.ms
    );
    let _ = writeln!(
        text,
        "- This machine: {} CPUs. The host ran on the last ones (as many as its configuration \
         has) and the load generator on the others{}.",
        report.machine_cpus,
        match report
            .configs
            .iter()
            .any(|c| c.config.cpus.len() == report.machine_cpus)
        {
            true =>
                "; beside a host with every CPU the generator shared them, so that host's \
                     figures include the generator's work and their waits for a CPU: read them \
                     as a lower bound",
            false => "",
        }
    );
    if !report.complete {
        let _ = writeln!(
            text,
            "- INCOMPLETE: the host died in a step; the steps before it are kept."
        );
    }

    let _ = writeln!(text, "\n## Peaks\n");
    for (index, peak) in report.configs.iter().enumerate() {
        let mut line = format!("- {}: {}", peak.config.label(), peak_words(report, index));
        if let Some(step) = knee(report, index).filter(|s| s.verdict == Verdict::Generator) {
            let _ = write!(
                line,
                "; the generator could not send {}/s ({}): the host's peak is at least the rate \
                 met, and what lies above it is not known",
                count(f64::from(step.rps)),
                step.traffic.generator_limited().unwrap_or_default()
            );
        } else if let Some(step) = knee(report, index) {
            let _ = write!(
                line,
                "; at {}/s {} was {} ({}): {}",
                count(f64::from(step.rps)),
                report.target.quantile,
                ms(report.target.latency_ms(&step.traffic)),
                step.verdict.name(),
                evidence::bound(&step.traffic, &step.evidence, &peak.config)
            );
        }
        let _ = writeln!(text, "{line}.");
    }

    if !report.load_points.is_empty() {
        let _ = writeln!(
            text,
            "\n## Table: {} in ms at each rate (met, 101-150%, >150% of the target, or FAIL)\n",
            report.target.quantile
        );
        let _ = write!(text, "| configuration |");
        for point in 0..report.load_points.len() {
            let _ = write!(text, " {} |", point_label(report, point));
        }
        let _ = write!(text, "\n|---|");
        for _ in &report.load_points {
            let _ = write!(text, "---:|");
        }
        text.push('\n');
        for (index, peak) in report.configs.iter().enumerate() {
            let _ = write!(text, "| {} |", peak.config.label());
            for point in 0..report.load_points.len() {
                let cell = report.cell(index, point).map_or("-".to_owned(), |step| {
                    let mark = match step.verdict {
                        Verdict::Met => "",
                        Verdict::Near => " (101-150%)",
                        Verdict::Over => " (>150%)",
                        _ => "",
                    };
                    format!("{}{mark}", cell_text(report, step))
                });
                let _ = write!(text, " {cell} |");
            }
            text.push('\n');
        }
        let _ = writeln!(text, "\n## The fewest that meets the target\n");
        for point in 0..report.load_points.len() {
            let who = table::fewest_meeting(report, point).map_or_else(
                || "none of the configurations".to_owned(),
                |c| report.configs[c].config.label(),
            );
            let _ = writeln!(text, "- at {}: {who}", point_label(report, point));
        }
    }

    let missed: Vec<&SloStep> = report.steps.iter().filter(|s| !s.verdict.met()).collect();
    if !missed.is_empty() {
        let _ = writeln!(text, "\n## Steps that missed the target\n");
        for step in missed {
            let config = &report.configs[step.config].config;
            let _ = writeln!(
                text,
                "- {}, {} {}/s: {} {}, max {}, {}/s answered, {}: {}.",
                config.label(),
                match step.stage {
                    Stage::Search => "search",
                    Stage::Table => "table",
                },
                count(f64::from(step.rps)),
                report.target.quantile,
                ms(report.target.latency_ms(&step.traffic)),
                ms(step.traffic.latency.max_ms),
                count(step.traffic.achieved_rps()),
                step.verdict.name(),
                evidence::bound(&step.traffic, &step.evidence, config)
            );
        }
    }
    text
}

fn html_page(report: &SloReport) -> Markup {
    let class = |verdict: Verdict| match verdict {
        Verdict::Met => "met",
        Verdict::Near => "near",
        Verdict::Over => "over",
        Verdict::Fail | Verdict::Generator => "fail",
    };
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { "skillprof slo: " (report.skill) }
                style { (maud::PreEscaped(CSS)) }
            }
            body {
                h1 { "skillprof slo: " (report.skill) " on " (report.host_profile) ", target " (report.target.to_string()) }
                h2 { "Peaks" }
                ul {
                    @for (index, peak) in report.configs.iter().enumerate() {
                        li { (peak.config.label()) ": " (peak_words(report, index)) }
                    }
                }
                @if !report.load_points.is_empty() {
                    h2 { (report.target.quantile) " at each rate, ms" }
                    table {
                        tr {
                            th { "configuration" }
                            @for point in 0..report.load_points.len() { th { (point_label(report, point)) } }
                        }
                        @for (index, peak) in report.configs.iter().enumerate() {
                            tr {
                                th { (peak.config.label()) }
                                @for point in 0..report.load_points.len() {
                                    @match report.cell(index, point) {
                                        Some(step) => td class=(class(step.verdict)) title=(evidence::bound(&step.traffic, &step.evidence, &peak.config)) { (cell_text(report, step)) },
                                        None => td { "-" },
                                    }
                                }
                            }
                        }
                    }
                    p class="legend" {
                        span class="met" { "met" } " " span class="near" { "101-150%" } " "
                        span class="over" { ">150%" } " " span class="fail" { "FAIL: not sustained" }
                        " (hover a cell for what bounded it)"
                    }
                }
            }
        }
    }
}

const CSS: &str = "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}\
td,th{border:1px solid #ccc;padding:.3em .6em;text-align:right}\
.met{background:#b7e4b0}.near{background:#ffe08a}.over{background:#f6a76b}\
.fail{background:#e06666;color:#fff}.legend span{padding:0 .4em}";

fn openmetrics(report: &SloReport) -> String {
    let mut families = Families::default();
    for (number, step) in report.steps.iter().enumerate() {
        let row = step.row(report);
        // The step's place in the experiment keeps two steps at one rate two series.
        let labels = format!(
            "config=\"{}\",stage=\"{}\",asked_rps=\"{}\",step=\"{}\"",
            escape(&report.configs[step.config].config.label()),
            match step.stage {
                Stage::Search => "search",
                Stage::Table => "table",
            },
            step.rps,
            number
        );
        for cell in row.cells() {
            families.add(
                "slo",
                &cell.name,
                cell.column,
                Kind::Gauge,
                &labels,
                &cell.value,
            );
        }
    }
    families.text()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::slo::{ConfigPeak, Evidence, HostConfig, Target};

    /// `--rps 30,30,30` with the host stopped for a second in the second step: every cell
    /// read one step's 5.0 ms, and the peak line said "30/s meets p99 ≤ 50 ms, 30/s does not".
    #[test]
    fn a_rate_asked_for_again_is_a_column_of_its_own() {
        let target = Target {
            quantile: "p99".into(),
            ms: 50.0,
        };
        let step = |p99_ms: f64| {
            let mut traffic = crate::record::fixture::traffic(30);
            traffic.latency.p99_ms = p99_ms;
            SloStep {
                config: 0,
                stage: Stage::Table,
                rps: 30,
                verdict: target.verdict(&traffic),
                traffic,
                evidence: Evidence {
                    wall_ms: 4000.0,
                    answered: 96,
                    ..Evidence::default()
                },
            }
        };
        let mut report = SloReport {
            target: target.clone(),
            skill: "sample_rs".into(),
            input: serde_json::json!({}),
            arrivals: Arrivals::Constant,
            step_s: 5,
            host_profile: "skillhost".into(),
            machine_cpus: 2,
            configs: vec![ConfigPeak {
                config: HostConfig {
                    workers: None,
                    cpus: vec![1],
                    allocator: None,
                },
                peak_rps: None,
                missed_rps: None,
            }],
            load_points: vec![30, 30, 30],
            steps: vec![step(5.0), step(961.0), step(5.0)],
            started: String::new(),
            complete: true,
        };
        let (met, missed) = table::bracket(&report, 0);
        report.configs[0].peak_rps = met;
        report.configs[0].missed_rps = missed;
        let text = explain(&report);
        for said in [
            "| configuration | 30/s | 30/s (2) | 30/s (3) |",
            "| default workers, 1 CPU | 5.0 | 961.0 (>150%) | 5.0 |",
            "no rate met p99 ≤ 50 ms (30/s the lowest tried); 30/s met it in 2 of its 3 steps \
             and missed it in 1",
            "- at 30/s (2): none of the configurations",
        ] {
            assert!(text.contains(said), "{said}\n{text}");
        }
        assert!(!text.contains("30/s meets"), "{text}");
    }
}
