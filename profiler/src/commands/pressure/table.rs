//! The experiment's results as two text tables for stdout: how long the iterations took in
//! each band held, and what the kernel did meanwhile, with where each figure came from.

use std::fmt::Write as _;

use crate::commands::pressure::experiment::{BandResult, Outcome};
use crate::commands::pressure::kernel::{Figure, Source};
use crate::ground::band::Band;
use crate::ground::units;
use crate::record::balloon::Basis;

/// Columns padded to their widest cell; the first left-aligned, the others right-aligned.
fn render(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (index, (cell, width)) in cells.zip(&widths).enumerate() {
            let gap = if index == 0 { "" } else { "  " };
            if index == 0 {
                let _ = write!(text, "{cell:<width$}");
            } else {
                let _ = write!(text, "{gap}{cell:>width$}");
            }
        }
        text.trim_end().to_string() + "\n"
    };
    let mut out = line(&mut header.iter().copied());
    for row in rows {
        out += &line(&mut row.iter().map(String::as_str));
    }
    out
}

fn figure(figure: Option<Figure>, decimals: usize) -> String {
    figure.map_or("-".to_string(), |f| format!("{:.decimals$}", f.value))
}

/// A band's median iteration against baseline's, with its 95% CI.
fn versus_baseline(r: &BandResult) -> String {
    match (r.vs_baseline, r.band) {
        (Some(s), _) => format!("{:+.1}% [{:+.1}, {:+.1}]", s.median_pct, s.lo_pct, s.hi_pct),
        (None, Band::Baseline) if r.times.is_some() => "(itself)".to_string(),
        (None, _) => "-".to_string(),
    }
}

fn timing_rows(results: &[BandResult]) -> Vec<Vec<String>> {
    results
        .iter()
        .map(|r| {
            let held = &r.held;
            let (free, inside) = if held.reads == 0 {
                ("-".to_string(), "-".to_string())
            } else {
                (
                    format!(
                        "{}..{}",
                        units::pages_in_mib(held.min_free_pages),
                        units::pages_in_mib(held.max_free_pages)
                    ),
                    format!("{:.0}%", held.in_band_percent()),
                )
            };
            let band = format!(
                "[{}, {})",
                units::pages_in_mib(held.bounds.lower),
                held.bounds
                    .upper
                    .map_or("inf".to_string(), units::pages_in_mib)
            );
            let ms = |value: Option<f64>| value.map_or("-".to_string(), |v| format!("{v:.3}"));
            vec![
                r.band.name().to_string(),
                r.outcome.name().to_string(),
                free,
                band,
                inside,
                format!("{:.2}", held.max_balloon_bytes as f64 / f64::from(1 << 30)),
                r.times.map_or(0, |t| t.count).to_string(),
                ms(r.times.map(|t| t.mean_ms)),
                ms(r.times.map(|t| t.median_ms)),
                ms(r.times.map(|t| t.p99_ms)),
                versus_baseline(r),
            ]
        })
        .collect()
}

fn kernel_rows(results: &[BandResult]) -> Vec<Vec<String>> {
    results
        .iter()
        .map(|r| {
            let k = &r.kernel;
            let pair = |pair: Option<(Figure, Figure)>, decimals: usize| match pair {
                Some((a, b)) => format!("{:.decimals$}/{:.decimals$}", a.value, b.value),
                None => "-".to_string(),
            };
            vec![
                r.band.name().to_string(),
                format!("{:.1}", k.kswapd_cpu_percent().value),
                figure(k.kswapd_wakes(), 0),
                figure(k.kswapd_awake_ms(), 1),
                figure(k.direct_reclaims(), 0),
                pair(k.direct_reclaim_ms().zip(k.direct_reclaim_max_ms()), 2),
                figure(k.lru_scanned(), 0),
                figure(k.lru_reclaimed(), 0),
                pair(k.psi_ms(), 1),
                figure(k.major_faults(), 0),
                pair(k.reclaimed_file_anon(), 0),
                pair(k.swap_in_out(), 0),
            ]
        })
        .collect()
}

