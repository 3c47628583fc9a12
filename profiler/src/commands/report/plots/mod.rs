//! The report's plots, each drawn with plotters into an SVG string: inline in report.html,
//! or written alone (`--format svg|png`; PNG rasterises the same SVG, see [`super::png`]).
//!
//! Every time series shares one width and one left margin, so that plots stacked in the
//! report line up in time; every one shades the entries alternately and labels them `#i`.

pub mod bars;
pub mod held;
pub mod skills;
pub mod timeseries;

use std::error::Error;
use std::ops::Range;

use anyhow::{Result, anyhow};
use plotters::chart::MeshStyle;
use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::read::EntrySpan;

/// A plot of the report, or the reason it has none.
pub struct Figure {
    /// Stable, for anchors, file names (`plots/<id>.svg`) and tests.
    pub id: String,
    pub title: String,
    pub body: Body,
    /// How to read it, and what was measured how.
    pub caption: String,
    /// The SVG draws `title` itself (a page need not repeat it).
    pub titled: bool,
}

pub enum Body {
    Svg(String),
    /// Not measured in this run: why, in words. Never drawn as zeros.
    Absent(String),
}

impl Figure {
    pub fn svg(id: &str, title: &str, svg: String, caption: impl Into<String>) -> Figure {
        Figure {
            id: id.to_owned(),
            title: title.to_owned(),
            body: Body::Svg(svg),
            caption: caption.into(),
            titled: false,
        }
    }

    /// A figure whose SVG carries its title.
    pub fn titled(mut self) -> Figure {
        self.titled = true;
        self
    }

    pub fn absent(id: &str, title: &str, why: impl Into<String>) -> Figure {
        Figure {
            id: id.to_owned(),
            title: title.to_owned(),
            body: Body::Absent(why.into()),
            caption: String::new(),
            titled: false,
        }
    }
}

/// Width of every plot, in SVG pixels; the report scales them to the page.
pub const WIDTH: u32 = 1100;
/// Room for the y labels of every time series: the same everywhere keeps their x aligned.
pub const Y_LABELS: u32 = 78;
pub const FONT: &str = "sans-serif";

pub const BLUE: RGBColor = RGBColor(31, 119, 180);
pub const ORANGE: RGBColor = RGBColor(230, 120, 20);
pub const GREEN: RGBColor = RGBColor(44, 160, 44);
pub const RED: RGBColor = RGBColor(214, 39, 40);
pub const PURPLE: RGBColor = RGBColor(148, 103, 189);
pub const BROWN: RGBColor = RGBColor(140, 86, 75);
pub const GREY: RGBColor = RGBColor(127, 127, 127);

/// One colour per run in comparisons, a, b, c, ...
pub const RUN_COLOURS: [RGBColor; 6] = [BLUE, ORANGE, GREEN, RED, PURPLE, BROWN];

pub fn run_colour(index: usize) -> RGBColor {
    RUN_COLOURS[index % RUN_COLOURS.len()]
}

/// Draws one series as `lines` (a gap in the data splits it), with one legend entry.
pub fn line<Y: Ranged<ValueType = f64>>(
    chart: &mut TimeChart<'_, '_, Y>,
    lines: Vec<Vec<(f64, f64)>>,
    colour: RGBColor,
    label: &str,
) -> Result<()> {
    let mut first = true;
    for points in lines {
        let series = chart
            .draw_series(LineSeries::new(points, colour.stroke_width(2)))
            .map_err(drawing("a line"))?;
        if std::mem::take(&mut first) {
            series.label(label).legend(move |(x, y)| {
                PathElement::new([(x, y), (x + 16, y)], colour.stroke_width(2))
            });
        }
    }
    Ok(())
}

/// A plotting failure, as an error that says what was drawn.
pub fn drawing<E: Error + Send + Sync + 'static>(
    what: &'static str,
) -> impl FnOnce(DrawingAreaErrorKind<E>) -> anyhow::Error {
    move |error| anyhow!("drawing {what}: {error}")
}

/// Draws into a fresh SVG of `height` pixels with `draw`, and returns the SVG text.
pub fn render(
    what: &'static str,
    height: u32,
    draw: impl FnOnce(&DrawingArea<SVGBackend<'_>, Shift>) -> Result<()>,
) -> Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(drawing(what))?;
        draw(&root)?;
        root.present().map_err(drawing(what))?;
    }
    Ok(svg)
}

pub fn font(size: u32) -> TextStyle<'static> {
    (FONT, size).into_font().into()
}

/// The report's one look for axes: small labels and a light grid.
pub fn axes_style<'m, 'a, 'b, X, Y, DB>(
    mesh: &'m mut MeshStyle<'a, 'b, X, Y, DB>,
) -> &'m mut MeshStyle<'a, 'b, X, Y, DB>
where
    X: Ranged,
    Y: Ranged,
    DB: DrawingBackend,
{
    mesh.label_style(font(12))
        .axis_desc_style(font(13))
        .light_line_style(RGBColor(238, 238, 238))
}

