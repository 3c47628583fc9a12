//! report.html: one self-contained page. Plots are inline SVG, styles and the table-sorting
//! script inline; a Content-Security-Policy forbids every fetch, so a page that tried one
//! would say so in the browser's console.
//!
//! Every section is a `<section data-section=NAME>` and every plot a
//! `<figure class="plot" data-plot=ID>`: the anchors of the table of contents, and what the
//! report test looks for.

use std::fmt::Write as _;

use anyhow::Result;

use super::load::Run;
use super::plots::{self, Body, Figure, bars};
use crate::record;
use crate::words;

/// The page and its figures (for `--format`, which also writes each plot alone).
pub struct Page {
    pub html: String,
    pub figures: Vec<Figure>,
}

const STYLE: &str = r##"
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
"##;

/// Sorting by any column: numbers by `data-v`, text otherwise, unmeasured cells last.
const SCRIPT: &str = r#"
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
"#;

/// Every fetch refused: the report must stand alone.
const CSP: &str =
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:";

pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn page(title: &str, subtitle: &str, nav: &[(&str, &str)], body: &str) -> String {
    let mut html = String::new();
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<header>\n<h1>{}</h1>\n\
         <p class=\"lead\">{}</p>\n<nav>",
        escape(title),
        escape(title),
        subtitle
    );
    for (anchor, name) in nav {
        let _ = write!(html, "<a href=\"#{anchor}\">{}</a>", escape(name));
    }
    let _ = write!(
        html,
        "</nav>\n</header>\n{body}\n<script>{SCRIPT}</script>\n</body>\n</html>\n"
    );
    html
}

fn section(id: &str, title: &str, content: &str) -> String {
    format!(
        "<section id=\"{id}\" data-section=\"{id}\">\n<h2>{}</h2>\n{content}\n</section>\n",
        escape(title)
    )
}

/// A figure, its id made unique by `prefix` where a page holds several runs.
fn figure(figure: &Figure, prefix: &str) -> String {
    let id = format!("{prefix}{}", figure.id);
    match &figure.body {
        Body::Svg(svg) => {
            let svg = svg.trim_start_matches(|c| c != '<');
            let svg = match svg.strip_prefix("<?xml") {
                Some(rest) => rest.split_once("?>").map_or(rest, |(_, svg)| svg),
                None => svg,
            };
            let heading = if figure.titled {
                String::new()
            } else {
                format!("<h3>{}</h3>\n", escape(&figure.title))
            };
            format!(
                "<figure class=\"plot\" id=\"plot-{id}\" data-plot=\"{}\">\n{heading}\
                 <div class=\"svg\" role=\"img\" aria-label=\"{}\">{svg}</div>\n\
                 <figcaption>{}</figcaption>\n</figure>\n",
                figure.id,
                escape(&figure.title),
                escape(&figure.caption)
            )
        }
        Body::Absent(why) => format!(
            "<figure class=\"plot absent\" id=\"plot-{id}\" data-plot=\"{}\" data-absent=\"yes\">\n\
             <h3>{}</h3>\n<p>{}</p>\n</figure>\n",
            figure.id,
            escape(&figure.title),
            escape(why)
        ),
    }
}

