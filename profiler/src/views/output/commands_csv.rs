//! `commands.csv`: one row per entry, every cell of the result record's row, in the field
//! table's order. Column names carry units; `record::columns` documents them.

use std::fs::File;
use std::path::Path;

use anyhow::{Context, Result, ensure};

use crate::record::Row;

/// The file's name in a run folder.
pub const FILE: &str = "commands.csv";

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

/// A row of a `commands.csv` read back as text: what `compare --extended` shows as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsvRow(Vec<(String, String)>);

impl CsvRow {
    /// A record's row as commands.csv holds it.
    pub fn of(row: &Row) -> CsvRow {
        CsvRow(row.names().map(str::to_owned).zip(row.values()).collect())
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(name, _)| name.as_str())
    }

    /// The cell `name` as the file holds it (empty: not measured).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, value)| value.as_str())
    }
}

/// Reads a `commands.csv` back, cells in file order: an empty cell stays empty ("not
/// measured"), never 0.
pub fn read(path: &Path) -> Result<Vec<CsvRow>> {
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
        rows.push(CsvRow(
            header
                .iter()
                .zip(record.iter())
                .map(|(name, value)| (name.to_owned(), value.to_owned()))
                .collect(),
        ));
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Column, Unit};

    static INDEX: Column = Column::new("index", Unit::Count, "");
    static CMD: Column = Column::new("cmd", Unit::Text, "");
    static TOOK: Column = Column::new("took_ms", Unit::Ms, "");
    static FAULTS: Column = Column::new("faults_user", Unit::Count, "");

    #[test]
    fn reads_back_what_it_wrote_with_empty_cells_kept_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("commands.csv");
        let mut first = Row::default();
        first
            .put(&INDEX, 0u64)
            .put(&CMD, "add_rs")
            .put(&TOOK, 1.5)
            .put(&FAULTS, None::<u64>);
        let mut second = Row::default();
        second
            .put(&INDEX, 1u64)
            .put(&CMD, "stop, \"quoted\"")
            .put(&TOOK, 2.0)
            .put(&FAULTS, 0u64);
        let mut csv = CommandsCsv::create(&path).unwrap();
        csv.write(&first).unwrap();
        csv.write(&second).unwrap();
        drop(csv);
        let rows = read(&path).unwrap();
        assert_eq!(rows[0].get("took_ms"), Some("1.500"));
        assert_eq!(rows[0].get("faults_user"), Some(""));
        assert_eq!(rows[1].get("cmd"), Some("stop, \"quoted\""));
        assert_eq!(rows[1].get("faults_user"), Some("0"));
    }
}
