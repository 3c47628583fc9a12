//! Every `skillprof export` of one real run with `--events`, each read by the tool it is made
//! for and checked against the run's own files:
//! - perfetto: the trace event format (the JSON that ui.perfetto.dev and chrome://tracing
//!   open): every event well formed, slices on a track nested, counters in time order, one
//!   instant per kernel event, and the entries as slices in the order and with the durations
//!   of commands.csv;
//! - openmetrics: the Prometheus project's strict OpenMetrics parser, with commands.csv's
//!   figures at the entries' ends and samples.csv's in time order;
//! - events: DuckDB, whose per-entry counts of the typed event files are commands.csv's.
//!
//! Runs as root: the run attaches probes.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;
use std::process::Output;

use serde_json::Value;
use skillprof::views::output::commands_csv;

mod common;
use common::cli::{self, describe};

fn skillprof(args: &[&str]) -> Output {
    cli::skillprof().args(args).output().unwrap()
}

fn number(event: &Value, field: &str) -> f64 {
    event[field]
        .as_f64()
        .unwrap_or_else(|| panic!("{field} is not a number in {event}"))
}

fn integer(event: &Value, field: &str) -> u64 {
    event[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} is not an integer in {event}"))
}

/// A slice: start and end (µs) and name.
type Slice = (f64, f64, String);

/// Complete slices (`X`) of one track must nest: each starts after the one before it ended,
/// or ends within it. Both to within 1 ns: the trace writes microseconds with three decimals,
/// and `ts + dur` of one slice can miss the next slice's `ts` by a float's last bit.
fn assert_nested(track: &(u64, u64), slices: &mut [Slice]) {
    slices.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
    let mut open: Vec<Slice> = Vec::new();
    for (start, end, name) in slices.iter() {
        while open.last().is_some_and(|parent| *start + 1e-3 >= parent.1) {
            open.pop();
        }
        if let Some(parent) = open.last() {
            assert!(
                *end <= parent.1 + 1e-3,
                "on track {track:?}, {name} [{start}, {end}] overlaps {} [{}, {}] without \
                 nesting in it",
                parent.2,
                parent.0,
                parent.1
            );
        }
        open.push((*start, *end, name.clone()));
    }
}

#[test]
fn every_export_of_a_real_run_reads_in_the_tool_it_is_for() {
    let out = tempfile::tempdir().unwrap();
    // A real smoke run with --events.
    let (_, folder) = cli::run_ok(&cli::smoke_cmds(), out.path(), &["--events"]);
    check_perfetto(&folder, out.path());
    check_openmetrics(&folder);
    check_events_in_duckdb(&folder);
}

