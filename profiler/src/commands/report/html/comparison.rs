//! The comparison's page: the runs side by side, their tables and plots together.

use anyhow::Result;
use maud::{Markup, html};

use super::super::plots::{self, bars};
use super::super::read::Run;
use super::facts::{Fact, RUN_FACTS};
use super::run::{entries_table, timeseries};
use super::*;
use crate::ground::units;

/// The report of two or more runs of one workload: the comparison first, then each run.
pub fn comparison(runs: &[Run], harness_table: &str) -> Result<Page> {
    let refs: Vec<&Run> = runs.iter().collect();
    let mut compared = Vec::new();
    for metric in &bars::METRICS {
        compared.push(bars::compare(&refs, metric)?);
    }
    compared.push(bars::rss_over_time(&refs)?);
    let stop = bars::stop(&refs)?;

    let content = html! {
        p class="muted" {
            "Each entry of the workload in every run, side by side; later runs against run a as \
             ×ratio. The same numbers, sortable, are in the table below the plots."
        }
        @for f in &compared {
            (figure(f, ""))
        }
        (compare_table(&refs))
        h3 { "The harness's table" }
        p class="muted" { "As " code { "skillprof compare" } " prints it." }
        pre { (harness_table) }
    };
    let header = section("header", "The runs", header_table(&refs));
    let side_by_side = section("comparison", "Side by side", content);
    let shutdown = section("stop", "Shutdown", figure(&stop, ""));
    let mut per_run = Vec::new();
    let mut figures = compared;
    figures.push(stop);
    for (i, run) in runs.iter().enumerate() {
        let id = bars::id(i);
        let prefix = format!("{id}-");
        let series = plots::timeseries::figures(run)?;
        per_run.push(html! {
            details class="run" id={ "run-" (id) } {
                summary { "Run " (id) ": " (run.label()) " — every entry and its time series" }
                h3 { "Per entry" }
                (entries_table(run, &prefix))
                h3 { "Over time" }
                (timeseries(run, &series, &prefix))
            }
        });
        figures.extend(series.into_iter().map(|mut f| {
            f.id = format!("{prefix}{}", f.id);
            f
        }));
    }
    let body = html! {
        (header)
        (side_by_side)
        (shutdown)
        (section("runs", "Each run", html! { @for run in &per_run { (run) } }))
    };
    let cmds = &runs[0].meta.cmds.file;
    let names: Vec<String> = refs
        .iter()
        .enumerate()
        .map(|(i, run)| format!("{} = {}", bars::id(i), run.label()))
        .collect();
    let html = page(
        &format!("skillprof comparison: {cmds}, {} runs", runs.len()),
        html! {
            (names.join(", ")) ". Drawn from their run folders by skillprof "
            (env!("CARGO_PKG_VERSION")) "."
        },
        &[
            ("header", "The runs"),
            ("comparison", "Side by side"),
            ("stop", "Shutdown"),
            ("runs", "Each run"),
        ],
        body,
    );
    Ok(Page { html, figures })
}

/// The runs side by side, one column each.
pub(super) fn header_table(runs: &[&Run]) -> Markup {
    let identity: [(&str, Fact); 2] = [
        ("folder", |r| html! { code { (r.folder.display()) } }),
        ("workload", |r| {
            html! {
                code { (r.meta.cmds.file) } " hash " code { (r.meta.cmds.hash) }
            }
        }),
    ];
    html! {
        div class="scroll" {
            table {
                thead {
                    tr {
                        th class="text" {}
                        @for (i, run) in runs.iter().enumerate() {
                            th class="text" { (bars::id(i)) ": " (run.label()) }
                        }
                    }
                }
                tbody {
                    @for (name, cell) in identity.into_iter().chain(RUN_FACTS) {
                        tr {
                            th class="text" { (name) }
                            @for run in runs {
                                td class="text"
                                    style="white-space: normal; vertical-align: top; max-width: 36em" {
                                    (cell(run))
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Each compared metric per entry: every run's value and the later runs' ratios to a.
pub(super) fn compare_table(runs: &[&Run]) -> Markup {
    html! {
        div class="scroll" {
            table class="sortable compare" id="compare-table" {
                thead {
                    tr {
                        th class="text" { "entry" }
                        @for metric in &bars::METRICS {
                            @for (i, _) in runs.iter().enumerate() {
                                th title=(metric.about) {
                                    (metric.title) " " (bars::id(i)) br; "(" (metric.unit) ")"
                                }
                                @if i > 0 {
                                    th { (bars::id(i)) "/a" }
                                }
                            }
                        }
                    }
                }
                tbody {
                    @for entry in 0..runs[0].rows.len() {
                        tr {
                            td class="text" data-v=(entry) { (bars::entry_label(runs[0], entry)) }
                            @for metric in &bars::METRICS {
                                @let base = (metric.value)(runs[0], entry);
                                @for (i, run) in runs.iter().enumerate() {
                                    @let value = (metric.value)(run, entry);
                                    @match value {
                                        Some(v) => td data-v=(v) {
                                            @if v.fract() == 0.0 {
                                                (units::count(v))
                                            } @else {
                                                (format_args!("{v:.2}"))
                                            }
                                        },
                                        None => (cell("")),
                                    }
                                    @if i > 0 {
                                        @let ratio = bars::ratio_value(value, base)
                                            .map_or(String::new(), |ratio| ratio.to_string());
                                        td class="ratio" data-v=(ratio) {
                                            (bars::ratio(value, base))
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
