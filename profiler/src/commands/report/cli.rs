//! `skillprof report` and `skillprof export`: their arguments and what they write where.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, ensure};

use super::html;
use super::plots::Body;
use super::png::Rasteriser;
use super::read::Run;
use super::{events_by_kind, openmetrics, perfetto};
use crate::views::output::compare;

const REPORT_ABOUT: &str = "Draw a run, or compare runs, as one self-contained HTML page";

const REPORT_LONG_ABOUT: &str = "\
Draw a run, or compare runs of one workload, as one self-contained HTML page: report.html, with \
inline SVG plots and nothing fetched from the network.

One run: the header (machine, kernel, host configuration, probes live, profiler overhead), every \
metric of every entry in a sortable table with its explanation, the time series (RSS and VMS; \
page-fault and syscall rates; free memory per zone against its watermarks; PSI; kswapd and direct \
reclaim) with the entries shaded, and the stop breakdown.

Two or more runs (e.g. pooling against on-demand): per entry, side-by-side bars of time, RSS \
change, page faults and syscalls with each run's ratio to the first, RSS over time, the stop \
breakdowns, then every run's own tables and plots. Runs must be of the same workload (the same \
cmds hash, as skillprof compare requires). The page goes into the first run's folder unless \
--out says otherwise.

Examples:
  skillprof report runs/261122_015210.766
  skillprof report runs/on-demand/261122_* runs/pooling/261122_* --out pooling.html
  skillprof report runs/261122_015210.766 --format png   # also plots/*.png for documents";

#[derive(clap::Args, Debug)]
#[command(about = REPORT_ABOUT, long_about = REPORT_LONG_ABOUT)]
pub struct ReportArgs {
    /// Run folders (as `skillprof run` leaves them). The first is run a: the baseline of the
    /// ratios, and where the page goes.
    #[arg(required = true, value_name = "RUN")]
    pub runs: Vec<PathBuf>,

    /// Write the page here instead of RUN/report.html.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,

    /// Also write every plot alone into plots/ beside the page, as SVG or PNG (PNG needs a
    /// TrueType font on the system for the text, e.g. fonts-dejavu-core).
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub format: Option<Format>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Svg,
    Png,
}

const EXPORT_ABOUT: &str =
    "Export a run for other tools: a Perfetto trace, OpenMetrics, or typed events for DuckDB";

const EXPORT_LONG_ABOUT: &str = "\
Export a run for other tools. Every export is a view of the run folder, which it leaves as it is.

  --format perfetto (or --perfetto): trace.json in the Chrome JSON trace event format, which \
ui.perfetto.dev (Open trace file) and chrome://tracing open: the entries as slices (stop with \
its breakdown inside), counters for host RSS and VMS, free memory per zone and the watermarks, \
PSI and the fault rates; and for runs made with --events, every kernel event as an instant on \
its thread's track, with syscalls, reclaim and kswapd's awake spans as slices.

  --format openmetrics: openmetrics.txt, every numeric column of samples.csv (one point per \
reading) and of commands.csv (one point per entry, at its end, labelled entry and cmd) as \
timestamped gauges: skillprof_sample_<column> and skillprof_entry_<column>. Load it into \
Prometheus with `promtool tsdb create-blocks-from openmetrics openmetrics.txt DATA_DIR`.

  --format events: for a run made with --events, events/<kind>.csv, one file per event kind \
with one typed column per field (ts_ns, t_s, unix_s, entry, cmd, tid, then the kind's fields; \
addresses in decimal), which DuckDB and pandas read as they are.

Examples:
  skillprof export --perfetto runs/261122_015210.766              # runs/.../trace.json
  skillprof export --format openmetrics runs/261122_015210.766    # runs/.../openmetrics.txt
  skillprof export --format events runs/261122_015210.766         # runs/.../events/*.csv
  duckdb -c \"SELECT entry, count(*) FROM 'runs/261122_015210.766/events/mmap.csv' GROUP BY entry\"";

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExportFormat {
    /// trace.json: a Chrome / Perfetto JSON trace.
    Perfetto,
    /// openmetrics.txt: samples and entries as timestamped OpenMetrics gauges.
    Openmetrics,
    /// events/<kind>.csv: the kernel events of a --events run, one typed column per field.
    Events,
}

impl ExportFormat {
    /// Where the export goes in the run folder, unless --out says otherwise.
    fn default_name(self) -> &'static str {
        match self {
            ExportFormat::Perfetto => "trace.json",
            ExportFormat::Openmetrics => "openmetrics.txt",
            ExportFormat::Events => "events",
        }
    }
}

