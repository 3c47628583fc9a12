//! `entries.jsonl`: the typed record of every entry ([`EntryRecord`]), one JSON object per
//! line. commands.csv and explain.md are views of these records; the report and the Perfetto
//! trace read them back, so they see the same typed values the run measured.

use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::Path;

use anyhow::{Context, Result};

use crate::record::EntryRecord;

pub const FILE: &str = "entries.jsonl";

pub struct EntriesJsonl {
    file: File,
    /// The length of the whole lines written.
    len: u64,
}

impl EntriesJsonl {
    pub fn create(path: &Path) -> Result<Self> {
        let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
        Ok(EntriesJsonl { file, len: 0 })
    }

    /// Writes one entry in one write, so a crash loses nothing already measured; a write
    /// that fails (the disk full) is cut off again, so the entries before it stay readable.
    pub fn write(&mut self, record: &EntryRecord) -> Result<()> {
        let mut line = serde_json::to_vec(record)?;
        line.push(b'\n');
        if let Err(error) = self.file.write_all(&line) {
            let _ = self.file.set_len(self.len);
            let _ = self.file.seek(SeekFrom::Start(self.len));
            return Err(error).with_context(|| format!("writing {FILE}"));
        }
        self.len += line.len() as u64;
        Ok(())
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
