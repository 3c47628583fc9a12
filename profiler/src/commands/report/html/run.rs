//! The run's page: its header, its answers, the entries and every plot.

use anyhow::Result;
use maud::{Markup, html};

use super::super::answers;
use super::super::plots::{self, Figure, bars};
use super::super::read::Run;
use super::facts::{RUN_FACTS, overhead};
use super::*;
use crate::ground::units;
use crate::record;

/// The report of one run.
pub fn single(run: &Run) -> Result<Page> {
    let series = plots::timeseries::figures(run)?;
    let stop = bars::stop(&[run])?;
    let skills = plots::skills::faults_by_skill(run)?;
    let held = plots::held::by_holder(run)?;
    // The answers first, the plots that show them next, the facts of the run and every
    // column last, for whoever checks.
    let body = html! {
        (section("answers", "The answers", answers::answers(run, overhead(run))))
        (section("held", "What holds the memory", figure(&held, "")))
        (section("skills", "By skill", html! { (figure(&skills, "")) (flamegraphs(run)) }))
        (section("time", "Where the time went", super::time::time(run)))
        (section("allocator", "The allocator", super::allocator::allocator(run)))
        (section("timeseries", "Over time", timeseries(run, &series, "")))
        (section("stop", "Shutdown", figure(&stop, "")))
        (section("header", "The run", header(run)))
        (section("entries", "Per entry", html! {
            details class="entries" {
                summary { "every column of commands.csv, each entry with its explanation" }
                (entries_table(run, ""))
            }
        }))
    };
    let cmds = &run.meta.cmds.file;
    let title = format!("skillprof report: {cmds} ({})", run.name);
    let subtitle = html! {
        "Drawn from the files in " code { (run.folder.display()) } " by skillprof "
        (env!("CARGO_PKG_VERSION")) ". Hover a column's name for what it means; click it to sort."
    };
    let html = page(
        &title,
        subtitle,
        &[
            ("answers", "The answers"),
            ("held", "What holds the memory"),
            ("skills", "By skill"),
            ("time", "Where the time went"),
            ("allocator", "The allocator"),
            ("timeseries", "Over time"),
            ("stop", "Shutdown"),
            ("header", "The run"),
            ("entries", "Per entry"),
        ],
        body,
    );
    let mut figures = series;
    figures.push(held);
    figures.push(skills);
    figures.push(stop);
    Ok(Page { html, figures })
}

/// The workload, the [`RUN_FACTS`], and what was sampled and traced.
pub(super) fn header(run: &Run) -> Markup {
    let cmds = &run.meta.cmds;
    html! {
        dl class="facts" {
            dt { "workload" }
            dd {
                code { (cmds.file) } ", " (run.rows.len()) " entries, hash " code { (cmds.hash) }
            }
            @for (name, value) in RUN_FACTS {
                dt { (name) }
                dd { (value(run)) }
            }
            dt { "sampling" }
            dd {
                "every " (run.meta.sampling_interval_ms)
                " ms and at each entry boundary: " (run.samples.len()) " samples"
            }
            dt { "events" }
            dd {
                @match &run.events {
                    Some(events) => {
                        "events.csv: " (units::count(events.list.len() as f64))
                        " kernel events from " (events.host_tids.len())
                        " host threads; placed on the samples' clock to within ±"
                        (format_args!("{:.1}", events.offset_slack_ms)) " ms (see the time series)"
                    }
                    None => {
                        "none (run with " code { "--events" } " for every kernel event, in time)"
                    }
                }
            }
        }
    }
}

/// Links to the entries' flamegraphs (`run --stacks`), or why there are none.
pub(super) fn flamegraphs(run: &Run) -> Markup {
    let graphs: Vec<(usize, &str, std::path::PathBuf)> = run
        .records
        .iter()
        .map(|r| {
            let folded = crate::views::output::stacks::folded_path(&run.folder, r.measure.index);
            (
                r.measure.index,
                r.measure.cmd.as_str(),
                folded.with_extension("svg"),
            )
        })
        .filter(|(_, _, svg)| svg.exists())
        .collect();
    html! {
        @if graphs.is_empty() {
            p class="muted" {
                "No flamegraphs: run with --stacks to see which code (a wasm function, or                  wasmtime itself) took each entry's faults."
            }
        } @else {
            p {
                "Flamegraphs of each entry's faults and address-space syscalls by stack                  (stacks/ENTRY.folded holds the counts): "
                @for (i, (index, cmd, svg)) in graphs.iter().enumerate() {
                    @if i > 0 { ", " }
                    a href=(svg.display().to_string()) { "#" (index) " " code { (cmd) } }
                }
            }
        }
    }
}

