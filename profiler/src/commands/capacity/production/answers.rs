//! The answers from one host's evidence, each with its interval and what it rests on: the
//! skills that still fit (memory or mappings, whichever binds first), the rate within the
//! latency target (the knee where p99 grew with load, else a bound from the CPU per request),
//! the headroom now, and the servers for N times the observed traffic.

use serde::Serialize;

use super::evidence::Host;
use crate::ground::stats;
use crate::record::slo::Target;

/// Resamples of every bootstrap interval here.
const RESAMPLES: usize = 400;
/// Skill counts a window must hold for what one more skill costs to have an interval.
const MIN_COUNTS: usize = 4;

/// A figure and its 95% interval.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Interval {
    pub value: f64,
    pub low: f64,
    pub high: f64,
}

impl Interval {
    /// `f` of each end, the ends put back in order.
    fn map(self, f: impl Fn(f64) -> f64) -> Interval {
        let (a, b) = (f(self.low), f(self.high));
        Interval {
            value: f(self.value),
            low: a.min(b),
            high: a.max(b),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Skills {
    /// Skills held compiled at the window's end.
    pub now: Option<f64>,
    /// What one more skill adds: memory (bytes) and mappings, from how they grew as skills
    /// were loaded in the window.
    pub bytes_per_skill: Option<Interval>,
    pub mappings_per_skill: Option<Interval>,
    /// More skills that fit by memory (within the headroom) and by vm.max_map_count.
    pub by_memory: Option<Interval>,
    pub by_mappings: Option<Interval>,
    /// The lower of the two, and which it was.
    pub more: Option<Interval>,
    pub bound: Option<&'static str>,
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RateBasis {
    /// The latency quantile grew with load and reached the target within the loads seen.
    Knee,
    /// It grew, but would reach the target only beyond the highest load seen.
    BeyondPeak,
    /// It never grew with load: every CPU busy at the observed CPU per request.
    CpuBound,
}

#[derive(Debug, Clone, Serialize)]
pub struct Rate {
    /// Requests per second within the target (or the CPU's bound).
    pub within: Option<Interval>,
    pub basis: Option<RateBasis>,
    /// The host's CPU per request answered, ms (its threads' CPU in every phase and its own
    /// work, over the requests).
    pub cpu_ms_per_request: Option<Interval>,
    /// Requests per second: the highest the window saw, and at its end.
    pub peak: f64,
    pub now: f64,
    /// The target quantile at the busiest time, s.
    pub latency_at_peak: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Answer {
    pub host: String,
    pub skills: Skills,
    pub rate: Rate,
    /// Requests per second left now: the rate within the target less the rate now.
    pub rps_left: Option<Interval>,
    /// Servers like this one for `growth` times the observed peak.
    pub servers: Option<Interval>,
    /// What the evidence cannot tell, each with the lab run that would.
    pub cannot_tell: Vec<String>,
    /// What the answers rest on: requests answered (by skill, most first), hours of series.
    pub requests: f64,
    pub mix: Vec<(String, f64)>,
    pub hours: f64,
    pub memory_is: &'static str,
    pub limit: Option<(f64, String)>,
    pub memory_now: Option<f64>,
    pub psi_some_max: Option<f64>,
    pub cpus: Option<f64>,
}

/// The answers for `host`, with `headroom` of its memory kept free, for `growth` times its
/// peak traffic.
pub fn answer(
    host: &Host,
    hours: f64,
    target: Option<&Target>,
    headroom: f64,
    growth: f64,
) -> Answer {
    let mut cannot = Vec::new();
    let skills = skills(host, headroom, &mut cannot);
    let rate = rate(host, target, &mut cannot);
    let rps_left = rate
        .within
        .map(|within| within.map(|r| (r - rate.now).max(0.0)));
    let servers = rate
        .within
        .filter(|_| rate.peak > 0.0)
        .map(|within| within.map(|r| (growth * rate.peak / r).ceil().max(1.0)));
    if host.requests() == 0.0 {
        cannot.push(
            "no request was answered in the window: no rate, no latency (is the host's \
             traffic in it, and does the host mark its requests, skillprof_marks' \
             Work::answering?)"
                .to_owned(),
        );
    }
    if host.gaps_s > 0.0 {
        cannot.push(format!(
            "the window has gaps: {} without series between its first and last points (the \
             watch or its scrapes were down); what happened then is not in these answers",
            humantime::format_duration(std::time::Duration::from_secs(host.gaps_s as u64))
        ));
    }
    if host.restarts > 0.0 || host.watch_restarts > 0.0 {
        cannot.push(format!(
            "the host restarted in the window ({} time(s) under --follow, the watch {} \
             time(s)): memory held before a restart is gone from the series after it",
            host.restarts, host.watch_restarts
        ));
    }
    Answer {
        host: host.instance.clone(),
        skills,
        rate,
        rps_left,
        servers,
        cannot_tell: cannot,
        requests: host.requests(),
        mix: host.mix.clone(),
        hours,
        memory_is: host.memory_is,
        limit: host.limit.clone(),
        memory_now: host.memory.last().map(|&(_, v)| v),
        psi_some_max: host.psi_some_max,
        cpus: host.cpus,
    }
}

/// Points of two series of one range query, joined by time.
fn joined(x: &[(f64, f64)], y: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let at: std::collections::HashMap<i64, f64> =
        y.iter().map(|&(t, v)| ((t * 1e3) as i64, v)).collect();
    x.iter()
        .filter_map(|&(t, xv)| Some((xv, *at.get(&((t * 1e3) as i64))?)))
        .collect()
}

/// What grows with the skills held: the Theil-Sen slope of `y` over the skill counts the
/// window held, each count's lowest `y` (what the skills hold with the fewest requests in
/// flight: the requests' own memory comes and goes on top, and traffic while the count
/// stood would otherwise be read as the skills'); `None` unless it held two counts or more.
fn per_skill(skills: &[(f64, f64)], y: &[(f64, f64)], seed: u64) -> Option<Interval> {
    let mut by_count: std::collections::BTreeMap<i64, Vec<f64>> = Default::default();
    for (count, value) in joined(skills, y) {
        by_count
            .entry(count.round() as i64)
            .or_default()
            .push(value);
    }
    if by_count.len() < 2 {
        return None;
    }
    let points: Vec<(f64, f64)> = by_count
        .into_iter()
        .map(|(count, values)| {
            (
                count as f64,
                values.into_iter().fold(f64::INFINITY, f64::min),
            )
        })
        .collect();
    let counts = points.len();
    let series = [points];
    let value = stats::theil_sen(&series)?;
    // A bootstrap of two or three counts resamples the same few slopes: no interval.
    if counts < MIN_COUNTS {
        return Some(Interval {
            value,
            low: f64::NEG_INFINITY,
            high: f64::INFINITY,
        });
    }
    let (low, high) = stats::theil_sen_ci(&series, RESAMPLES, seed);
    Some(Interval {
        value,
        low: low.min(value),
        high: high.max(value),
    })
}

/// Skills that fit in `available`, given what each adds.
fn fitting(available: f64, each: Interval) -> Interval {
    let fit = |per: f64| match per > 0.0 {
        true => (available / per).floor().max(0.0),
        false => f64::INFINITY,
    };
    Interval {
        value: fit(each.value),
        low: fit(each.high),
        high: fit(each.low),
    }
}

fn skills(host: &Host, headroom: f64, cannot: &mut Vec<String>) -> Skills {
    let now = host.skills.last().map(|&(_, v)| v);
    if host.skills.is_empty() {
        cannot.push(
            "the skills the host holds: it does not serve skillhost_skills, so the watch has \
             no skillprof_host_skills; the skills that fit come from a lab run: `sudo \
             skillprof run cmds/capacity_rs.cmds` then `skillprof capacity runs/... --memory \
             SIZE`"
                .to_owned(),
        );
    }
    let bytes_per_skill = per_skill(&host.skills, &host.memory, 1);
    let mappings_per_skill = per_skill(&host.skills, &host.mappings, 2);
    if !host.skills.is_empty() && bytes_per_skill.is_none() {
        cannot.push(format!(
            "what one more skill costs: no skill was loaded while watched ({} held \
             throughout), so the series never show memory growing with skills; a lab run \
             measures it: `sudo skillprof run cmds/capacity_rs.cmds` (or your own skills' \
             adds), then `skillprof capacity runs/... --memory SIZE`",
            now.unwrap_or(0.0)
        ));
    }
    if bytes_per_skill.is_some_and(|each| each.high.is_infinite()) {
        cannot.push(format!(
            "how sure what one more skill costs is: the window held fewer than {MIN_COUNTS} \
             skill counts (skills were added between scrapes), too few for an interval; a \
             longer window, or a lab run (`sudo skillprof run cmds/capacity_rs.cmds`, then \
             `skillprof capacity runs/... --memory SIZE`), gives one"
        ));
    }
    let memory_now = host.memory.last().map(|&(_, v)| v);
    let by_memory = match (host.limit.as_ref(), memory_now, bytes_per_skill) {
        (Some((limit, _)), Some(used), Some(each)) => {
            Some(fitting((limit * (1.0 - headroom) - used).max(0.0), each))
        }
        _ => None,
    };
    let mappings_now = host.mappings.last().map(|&(_, v)| v);
    let by_mappings = match (host.max_map_count, mappings_now, mappings_per_skill) {
        (Some(max), Some(used), Some(each)) => Some(fitting((max - used).max(0.0), each)),
        _ => None,
    };
    let (more, bound) = match (by_memory, by_mappings) {
        (Some(m), Some(v)) if v.value < m.value => (Some(v), Some("vm.max_map_count")),
        (Some(m), _) => (Some(m), Some("memory")),
        (None, Some(v)) => (Some(v), Some("vm.max_map_count")),
        (None, None) => (None, None),
    };
    Skills {
        now,
        bytes_per_skill,
        mappings_per_skill,
        by_memory,
        by_mappings,
        more,
        bound,
    }
}

fn rate(host: &Host, target: Option<&Target>, cannot: &mut Vec<String>) -> Rate {
    let peak = host.load.iter().map(|&(_, v)| v).fold(0.0, f64::max);
    let now = host.load.last().map_or(0.0, |&(_, v)| v);
    let pairs: Vec<(f64, f64)> = joined(&host.load, &host.latency)
        .into_iter()
        .filter(|&(load, latency)| load > 0.0 && latency.is_finite())
        .collect();
    let latency_at_peak = pairs
        .iter()
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|&(_, latency)| latency);
    let cpu_ms_per_request = cpu_per_request(host);
    let cpu_bound = cpu_ms_per_request
        .zip(host.cpus)
        .map(|(cpu, cpus)| cpu.map(|ms| cpus * 1e3 / ms));
    let knee = target.and_then(|target| knee(&pairs, target.ms / 1e3, peak, cpu_bound));
    let (within, basis) = match (knee, cpu_bound) {
        (Some((within, basis)), _) => (Some(within), Some(basis)),
        (None, Some(bound)) => (Some(bound), Some(RateBasis::CpuBound)),
        (None, None) => (None, None),
    };
    let lab = |target: Option<&Target>| {
        format!(
            "`sudo skillprof slo --target {}` finds the knee in the lab, at the rates the \
             window never reached",
            target.map_or("p99<=TIME".to_owned(), |t| format!(
                "{}<={}ms",
                t.quantile, t.ms
            ))
        )
    };
    match basis {
        Some(RateBasis::CpuBound) => cannot.push(format!(
            "the knee: {} never grew with load in the window (highest load {peak:.1}/s{}), so \
             the rate is a bound (every CPU busy at the observed CPU per request), not an \
             observed knee; {}",
            target.map_or("the latency".to_owned(), |t| t.quantile.clone()),
            latency_at_peak.map_or(String::new(), |l| format!(", at {:.1} ms", l * 1e3)),
            lab(target)
        )),
        Some(RateBasis::BeyondPeak) => cannot.push(format!(
            "the peak: {} grew with load ({}) but stayed within the target up to the highest \
             load seen ({peak:.1}/s): the rate is at least that, and at most every CPU busy; \
             where between, the window cannot say; {}",
            target.map_or("the latency".to_owned(), |t| t.quantile.clone()),
            latency_at_peak.map_or(String::new(), |l| format!("{:.2} ms at the peak", l * 1e3)),
            lab(target)
        )),
        _ => {}
    }
    if within.is_none() && host.requests() > 0.0 {
        cannot.push(
            "the rate: the window's points hold no load with both a latency and a CPU per \
             request (too few scrapes per point? a longer --since or --step helps)"
                .to_owned(),
        );
    }
    if target.is_none() && within.is_some() {
        cannot.push(
            "the latency target: none given (--target p99<=250ms), so the rate is the CPU's \
             bound"
                .to_owned(),
        );
    }
    Rate {
        within,
        basis,
        cpu_ms_per_request,
        peak,
        now,
        latency_at_peak,
    }
}

/// The host's CPU per request answered, ms: the median over the window's points of its
/// threads' CPU rate over its answer rate, with a bootstrap interval.
fn cpu_per_request(host: &Host) -> Option<Interval> {
    let ratios: Vec<f64> = joined(&host.cpu_rate, &host.load)
        .into_iter()
        .filter(|&(_, load)| load > 0.0)
        .map(|(cpu_ms_per_s, load)| cpu_ms_per_s / load)
        .filter(|ratio| ratio.is_finite() && *ratio > 0.0)
        .collect();
    if ratios.is_empty() {
        return None;
    }
    let mut sorted = ratios.clone();
    let value = stats::sort_median(&mut sorted);
    let (low, high) = stats::median_ci(&ratios, RESAMPLES, 3);
    Some(Interval { value, low, high })
}

/// Where the latency quantile reached `target_s` as load grew, from the window's points
/// binned by load (each bin's median load and latency): between the last bin within the
/// target and the first beyond it, interpolated. Where no bin went beyond it but the latency
/// grew with load (the busiest bin's at least twice the quietest's), the rate is at least the
/// peak seen and at most the CPU's bound. `None` where it never grew: the CPU's bound alone.
fn knee(
    pairs: &[(f64, f64)],
    target_s: f64,
    peak: f64,
    cpu_bound: Option<Interval>,
) -> Option<(Interval, RateBasis)> {
    let mut sorted = pairs.to_vec();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let bins = sorted.len().min(12);
    if bins < 3 {
        return None;
    }
    let points: Vec<(f64, f64)> = sorted
        .chunks(sorted.len().div_ceil(bins))
        .map(|chunk| {
            let mut loads: Vec<f64> = chunk.iter().map(|p| p.0).collect();
            let mut latencies: Vec<f64> = chunk.iter().map(|p| p.1).collect();
            (
                stats::sort_median(&mut loads),
                stats::sort_median(&mut latencies),
            )
        })
        .collect();
    match points.iter().position(|&(_, latency)| latency > target_s) {
        Some(0) => Some((
            Interval {
                value: 0.0,
                low: 0.0,
                high: points[0].0,
            },
            RateBasis::Knee,
        )),
        Some(beyond) => {
            let ((x0, y0), (x1, y1)) = (points[beyond - 1], points[beyond]);
            let crossing = x0 + (x1 - x0) * (target_s - y0) / (y1 - y0).max(f64::MIN_POSITIVE);
            Some((
                Interval {
                    value: crossing.clamp(x0, x1),
                    low: x0,
                    high: x1,
                },
                RateBasis::Knee,
            ))
        }
        None => {
            let (quietest, busiest) = (points[0].1, points[points.len() - 1].1);
            (busiest >= 2.0 * quietest).then(|| {
                let bound = cpu_bound.unwrap_or(Interval {
                    value: f64::INFINITY,
                    low: f64::INFINITY,
                    high: f64::INFINITY,
                });
                (
                    Interval {
                        value: bound.value.max(peak),
                        low: peak,
                        high: bound.high.max(peak),
                    },
                    RateBasis::BeyondPeak,
                )
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> Host {
        Host {
            instance: "a:1".to_owned(),
            memory_is: "its RSS",
            limit: Some((10e9, "the machine's memory".to_owned())),
            max_map_count: Some(65530.0),
            cpus: Some(2.0),
            ..Host::default()
        }
    }

    #[test]
    fn memory_growing_with_skills_gives_what_one_costs_and_how_many_more_fit() {
        let mut host = host();
        for i in 0..10 {
            let t = i as f64;
            let skills = (i / 2) as f64;
            host.skills.push((t, skills));
            host.memory.push((t, 1e9 + skills * 100e6));
            host.mappings.push((t, 1000.0 + skills * 10.0));
        }
        let skills = skills(&host, 0.1, &mut Vec::new());
        let each = skills.bytes_per_skill.unwrap();
        assert!((each.value - 100e6).abs() < 1.0, "{each:?}");
        // (10 GB × 0.9 − 1.4 GB) / 100 MB = 76.
        assert_eq!(skills.more.unwrap().value, 76.0);
        assert_eq!(skills.bound, Some("memory"));
    }

    #[test]
    fn a_window_without_a_skill_loaded_says_so_and_gives_no_count() {
        let mut host = host();
        for i in 0..10 {
            host.skills.push((i as f64, 3.0));
            host.memory.push((i as f64, 1e9));
        }
        let mut cannot = Vec::new();
        let skills = skills(&host, 0.1, &mut cannot);
        assert!(skills.more.is_none());
        assert!(
            cannot[0].contains("no skill was loaded while watched"),
            "{cannot:?}"
        );
    }

    #[test]
    fn latency_growing_with_load_has_a_knee_and_a_flat_one_the_cpus_bound() {
        let target = Target {
            quantile: "p99".to_owned(),
            ms: 10.0,
        };
        let mut host = host();
        for i in 0..40 {
            let (t, load) = (i as f64, 10.0 + i as f64 * 5.0);
            host.load.push((t, load));
            // 1 ms plus 0.05 ms per request per second: 10 ms at 180/s.
            host.latency.push((t, (1.0 + 0.05 * load) / 1e3));
            host.cpu_rate.push((t, load * 2.0));
        }
        let mut cannot = Vec::new();
        let rate = rate(&host, Some(&target), &mut cannot);
        assert_eq!(rate.basis, Some(RateBasis::Knee));
        let within = rate.within.unwrap();
        assert!((within.value - 180.0).abs() < 5.0, "{within:?}");
        assert!(cannot.is_empty(), "{cannot:?}");

        // Grown fourfold but within the target: at least the peak, at most the CPUs' bound.
        for point in &mut host.latency {
            point.1 = (1.0 + 0.015 * point.1 * 1e3 * 10.0).min(9.0) / 1e3;
        }
        let mut cannot = Vec::new();
        let rate = super::rate(&host, Some(&target), &mut cannot);
        assert_eq!(rate.basis, Some(RateBasis::BeyondPeak), "{rate:?}");
        let within = rate.within.unwrap();
        assert_eq!(
            (within.low, within.value),
            (rate.peak, 1000.0),
            "{within:?}"
        );
        assert!(cannot[0].contains("at least that"), "{cannot:?}");

        let mut cannot = Vec::new();
        for point in &mut host.latency {
            point.1 = 2e-3;
        }
        let rate = super::rate(&host, Some(&target), &mut cannot);
        assert_eq!(rate.basis, Some(RateBasis::CpuBound));
        // 2 CPUs at 2 ms a request: 1,000/s.
        assert!((rate.within.unwrap().value - 1000.0).abs() < 1.0);
        assert!(cannot[0].contains("a bound"), "{cannot:?}");
    }
}
