//! The probe tables people read: which probe attached by which mechanism (and why not),
//! and what each BPF program cost. `skillprof probes` and every run print the same ones.

use std::fmt::Write as _;

use super::session::CostMode;
use crate::record::probes::{ProbeCosts, ProbeStatus};

/// probe, mechanism, attached, detail: one line per probe.
pub fn statuses(statuses: &[ProbeStatus]) -> String {
    let mut rows = vec![["probe", "mechanism", "attached", "detail"].map(String::from)];
    rows.extend(statuses.iter().map(|s| {
        [
            s.probe.name().into(),
            s.mechanism.as_str().into(),
            if s.attached { "yes" } else { "no" }.into(),
            s.detail.clone(),
        ]
    }));
    aligned(&rows)
}

/// Runs and ns/run per program (BPF stats), then the event stream's count and losses.
pub fn costs(costs: &ProbeCosts) -> String {
    let source = match costs.mode() {
        CostMode::Measured(source) => source,
        CostMode::Modelled(modelled) => {
            return format!("BPF cost: modelled, {modelled}\n") + &events_line(costs);
        }
        CostMode::Unknown(why) => {
            return format!("BPF cost: not measured ({why})\n") + &events_line(costs);
        }
    };
    let mut text = format!("BPF cost (BPF stats via {source:?}):\n");
    let mut rows = vec![["probe", "program", "runs", "ns/run"].map(String::from)];
    rows.extend(costs.programs.iter().map(|p| {
        [
            p.probe.name().into(),
            p.program.clone(),
            p.runs.to_string(),
            p.ns_per_run.map_or("-".into(), |ns| format!("{ns:.0}")),
        ]
    }));
    text.push_str(&aligned(&rows));
    text + &events_line(costs)
}

fn events_line(costs: &ProbeCosts) -> String {
    if !costs.events_streamed {
        return String::new();
    }
    format!(
        "events: {} sent, {} lost, {} written\n",
        costs.events_sent,
        costs.events_lost,
        costs.events_written.unwrap_or(0)
    )
}

/// Left-aligned columns two spaces apart; the last column is not padded.
fn aligned<const N: usize>(rows: &[[String; N]]) -> String {
    let mut widths = [0; N];
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let mut text = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, (cell, width)) in row.iter().zip(widths).enumerate() {
            if i + 1 == N {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:width$}  ");
            }
        }
        let _ = writeln!(text, "{}", line.trim_end());
    }
    text
}
