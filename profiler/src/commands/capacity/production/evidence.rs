//! What the watch's series in Prometheus say of each host over a window: its memory against
//! its limit and its skills, its mappings, its load and latency over time, its CPU per
//! request, and what would make the window untrustworthy (gaps, restarts). Read before any
//! answer is computed; every figure says which series it came from.

use anyhow::{Result, bail};

use super::prometheus::{Prometheus, Series};
use crate::record::slo::Target;

/// The window the series are read over.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    /// Unix seconds.
    pub start: f64,
    pub end: f64,
    /// Between two points of a range query, s.
    pub step: f64,
}

impl Window {
    /// The window as PromQL writes a range (`[3600s]`).
    fn range(&self) -> String {
        format!("{}s", (self.end - self.start).round().max(1.0))
    }
}

/// One host's evidence, as the watch's series hold it.
#[derive(Debug, Clone, Default)]
pub struct Host {
    /// Its `instance` label (the watch's address as Prometheus scraped it).
    pub instance: String,
    /// Memory in use over time, bytes: the cgroup's charge where it has a limit, else RSS.
    pub memory: Vec<(f64, f64)>,
    /// What `memory` is, and the series.
    pub memory_is: &'static str,
    /// What memory may grow to, bytes, and where that came from.
    pub limit: Option<(f64, String)>,
    /// Skills held compiled, over time.
    pub skills: Vec<(f64, f64)>,
    pub mappings: Vec<(f64, f64)>,
    pub max_map_count: Option<f64>,
    pub cpus: Option<f64>,
    /// Requests answered per second, over time.
    pub load: Vec<(f64, f64)>,
    /// The target's latency quantile over time, s.
    pub latency: Vec<(f64, f64)>,
    /// Requests answered in the window, by skill.
    pub mix: Vec<(String, f64)>,
    /// The host's threads' CPU in the window, by phase (skills' and the host's own), ms.
    pub cpu_ms: Vec<(String, f64)>,
    /// The host process's CPU over time (every thread's: the skills' phases, its HTTP and
    /// runtime work), ms per second.
    pub cpu_rate: Vec<(f64, f64)>,
    /// The watched host restarted (`--follow` attached to its successor), and the watch
    /// itself (its counters began again).
    pub restarts: f64,
    pub watch_restarts: f64,
    /// Seconds the host's series cover: from their first point to their last, less the gaps
    /// between (stretches longer than Prometheus' lookback without a sample).
    pub covered_s: f64,
    pub gaps_s: f64,
    /// The highest share of the window's time some task stalled on memory (PSI some).
    pub psi_some_max: Option<f64>,
}

impl Host {
    /// Requests answered in the window.
    pub fn requests(&self) -> f64 {
        self.mix.iter().map(|(_, n)| n).sum()
    }

    /// Hours the series cover.
    pub fn hours(&self) -> f64 {
        self.covered_s / 3600.0
    }
}

/// Which hosts the window has: each `instance` with the watch's series, under `selector`.
/// Errors say plainly when there are none, when they are an older skillprof's, and when a
/// selector meant for one host matches several.
pub async fn hosts(
    prometheus: &Prometheus,
    window: &Window,
    selector: Option<&str>,
) -> Result<Vec<String>> {
    let user = selector.map_or(String::new(), |s| format!(",{s}"));
    let instances_of = |found: Vec<std::collections::BTreeMap<String, String>>| {
        let mut instances: Vec<String> = found
            .into_iter()
            .filter_map(|labels| labels.get("instance").cloned())
            .collect();
        instances.sort();
        instances.dedup();
        instances
    };
    let (start, end) = (window.start, window.end);
    let matcher = format!("{{__name__=\"skillprof_host_cpus\"{user}}}");
    let instances = instances_of(prometheus.series(&matcher, start, end).await?);
    if instances.is_empty() {
        let matcher = format!("{{__name__=~\"skillprof_.+\"{user}}}");
        let older = instances_of(prometheus.series(&matcher, start, end).await?);
        let scope = match selector {
            Some(selector) => format!(" matching {{{selector}}}"),
            None => String::new(),
        };
        if older.is_empty() {
            bail!(
                "{} has no skillprof series{scope} between {} and {}: is `skillprof watch` \
                 one of its scrape targets, and did it scrape it then? (its targets page says)",
                prometheus.url(),
                clock(start),
                clock(end)
            );
        }
        bail!(
            "the skillprof series{scope} in {} ({}) are an older skillprof's: they lack \
             skillprof_host_cpus and skillprof_skill_latency_seconds, which the watch serves \
             since 2026-12-06. Run that watch on this version, then ask again once it has \
             been scraped under load",
            prometheus.url(),
            older.join(", ")
        );
    }
    if let Some(selector) = selector
        && instances.len() > 1
    {
        bail!(
            "--selector {selector:?} matches {} hosts ({}): name one, as \
             --selector 'instance=\"{}\"', or leave it out for every host and the fleet",
            instances.len(),
            instances.join(", "),
            instances[0]
        );
    }
    Ok(instances)
}

