//! Bars: the stop breakdown (one stacked bar per run) and, for two or more runs of one
//! workload, each entry's metric side by side with its ratio to run a.

use crate::record::probes::Probe;
use anyhow::Result;
use plotters::coord::Shift;
use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{
    BLUE, BROWN, Figure, GREEN, GREY, PURPLE, RED, WIDTH, axes_style, drawing, font, render,
    run_colour, shade_entries, short,
};
use crate::commands::report::read::Run;
use crate::ground::units;
use crate::record::probes::StopPhase;
use crate::views::output::samples_csv::Column;

/// Each part of the stop's colour, in `StopPhase::ALL` order.
const STOP_COLOURS: [RGBColor; StopPhase::ALL.len()] = [GREY, BLUE, GREEN, RED, PURPLE, BROWN];

/// The stop row's parts in ms, if the run measured them.
pub fn stop_parts(run: &Run) -> Option<(Vec<f64>, f64)> {
    let stop = run
        .records
        .iter()
        .rfind(|record| record.measure.stopped.is_some())?
        .stop
        .as_ref()?;
    let ms = |ns: u64| ns as f64 / 1e6;
    let parts = StopPhase::ALL
        .iter()
        .map(|phase| stop.part(*phase).map_or(0.0, |part| ms(part.duration_ns)))
        .collect();
    Some((parts, ms(stop.total_ns)))
}

pub fn stop(runs: &[&Run]) -> Result<Figure> {
    const TITLE: &str = "Shutdown: where stop's time went";
    let measured: Vec<(usize, Vec<f64>, f64)> = runs
        .iter()
        .enumerate()
        .filter_map(|(i, run)| stop_parts(run).map(|(parts, total)| (i, parts, total)))
        .collect();
    if measured.is_empty() {
        let why = if runs.iter().any(|run| !run.probes_live()) {
            "not measured: the stop breakdown comes from the probes, which were off (--no-probes)"
        } else if runs.iter().all(|run| {
            run.records
                .iter()
                .all(|record| record.measure.stopped.is_none())
        }) {
            "the run ended before its stop entry"
        } else {
            "not measured: the exit probes did not attach"
        };
        return Ok(Figure::absent("stop", TITLE, why));
    }
    let longest = measured
        .iter()
        .map(|(_, _, total)| *total)
        .fold(0.001, f64::max);
    let bar = 64u32;
    let height = 120 + bar * measured.len() as u32;
    let svg = render("the stop breakdown", height, |root| {
        let (plot, key) = root.split_vertically(height - 64);
        let mut chart = horizontal_bars(
            &plot,
            TITLE,
            0.0..longest * 1.04,
            measured.len(),
            "ms from SIGTERM sent to the host reaped",
        )?;
        for (row, (run_index, parts, total)) in measured.iter().enumerate() {
            let y = (measured.len() - 1 - row) as f64;
            let (low, high) = (y + 0.18, y + 0.62);
            let mut start = 0.0;
            for ((phase, colour), ms) in StopPhase::ALL.iter().zip(STOP_COLOURS).zip(parts) {
                let end = start + ms;
                chart
                    .draw_series([Rectangle::new(
                        [(start, low), (end, high)],
                        colour.mix(0.85).filled(),
                    )])
                    .map_err(drawing("a part of the stop"))?;
                let width_px = ms / longest * f64::from(WIDTH - 80);
                let label = format!("{} {}", phase.name().replace('_', " "), units::ms(*ms));
                if width_px > label.len() as f64 * 7.5 {
                    chart
                        .draw_series([Text::new(
                            label,
                            (start + ms / 2.0, (low + high) / 2.0),
                            font(13)
                                .color(&WHITE)
                                .pos(Pos::new(HPos::Center, VPos::Center)),
                        )])
                        .map_err(drawing("a part's label"))?;
                }
                start = end;
            }
            let run = runs[*run_index];
            let name = if runs.len() > 1 {
                format!(
                    "{}: {} — {}",
                    id(*run_index),
                    run.label(),
                    units::ms(*total)
                )
            } else {
                format!("stop — {} in all", units::ms(*total))
            };
            chart
                .draw_series([Text::new(
                    name,
                    (0.0, high + 0.04),
                    font(13).pos(Pos::new(HPos::Left, VPos::Bottom)),
                )])
                .map_err(drawing("a run's label"))?;
        }
        stop_key(
            &key,
            if measured.len() == 1 {
                Some(&measured[0].1)
            } else {
                None
            },
        )
    })?;
    Ok(Figure::svg(
        "stop",
        TITLE,
        svg,
        "The stop entry from SIGTERM to the host reaped, cut by the probes into parts that add up \
         to its total: the signal's delivery, the host's graceful drain (until exit_group), the \
         exit until the address-space teardown starts, the teardown itself (freeing every page), \
         the last thread's exit, and the reap. One long red bar is a teardown of a large \
         address space; a long blue one is the host's own shutdown work.",
    )
    .titled())
}

