//! `skillprof capacity --prometheus URL`: the capacity questions answered from what
//! `skillprof watch` recorded in production, read through Prometheus' query API: how many
//! more skills fit, how much more traffic fits within the latency target, where each host
//! stands now, and how many servers N times the traffic needs, per host and for the fleet.

pub mod answers;
pub mod evidence;
pub mod prometheus;

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, Result};
use serde::Serialize;

use super::CapacityArgs;
use crate::ground::units::{bytes, count};
use answers::{Answer, Interval, RateBasis};
use evidence::{Window, clock};
use prometheus::Prometheus;

/// What `--json` prints and `--out` keeps.
#[derive(Serialize)]
struct Production<'a> {
    prometheus: &'a str,
    /// Unix seconds.
    start: f64,
    end: f64,
    step_s: f64,
    selector: Option<&'a str>,
    target: Option<String>,
    headroom: f64,
    growth: f64,
    hosts: Vec<Answer>,
    fleet: Option<Fleet>,
}

/// Every host together.
#[derive(Serialize)]
struct Fleet {
    hosts: usize,
    /// The hosts' peaks summed (each at its own busiest time: at most the fleet's peak).
    peak: f64,
    now: f64,
    /// Each host's rate within the target, summed.
    within: Option<Interval>,
    /// Servers like the fleet's average for `growth` times the summed peak.
    servers: Option<Interval>,
    /// The host with the fewest more skills, and the one with the least traffic left.
    skills_bind_first: Option<String>,
    rate_binds_first: Option<String>,
}

pub fn run(args: &CapacityArgs, url: &str) -> Result<()> {
    let prometheus = Prometheus::new(url)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(answer(args, &prometheus))
}

async fn answer(args: &CapacityArgs, prometheus: &Prometheus) -> Result<()> {
    // Before any work: a server that does not answer, or wants credentials, stops here.
    prometheus.check().await?;
    let end = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .context("the clock is before 1970")?
        .as_secs_f64()
        .ceil();
    let since = args.since.as_secs_f64();
    let step = args
        .step
        .unwrap_or_else(|| (since / 500.0).max(1.0))
        .max(0.001);
    let window = Window {
        start: end - since,
        end,
        step,
    };
    let selector = args
        .selector
        .as_deref()
        .map(|s| {
            s.trim()
                .trim_start_matches('{')
                .trim_end_matches('}')
                .trim()
        })
        .filter(|s| !s.is_empty());
    let instances = evidence::hosts(prometheus, &window, selector).await?;
    eprintln!(
        "reading {} host(s) from {} over {} to {}",
        instances.len(),
        prometheus.url(),
        clock(window.start),
        clock(window.end)
    );
    let mut hosts = Vec::new();
    for instance in &instances {
        let host = evidence::read(
            prometheus,
            &window,
            selector,
            instance,
            args.target.as_ref(),
            args.memory,
        )
        .await?;
        let hours = host.hours();
        hosts.push(answers::answer(
            &host,
            hours,
            args.target.as_ref(),
            args.headroom,
            args.growth,
        ));
    }
    let fleet = (hosts.len() > 1).then(|| fleet(&hosts, args.growth));
    let production = Production {
        prometheus: prometheus.url(),
        start: window.start,
        end: window.end,
        step_s: window.step,
        selector,
        target: args
            .target
            .as_ref()
            .map(|t| format!("{}<={}ms", t.quantile, t.ms)),
        headroom: args.headroom,
        growth: args.growth,
        hosts,
        fleet,
    };
    let document = serde_json::to_string_pretty(&production)? + "\n";
    if let Some(out) = &args.out {
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        let path = out.join("capacity.json");
        std::fs::write(&path, &document).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("written: {}", path.display());
    }
    match args.json {
        true => print!("{document}"),
        false => print!("{}", text(&production)),
    }
    Ok(())
}

fn fleet(hosts: &[Answer], growth: f64) -> Fleet {
    let peak: f64 = hosts.iter().map(|h| h.rate.peak).sum();
    let now: f64 = hosts.iter().map(|h| h.rate.now).sum();
    let rates: Option<Vec<Interval>> = hosts.iter().map(|h| h.rate.within).collect();
    let within = rates.map(|rates| Interval {
        value: rates.iter().map(|r| r.value).sum(),
        low: rates.iter().map(|r| r.low).sum(),
        high: rates.iter().map(|r| r.high).sum(),
    });
    let servers = within.filter(|_| peak > 0.0).map(|within| {
        let per = hosts.len() as f64;
        let need = |total: f64| (growth * peak / (total / per)).ceil().max(1.0);
        Interval {
            value: need(within.value),
            low: need(within.high),
            high: need(within.low),
        }
    });
    let least = |key: &dyn Fn(&Answer) -> Option<f64>| {
        hosts
            .iter()
            .filter_map(|h| Some((key(h)?, &h.host)))
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(_, host)| host.clone())
    };
    Fleet {
        hosts: hosts.len(),
        peak,
        now,
        within,
        servers,
        skills_bind_first: least(&|h| h.skills.more.map(|m| m.value)),
        rate_binds_first: least(&|h| {
            let within = h.rate.within?;
            Some((within.value - h.rate.now) / within.value)
        }),
    }
}

/// A figure and its interval, as `812 [700, 950]`.
fn ranged(interval: &Interval, format: impl Fn(f64) -> String) -> String {
    let show = |v: f64| match v.is_finite() {
        true => format(v),
        false => "unbounded".to_owned(),
    };
    format!(
        "{} [{}, {}]",
        show(interval.value),
        show(interval.low),
        show(interval.high)
    )
}

