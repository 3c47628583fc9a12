//! `run --json`: the run's typed records as one JSON document on stdout, for jq, pandas or a
//! CI step, the way hyperfine's `--export-json` is. The same records as meta.json and
//! entries.jsonl, so every figure is the one commands.csv shows.

use std::io::Write;
use std::path::Path;

use anyhow::Result;
use serde::Serialize;

use crate::record::{EntryRecord, RunInfo};

#[derive(Serialize)]
struct RunDocument<'a> {
    run_dir: &'a Path,
    meta: &'a RunInfo,
    entries: &'a [EntryRecord],
}

pub fn write(
    mut out: impl Write,
    run_dir: &Path,
    meta: &RunInfo,
    entries: &[EntryRecord],
) -> Result<()> {
    serde_json::to_writer_pretty(
        &mut out,
        &RunDocument {
            run_dir,
            meta,
            entries,
        },
    )?;
    writeln!(out)?;
    Ok(())
}
