//! `free_vs_watermarks.svg`: free memory against the four summed watermarks over an experiment,
//! drawn from `pressure_samples.csv`. The upper chart zooms in on the watermarks with the bands
//! shaded and each change of target band marked; the lower one shows the whole range on a log
//! scale, with the balloon's size, so the settling is visible too.

use std::path::Path;

use anyhow::{Context, Result, ensure};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::plots::drawing;
use crate::views::output::pressure_csv::{SamplePoint, read_samples};

/// The shading of each band, from the bottom of the chart up: the band's name and colour.
const BANDS: [(&str, RGBColor); 5] = [
    ("min: only the kernel allocates", RGBColor(120, 120, 120)),
    ("low [min, low): kswapd awake", RGBColor(230, 80, 60)),
    ("high [low, high)", RGBColor(245, 160, 50)),
    ("promo [high, promo)", RGBColor(240, 220, 80)),
    ("baseline [promo, inf)", RGBColor(120, 200, 120)),
];
const WHAT: &str = "the watermark plot";
const FREE: RGBColor = RGBColor(30, 80, 200);
const BALLOON: RGBColor = RGBColor(140, 60, 160);

fn mib(kb: u64) -> f64 {
    kb as f64 / 1024.0
}

/// Draws `samples` (a pressure_samples.csv) into the SVG file `svg`.
pub fn plot(samples: &Path, svg: &Path) -> Result<()> {
    let points = read_samples(samples)?;
    ensure!(
        !points.is_empty(),
        "{} has no readings to plot",
        samples.display()
    );
    let root = SVGBackend::new(svg, (1200, 900)).into_drawing_area();
    root.fill(&WHITE).map_err(drawing(WHAT))?;
    let (upper, lower) = root.split_vertically(560);
    zoomed(&upper, &points)?;
    overview(&lower, &points)?;
    root.present()
        .map_err(drawing(WHAT))
        .with_context(|| format!("writing {}", svg.display()))
}

/// The watermarks, summed, at one reading: min, low, high, promo (high again without promo).
fn marks(point: &SamplePoint) -> [f64; 4] {
    [
        mib(point.min_kb),
        mib(point.low_kb),
        mib(point.high_kb),
        mib(point.promo_kb.unwrap_or(point.high_kb)),
    ]
}

fn zoomed(area: &DrawingArea<SVGBackend<'_>, Shift>, points: &[SamplePoint]) -> Result<()> {
    let t_end = points.last().map_or(1.0, |p| p.t_s).max(1.0);
    let top = points.iter().map(|p| marks(p)[3]).fold(0.0, f64::max) * 2.0;
    let mut chart = ChartBuilder::on(area)
        .caption(
            "Free memory (summed as user memory reaches it) against the zone watermarks",
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..t_end, 0.0..top)
        .map_err(drawing(WHAT))?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("MiB")
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(drawing(WHAT))?;

    // Each band is the polygon between its lower and upper watermark over time.
    let edge = |index: usize, point: &SamplePoint| -> f64 {
        match index {
            0 => 0.0,
            1..=4 => marks(point)[index - 1],
            _ => top,
        }
    };
    for (index, (name, colour)) in BANDS.iter().enumerate() {
        let mut outline: Vec<(f64, f64)> =
            points.iter().map(|p| (p.t_s, edge(index + 1, p))).collect();
        outline.extend(points.iter().rev().map(|p| (p.t_s, edge(index, p))));
        chart
            .draw_series(std::iter::once(Polygon::new(
                outline,
                colour.mix(0.25).filled(),
            )))
            .map_err(drawing(WHAT))?
            .label(*name)
            .legend(move |(x, y)| {
                Rectangle::new([(x, y - 5), (x + 14, y + 5)], colour.mix(0.5).filled())
            });
    }
    for index in 0..4 {
        chart
            .draw_series(LineSeries::new(
                points.iter().map(|p| (p.t_s, marks(p)[index])),
                BLACK.mix(0.5),
            ))
            .map_err(drawing(WHAT))?;
    }
    chart
        .draw_series(LineSeries::new(
            points.iter().map(|p| (p.t_s, mib(p.free_kb).min(top))),
            FREE.stroke_width(2),
        ))
        .map_err(drawing(WHAT))?
        .label("free (clipped at the top while the balloon grows)")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 14, y)], FREE.stroke_width(2)));

    // Where the balloon started aiming at another band; labels staggered so that bands
    // reached in quick succession stay readable.
    let mut previous = "";
    let mut changes = 0;
    for point in points {
        if point.band != previous {
            previous = &point.band;
            changes += 1;
            // At the bottom, where free memory never goes (only the kernel allocates below
            // min), clear of the legend at the top.
            let height = top * (0.02 + 0.05 * f64::from(changes % 3));
            chart
                .draw_series([PathElement::new(
                    [(point.t_s, 0.0), (point.t_s, top)],
                    BLACK.mix(0.6),
                )])
                .map_err(drawing(WHAT))?;
            chart
                .draw_series([Text::new(
                    format!(" → {} ", point.band),
                    (point.t_s, height),
                    label_style(point.t_s > 0.85 * t_end),
                )])
                .map_err(drawing(WHAT))?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .draw()
        .map_err(drawing(WHAT))?;
    Ok(())
}

/// A label beside a vertical line, above the point: to its right, or to its left near the
/// right edge.
fn label_style(near_right_edge: bool) -> TextStyle<'static> {
    let side = if near_right_edge {
        HPos::Right
    } else {
        HPos::Left
    };
    TextStyle::from(("sans-serif", 14).into_font()).pos(Pos::new(side, VPos::Bottom))
}

