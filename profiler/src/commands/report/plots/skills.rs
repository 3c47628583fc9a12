//! Whose page faults: one stacked bar per entry, the entry's faults cut by skill (the
//! markers' rows: every phase of a skill together, the unattributed host row apart), each
//! bar scaled to 100% so entries of any size compare.

use std::collections::BTreeMap;

use anyhow::Result;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::bars::{horizontal_bars, key};
use super::{BLUE, BROWN, Figure, GREEN, GREY, ORANGE, PURPLE, RED, drawing, font, render};
use crate::commands::report::read::Run;
use crate::ground::units;
use crate::producers::probes::markers;

/// Skills drawn in a colour of their own (the most faulting over the run); the rest share one.
const COLOURS: [RGBColor; 6] = [BLUE, ORANGE, GREEN, RED, PURPLE, BROWN];
const OTHERS: RGBColor = RGBColor(190, 190, 190);
const HOST: RGBColor = GREY;

/// Per entry with skill rows: (index, cmd, faults per skill name; `None` is the host row).
type Shares = Vec<(usize, String, BTreeMap<Option<String>, u64>)>;

fn shares(run: &Run) -> Shares {
    run.records
        .iter()
        .filter_map(|record| {
            let rows = record.probes.as_ref()?.skills.as_ref()?;
            let faults: BTreeMap<Option<String>, u64> = markers::faults_by_skill(rows)
                .into_iter()
                .map(|(skill, phases)| (skill.map(str::to_owned), phases.values().sum()))
                .collect();
            (faults.values().sum::<u64>() > 0)
                .then(|| (record.measure.index, record.measure.cmd.to_string(), faults))
        })
        .collect()
}

pub fn faults_by_skill(run: &Run) -> Result<Figure> {
    const TITLE: &str = "Whose page faults: each entry's faults by skill";
    let entries = shares(run);
    if entries.is_empty() {
        let why = if run.records.iter().any(|r| r.probes.is_some()) {
            "not measured: the host had no markers (skill attribution was off; the run's head says why)"
        } else {
            "not measured: the probes were off (--no-probes)"
        };
        return Ok(Figure::absent("skills", TITLE, why));
    }
    let mut totals: BTreeMap<&str, u64> = BTreeMap::new();
    for (_, _, faults) in &entries {
        for (skill, n) in faults {
            if let Some(skill) = skill {
                *totals.entry(skill).or_default() += n;
            }
        }
    }
    let mut ranked: Vec<(&str, u64)> = totals.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let coloured: Vec<&str> = ranked.iter().take(COLOURS.len()).map(|(s, _)| *s).collect();
    let colour = |skill: &Option<String>| match skill {
        None => HOST,
        Some(name) => coloured
            .iter()
            .position(|c| c == name)
            .map_or(OTHERS, |i| COLOURS[i]),
    };

    let bar = 34u32;
    let height = 110 + bar * entries.len() as u32;
    let svg = render("the faults by skill", height, |root| {
        let (plot, key_area) = root.split_vertically(height - 50);
        let mut chart = horizontal_bars(
            &plot,
            TITLE,
            0.0..100.0,
            entries.len(),
            "% of the entry's page faults",
        )?;
        for (row, (index, cmd, faults)) in entries.iter().enumerate() {
            let total: u64 = faults.values().sum();
            let y = (entries.len() - 1 - row) as f64;
            let (low, high) = (y + 0.12, y + 0.52);
            // Coloured skills first, largest first; then the others together; the host last.
            let mut parts: Vec<(Option<String>, u64)> =
                faults.iter().map(|(s, n)| (s.clone(), *n)).collect();
            parts.sort_by_key(|(skill, n)| {
                let rank = match skill {
                    None => usize::MAX,
                    Some(name) => coloured
                        .iter()
                        .position(|c| c == name)
                        .unwrap_or(COLOURS.len()),
                };
                (rank, std::cmp::Reverse(*n))
            });
            let mut start = 0.0;
            for (skill, n) in &parts {
                let width = 100.0 * *n as f64 / total as f64;
                chart
                    .draw_series([Rectangle::new(
                        [(start, low), (start + width, high)],
                        colour(skill).mix(0.85).filled(),
                    )])
                    .map_err(drawing("a skill's share"))?;
                start += width;
            }
            chart
                .draw_series([Text::new(
                    format!(
                        "#{index} {cmd} — {} fault{}",
                        units::count(total as f64),
                        if total == 1 { "" } else { "s" }
                    ),
                    (0.0, high + 0.04),
                    font(12).pos(Pos::new(HPos::Left, VPos::Bottom)),
                )])
                .map_err(drawing("an entry's label"))?;
        }
        let mut keys: Vec<(String, RGBColor)> = coloured
            .iter()
            .enumerate()
            .map(|(i, name)| ((*name).to_owned(), COLOURS[i]))
            .collect();
        if ranked.len() > coloured.len() {
            keys.push((
                format!("{} other skills", ranked.len() - coloured.len()),
                OTHERS,
            ));
        }
        keys.push(("host (no skill)".to_owned(), HOST));
        key(&key_area, &keys)?;
        Ok(())
    })?;
    Ok(Figure::svg(
        "skills",
        TITLE,
        svg,
        "Each entry's page faults (user and kernel mode), cut by the skill whose request, \
         compile or instantiation the faulting thread was working on, from skillhost's markers \
         (skills.csv has the numbers, by phase). Grey is the host's own: threads working for no \
         skill (the runtime, the allocator, the HTTP server). One skill with most of a bar is \
         the outlier to look at; its flamegraph (--stacks) says which code.",
    )
    .titled())
}
