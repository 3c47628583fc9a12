//! `export --format events`: events.csv split by kind, one file per kind with one column per
//! field, so that each column holds one type and DuckDB, pandas or a spreadsheet read it
//! without parsing (`SELECT entry, count(*) FROM 'events/mmap.csv' GROUP BY entry`).
//! events.csv itself keeps its one `fields` column: old runs and the report read it.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use anyhow::{Context, Result};

use super::read::{Event, Run};
use crate::record::event::Field;

/// The columns every kind's file starts with.
const COMMON: [&str; 6] = ["ts_ns", "t_s", "unix_s", "entry", "cmd", "tid"];

/// Writes one CSV per event kind into `dir`; returns each kind with its row count.
pub fn write(run: &Run, dir: &Path) -> Result<Vec<(&'static str, usize)>> {
    let events = run.events.as_ref().with_context(|| {
        format!(
            "{} has no events.csv: only a run made with --events has kernel events to export",
            run.folder.display()
        )
    })?;
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut kinds: BTreeMap<&'static str, Vec<&Event>> = BTreeMap::new();
    for event in &events.list {
        kinds.entry(event.body.name()).or_default().push(event);
    }
    let mut written = Vec::new();
    for (kind, events) in kinds {
        let path = dir.join(format!("{kind}.csv"));
        write_kind(run, &events, &path).with_context(|| format!("writing {}", path.display()))?;
        written.push((kind, events.len()));
    }
    Ok(written)
}

/// The columns of one kind's file after [`COMMON`]: the union of its events' fields in the
/// order they first appear (faults seen by two mechanisms carry different fields).
fn field_columns(fields: &[Vec<(&'static str, Field)>]) -> Vec<&'static str> {
    let mut columns: Vec<&'static str> = Vec::new();
    for (name, value) in fields.iter().flatten() {
        let names = match value {
            Field::Advice(_) => [*name, "advice_class"].to_vec(),
            _ => vec![*name],
        };
        for name in names {
            if !columns.contains(&name) {
                columns.push(name);
            }
        }
    }
    columns
}

fn write_kind(run: &Run, events: &[&Event], path: &Path) -> Result<()> {
    let fields: Vec<_> = events.iter().map(|event| event.body.fields()).collect();
    let columns = field_columns(&fields);
    let mut out = csv::Writer::from_path(path)?;
    out.write_record(COMMON.iter().chain(&columns))?;
    let unix_at = run.unix_clock();
    // The run's entries are in index order, one per record.
    let cmd_of = |entry: u32| {
        run.entries
            .get(entry as usize)
            .map_or("", |span| span.cmd.as_str())
    };
    for (event, fields) in events.iter().zip(fields) {
        let mut cells: BTreeMap<&str, String> = BTreeMap::new();
        for (name, value) in fields {
            // Numbers as decimal numbers: DuckDB types the column, hex would make it text.
            let cell = match value {
                Field::Int(number) => number.to_string(),
                Field::Hex(number) | Field::Advice(number) => number.to_string(),
                Field::Name(name) => name.to_owned(),
            };
            if let Some(class) = value.advice_class() {
                cells.insert("advice_class", class.to_owned());
            }
            cells.insert(name, cell);
        }
        let unix_s = unix_at
            .as_ref()
            .map(|at| format!("{:.6}", at(event.t_s)))
            .unwrap_or_default();
        let mut row = vec![
            event.ts_ns.to_string(),
            format!("{:.6}", event.t_s),
            unix_s,
            event.entry.to_string(),
            cmd_of(event.entry).to_owned(),
            event.tid.to_string(),
        ];
        row.extend(
            columns
                .iter()
                .map(|column| cells.remove(column).unwrap_or_default()),
        );
        out.write_record(&row)?;
    }
    out.flush()?;
    Ok(())
}
