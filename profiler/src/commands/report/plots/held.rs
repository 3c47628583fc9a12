//! What holds the host's memory at each entry's end: one stacked bar per entry, its parts the
//! `held_*` columns (smaps, by mapping layout), so an entry whose bar grows shows what grew.

use anyhow::Result;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::bars::{horizontal_bars, key};
use super::{BLUE, BROWN, Figure, GREEN, GREY, ORANGE, drawing, font, render};
use crate::commands::report::read::Run;
use crate::ground::units;
use crate::record::composition::Composition;

/// Each part's colour, in `Composition::parts` order: heap, wasm, code, files, stacks.
const COLOURS: [RGBColor; 5] = [ORANGE, GREEN, BLUE, GREY, BROWN];

pub fn by_holder(run: &Run) -> Result<Figure> {
    const TITLE: &str = "What holds the host's memory, at each entry's end";
    let rows: Vec<(String, Composition)> = run
        .records
        .iter()
        .filter_map(|record| {
            let held = record.held.as_ref()?;
            Some((
                format!("#{} {}", record.measure.index, record.measure.cmd),
                held.after,
            ))
        })
        .collect();
    if rows.is_empty() {
        return Ok(Figure::absent(
            "held",
            TITLE,
            "not measured: the run has no held_* figures (a run from before them, or a host \
             gone before its first entry ended)",
        ));
    }
    let widest = rows
        .iter()
        .map(|(_, held)| held.rss_kb as f64 / 1024.0)
        .fold(1.0, f64::max);
    let bar = 40u32;
    let height = 150 + bar * rows.len() as u32;
    let svg = render("the memory by holder", height, |root| {
        let (plot, legend) = root.split_vertically(height - 44);
        let mut chart =
            horizontal_bars(&plot, TITLE, 0.0..widest * 1.04, rows.len(), "MiB resident")?;
        for (row, (name, held)) in rows.iter().enumerate() {
            let y = (rows.len() - 1 - row) as f64;
            let (low, high) = (y + 0.1, y + 0.55);
            let mut start = 0.0;
            for ((_, kb), colour) in held.parts().iter().zip(COLOURS) {
                let end = start + *kb as f64 / 1024.0;
                chart
                    .draw_series([Rectangle::new(
                        [(start, low), (end, high)],
                        colour.mix(0.85).filled(),
                    )])
                    .map_err(drawing("a part of an entry's memory"))?;
                start = end;
            }
            chart
                .draw_series([Text::new(
                    format!("{name} — {}", units::bytes(held.rss_kb as f64 * 1024.0)),
                    (0.0, high + 0.03),
                    font(12).pos(Pos::new(HPos::Left, VPos::Bottom)),
                )])
                .map_err(drawing("an entry's label"))?;
        }
        let items: Vec<(String, RGBColor)> = Composition::default()
            .parts()
            .iter()
            .map(|(holder, _)| holder.name().to_owned())
            .zip(COLOURS)
            .collect();
        key(&legend, &items)
    })?;
    Ok(Figure::svg(
        "held",
        TITLE,
        svg,
        "Each entry's resident memory at its end, from the host's /proc/PID/smaps, split by what \
         holds it (commands.csv's held_* columns): heap, the allocator's (after a compile, \
         mostly memory malloc freed and kept: host_heap_in_use_kb says how much it has in use); \
         wasm, linear memories of live instances; code, compiled skills; files, the binary and \
         its libraries; stacks. A bar that grows by code is a skill compiled; one that grows by \
         heap is memory a host could give back.",
    )
    .titled())
}
