//! The time series of one run: memory, fault and syscall rates, free memory per zone against
//! its watermarks, PSI, and kswapd and direct reclaim. x is the sampler's clock for all of
//! them (see [`crate::commands::report::read`]), so they line up when stacked.

use crate::record::probes::Probe;
use std::ops::Range;

use anyhow::Result;
use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{
    BLUE, Figure, GREY, ORANGE, PURPLE, RED, TimeChart, Y_LABELS, axes_style, drawing, font, line,
    render, run_colour, shade_entries, short, strip,
};
use crate::commands::report::read::{Run, SYSCALLS};
use crate::ground::band::Band;
use crate::ground::units;
use crate::record::event::Body;
use crate::record::sampling::ZoneId;
use crate::views::output::samples_csv::{Column, SampleSeries, ZoneColumn};

const X_DESC: &str = "seconds since the sampler started";

pub fn figures(run: &Run) -> Result<Vec<Figure>> {
    Ok(vec![
        memory(run)?,
        rates_figure(run)?,
        zones(run)?,
        psi(run)?,
        reclaim(run)?,
    ])
}

/// A value over [t0, t1): a rate or a share measured over that interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    pub t0: f64,
    pub t1: f64,
    pub value: f64,
}

/// The points of a step line through `steps`: flat over each interval, vertical between.
pub fn step_points(steps: &[Step]) -> Vec<(f64, f64)> {
    steps
        .iter()
        .flat_map(|s| [(s.t0, s.value), (s.t1, s.value)])
        .collect()
}

/// Consecutive measured values, each run of them a line of its own: a gap stays a gap.
pub fn segments(t: &[f64], values: &[Option<f64>], scale: f64) -> Vec<Vec<(f64, f64)>> {
    let mut lines = vec![Vec::new()];
    for (t, value) in t.iter().zip(values) {
        match value {
            Some(v) => lines.last_mut().expect("one line").push((*t, v * scale)),
            None if lines.last().is_some_and(|l| !l.is_empty()) => lines.push(Vec::new()),
            None => {}
        }
    }
    lines.retain(|line| !line.is_empty());
    lines
}

/// [`rates`] of the samples.csv column `column`; `None` where it was not measured.
pub fn column_rates(run: &Run, column: Column) -> Option<Vec<Step>> {
    let samples = &run.samples;
    Some(rates(
        &samples.t_s,
        samples.column(column)?,
        run.rate_min_dt_s(),
    ))
}

/// Per-second rates of a cumulative counter between samples. Samples closer than `min_dt`
/// (the boundary samples come in pairs a millisecond apart) are merged into the next
/// interval; an interval with an unmeasured end is skipped.
pub fn rates(t: &[f64], counter: &[Option<f64>], min_dt: f64) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut start: Option<(f64, f64)> = None;
    for (t, value) in t.iter().zip(counter) {
        match (start, value) {
            (None, Some(v)) => start = Some((*t, *v)),
            (Some(_), None) => start = None,
            (Some((t0, v0)), Some(v)) => {
                if t - t0 >= min_dt {
                    steps.push(Step {
                        t0,
                        t1: *t,
                        value: ((v - v0) / (t - t0)).max(0.0),
                    });
                    start = Some((*t, *v));
                }
            }
            (None, None) => {}
        }
    }
    steps
}

/// Bins of `width` seconds over `span`, each with what `weigh` adds for the events in it,
/// divided by the bin's width.
fn binned(span: (f64, f64), width: f64, items: impl Iterator<Item = (f64, f64)>) -> Vec<Step> {
    let count = (((span.1 - span.0) / width).ceil() as usize).max(1);
    let mut sums = vec![0.0; count];
    for (t, weight) in items {
        let bin = ((t - span.0) / width).floor();
        if bin >= 0.0 && (bin as usize) < count {
            sums[bin as usize] += weight;
        }
    }
    sums.iter()
        .enumerate()
        .map(|(i, sum)| Step {
            t0: span.0 + i as f64 * width,
            t1: span.0 + (i + 1) as f64 * width,
            value: sum / width,
        })
        .collect()
}

/// Bins fine enough to follow the samples, coarse enough to keep the SVG small.
fn bin_width(run: &Run) -> f64 {
    let (t0, t1) = run.span_s();
    run.sampling_interval_s().max((t1 - t0) / 1500.0)
}

/// Per-entry averages: `value(entry) / took_s` over each entry's span, for the entries with
/// a measured value and a duration.
fn entry_averages(run: &Run, value: impl Fn(usize) -> Option<f64>) -> Vec<Step> {
    run.entries
        .iter()
        .filter(|entry| entry.took_ms > 0.0)
        .filter_map(|entry| {
            Some(Step {
                t0: entry.begin_s,
                t1: entry.end_s.max(entry.begin_s),
                value: value(entry.index)? / (entry.took_ms / 1000.0),
            })
        })
        .collect()
}