fn check_perfetto(folder: &Path, out: &Path) {
    let trace_path = out.join("trace.json");
    let output = skillprof(&[
        "export",
        "--perfetto",
        folder.to_str().unwrap(),
        "--out",
        trace_path.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", describe(&output));

    let trace: Value =
        serde_json::from_str(&fs::read_to_string(&trace_path).unwrap()).expect("the trace is JSON");
    let events = trace["traceEvents"]
        .as_array()
        .expect("a JSON object with a traceEvents array");
    assert!(!events.is_empty());

    let mut slices: BTreeMap<(u64, u64), Vec<Slice>> = BTreeMap::new();
    let mut counters: BTreeMap<(u64, String), Vec<f64>> = BTreeMap::new();
    let mut instants = 0usize;
    let mut named_threads = BTreeSet::new();
    for event in events {
        let phase = event["ph"].as_str().expect("every event has a phase");
        let name = event["name"].as_str().expect("every event has a name");
        let pid = integer(event, "pid");
        if phase == "M" {
            assert!(
                ["process_name", "thread_name", "process_sort_index"].contains(&name),
                "{event}"
            );
            if name == "thread_name" {
                named_threads.insert((pid, integer(event, "tid")));
            }
            continue;
        }
        let ts = number(event, "ts");
        assert!(ts >= 0.0 && ts.is_finite(), "{event}");
        let tid = integer(event, "tid");
        match phase {
            "X" => {
                let dur = number(event, "dur");
                assert!(dur >= 0.0, "{event}");
                slices
                    .entry((pid, tid))
                    .or_default()
                    .push((ts, ts + dur, name.to_owned()));
            }
            "C" => {
                let args = event["args"].as_object().expect("counter args");
                assert!(!args.is_empty(), "{event}");
                for value in args.values() {
                    assert!(value.as_f64().is_some_and(f64::is_finite), "{event}");
                }
                counters.entry((pid, name.to_owned())).or_default().push(ts);
            }
            "i" => {
                assert!(
                    ["t", "p", "g"].contains(&event["s"].as_str().unwrap_or("")),
                    "{event}"
                );
                instants += 1;
            }
            other => panic!("unexpected phase {other}: {event}"),
        }
    }

    // Slices nest on every track, and every track with slices is named.
    for (track, track_slices) in &mut slices {
        assert_nested(track, track_slices);
        assert!(named_threads.contains(track), "track {track:?} has no name");
    }

    // Counters move forward in time, each track on its own.
    for ((_, name), times) in &counters {
        assert!(
            times.windows(2).all(|pair| pair[0] < pair[1]),
            "counter {name} goes back in time"
        );
    }
    for counter in [
        "host RSS",
        "host VMS",
        "free memory, all zones",
        "low watermark, all zones",
        "PSI some (stalled)",
        "host minor faults",
    ] {
        assert!(
            counters.keys().any(|(_, name)| name == counter),
            "no counter {counter}: {:?}",
            counters.keys()
        );
    }

    // The entries: one slice each, in order, named as in commands.csv and as long.
    let rows = commands_csv::read(&folder.join("commands.csv")).unwrap();
    let entry_slices: Vec<&Value> = events
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == "entry")
        .collect();
    assert_eq!(entry_slices.len(), rows.len());
    let mut previous_end = 0.0;
    for (slice, row) in entry_slices.iter().zip(&rows) {
        assert_eq!(slice["name"].as_str(), row.get("cmd"));
        let took_us: f64 = row.get("took_ms").unwrap().parse::<f64>().unwrap() * 1000.0;
        let (ts, dur) = (number(slice, "ts"), number(slice, "dur"));
        // Within the files' millisecond rounding of the boundaries.
        assert!(
            (dur - took_us).abs() <= 1000.0,
            "{slice}: took {took_us} µs"
        );
        assert!(
            ts >= previous_end - 1e-3,
            "{slice} starts before the entry before it ended"
        );
        previous_end = ts + dur;
    }
    // The stop holds its breakdown.
    let stop_parts = events
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == "stop")
        .count();
    assert_eq!(stop_parts, 6, "the stop's six parts");

    // skillhost marks its work: a track per request, its phases as slices, and a call slice
    // on the track of every execution.
    let phases: Vec<&Value> = events
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == "request")
        .collect();
    assert!(
        phases
            .iter()
            .all(|s| ["compile", "instantiate", "call", "reset"]
                .contains(&s["name"].as_str().unwrap())),
        "unexpected request slices"
    );
    let called: std::collections::BTreeSet<u64> = phases
        .iter()
        .filter(|s| s["name"] == "call")
        .map(|s| integer(s, "tid"))
        .collect();
    let executions: u64 = rows
        .iter()
        .map(|row| row.get("executions").unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(
        called.len() as u64,
        executions,
        "one request track per execution"
    );

    // Every kernel event of events.csv is an instant.
    let kernel_events = fs::read_to_string(folder.join("events.csv"))
        .unwrap()
        .lines()
        .count()
        - 1;
    assert!(kernel_events > 0, "the run streamed no events");
    assert_eq!(instants, kernel_events);
}

const OPENMETRICS: &str = r#"
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
families = {}
for family in text_string_to_metric_families(sys.stdin.read()):
    families[family.name] = {
        "type": family.type,
        "samples": [[s.labels, s.value, float(s.timestamp)] for s in family.samples],
    }
print(json.dumps(families))
"#;