#[derive(clap::Args, Debug)]
#[command(about = EXPORT_ABOUT, long_about = EXPORT_LONG_ABOUT)]
pub struct ExportArgs {
    /// What to export.
    #[arg(
        long,
        value_enum,
        value_name = "FORMAT",
        required_unless_present = "perfetto"
    )]
    pub format: Option<ExportFormat>,

    /// Short for --format perfetto.
    #[arg(long, conflicts_with = "format")]
    pub perfetto: bool,

    /// The run folder.
    #[arg(value_name = "RUN")]
    pub run: PathBuf,

    /// Write here instead of into the run folder (for events, a folder).
    #[arg(long, value_name = "PATH")]
    pub out: Option<PathBuf>,
}

/// Run folders are named; a run log inside one stands for its folder.
fn folder_of(path: &Path) -> PathBuf {
    if path.is_file() {
        path.parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
    } else {
        path.to_path_buf()
    }
}

pub fn report(args: ReportArgs) -> Result<()> {
    ensure!(
        args.runs.len() <= compare::MAX_LOGS,
        "report compares at most {} runs (a to z), got {}",
        compare::MAX_LOGS,
        args.runs.len()
    );
    let folders: Vec<PathBuf> = args.runs.iter().map(|p| folder_of(p)).collect();
    let runs = folders
        .iter()
        .map(|folder| {
            Run::load(folder).with_context(|| format!("reading the run {}", folder.display()))
        })
        .collect::<Result<Vec<_>>>()?;
    // The same refusal as skillprof compare, for the same reasons, before anything is drawn.
    let harness_table = if runs.len() > 1 {
        let recorded = runs
            .iter()
            .map(|run| compare::Recorded::of(&run.folder, &run.meta, &run.records))
            .collect::<Result<Vec<_>>>()?;
        Some(
            compare::table_of_records(&recorded)
                .context("skillprof report compares runs of one workload only, entry by entry")?,
        )
    } else {
        None
    };
    let page = match &harness_table {
        None => html::single(&runs[0])?,
        Some(table) => html::comparison(&runs, table)?,
    };
    let out = args.out.unwrap_or_else(|| folders[0].join("report.html"));
    fs::write(&out, &page.html).with_context(|| format!("writing {}", out.display()))?;
    let drawn = page
        .figures
        .iter()
        .filter(|f| matches!(f.body, Body::Svg(_)))
        .count();
    eprintln!(
        "report: {} ({} plots{})",
        out.display(),
        drawn,
        match page.figures.len() - drawn {
            0 => String::new(),
            absent => format!("; {absent} not measured in this run, each with a note"),
        }
    );
    if let Some(format) = args.format {
        let dir = out.parent().unwrap_or(Path::new(".")).join("plots");
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let rasteriser = match format {
            Format::Png => Some(Rasteriser::new()?),
            Format::Svg => None,
        };
        for figure in &page.figures {
            let Body::Svg(svg) = &figure.body else {
                continue;
            };
            match &rasteriser {
                None => {
                    let path = dir.join(format!("{}.svg", figure.id));
                    fs::write(&path, svg).with_context(|| format!("writing {}", path.display()))?;
                }
                Some(rasteriser) => {
                    rasteriser.write(svg.as_str(), &dir.join(format!("{}.png", figure.id)))?
                }
            }
        }
        eprintln!(
            "plots: {}/*.{}",
            dir.display(),
            if format == Format::Png { "png" } else { "svg" }
        );
    }
    Ok(())
}

pub fn export(args: ExportArgs) -> Result<()> {
    let format = args.format.unwrap_or(ExportFormat::Perfetto);
    let folder = folder_of(&args.run);
    let run =
        Run::load(&folder).with_context(|| format!("reading the run {}", folder.display()))?;
    let out = args
        .out
        .unwrap_or_else(|| folder.join(format.default_name()));
    match format {
        ExportFormat::Perfetto => {
            let count = perfetto::write(&run, &out)?;
            eprintln!(
                "trace: {} ({count} trace events{}); open it in ui.perfetto.dev or chrome://tracing",
                out.display(),
                match &run.events {
                    Some(events) => format!(", {} kernel events", events.list.len()),
                    None => ", no kernel events (run with --events for them)".to_owned(),
                }
            );
        }
        ExportFormat::Openmetrics => {
            let (text, points) = openmetrics::render(&run)?;
            fs::write(&out, text).with_context(|| format!("writing {}", out.display()))?;
            eprintln!(
                "openmetrics: {} ({points} points); load it with `promtool tsdb \
                 create-blocks-from openmetrics {} DATA_DIR`",
                out.display(),
                out.display()
            );
        }
        ExportFormat::Events => {
            let kinds = events_by_kind::write(&run, &out)?;
            let rows: usize = kinds.iter().map(|(_, rows)| rows).sum();
            eprintln!(
                "events: {} ({rows} events in {} files, one per kind: {})",
                out.display(),
                kinds.len(),
                kinds
                    .iter()
                    .map(|(kind, _)| *kind)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    Ok(())
}
