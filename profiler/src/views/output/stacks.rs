//! `stacks/ENTRY.folded` and `stacks/ENTRY.svg`: one entry's stacks (`probes::stacks::
//! EntryStacks`) as folded lines (`skill;kind;outermost;...;innermost COUNT`, the format
//! flamegraph tools read) and as an inferno flamegraph.

use std::fs::{self, File};
use std::io::{BufWriter, Write as _};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use inferno::flamegraph::{self, Options};

use crate::producers::probes::stacks::EntryStacks;

pub const DIR: &str = "stacks";

/// The folded file of entry `index` in run folder `folder`.
pub fn folded_path(folder: &Path, index: usize) -> PathBuf {
    folder.join(DIR).join(format!("{index}.folded"))
}

pub fn write(folder: &Path, index: usize, cmd: &str, stacks: &EntryStacks) -> Result<()> {
    let folded = folded_path(folder, index);
    let dir = folded.parent().expect("inside the stacks folder");
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let lines: Vec<String> = stacks
        .folded
        .iter()
        .map(|(stack, count)| format!("{stack} {count}"))
        .collect();
    let mut out = BufWriter::new(
        File::create(&folded).with_context(|| format!("creating {}", folded.display()))?,
    );
    for line in &lines {
        writeln!(out, "{line}")?;
    }
    out.flush()
        .with_context(|| format!("writing {}", folded.display()))?;
    if lines.is_empty() {
        // inferno refuses an empty profile; the folded file says there was nothing.
        return Ok(());
    }
    let svg = folded.with_extension("svg");
    let mut options = Options::default();
    options.title = format!("{cmd}: page faults and address-space syscalls by stack");
    options.count_name = "events".to_owned();
    let file = File::create(&svg).with_context(|| format!("creating {}", svg.display()))?;
    flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), file)
        .with_context(|| format!("writing {}", svg.display()))
}