/// The evidence of host `instance` over `window`; `target` picks the latency quantile.
pub async fn read(
    prometheus: &Prometheus,
    window: &Window,
    selector: Option<&str>,
    instance: &str,
    target: Option<&Target>,
    memory_override: Option<u64>,
) -> Result<Host> {
    let host = match selector {
        Some(selector) => format!("{selector},instance=\"{instance}\""),
        None => format!("instance=\"{instance}\""),
    };
    let range = window.range();
    let series = |promql: String| async move {
        prometheus
            .range(&promql, window.start, window.end, window.step)
            .await
    };
    // What rate() looks back over at each point: four steps, and at least four scrapes (so
    // that each point holds several samples whatever the scrape interval).
    let scraped = prometheus
        .query(
            &format!("count_over_time(skillprof_host_cpus{{{host}}}[{range}])"),
            Some(window.end),
        )
        .await?;
    let cpus_points = first_of(series(format!("max(skillprof_host_cpus{{{host}}})")).await?);
    let samples = scraped.first().and_then(Series::last).unwrap_or(0.0);
    let (span, gaps_s) = covered(&cpus_points, window.step);
    let interval = match samples > 1.0 {
        true => span / (samples - 1.0),
        false => window.step,
    };
    let rate = format!("{}s", (4.0 * window.step.max(interval)).ceil().max(1.0));
    let first = first_of;
    let last = |points: &[(f64, f64)]| points.last().map(|&(_, v)| v);

    let cgroup_limit =
        first(series(format!("max(skillprof_host_cgroup_limit_bytes{{{host}}})")).await?);
    let (memory, memory_is, limit) = match last(&cgroup_limit) {
        Some(limit) => (
            first(series(format!("max(skillprof_host_cgroup_usage_bytes{{{host}}})")).await?),
            "its memory cgroup's charge (skillprof_host_cgroup_usage_bytes)",
            Some((
                limit,
                "its memory cgroup's limit (skillprof_host_cgroup_limit_bytes)".to_owned(),
            )),
        ),
        None => {
            let machine =
                first(series(format!("max(skillprof_machine_memory_bytes{{{host}}})")).await?);
            (
                first(series(format!("max(skillprof_host_rss_bytes{{{host}}})")).await?),
                "its RSS (skillprof_host_rss_bytes)",
                last(&machine).map(|bytes| {
                    (
                        bytes,
                        "the machine's memory (skillprof_machine_memory_bytes)".to_owned(),
                    )
                }),
            )
        }
    };
    // --memory stands for the limit whichever the series have, as its help says.
    let limit = match memory_override {
        Some(bytes) => Some((bytes as f64, "--memory".to_owned())),
        None => limit,
    };
    let skills = first(
        series(format!(
            "max(skillprof_host_skills{{{host},state=\"compiled\"}})"
        ))
        .await?,
    );
    let mappings = first(series(format!("max(skillprof_host_mappings{{{host}}})")).await?);
    let max_map_count = last(&first(
        series(format!("max(skillprof_machine_max_map_count{{{host}}})")).await?,
    ));
    let load = first(
        series(format!(
            "sum(rate(skillprof_skill_latency_seconds_count{{{host}}}[{rate}]))"
        ))
        .await?,
    );
    let cpu_rate = first(
        series(format!(
            "sum(rate(skillprof_host_cpu_seconds_total{{{host}}}[{rate}])) * 1000"
        ))
        .await?,
    );
    let quantile = target.map_or(0.99, |t| quantile_of(&t.quantile));
    let latency = first(
        series(format!(
            "histogram_quantile({quantile}, sum by (le) (rate(skillprof_skill_latency_seconds_bucket{{{host}}}[{rate}])))"
        ))
        .await?,
    );
    let at = Some(window.end);
    let by = |label: &str, found: Vec<Series>| -> Vec<(String, f64)> {
        let mut values: Vec<(String, f64)> = found
            .iter()
            .filter_map(|s| Some((s.label(label).to_owned(), s.last()?)))
            .filter(|(_, v)| *v > 0.0)
            .collect();
        values.sort_by(|a, b| b.1.total_cmp(&a.1));
        values
    };
    let mix = by(
        "skill",
        prometheus
            .query(
                &format!(
                    "sum by (skill) ({})",
                    grown("skillprof_skill_latency_seconds_count", &host, &range)
                ),
                at,
            )
            .await?,
    );
    let cpu_ms = by(
        "phase",
        prometheus
            .query(
                &format!(
                    "sum by (phase) ({})",
                    grown("skillprof_skill_task_cpu_ms_total", &host, &range)
                ),
                at,
            )
            .await?,
    );
    let scalar = |found: Vec<Series>| found.first().and_then(Series::last).unwrap_or(0.0);
    let restarts = scalar(
        prometheus
            .query(
                &format!("max(increase(skillprof_watch_host_restarts_total{{{host}}}[{range}]))"),
                at,
            )
            .await?,
    );
    let watch_restarts = scalar(
        prometheus
            .query(
                &format!("max(resets(skillprof_self_cpu_ms_total{{{host}}}[{range}]))"),
                at,
            )
            .await?,
    );
    let psi = first(
        series(format!(
            "max(rate(skillprof_machine_psi_some_total_us_total{{{host}}}[{rate}])) / 1e6"
        ))
        .await?,
    );
    Ok(Host {
        instance: instance.to_owned(),
        memory,
        memory_is,
        limit,
        skills,
        mappings,
        max_map_count,
        cpus: last(&cpus_points),
        covered_s: span,
        gaps_s,
        load,
        latency,
        mix,
        cpu_ms,
        cpu_rate,
        restarts,
        watch_restarts,
        psi_some_max: psi.iter().map(|&(_, v)| v).reduce(f64::max),
    })
}

