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

/// A CSV row as a JSON object: numbers as numbers, an empty (unmeasured) cell as null.
pub fn row_object(row: &Row) -> Value {
    let cells: serde_json::Map<String, Value> = row
        .names()
        .zip(row.values())
        .map(|(name, value)| (name.to_owned(), cell(value)))
        .collect();
    Value::Object(cells)
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
        let mut row = Row::default();
        row.text("band", "low")
            .float("slowdown", 1.5)
            .missing("psi");
        assert_eq!(
            row_object(&row),
            json!({"band": "low", "slowdown": 1.5, "psi": null})
        );
        assert_eq!(cell("inf"), json!("inf"));
    }
}
