//! What consumes a run's records, behind one interface: each entry's record as it ends
//! (run.log, commands.csv, entries.jsonl, skills.csv, load.csv), and the run at its end
//! (explain.md, the summary on stdout). Every file is a view of the records and the run's
//! info; none is read back to make another.

use std::fs::File;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use chrono::NaiveDateTime;

use crate::record::locust::LoadRow;
use crate::record::{EntryRecord, RunInfo};
use crate::views::output::commands_csv::{self, CommandsCsv};
use crate::views::output::entries_jsonl::{self, EntriesJsonl};
use crate::views::output::entry_rows_csv::{self, EntryRowsCsv};
use crate::views::output::harness_log::{self, Header, LogWriter};
use crate::views::output::{compare, run_json};
use crate::{producers::probes, views::explain};

/// The run as it ended, for the sinks that speak of the whole run.
pub struct RunEnd<'a> {
    pub folder: &'a Path,
    pub info: &'a RunInfo,
    pub records: &'a [EntryRecord],
    /// explain.md's text, rendered once for the file and the terminal.
    pub explanation: &'a str,
}

pub trait Sink {
    /// One entry ended: written and flushed now, so that a crash loses nothing measured.
    fn entry(&mut self, record: &EntryRecord) -> Result<()>;

    /// The run ended, however it did, with meta.json complete.
    fn run(&mut self, _end: &RunEnd<'_>) -> Result<()> {
        Ok(())
    }
}

/// The sinks of a run folder, in the order they write: `log` names the run log, which
/// begins with `header`.
pub fn all(log: &LogFile, folder: &Path, json: bool) -> Result<Vec<Box<dyn Sink>>> {
    let file =
        File::create(&log.path).with_context(|| format!("creating {}", log.path.display()))?;
    Ok(vec![
        Box::new(LogWriter::new(file, &log.header)?),
        Box::new(CommandsCsv::create(&folder.join(commands_csv::FILE))?),
        Box::new(EntriesJsonl::create(&folder.join(entries_jsonl::FILE))?),
        Box::new(SkillsCsv(EntryRowsCsv::new(folder, entry_rows_csv::SKILLS))),
        Box::new(LoadCsv(EntryRowsCsv::new(folder, entry_rows_csv::LOAD))),
        Box::new(ExplainMd),
        Box::new(Summary {
            log: log.clone(),
            json,
        }),
    ])
}

/// The 2024 harness's run log: where it is, its header, and when the run began.
#[derive(Clone)]
pub struct LogFile {
    pub path: PathBuf,
    pub header: Header,
    pub started: NaiveDateTime,
}

impl Sink for LogWriter<File> {
    fn entry(&mut self, record: &EntryRecord) -> Result<()> {
        Ok(self.write_entry(&harness_log::LoggedEntry::from(&record.measure))?)
    }
}

impl Sink for CommandsCsv {
    fn entry(&mut self, record: &EntryRecord) -> Result<()> {
        self.write(&record.row())
    }
}

impl Sink for EntriesJsonl {
    fn entry(&mut self, record: &EntryRecord) -> Result<()> {
        self.write(record)
    }
}

/// skills.csv: the entry's rows by skill and phase, with a host that marks its work.
struct SkillsCsv(EntryRowsCsv);

impl Sink for SkillsCsv {
    fn entry(&mut self, record: &EntryRecord) -> Result<()> {
        let Some(probes) = &record.probes else {
            return Ok(());
        };
        let Some(rows) = &probes.skills else {
            return Ok(());
        };
        let counted = probes.calls_by_skill();
        let measure = &record.measure;
        self.0
            .write(measure.index, &measure.cmd, rows, |row, cells| {
                row.write_cells(cells, counted)
            })
    }
}

/// load.csv: a load line's rows by skill, and their total.
struct LoadCsv(EntryRowsCsv);

impl Sink for LoadCsv {
    fn entry(&mut self, record: &EntryRecord) -> Result<()> {
        let Some(load) = &record.load else {
            return Ok(());
        };
        let rows: Vec<&LoadRow> = load.skills.iter().chain([&load.total]).collect();
        let measure = &record.measure;
        self.0
            .write(measure.index, &measure.cmd, &rows, |row, cells| {
                row.write_cells(cells)
            })
    }
}

/// explain.md, written once the run is over.
struct ExplainMd;

impl Sink for ExplainMd {
    fn entry(&mut self, _record: &EntryRecord) -> Result<()> {
        Ok(())
    }

    fn run(&mut self, end: &RunEnd<'_>) -> Result<()> {
        explain::write(end.folder, end.explanation)
    }
}

/// What the terminal gets at the end: the probes' cost, the comparison table and explain.md
/// (with `--json`, the records on stdout and the prose on stderr), then what went wrong.
struct Summary {
    log: LogFile,
    json: bool,
}

impl Sink for Summary {
    fn entry(&mut self, _record: &EntryRecord) -> Result<()> {
        Ok(())
    }

    fn run(&mut self, end: &RunEnd<'_>) -> Result<()> {
        let info = end.info;
        if let Some(costs) = info.probes.as_ref().and_then(|p| p.costs.as_ref()) {
            eprint!("\n{}", probes::tables::costs(costs));
            for diagnostic in &costs.diagnostics {
                eprintln!("warning: a BPF program reported: {diagnostic}");
            }
        }
        // `skillprof compare`'s table of the log, from the records the log was written from.
        let log = &self.log;
        let table = compare::table_of_records(&[compare::Recorded {
            log: log.path.clone(),
            started: log.started,
            header: log.header.clone(),
            records: end.records,
        }])?;
        let explanation = end.explanation;
        if self.json {
            eprint!("{table}\n{explanation}");
            run_json::write(std::io::stdout().lock(), end.folder, info, end.records)?;
        } else {
            print!("{table}\n{explanation}");
        }
        eprintln!("\nrun folder: {}", end.folder.display());
        if info.request_errors > 0 {
            eprintln!(
                "warning: {} request(s) failed; see first_error in commands.csv",
                info.request_errors
            );
        }
        for note in &info.pressure_notes {
            eprintln!("warning: {note}");
        }
        if let Some(reason) = &info.reason {
            eprintln!("run incomplete: {reason}");
            eprintln!("not run: {}", info.entries_not_run.join(", "));
        }
        Ok(())
    }
}
