//! `skillprof export --perfetto`: a run as a Chrome JSON trace (the trace event format),
//! which ui.perfetto.dev and chrome://tracing open.
//!
//! - process "skillprof run …": a thread track "entries" with one slice per entry (the stop
//!   entry holds its breakdown as child slices), and counter tracks: host RSS and VMS, free
//!   memory summed over zones and per zone, the summed watermarks, PSI some/full, and the
//!   host's fault rates;
//! - with `--events` runs: process "host" with a track per host thread, and process
//!   "system-wide" with kswapd and other processes' threads. Every raw kernel event is an
//!   instant on its thread's track; events that report how long they took (syscalls, direct
//!   and memcg reclaim, kswapd awake, shrinkers) are also slices ending at the event;
//! - with `--events` runs of a host with markers: process "requests" with a track per request,
//!   its compile, instantiate, call and reset stretches as slices (each on the thread that ran it).
//!
//! Times are microseconds on the sampler's clock (see [`super::read`]).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use anyhow::{Context, Result};
use serde_json::{Map, Value, json};

use super::plots::timeseries::column_rates;
use super::read::{Event, Run};
use crate::record::event::{Body, Field};
use crate::record::probes::StopPhase;
use crate::views::output::samples_csv::{Column, ZoneColumn};

/// Synthetic process ids, above any real pid (pid_max is at most 2^22).
const RUN_PID: u64 = 2_000_000_000;
const SYSTEM_PID: u64 = 2_000_000_001;
const UNKNOWN_HOST_PID: u64 = 2_000_000_002;
const REQUESTS_PID: u64 = 2_000_000_003;

/// Writes the trace of `run` to `path`, event by event (a run with --events has hundreds of
/// thousands); returns how many trace events it holds.
pub fn write(run: &Run, path: &Path) -> Result<usize> {
    let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut out = BufWriter::new(file);
    let count = write_to(run, &mut out).with_context(|| format!("writing {}", path.display()))?;
    out.flush()
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(count)
}

struct Trace<'w> {
    out: &'w mut dyn Write,
    count: usize,
    /// Subtracted from every time so that none is negative.
    origin_s: f64,
}

impl Trace<'_> {
    fn us(&self, t_s: f64) -> f64 {
        ((t_s - self.origin_s) * 1e6 * 1000.0).round() / 1000.0
    }

    fn emit(&mut self, event: &Value) -> Result<()> {
        if self.count > 0 {
            self.out.write_all(b",\n")?;
        }
        serde_json::to_writer(&mut *self.out, event)?;
        self.count += 1;
        Ok(())
    }

    fn metadata(&mut self, name: &str, pid: u64, tid: Option<u64>, args: Value) -> Result<()> {
        let mut event = json!({"ph": "M", "name": name, "pid": pid, "args": args});
        if let Some(tid) = tid {
            event["tid"] = json!(tid);
        }
        self.emit(&event)
    }

    fn slice(
        &mut self,
        name: &str,
        cat: &str,
        (pid, tid): (u64, u64),
        t0: f64,
        t1: f64,
        args: Value,
    ) -> Result<()> {
        let ts = self.us(t0);
        let dur = (self.us(t1) - ts).max(0.0);
        self.emit(&json!({
            "ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid,
            "ts": ts, "dur": (dur * 1000.0).round() / 1000.0, "args": args,
        }))
    }
}