fn check_openmetrics(folder: &Path) {
    let path = folder.join("openmetrics.txt");
    let output = skillprof(&[
        "export",
        "--format",
        "openmetrics",
        folder.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", describe(&output));
    let text = fs::read_to_string(&path).unwrap();
    let families = common::tools_python::run(OPENMETRICS, &[], &text);
    let run = cli::meta(folder).run;

    // One point per entry at its end, as commands.csv has it.
    let rows = cli::csv_rows(&folder.join("commands.csv"));
    let took = families["skillprof_entry_took_ms"]["samples"]
        .as_array()
        .unwrap_or_else(|| panic!("no skillprof_entry_took_ms in {text}"));
    assert_eq!(took.len(), rows.len(), "{took:?}");
    let mut last_end = 0.0;
    for (point, row) in took.iter().zip(&rows) {
        let labels = &point[0];
        assert_eq!(labels["run"], run.as_str());
        assert_eq!(labels["entry"], row["index"].as_str());
        assert_eq!(labels["cmd"], row["cmd"].as_str());
        let expected: f64 = row["took_ms"].parse().unwrap();
        assert!(
            (point[1].as_f64().unwrap() - expected).abs() < 1e-6,
            "{point:?} vs {row:?}"
        );
        let end = point[2].as_f64().unwrap();
        assert!(end > last_end, "entries end in order: {took:?}");
        last_end = end;
    }

    // samples.csv's readings in time order, on the wall clock the run recorded.
    let samples = cli::csv_rows(&folder.join("samples.csv"));
    let rss = families["skillprof_sample_rss_kb"]["samples"]
        .as_array()
        .unwrap();
    assert!(
        rss.len() >= samples.len() / 2,
        "{} of {}",
        rss.len(),
        samples.len()
    );
    let first_unix: f64 = samples[0]["unix_s"].parse().unwrap();
    assert!(
        (rss[0][2].as_f64().unwrap() - first_unix).abs() < 0.002,
        "{:?}",
        rss[0]
    );
    assert!(rss.windows(2).all(|w| w[0][2].as_f64() < w[1][2].as_f64()));
    assert_eq!(families["skillprof_sample_rss_kb"]["type"], "gauge");
}

const DUCKDB: &str = r#"
import json, os, sys
import duckdb
folder = sys.argv[1]
counts, types = {}, {}
for name in sorted(os.listdir(folder)):
    kind = name.removesuffix(".csv")
    path = os.path.join(folder, name)
    per_entry = duckdb.sql(f"SELECT entry, count(*) FROM read_csv('{path}') GROUP BY entry")
    counts[kind] = {str(entry): n for entry, n in per_entry.fetchall()}
    table = duckdb.sql(f"SELECT * FROM read_csv('{path}')")
    types[kind] = {column: str(t) for column, t in zip(table.columns, table.types)}
print(json.dumps({"counts": counts, "types": types}))
"#;

fn check_events_in_duckdb(folder: &Path) {
    let dir = folder.join("events");
    let output = skillprof(&["export", "--format", "events", folder.to_str().unwrap()]);
    assert!(output.status.success(), "{}", describe(&output));
    let found = common::tools_python::run(DUCKDB, &[dir.to_str().unwrap()], "");
    let (counts, types) = (&found["counts"], &found["types"]);

    // Typed columns: numbers, not text to parse.
    for (kind, column) in [
        ("mmap", "len"),
        ("mmap", "lat_ns"),
        ("mmap", "ret"),
        ("fault", "address"),
    ] {
        let column_type = types[kind][column].as_str().unwrap_or_default();
        assert!(
            column_type.contains("INT"),
            "{kind}.{column} is {column_type}: {types}"
        );
    }
    assert_eq!(types["madvise"]["advice_class"], "VARCHAR", "{types}");

    // Per entry, DuckDB's counts are the probes' aggregates, where no event was lost. Not
    // always exactly: commands.csv has an entry's counters as read when it ended, and a call
    // that returns after that read (a host thread still at work; the probes count a call in
    // the entry it entered in, and the current entry moves only when the next one begins)
    // is counted there too late for the row but is in the events. So the events hold at
    // least every counted call, and over the run at most a few more (one in a CI run).
    let rows = cli::csv_rows(&folder.join("commands.csv"));
    let mut compared = 0;
    let kinds = [
        ("mmap", "mmap_calls"),
        ("munmap", "munmap_calls"),
        ("mprotect", "mprotect_calls"),
        ("madvise", "madvise_calls"),
        ("fault", "faults_user"),
    ];
    let mut totals = [(0u64, 0u64); 5];
    for row in &rows {
        if row["events_lost"] != "0" {
            continue;
        }
        let entry = &row["index"];
        for ((kind, column), (in_events, in_rows)) in kinds.iter().zip(&mut totals) {
            let events = counts[*kind][entry.as_str()].as_u64().unwrap_or(0);
            let counted: u64 = row[*column].parse().unwrap();
            assert!(
                events >= counted,
                "entry {entry} ({}): {events} {kind} events in DuckDB, fewer than {column} {counted}",
                row["cmd"]
            );
            *in_events += events;
            *in_rows += counted;
        }
        compared += 1;
    }
    for ((kind, column), (in_events, in_rows)) in kinds.iter().zip(totals) {
        assert!(
            in_events - in_rows <= 2 + in_rows / 50,
            "{in_events} {kind} events in DuckDB against {in_rows} {column} over the run"
        );
    }
    assert!(
        compared >= rows.len() - 1,
        "events were lost in most entries: {rows:?}"
    );
    let mmaps: u64 = counts["mmap"]
        .as_object()
        .unwrap()
        .values()
        .filter_map(Value::as_u64)
        .sum();
    assert!(mmaps > 0, "{counts}");
}