fn x_range(run: &Run) -> Range<f64> {
    let (t0, t1) = run.span_s();
    t0..t1
}

fn top_of(values: impl Iterator<Item = f64>, floor: f64) -> f64 {
    values.fold(floor, f64::max) * 1.12
}

/// A time-series chart on `area`: titled by plotters if `caption` is given (a chart under a
/// [`strip`] has its title there).
fn chart<'a, 'b>(
    area: &'a DrawingArea<SVGBackend<'b>, Shift>,
    caption: Option<&str>,
    x: Range<f64>,
    y: Range<f64>,
) -> Result<TimeChart<'a, 'b, RangedCoordf64>> {
    builder(area, caption)
        .build_cartesian_2d(x, y)
        .map_err(drawing("a time series"))
}

fn builder<'a, 'b>(
    area: &'a DrawingArea<SVGBackend<'b>, Shift>,
    caption: Option<&str>,
) -> ChartBuilder<'a, 'b, SVGBackend<'b>> {
    let mut builder = ChartBuilder::on(area);
    if let Some(caption) = caption {
        builder.caption(caption, font(16));
    }
    builder
        .margin(10)
        .margin_top(if caption.is_some() { 10 } else { 2 })
        .margin_right(24)
        .x_label_area_size(40)
        .y_label_area_size(Y_LABELS);
    builder
}

/// The axes of a time series: seconds along, `y_desc` up.
fn mesh<Y>(chart: &mut TimeChart<'_, '_, Y>, y_desc: &str) -> Result<()>
where
    Y: Ranged<ValueType = f64> + plotters::coord::ranged1d::ValueFormatter<f64>,
{
    axes_style(&mut chart.configure_mesh())
        .x_desc(X_DESC)
        .y_desc(y_desc)
        .y_label_formatter(&|v| short(*v))
        .draw()
        .map_err(drawing("a time series' axes"))
}

fn legend<'a, 'b: 'a, Y: Ranged<ValueType = f64>>(
    chart: &mut TimeChart<'a, 'b, Y>,
    position: SeriesLabelPosition,
) -> Result<()> {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK.mix(0.3))
        .label_font(font(13))
        .draw()
        .map_err(drawing("a legend"))
}

/// A note in the middle of an empty panel: what was not measured and why.
fn note<Y: Ranged<ValueType = f64>>(
    chart: &mut TimeChart<'_, '_, Y>,
    x: &Range<f64>,
    y_middle: f64,
    text: &str,
) -> Result<()> {
    let style = font(15)
        .color(&RGBColor(140, 60, 60))
        .pos(Pos::new(HPos::Center, VPos::Center));
    chart
        .draw_series([Text::new(
            text.to_owned(),
            ((x.start + x.end) / 2.0, y_middle),
            style,
        )])
        .map_err(drawing("a note"))?;
    Ok(())
}

fn memory(run: &Run) -> Result<Figure> {
    const TITLE: &str = "Host memory: resident (RSS) and virtual (VMS)";
    let samples = &run.samples;
    let (Some(rss), Some(vms)) = (samples.column(Column::RssKb), samples.column(Column::VmsKb))
    else {
        return Ok(Figure::absent(
            "memory",
            TITLE,
            "samples.csv has no host RSS or VMS: the host was gone before the first sample",
        ));
    };
    let x = x_range(run);
    let rss_lines = segments(&samples.t_s, rss, 1.0 / 1024.0);
    let vms_lines = segments(&samples.t_s, vms, 1.0 / (1024.0 * 1024.0));
    let peaks = entry_peaks(run);
    let rss_top = top_of(rss_lines.iter().chain(&peaks).flatten().map(|p| p.1), 1.0);
    let vms_top = top_of(vms_lines.iter().flatten().map(|p| p.1), 0.01);
    let svg = render("the memory plot", 620, |root| {
        let (upper, lower) = root.split_vertically(340);
        let (head, upper) = strip(&upper, "RSS: memory the host holds in RAM")?;
        let mut top = chart(&upper, None, x.clone(), 0.0..rss_top)?;
        mesh(&mut top, "MiB")?;
        shade_entries(&mut top, &run.entries, &x, (0.0, rss_top), Some(&head))?;
        line(&mut top, rss_lines, BLUE, "RSS")?;
        line(&mut top, peaks.clone(), RED, "entry's peak (VmHWM)")?;
        legend(&mut top, SeriesLabelPosition::UpperLeft)?;
        let mut bottom = chart(
            &lower,
            Some("VMS: address space the host reserved"),
            x.clone(),
            0.0..vms_top,
        )?;
        mesh(&mut bottom, "GiB")?;
        shade_entries(&mut bottom, &run.entries, &x, (0.0, vms_top), None)?;
        line(&mut bottom, vms_lines, PURPLE, "VMS")?;
        legend(&mut bottom, SeriesLabelPosition::UpperLeft)?;
        Ok(())
    })?;
    let sampled = rss.iter().flatten().fold(0.0, |a: f64, b| a.max(*b));
    let highest = peaks.iter().flatten().map(|p| p.1).fold(0.0, f64::max);
    Ok(Figure::svg(
        "memory",
        TITLE,
        svg,
        format!(
            "Host RSS and VMS from /proc/PID/stat, every sample ({} ms apart and at every entry \
             boundary); shaded bands are the entries, labelled #index (the key above names \
             them). A step up that stays is memory an entry kept; a spike that falls back is \
             what it needed on the way. The red bar over each entry is its true peak \
             (rss_peak_kb: {}), which sees a spike that falls between two samples. The samples \
             peaked at {}, the entries at {}. VMS counts reservations (wasmtime reserves guard \
             regions per instance), not memory in use. The line ends where the host exited.",
            run.meta.sampling_interval_ms,
            run.meta.rss_peak.as_deref().unwrap_or("the samples' most"),
            units::bytes(sampled * 1024.0),
            units::bytes(highest * 1024.0 * 1024.0)
        ),
    ))
}