fn write_to(run: &Run, out: &mut dyn Write) -> Result<usize> {
    let earliest_event = run.events.as_ref().map_or(0.0, |events| {
        events
            .list
            .iter()
            .map(|e| e.t_s - e.body.duration_ns().unwrap_or(0) as f64 / 1e9)
            .fold(0.0, f64::min)
    });
    let origin_s = earliest_event.min(0.0);
    let cmds = &run.meta.cmds.file;
    let other = json!({
        "producer": format!("skillprof {}", env!("CARGO_PKG_VERSION")),
        "run": run.name,
        "folder": run.folder.display().to_string(),
        "cmds": cmds,
        "cmds_hash": run.meta.cmds.hash,
        "clock": format!(
            "microseconds on the sampler's clock (samples.csv t_s){}. {}",
            if origin_s < 0.0 {
                format!(", moved by {:.6} s so that no event is before 0", -origin_s)
            } else {
                String::new()
            },
            run.alignment
        ),
        "events_clock_slack_ms": run.events.as_ref().map(|e| e.offset_slack_ms),
    });
    out.write_all(b"{\"displayTimeUnit\": \"ms\", \"otherData\": ")?;
    serde_json::to_writer(&mut *out, &other)?;
    out.write_all(b", \"traceEvents\": [\n")?;
    let mut trace = Trace {
        out,
        count: 0,
        origin_s,
    };
    trace.metadata(
        "process_name",
        RUN_PID,
        None,
        json!({"name": format!("skillprof run {} ({cmds})", run.name)}),
    )?;
    trace.metadata(
        "process_sort_index",
        RUN_PID,
        None,
        json!({"sort_index": 0}),
    )?;
    trace.metadata(
        "thread_name",
        RUN_PID,
        Some(RUN_PID),
        json!({"name": "entries"}),
    )?;
    entries(&mut trace, run)?;
    counters(&mut trace, run)?;
    events(&mut trace, run)?;
    requests(&mut trace, run)?;
    let count = trace.count;
    trace.out.write_all(b"\n]}\n")?;
    Ok(count)
}

fn entries(trace: &mut Trace, run: &Run) -> Result<()> {
    for entry in &run.entries {
        let record = &run.records[entry.index];
        let measure = &record.measure;
        let mut args = Map::new();
        args.insert("index".into(), json!(entry.index));
        args.insert("took_ms".into(), json!(measure.took_ms()));
        args.insert("rss_diff_kb".into(), json!(measure.rss_diff_kb()));
        if let Some(peak) = record.sampling.rss_peak_kb {
            args.insert("rss_peak_kb".into(), json!(peak));
        }
        if let Some((minflt, majflt)) = measure.faults() {
            args.insert("minflt".into(), json!(minflt));
            args.insert("majflt".into(), json!(majflt));
        }
        args.insert("requests".into(), json!(measure.outcome.requests));
        args.insert("executions".into(), json!(measure.outcome.latencies.len()));
        if let Some(explanation) = run.explanations.get(entry.index) {
            args.insert("explanation".into(), json!(explanation));
        }
        trace.slice(
            &entry.cmd,
            "entry",
            (RUN_PID, RUN_PID),
            entry.begin_s,
            entry.end_s,
            Value::Object(args),
        )?;
        // The stop's parts, in order from its start, inside it (their sum can exceed the
        // entry's took_ms by the rounding of the files: the last part is cut at its end).
        if let Some(stop) = &record.stop {
            let mut start = entry.begin_s;
            for phase in StopPhase::ALL {
                let Some(part) = stop.part(phase) else {
                    continue;
                };
                let ms = part.duration_ns as f64 / 1e6;
                let end = (start + ms / 1000.0).min(entry.end_s);
                trace.slice(
                    &format!("stop: {}", phase.name().replace('_', " ")),
                    "stop",
                    (RUN_PID, RUN_PID),
                    start,
                    end,
                    json!({"ms": ms, "what": phase.span()}),
                )?;
                start = end;
            }
        }
    }
    Ok(())
}

/// One counter track: `name` with the single series `unit`, one value per distinct
/// microsecond (of two boundary samples that close, the later value stands).
fn counter(
    trace: &mut Trace,
    name: &str,
    unit: &str,
    points: impl Iterator<Item = (f64, f64)>,
) -> Result<()> {
    let mut kept: Vec<(f64, f64)> = Vec::new();
    for (t, value) in points.filter(|(_, v)| v.is_finite()) {
        let ts = trace.us(t);
        match kept.last_mut() {
            Some(last) if ts <= last.0 => last.1 = value,
            _ => kept.push((ts, value)),
        }
    }
    for (ts, value) in kept {
        trace.emit(&json!({
            "ph": "C", "name": name, "pid": RUN_PID, "tid": RUN_PID, "ts": ts,
            "args": {unit: value},
        }))?;
    }
    Ok(())
}

