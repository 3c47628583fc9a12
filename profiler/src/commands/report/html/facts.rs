//! What a run's page and a comparison both say of a run: its status, machine, host, probes
//! and overhead.

use maud::{Markup, html};

use super::super::read::Run;
use super::*;
use crate::ground::units;
use crate::producers::probes::CostMode;
use crate::record::Status;

/// One fact about a run.
pub(super) type Fact = fn(&Run) -> Markup;

/// What a run's header and a comparison's table of runs both say about each run.
pub(super) const RUN_FACTS: [(&str, Fact); 7] = [
    ("status", status),
    ("machine", |r| html! { (machine(r)) }),
    ("kernel", |r| html! { (kernel(r)) }),
    ("host", host),
    ("host configuration", host_config),
    ("probes live", probes_live),
    ("profiler overhead", overhead),
];

pub(super) fn status(run: &Run) -> Markup {
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

pub(super) fn machine(run: &Run) -> String {
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

pub(super) fn kernel(run: &Run) -> String {
    let m = &run.meta.machine;
    format!("Linux {} {}", m.kernel_release, m.kernel_version)
}

pub(super) fn host(run: &Run) -> Markup {
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
pub(super) fn host_config(run: &Run) -> Markup {
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

pub(super) fn flatten(prefix: &str, value: &serde_json::Value, out: &mut Vec<(String, String)>) {
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

pub(super) fn probes_live(run: &Run) -> Markup {
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
            "; left out by the " (probes.mode.map_or("host-only", |m| m.as_str()))
            " mode, since they run on every process: "
            (joined(exact_only, ", ", |s| html! { (s.probe) }))
            " (" code { "--probes exact" } " attaches them)"
        }
    }
}

pub(super) fn overhead(run: &Run) -> Markup {
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