/// Each entry's peak RSS (MiB) as a bar across the entry's span.
fn entry_peaks(run: &Run) -> Vec<Vec<(f64, f64)>> {
    run.entries
        .iter()
        .filter_map(|entry| {
            let peak_kb = run.record(entry.index)?.sampling.rss_peak_kb?;
            let mib = peak_kb as f64 / 1024.0;
            Some(vec![(entry.begin_s, mib), (entry.end_s, mib)])
        })
        .collect()
}

fn rates_figure(run: &Run) -> Result<Figure> {
    const TITLE: &str = "Page faults and memory syscalls per second";
    let x = x_range(run);
    let minor = column_rates(run, Column::Minflt);
    let major = column_rates(run, Column::Majflt);
    let syscalls = syscall_steps(run);
    let fault_top = top_of(minor.iter().chain(&major).flatten().map(|s| s.value), 1.0);
    let svg = render("the rates plot", 640, |root| {
        let (upper, lower) = root.split_vertically(320);
        let (head, upper) = strip(&upper, "Host page faults (/proc/PID/stat)")?;
        let mut top = chart(&upper, None, x.clone(), 0.0..fault_top)?;
        mesh(&mut top, "faults / s")?;
        shade_entries(&mut top, &run.entries, &x, (0.0, fault_top), Some(&head))?;
        match (&minor, &major) {
            (None, None) => note(&mut top, &x, fault_top / 2.0, "fault counters not sampled")?,
            _ => {
                if let Some(minor) = &minor {
                    line(&mut top, vec![step_points(minor)], BLUE, "minor faults / s")?;
                }
                if let Some(major) = &major {
                    line(&mut top, vec![step_points(major)], RED, "major faults / s")?;
                }
                legend(&mut top, SeriesLabelPosition::UpperRight)?;
            }
        }
        syscall_panel(&lower, run, &syscalls, &x)
    })?;
    let syscall_words = match &syscalls {
        Syscalls::Measured {
            from_events: true, ..
        } => format!(
            "Syscalls are counted from events.csv in bins of {} ms.",
            (bin_width(run) * 1000.0).round()
        ),
        Syscalls::Measured { .. } => "Syscalls: the run has no events.csv (run with --events for \
            a time series), so each line is the entry's count from commands.csv divided by its \
            duration: an average over each entry, flat across it; entries too short to have a \
            duration are left out."
            .to_owned(),
        Syscalls::Absent(why) => format!("Syscalls: {why}."),
    };
    Ok(Figure::svg(
        "rates",
        TITLE,
        svg,
        format!(
            "Faults per second from the host's cumulative minflt and majflt in samples.csv, \
             between consecutive samples (boundary samples closer than {} ms are merged into \
             the next interval). Minor faults are pages touched for the first time (or after \
             being given back); major faults read from disk. {syscall_words}",
            (run.rate_min_dt_s() * 1000.0).round()
        ),
    ))
}

