//! explain.md, and its only writer: from one entry's record to a paragraph of evidence: what the entry cost in memory and time,
//! which kernel activity it caused, and, for `stop`, where the shutdown's time went. Only
//! what was measured speaks; an unmeasured figure is left unsaid, never read as zero.

mod entry;
mod run;
mod skills;
mod stop;
mod time;

use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use anyhow::{Context, Result};

use crate::record::{EntryRecord, RunInfo};
use crate::views::output::{entries_jsonl, meta};

pub use entry::{boost_moved_the_band, failures, one_stall, paragraph};
pub use time::cpu_split;

/// explain.md: a header about how the run was measured, then one paragraph per entry.
pub fn document(info: &RunInfo, records: &[EntryRecord]) -> String {
    let mut text = format!("# {} ({})\n\n", info.cmds.file, info.run);
    for line in run::head(info, records) {
        let _ = writeln!(text, "- {line}");
    }
    text.push('\n');
    for paragraph in paragraphs(info, records) {
        let _ = writeln!(text, "{paragraph}\n");
    }
    text
}

/// Each entry's paragraph, in entry order: what explain.md says of it, and a report shows
/// beside it.
pub fn paragraphs(info: &RunInfo, records: &[EntryRecord]) -> Vec<String> {
    (0..records.len())
        .map(|index| paragraph(&records[index], &records[..index], Some(&info.machine)))
        .collect()
}

/// The file's name, in a run folder or beside a capacity prediction.
pub const FILE: &str = "explain.md";

/// The heading of the section `skillprof capacity` adds below a run's entries.
pub const CAPACITY_HEADING: &str = "## Capacity";

/// Writes `section`, a capacity prediction's, as the Capacity section of `folder`'s
/// explain.md: below the run's own document when `folder` is a run folder (rendered again
/// from its meta.json and entries.jsonl), alone otherwise. A new prediction replaces the last.
pub fn write_capacity(folder: &Path, section: &str) -> Result<()> {
    let entries = folder.join(entries_jsonl::FILE);
    let mut text = match folder.join(meta::FILE).exists() && entries.exists() {
        true => document(&meta::read(folder)?, &entries_jsonl::read(&entries)?),
        false => String::new(),
    };
    text.push_str(section);
    write(folder, &text)
}

/// Writes `text`, a [`document`], as `folder`'s explain.md.
pub fn write(folder: &Path, text: &str) -> Result<()> {
    let path = folder.join(FILE);
    fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
}
