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