/// The lower half of the rates plot. Per-entry averages span orders of magnitude (a 1 ms
/// entry with 9 calls averages 9,000/s), so they get a log scale; binned events a linear one.
fn syscall_panel(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    run: &Run,
    syscalls: &Syscalls,
    x: &Range<f64>,
) -> Result<()> {
    let entries = &run.entries;
    match syscalls {
        Syscalls::Measured {
            series,
            from_events: true,
        } => {
            let top = top_of(
                series.iter().flat_map(|(_, s)| s.iter().map(|s| s.value)),
                1.0,
            );
            let mut chart = chart(
                area,
                Some("Host memory syscalls (events.csv)"),
                x.clone(),
                0.0..top,
            )?;
            mesh(&mut chart, "calls / s")?;
            shade_entries(&mut chart, entries, x, (0.0, top), None)?;
            for (i, (name, steps)) in series.iter().enumerate() {
                line(&mut chart, vec![step_points(steps)], run_colour(i), name)?;
            }
            legend(&mut chart, SeriesLabelPosition::UpperRight)
        }
        Syscalls::Measured { series, .. } => {
            let values = || series.iter().flat_map(|(_, s)| s.iter().map(|s| s.value));
            let floor = values()
                .filter(|v| *v > 0.0)
                .fold(f64::MAX, f64::min)
                .min(1.0)
                / 2.0;
            let floor = if floor.is_finite() && floor > 0.0 {
                floor.max(0.001)
            } else {
                0.1
            };
            let top = values().fold(floor * 10.0, f64::max) * 2.0;
            let mut chart = builder(
                area,
                Some("Host memory syscalls (probes): average over each entry, log scale"),
            )
            .build_cartesian_2d(x.clone(), (floor..top).log_scale())
            .map_err(drawing("the syscall rates"))?;
            mesh(&mut chart, "calls / s (log)")?;
            shade_entries(&mut chart, entries, x, (floor, top), None)?;
            for (i, (name, steps)) in series.iter().enumerate() {
                let points = step_points(steps)
                    .into_iter()
                    .map(|(t, v)| (t, v.max(floor)))
                    .collect();
                line(&mut chart, vec![points], run_colour(i), name)?;
            }
            legend(&mut chart, SeriesLabelPosition::UpperRight)
        }
        Syscalls::Absent(why) => {
            let mut chart = chart(area, Some("Host memory syscalls"), x.clone(), 0.0..1.0)?;
            mesh(&mut chart, "calls / s")?;
            shade_entries(&mut chart, entries, x, (0.0, 1.0), None)?;
            note(&mut chart, x, 0.5, why)
        }
    }
}

enum Syscalls {
    /// One series per syscall that was called at all.
    Measured {
        series: Vec<(String, Vec<Step>)>,
        from_events: bool,
    },
    Absent(String),
}

fn syscall_steps(run: &Run) -> Syscalls {
    if let Some(events) = &run.events {
        let width = bin_width(run);
        // One pass over what may be millions of events: each syscall's times.
        let mut times: Vec<Vec<(f64, f64)>> = vec![Vec::new(); SYSCALLS.len()];
        for event in &events.list {
            if let Body::Syscall(syscall) = event.body
                && let Some(times) = times.get_mut(syscall.syscall as usize)
            {
                times.push((event.t_s, 1.0));
            }
        }
        let series: Vec<(String, Vec<Step>)> = SYSCALLS
            .iter()
            .zip(times)
            .filter(|(_, items)| !items.is_empty())
            .map(|(name, items)| {
                (
                    name.to_string(),
                    binned(run.span_s(), width, items.into_iter()),
                )
            })
            .collect();
        return Syscalls::Measured {
            series,
            from_events: true,
        };
    }
    if !run.probes_live() {
        return Syscalls::Absent(
            "not measured: probes were off for this run (--no-probes)".to_owned(),
        );
    }
    let calls = |i: usize, kind: usize| {
        run.record(i)?
            .probe(Probe::Syscalls, |c| c.syscalls[kind].calls)
    };
    if !(0..run.records.len()).any(|i| calls(i, 0).is_some()) {
        return Syscalls::Absent("not measured: the syscalls probe did not attach".to_owned());
    }
    let series = SYSCALLS
        .iter()
        .enumerate()
        .filter(|(kind, _)| (0..run.records.len()).any(|i| calls(i, *kind).unwrap_or(0) > 0))
        .map(|(kind, name)| {
            (
                name.to_string(),
                entry_averages(run, |i| calls(i, kind).map(|calls| calls as f64)),
            )
        })
        .collect();
    Syscalls::Measured {
        series,
        from_events: false,
    }
}

/// Band shading from the bottom up, as in the pressure experiment's plot.
const BANDS: [(&str, RGBColor); 5] = [
    ("below min", RGBColor(120, 120, 120)),
    (
        "[min, low): kswapd awake, allocations may reclaim",
        RGBColor(230, 80, 60),
    ),
    ("[low, high): kswapd awake", RGBColor(245, 160, 50)),
    ("[high, promo)", RGBColor(240, 220, 80)),
    ("above promo (or high)", RGBColor(120, 200, 120)),
];

