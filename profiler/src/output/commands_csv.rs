//! `commands.csv`: one row per entry, every metric of the result record, in the order the
//! metric groups write them. Column names carry units; `record::COLUMNS` documents them.

use std::fs::File;
use std::path::Path;

use anyhow::{Context, Result, ensure};

use crate::record::Row;

pub struct CommandsCsv {
    out: csv::Writer<File>,
    header: Option<Vec<String>>,
}

impl CommandsCsv {
    pub fn create(path: &Path) -> Result<Self> {
        let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
        Ok(CommandsCsv {
            out: csv::Writer::from_writer(file),
            header: None,
        })
    }

    /// Writes one entry and flushes it to disk, so a crash loses nothing already measured.
    /// The first row fixes the columns; every later row must have the same ones.
    pub fn write(&mut self, row: &Row) -> Result<()> {
        let names: Vec<String> = row.names().map(str::to_owned).collect();
        match &self.header {
            None => {
                self.out.write_record(&names)?;
                self.header = Some(names);
            }
            Some(header) => ensure!(
                *header == names,
                "commands.csv: a row's columns differ from the header's ({} vs {})",
                names.join(","),
                header.join(",")
            ),
        }
        self.out.write_record(row.values())?;
        self.out.flush().context("writing commands.csv")?;
        Ok(())
    }
}

/// Reads a `commands.csv` back into rows, cells in file order: an empty cell stays empty
/// ("not measured"), never 0.
pub fn read(path: &Path) -> Result<Vec<Row>> {
    let mut csv =
        csv::Reader::from_path(path).with_context(|| format!("reading {}", path.display()))?;
    let header = csv
        .headers()
        .with_context(|| format!("reading the header of {}", path.display()))?
        .clone();
    let mut rows = Vec::new();
    for (number, record) in csv.records().enumerate() {
        let record = record.with_context(|| format!("reading {}", path.display()))?;
        ensure!(
            record.len() == header.len(),
            "{}: row {} has {} cells but the header has {}",
            path.display(),
            number + 1,
            record.len(),
            header.len()
        );
        let mut row = Row::default();
        for (name, value) in header.iter().zip(record.iter()) {
            row.text(name, value);
        }
        rows.push(row);
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_back_what_it_wrote_with_empty_cells_kept_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("commands.csv");
        let mut first = Row::default();
        first
            .int("index", 0)
            .text("cmd", "add_rs")
            .float("took_ms", 1.5)
            .missing("faults_user");
        let mut second = Row::default();
        second
            .int("index", 1)
            .text("cmd", "stop, \"quoted\"")
            .float("took_ms", 2.0)
            .int("faults_user", 0);
        let mut csv = CommandsCsv::create(&path).unwrap();
        csv.write(&first).unwrap();
        csv.write(&second).unwrap();
        drop(csv);
        assert_eq!(read(&path).unwrap(), [first, second]);
    }
}
