//! From one entry's record to a paragraph of evidence: what the entry cost in memory and time,
//! which kernel activity it caused, and, for `stop`, where the shutdown's time went. Only
//! what was measured speaks; an unmeasured figure is left unsaid, never read as zero.

mod entry;
mod skills;
mod stop;

use std::fmt::Write as _;

use crate::record::EntryRecord;

pub use entry::{failures, paragraph};

/// explain.md: a header about how the run was measured, then one paragraph per entry.
pub fn document(title: &str, measurement: &[String], records: &[EntryRecord]) -> String {
    let mut text = format!("# {title}\n\n");
    for line in measurement {
        let _ = writeln!(text, "- {line}");
    }
    text.push('\n');
    for (index, record) in records.iter().enumerate() {
        let _ = writeln!(text, "{}\n", paragraph(record, &records[..index]));
    }
    text
}

/// The entry paragraphs of an explain.md that [`document`] wrote, in entry order: what a
/// report shows beside each entry, read back rather than rewritten from a CSV.
pub fn paragraphs(document: &str) -> Vec<String> {
    // A later section (`skillprof capacity` adds one) is not an entry's.
    let entries = document.split("\n## ").next().unwrap_or(document);
    entries
        .split("\n\n")
        .skip(2)
        .map(str::trim)
        .filter(|paragraph| !paragraph.is_empty())
        .map(str::to_owned)
        .collect()
}
