//! File formats: each knows how to read or write its format, nothing of how the numbers in
//! it were measured.

pub mod commands_csv;
pub mod compare;
pub mod entries_jsonl;
pub mod entry_rows_csv;
pub mod harness_log;
pub mod json_stdout;
pub mod meta;
pub mod openmetrics;
pub mod pprof;
pub mod pressure_csv;
pub mod profile;
pub mod run_json;
pub mod samples_csv;
pub mod stacks;

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, ensure};

use crate::record::{self, field, probes, slo};

/// An experiment's folder (`slo`, `pool`): `run_dir` itself, or `out/PREFIX-STAMP`; made if
/// missing, and refused unless empty.
pub fn experiment_folder(run_dir: Option<&Path>, out: &Path, prefix: &str) -> Result<PathBuf> {
    let stamp = chrono::Local::now().format("%y%m%d_%H%M%S");
    let folder = run_dir.map_or_else(|| out.join(format!("{prefix}-{stamp}")), Path::to_path_buf);
    fs::create_dir_all(&folder).with_context(|| format!("creating {}", folder.display()))?;
    ensure!(
        fs::read_dir(&folder)?.next().is_none(),
        "{} is not empty: an experiment folder holds one experiment",
        folder.display()
    );
    Ok(folder)
}

/// docs/columns.md's tables: commands.csv's ([`record::columns`]), skills.csv's, samples.csv's
/// and `skillprof slo`'s steps.csv.
pub fn columns_markdown() -> String {
    format!(
        "{}\n## skills.csv\n\nAfter the entry's `entry` and `cmd`, one row per skill and phase \
         of the entry (the host's markers name them):\n\n{}\n## samples.csv\n\nOne row per \
         sample, every interval (100 ms by default) and at both boundaries of every entry; a \
         value not measured is an empty cell, never 0:\n\n{}\n## steps.csv (skillprof slo)\n\n\
         One row per step of the experiment, searches and load points alike:\n\n{}",
        field::markdown(&record::columns()),
        field::markdown(probes::SkillRow::COLUMNS),
        field::markdown(&samples_csv::columns()),
        field::markdown(slo::SloStep::COLUMNS)
    )
}

#[cfg(test)]
mod tests {
    /// `SKILLPROF_BLESS=1 cargo test -p skillprof --lib output` rewrites docs/columns.md.
    #[test]
    fn the_column_reference_documents_every_column() {
        let reference = crate::ground::generated_docs::Generated {
            file: "docs/columns.md",
            name: "columns",
            bless: "SKILLPROF_BLESS=1 cargo test -p skillprof --lib output",
        };
        reference.check(&super::columns_markdown()).unwrap();
    }
}
