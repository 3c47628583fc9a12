//! How the ingredients of capacity depend on the machine's parallelism. A compile's threads
//! (one per core) each get a malloc arena of their own, and what a compile frees stays in
//! them, so the first skill and each further one cost more on a machine with more cores. Runs
//! made at several core counts (`skillprof run --cores N`, or `skillprof sweep`) give the
//! ingredients at each; a prediction for N cores takes the ones measured at N, or interpolates
//! between the two counts around N, and refuses outside them.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::model::{self, Figure, Ingredients, Missing, RunRecords};
use crate::ground::cmds::Copies;
use crate::ground::units::{bytes, count};

/// The ingredients measured at one core count.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    pub cores: u32,
    pub runs: Vec<String>,
    pub ingredients: Ingredients,
    /// Figures these runs could not give, and the lines that would.
    pub missing: Vec<Missing>,
}

/// Where a prediction's ingredients came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "how")]
pub enum Source {
    /// Runs made at the machine's core count.
    Measured { cores: u32 },
    /// Between the runs made at `below` and `above` cores, linearly in the core count.
    Interpolated { below: u32, above: u32 },
    /// Runs that do not say which parallelism they had (made before `--cores`).
    Unstated,
}

/// The ingredients for one machine, where they came from, and what they lack.
pub struct Found {
    pub ingredients: Ingredients,
    pub source: Source,
    pub missing: Vec<Missing>,
}

/// The ingredients at each core count the runs were made at, and at each count what they
/// lack. Runs that do not say their count are left out when any other does.
pub fn points(runs: &[RunRecords], kind: &Copies) -> (Vec<Point>, Vec<(u32, Vec<Missing>)>) {
    let mut by_cores: BTreeMap<u32, Vec<&RunRecords>> = BTreeMap::new();
    for run in runs {
        if let Some(cores) = run.cores {
            by_cores.entry(cores).or_default().push(run);
        }
    }
    let (mut points, mut lacking) = (Vec::new(), Vec::new());
    for (cores, group) in by_cores {
        let group: Vec<RunRecords> = group.into_iter().cloned().collect();
        match model::ingredients(&group, kind) {
            Ok((ingredients, missing)) => points.push(Point {
                cores,
                runs: group.iter().map(|run| run.name.clone()).collect(),
                ingredients,
                missing,
            }),
            Err(missing) => lacking.push((cores, missing)),
        }
    }
    (points, lacking)
}

/// The ingredients for a machine of `cores`: measured there, or between the two counts around
/// it. The error says which runs to make.
pub fn at(points: &[Point], cores: u32, workload: &str) -> Result<Found, String> {
    if let Some(point) = points.iter().find(|p| p.cores == cores) {
        return Ok(Found {
            ingredients: point.ingredients.clone(),
            source: Source::Measured { cores },
            missing: point.missing.clone(),
        });
    }
    let below = points.iter().rev().find(|p| p.cores < cores);
    let above = points.iter().find(|p| p.cores > cores);
    match (below, above) {
        (Some(below), Some(above)) => {
            let t = f64::from(cores - below.cores) / f64::from(above.cores - below.cores);
            let mut missing = below.missing.clone();
            missing.retain(|m| above.missing.contains(m));
            Ok(Found {
                ingredients: between(&below.ingredients, &above.ingredients, t),
                source: Source::Interpolated {
                    below: below.cores,
                    above: above.cores,
                },
                missing,
            })
        }
        _ => {
            let made: Vec<String> = points.iter().map(|p| p.cores.to_string()).collect();
            Err(format!(
                "the runs were made with the parallelism of {} core(s), and what a compile \
                 leaves in malloc's arenas grows with it, so they cannot answer for {cores}: \
                 make a run at {cores} (`skillprof run {workload} --cores {cores}`), or runs on \
                 both sides of it (`skillprof sweep {workload} --cores {}`)",
                made.join(", "),
                sweep_counts(points, cores)
            ))
        }
    }
}

/// Core counts that would bracket `cores` together with what was measured.
fn sweep_counts(points: &[Point], cores: u32) -> String {
    let mut counts: Vec<u32> = points.iter().map(|p| p.cores).collect();
    counts.push(cores);
    counts.sort_unstable();
    counts.dedup();
    counts
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

fn lerp(a: f64, b: f64, t: f64) -> f64 {
    a + (b - a) * t
}

fn figure(a: &Figure, b: &Figure, t: f64) -> Figure {
    let mut from = a.from.clone();
    from.extend(b.from.iter().cloned());
    from.sort();
    from.dedup();
    Figure {
        value: lerp(a.value, b.value, t),
        low: lerp(a.low, b.low, t),
        high: lerp(a.high, b.high, t),
        from,
    }
}

fn either<T: Clone>(a: &Option<T>, b: &Option<T>, both: impl Fn(&T, &T) -> T) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(both(a, b)),
        (a, b) => a.clone().or_else(|| b.clone()),
    }
}