/// Every column of commands.csv, one row per entry, with its paragraph beside it. Columns
/// that are empty or zero in every entry start hidden, behind a checkbox.
pub(super) fn entries_table(run: &Run, prefix: &str) -> Markup {
    let Some(first) = run.rows.first() else {
        return html! { p { "commands.csv has no entries." } };
    };
    // Every column but index and cmd, which the entry's own cell shows.
    let shown: Vec<usize> = (0..first.cells().len())
        .filter(|&i| !matches!(first.cells()[i].name.as_ref(), "index" | "cmd"))
        .collect();
    let column = |i: usize| &first.cells()[i];
    // Decided once per column: every cell of every row asks.
    let quiet: Vec<bool> = shown
        .iter()
        .map(|&i| {
            run.rows.iter().all(|row| {
                let value = &row.cells()[i].value;
                value.is_absent() || value.number().is_some_and(|v| v == 0.0)
            })
        })
        .collect();
    let quiet_count = quiet.iter().filter(|q| **q).count();
    html! {
        div class="entries-block" {
            p class="muted" {
                "All " (shown.len() + 2) " columns of commands.csv (hover a name for its meaning, \
                 click to sort; – is not measured, never 0), each entry with its explanation. "
                label {
                    input type="checkbox" class="show-quiet" id={ (prefix) "show-quiet" };
                    " show the " (quiet_count) " columns that are empty or zero in every entry"
                }
            }
            div class="scroll" {
                table class="sortable entries" id={ (prefix) "entries-table" } {
                    thead {
                        tr {
                            th class="sticky1" title=(record::documentation("cmd").map_or("", |c| &c.help)) {
                                "entry"
                            }
                            th class="sticky2 text" { "explanation" }
                            @for (&i, quiet) in shown.iter().zip(&quiet) {
                                th class=[quiet.then_some("quiet")]
                                    title=(column(i).column.help) {
                                    (column(i).name)
                                }
                            }
                        }
                    }
                    tbody {
                        @for (number, (record, row)) in run.records.iter().zip(&run.rows).enumerate() {
                            @let index = record.measure.index;
                            tr {
                                td class="sticky1" data-v=(index) {
                                    "#" (index) " " code { (record.measure.cmd.as_str()) }
                                }
                                td class="sticky2" {
                                    (run.explanations.get(number).map_or("", String::as_str))
                                }
                                @for (&i, quiet) in shown.iter().zip(&quiet) {
                                    (cell_in(
                                        &row.cells()[i].value.to_string(),
                                        if *quiet { "quiet" } else { "" },
                                    ))
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The entry key, how the clocks were aligned, and the time-series plots.
pub(super) fn timeseries(run: &Run, series: &[Figure], prefix: &str) -> Markup {
    html! {
        p class="muted" {
            "The entries, as the plots label them (shaded alternately; narrow neighbours share one \
             label):"
        }
        ol class="key" start="0" {
            @for entry in &run.entries {
                li {
                    code { (entry.cmd) } " "
                    span class="muted" {
                        (format_args!("{:.2}–{:.2} s, ", entry.begin_s, entry.end_s))
                        (units::ms(entry.took_ms))
                    }
                }
            }
        }
        p class="muted" {
            (run.alignment)
            @if let Some(events) = &run.events {
                " Kernel events carry their own clock (CLOCK_MONOTONIC); they are moved onto the \
                 sampler's by the one offset that keeps each entry's events within the entry, \
                 good to ±" (format_args!("{:.1}", events.offset_slack_ms)) " ms."
            }
        }
        @for f in series {
            (figure(f, prefix))
        }
    }
}