struct ZoneSeries {
    title: String,
    free: Vec<Option<f64>>,
    /// min, low, high, promo (high where the kernel has no promo).
    marks: [Vec<Option<f64>>; 4],
}

/// One zone's series, or with `zone` `None` the zones summed.
fn zone_series(samples: &SampleSeries, zone: Option<&ZoneId>, title: String) -> Option<ZoneSeries> {
    let get = |key: ZoneColumn| {
        match zone {
            Some(zone) => samples.zone(zone, key),
            None => samples.column(Column::Zones(key)),
        }
        .map(<[_]>::to_vec)
    };
    let high = get(ZoneColumn::HighPages)?;
    let promo = get(ZoneColumn::PromoPages).unwrap_or_else(|| high.clone());
    Some(ZoneSeries {
        title,
        free: get(ZoneColumn::FreePages)?,
        marks: [
            get(ZoneColumn::MinPages)?,
            get(ZoneColumn::LowPages)?,
            high,
            promo,
        ],
    })
}

fn zones(run: &Run) -> Result<Figure> {
    const TITLE: &str = "Free memory per zone against its watermarks";
    let samples = &run.samples;
    let mut series = Vec::new();
    series.extend(zone_series(samples, None, "all zones, summed".to_owned()));
    for zone in samples.zones() {
        series.extend(zone_series(
            samples,
            Some(zone),
            format!("zone {} {}", zone.node, zone.name),
        ));
    }
    if series.is_empty() {
        return Ok(Figure::absent(
            "zones",
            TITLE,
            "samples.csv has no zone columns (an older run, or /proc/zoneinfo was unreadable)",
        ));
    }
    let (scale, unit) = run.page_unit();
    let x = x_range(run);
    let columns = 2usize;
    let rows = series.len().div_ceil(columns);
    let panel_height = 280u32;
    let svg = render("the zones plot", panel_height * rows as u32 + 40, |root| {
        let (head, body) = root.split_vertically(40);
        draw_band_key(&head)?;
        let panels = body.split_evenly((rows, columns));
        for (panel, zone) in panels.iter().zip(&series) {
            zone_panel(panel, run, zone, &x, scale, unit)?;
        }
        Ok(())
    })?;
    let lowest = run
        .records
        .iter()
        .map(|record| record.sampling.zones_lowest.band)
        .min()
        .map_or("not recorded", Band::name);
    Ok(Figure::svg(
        "zones",
        TITLE,
        svg,
        format!(
            "Free pages per populated zone (and summed over zones) from /proc/zoneinfo in every \
             sample, on a log scale in {unit}{}, with the zone's watermarks as lines and the \
             bands between them shaded: above high (or promo) the kernel is relaxed; below low \
             kswapd wakes to reclaim; below min allocations reclaim directly and stall. The \
             lowest band the summed free pages reached during an entry: {lowest}. Watermarks \
             move with managed pages and the kernel's boost.",
            if unit == "MiB" { " (4 KiB pages)" } else { "" }
        ),
    ))
}

fn draw_band_key(area: &DrawingArea<SVGBackend<'_>, Shift>) -> Result<()> {
    let mut x = 20;
    for (name, colour) in BANDS.iter().rev() {
        area.draw(&Rectangle::new(
            [(x, 14), (x + 16, 28)],
            colour.mix(0.45).filled(),
        ))
        .map_err(drawing("the band key"))?;
        area.draw(&Text::new(*name, (x + 22, 14), font(13)))
            .map_err(drawing("the band key"))?;
        x += 30 + (*name).len() as i32 * 7;
    }
    area.draw(&PathElement::new(
        [(x, 21), (x + 18, 21)],
        BLUE.stroke_width(2),
    ))
    .map_err(drawing("the band key"))?;
    area.draw(&Text::new("free", (x + 24, 14), font(13)))
        .map_err(drawing("the band key"))?;
    Ok(())
}