/// Every memory and CPU figure a fraction `t` of the way from `a` to `b`.
fn between(a: &Ingredients, b: &Ingredients, t: f64) -> Ingredients {
    let f = |a: &Figure, b: &Figure| figure(a, b, t);
    let limit = |a: &model::ProcessLimit, b: &model::ProcessLimit| model::ProcessLimit {
        limit: a.limit,
        first: lerp(a.first, b.first, t),
        first_skills: a.first_skills,
        per_skill: f(&a.per_skill, &b.per_skill),
        per_request: either(&a.per_request, &b.per_request, f),
    };
    Ingredients {
        kind: a.kind.clone(),
        basis: if a.basis == b.basis {
            a.basis
        } else {
            model::Basis::Rss
        },
        idle_kb: f(&a.idle_kb, &b.idle_kb),
        first_kb: f(&a.first_kb, &b.first_kb),
        marginal_kb: f(&a.marginal_kb, &b.marginal_kb),
        warmup_kb: f(&a.warmup_kb, &b.warmup_kb),
        transient_kb: f(&a.transient_kb, &b.transient_kb),
        first_transient_kb: either(&a.first_transient_kb, &b.first_transient_kb, f),
        per_request_kb: either(&a.per_request_kb, &b.per_request_kb, f),
        cpu_per_skill_ms: f(&a.cpu_per_skill_ms, &b.cpu_per_skill_ms),
        mappings: either(&a.mappings, &b.mappings, limit),
        address_space: either(&a.address_space, &b.address_space, limit),
        first_held: either(&a.first_held, &b.first_held, |a, b| model::FirstHeld {
            heap_kb: lerp(a.heap_kb, b.heap_kb, t),
            code_kb: lerp(a.code_kb, b.code_kb, t),
            other_kb: lerp(a.other_kb, b.other_kb, t),
            kept_kb: either(&a.kept_kb, &b.kept_kb, |a, b| lerp(*a, *b, t)),
            arenas: either(&a.arenas, &b.arenas, |a, b| lerp(*a, *b, t).round()),
        }),
        compile_threads: either(&a.compile_threads, &b.compile_threads, |a, b| {
            model::CompileThreads {
                idle: lerp(a.idle as f64, b.idle as f64, t).round() as u64,
                peak: lerp(a.peak as f64, b.peak as f64, t).round() as u64,
            }
        }),
    }
}

fn kb(kb: f64) -> String {
    bytes(kb * 1024.0)
}

fn range(figure: &Figure) -> String {
    if figure.low == figure.high {
        return kb(figure.value);
    }
    format!(
        "{} [{}-{}]",
        kb(figure.value),
        kb(figure.low),
        kb(figure.high)
    )
}

/// The dependence as a markdown table, one row per core count.
pub fn table(points: &[Point]) -> String {
    let mut text = String::from(
        "| cores | runs | host threads at most | malloc arenas | first skill | of it: heap in use, kept, code | its transient | each further skill [95% CI] | warm-up | its transient |\n\
         |---:|---:|---:|---:|---|---|---|---|---|---|\n",
    );
    for point in points {
        let found = &point.ingredients;
        let threads = found
            .compile_threads
            .as_ref()
            .map_or("-".to_owned(), |t| t.peak.to_string());
        let held = found.first_held.as_ref();
        let arenas = held.and_then(|h| h.arenas).map_or("-".to_owned(), count);
        let split = held.map_or("-".to_owned(), |held| {
            let in_use = held.kept_kb.map(|kept| held.heap_kb - kept);
            format!(
                "{}, {}, {}",
                in_use.map_or("-".to_owned(), kb),
                held.kept_kb.map_or("-".to_owned(), kb),
                kb(held.code_kb)
            )
        });
        let _ = writeln!(
            text,
            "| {} | {} | {threads} | {arenas} | {} | {split} | {} | {} | {} | {} |",
            point.cores,
            point.runs.len(),
            range(&found.first_kb),
            found
                .first_transient_kb
                .as_ref()
                .map_or("-".to_owned(), |figure| kb(figure.value)),
            range(&found.marginal_kb),
            range(&found.warmup_kb),
            kb(found.transient_kb.value),
        );
    }
    text
}