/// The report of one run.
pub fn single(run: &Run) -> Result<Page> {
    let series = plots::timeseries::figures(run)?;
    let stop = bars::stop(&[run])?;
    let mut body = String::new();
    body.push_str(&section("header", "The run", &header(run)));
    body.push_str(&section("entries", "Per entry", &entries_table(run, "")));
    body.push_str(&section(
        "timeseries",
        "Over time",
        &timeseries(run, &series, ""),
    ));
    body.push_str(&section("stop", "Shutdown", &figure(&stop, "")));
    let cmds = run
        .meta
        .cmds
        .as_ref()
        .and_then(|c| c.file.clone())
        .unwrap_or_else(|| run.log.header.cmds.filename.clone());
    let title = format!("skillprof report: {cmds} ({})", run.name);
    let subtitle = format!(
        "Drawn from the files in <code>{}</code> by skillprof {}. Hover a column's name for \
         what it means; click it to sort.",
        escape(&run.folder.display().to_string()),
        env!("CARGO_PKG_VERSION")
    );
    let html = page(
        &title,
        &subtitle,
        &[
            ("header", "The run"),
            ("entries", "Per entry"),
            ("timeseries", "Over time"),
            ("stop", "Shutdown"),
        ],
        &body,
    );
    let mut figures = series;
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

    let mut content = String::from(
        "<p class=\"muted\">Each entry of the workload in every run, side by side; later runs \
         against run a as ×ratio. The same numbers, sortable, are in the table below the plots.</p>\n",
    );
    for f in &compared {
        content.push_str(&figure(f, ""));
    }
    content.push_str(&compare_table(&refs));
    let _ = write!(
        content,
        "<h3>The harness's table</h3>\n<p class=\"muted\">As <code>skillprof compare</code> prints it.</p>\n<pre>{}</pre>\n",
        escape(harness_table)
    );
    let mut body = String::new();
    body.push_str(&section("header", "The runs", &header_table(&refs)));
    body.push_str(&section("comparison", "Side by side", &content));
    body.push_str(&section("stop", "Shutdown", &figure(&stop, "")));
    let mut per_run = String::new();
    let mut figures = compared;
    figures.push(stop);
    for (i, run) in runs.iter().enumerate() {
        let id = bars::id(i);
        let prefix = format!("{id}-");
        let series = plots::timeseries::figures(run)?;
        let _ = write!(
            per_run,
            "<details class=\"run\" id=\"run-{id}\"><summary>Run {id}: {} — every entry and its time series</summary>\n\
             <h3>Per entry</h3>\n{}\n<h3>Over time</h3>\n{}\n</details>\n",
            escape(&run.label()),
            entries_table(run, &prefix),
            timeseries(run, &series, &prefix)
        );
        figures.extend(series.into_iter().map(|mut f| {
            f.id = format!("{prefix}{}", f.id);
            f
        }));
    }
    body.push_str(&section("runs", "Each run", &per_run));
    let cmds = runs[0].log.header.cmds.filename.clone();
    let names: Vec<String> = refs
        .iter()
        .enumerate()
        .map(|(i, run)| format!("{} = {}", bars::id(i), run.label()))
        .collect();
    let html = page(
        &format!("skillprof comparison: {cmds}, {} runs", runs.len()),
        &format!(
            "{}. Drawn from their run folders by skillprof {}.",
            escape(&names.join(", ")),
            env!("CARGO_PKG_VERSION")
        ),
        &[
            ("header", "The runs"),
            ("comparison", "Side by side"),
            ("stop", "Shutdown"),
            ("runs", "Each run"),
        ],
        &body,
    );
    Ok(Page { html, figures })
}

fn fact(html: &mut String, name: &str, value: &str) {
    let _ = writeln!(html, "<dt>{}</dt><dd>{value}</dd>", escape(name));
}

/// Machine, kernel, host configuration, probes live, and what measuring cost.
/// One fact about a run, as HTML.
type Fact = fn(&Run) -> String;

/// What a run's header and a comparison's table of runs both say about each run.
const RUN_FACTS: [(&str, Fact); 7] = [
    ("status", status),
    ("machine", |r| escape(&machine(r))),
    ("kernel", |r| escape(&kernel(r))),
    ("host", host),
    ("host configuration", host_config),
    ("probes live", probes_live),
    ("profiler overhead", overhead),
];