/// A chart of `rows` horizontal bars over `x`, titled, with only the x axis labelled.
pub fn horizontal_bars<'a, 'b>(
    area: &'a DrawingArea<SVGBackend<'b>, Shift>,
    title: &str,
    x: std::ops::Range<f64>,
    rows: usize,
    x_desc: &str,
) -> Result<ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>> {
    let mut chart = ChartBuilder::on(area)
        .caption(title, font(16))
        .margin(10)
        .margin_right(30)
        .x_label_area_size(34)
        .y_label_area_size(12)
        .build_cartesian_2d(x, 0.0..rows as f64)
        .map_err(drawing("a bar chart"))?;
    axes_style(&mut chart.configure_mesh())
        .disable_y_mesh()
        .y_labels(0)
        .x_desc(x_desc)
        .x_label_formatter(&|v| short(*v))
        .draw()
        .map_err(drawing("a bar chart's axes"))?;
    Ok(chart)
}

/// The key under the stop bars: each part's colour and, for one run, its duration.
fn stop_key(area: &DrawingArea<SVGBackend<'_>, Shift>, parts: Option<&Vec<f64>>) -> Result<()> {
    let items: Vec<(String, RGBColor)> = StopPhase::ALL
        .iter()
        .zip(STOP_COLOURS)
        .enumerate()
        .map(|(i, (phase, colour))| {
            let text = match parts {
                Some(parts) => format!("{}: {}", phase.span(), units::ms(parts[i])),
                None => phase.span().to_owned(),
            };
            (text, colour)
        })
        .collect();
    key(area, &items)
}

/// A key of coloured squares and their words, in lines as wide as the plot.
pub fn key(area: &DrawingArea<SVGBackend<'_>, Shift>, items: &[(String, RGBColor)]) -> Result<()> {
    let (mut x, mut y) = (20i32, 8i32);
    for (text, colour) in items {
        let width = 34 + text.chars().count() as i32 * 7;
        if x + width > WIDTH as i32 - 10 {
            x = 20;
            y += 24;
        }
        area.draw(&Rectangle::new(
            [(x, y), (x + 14, y + 14)],
            colour.mix(0.85).filled(),
        ))
        .map_err(drawing("a key"))?;
        area.draw(&Text::new(text.as_str(), (x + 20, y), font(13)))
            .map_err(drawing("a key"))?;
        x += width;
    }
    Ok(())
}

/// a, b, c, ... for run `index`.
pub fn id(index: usize) -> char {
    char::from(b'a' + (index % 26) as u8)
}

/// One metric compared across runs, per entry.
pub struct Metric {
    pub id: &'static str,
    pub title: &'static str,
    pub unit: &'static str,
    /// The entry's value in this run, in `unit`; `None` where not measured.
    pub value: fn(&Run, usize) -> Option<f64>,
    pub about: &'static str,
}