/// What scaled between the fewest and the most cores measured, in words.
pub fn scaled(points: &[Point]) -> Option<String> {
    let (low, high) = (points.first()?, points.last()?);
    if low.cores == high.cores {
        return None;
    }
    let (a, b) = (&low.ingredients, &high.ingredients);
    let change = |name: &str, a: f64, b: f64| {
        format!(
            "{name} {} → {} (×{:.2})",
            kb(a),
            kb(b),
            if a > 0.0 { b / a } else { f64::NAN }
        )
    };
    let mut parts = vec![
        change("the first skill", a.first_kb.value, b.first_kb.value),
        change(
            "each further skill",
            a.marginal_kb.value,
            b.marginal_kb.value,
        ),
        change("the warm-up", a.warmup_kb.value, b.warmup_kb.value),
        change("the transient", a.transient_kb.value, b.transient_kb.value),
    ];
    if let (Some(x), Some(y)) = (
        a.first_held.as_ref().and_then(|h| h.arenas),
        b.first_held.as_ref().and_then(|h| h.arenas),
    ) {
        parts.push(format!("malloc arenas {} → {}", count(x), count(y)));
    }
    Some(format!(
        "From {} to {} cores' parallelism: {}.",
        low.cores,
        high.cores,
        parts.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ground::cmds::SkillKind;
    use crate::record::fixture::record;
    use crate::record::{EntryRecord, Step};

    fn entry(index: usize, cmd: &str, before_kb: u64, steps: &[u64]) -> EntryRecord {
        let mut record = record(cmd, 1000.0);
        record.measure.index = index;
        record.measure.before.rss_kb = before_kb;
        record.measure.outcome.steps = steps
            .iter()
            .map(|&rss_kb| Step {
                rss_kb,
                memcg_kb: None,
            })
            .collect();
        record.sampling.rss_peak_kb = steps.last().copied();
        record
    }

    /// A run at `cores`: the first skill costs `first` KB, each further one `each`.
    fn run(cores: u32, first: u64, each: u64) -> RunRecords {
        let idle = 100;
        let steps: Vec<u64> = (1..=4).map(|n| idle + first + n * each).collect();
        RunRecords {
            name: format!("c{cores}"),
            cores: Some(cores),
            records: vec![
                entry(0, "add_rs", idle, &[idle + first]),
                entry(1, "4 add_rs", idle + first, &steps),
            ],
        }
    }

    #[test]
    fn measured_counts_answer_for_themselves_and_between_them_by_interpolation() {
        let runs = [run(2, 1_000, 100), run(8, 1_600, 220), run(2, 1_000, 100)];
        let (points, lacking) = points(&runs, &Copies::Sample(SkillKind::Rust));
        assert!(lacking.is_empty());
        assert_eq!(points.iter().map(|p| p.cores).collect::<Vec<_>>(), [2, 8]);
        assert_eq!(points[0].runs, ["c2", "c2"]);
        let found = at(&points, 8, "w.cmds").unwrap();
        assert_eq!(found.source, Source::Measured { cores: 8 });
        assert_eq!(found.ingredients.first_kb.value, 1_600.0);
        // A third of the way from 2 to 8.
        let found = at(&points, 4, "w.cmds").unwrap();
        assert_eq!(found.source, Source::Interpolated { below: 2, above: 8 });
        assert_eq!(found.ingredients.first_kb.value, 1_200.0);
        assert_eq!(found.ingredients.marginal_kb.value, 140.0);
        let said = scaled(&points).unwrap();
        assert!(said.starts_with("From 2 to 8 cores' parallelism"), "{said}");
        assert!(table(&points).lines().count() == 4);
    }

    #[test]
    fn a_count_outside_the_runs_is_refused_with_the_runs_to_make() {
        let runs = [run(2, 1_000, 100)];
        let (points, _) = points(&runs, &Copies::Sample(SkillKind::Rust));
        let Err(why) = at(&points, 16, "cmds/cores.cmds") else {
            panic!("16 cores is outside the runs");
        };
        assert!(
            why.contains("skillprof run cmds/cores.cmds --cores 16")
                && why.contains("skillprof sweep cmds/cores.cmds --cores 2,16"),
            "{why}"
        );
    }
}
