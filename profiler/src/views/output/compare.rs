//! `skillprof compare`: run logs of one workload side by side, printed exactly as the 2024
//! harness's eval printed them, so that old and new tables can be diffed.

use super::commands_csv;
use super::harness_log::{self, Header, LoggedEntry, RunLog};
use crate::ground::units::thousands;
use crate::record::{EntryRecord, RunInfo};
use anyhow::{Context, ensure};
use chrono::NaiveDateTime;
use std::{
    io::{self, Write},
    path::PathBuf,
};

const ABOUT: &str = "Compare run logs of one workload side by side";

const LONG_ABOUT: &str = "\
Compare run logs of one workload side by side, in the table the 2024 benchmark harness printed.

Each log gets an id: a, b, c, ... in the order given. Per entry of the workload the table shows \
how long it took and how much the host's resident memory grew (rss diff). For b and later logs the \
vs a(%) columns give that value as a percentage of log a's, rounded half to even: 50 means half of \
a's, 200 twice a's. Where a's value is 0 they say 100 if the other is 0 too, else inf.

Logs are refused unless they ran the same cmds file (the same cmds hash) and recorded the same \
number of entries.

Examples:
  skillprof compare runs/241022_204217.730_run.log runs/241022_204217.737_run.log
  skillprof compare runs/before/ runs/after/    # run folders, one *_run.log in each
  skillprof compare --csv runs/*_run.log > bench.csv";

/// Logs are named a to z.
pub const MAX_LOGS: usize = 26;

#[derive(clap::Args, Debug)]
#[command(about = ABOUT, long_about = LONG_ABOUT)]
pub struct CompareArgs {
    /// Run logs (YYMMDD_HHMMSS.mmm_run.log), or run folders holding exactly one. The first
    /// is a: the baseline of the vs a(%) columns.
    #[arg(required = true, value_name = "LOG")]
    pub logs: Vec<PathBuf>,

    /// Print CSV instead of the table, for spreadsheets and scripts: one row per entry and
    /// log, numbers without thousands separators, vs a(%) empty for log a. Columns: step (the
    /// entry's position, 1-based), cmd, id, file_name, took_ms, took_vs_a_pct, rss_diff_kb,
    /// rss_diff_vs_a_pct.
    #[arg(long)]
    pub csv: bool,

    /// Print one JSON document instead of the table: {"rows": [...]}, one object per entry
    /// and log with the CSV's fields as numbers (a vs a(%) that is empty or infinite is
    /// null) and the --extended columns under "extended".
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,

    /// Add columns from each run's commands.csv, side by side with vs a(%), after the
    /// harness's columns. Without a list: rss_peak_kb, minflt, majflt and request_errors.
    /// Needs a commands.csv next to every log (skillprof runs have one; 2024 logs do not).
    #[arg(long, value_name = "COLUMNS", num_args = 0..=1, require_equals = true,
          default_missing_value = DEFAULT_EXTENDED, value_delimiter = ',')]
    pub extended: Vec<String>,
}

/// The --extended columns when none are named.
const DEFAULT_EXTENDED: &str = "rss_peak_kb,minflt,majflt,request_errors";

pub fn run(args: CompareArgs) -> anyhow::Result<()> {
    ensure!(
        args.logs.len() <= MAX_LOGS,
        "compare takes at most {MAX_LOGS} logs (ids a to z), got {}",
        args.logs.len()
    );
    let mut runs = load(&args.logs)?;
    for run in &mut runs {
        run.load_extended(&args.extended)?;
    }
    let mut out = io::stdout().lock();
    if args.csv {
        write_csv(&runs, &args.extended, &mut out)?;
    } else if args.json {
        serde_json::to_writer_pretty(&mut out, &json(&runs, &args.extended))?;
        writeln!(out)?;
    } else {
        out.write_all(table(&runs, &args.extended).as_bytes())?;
    }
    out.flush()?;
    Ok(())
}

/// A run of skillprof's, as its typed files hold it: where its log is, when it started, the
/// log's header and the entries' records.
pub struct Recorded<'a> {
    pub log: PathBuf,
    pub started: NaiveDateTime,
    pub header: Header,
    pub records: &'a [EntryRecord],
}

impl<'a> Recorded<'a> {
    /// The run whose meta.json is `info`, in `folder`, with its records.
    /// When it started is its log's name's, as compare reads any log's.
    pub fn of(
        folder: &std::path::Path,
        info: &RunInfo,
        records: &'a [EntryRecord],
    ) -> anyhow::Result<Self> {
        let log = folder.join(format!("{}{}", info.run, harness_log::FILE_SUFFIX));
        Ok(Recorded {
            started: harness_log::started(&log)?,
            log,
            header: Header::of(info),
            records,
        })
    }
}

/// What `skillprof compare` would print for the logs of `runs`, made from their records
/// rather than their logs read back; refused as compare refuses logs that cannot be compared.
pub fn table_of_records(runs: &[Recorded<'_>]) -> anyhow::Result<String> {
    let runs: Vec<Run> = runs
        .iter()
        .zip('a'..='z')
        .map(|(run, id)| Run {
            id,
            file_name: run.log.display().to_string(),
            started: run.started,
            log: RunLog {
                header: run.header.clone(),
                entries: run
                    .records
                    .iter()
                    .map(|record| LoggedEntry::from(&record.measure))
                    .collect(),
            },
            extended: Vec::new(),
        })
        .collect();
    refuse_mismatches(&runs)?;
    Ok(table(&runs, &[]))
}

fn load(logs: &[PathBuf]) -> anyhow::Result<Vec<Run>> {
    let runs = logs
        .iter()
        .zip('a'..='z')
        .map(|(path, id)| Run::load(path, id))
        .collect::<anyhow::Result<Vec<_>>>()?;
    refuse_mismatches(&runs)?;
    Ok(runs)
}

struct Run {
    id: char,
    /// The log's path as given (or inside the run folder given): the table prints it.
    file_name: String,
    started: NaiveDateTime,
    log: RunLog,
    /// Per entry, the values of the --extended columns from commands.csv.
    extended: Vec<Vec<String>>,
}

impl Run {
    fn load(path: &std::path::Path, id: char) -> anyhow::Result<Self> {
        let path = harness_log::locate(path)?;
        let log = RunLog::read(&path)?;
        Ok(Self {
            id,
            file_name: path.display().to_string(),
            started: harness_log::started(&path)?,
            log,
            extended: Vec::new(),
        })
    }

    /// Reads `columns` of the commands.csv beside the log, one row per entry.
    fn load_extended(&mut self, columns: &[String]) -> anyhow::Result<()> {
        if columns.is_empty() {
            return Ok(());
        }
        let path = std::path::Path::new(&self.file_name).with_file_name(super::commands_csv::FILE);
        ensure!(
            path.exists(),
            "--extended needs a commands.csv beside every log, and {} has none \
             (logs of the 2024 harness never do)",
            self.file_name
        );
        let rows = commands_csv::read(&path)?;
        for row in &rows {
            let cells = columns
                .iter()
                .map(|column| {
                    row.get(column)
                        .map(str::to_owned)
                        .with_context(|| format!("{} has no column {column}", path.display()))
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            self.extended.push(cells);
        }
        ensure!(
            self.extended.len() == self.log.entries.len(),
            "{} has {} rows but its log has {} entries",
            path.display(),
            self.extended.len(),
            self.log.entries.len()
        );
        Ok(())
    }

    /// `value` as a percentage of log a's `a_value`; blank in log a's own rows.
    fn vs_a(&self, value: i128, a_value: i128) -> String {
        if self.id == 'a' {
            String::new()
        } else {
            vs_a(value, a_value)
        }
    }

    fn total_took_ms(&self) -> i128 {
        self.log
            .entries
            .iter()
            .map(|entry| i128::from(entry.took_ms))
            .sum()
    }

    fn max_rss_kb(&self) -> i128 {
        self.log
            .entries
            .iter()
            .map(|entry| i128::from(entry.rss_kb))
            .max()
            .unwrap_or(0)
    }
}

/// Only the same workload, run to the same end, compares entry by entry.
fn refuse_mismatches(runs: &[Run]) -> anyhow::Result<()> {
    let Some((a, others)) = runs.split_first() else {
        return Ok(());
    };
    for other in others {
        let (a_log, other_log) = (&a.file_name, &other.file_name);
        let (a_cmds, other_cmds) = (&a.log.header.cmds, &other.log.header.cmds);
        ensure!(
            other_cmds.hash == a_cmds.hash,
            "cannot compare {a_log} with {other_log}: they ran different workloads ({a_log} has \
             cmds {} with hash {}, {other_log} has cmds {} with hash {}); compare runs of the \
             same cmds file",
            a_cmds.filename,
            a_cmds.hash,
            other_cmds.filename,
            other_cmds.hash,
        );
        let (a_entries, other_entries) = (a.log.entries.len(), other.log.entries.len());
        ensure!(
            other_entries == a_entries,
            "cannot compare {a_log} with {other_log}: {a_log} has {a_entries} entries but \
             {other_log} has {other_entries}; did one of the runs end early?"
        );
    }
    Ok(())
}

/// The harness's table: per log a header block, then per entry one row per log, then totals.
fn table(runs: &[Run], extended: &[String]) -> String {
    let columns = Columns {
        with_vs_a: runs.len() > 1,
        extended_widths: extended
            .iter()
            .map(|name| name.len().max(RSS_WIDTH))
            .collect(),
    };
    let extra_heading: Vec<(String, String)> = extended
        .iter()
        .map(|name| (name.clone(), "vs a(%)".to_owned()))
        .collect();
    let heading = columns.row(
        "cmd",
        "id",
        ("took(ms)", "vs a(%)"),
        ("rss diff(KB)", "vs a(%)"),
        &extra_heading,
    );
    let width = heading.chars().count();
    let mut lines = vec![evaluating(runs)];
    lines.extend(runs.iter().flat_map(describe));
    lines.extend(["=".repeat(width), heading, "-".repeat(width)]);
    for row in rows(runs) {
        let cmd = if row.run.id == 'a' {
            row.entry.cmd.as_str()
        } else {
            ""
        };
        let took = thousands(row.entry.took_ms.into());
        let rss_diff = thousands(row.entry.rss_diff_kb.into());
        let id = row.run.id.to_string();
        lines.push(columns.row(
            cmd,
            &id,
            (&took, &row.took_vs_a),
            (&rss_diff, &row.rss_diff_vs_a),
            &row.extended,
        ));
    }
    lines.push("-".repeat(width));
    lines.extend(footers(runs, &columns));
    lines.iter().map(|line| format!("{line}\n")).collect()
}

fn evaluating(runs: &[Run]) -> String {
    let comparing = if runs.len() > 1 {
        format!(" comparing {} log files", runs.len())
    } else {
        String::new()
    };
    let cmds = &runs[0].log.header.cmds;
    format!(
        "Evaluating: cmds={} hash={}{comparing}",
        cmds.filename, cmds.hash
    )
}

/// Where the run came from: file, date, machine, host binary.
fn describe(run: &Run) -> [String; 5] {
    let harness_log::Header {
        machine, binary, ..
    } = &run.log.header;
    let date = run.started.format("%Y-%m-%d %H:%M:%S%.6f");
    [
        format!("{}  file_name={} date={date}  ", run.id, run.file_name),
        format!("   brand={:.42}", machine.brand),
        format!(
            "   arch={:<6} cores=cores={} mem_total(GB)={} mem_available(GB)={}",
            machine.arch, machine.cores, machine.memory_total, machine.memory_available
        ),
        format!("   binary={}", binary.bin),
        format!("   hash of binary={}", binary.hash),
    ]
}

/// Total time and maximum rss, one line per log each.
fn footers(runs: &[Run], columns: &Columns) -> Vec<String> {
    let a = &runs[0];
    let total_time = runs.iter().map(|run| {
        let label = if run.id == 'a' { "Total time (ms)" } else { "" };
        let vs_a = run.vs_a(run.total_took_ms(), a.total_took_ms());
        format!(
            "{}{}{}",
            prefix(label, run.id),
            took_cell(&thousands(run.total_took_ms())),
            vs_cell(&vs_a)
        )
    });
    let max_rss = runs.iter().map(|run| {
        let label = if run.id == 'a' {
            "Maximum rss memory (KB)"
        } else {
            ""
        };
        let vs_a = run.vs_a(run.max_rss_kb(), a.max_rss_kb());
        let below_took = " ".repeat(columns.took_width());
        format!(
            "{}{below_took}{}{}",
            prefix(label, run.id),
            rss_cell(&thousands(run.max_rss_kb())),
            vs_cell(&vs_a)
        )
    });
    total_time.chain(max_rss).collect()
}

/// One log's measurement of one entry, next to log a's.
struct Row<'a> {
    /// The entry's position in the workload, 0-based.
    step: usize,
    run: &'a Run,
    entry: &'a LoggedEntry,
    took_vs_a: String,
    rss_diff_vs_a: String,
    /// The --extended values, each with its vs a(%).
    extended: Vec<(String, String)>,
}

/// Per entry of the workload, one row per log.
fn rows(runs: &[Run]) -> impl Iterator<Item = Row<'_>> {
    let a = &runs[0];
    a.log
        .entries
        .iter()
        .enumerate()
        .flat_map(move |(step, a_entry)| {
            runs.iter().map(move |run| {
                let entry = &run.log.entries[step];
                Row {
                    step,
                    run,
                    entry,
                    took_vs_a: run.vs_a(entry.took_ms.into(), a_entry.took_ms.into()),
                    rss_diff_vs_a: run.vs_a(entry.rss_diff_kb.into(), a_entry.rss_diff_kb.into()),
                    extended: extended_cells(run, a, step),
                }
            })
        })
}

/// A run's --extended values of one entry, each with its percentage of log a's.
fn extended_cells(run: &Run, a: &Run, step: usize) -> Vec<(String, String)> {
    let Some(values) = run.extended.get(step) else {
        return Vec::new();
    };
    values
        .iter()
        .zip(&a.extended[step])
        .map(|(value, a_value)| {
            let vs = match (value.parse::<f64>(), a_value.parse::<f64>()) {
                (Ok(value), Ok(a_value)) if run.id != 'a' => vs_a_float(value, a_value),
                _ => String::new(),
            };
            (value.clone(), vs)
        })
        .collect()
}

/// The table's column layout. The harness printed the vs a(%) columns of entry rows only when
/// comparing, but those of the footers always.
struct Columns {
    with_vs_a: bool,
    /// Each --extended column is as wide as its name, at least as wide as rss diff's.
    extended_widths: Vec<usize>,
}

impl Columns {
    /// One line: the cmd and id, then each value with its vs a(%).
    fn row(
        &self,
        cmd: &str,
        id: &str,
        (took, took_vs_a): (&str, &str),
        (rss_diff, rss_diff_vs_a): (&str, &str),
        extended: &[(String, String)],
    ) -> String {
        let vs_a = |value: &str| {
            if self.with_vs_a {
                vs_cell(value)
            } else {
                String::new()
            }
        };
        let mut line = format!(
            "{cmd:<40}  {id:<2}{}{}{}{}",
            took_cell(took),
            vs_a(took_vs_a),
            rss_cell(rss_diff),
            vs_a(rss_diff_vs_a)
        );
        for ((value, value_vs_a), width) in extended.iter().zip(&self.extended_widths) {
            line.push_str(&format!("   {value:>width$}"));
            line.push_str(&vs_a(value_vs_a));
        }
        line
    }

    /// The width of the took(ms) column and its vs a(%) column, if shown.
    fn took_width(&self) -> usize {
        took_cell("").len() + if self.with_vs_a { vs_cell("").len() } else { 0 }
    }
}

fn prefix(label: &str, id: char) -> String {
    format!("{label:<40}  {id:<2}")
}

fn took_cell(value: &str) -> String {
    format!("   {value:>14}")
}

fn vs_cell(value: &str) -> String {
    format!(" {value:>8}")
}

const RSS_WIDTH: usize = 12;

fn rss_cell(value: &str) -> String {
    format!("   {value:>RSS_WIDTH$}")
}

/// Python's `round(100 * value / a)`, with the harness's answers when a is 0: 100 if value
/// is 0 too, else inf. Python rounds half to even (round(2.5) == 2), and so do we.
fn vs_a(value: i128, a: i128) -> String {
    // Exact in f64 for any memory or time a log holds (below 2^46).
    vs_a_float(value as f64, a as f64)
}

/// [`vs_a`] for values read back from commands.csv, which may have decimals.
fn vs_a_float(value: f64, a: f64) -> String {
    match (value == 0.0, a == 0.0) {
        (true, true) => "100".to_string(),
        (false, true) => "inf".to_string(),
        // As Python's round(): one correctly rounded division, then half to even.
        _ => format!("{}", (100.0 * value / a).round_ties_even() as i64),
    }
}

fn write_csv(runs: &[Run], extended: &[String], out: impl Write) -> anyhow::Result<()> {
    let mut csv = csv::Writer::from_writer(out);
    let mut header: Vec<String> = [
        "step",
        "cmd",
        "id",
        "file_name",
        "took_ms",
        "took_vs_a_pct",
        "rss_diff_kb",
        "rss_diff_vs_a_pct",
    ]
    .map(str::to_owned)
    .into();
    for name in extended {
        header.extend([name.clone(), format!("{name}_vs_a_pct")]);
    }
    csv.write_record(&header)?;
    for row in rows(runs) {
        let mut record = vec![
            (row.step + 1).to_string(),
            row.entry.cmd.clone(),
            row.run.id.to_string(),
            row.run.file_name.clone(),
            row.entry.took_ms.to_string(),
            row.took_vs_a,
            row.entry.rss_diff_kb.to_string(),
            row.rss_diff_vs_a,
        ];
        for (value, vs) in row.extended {
            record.extend([value, vs]);
        }
        csv.write_record(&record)?;
    }
    csv.flush().context("cannot write the CSV")?;
    Ok(())
}

/// The rows of [`write_csv`] as one JSON document, numbers as numbers.
fn json(runs: &[Run], extended: &[String]) -> serde_json::Value {
    use super::json_stdout::cell;
    use serde_json::{Value, json};
    // An infinite vs a(%) (a baseline of 0) has no JSON number: null, as an empty one.
    let number = |text: &str| match cell(text) {
        Value::Number(n) => Value::Number(n),
        _ => Value::Null,
    };
    let rows: Vec<Value> = rows(runs)
        .map(|row| {
            let columns: serde_json::Map<String, Value> = extended
                .iter()
                .zip(&row.extended)
                .map(|(name, (value, vs))| {
                    (
                        name.clone(),
                        json!({"value": cell(value), "vs_a_pct": number(vs)}),
                    )
                })
                .collect();
            json!({
                "step": row.step + 1,
                "cmd": row.entry.cmd,
                "id": row.run.id.to_string(),
                "file_name": row.run.file_name,
                "took_ms": row.entry.took_ms,
                "took_vs_a_pct": number(&row.took_vs_a),
                "rss_diff_kb": row.entry.rss_diff_kb,
                "rss_diff_vs_a_pct": number(&row.rss_diff_vs_a),
                "extended": columns,
            })
        })
        .collect();
    json!({ "rows": rows })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_round_half_to_even_like_python() {
        // round(100 * x / a) in Python 3.
        for (value, a, expected) in [
            (1, 8, "12"),
            (3, 8, "38"),
            (5, 200, "2"),
            (7, 200, "4"),
            (-5, 200, "-2"),
            (-1, 1000, "0"),
            (3062, 3171, "97"),
        ] {
            assert_eq!(vs_a(value, a), expected, "round(100 * {value} / {a})");
        }
    }

    #[test]
    fn a_zero_baseline_is_100_or_inf() {
        assert_eq!(vs_a(0, 0), "100");
        assert_eq!(vs_a(432, 0), "inf");
        assert_eq!(vs_a(0, 96), "0");
    }
}