fn counters(trace: &mut Trace, run: &Run) -> Result<()> {
    let samples = &run.samples;
    let t = &samples.t_s;
    let series = |values: Option<&[Option<f64>]>, scale: f64| -> Vec<(f64, f64)> {
        values
            .map(|values| {
                t.iter()
                    .zip(values)
                    .filter_map(|(t, v)| Some((*t, (*v)? * scale)))
                    .collect()
            })
            .unwrap_or_default()
    };
    counter(
        trace,
        "host RSS",
        "MiB",
        series(samples.column(Column::RssKb), 1.0 / 1024.0).into_iter(),
    )?;
    counter(
        trace,
        "host VMS",
        "GiB",
        series(samples.column(Column::VmsKb), 1.0 / 1048576.0).into_iter(),
    )?;
    let (page, unit) = run.page_unit();
    counter(
        trace,
        "free memory, all zones",
        unit,
        series(samples.column(Column::Zones(ZoneColumn::FreePages)), page).into_iter(),
    )?;
    let marks = [
        ("min", ZoneColumn::MinPages),
        ("low", ZoneColumn::LowPages),
        ("high", ZoneColumn::HighPages),
        ("promo", ZoneColumn::PromoPages),
    ];
    for (mark, key) in marks {
        let points = series(samples.column(Column::Zones(key)), page);
        counter(
            trace,
            &format!("{mark} watermark, all zones"),
            unit,
            points.into_iter(),
        )?;
    }
    for zone in samples.zones() {
        let points = series(samples.zone(zone, ZoneColumn::FreePages), page);
        counter(
            trace,
            &format!("free memory, zone {} {}", zone.node, zone.name),
            unit,
            points.into_iter(),
        )?;
    }
    let rate = |trace: &mut Trace, name: &str, column: Column, scale: f64, unit: &str| {
        let Some(steps) = column_rates(run, column) else {
            return Ok(());
        };
        // Each rate holds over its interval: set at its start, back to 0 where the series ends.
        let mut points: Vec<(f64, f64)> = steps.iter().map(|s| (s.t0, s.value * scale)).collect();
        if let Some(last) = steps.last() {
            points.push((last.t1, 0.0));
        }
        counter(trace, name, unit, points.into_iter())
    };
    rate(
        trace,
        "PSI some (stalled)",
        Column::PsiSomeTotalUs,
        1e-4,
        "% of time",
    )?;
    rate(
        trace,
        "PSI full (stalled)",
        Column::PsiFullTotalUs,
        1e-4,
        "% of time",
    )?;
    rate(trace, "host minor faults", Column::Minflt, 1.0, "per s")?;
    rate(trace, "host major faults", Column::Majflt, 1.0, "per s")
}