fn header(run: &Run) -> String {
    let meta = &run.meta;
    let mut html = String::from("<dl class=\"facts\">\n");
    let cmds = &run.log.header.cmds;
    fact(
        &mut html,
        "workload",
        &format!(
            "<code>{}</code>, {} entries, hash <code>{}</code>",
            escape(&cmds.filename),
            run.rows.len(),
            escape(&cmds.hash)
        ),
    );
    for (name, value) in RUN_FACTS {
        fact(&mut html, name, &value(run));
    }
    fact(
        &mut html,
        "sampling",
        &escape(&format!(
            "every {} ms and at each entry boundary: {} samples",
            meta.sampling_interval_ms.unwrap_or(100),
            run.samples.len()
        )),
    );
    fact(
        &mut html,
        "events",
        &match &run.events {
            Some(events) => escape(&format!(
                "events.csv: {} kernel events from {} host threads; placed on the samples' clock \
                 to within ±{:.1} ms (see the time series)",
                words::count(events.list.len() as f64),
                events.host_tids.len(),
                events.offset_slack_ms
            )),
            None => {
                "none (run with <code>--events</code> for every kernel event, in time)".to_owned()
            }
        },
    );
    html.push_str("</dl>\n");
    html
}

fn status(run: &Run) -> String {
    let meta = &run.meta;
    match meta.status.as_deref() {
        Some("complete") => format!(
            "complete, {} → {}",
            escape(meta.started.as_deref().unwrap_or("?")),
            escape(meta.finished.as_deref().unwrap_or("?"))
        ),
        Some(other) => format!(
            "<span class=\"warn\">{}</span>{}{}",
            escape(other),
            meta.reason
                .as_deref()
                .map(|r| format!(": {}", escape(r)))
                .unwrap_or_default(),
            if meta.entries_not_run.is_empty() {
                String::new()
            } else {
                format!("; not run: {}", escape(&meta.entries_not_run.join(", ")))
            }
        ),
        None => "unknown (meta.json has no status)".to_owned(),
    }
}

fn machine(run: &Run) -> String {
    let Some(m) = &run.meta.machine else {
        return "unknown (meta.json has no machine)".to_owned();
    };
    format!(
        "{}, {} cores, {} RAM ({} available at the start), {}{}",
        m.brand.as_deref().unwrap_or("?"),
        m.cores.map_or("?".to_owned(), |c| c.to_string()),
        m.memory_total_kb
            .map_or("?".to_owned(), |kb| words::bytes(kb as f64 * 1024.0)),
        m.memory_available_kb
            .map_or("?".to_owned(), |kb| words::bytes(kb as f64 * 1024.0)),
        m.arch.as_deref().unwrap_or("?"),
        m.hostname
            .as_deref()
            .map(|h| format!(", host name {h}"))
            .unwrap_or_default()
    )
}

fn kernel(run: &Run) -> String {
    let Some(m) = &run.meta.machine else {
        return "unknown".to_owned();
    };
    format!(
        "Linux {} {}",
        m.kernel_release.as_deref().unwrap_or("?"),
        m.kernel_version.as_deref().unwrap_or("")
    )
}

fn host(run: &Run) -> String {
    let Some(host) = &run.meta.host else {
        return escape(&run.log.header.binary.bin);
    };
    format!(
        "<code>{}</code> {} (SHA-1 <code>{}</code>)",
        escape(host.bin.as_deref().unwrap_or("?")),
        escape(&host.args.join(" ")),
        escape(host.sha1.as_deref().unwrap_or("?"))
    )
}

