//! CSV files with several rows per entry, each row led by the entry's index and command:
//! - `skills.csv`: entry × skill × phase, from the probes' skill rows
//!   (`probes::markers::SkillRow`): what each skill's compiles, instantiations and calls cost
//!   in faults and address-space syscalls, and the unattributed `host` row. Within an entry
//!   the rows sum to the entry's own counts in commands.csv. Only with a host with markers.
//! - `load.csv`: entry × skill of every `l_execute_all` and `lo_execute`, from Locust's merged
//!   figures
//!   (`locust::LoadRow`), with its `Aggregated` row: the total of commands.csv's `load_*`.

use std::fs::File;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::record::{Column, Row, Unit};

/// The first columns of skills.csv and load.csv: which entry a row belongs to.
pub static ENTRY: Column = Column::new(
    "entry",
    Unit::Count,
    "the entry's index, as commands.csv's index",
);
pub static CMD: Column = Column::new("cmd", Unit::Text, "the entry, as commands.csv's cmd");

pub const SKILLS: &str = "skills.csv";
pub const LOAD: &str = "load.csv";

pub struct EntryRowsCsv {
    path: PathBuf,
    /// Created with the first rows: a run with none has no file.
    out: Option<csv::Writer<File>>,
}

impl EntryRowsCsv {
    pub fn new(folder: &Path, file: &str) -> Self {
        EntryRowsCsv {
            path: folder.join(file),
            out: None,
        }
    }

    /// Writes one entry's rows (each written by `cells`) and flushes them, so a crash loses
    /// nothing already measured.
    pub fn write<T>(
        &mut self,
        index: usize,
        cmd: &str,
        rows: &[T],
        cells: impl Fn(&T, &mut Row),
    ) -> Result<()> {
        for item in rows {
            let mut row = Row::default();
            row.put(&ENTRY, index).put(&CMD, cmd);
            cells(item, &mut row);
            let out = match &mut self.out {
                Some(out) => out,
                None => {
                    let file = File::create(&self.path)
                        .with_context(|| format!("creating {}", self.path.display()))?;
                    let mut out = csv::Writer::from_writer(file);
                    out.write_record(row.names())?;
                    self.out.insert(out)
                }
            };
            out.write_record(row.values())?;
        }
        if let Some(out) = &mut self.out {
            out.flush()
                .with_context(|| format!("writing {}", self.path.display()))?;
        }
        Ok(())
    }
}