fn zone_panel(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    run: &Run,
    zone: &ZoneSeries,
    x: &Range<f64>,
    scale: f64,
    unit: &str,
) -> Result<()> {
    let t = &run.samples.t_s;
    let scaled = |v: &Option<f64>| v.map(|v| (v * scale).max(scale * 0.5));
    let lowest_mark = zone.marks[0]
        .iter()
        .flatten()
        .fold(f64::MAX, |a, b| a.min(*b));
    let highest = zone
        .free
        .iter()
        .chain(&zone.marks[3])
        .flatten()
        .fold(1.0, |a: f64, b| a.max(*b));
    let bottom = (lowest_mark.min(highest) * scale / 4.0).max(scale * 0.5);
    let top = highest * scale * 2.5;
    let mut chart = ChartBuilder::on(area)
        .caption(&zone.title, font(14))
        .margin(8)
        .margin_right(16)
        .x_label_area_size(30)
        .y_label_area_size(64)
        .build_cartesian_2d(x.clone(), (bottom..top).log_scale())
        .map_err(drawing("a zone panel"))?;
    axes_style(&mut chart.configure_mesh())
        .x_desc("s")
        .y_desc(format!("{unit}, log scale"))
        .y_label_formatter(&|v| short(*v))
        .x_labels(6)
        .draw()
        .map_err(drawing("a zone panel's axes"))?;
    // The bands as polygons between consecutive watermarks over time.
    let edge = |level: usize, i: usize| -> Option<f64> {
        match level {
            0 => Some(bottom),
            1..=4 => scaled(&zone.marks[level - 1][i]),
            _ => Some(top),
        }
    };
    let measured: Vec<usize> = (0..t.len())
        .filter(|&i| zone.marks.iter().all(|m| m[i].is_some()))
        .collect();
    for (level, (_, colour)) in BANDS.iter().enumerate() {
        let mut outline: Vec<(f64, f64)> = measured
            .iter()
            .filter_map(|&i| Some((t[i], edge(level + 1, i)?.min(top))))
            .collect();
        outline.extend(
            measured
                .iter()
                .rev()
                .filter_map(|&i| Some((t[i], edge(level, i)?.min(top)))),
        );
        chart
            .draw_series([Polygon::new(outline, colour.mix(0.28).filled())])
            .map_err(drawing("a band"))?;
    }
    shade_entries(&mut chart, &run.entries, x, (bottom, top), None)?;
    for marks in &zone.marks[..3] {
        let points: Vec<(f64, f64)> = measured
            .iter()
            .filter_map(|&i| Some((t[i], scaled(&marks[i])?)))
            .collect();
        chart
            .draw_series(LineSeries::new(points, BLACK.mix(0.45)))
            .map_err(drawing("a watermark"))?;
    }
    let free: Vec<Option<f64>> = zone.free.iter().map(scaled).collect();
    for points in segments(t, &free, 1.0) {
        chart
            .draw_series(LineSeries::new(points, BLUE.stroke_width(2)))
            .map_err(drawing("free memory"))?;
    }
    Ok(())
}

fn psi(run: &Run) -> Result<Figure> {
    const TITLE: &str = "Memory pressure stall (PSI), system-wide";
    let samples = &run.samples;
    let (Some(some_total), Some(full_total)) = (
        samples.column(Column::PsiSomeTotalUs),
        samples.column(Column::PsiFullTotalUs),
    ) else {
        return Ok(Figure::absent(
            "psi",
            TITLE,
            "not measured: this kernel has no /proc/pressure/memory (PSI off or not built in), \
             so samples.csv's psi columns are empty",
        ));
    };
    // µs stalled per s of wall time / 10^4 = percent of the time.
    let percent = |steps: Vec<Step>| -> Vec<Step> {
        steps
            .into_iter()
            .map(|s| Step {
                value: s.value / 1e4,
                ..s
            })
            .collect()
    };
    let min_dt = run.rate_min_dt_s();
    let some = percent(rates(&samples.t_s, some_total, min_dt));
    let full = percent(rates(&samples.t_s, full_total, min_dt));
    let x = x_range(run);
    let top = top_of(some.iter().chain(&full).map(|s| s.value), 1.0).min(112.0);
    let svg = render("the PSI plot", 340, |root| {
        let (head, rest) = strip(root, "Share of time tasks stalled on memory")?;
        let mut chart = chart(&rest, None, x.clone(), 0.0..top)?;
        mesh(&mut chart, "% of time")?;
        shade_entries(&mut chart, &run.entries, &x, (0.0, top), Some(&head))?;
        line(
            &mut chart,
            vec![step_points(&some)],
            ORANGE,
            "some: at least one task stalled",
        )?;
        line(
            &mut chart,
            vec![step_points(&full)],
            RED,
            "full: all non-idle tasks stalled",
        )?;
        legend(&mut chart, SeriesLabelPosition::UpperRight)?;
        Ok(())
    })?;
    let stalled = |c: &[Option<f64>]| {
        let measured: Vec<f64> = c.iter().flatten().copied().collect();
        measured
            .last()
            .zip(measured.first())
            .map_or(0.0, |(b, a)| b - a)
    };
    Ok(Figure::svg(
        "psi",
        TITLE,
        svg,
        format!(
            "Percent of wall time in which some (at least one) or all non-idle tasks of the \
             machine, not only the host, were stalled waiting for memory: the change of \
             /proc/pressure/memory's total µs between consecutive samples, per µs elapsed. \
             Flat at 0 means no reclaim or refault stalls. Over the run: {} some, {} full.",
            units::ms(stalled(some_total) / 1000.0),
            units::ms(stalled(full_total) / 1000.0),
        ),
    ))
}