/// Numbers for axes and labels: 950, 12.5k, 3.2M.
pub fn short(value: f64) -> String {
    let magnitude = value.abs();
    let (scaled, suffix) = if magnitude >= 1e9 {
        (value / 1e9, "G")
    } else if magnitude >= 1e6 {
        (value / 1e6, "M")
    } else if magnitude >= 1e4 {
        (value / 1e3, "k")
    } else {
        (value, "")
    };
    let text = if scaled.abs() >= 100.0 || scaled.fract() == 0.0 {
        format!("{scaled:.0}")
    } else if scaled.abs() >= 10.0 {
        format!("{scaled:.1}")
    } else {
        format!("{scaled:.2}")
    };
    let text = if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    };
    format!("{text}{suffix}")
}

/// A time-series chart: x in seconds over `x`, y over `y`, with the entries shaded.
pub type TimeChart<'a, 'b, Y> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, Y>>;

/// Height of the strip above a labelled time series: its title, then the entries' labels.
pub const STRIP: u32 = 50;

/// Splits `area` into a strip with `title` (where [`shade_entries`] puts the entries'
/// labels, clear of the data and the legend) and the rest, for the chart.
pub fn strip<'b>(
    area: &DrawingArea<SVGBackend<'b>, Shift>,
    title: &str,
) -> Result<(
    DrawingArea<SVGBackend<'b>, Shift>,
    DrawingArea<SVGBackend<'b>, Shift>,
)> {
    let (strip, rest) = area.split_vertically(STRIP);
    let width = strip.dim_in_pixel().0 as i32;
    strip
        .draw(&Text::new(
            title.to_owned(),
            (width / 2, 8),
            font(16).pos(Pos::new(HPos::Center, VPos::Top)),
        ))
        .map_err(drawing("a title"))?;
    Ok((strip, rest))
}

/// Shades every other entry, and labels the entries in `labels` (a [`strip`] above the
/// chart): `#i` where an entry is wide enough, `#i–j` for a run of narrow ones.
pub fn shade_entries<Y>(
    chart: &mut TimeChart<'_, '_, Y>,
    entries: &[EntrySpan],
    x: &Range<f64>,
    (bottom, top): (f64, f64),
    labels: Option<&DrawingArea<SVGBackend<'_>, Shift>>,
) -> Result<()>
where
    Y: Ranged<ValueType = f64>,
{
    let shade = RGBColor(120, 120, 140).mix(0.10);
    let rectangles = entries
        .iter()
        .filter(|entry| entry.index % 2 == 1)
        .map(|entry| {
            Rectangle::new(
                [
                    (entry.begin_s, bottom),
                    (entry.end_s.max(entry.begin_s), top),
                ],
                shade.filled(),
            )
        });
    chart
        .draw_series(rectangles)
        .map_err(drawing("the entries' shading"))?;
    let Some(strip) = labels else {
        return Ok(());
    };
    let width_px = f64::from(chart.plotting_area().dim_in_pixel().0);
    let px_per_s = width_px / (x.end - x.start).max(1e-9);
    let (base_x, _) = strip.get_base_pixel();
    let strip_width = strip.dim_in_pixel().0 as i32;
    let style = font(12)
        .color(&RGBColor(60, 60, 80))
        .pos(Pos::new(HPos::Center, VPos::Bottom));
    for group in label_groups(entries, px_per_s, 26.0) {
        let (first, last) = (&entries[group.start], &entries[group.end - 1]);
        let text = if group.len() == 1 {
            format!("#{}", first.index)
        } else {
            format!("#{}–{}", first.index, last.index)
        };
        let centre = (first.begin_s + last.end_s) / 2.0;
        let half = text.chars().count() as i32 * 4;
        let x_px = (chart.backend_coord(&(centre, top)).0 - base_x).clamp(half, strip_width - half);
        strip
            .draw(&Text::new(text, (x_px, STRIP as i32 - 3), style.clone()))
            .map_err(drawing("the entries' labels"))?;
    }
    Ok(())
}

/// Consecutive entries gathered until their span is at least `min_px` wide; the tail keeps
/// a label of its own (the last entry, usually `stop`, matters).
pub fn label_groups(entries: &[EntrySpan], px_per_s: f64, min_px: f64) -> Vec<Range<usize>> {
    let mut groups: Vec<Range<usize>> = Vec::new();
    let mut start = 0;
    for i in 0..entries.len() {
        let width = (entries[i].end_s - entries[start].begin_s) * px_per_s;
        if width >= min_px {
            groups.push(start..i + 1);
            start = i + 1;
        }
    }
    if start < entries.len() {
        groups.push(start..entries.len());
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: usize, begin_s: f64, end_s: f64) -> EntrySpan {
        EntrySpan {
            index,
            cmd: String::new(),
            begin_s,
            end_s,
            took_ms: (end_s - begin_s) * 1e3,
        }
    }

    #[test]
    fn narrow_entries_share_a_label() {
        let entries = [
            entry(0, 0.0, 10.0),
            entry(1, 10.0, 10.1),
            entry(2, 10.1, 10.2),
            entry(3, 10.2, 20.0),
            entry(4, 20.0, 20.01),
        ];
        // 10 px per second, labels need 26 px.
        let groups = label_groups(&entries, 10.0, 26.0);
        assert_eq!(groups, [0..1, 1..4, 4..5]);
    }

    #[test]
    fn short_numbers() {
        assert_eq!(short(950.0), "950");
        assert_eq!(short(12_500.0), "12.5k");
        assert_eq!(short(3_200_000.0), "3.2M");
        assert_eq!(short(0.25), "0.25");
        assert_eq!(short(-40_000.0), "-40k");
    }
}