/// How much counter `metric` of `host` grew over the window `range` up to its end: the last
/// value less the one at the window's start, or the whole last value for a series that began
/// in the window (the watch's counters start at 0 with the series: a skill's first requests
/// are in its first sample, which `increase()` would leave out).
fn grown(metric: &str, host: &str, range: &str) -> String {
    format!(
        "(last_over_time({metric}{{{host}}}[{range}]) - {metric}{{{host}}} offset {range}) or \
         last_over_time({metric}{{{host}}}[{range}])"
    )
}

/// The points of an answer's first series (an aggregate's only one).
fn first_of(found: Vec<Series>) -> Vec<(f64, f64)> {
    found
        .into_iter()
        .next()
        .map(|s| s.points)
        .unwrap_or_default()
}

/// The seconds a series' points cover, and the gaps among them: a step with no point between
/// two that have one.
fn covered(points: &[(f64, f64)], step: f64) -> (f64, f64) {
    let gaps: f64 = points
        .windows(2)
        .map(|pair| pair[1].0 - pair[0].0)
        .filter(|apart| *apart > 1.5 * step)
        .map(|apart| apart - step)
        .sum();
    let span = match (points.first(), points.last()) {
        (Some(first), Some(last)) => last.0 - first.0 + step,
        _ => 0.0,
    };
    (span - gaps, gaps)
}

/// A target's quantile as a share (p99: 0.99).
fn quantile_of(quantile: &str) -> f64 {
    quantile
        .trim_start_matches('p')
        .parse::<f64>()
        .map_or(0.99, |percent| percent / 100.0)
}

/// Unix seconds as UTC wall-clock time, for messages.
pub fn clock(unix: f64) -> String {
    chrono::DateTime::from_timestamp(unix.floor() as i64, 0).map_or_else(
        || format!("{unix:.0} (Unix time)"),
        |at| at.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
    )
}
