//! A snapshot as OpenMetrics text, for Prometheus. Every name, unit and help comes from the
//! field table the CSV files are written from ([`crate::record::field`]): the probes' columns
//! of commands.csv as `skillprof_host_<column>` counters, skills.csv's as
//! `skillprof_skill_<column>{skill, phase}` counters, the `held_*` columns as gauges of now;
//! the machine's and skillprof's own figures have columns of their own below.
//!
//! Counters count since the watch began. A column that is a maximum (`*_max_*`) is a gauge.

use std::collections::BTreeMap;

use skillprof_common::{Combine as _, LATENCY_BUCKETS, Latency, SkillCounters, latency_bound_ns};

use super::snapshot::Snapshot;
use crate::record::composition::EntryComposition;
use crate::record::field::{Column, Row, Unit};
use crate::record::probes::{Phase, SkillRow, skill_columns};
use crate::views::output::openmetrics::{Families, Kind, escape};

/// The content type Prometheus asks for and reads.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

static COMPILES_AGAIN: Column = Column::new(
    "compiles_again",
    Unit::Count,
    "compiles of the skill beyond its first since the watch began: after an eviction, or a file rewritten in place (the markers' compile phase runs, less one)",
);
static LATENCY: Column = Column::new(
    "latency_seconds",
    Unit::Seconds,
    "the skill's requests by the host's time from taking one to its answer, failures included, from its ledger (skillprof_marks' Work::answering): buckets of powers of two from 16 µs; histogram_quantile(0.99, ...) gives its p99 over any window, at most one bucket's width high",
);
static PER_SKILL: Column = Column::new(
    "per_skill_series",
    Unit::Count,
    "1 when the host marks its work (skillhost's markers) and the skill series are live; 0 when it has none: per-skill series need markers, the host series do not",
);
static RESTARTS: Column = Column::new(
    "host_restarts",
    Unit::Count,
    "times the watched host exited and --follow attached to the process that took its place; the host series count from 0 again at each",
);
static LEFT_OUT: Column = Column::new(
    "skills_left_out",
    Unit::Count,
    "skills the host has run whose series this scrape leaves out: beyond --max-skills, the least busy (fewest runs since the watch began) go first",
);
static PROBE_LIVE: Column = Column::new(
    "probe_live",
    Unit::Count,
    "1 for each probe that attached, 0 for one that did not (the run's probe table says why)",
);
static MAPS: Column = Column::new(
    "mappings",
    Unit::Count,
    "the host's mappings (VMAs) now, against max_map_count",
);
static MAX_MAP_COUNT: Column = Column::new(
    "max_map_count",
    Unit::Count,
    "vm.max_map_count: the mappings a process may have; mmap fails with ENOMEM beyond",
);
static PSI_SOME: Column = Column::new(
    "psi_some_total_us",
    Unit::Us,
    "memory stall time since boot, some task stalled (/proc/pressure/memory)",
);
static PSI_FULL: Column = Column::new(
    "psi_full_total_us",
    Unit::Us,
    "memory stall time since boot, every non-idle task stalled at once",
);
static ZONE_FREE: Column = Column::new(
    "zone_free_pages",
    Unit::Count,
    "a populated zone's free pages (/proc/zoneinfo), against its watermarks",
);
static ZONE_MIN: Column = Column::new(
    "zone_min_pages",
    Unit::Count,
    "the zone's min watermark: below it, allocations reclaim directly",
);
static ZONE_LOW: Column = Column::new(
    "zone_low_pages",
    Unit::Count,
    "the zone's low watermark: below it, kswapd wakes",
);
static ZONE_HIGH: Column = Column::new(
    "zone_high_pages",
    Unit::Count,
    "the zone's high watermark: kswapd reclaims until free pages are above it",
);
static CGROUP_USAGE: Column = Column::new(
    "cgroup_usage_bytes",
    Unit::Bytes,
    "memory charged now to the host's memory cgroup: its anonymous memory, the page cache it brought in, the kernel memory it caused (v2 memory.current)",
);
static CGROUP_LIMIT: Column = Column::new(
    "cgroup_limit_bytes",
    Unit::Bytes,
    "the cgroup's hard limit (v2 memory.max); absent when it has none",
);
static CGROUP_LIMIT_HITS: Column = Column::new(
    "cgroup_limit_hits",
    Unit::Count,
    "charges that hit the limit and had to reclaim first, since the cgroup was made (v2 memory.events max, v1 memory.failcnt)",
);
static CGROUP_OOM_KILLS: Column = Column::new(
    "cgroup_oom_kills",
    Unit::Count,
    "processes the OOM killer killed in the cgroup, since it was made (memory.events oom_kill)",
);
static POOL_SLOTS: Column = Column::new(
    "pool_slots",
    Unit::Count,
    "the host's pooling allocator's slots by kind, from its own metrics (skillhost_pool_slots): in use (memories, tables, stacks, component_instances, core_instances) and unused but warm (unused_warm_memories, unused_warm_tables, reused first); absent for a host on demand",
);
static POOL_RESIDENT: Column = Column::new(
    "pool_unused_resident_bytes",
    Unit::Bytes,
    "bytes the pool's unused warm slots keep resident, by kind (memory, table): RSS that no instance uses, the price of --pool-keep-resident and --pool-max-unused-warm-slots",
);
static SKILLS: Column = Column::new(
    "skills",
    Unit::Count,
    "skills the host holds, by state, from its own metrics (skillhost_skills): registered (all of them), compiled (ready to instantiate: what stays resident), failed; absent for a host without them",
);
static RSS: Column = Column::new(
    "rss_bytes",
    Unit::Bytes,
    "the host's resident memory now (/proc/PID/statm, read at every scrape; the held_* parts are up to 10 s older)",
);
static CPU: Column = Column::new(
    "cpu_seconds",
    Unit::Seconds,
    "the host's CPU time, user and system, every thread's (/proc/PID/stat, read at every scrape, to 10 ms): over the requests answered, what a request costs it in all, its HTTP and runtime work included",
);
static CPUS: Column = Column::new(
    "cpus",
    Unit::Count,
    "CPUs the host may run on (its affinity)",
);
static MEMORY: Column = Column::new(
    "memory_bytes",
    Unit::Bytes,
    "the machine's memory (MemTotal)",
);
static OWN_CPU: Column = Column::new(
    "cpu_ms",
    Unit::Ms,
    "skillprof's own CPU time (user and system) since it started",
);
static OWN_RSS: Column = Column::new("rss_kb", Unit::Kib, "skillprof's own resident memory");
static OWN_SCRAPE: Column = Column::new(
    "scrape_ms",
    Unit::Ms,
    "how long the previous scrape took to read the probes, the host and the machine",
);