pub const METRICS: [Metric; 5] = [
    Metric {
        id: "compare-time",
        title: "Time per entry",
        unit: "ms",
        value: |run, i| Some(run.record(i)?.measure.took_ms()),
        about: "wall time of each entry (took_ms)",
    },
    Metric {
        id: "compare-rss",
        title: "RSS change per entry",
        unit: "MiB",
        value: |run, i| Some(run.record(i)?.measure.rss_diff_kb() as f64 / 1024.0),
        about: "how much resident memory each entry left behind (rss_diff_kb); negative is memory given back",
    },
    Metric {
        id: "compare-peak",
        title: "Peak RSS per entry",
        unit: "MiB",
        value: |run, i| Some(run.record(i)?.sampling.rss_peak_kb? as f64 / 1024.0),
        about: "the most resident memory the host held during each entry (rss_peak_kb): what capacity must provide for, above what the entry left behind",
    },
    Metric {
        id: "compare-faults",
        title: "Page faults per entry",
        unit: "faults",
        value: |run, i| {
            let (minflt, majflt) = run.record(i)?.measure.faults()?;
            Some((minflt + majflt) as f64)
        },
        about: "minor + major page faults of the host during each entry (/proc/PID/stat)",
    },
    Metric {
        id: "compare-syscalls",
        title: "Memory syscalls per entry",
        unit: "calls",
        value: |run, i| {
            run.record(i)?.probe(Probe::Syscalls, |c| {
                c.syscalls.iter().map(|kind| kind.calls).sum::<u64>() as f64
            })
        },
        about: "mmap + munmap + mremap + mprotect + madvise + brk calls of the host during each entry (probes; absent where probes were off)",
    },
];

/// `value / base` where the ratio means something: both measured, a base that is not zero,
/// and the same sign.
pub fn ratio_value(value: Option<f64>, base: Option<f64>) -> Option<f64> {
    let (v, b) = (value?, base?);
    (b != 0.0 && v / b >= 0.0).then(|| v / b)
}

/// `value` over run a's `base`, as the report prints it: ×1.23; "–" where a ratio says
/// nothing (a is 0 or unmeasured, or the two have opposite signs).
pub fn ratio(value: Option<f64>, base: Option<f64>) -> String {
    match ratio_value(value, base) {
        Some(r) => {
            if r == 0.0 {
                "×0".to_owned()
            } else if r >= 100.0 {
                format!("×{r:.0}")
            } else if r >= 10.0 {
                format!("×{r:.1}")
            } else {
                format!("×{r:.2}")
            }
        }
        None if value == Some(0.0) && base == Some(0.0) => "×1".to_owned(),
        None => "–".to_owned(),
    }
}

/// Width of the column of entry names left of the comparison bars.
const NAMES: u32 = 300;

pub fn compare(runs: &[&Run], metric: &Metric) -> Result<Figure> {
    let entries = runs[0].records.len();
    let values: Vec<Vec<Option<f64>>> = runs
        .iter()
        .map(|run| (0..entries).map(|i| (metric.value)(run, i)).collect())
        .collect();
    if values.iter().flatten().all(Option::is_none) {
        return Ok(Figure::absent(
            metric.id,
            metric.title,
            format!("not measured in any of the runs: {}", metric.about),
        ));
    }
    let measured = || values.iter().flatten().flatten().copied();
    let low = measured().fold(0.0, f64::min);
    let high = measured().fold(0.0, f64::max);
    let smallest = measured().filter(|v| *v > 0.0).fold(f64::MAX, f64::min);
    // Entries of one workload can differ by five orders of magnitude (a compile against a
    // listing): a log scale keeps the small ones visible where nothing is negative.
    let log = low >= 0.0 && smallest < f64::MAX && high / smallest > 200.0;
    let group = 13 * runs.len() as u32 + 12;
    let height = 90 + group * entries as u32;
    let title = format!(
        "{} ({}{})",
        metric.title,
        metric.unit,
        if log { ", log scale" } else { "" }
    );
    let svg = render("a comparison", height, |root| {
        let (names, plot) = root.split_horizontally(NAMES);
        let builder = || {
            let mut builder = ChartBuilder::on(&plot);
            builder
                .caption(&title, font(16))
                .margin(10)
                .margin_right(24)
                .x_label_area_size(34)
                .y_label_area_size(8);
            builder
        };
        let y = 0.0..entries as f64;
        let bars = Bars {
            values: &values,
            names: &names,
            runs,
        };
        if log {
            let floor = smallest / 3.0;
            // Room right of the longest bar for its label.
            let mut chart = builder()
                .build_cartesian_2d((floor..high * 12.0).log_scale(), y)
                .map_err(drawing("a comparison"))?;
            bars.draw(&mut chart, metric.unit, floor, |v| v * 1.15)
        } else {
            let span = (high - low).max(1e-9);
            let x0 = low - if low < 0.0 { span * 0.03 } else { 0.0 };
            let mut chart = builder()
                .build_cartesian_2d(x0..high + span * 0.25, y)
                .map_err(drawing("a comparison"))?;
            bars.draw(&mut chart, metric.unit, 0.0, |v| v + span * 0.008)
        }
    })?;
    Ok(Figure::svg(
        metric.id,
        &title,
        svg,
        format!(
            "Per entry, one bar per run ({}): {}. Each bar is labelled with its value and, for \
             later runs, its ratio to run a's: ×1 is the same, ×2 twice a's, ×0.5 half; – where \
             a is 0 or unmeasured, or the two have opposite signs.{}",
            runs.iter()
                .enumerate()
                .map(|(i, run)| format!("{} = {}", id(i), run.label()))
                .collect::<Vec<_>>()
                .join(", "),
            metric.about,
            if log {
                " The scale is logarithmic (the entries differ by orders of magnitude); a value \
                 of 0 has no bar."
            } else {
                ""
            }
        ),
    )
    .titled())
}