/// The markers' stretches as slices on one track per request: a stretch runs from a mark
/// on a thread to that thread's next mark. A compile's helper threads are left out: their
/// stretches overlap the compile's own, and a track's slices must nest.
fn requests(trace: &mut Trace, run: &Run) -> Result<()> {
    use skillprof_common::{PHASE_FIRST, PHASE_HELPER, PHASE_IDLE, PHASE_NAMES};
    let Some(events) = &run.events else {
        return Ok(());
    };
    let marks = events.list.iter().filter_map(|event| match event.body {
        Body::Mark(mark) => Some((event, mark)),
        _ => None,
    });
    let mut open: BTreeMap<u32, (f64, skillprof_common::MarkEvent)> = BTreeMap::new();
    let mut named = std::collections::BTreeSet::new();
    for (i, (event, mark)) in marks.enumerate() {
        if i == 0 {
            trace.metadata(
                "process_name",
                REQUESTS_PID,
                None,
                json!({"name": "requests (skillhost's markers)"}),
            )?;
        }
        if let Some((start, stretch)) = open.remove(&event.tid) {
            let phase = stretch.phase & !(PHASE_FIRST | PHASE_HELPER);
            if phase != PHASE_IDLE && stretch.phase & PHASE_HELPER == 0 {
                if named.insert(stretch.request) {
                    trace.metadata(
                        "thread_name",
                        REQUESTS_PID,
                        Some(stretch.request),
                        json!({"name": format!("request {} (skill id {})", stretch.request, stretch.skill)}),
                    )?;
                }
                let name = PHASE_NAMES.get(phase as usize).copied().unwrap_or("?");
                let args = json!({
                    "skill_id": stretch.skill,
                    "thread": event.tid,
                    "entry": event.entry,
                });
                trace.slice(
                    name,
                    "request",
                    (REQUESTS_PID, stretch.request),
                    start,
                    event.t_s,
                    args,
                )?;
            }
        }
        open.insert(event.tid, (event.t_s, mark));
    }
    Ok(())
}

fn events(trace: &mut Trace, run: &Run) -> Result<()> {
    let Some(events) = &run.events else {
        return Ok(());
    };
    let host_pid = run.meta.host.pid.map_or(UNKNOWN_HOST_PID, u64::from);
    let is_host =
        |event: &Event| u64::from(event.tid) == host_pid || events.host_tids.contains(&event.tid);
    trace.metadata(
        "process_name",
        host_pid,
        None,
        json!({"name": format!("host (pid {host_pid})")}),
    )?;
    trace.metadata(
        "process_sort_index",
        host_pid,
        None,
        json!({"sort_index": 1}),
    )?;
    trace.metadata(
        "process_name",
        SYSTEM_PID,
        None,
        json!({"name": "system-wide: kswapd and other processes"}),
    )?;
    trace.metadata(
        "process_sort_index",
        SYSTEM_PID,
        None,
        json!({"sort_index": 2}),
    )?;
    let mut threads: BTreeMap<(u64, u32), String> = BTreeMap::new();
    for event in &events.list {
        let pid = if is_host(event) { host_pid } else { SYSTEM_PID };
        let name = threads.entry((pid, event.tid)).or_insert_with(|| {
            if pid == host_pid {
                if u64::from(event.tid) == host_pid {
                    format!("host main thread {}", event.tid)
                } else {
                    format!("host thread {}", event.tid)
                }
            } else {
                format!("thread {}", event.tid)
            }
        });
        if matches!(event.body, Body::KswapdWake(_) | Body::KswapdSleep(_))
            && !name.starts_with("kswapd")
        {
            *name = format!("kswapd (thread {})", event.tid);
        }
    }
    for ((pid, tid), name) in &threads {
        trace.metadata(
            "thread_name",
            *pid,
            Some(u64::from(*tid)),
            json!({"name": name}),
        )?;
    }
    for event in &events.list {
        let pid = if is_host(event) { host_pid } else { SYSTEM_PID };
        let tid = u64::from(event.tid);
        let mut args = Map::new();
        args.insert("entry".into(), json!(event.entry));
        for (name, value) in event.body.fields() {
            let value = match value {
                Field::Int(number) => json!(number as f64),
                _ => json!(value.to_string()),
            };
            args.insert(name.into(), value);
        }
        if let Some(ns) = event.body.duration_ns() {
            let name = match event.body {
                Body::KswapdSleep(_) => "kswapd awake",
                _ => event.body.name(),
            };
            trace.slice(
                name,
                "kernel",
                (pid, tid),
                event.t_s - ns as f64 / 1e9,
                event.t_s,
                Value::Object(args.clone()),
            )?;
        }
        let ts = trace.us(event.t_s);
        trace.emit(&json!({
            "ph": "i", "s": "t", "name": event.body.name(), "cat": "kernel event",
            "pid": pid, "tid": tid, "ts": ts, "args": Value::Object(args),
        }))?;
    }
    Ok(())
}