/// What the watch says of itself in a scrape.
pub struct Watching<'a> {
    /// Each probe of the session and whether it attached.
    pub probes: &'a [(String, bool)],
    pub markers: bool,
    pub restarts: u64,
    /// The most skills whose series a scrape serves (--max-skills).
    pub max_skills: usize,
}

/// The text of one scrape.
pub fn render(snapshot: &Snapshot, watching: &Watching) -> String {
    let mut families = Families::default();
    host(&mut families, snapshot);
    let left_out = skills(&mut families, snapshot, watching.max_skills);
    itself(&mut families, watching, left_out);
    machine(&mut families, snapshot);
    own(&mut families, snapshot);
    families.text()
}

/// The host: what the probes counted, what holds its memory, its cgroup, and the mappings
/// one process may hold (vm.max_map_count).
fn host(families: &mut Families, snapshot: &Snapshot) {
    let mut host = Row::default();
    crate::record::probes::ProbeMetrics::write_cells(Some(&snapshot.probes), &mut host);
    for cell in host.cells() {
        let kind = if cell.name.contains("_max") {
            Kind::Gauge
        } else {
            Kind::Counter
        };
        families.add("host", &cell.name, cell.column, kind, "", &cell.value);
    }
    if let Some(held) = snapshot.held {
        let mut row = Row::default();
        let now = EntryComposition {
            before: held,
            after: held,
        };
        EntryComposition::write_cells(Some(&now), &mut row);
        for cell in row.cells() {
            families.add(
                "host",
                &cell.name,
                cell.column,
                Kind::Gauge,
                "",
                &cell.value,
            );
        }
    }
    families.column(
        "host",
        &MAPS,
        Kind::Gauge,
        "",
        &snapshot.held.map(|held| held.mappings).into(),
    );
    if let Some((path, stat, limit)) = &snapshot.cgroup {
        let labels = format!("cgroup=\"{}\"", escape(path));
        families.column(
            "host",
            &CGROUP_USAGE,
            Kind::Gauge,
            &labels,
            &stat.usage_bytes.into(),
        );
        families.column(
            "host",
            &CGROUP_LIMIT,
            Kind::Gauge,
            &labels,
            &(*limit).into(),
        );
        for (column, value) in [
            (&CGROUP_LIMIT_HITS, stat.limit_hits),
            (&CGROUP_OOM_KILLS, stat.oom_kills),
        ] {
            families.column("host", column, Kind::Counter, &labels, &value.into());
        }
    }
    for (state, value) in &snapshot.host_gauges.skills {
        let labels = format!("state=\"{}\"", escape(state));
        families.column("host", &SKILLS, Kind::Gauge, &labels, &(*value).into());
    }
    families.column(
        "host",
        &RSS,
        Kind::Gauge,
        "",
        &snapshot.process.map(|p| p.rss_kb * 1024).into(),
    );
    families.column(
        "host",
        &CPU,
        Kind::Counter,
        "",
        &snapshot
            .process
            .map(|p| crate::record::process::ticks_to_seconds(p.cpu_ticks))
            .into(),
    );
    families.column("host", &CPUS, Kind::Gauge, "", &snapshot.host_cpus.into());
    for (kind, value) in &snapshot.host_gauges.pool {
        let (column, kind) = match kind
            .strip_prefix("unused_")
            .and_then(|rest| rest.strip_suffix("_bytes_resident"))
        {
            Some(slot) => (&POOL_RESIDENT, slot),
            None => (&POOL_SLOTS, kind.as_str()),
        };
        let labels = format!("kind=\"{}\"", escape(kind));
        families.column("host", column, Kind::Gauge, &labels, &(*value).into());
    }
    families.column(
        "machine",
        &MEMORY,
        Kind::Gauge,
        "",
        &snapshot.memory_kb.map(|kb| kb * 1024).into(),
    );
    families.column(
        "machine",
        &MAX_MAP_COUNT,
        Kind::Gauge,
        "",
        &snapshot.max_map_count.into(),
    );
}

