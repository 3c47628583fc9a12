//! `export --format openmetrics`: a run as timestamped OpenMetrics text, for a Prometheus
//! backfill (`promtool tsdb create-blocks-from openmetrics FILE DIR`) and so for Grafana.
//! Every numeric column of samples.csv becomes a gauge `skillprof_sample_<column>`, one point
//! per reading; every numeric column of commands.csv a gauge `skillprof_entry_<column>`, one
//! point per entry at its end, labelled with the entry and its command. Names keep the
//! columns' units (`_kb`, `_ms`) so each reads as its column's documentation says.

use std::fmt::Write as _;

use anyhow::{Context, Result};

use super::read::Run;

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
    let mut text = String::new();
    let mut points = 0;

    for (column, values) in run.samples.readings() {
        let name = metric_name("sample", column);
        family(&mut text, &name, &format!("samples.csv column {column}"));
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
            point(&mut text, &name, &run_label, *value, ms);
            points += 1;
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
        if cell.name == "index" {
            continue;
        }
        // Every row has the same columns in the same order (commands.csv's rule).
        let values: Vec<_> = entries
            .iter()
            .filter_map(|(row, labels, ms)| {
                let value = row.cells().get(i)?.value.number_as_written()?;
                Some((labels, value, *ms))
            })
            .collect();
        if values.is_empty() {
            continue;
        }
        let name = metric_name("entry", &cell.name);
        family(
            &mut text,
            &name,
            &format!("commands.csv {}: {}", cell.name, cell.column.help),
        );
        for (labels, value, ms) in values {
            point(&mut text, &name, labels, value, ms);
            points += 1;
        }
    }
    text.push_str("# EOF\n");
    Ok((text, points))
}

/// `skillprof_<group>_<column>`, with anything a metric name cannot hold made `_`.
pub(crate) fn metric_name(group: &str, column: &str) -> String {
    let column: String = column
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("skillprof_{group}_{column}")
}

fn family(text: &mut String, name: &str, help: &str) {
    let _ = writeln!(text, "# TYPE {name} gauge");
    let _ = writeln!(text, "# HELP {name} {}", escape(help));
}

/// One point; OpenMetrics timestamps are seconds, here to the millisecond.
fn point(text: &mut String, name: &str, labels: &str, value: f64, ms: i64) {
    let _ = writeln!(
        text,
        "{name}{{{labels}}} {value} {}.{:03}",
        ms.div_euclid(1000),
        ms.rem_euclid(1000)
    );
}

/// Label values and help text escape backslash, double quote and newline.
pub(crate) fn escape(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_labels_are_what_the_format_allows() {
        assert_eq!(
            metric_name("entry", "zone_0_DMA32_min_free_pages"),
            "skillprof_entry_zone_0_DMA32_min_free_pages"
        );
        assert_eq!(metric_name("sample", "a-b.c"), "skillprof_sample_a_b_c");
        assert_eq!(escape("say \"hi\"\\\n"), "say \\\"hi\\\"\\\\\\n");
        let mut text = String::new();
        point(&mut text, "m", "run=\"r\"", 1.5, 1_795_000_000_250);
        assert_eq!(text, "m{run=\"r\"} 1.5 1795000000.250\n");
    }
}
