//! `entries.jsonl`: the typed record of every entry ([`EntryRecord`]), one JSON object per
//! line. commands.csv and explain.md are views of these records; the report and the Perfetto
//! trace read them back, so they see the same typed values the run measured.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::Path;

use anyhow::{Context, Result};

use crate::record::EntryRecord;

pub const FILE: &str = "entries.jsonl";

pub struct EntriesJsonl {
    out: BufWriter<File>,
}

impl EntriesJsonl {
    pub fn create(path: &Path) -> Result<Self> {
        let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
        Ok(EntriesJsonl {
            out: BufWriter::new(file),
        })
    }

    /// Writes one entry and flushes it to disk, so a crash loses nothing already measured.
    pub fn write(&mut self, record: &EntryRecord) -> Result<()> {
        serde_json::to_writer(&mut self.out, record)?;
        self.out.write_all(b"\n")?;
        self.out.flush().with_context(|| format!("writing {FILE}"))
    }
}

/// Reads the records back, in entry order.
pub fn read(path: &Path) -> Result<Vec<EntryRecord>> {
    let file = File::open(path).with_context(|| {
        format!(
            "reading {} (runs of skillprof before 0.1.0's typed records lack it: run again)",
            path.display()
        )
    })?;
    let mut records = Vec::new();
    for (number, line) in BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("reading {}", path.display()))?;
        let record = serde_json::from_str(&line)
            .with_context(|| format!("{} line {}", path.display(), number + 1))?;
        records.push(record);
    }
    Ok(records)
}