/// Per skill and phase, from the host's ledger; and the compiles of a skill after its first.
/// The skills' series, for the `max_skills` busiest; how many skills were left out.
fn skills(families: &mut Families, snapshot: &Snapshot, max_skills: usize) -> u64 {
    let rows = snapshot.probes.skills.as_deref().unwrap_or_default();
    let counted = snapshot.probes.calls_by_skill();
    let grouped = by_skill_and_phase(rows);
    let (kept, left_out) = busiest(&grouped, max_skills);
    // One row's cells at a time, its allocation kept from one to the next.
    let mut row = Row::default();
    for ((skill, phase), (counts, answered)) in &grouped {
        let (phase, counts, answered) = (*phase, *counts, *answered);
        if skill.as_deref().is_some_and(|skill| !kept.contains(skill)) {
            continue;
        }
        let labels = format!(
            "skill=\"{}\",phase=\"{}\"",
            escape(
                skill
                    .as_deref()
                    .unwrap_or(crate::producers::probes::markers::HOST_ROW)
            ),
            phase.as_str()
        );
        row.clear();
        SkillRow {
            skill: skill.map(str::to_owned),
            phase,
            counts,
            answered,
            time: None,
        }
        .write_cells(&mut row, counted);
        if phase == Phase::Call
            && let Some(skill) = skill
        {
            latency(families, skill, &answered);
        }
        for cell in row
            .cells()
            .iter()
            .filter(|cell| cell.value.number().is_some())
        {
            // The failures are one series by reason, not a series per reason: PromQL can then
            // rate and sum them across reasons (series of different names it cannot).
            let by_reason;
            let (name, labels) = match cell.name.strip_prefix("failed_") {
                Some(reason) if std::ptr::eq(cell.column, &skill_columns::FAILED) => {
                    by_reason = format!("{labels},reason=\"{reason}\"");
                    ("failed", by_reason.as_str())
                }
                _ => (&*cell.name, labels.as_str()),
            };
            families.add(
                "skill",
                name,
                cell.column,
                Kind::Counter,
                labels,
                &cell.value,
            );
        }
        if phase == Phase::Compile
            && let Some(skill) = &skill
        {
            let again = counts.phase.runs.saturating_sub(1);
            let labels = format!("skill=\"{}\"", escape(skill));
            families.column(
                "skill",
                &COMPILES_AGAIN,
                Kind::Counter,
                &labels,
                &again.into(),
            );
        }
    }
    left_out
}

/// A skill's requests by latency, as a histogram in seconds.
fn latency(families: &mut Families, skill: &str, answered: &Latency) {
    let labels = format!("skill=\"{}\"", escape(skill));
    let buckets = (0..LATENCY_BUCKETS).map(|bucket| {
        let bound = match latency_bound_ns(bucket) {
            u64::MAX => f64::INFINITY,
            ns => ns as f64 / 1e9,
        };
        (bound, answered.buckets[bucket])
    });
    families.histogram(
        "skill",
        &LATENCY,
        &labels,
        buckets,
        answered.ns as f64 / 1e9,
    );
}