/// Per zone: the lowest band its own usable free pages reached, and the fewest of them.
fn zone_table(results: &[BandResult]) -> Option<String> {
    let zones: Vec<String> = results
        .first()?
        .held
        .zones
        .iter()
        .map(|zone| format!("{} {}", zone.id.node, zone.id.name))
        .collect();
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|r| {
            let mut row = vec![r.band.name().to_string()];
            row.extend(r.held.zones.iter().map(|zone| {
                match zone.min_usable_pages.zip(zone.lowest_band) {
                    Some((pages, band)) => format!("{band} ({})", units::pages_in_mib(pages)),
                    None => "-".to_string(),
                }
            }));
            row
        })
        .collect();
    let mut header = vec!["band"];
    header.extend(zones.iter().map(String::as_str));
    Some(render(&header, &rows))
}

/// Which mechanism produced each kernel figure, from the first result.
fn sources(result: &BandResult) -> String {
    let k = &result.kernel;
    let name = |figure: Option<Figure>| figure.map_or("not measured", |f| f.source.name());
    let probes_or = |figure: Option<Figure>, procfs: &str| match figure.map(|f| f.source) {
        Some(Source::Probes) => "probes (vmscan tracepoints)".to_string(),
        Some(Source::Procfs) => procfs.to_string(),
        None => "not measured".to_string(),
    };
    format!(
        "sources: kswapd cpu: /proc/<kswapd>/stat utime+stime; kswapd wakes and awake time: {}; \
         direct reclaims: {} (every process); reclaim ms: {} (the iterating process); \
         LRU scanned/reclaimed: {}; PSI: /proc/pressure/memory; major faults, reclaimed file/anon \
         (pgsteal_file/anon) and swap: /proc/vmstat (system-wide)\n",
        name(k.kswapd_wakes()),
        probes_or(k.direct_reclaims(), "/proc/vmstat allocstall_*"),
        name(k.direct_reclaim_ms()),
        probes_or(
            k.lru_scanned(),
            "/proc/vmstat pgscan/pgsteal_{kswapd,direct}"
        ),
    )
}

/// The 2024 watermark experiment's medians, in the order it held the bands, and what it saw
/// of kswapd in `low`: the reference `--compare-2024` sets beside ours.
const REFERENCE_2024: [(Band, f64); 4] = [
    (Band::Baseline, 546.0),
    (Band::Promo, 547.0),
    (Band::High, 548.0),
    (Band::Low, 564.0),
];
const REFERENCE_2024_KSWAPD: &str = "20-30";

/// Our slowdowns and kswapd CPU beside the 2024 experiment's. Its iterations were a skill
/// workload of ~0.5 s and ours are a block of memory written, so only the ratios compare.
pub fn compare_2024(results: &[BandResult]) -> String {
    let baseline = REFERENCE_2024[0].1;
    let rows: Vec<Vec<String>> = REFERENCE_2024
        .iter()
        .map(|&(band, ms)| {
            let ours = results.iter().find(|r| r.band == band);
            vec![
                band.name().to_string(),
                format!("{ms:.0}"),
                if band == Band::Baseline {
                    "(itself)".to_string()
                } else {
                    format!("{:+.1}%", 100.0 * (ms / baseline - 1.0))
                },
                ours.map_or("-".to_string(), versus_baseline),
                if band == Band::Low {
                    REFERENCE_2024_KSWAPD.to_string()
                } else {
                    "-".to_string()
                },
                ours.map_or("-".to_string(), |r| {
                    format!("{:.1}", r.kernel.kswapd_cpu_percent().value)
                }),
            ]
        })
        .collect();
    let mut out = String::from(
        "Beside the 2024 watermark experiment (its median iteration per band; kswapd as it \
         reported it in low, where it also read ~125 MiB/s from swap):\n",
    );
    out += &render(
        &[
            "band",
            "2024 ms",
            "2024 vs baseline",
            "ours vs baseline [95% CI]",
            "2024 kswapd cpu%",
            "ours",
        ],
        &rows,
    );
    out
}

