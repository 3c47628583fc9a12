//! `--json` for commands that print as they go (pressure, capacity): stdout carries one JSON
//! document and nothing else, the way `cargo --message-format json` keeps it clean. Claiming
//! it points file descriptor 1 at stderr for the rest of the process, so every progress line,
//! and whatever a forked helper (the balloon, a guardian) prints, goes to stderr with no
//! change to the code that prints it; the document goes to the real stdout, kept aside.

use std::fs::File;
use std::io::Write;

use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::{Value, json};

use crate::record::Row;

pub struct JsonStdout(File);

impl JsonStdout {
    pub fn claim() -> Result<JsonStdout> {
        std::io::stdout().flush()?;
        let real = rustix::io::dup(std::io::stdout()).context("duplicating stdout")?;
        rustix::stdio::dup2_stdout(std::io::stderr()).context("pointing stdout at stderr")?;
        Ok(JsonStdout(File::from(real)))
    }

    /// Writes the document, pretty-printed, and a newline.
    pub fn write(mut self, document: &impl Serialize) -> Result<()> {
        serde_json::to_writer_pretty(&mut self.0, document)?;
        writeln!(self.0)?;
        self.0.flush()?;
        Ok(())
    }
}

/// A row as a JSON object: integers as integers, other numbers as the CSV rounds them,
/// text as text, an unmeasured cell as null.
pub fn row_object(row: &Row) -> Value {
    let cells: serde_json::Map<String, Value> = row
        .cells()
        .iter()
        .map(|cell| (cell.name.to_string(), typed(&cell.value)))
        .collect();
    Value::Object(cells)
}

fn typed(value: &crate::record::Value) -> Value {
    use crate::record::Value as Cell;
    match value {
        Cell::Absent => Value::Null,
        Cell::Int(int) => i64::try_from(*int).map_or_else(|_| json!(*int as f64), |i| json!(i)),
        // Rounded as the CSV writes it; a non-finite float stays text.
        Cell::Float(_) => cell(&value.to_string()),
        Cell::Text(text) => json!(text),
    }
}

/// One cell: a finite number, null when empty, else the text.
pub fn cell(value: &str) -> Value {
    match value.parse::<f64>() {
        Ok(number) if number.is_finite() => json!(number),
        _ if value.is_empty() => Value::Null,
        _ => json!(value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_keep_their_type() {
        use crate::record::{Column, Unit};
        static BAND: Column = Column::new("band", Unit::Text, "");
        static SLOWDOWN: Column = Column::new("slowdown", Unit::Percent, "");
        static READS: Column = Column::new("reads", Unit::Count, "");
        static PSI: Column = Column::new("psi", Unit::Us, "");
        let mut row = Row::default();
        row.put(&BAND, "low")
            .put(&SLOWDOWN, 1.23456)
            .put(&READS, 12u64)
            .put(&PSI, None::<u64>);
        assert_eq!(
            row_object(&row),
            json!({"band": "low", "slowdown": 1.235, "reads": 12, "psi": null})
        );
        assert_eq!(cell("inf"), json!("inf"));
    }
}