/// The `max_skills` skills with the most runs since the watch began (ties by name), and how
/// many others there are. The host's own row is no skill and always served.
fn busiest<'a>(
    grouped: &BTreeMap<(Option<&'a str>, Phase), (SkillCounters, Latency)>,
    max_skills: usize,
) -> (rustc_hash::FxHashSet<&'a str>, u64) {
    let mut runs: BTreeMap<&str, u64> = BTreeMap::new();
    for ((skill, _), (counts, _)) in grouped {
        if let Some(skill) = skill {
            *runs.entry(skill).or_default() += counts.phase.runs;
        }
    }
    let mut ranked: Vec<(&str, u64)> = runs.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let left_out = ranked.len().saturating_sub(max_skills) as u64;
    ranked.truncate(max_skills);
    (
        ranked.into_iter().map(|(skill, _)| skill).collect(),
        left_out,
    )
}

/// What the watch itself sees: whether skills are told apart, which probe is live, the
/// restarts it followed and the skills it left out.
fn itself(families: &mut Families, watching: &Watching, left_out: u64) {
    families.column(
        "watch",
        &PER_SKILL,
        Kind::Gauge,
        "",
        &u64::from(watching.markers).into(),
    );
    families.column(
        "watch",
        &RESTARTS,
        Kind::Counter,
        "",
        &watching.restarts.into(),
    );
    families.column("watch", &LEFT_OUT, Kind::Gauge, "", &left_out.into());
    for (probe, live) in watching.probes {
        let labels = format!("probe=\"{}\"", escape(probe));
        families.column(
            "watch",
            &PROBE_LIVE,
            Kind::Gauge,
            &labels,
            &u64::from(*live).into(),
        );
    }
}

/// The machine: memory pressure, and each zone's free pages against its watermarks.
fn machine(families: &mut Families, snapshot: &Snapshot) {
    if let Some(psi) = &snapshot.psi {
        for (column, value) in [
            (&PSI_SOME, psi.some_total_us),
            (&PSI_FULL, psi.full_total_us),
        ] {
            families.column("machine", column, Kind::Counter, "", &value.into());
        }
    }
    for zone in &snapshot.zones {
        let labels = format!(
            "node=\"{}\",zone=\"{}\"",
            zone.id.node,
            escape(&zone.id.name)
        );
        let marks = &zone.watermarks;
        for (column, value) in [
            (&ZONE_FREE, zone.free_pages),
            (&ZONE_MIN, marks.min),
            (&ZONE_LOW, marks.low),
            (&ZONE_HIGH, marks.high),
        ] {
            families.column("machine", column, Kind::Gauge, &labels, &value.into());
        }
    }
}

/// The watch's own cost: its CPU, its RSS, its last scrape.
fn own(families: &mut Families, snapshot: &Snapshot) {
    let own = &snapshot.own;
    families.column(
        "self",
        &OWN_CPU,
        Kind::Counter,
        "",
        &(own.cpu.as_secs_f64() * 1e3).into(),
    );
    families.column("self", &OWN_RSS, Kind::Gauge, "", &own.rss_kb.into());
    families.column(
        "self",
        &OWN_SCRAPE,
        Kind::Gauge,
        "",
        &(own.last_scrape.as_secs_f64() * 1e3).into(),
    );
}

/// The rows summed by skill name and phase: a skill registered again (a changed file) has
/// rows under each registration, one series here.
fn by_skill_and_phase(
    rows: &[SkillRow],
) -> BTreeMap<(Option<&str>, Phase), (SkillCounters, Latency)> {
    let mut summed: BTreeMap<(Option<&str>, Phase), (SkillCounters, Latency)> = BTreeMap::new();
    for row in rows {
        let (counts, answered) = summed.entry((row.skill.as_deref(), row.phase)).or_default();
        counts.combine(&row.counts);
        answered.combine(&row.answered);
    }
    summed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beyond_the_cap_the_least_busy_skills_are_left_out_and_counted() {
        let mut grouped = BTreeMap::new();
        for (skill, phase, runs) in [
            (Some("busy"), Phase::Call, 90),
            (Some("busy"), Phase::Compile, 1),
            (Some("idle"), Phase::Call, 1),
            (Some("middling"), Phase::Call, 5),
            (Some("tied"), Phase::Call, 5),
            (None, Phase::Call, 1000),
        ] {
            let mut counts = SkillCounters::default();
            counts.phase.runs = runs;
            grouped.insert((skill, phase), (counts, Latency::default()));
        }
        let (kept, left_out) = busiest(&grouped, 2);
        assert_eq!(kept.into_iter().collect::<Vec<_>>(), ["busy", "middling"]);
        assert_eq!(
            left_out, 2,
            "idle and tied (a tie goes by name); the host row is no skill"
        );
        let (kept, left_out) = busiest(&grouped, 10);
        assert_eq!((kept.len(), left_out), (4, 0));
    }
}