fn text(production: &Production) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "capacity from production: {}, {} to {} ({}, a point every {}), {} host(s)",
        production.prometheus,
        clock(production.start),
        clock(production.end),
        humantime_s(production.end - production.start),
        humantime_s(production.step_s),
        production.hosts.len()
    );
    for host in &production.hosts {
        out.push('\n');
        host_text(&mut out, host, production);
    }
    if let Some(fleet) = &production.fleet {
        let _ = writeln!(
            out,
            "\nfleet of {} hosts: peak {:.1}/s (each host's own peak, summed), now {:.1}/s",
            fleet.hosts, fleet.peak, fleet.now
        );
        if let Some(within) = &fleet.within {
            let _ = writeln!(out, "  rate within the target, summed: {}/s", whole(within));
        }
        if let Some(servers) = &fleet.servers {
            servers_line(&mut out, production.growth, "the peak", fleet.peak, servers);
        }
        if let Some(host) = &fleet.skills_bind_first {
            let _ = writeln!(out, "  binds first for skills: {host}");
        }
        if let Some(host) = &fleet.rate_binds_first {
            let _ = writeln!(out, "  binds first for traffic: {host}");
        }
    }
    out
}

fn host_text(out: &mut String, host: &Answer, production: &Production) {
    let mix: Vec<String> = host
        .mix
        .iter()
        .take(3)
        .map(|(skill, n)| format!("{skill} {:.0}%", 100.0 * n / host.requests.max(1.0)))
        .collect();
    let _ = writeln!(
        out,
        "host {} ({} of series, {} requests answered{})",
        host.host,
        humantime_s((host.hours * 3600.0).round()),
        count(host.requests),
        if mix.is_empty() {
            String::new()
        } else {
            format!(": {}", mix.join(", "))
        }
    );
    let skills = &host.skills;
    let held = skills.now.map_or("skills held: unknown".to_owned(), |n| {
        format!("{n:.0} held")
    });
    match (&skills.more, skills.bound) {
        (Some(more), Some(bound)) => {
            let each = skills
                .bytes_per_skill
                .as_ref()
                .map(|each| format!("{} a skill of {}", ranged(each, bytes), host.memory_is))
                .unwrap_or_default();
            let limit = host
                .limit
                .as_ref()
                .map(|(limit, from)| {
                    format!(
                        " against {} ({from}) less {:.0}% headroom",
                        bytes(*limit),
                        production.headroom * 100.0
                    )
                })
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "  skills: {held}; {} more fit, {bound} binds first ({each}{limit}{})",
                whole(more),
                skills
                    .by_mappings
                    .filter(|_| bound == "memory")
                    .map(|m| format!("; vm.max_map_count: {} more", whole(&m)))
                    .unwrap_or_default()
            );
        }
        _ => {
            let _ = writeln!(
                out,
                "  skills: {held}; how many more fit: not answered (below)"
            );
        }
    }
    let rate = &host.rate;
    let observed = format!(
        "now {:.1}/s, peak {:.1}/s{}",
        rate.now,
        rate.peak,
        rate.latency_at_peak
            .map(|l| format!(
                " ({} {:.2} ms there)",
                production
                    .target
                    .as_deref()
                    .map_or("p99", |t| t.split("<=").next().unwrap_or("p99")),
                l * 1e3
            ))
            .unwrap_or_default()
    );
    match (&rate.within, rate.basis) {
        (Some(within), Some(basis)) => {
            let how = match basis {
                RateBasis::Knee => {
                    "the knee: where the latency grew with load to the target".to_owned()
                }
                RateBasis::BeyondPeak => {
                    "at least the peak seen, within the target, and at most every CPU busy"
                        .to_owned()
                }
                RateBasis::CpuBound => format!(
                    "a bound, not an observed knee: {} CPUs at {} ms of CPU a request",
                    host.cpus.map_or("?".to_owned(), |c| format!("{c:.0}")),
                    rate.cpu_ms_per_request
                        .as_ref()
                        .map_or("?".to_owned(), |c| ranged(c, |v| format!("{v:.2}")))
                ),
            };
            let _ = writeln!(
                out,
                "  rate: {}/s {} ({how}); {observed}",
                whole(within),
                production
                    .target
                    .as_deref()
                    .map_or("at full CPU".to_owned(), |t| format!("within {t}"))
            );
        }
        _ => {
            let _ = writeln!(out, "  rate: not answered (below); {observed}");
        }
    }
    let _ = writeln!(
        out,
        "  headroom now: {} skills, {}/s",
        skills.more.as_ref().map_or("?".to_owned(), whole),
        host.rps_left.as_ref().map_or("?".to_owned(), whole)
    );
    if let Some(servers) = &host.servers {
        servers_line(out, production.growth, "its peak", rate.peak, servers);
    }
    if let Some(psi) = host.psi_some_max {
        let _ = writeln!(
            out,
            "  memory pressure: some task stalled at most {:.2}% of the time (PSI)",
            psi * 100.0
        );
    }
    if !host.cannot_tell.is_empty() {
        let _ = writeln!(out, "  what the window cannot tell:");
        for why in &host.cannot_tell {
            let _ = writeln!(out, "  - {why}");
        }
    }
}

/// A whole number and its interval.
fn whole(interval: &Interval) -> String {
    ranged(interval, |v| format!("{v:.0}"))
}

/// The servers `growth` times a `peak` needs.
fn servers_line(out: &mut String, growth: f64, what: &str, peak: f64, servers: &Interval) {
    let _ = writeln!(
        out,
        "  for {growth}x {what} ({:.1}/s): {} servers like these",
        growth * peak,
        whole(servers)
    );
}

/// A step as a person reads it.
fn humantime_s(seconds: f64) -> String {
    humantime::format_duration(Duration::from_secs_f64(seconds.max(0.001))).to_string()
}