fn reclaim(run: &Run) -> Result<Figure> {
    const TITLE: &str = "kswapd awake and direct reclaim";
    if !run.probes_live() {
        return Ok(Figure::absent(
            "reclaim",
            TITLE,
            "not measured: kswapd and direct reclaim come from the probes, which were off for \
             this run (--no-probes)",
        ));
    }
    let x = x_range(run);
    let ms = |ns: u64| ns as f64 / 1e6;
    let kswapd_awake_ms = |i: usize| {
        run.record(i)?
            .probe(Probe::Kswapd, |c| ms(c.kswapd.awake_ns))
    };
    let direct_reclaim_ms = |i: usize| {
        run.record(i)?
            .probe(Probe::DirectReclaim, |c| ms(c.direct.host_ns))
    };
    let total = |value: &dyn Fn(usize) -> Option<f64>| -> Option<f64> {
        let values: Vec<f64> = (0..run.records.len()).filter_map(value).collect();
        (!values.is_empty()).then(|| values.iter().sum())
    };
    let (kswapd, direct, others, from_events) = match &run.events {
        Some(events) => {
            let width = bin_width(run);
            let span = run.span_s();
            let awake = awake_intervals(run);
            let kswapd = awake_share(&awake, span, width);
            let reclaim = |host: bool| {
                binned(
                    span,
                    width,
                    events.list.iter().filter_map(move |e| match e.body {
                        Body::DirectReclaim(reclaim) if (reclaim.by_host != 0) == host => {
                            Some((e.t_s, reclaim.ns as f64 / 1e6))
                        }
                        _ => None,
                    }),
                )
            };
            (
                Some(kswapd),
                Some(reclaim(true)),
                Some(reclaim(false)),
                true,
            )
        }
        None => {
            // ms per ms * 100 = %; kswapd_awake_ms / took_s = ms/s; / 10 = % of the time.
            let kswapd = total(&kswapd_awake_ms)
                .map(|_| entry_averages(run, |i| Some(kswapd_awake_ms(i)? / 10.0)));
            let direct = total(&direct_reclaim_ms).map(|_| entry_averages(run, direct_reclaim_ms));
            (kswapd, direct, None, false)
        }
    };
    let kswapd_top = top_of(kswapd.iter().flatten().map(|s| s.value), 1.0).min(112.0);
    let direct_top = top_of(direct.iter().chain(&others).flatten().map(|s| s.value), 1.0);
    let how = if from_events {
        crate::producers::probes::events::FILE
    } else {
        "probes: average over each entry"
    };
    let svg = render("the reclaim plot", 600, |root| {
        let (upper, lower) = root.split_vertically(310);
        let (head, upper) = strip(&upper, &format!("kswapd awake ({how})"))?;
        let mut top = chart(&upper, None, x.clone(), 0.0..kswapd_top)?;
        mesh(&mut top, "% of time")?;
        shade_entries(&mut top, &run.entries, &x, (0.0, kswapd_top), Some(&head))?;
        match &kswapd {
            Some(steps) => {
                line(&mut top, vec![step_points(steps)], RED, "kswapd awake")?;
                legend(&mut top, SeriesLabelPosition::UpperRight)?;
            }
            None => note(
                &mut top,
                &x,
                kswapd_top / 2.0,
                "not measured: the kswapd probe did not attach",
            )?,
        }
        let mut bottom = chart(
            &lower,
            Some(&format!("Direct reclaim ({how})")),
            x.clone(),
            0.0..direct_top,
        )?;
        mesh(&mut bottom, "ms reclaiming / s")?;
        shade_entries(&mut bottom, &run.entries, &x, (0.0, direct_top), None)?;
        match &direct {
            Some(steps) => {
                line(
                    &mut bottom,
                    vec![step_points(steps)],
                    PURPLE,
                    "in the host's context",
                )?;
                if let Some(others) = &others {
                    line(
                        &mut bottom,
                        vec![step_points(others)],
                        GREY,
                        "other processes",
                    )?;
                }
                legend(&mut bottom, SeriesLabelPosition::UpperRight)?;
            }
            None => note(
                &mut bottom,
                &x,
                direct_top / 2.0,
                "not measured: the direct_reclaim probe did not attach",
            )?,
        }
        Ok(())
    })?;
    Ok(Figure::svg(
        "reclaim",
        TITLE,
        svg,
        reclaim_caption(run, from_events),
    ))
}