/// Both tables, the sources, and the reasons of bands that were not held.
pub fn render_results(results: &[BandResult]) -> String {
    let basis = results.first().map_or(Basis::Summed, |r| r.held.basis);
    let mut out = String::from(match basis {
        Basis::Summed => {
            "Iterations per band held (free memory summed as user memory reaches it):\n"
        }
        Basis::PerZone => {
            "Iterations per band held (free memory summed as user memory reaches it; in band: \
             every zone in the band of its own watermarks):\n"
        }
    });
    out += &render(
        &[
            "band",
            "outcome",
            "free held MiB",
            "band MiB",
            "in band",
            "balloon GiB",
            "iters",
            "mean ms",
            "median ms",
            "p99 ms",
            "vs baseline [95% CI]",
        ],
        &timing_rows(results),
    );
    if let Some(zones) = zone_table(results) {
        out += "\nPer zone, against its own watermarks: lowest band (fewest MiB free above its \
                lowmem reserve; - for a zone that cannot serve user memory):\n";
        out += &zones;
    }
    out += "\nWhat the kernel did during the iterations:\n";
    out += &render(
        &[
            "band",
            "kswapd cpu%",
            "wakes",
            "awake ms",
            "direct reclaims",
            "reclaim ms total/max",
            "LRU scanned",
            "reclaimed",
            "PSI some/full ms",
            "major faults",
            "reclaimed file/anon",
            "swap in/out",
        ],
        &kernel_rows(results),
    );
    if let Some(first) = results.first() {
        out += &sources(first);
    }
    for result in results {
        if result.outcome != Outcome::Held {
            let _ = writeln!(
                out,
                "{}: {}: {}",
                result.band,
                result.outcome.name(),
                result.outcome.reason()
            );
        }
        let held = &result.held;
        let unpressed = result.band == Band::Baseline && held.max_balloon_bytes == 0;
        if held.reads > 0 && held.in_band_percent() < 90.0 && unpressed {
            let _ = writeln!(
                out,
                "{}: with the balloon empty, {} stayed below the band in {:.0}% of the \
                 readings (free memory summed {}..{} MiB): no balloon lifts it, and kswapd, \
                 woken only below the low watermark, reclaims only up to high, so what page \
                 cache or other processes hold there stays. The baseline is the machine as it is.",
                result.band,
                below_baseline(held),
                100.0 - held.in_band_percent(),
                units::pages_in_mib(held.min_free_pages),
                units::pages_in_mib(held.max_free_pages)
            );
        } else if held.reads > 0 && held.in_band_percent() < 90.0 {
            let _ = writeln!(
                out,
                "{}: free memory was in the band in only {:.0}% of the readings (kswapd or \
                 other processes moved it faster than the balloon followed): the figures \
                 describe what was held, {}..{} MiB",
                result.band,
                held.in_band_percent(),
                units::pages_in_mib(held.min_free_pages),
                units::pages_in_mib(held.max_free_pages)
            );
        }
        if let Some(boost) = crate::views::explain::boost_moved_the_band(held) {
            let _ = writeln!(out, "{}: {boost}", result.band);
        }
        if held.late_steps > 0 {
            let _ = writeln!(
                out,
                "{}: {} balloon steps ran past their time limit (the slowest took {} ms) with \
                 free memory above the high watermark: the machine was slow to hand out \
                 memory, and the iteration times include that",
                result.band, held.late_steps, held.slowest_step_ms
            );
        }
        if let Some(eased) = &result.held.eased {
            let _ = writeln!(out, "{}: {eased}", result.band);
        }
    }
    out
}

/// The zones a baseline window read below their own promo watermark, in words; "free memory"
/// when the band was held on the sum.
fn below_baseline(held: &crate::record::balloon::BandHeld) -> String {
    let zones: Vec<String> = held
        .zones
        .iter()
        .filter(|zone| zone.lowest_band.is_some_and(|band| band != Band::Baseline))
        .map(|zone| format!("zone {}", zone.id.name))
        .collect();
    if held.basis == Basis::PerZone && !zones.is_empty() {
        zones.join(" and ")
    } else {
        "free memory".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up() {
        let table = render(
            &["band", "ms"],
            &[
                vec!["baseline".into(), "1.5".into()],
                vec!["low".into(), "12.25".into()],
            ],
        );
        assert_eq!(table, "band         ms\nbaseline    1.5\nlow       12.25\n");
    }

    /// Without our figures the reference still reads: 564 ms is +3.3% on 546.
    #[test]
    fn the_2024_reference_sets_its_ratios_beside_ours() {
        let table = compare_2024(&[]);
        let low = table.lines().find(|line| line.starts_with("low")).unwrap();
        assert!(low.contains("564") && low.contains("+3.3%"), "{low}");
        assert!(low.contains("20-30"), "{low}");
        assert!(low.trim_end().ends_with('-'), "no figures of ours: {low}");
    }
}
