//! From one result row to a paragraph of evidence: what the entry cost in memory and time,
//! which kernel activity it caused, and, for `stop`, where the shutdown's time went. Only
//! measured cells speak; an empty cell is left unsaid, never read as zero.

mod entry;
mod stop;

use std::fmt::Write as _;

use crate::record::Row;

pub use entry::paragraph;

/// The values of one row, by column name.
pub(crate) struct Cells<'a>(&'a Row);

impl<'a> Cells<'a> {
    pub(crate) fn new(row: &'a Row) -> Self {
        Cells(row)
    }

    fn text(&self, name: &str) -> Option<&'a str> {
        self.0.get(name).filter(|value| !value.is_empty())
    }

    fn num(&self, name: &str) -> Option<f64> {
        self.0.number(name)
    }

    /// A measured number that is not zero.
    fn some(&self, name: &str) -> Option<f64> {
        self.num(name).filter(|value| *value != 0.0)
    }
}

/// explain.md: a header about how the run was measured, then one paragraph per entry.
pub fn document(title: &str, measurement: &[String], rows: &[Row]) -> String {
    let mut text = format!("# {title}\n\n");
    for line in measurement {
        let _ = writeln!(text, "- {line}");
    }
    text.push('\n');
    for row in rows {
        let _ = writeln!(text, "{}\n", paragraph(row));
    }
    text
}