/// What the reclaim plot shows, how it was made, and the run's totals.
fn reclaim_caption(run: &Run, from_events: bool) -> String {
    let total = |value: &dyn Fn(&crate::record::EntryRecord) -> Option<f64>| -> Option<f64> {
        let values: Vec<f64> = run.records.iter().filter_map(value).collect();
        (!values.is_empty()).then(|| values.iter().sum())
    };
    let wakes = total(&|r| r.probe(Probe::Kswapd, |c| c.kswapd.wakes as f64));
    let count = total(&|r| r.probe(Probe::DirectReclaim, |c| c.direct.host as f64));
    let reclaimed_ms = total(&|r| r.probe(Probe::DirectReclaim, |c| c.direct.host_ns as f64 / 1e6));
    let summary = match (wakes, count) {
        (Some(w), Some(c)) => format!(
            "Over the run kswapd woke {} time(s) and the host reclaimed directly {} time(s) \
             ({} in all).",
            units::count(w),
            units::count(c),
            units::ms(reclaimed_ms.unwrap_or(0.0))
        ),
        _ => String::new(),
    };
    let method = if from_events {
        format!(
            "From events.csv: kswapd's awake spans (wake to sleep) as a share of each {} ms \
             bin, and each direct reclaim's duration in the bin where it ended.",
            (bin_width(run) * 1000.0).round()
        )
    } else {
        "The run has no events.csv (run with --events for a time series), so each line is the \
         entry's total from commands.csv (kswapd_awake_ms, direct_reclaim_ms) divided by its \
         duration: an average over each entry. kswapd's awake time counts in the entry in which \
         it went back to sleep, so a short entry that ends a long awake span can show more than \
         100%."
            .to_owned()
    };
    format!(
        "kswapd wakes when free memory falls below a zone's low watermark and reclaims in the \
         background; direct reclaim is an allocation reclaiming by itself, a stall the host \
         feels. {method} {summary}"
    )
}

/// kswapd's awake spans from its wake and sleep events, per kswapd thread; a span still open
/// at the end lasts until the run ends.
fn awake_intervals(run: &Run) -> Vec<(f64, f64)> {
    let Some(events) = &run.events else {
        return Vec::new();
    };
    let mut open: std::collections::BTreeMap<u32, f64> = Default::default();
    let mut spans = Vec::new();
    for event in &events.list {
        match event.body {
            Body::KswapdWake(_) => {
                open.entry(event.tid).or_insert(event.t_s);
            }
            Body::KswapdSleep(sleep) => {
                let awake_s = sleep.awake_ns as f64 / 1e9;
                let start = open.remove(&event.tid).unwrap_or(event.t_s - awake_s);
                spans.push((start, event.t_s));
            }
            _ => {}
        }
    }
    let end = run.span_s().1;
    spans.extend(open.into_values().map(|start| (start, end)));
    spans
}

/// The share of each bin, in percent, covered by `spans`.
fn awake_share(spans: &[(f64, f64)], span: (f64, f64), width: f64) -> Vec<Step> {
    let mut steps = binned(span, width, std::iter::empty());
    for step in &mut steps {
        let covered: f64 = spans
            .iter()
            .map(|(a, b)| (b.min(step.t1) - a.max(step.t0)).max(0.0))
            .sum();
        step.value = (covered / width * 100.0).min(100.0);
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_merge_close_samples_and_skip_gaps() {
        let t = [0.0, 0.1, 0.101, 0.2, 0.3, 0.4];
        let counter = [
            Some(0.0),
            Some(10.0),
            Some(11.0),
            Some(21.0),
            None,
            Some(50.0),
        ];
        let steps = rates(&t, &counter, 0.05);
        // 0.1 → 0.101 is too close: merged into 0.1 → 0.2; 0.2 → 0.3 is unmeasured.
        let found: Vec<(f64, f64, f64)> = steps.iter().map(|s| (s.t0, s.t1, s.value)).collect();
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!((found[0].0, found[0].1), (0.0, 0.1));
        assert!((found[0].2 - 100.0).abs() < 1e-9);
        assert_eq!((found[1].0, found[1].1), (0.1, 0.2));
        assert!((found[1].2 - 110.0).abs() < 1e-9);
    }

    #[test]
    fn segments_break_at_unmeasured_cells() {
        let lines = segments(
            &[0.0, 1.0, 2.0, 3.0],
            &[Some(1.0), None, Some(2.0), Some(3.0)],
            2.0,
        );
        assert_eq!(lines, [vec![(0.0, 2.0)], vec![(2.0, 4.0), (3.0, 6.0)]]);
    }

    #[test]
    fn awake_share_is_the_covered_part_of_each_bin() {
        let steps = awake_share(&[(0.05, 0.15)], (0.0, 0.2), 0.1);
        assert_eq!(steps.len(), 2);
        assert!((steps[0].value - 50.0).abs() < 1e-9);
        assert!((steps[1].value - 50.0).abs() < 1e-9);
    }
}