/// What one comparison draws: per entry, a bar per run, and the entries' names beside.
struct Bars<'r, 'a, 'b> {
    values: &'r [Vec<Option<f64>>],
    names: &'r DrawingArea<SVGBackend<'b>, Shift>,
    runs: &'r [&'a Run],
}

impl Bars<'_, '_, '_> {
    /// Bars from `base` to each value; labels at `after(end)`, the bar's end or 0.
    fn draw<X>(
        &self,
        chart: &mut ChartContext<'_, SVGBackend<'_>, Cartesian2d<X, RangedCoordf64>>,
        unit: &str,
        base: f64,
        after: impl Fn(f64) -> f64,
    ) -> Result<()>
    where
        X: Ranged<ValueType = f64> + ValueFormatter<f64>,
    {
        axes_style(&mut chart.configure_mesh())
            .disable_y_mesh()
            .y_labels(0)
            .x_desc(unit)
            .x_label_formatter(&|v| short(*v))
            .draw()
            .map_err(drawing("a comparison's axes"))?;
        let entries = self.values[0].len();
        let slot = 0.84 / self.runs.len() as f64;
        for entry in 0..entries {
            let top = (entries - entry) as f64 - 0.08;
            let a = self.values[0][entry];
            for (r, run_values) in self.values.iter().enumerate() {
                let (y1, y0) = (top - slot * r as f64, top - slot * (r as f64 + 0.86));
                let mut text = match run_values[entry] {
                    Some(value) => {
                        if value != base {
                            let end = if base > 0.0 { value.max(base) } else { value };
                            chart
                                .draw_series([Rectangle::new(
                                    [(base, y0), (end, y1)],
                                    run_colour(r).filled(),
                                )])
                                .map_err(drawing("a bar"))?;
                        }
                        short(value)
                    }
                    None => "not measured".to_owned(),
                };
                if r > 0 {
                    text.push_str(&format!("  {}", ratio(run_values[entry], a)));
                }
                let at = after(run_values[entry].unwrap_or(base).max(base));
                chart
                    .draw_series([Text::new(
                        text,
                        (at, (y0 + y1) / 2.0),
                        font(11).pos(Pos::new(HPos::Left, VPos::Center)),
                    )])
                    .map_err(drawing("a bar's label"))?;
            }
            let label = entry_label(self.runs[0], entry);
            let (_, y) = chart.backend_coord(&(base.max(f64::MIN_POSITIVE), top - 0.42));
            self.names
                .draw(&Text::new(
                    label,
                    (NAMES as i32 - 8, y),
                    font(12).pos(Pos::new(HPos::Right, VPos::Center)),
                ))
                .map_err(drawing("an entry's name"))?;
        }
        // The key: which colour is which run; full names where they fit.
        for (r, run) in self.runs.iter().enumerate() {
            let (x, y) = if self.runs.len() <= 2 {
                (10, 8 + 18 * r as i32)
            } else {
                (10 + 40 * r as i32, 8)
            };
            self.names
                .draw(&Rectangle::new(
                    [(x, y), (x + 12, y + 12)],
                    run_colour(r).filled(),
                ))
                .map_err(drawing("the key"))?;
            let name = if self.runs.len() <= 2 {
                format!("{}: {}", id(r), run.label())
            } else {
                id(r).to_string()
            };
            self.names
                .draw(&Text::new(name, (x + 16, y), font(12)))
                .map_err(drawing("the key"))?;
        }
        Ok(())
    }
}