/// The host's effective configuration (its `GET /config`), engine settings first.
fn host_config(run: &Run) -> String {
    let Some(config) = run.meta.host.as_ref().and_then(|h| h.config.as_ref()) else {
        return "not offered by the host (no <code>GET /config</code>)".to_owned();
    };
    let mut settings = Vec::new();
    flatten("", config, &mut settings);
    settings.sort_by_key(|(name, _)| !name.starts_with("engine."));
    let items: Vec<String> = settings
        .iter()
        .map(|(name, value)| format!("<code>{}</code>&nbsp;{}", escape(name), escape(value)))
        .collect();
    items.join(" · ")
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

fn probes_live(run: &Run) -> String {
    let Some(probes) = &run.meta.probes else {
        return "unknown (meta.json has no probes)".to_owned();
    };
    if !probes.enabled {
        return "<span class=\"warn\">none: probes off (--no-probes)</span>; every probe column \
                is empty, never 0"
            .to_owned();
    }
    let live: Vec<String> = probes
        .statuses
        .iter()
        .filter(|s| s.attached)
        .map(|s| {
            format!(
                "{} <span class=\"muted\">({})</span>",
                escape(&s.probe),
                escape(&s.mechanism)
            )
        })
        .collect();
    let missing: Vec<String> = probes
        .statuses
        .iter()
        .filter(|s| !s.attached)
        .map(|s| {
            format!(
                "<span title=\"{}\">{}</span>",
                escape(&s.detail),
                escape(&s.probe)
            )
        })
        .collect();
    let mut html = live.join(", ");
    if !missing.is_empty() {
        let _ = write!(
            html,
            "; not attached on this kernel: {} (hover for why; others cover their ground)",
            missing.join(", ")
        );
    }
    html
}

fn overhead(run: &Run) -> String {
    let sampler = run
        .meta
        .sampler_cpu_ms
        .map(|ms| format!("the sampler thread used {} of CPU", words::ms(ms)));
    let costs = run.meta.probes.as_ref().and_then(|p| p.costs.as_ref());
    let (first, last) = run.span_s();
    let mut parts = Vec::new();
    if let Some(costs) = costs {
        parts.push(format!(
            "BPF programs ran {} times for {} of CPU in all ({} per run on average) over a {:.1} s run",
            words::count(costs.total_runs as f64),
            words::ms(costs.total_run_ns as f64 / 1e6),
            if costs.total_runs > 0 {
                format!("{:.0} ns", costs.total_run_ns as f64 / costs.total_runs as f64)
            } else {
                "–".to_owned()
            },
            last - first
        ));
        if costs.events_streamed {
            parts.push(format!(
                "{} events streamed, {} lost",
                words::count(costs.events_sent as f64),
                words::count(costs.events_lost as f64)
            ));
        }
    } else if run.probes_live() {
        parts.push("BPF costs not recorded (the run did not finish)".to_owned());
    }
    parts.extend(sampler);
    let mut html = escape(&parts.join("; "));
    if let Some(costs) = costs.filter(|c| !c.programs.is_empty()) {
        html.push_str(
            "<details><summary>per BPF program</summary><table><thead><tr><th class=\"text\">probe</th>\
             <th class=\"text\">program</th><th>runs</th><th>ns per run</th></tr></thead><tbody>",
        );
        for p in &costs.programs {
            let _ = write!(
                html,
                "<tr><td class=\"text\">{}</td><td class=\"text\">{}</td><td>{}</td><td>{}</td></tr>",
                escape(&p.probe),
                escape(&p.program),
                words::count(p.runs as f64),
                p.ns_per_run.map_or("–".to_owned(), |ns| format!("{ns:.0}"))
            );
        }
        html.push_str("</tbody></table></details>");
    }
    html
}

/// The runs side by side, one column each.
fn header_table(runs: &[&Run]) -> String {
    let mut html = String::from("<div class=\"scroll\"><table><thead><tr><th class=\"text\"></th>");
    for (i, run) in runs.iter().enumerate() {
        let _ = write!(
            html,
            "<th class=\"text\">{}: {}</th>",
            bars::id(i),
            escape(&run.label())
        );
    }
    html.push_str("</tr></thead><tbody>");
    let identity: [(&str, Fact); 2] = [
        ("folder", |r| {
            format!("<code>{}</code>", escape(&r.folder.display().to_string()))
        }),
        ("workload", |r| {
            format!(
                "<code>{}</code> hash <code>{}</code>",
                escape(&r.log.header.cmds.filename),
                escape(&r.log.header.cmds.hash)
            )
        }),
    ];
    for (name, cell) in identity.into_iter().chain(RUN_FACTS) {
        let _ = write!(html, "<tr><th class=\"text\">{name}</th>");
        for run in runs {
            let _ = write!(
                html,
                "<td class=\"text\" style=\"white-space: normal; vertical-align: top; max-width: 36em\">{}</td>",
                cell(run)
            );
        }
        html.push_str("</tr>");
    }
    html.push_str("</tbody></table></div>\n");
    html
}

/// A cell of commands.csv as the table shows it: numbers with separators (sorted by value),
/// empty as "–" (not measured).
fn cell(value: &str) -> String {
    cell_in(value, "")
}

/// [`cell`] with `class` (space-separated) added to its own.
fn cell_in(value: &str, class: &str) -> String {
    let classes = |own: &str| {
        let all = [own, class]
            .iter()
            .filter(|c| !c.is_empty())
            .copied()
            .collect::<Vec<_>>()
            .join(" ");
        if all.is_empty() {
            String::new()
        } else {
            format!(" class=\"{all}\"")
        }
    };
    if value.is_empty() {
        return format!(
            "<td{} data-v=\"\" title=\"not measured\">–</td>",
            classes("na")
        );
    }
    match value.parse::<f64>() {
        Ok(number) => {
            let shown = match value.parse::<i128>() {
                Ok(integer) => words::thousands(integer),
                Err(_) => escape(value),
            };
            format!("<td{} data-v=\"{number}\">{shown}</td>", classes(""))
        }
        Err(_) => format!("<td{}>{}</td>", classes("text"), escape(value)),
    }
}

/// Every column of commands.csv, one row per entry, with its paragraph beside it. Columns
/// that are empty or zero in every entry start hidden, behind a checkbox.
fn entries_table(run: &Run, prefix: &str) -> String {
    let Some(first) = run.rows.first() else {
        return "<p>commands.csv has no entries.</p>".to_owned();
    };
    let names: Vec<&str> = first
        .names()
        .filter(|n| *n != "index" && *n != "cmd")
        .collect();
    // Decided once per column: every cell of every row asks.
    let quiet: Vec<bool> = names
        .iter()
        .map(|name| {
            run.rows.iter().all(|row| {
                let value = row.get(name).unwrap_or("");
                value.is_empty() || value.parse::<f64>().is_ok_and(|v| v == 0.0)
            })
        })
        .collect();
    let quiet_count = quiet.iter().filter(|q| **q).count();
    let mut html = String::new();
    let _ = writeln!(
        html,
        "<div class=\"entries-block\"><p class=\"muted\">All {} columns of commands.csv (hover a \
         name for its meaning, click to sort; – is not measured, never 0), each entry with its \
         explanation. <label><input type=\"checkbox\" class=\"show-quiet\" id=\"{prefix}show-quiet\"> \
         show the {quiet_count} columns that are empty or zero in every entry</label></p>",
        names.len() + 2,
    );
    let _ = write!(
        html,
        "<div class=\"scroll\"><table class=\"sortable entries\" id=\"{prefix}entries-table\"><thead><tr>\
         <th class=\"sticky1\" title=\"{}\">entry</th><th class=\"sticky2 text\">explanation</th>",
        escape(record::documentation("cmd").unwrap_or(""))
    );
    for (name, quiet) in names.iter().zip(&quiet) {
        let _ = write!(
            html,
            "<th{} title=\"{}\">{}</th>",
            if *quiet { " class=\"quiet\"" } else { "" },
            escape(record::documentation(name).unwrap_or("")),
            escape(name)
        );
    }
    html.push_str("</tr></thead><tbody>\n");
    for (number, row) in run.rows.iter().enumerate() {
        let index = row.get("index").unwrap_or("?");
        let _ = write!(
            html,
            "<tr><td class=\"sticky1\" data-v=\"{}\">#{} <code>{}</code></td><td class=\"sticky2\">{}</td>",
            escape(index),
            escape(index),
            escape(row.get("cmd").unwrap_or("?")),
            escape(run.explanations.get(number).map_or("", String::as_str))
        );
        for (name, quiet) in names.iter().zip(&quiet) {
            html.push_str(&cell_in(
                row.get(name).unwrap_or(""),
                if *quiet { "quiet" } else { "" },
            ));
        }
        html.push_str("</tr>\n");
    }
    html.push_str("</tbody></table></div></div>\n");
    html
}

/// The entry key, how the clocks were aligned, and the time-series plots.
fn timeseries(run: &Run, series: &[Figure], prefix: &str) -> String {
    let mut html = String::from(
        "<p class=\"muted\">The entries, as the plots label them (shaded alternately; narrow \
         neighbours share one label):</p>\n<ol class=\"key\" start=\"0\">",
    );
    for entry in &run.entries {
        let _ = write!(
            html,
            "<li><code>{}</code> <span class=\"muted\">{:.2}–{:.2} s, {}</span></li>",
            escape(&entry.cmd),
            entry.begin_s,
            entry.end_s,
            words::ms(entry.took_ms)
        );
    }
    html.push_str("</ol>\n");
    let mut alignment = run.alignment.clone();
    if let Some(events) = &run.events {
        let _ = write!(
            alignment,
            " Kernel events carry their own clock (CLOCK_MONOTONIC); they are moved onto the \
             sampler's by the one offset that keeps each entry's events within the entry, \
             good to ±{:.1} ms.",
            events.offset_slack_ms
        );
    }
    let _ = writeln!(html, "<p class=\"muted\">{}</p>", escape(&alignment));
    for f in series {
        html.push_str(&figure(f, prefix));
    }
    html
}

/// Each compared metric per entry: every run's value and the later runs' ratios to a.
fn compare_table(runs: &[&Run]) -> String {
    let mut html = String::from(
        "<div class=\"scroll\"><table class=\"sortable compare\" id=\"compare-table\"><thead><tr><th class=\"text\">entry</th>",
    );
    for metric in &bars::METRICS {
        for (i, _) in runs.iter().enumerate() {
            let _ = write!(
                html,
                "<th title=\"{}\">{} {}<br>({})</th>",
                escape(metric.about),
                escape(metric.title),
                bars::id(i),
                escape(metric.unit)
            );
            if i > 0 {
                let _ = write!(html, "<th>{}/a</th>", bars::id(i));
            }
        }
    }
    html.push_str("</tr></thead><tbody>\n");
    for entry in 0..runs[0].rows.len() {
        let _ = write!(
            html,
            "<tr><td class=\"text\" data-v=\"{entry}\">{}</td>",
            escape(&bars::entry_label(runs[0], entry))
        );
        for metric in &bars::METRICS {
            let base = (metric.value)(runs[0], entry);
            for (i, run) in runs.iter().enumerate() {
                let value = (metric.value)(run, entry);
                let _ = write!(
                    html,
                    "{}",
                    match value {
                        Some(v) => format!(
                            "<td data-v=\"{v}\">{}</td>",
                            if v.fract() == 0.0 {
                                words::count(v)
                            } else {
                                format!("{v:.2}")
                            }
                        ),
                        None => cell(""),
                    }
                );
                if i > 0 {
                    let ratio = bars::ratio_value(value, base)
                        .map_or(String::new(), |ratio| ratio.to_string());
                    let _ = write!(
                        html,
                        "<td class=\"ratio\" data-v=\"{ratio}\">{}</td>",
                        bars::ratio(value, base)
                    );
                }
            }
        }
        html.push_str("</tr>\n");
    }
    html.push_str("</tbody></table></div>\n");
    html
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_keep_empty_apart_from_zero() {
        assert!(cell("").contains("class=\"na\""));
        assert!(cell_in("", "quiet").contains("class=\"na quiet\""));
        assert!(cell("0").contains("data-v=\"0\""));
        assert_eq!(cell("1234567"), "<td data-v=\"1234567\">1,234,567</td>");
        assert_eq!(cell("rss_stat"), "<td class=\"text\">rss_stat</td>");
        assert_eq!(escape("<a&\"b\">"), "&lt;a&amp;&quot;b&quot;&gt;");
    }
}
