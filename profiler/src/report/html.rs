//! report.html: one self-contained page. Plots are inline SVG, styles and the table-sorting
//! script inline; a Content-Security-Policy forbids every fetch, so a page that tried one
//! would say so in the browser's console.
//!
//! Every section is a `<section data-section=NAME>` and every plot a
//! `<figure class="plot" data-plot=ID>`: the anchors of the table of contents, and what the
//! report test looks for.

use anyhow::Result;
use maud::{DOCTYPE, Markup, PreEscaped, html};

use super::answers;
use super::plots::{self, Body, Figure, bars};
use super::read::Run;
use crate::probes::CostMode;
use crate::record::{self, Status};
use crate::units;

/// The page and its figures (for `--format`, which also writes each plot alone).
pub struct Page {
    pub html: String,
    pub figures: Vec<Figure>,
}

// Style and script are ours and must reach the page verbatim: entity-escaping would break
// selectors such as `details.run > summary` and the script's string literals.
const STYLE: PreEscaped<&str> = PreEscaped(
    r##"
:root { --ink: #1d2330; --muted: #5a6272; --line: #d9dde5; --wash: #f5f6f9; --accent: #1f77b4; }
* { box-sizing: border-box; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif; color: var(--ink);
       margin: 0 auto; padding: 24px 32px 64px; max-width: 1240px; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 19px; margin: 40px 0 10px; padding-bottom: 4px; border-bottom: 2px solid var(--line); }
h3 { font-size: 16px; margin: 0 0 6px; }
p.lead, .muted { color: var(--muted); }
nav { margin: 12px 0 0; font-size: 14px; }
nav a { margin-right: 14px; color: var(--accent); text-decoration: none; }
code, pre { font: 13px/1.4 "DejaVu Sans Mono", ui-monospace, monospace; }
pre { background: var(--wash); padding: 10px 12px; overflow-x: auto; border-radius: 4px; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 4px 18px; margin: 0; }
dl.facts dt { color: var(--muted); }
dl.facts dd { margin: 0; }
.warn { color: #a33; font-weight: 600; }
figure.plot { margin: 22px 0 30px; }
figure.plot .svg svg { width: 100%; height: auto; display: block; border: 1px solid var(--line); border-radius: 4px; }
figure.plot figcaption { color: var(--muted); font-size: 14px; margin-top: 6px; max-width: 1100px; }
figure.absent p { background: var(--wash); border-left: 4px solid #c9a227; padding: 10px 14px; margin: 0; }
ol.key { columns: 2; font-size: 14px; margin: 6px 0 12px; padding-left: 2.6em; }
ol.key li::marker { content: "#" counter(list-item) "  "; color: var(--muted); }
.scroll { overflow: auto; max-height: 80vh; border: 1px solid var(--line); border-radius: 4px; }
table { border-collapse: separate; border-spacing: 0; font-size: 13px; }
th, td { padding: 4px 8px; border-bottom: 1px solid var(--line); white-space: nowrap; text-align: right;
         background: #fff; }
th { position: sticky; top: 0; z-index: 2; background: var(--wash); cursor: pointer; vertical-align: bottom; }
th[data-dir="asc"]::after { content: " ▲"; } th[data-dir="desc"]::after { content: " ▼"; }
td.text, th.text { text-align: left; }
td.na { color: #aab; text-align: center; }
.sticky1 { position: sticky; left: 0; z-index: 1; min-width: 15em; max-width: 15em; white-space: normal; text-align: left; }
.sticky2 { position: sticky; left: 15em; z-index: 1; min-width: 32em; max-width: 32em; white-space: normal;
           text-align: left; border-right: 2px solid var(--line); font-size: 12.5px; color: #333; }
th.sticky1, th.sticky2 { z-index: 3; }
table.entries .quiet { display: none; }
.entries-block:has(input.show-quiet:checked) table.entries .quiet { display: table-cell; }
table.compare td.ratio { color: var(--muted); }
details.run { margin: 18px 0; border: 1px solid var(--line); border-radius: 4px; padding: 6px 14px; }
details.run > summary { cursor: pointer; font-weight: 600; }
details.entries > summary { cursor: pointer; color: var(--accent); }
dl.answers dd { font-size: 16px; }
"##,
);

/// Sorting by any column: numbers by `data-v`, text otherwise, unmeasured cells last.
const SCRIPT: PreEscaped<&str> = PreEscaped(
    r#"
for (const table of document.querySelectorAll("table.sortable")) {
  const heads = table.tHead.rows[0].cells;
  for (const [column, head] of Array.from(heads).entries()) {
    head.addEventListener("click", () => {
      const dir = head.dataset.dir === "asc" ? "desc" : "asc";
      for (const other of heads) delete other.dataset.dir;
      head.dataset.dir = dir;
      const key = row => {
        const cell = row.cells[column];
        if (cell.dataset.v === undefined) return cell.textContent;
        return cell.dataset.v === "" ? null : Number(cell.dataset.v);
      };
      const body = table.tBodies[0];
      const rows = Array.from(body.rows);
      rows.sort((a, b) => {
        const [x, y] = [key(a), key(b)];
        if (x === null || y === null) return (x === null) - (y === null);
        const order = typeof x === "number" ? x - y : String(x).localeCompare(String(y));
        return dir === "asc" ? order : -order;
      });
      for (const row of rows) body.appendChild(row);
    });
  }
}
document.documentElement.dataset.ready = "yes";
"#,
);

/// Every fetch refused: the report must stand alone.
const CSP: &str =
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:";

fn page(title: &str, subtitle: Markup, nav: &[(&str, &str)], body: Markup) -> String {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta http-equiv="Content-Security-Policy" content=(CSP);
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) }
                style { (STYLE) }
            }
            body {
                header {
                    h1 { (title) }
                    p class="lead" { (subtitle) }
                    nav {
                        @for (anchor, name) in nav {
                            a href={ "#" (anchor) } { (name) }
                        }
                    }
                }
                (body)
                script { (SCRIPT) }
            }
        }
    }
    .into_string()
}

fn section(id: &str, title: &str, content: Markup) -> Markup {
    html! {
        section id=(id) data-section=(id) {
            h2 { (title) }
            (content)
        }
    }
}

/// A figure, its id made unique by `prefix` where a page holds several runs.
fn figure(figure: &Figure, prefix: &str) -> Markup {
    match &figure.body {
        Body::Svg(svg) => {
            let svg = svg.trim_start_matches(|c| c != '<');
            let svg = match svg.strip_prefix("<?xml") {
                Some(rest) => rest.split_once("?>").map_or(rest, |(_, svg)| svg),
                None => svg,
            };
            html! {
                figure class="plot" id={ "plot-" (prefix) (figure.id) } data-plot=(figure.id) {
                    @if !figure.titled {
                        h3 { (figure.title) }
                    }
                    // Our own plot code drew it: trusted markup.
                    div class="svg" role="img" aria-label=(figure.title) { (PreEscaped(svg)) }
                    figcaption { (figure.caption) }
                }
            }
        }
        Body::Absent(why) => html! {
            figure class="plot absent" id={ "plot-" (prefix) (figure.id) } data-plot=(figure.id)
                data-absent="yes" {
                h3 { (figure.title) }
                p { (why) }
            }
        },
    }
}

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
    let cmds = &runs[0].log.header.cmds.filename;
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

/// A join that keeps each item as markup: joining strings first would mean escaping by hand.
fn joined<T>(
    items: impl IntoIterator<Item = T>,
    separator: &str,
    each: impl Fn(T) -> Markup,
) -> Markup {
    html! {
        @for (i, item) in items.into_iter().enumerate() {
            @if i > 0 {
                (separator)
            }
            (each(item))
        }
    }
}

/// One fact about a run.
type Fact = fn(&Run) -> Markup;

/// What a run's header and a comparison's table of runs both say about each run.
const RUN_FACTS: [(&str, Fact); 7] = [
    ("status", status),
    ("machine", |r| html! { (machine(r)) }),
    ("kernel", |r| html! { (kernel(r)) }),
    ("host", host),
    ("host configuration", host_config),
    ("probes live", probes_live),
    ("profiler overhead", overhead),
];

/// The workload, the [`RUN_FACTS`], and what was sampled and traced.
fn header(run: &Run) -> Markup {
    let cmds = &run.log.header.cmds;
    html! {
        dl class="facts" {
            dt { "workload" }
            dd {
                code { (cmds.filename) } ", " (run.rows.len()) " entries, hash " code { (cmds.hash) }
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

fn status(run: &Run) -> Markup {
    let meta = &run.meta;
    match meta.status {
        Status::Complete => html! {
            "complete, " (meta.started)
            " → " (meta.finished.as_deref().unwrap_or("?"))
        },
        other => html! {
            span class="warn" { (other.name()) }
            @if let Some(reason) = &meta.reason {
                ": " (reason)
            }
            @if !meta.entries_not_run.is_empty() {
                "; not run: " (meta.entries_not_run.join(", "))
            }
        },
    }
}

fn machine(run: &Run) -> String {
    let m = &run.meta.machine;
    format!(
        "{}, {} cores, {} RAM ({} available at the start), {}, host name {}",
        m.brand,
        m.cores,
        units::bytes(m.memory_total_kb as f64 * 1024.0),
        units::bytes(m.memory_available_kb as f64 * 1024.0),
        m.arch,
        m.hostname
    )
}

fn kernel(run: &Run) -> String {
    let m = &run.meta.machine;
    format!("Linux {} {}", m.kernel_release, m.kernel_version)
}

fn host(run: &Run) -> Markup {
    let host = &run.meta.host;
    html! {
        @if host.attached {
            "attached to process " (host.pid.unwrap_or_default()) ", not started by skillprof: "
        }
        code { (host.spec.bin.display()) } " " (host.spec.args.join(" "))
        " (SHA-1 " code { (host.sha1) } "; " (host.spec.profile) " profile)"
    }
}

/// The host's effective configuration (its `GET /config`), engine settings first.
fn host_config(run: &Run) -> Markup {
    let Some(config) = &run.meta.host.config else {
        return html! { "not offered by the host (no " code { "GET /config" } ")" };
    };
    let mut settings = Vec::new();
    flatten("", config, &mut settings);
    settings.sort_by_key(|(name, _)| !name.starts_with("engine."));
    joined(&settings, " · ", |(name, value)| {
        html! { code { (name) } "\u{a0}" (value) }
    })
}

fn flatten(prefix: &str, value: &serde_json::Value, out: &mut Vec<(String, String)>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, value) in map {
                let name = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                flatten(&name, value, out);
            }
        }
        serde_json::Value::String(text) => out.push((prefix.to_owned(), text.clone())),
        other => out.push((prefix.to_owned(), other.to_string())),
    }
}

fn probes_live(run: &Run) -> Markup {
    let Some(probes) = &run.meta.probes else {
        return html! { "unknown: the run ended before the probes started" };
    };
    if !probes.enabled {
        return html! {
            span class="warn" { "none: probes off (--no-probes)" }
            "; every probe column is empty, never 0"
        };
    }
    let (live, missing): (Vec<_>, Vec<_>) = probes
        .statuses
        .iter()
        .filter(|s| !s.exact_only() && !s.not_asked())
        .partition(|s| s.attached);
    let exact_only: Vec<_> = probes.statuses.iter().filter(|s| s.exact_only()).collect();
    html! {
        (joined(live, ", ", |s| html! {
            (s.probe) " " span class="muted" { "(" (s.mechanism) ")" }
        }))
        @if !missing.is_empty() {
            "; not attached on this kernel: "
            (joined(missing, ", ", |s| html! { span title=(s.detail) { (s.probe) } }))
            " (hover for why; others cover their ground)"
        }
        @if !exact_only.is_empty() {
            "; left out by the host-only mode, which taxes no other process: "
            (joined(exact_only, ", ", |s| html! { (s.probe) }))
            " (" code { "--probes exact" } " attaches them)"
        }
    }
}

fn overhead(run: &Run) -> Markup {
    let sampler = run
        .meta
        .sampler_cpu_ms
        .map(|ms| format!("the sampler thread used {} of CPU", units::ms(ms)));
    let costs = run.meta.probes.as_ref().and_then(|p| p.costs.as_ref());
    let (first, last) = run.span_s();
    let mut parts = Vec::new();
    if let Some(costs) = costs {
        parts.push(match costs.mode() {
            CostMode::Measured(_) => format!(
                "BPF programs ran {} times for {} of CPU in all ({} per run on average) over a \
                 {:.1} s run",
                units::count(costs.total_runs as f64),
                units::ms(costs.total_run_ns as f64 / 1e6),
                if costs.total_runs > 0 {
                    format!(
                        "{:.0} ns",
                        costs.total_run_ns as f64 / costs.total_runs as f64
                    )
                } else {
                    "–".to_owned()
                },
                last - first
            ),
            CostMode::Modelled(modelled) => format!("BPF programs' cost modelled: {modelled}"),
            CostMode::Unknown(why) => format!("BPF programs' cost not measured ({why})"),
        });
        if costs.events_streamed {
            parts.push(format!(
                "{} events streamed, {} lost",
                units::count(costs.events_sent as f64),
                units::count(costs.events_lost as f64)
            ));
        }
    } else if run.probes_live() {
        parts.push("BPF costs not recorded (the run did not finish)".to_owned());
    }
    parts.extend(sampler);
    html! {
        (parts.join("; "))
        @if let Some(costs) = costs.filter(|c| !c.programs.is_empty()) {
            details {
                summary { "per BPF program" }
                table {
                    thead {
                        tr {
                            th class="text" { "probe" }
                            th class="text" { "program" }
                            th { "runs" }
                            th { "ns per run" }
                        }
                    }
                    tbody {
                        @for p in &costs.programs {
                            tr {
                                td class="text" { (p.probe) }
                                td class="text" { (p.program) }
                                td { (units::count(p.runs as f64)) }
                                td {
                                    @match p.ns_per_run {
                                        Some(ns) => (format_args!("{ns:.0}")),
                                        None => "–",
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

/// The runs side by side, one column each.
fn header_table(runs: &[&Run]) -> Markup {
    let identity: [(&str, Fact); 2] = [
        ("folder", |r| html! { code { (r.folder.display()) } }),
        ("workload", |r| {
            html! {
                code { (r.log.header.cmds.filename) } " hash " code { (r.log.header.cmds.hash) }
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

/// A cell of commands.csv as the table shows it: numbers with separators (sorted by value),
/// empty as "–" (not measured).
fn cell(value: &str) -> Markup {
    cell_in(value, "")
}

/// [`cell`] with `class` (space-separated) added to its own.
fn cell_in(value: &str, class: &str) -> Markup {
    let classes = |own: &str| {
        let all = [own, class]
            .iter()
            .filter(|c| !c.is_empty())
            .copied()
            .collect::<Vec<_>>()
            .join(" ");
        (!all.is_empty()).then_some(all)
    };
    if value.is_empty() {
        return html! { td class=[classes("na")] data-v="" title="not measured" { "–" } };
    }
    match value.parse::<f64>() {
        Ok(number) => html! {
            td class=[classes("")] data-v=(number) {
                @match value.parse::<i128>() {
                    Ok(integer) => (units::thousands(integer)),
                    Err(_) => (value),
                }
            }
        },
        Err(_) => html! { td class=[classes("text")] { (value) } },
    }
}

/// Links to the entries' flamegraphs (`run --stacks`), or why there are none.
fn flamegraphs(run: &Run) -> Markup {
    let graphs: Vec<(usize, &str, std::path::PathBuf)> = run
        .records
        .iter()
        .map(|r| {
            let folded = crate::output::stacks::folded_path(&run.folder, r.measure.index);
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
fn entries_table(run: &Run, prefix: &str) -> Markup {
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
                            th class="sticky1" title=(record::documentation("cmd").map_or("", |c| c.help)) {
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
                                    "#" (index) " " code { (record.measure.cmd) }
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
fn timeseries(run: &Run, series: &[Figure], prefix: &str) -> Markup {
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

/// Each compared metric per entry: every run's value and the later runs' ratios to a.
fn compare_table(runs: &[&Run]) -> Markup {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_keep_empty_apart_from_zero() {
        assert!(cell("").0.contains("class=\"na\""));
        assert!(cell_in("", "quiet").0.contains("class=\"na quiet\""));
        assert!(cell("0").0.contains("data-v=\"0\""));
        assert_eq!(cell("1234567").0, "<td data-v=\"1234567\">1,234,567</td>");
        assert_eq!(cell("rss_stat").0, "<td class=\"text\">rss_stat</td>");
        assert_eq!(
            cell("<a&\"b\">").0,
            "<td class=\"text\">&lt;a&amp;&quot;b&quot;&gt;</td>"
        );
    }
}