fn overview(area: &DrawingArea<SVGBackend<'_>, Shift>, points: &[SamplePoint]) -> Result<()> {
    let t_end = points.last().map_or(1.0, |p| p.t_s).max(1.0);
    let top = points
        .iter()
        .map(|p| mib(p.free_kb).max(mib(p.balloon_kb)))
        .fold(1.0, f64::max)
        * 1.5;
    let mut chart = ChartBuilder::on(area)
        .caption(
            "The whole range (log scale): free memory and the balloon",
            ("sans-serif", 16),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..t_end, (1.0..top).log_scale())
        .map_err(drawing(WHAT))?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("MiB")
        .draw()
        .map_err(drawing(WHAT))?;
    let positive = |mib: f64| mib.max(1.0);
    chart
        .draw_series(LineSeries::new(
            points.iter().map(|p| (p.t_s, positive(mib(p.free_kb)))),
            FREE.stroke_width(2),
        ))
        .map_err(drawing(WHAT))?
        .label("free")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 14, y)], FREE.stroke_width(2)));
    chart
        .draw_series(LineSeries::new(
            points.iter().map(|p| (p.t_s, positive(mib(p.balloon_kb)))),
            BALLOON.stroke_width(2),
        ))
        .map_err(drawing(WHAT))?
        .label("balloon")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 14, y)], BALLOON.stroke_width(2)));
    chart
        .draw_series(LineSeries::new(
            points.iter().map(|p| (p.t_s, positive(marks(p)[0]))),
            BANDS[1].1,
        ))
        .map_err(drawing(WHAT))?
        .label("min")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 14, y)], BANDS[1].1));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .draw()
        .map_err(drawing(WHAT))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plots_a_samples_file_with_every_band_named() {
        let dir = tempfile::tempdir().unwrap();
        let samples = dir.path().join("pressure_samples.csv");
        let mut text = String::from("t_s,band,free_kb,min_kb,low_kb,high_kb,promo_kb,balloon_kb\n");
        for (t, band, free, balloon) in [
            (0.0, "baseline", 20_000_000, 0),
            (1.0, "promo", 10_000_000, 10_000_000),
            (2.0, "promo", 130_000, 19_000_000),
            (3.0, "low", 80_000, 19_100_000),
        ] {
            text += &format!("{t},{band},{free},67584,92160,116736,141312,{balloon}\n");
        }
        std::fs::write(&samples, text).unwrap();
        let svg = dir.path().join("plot.svg");
        plot(&samples, &svg).unwrap();
        let svg = std::fs::read_to_string(svg).unwrap();
        for label in BANDS.map(|(name, _)| name) {
            assert!(svg.contains(label), "{label} missing");
        }
        assert!(svg.contains("→ low"));
    }

    #[test]
    fn an_empty_samples_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let samples = dir.path().join("pressure_samples.csv");
        std::fs::write(
            &samples,
            "t_s,band,free_kb,min_kb,low_kb,high_kb,promo_kb,balloon_kb\n",
        )
        .unwrap();
        let error = plot(&samples, &dir.path().join("plot.svg")).unwrap_err();
        assert!(error.to_string().contains("no readings"), "{error}");
    }
}