/// `#i cmd`, shortened to fit the column of names.
pub fn entry_label(run: &Run, entry: usize) -> String {
    let cmd = run
        .record(entry)
        .map_or("?", |record| record.measure.cmd.as_str());
    let mut label = format!("#{entry} {cmd}");
    if label.chars().count() > 40 {
        label = label.chars().take(39).collect::<String>() + "…";
    }
    label
}

/// RSS over time of every run, each from its first entry's start, with run a's entries shaded.
pub fn rss_over_time(runs: &[&Run]) -> Result<Figure> {
    const TITLE: &str = "Host RSS over time, run by run";
    let lines: Vec<Vec<Vec<(f64, f64)>>> = runs
        .iter()
        .map(|run| {
            let start = run.entries.first().map_or(0.0, |e| e.begin_s);
            let rss = run.samples.column(Column::RssKb).unwrap_or(&[]);
            let t: Vec<f64> = run.samples.t_s.iter().map(|t| t - start).collect();
            // From the first entry on: the samples before it would fall left of the axis.
            let mut lines = super::timeseries::segments(&t, rss, 1.0 / 1024.0);
            for line in &mut lines {
                line.retain(|(t, _)| *t >= 0.0);
            }
            lines.retain(|line| !line.is_empty());
            lines
        })
        .collect();
    let end = lines
        .iter()
        .flatten()
        .flatten()
        .map(|p| p.0)
        .fold(0.001, f64::max);
    let top = lines
        .iter()
        .flatten()
        .flatten()
        .map(|p| p.1)
        .fold(1.0, f64::max)
        * 1.12;
    let a = runs[0];
    let a_start = a.entries.first().map_or(0.0, |e| e.begin_s);
    let shifted: Vec<_> = a
        .entries
        .iter()
        .map(|e| crate::commands::report::read::EntrySpan {
            begin_s: e.begin_s - a_start,
            end_s: e.end_s - a_start,
            ..e.clone()
        })
        .collect();
    let x = 0.0..end;
    let svg = render("the RSS comparison", 400, |root| {
        let (head, rest) = super::strip(root, TITLE)?;
        let mut chart = ChartBuilder::on(&rest)
            .margin(10)
            .margin_top(2)
            .margin_right(24)
            .x_label_area_size(34)
            .y_label_area_size(super::Y_LABELS)
            .build_cartesian_2d(x.clone(), 0.0..top)
            .map_err(drawing("the RSS comparison"))?;
        axes_style(&mut chart.configure_mesh())
            .x_desc("seconds since the first entry began")
            .y_desc("MiB")
            .y_label_formatter(&|v| short(*v))
            .draw()
            .map_err(drawing("the RSS comparison's axes"))?;
        shade_entries(&mut chart, &shifted, &x, (0.0, top), Some(&head))?;
        for (r, run_lines) in lines.into_iter().enumerate() {
            let label = format!("{}: {}", id(r), runs[r].label());
            super::line(&mut chart, run_lines, run_colour(r), &label)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .label_font(font(13))
            .draw()
            .map_err(drawing("the RSS comparison's key"))?;
        Ok(())
    })?;
    Ok(Figure::svg(
        "compare-rss-time",
        TITLE,
        svg,
        "Each run's host RSS from samples.csv, its clock started at its first entry, so the \
         runs' curves start together; the shading and #labels are run a's entries (the others' \
         may end sooner or later). Where the curves part is where the runs differ.",
    )
    .titled())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_say_nothing_where_nothing_can_be_said() {
        assert_eq!(ratio(Some(246.0), Some(200.0)), "×1.23");
        assert_eq!(ratio(Some(0.0), Some(0.0)), "×1");
        assert_eq!(ratio(Some(5.0), Some(0.0)), "–");
        assert_eq!(ratio(Some(-5.0), Some(10.0)), "–");
        assert_eq!(ratio(None, Some(10.0)), "–");
        assert_eq!(ratio(Some(-20.0), Some(-10.0)), "×2.00");
        assert_eq!(ratio(Some(1500.0), Some(10.0)), "×150");
        assert_eq!(ratio(Some(0.0), Some(10.0)), "×0");
    }
}
