//! `export --format openmetrics`: a run as timestamped OpenMetrics text, for a Prometheus
//! backfill (`promtool tsdb create-blocks-from openmetrics FILE DIR`) and so for Grafana.
//! Every numeric column of samples.csv becomes a gauge `skillprof_sample_<column>`, one point
//! per reading; every numeric column of commands.csv a gauge `skillprof_entry_<column>`, one
//! point per entry at its end, labelled with the entry and its command. Names keep the
//! columns' units (`_kb`, `_ms`) so each reads as its column's documentation says.

use anyhow::{Context, Result};

use super::read::Run;
use crate::views::output::openmetrics::{Families, Family, Kind, escape};
use crate::views::output::samples_csv;

/// The OpenMetrics text of `run`; returns it with the number of points.
pub fn render(run: &Run) -> Result<(String, usize)> {
    let unix_at = run.unix_clock().with_context(|| {
        format!(
            "{}: samples.csv has no unix_s column (a run from an older skillprof), so its \
             points cannot be placed in time",
            run.folder.display()
        )
    })?;
    let run_label = format!("run=\"{}\"", escape(&run.name));
    let mut families = Families::default();

    for (column, values) in run.samples.readings() {
        let documented = samples_csv::documentation(column);
        let help = match documented {
            Some(documented) => format!("samples.csv {column}: {}", documented.help),
            None => format!("samples.csv column {column}"),
        };
        let family = Family {
            kind: Kind::Gauge,
            unit: documented.and_then(|documented| documented.unit.openmetrics()),
            help: &help,
        };
        let mut last_ms = None;
        for (&t_s, value) in run.samples.t_s.iter().zip(values) {
            let Some(value) = value else { continue };
            // A series takes one point per timestamp: a boundary sample can share its
            // millisecond with a periodic one.
            let ms = (unix_at(t_s) * 1e3).round() as i64;
            if last_ms.is_some_and(|last| ms <= last) {
                continue;
            }
            last_ms = Some(ms);
            families.point("sample", column, &family, &run_label, *value, Some(ms));
        }
    }

    // The run's entries are in index order, one per record and row.
    let entries: Vec<_> = run
        .entries
        .iter()
        .zip(&run.rows)
        .map(|(span, row)| {
            let labels = format!(
                "{run_label},entry=\"{}\",cmd=\"{}\"",
                span.index,
                escape(&span.cmd)
            );
            (row, labels, (unix_at(span.end_s) * 1e3).round() as i64)
        })
        .collect();
    let columns = run.rows.first().map_or(&[][..], |row| row.cells());
    for (i, cell) in columns.iter().enumerate() {
        if std::ptr::eq(cell.column, &crate::record::INDEX_COLUMN) {
            continue;
        }
        let help = format!("commands.csv {}: {}", cell.name, cell.column.help);
        let family = Family {
            kind: Kind::Gauge,
            unit: cell.column.unit.openmetrics(),
            help: &help,
        };
        // Every row has the same columns in the same order (commands.csv's rule).
        for (row, labels, ms) in &entries {
            if let Some(value) = row.cells().get(i).and_then(|c| c.value.number_as_written()) {
                families.point("entry", &cell.name, &family, labels, value, Some(*ms));
            }
        }
    }
    Ok((families.text(), families.points()))
}
