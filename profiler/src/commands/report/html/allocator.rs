//! The instance allocator of the run's host: which one it ran (on demand or pooled, and the
//! pool's settings), and what it cost per request, the figures `skillprof pool` compares
//! ([`RunFigures`]), read from this run alone.

use maud::{Markup, html};

use super::super::read::Run;
use crate::ground::units::number;
use crate::record::pool::{FIGURES, RunFigures};
use crate::record::profile::HostProfile;

pub(super) fn allocator(run: &Run) -> Markup {
    let figures = RunFigures::of(&run.records);
    html! {
        p { (which(run)) }
        @if figures.executions == 0 {
            p class="muted" {
                "No entry executed a skill without compiling one, so there is nothing per request."
            }
        } @else {
            p {
                "Per request, over the " (figures.executions) " executions of the entries that "
                "compiled nothing (a skill's first request compiles it). "
                code { "skillprof pool CMDS" } " runs the workload under each allocator "
                "configuration in interleaved rounds and says what to set (docs/pooling.md)."
            }
            table class="facts" {
                thead { tr { th { "figure" } th { "value" } th { "what it is" } } }
                tbody {
                    @for figure in FIGURES {
                        @if let Some(value) = (figure.value)(&figures) {
                            tr {
                                td { (figure.name) }
                                td { (number(value)) " " (figure.unit) }
                                td { (figure.help) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The allocator in words: from skillhost's effective configuration, or from the host's
/// environment where its profile switches pooling by a variable.
fn which(run: &Run) -> String {
    let host = &run.meta.host;
    if let Some(engine) = host.config.as_ref().and_then(|config| config.get("engine")) {
        return match engine["allocator"].as_str() {
            Some("pooling") => {
                let knobs: Vec<String> = engine["pool"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(knob, value)| format!("{}={value}", knob.trim_start_matches("pool_")))
                    .collect();
                format!("The host pooled its instances: {}.", knobs.join(", "))
            }
            Some(other) => format!("The host's allocator: {other}."),
            None => "The host's configuration does not name its allocator.".to_owned(),
        };
    }
    let switch = HostProfile::load(&host.spec.profile)
        .ok()
        .and_then(|profile| profile.pooling);
    match switch {
        Some(switch) => match switch.is_on(&host.spec.env) {
            true => format!(
                "The host pooled its instances ({}), at wasmtime's defaults.",
                switch.setting()
            ),
            false => format!(
                "The host allocated on demand (its default; {} pools).",
                switch.setting()
            ),
        },
        None => "The host does not say which allocator it ran.".to_owned(),
    }
}
