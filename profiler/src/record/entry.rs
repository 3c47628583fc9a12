//! The record of one entry: what the runner, the sampler, the probes and a balloon measured,
//! as typed values. explain reads it; the commands.csv row is written from it.

use std::time::Duration;

use skillprof_common::Counters;

use super::Metrics;
use super::balloon::BandHeld;
use super::composition::EntryComposition;
use super::field::{Column, Row};
use super::host::{HostCounters, Stopped, Trimmed};
use super::locust::LoadEntry;
use super::memcg::MemcgEntry;
use super::probes::{ProbeMetrics, StackSummary, StopBreakdown};
use super::process::{ProcessChange, ProcessStat};
use super::sampling::{EntrySampling, HostScheduling, ZoneId};
use super::time::EntryTime;
use super::traffic::TrafficStep;
use crate::ground::cmds::{self, Command, InFlightCap};
use crate::ground::stats::nearest_rank;

/// Everything measured of one entry.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct EntryRecord {
    pub measure: EntryMeasure,
    pub sampling: EntrySampling,
    /// `None` under `--no-probes`.
    pub probes: Option<ProbeMetrics>,
    /// `stop` only, and only with probes: where the shutdown's time went.
    pub stop: Option<StopBreakdown>,
    /// What a balloon held during the entry, if one did.
    pub pressure: Option<BandHeld>,
    /// The host's memory cgroup (`--memory-max`), if it had one.
    #[serde(default)]
    pub memcg: Option<MemcgEntry>,
    /// `--stacks`: what the entry's stacks came to.
    #[serde(default)]
    pub stacks: Option<StackSummary>,
    /// Where the entry's time went: the profile's CPU samples and time off a CPU, with
    /// probes (`--profile-hz`, `--off-cpu`).
    #[serde(default)]
    pub time: Option<EntryTime>,
    /// `l_execute_all`, `lo_execute`: what Locust's swarm did and the host served.
    #[serde(default)]
    pub load: Option<LoadEntry>,
    /// What the host itself counted over the entry (its `/metrics`), if it counts.
    #[serde(default)]
    pub host: Option<HostCounters>,
    /// What held the host's memory at the entry's boundaries (its smaps); `None` once the
    /// host is gone.
    #[serde(default)]
    pub held: Option<EntryComposition>,
    /// How long the host's threads waited for a CPU; `None` once the host is gone.
    #[serde(default)]
    pub scheduling: Option<HostScheduling>,
}

/// One group of the record in commands.csv: its columns, and how an entry writes its cells.
pub(super) struct Group {
    pub(super) columns: fn() -> Vec<&'static Column>,
    write: fn(&EntryRecord, &mut Row),
}

/// The record's groups, in column order: [`super::columns`] and each entry's row both read
/// this list, so a new group is one line here (and its field above).
pub(super) const GROUPS: &[Group] = &[
    Group {
        columns: || EntryMeasure::columns().collect(),
        write: |record, row| record.measure.write(row),
    },
    Group {
        columns: || EntrySampling::COLUMNS.to_vec(),
        write: |record, row| record.sampling.write(row),
    },
    Group {
        columns: || HostScheduling::COLUMNS.to_vec(),
        write: |record, row| HostScheduling::write_cells(record.scheduling.as_ref(), row),
    },
    Group {
        columns: || {
            super::probes::probe_columns()
                .iter()
                .map(|c| &c.column)
                .collect()
        },
        write: |record, row| ProbeMetrics::write_cells(record.probes.as_ref(), row),
    },
    Group {
        columns: || StopBreakdown::COLUMNS.to_vec(),
        write: |record, row| StopBreakdown::write_cells(record.stop.as_ref(), row),
    },
    Group {
        columns: || BandHeld::COLUMNS.to_vec(),
        write: |record, row| {
            let zones: Vec<ZoneId> = record
                .sampling
                .zone_lowest
                .iter()
                .map(|(id, _)| id.clone())
                .collect();
            BandHeld::write_cells(record.pressure.as_ref(), &zones, row);
        },
    },
    Group {
        columns: || MemcgEntry::COLUMNS.to_vec(),
        write: |record, row| MemcgEntry::write_cells(record.memcg.as_ref(), row),
    },
    Group {
        columns: || StackSummary::COLUMNS.to_vec(),
        write: |record, row| StackSummary::write_cells(record.stacks.as_ref(), row),
    },
    Group {
        columns: || EntryTime::COLUMNS.to_vec(),
        write: |record, row| EntryTime::write_cells(record.time.as_ref(), row),
    },
    Group {
        columns: || LoadEntry::COLUMNS.to_vec(),
        write: |record, row| LoadEntry::write_cells(record.load.as_ref(), row),
    },
    Group {
        columns: || TrafficStep::COLUMNS.to_vec(),
        write: |record, row| TrafficStep::write_cells(record.measure.outcome.traffic.as_ref(), row),
    },
    Group {
        columns: || HostCounters::COLUMNS.to_vec(),
        write: |record, row| HostCounters::write_cells(record.host.as_ref(), row),
    },
    Group {
        columns: || EntryComposition::COLUMNS.to_vec(),
        write: |record, row| EntryComposition::write_cells(record.held.as_ref(), row),
    },
];

/// The entry's commands.csv row: every group's cells, in column order.
impl Metrics for EntryRecord {
    fn write(&self, row: &mut Row) {
        for group in GROUPS {
            (group.write)(self, row);
        }
    }
}

impl EntryRecord {
    /// The runner's own measure of an entry, before its measurers fill in their parts: the
    /// sampler always does, the others where they ran.
    pub fn new(measure: EntryMeasure) -> EntryRecord {
        EntryRecord {
            measure,
            sampling: EntrySampling::unsampled(),
            probes: None,
            stop: None,
            pressure: None,
            memcg: None,
            stacks: None,
            time: None,
            load: None,
            host: None,
            held: None,
            scheduling: None,
        }
    }

    /// The entry's commands.csv row.
    pub fn row(&self) -> Row {
        let mut row = Row::default();
        self.write(&mut row);
        row
    }

    /// A figure of `probe`'s counters; `None` without probes or if that probe did not attach.
    pub fn probe<T>(
        &self,
        probe: super::probes::Probe,
        figure: impl Fn(&Counters) -> T,
    ) -> Option<T> {
        self.probes.as_ref()?.read(probe, figure)
    }

    /// The heap's RSS at the entry's end split as `(in use, freed and kept)`, in KiB: what the
    /// host says its allocator has handed out, and the rest. mallinfo2's free bytes would
    /// count never-touched ones too. `None` without smaps or without the host's figure.
    pub fn heap_kept_kb(&self) -> Option<(u64, u64)> {
        let heap_kb = self.held.as_ref()?.after.heap_kb;
        let in_use_kb = self.host.as_ref()?.heap_in_use_bytes? / 1024;
        Some((in_use_kb.min(heap_kb), heap_kb.saturating_sub(in_use_kb)))
    }
}

/// The runner's own measurements of one entry: identity, wall time, the host's memory and
/// faults at the two boundaries, the requests, and for `stop` how the host ended.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct EntryMeasure {
    pub index: usize,
    pub cmd: EntryCmd,
    pub line: Option<usize>,
    pub repeat: u32,
    /// Since the host was ready.
    pub started: Duration,
    pub took: Duration,
    pub before: ProcessStat,
    /// `None` once the host is gone (after `stop`): its memory then reads 0, as in the
    /// harness, and its fault counters are not known.
    pub after: Option<ProcessStat>,
    pub outcome: Outcome,
    pub stopped: Option<Stopped>,
}

impl EntryMeasure {
    pub fn took_ms(&self) -> f64 {
        self.took.as_secs_f64() * 1e3
    }

    /// The host process across the entry.
    pub fn process(&self) -> ProcessChange<'_> {
        ProcessChange {
            before: &self.before,
            after: self.after.as_ref(),
        }
    }

    /// Minor and major faults of the host during the entry; `None` once it is gone.
    pub fn faults(&self) -> Option<(u64, u64)> {
        self.process().faults()
    }

    /// After `stop` the host is gone: its memory then reads 0, as in the harness.
    pub fn rss_after_kb(&self) -> u64 {
        self.process().rss_after_kb()
    }

    pub fn rss_diff_kb(&self) -> i64 {
        self.process().rss_diff_kb()
    }

    /// CPU time the host used during the entry; `None` once it is gone.
    pub fn host_cpu_ms(&self) -> Option<f64> {
        self.process().host_cpu_ms()
    }

    /// `None` for an entry without executions.
    pub fn latency(&self) -> Option<Latency> {
        self.outcome.latency()
    }
}

/// The entry's command, typed, with its name as the harness writes it (its tokens joined by
/// single spaces). Serialised as the name, and read back typed through the cmds grammar;
/// `command` is `None` only for a name this version's grammar does not know.
#[derive(Clone, Debug, PartialEq)]
pub struct EntryCmd {
    name: String,
    command: Option<Command>,
}

impl EntryCmd {
    pub fn new(name: String, command: Command) -> EntryCmd {
        EntryCmd {
            name,
            command: Some(command),
        }
    }

    /// The entry named `name`, read through the cmds grammar.
    pub fn named(name: &str) -> EntryCmd {
        let command = cmds::parse("entry", name, InFlightCap::new(u64::MAX))
            .ok()
            .and_then(|plan| plan.entries.into_iter().next())
            .map(|entry| entry.command);
        EntryCmd {
            name: name.to_owned(),
            command,
        }
    }

    /// Reads the name again as a line of a cmds file in `dir`, if it did not read as one
    /// alone: a line that names a file (`add weather.wasm`, `execute sky @rain.json`) reads
    /// only beside its cmds file, which a record does not keep.
    pub fn read_beside(&mut self, dir: &std::path::Path) {
        if self.command.is_none() {
            self.command = cmds::parse_in("entry", dir, &self.name, InFlightCap::new(u64::MAX))
                .ok()
                .and_then(|plan| plan.entries.into_iter().next())
                .map(|entry| entry.command);
        }
    }

    pub fn command(&self) -> Option<&Command> {
        self.command.as_ref()
    }

    pub fn as_str(&self) -> &str {
        &self.name
    }
}

impl std::ops::Deref for EntryCmd {
    type Target = str;

    fn deref(&self) -> &str {
        &self.name
    }
}

impl std::fmt::Display for EntryCmd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}

impl PartialEq<&str> for EntryCmd {
    fn eq(&self, other: &&str) -> bool {
        self.name == *other
    }
}

impl serde::Serialize for EntryCmd {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.name)
    }
}

impl<'de> serde::Deserialize<'de> for EntryCmd {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        Ok(EntryCmd::named(&name))
    }
}

/// The skill executions' latency: nearest-rank percentiles and the slowest.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Latency {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl Outcome {
    /// `None` for an entry without executions.
    pub fn latency(&self) -> Option<Latency> {
        let mut latencies = self.latencies.clone();
        latencies.sort();
        if latencies.is_empty() {
            return None;
        }
        let rank = |q: f64| nearest_rank(&latencies, q).as_secs_f64() * 1e3;
        Some(Latency {
            p50_ms: rank(0.50),
            p99_ms: rank(0.99),
            max_ms: rank(1.0),
        })
    }

    /// The host's own instantiate and call time, summed (its Server-Timing header); `None`
    /// if the host sent none.
    pub fn host_split_ms(&self) -> Option<(f64, f64)> {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        (self.host_timed > 0).then(|| (ms(self.host_instantiate), ms(self.host_call)))
    }
}

use super::field::fields;

fields! {
    impl EntryMeasure: fn write_identity(&self, row: &mut Row) -> row {}
    INDEX "index" Count "entry number, from 0, in file order" = self.index;
    CMD "cmd" Text "the entry as the harness names it: its tokens joined by single spaces" = self.cmd.as_str();
    LINE "line" Count "line of the cmds file (empty for the implicit stop)" = self.line;
    REPEAT "repeat" Count "how often the command ran within the entry" = self.repeat;
    STARTED "started_s" Seconds "start of the entry, in seconds since the host was ready" = self.started.as_secs_f64();
    TOOK "took_ms" Ms "wall time of the entry, as the 2024 harness timed it (delete_skill: without the wait for the host to stop listing the skill, which listing_ms has)" = self.took_ms();
}

/// Its groups' cells: the entry, the host process across it, its requests, how the host ended.
impl Metrics for EntryMeasure {
    fn write(&self, row: &mut Row) {
        self.write_identity(row);
        self.process().write(row);
        self.outcome.write(row);
        Stopped::write_cells(self.stopped.as_ref(), row);
    }
}

impl EntryMeasure {
    /// Its columns, each group's in row order.
    pub fn columns() -> impl Iterator<Item = &'static Column> {
        [
            Self::COLUMNS,
            ProcessChange::COLUMNS,
            Outcome::COLUMNS,
            Stopped::COLUMNS,
        ]
        .into_iter()
        .flatten()
        .copied()
    }
}

fields! {
    impl Outcome: fn write(&self, row: &mut Row) -> row {
        let latency = self.latency();
        let split = self.host_split_ms();
        let fill = self.fill.as_ref();
        let trim = self.trim.as_ref();
    }
    REQUESTS "requests" Count "HTTP requests the entry sent to the host" = self.requests;
    REQUEST_ERRORS "request_errors" Count "requests that failed: transport errors and non-2xx answers" = self.errors;
    FIRST_ERROR "first_error" Text "the first failure's message" = self.first_error.as_deref();
    EXECUTIONS "executions" Count "skill executions among the requests" = self.latencies.len();
    P50 "execute_p50_ms" Ms "median latency of the skill executions, as the runner saw them" = latency.map(|l| l.p50_ms);
    P99 "execute_p99_ms" Ms "99th percentile (nearest rank) of the skill executions' latency" = latency.map(|l| l.p99_ms);
    MAX "execute_max_ms" Ms "slowest skill execution" = latency.map(|l| l.max_ms);
    INSTANTIATE "host_instantiate_ms" Ms "time the host spent instantiating skills, summed over the executions (its Server-Timing header; empty if the host sends none)" = split.map(|s| s.0);
    CALL "host_call_ms" Ms "time the host spent in the skills' run calls, summed (Server-Timing)" = split.map(|s| s.1);
    LISTING "listing_ms" Ms "time spent waiting for the host to list (or unlist) skills after the skills directory changed; for delete_skill it is not in took_ms, which counts the file's removal only, as the 2024 harness timed it" = self.listing.as_secs_f64() * 1e3;
    FILL_FITTED "fill_fitted" Count "fill_py/fill_rs only: skills added and executed before the one that stopped the fill" = fill.map(|fill| fill.fitted);
    FILL_STOPPED "fill_stopped" Text "fill_py/fill_rs only, why the fill stopped: limit (the next skill made the host's memory cgroup reach its limit, so the kernel began reclaiming from it), failed (the next skill could not be added or executed), killed (the host was killed, by the OOM killer if memcg_oom_kills says so), max (MAX skills fitted)" = fill.map(|fill| fill.stopped.name());
    TRIM_BY "trim_by" Text "trim only, how the host's allocator was asked to give its free memory back: route (the host profile's trim route, skillhost's POST /admin/trim) or ptrace (glibc's malloc_trim(0) called in one of the host's threads, --trim-by ptrace). The entry's rss_diff_kb is what it had kept" = trim.map(|trim| trim.by().name());
    TRIM_HELD "trim_held_ms" Ms "trim only: how long the host was held, the route's answer, or one thread stopped, calling malloc_trim and put back (the profiler's cost)" = trim.map(|trim| trim.held_us as f64 / 1e3);
}

/// What an entry's requests did.
#[derive(Debug, Default, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Outcome {
    pub requests: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    /// Client-side latency of every skill execution.
    pub latencies: Vec<Duration>,
    /// The host's own instantiate and call time (its Server-Timing header), summed over
    /// the `host_timed` answers that carried one.
    pub host_instantiate: Duration,
    pub host_call: Duration,
    pub host_timed: u64,
    /// Waiting for the host to notice skills directory changes.
    pub listing: Duration,
    /// Time within the entry that the 2024 harness did not time, and `took` leaves out:
    /// delete_skill's wait for the host to stop listing the skill (also in `listing`).
    #[serde(default)]
    pub untimed: Duration,
    /// The host's memory after each repetition of the command, or after each skill a fill
    /// added: what one more skill (or round) cost, step by step.
    #[serde(default)]
    pub steps: Vec<Step>,
    /// `fill_py`/`fill_rs` only.
    #[serde(default)]
    pub fill: Option<Fill>,
    /// `trim` only: how the allocator was asked, and how long the host was held.
    #[serde(default)]
    pub trim: Option<Trimmed>,
    /// Failed answers by HTTP status (transport errors are the rest of `errors`).
    #[serde(default)]
    pub statuses: std::collections::BTreeMap<u16, u64>,
    /// `o_execute`/`c_execute` only: what the step's traffic asked and got.
    #[serde(default)]
    pub traffic: Option<super::traffic::TrafficStep>,
    /// Every skill execution's span, until the probes' code publishes are named by them.
    #[serde(skip)]
    pub spans: Vec<super::probes::RequestSpan>,
}

/// The host's memory after one step of an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Step {
    pub rss_kb: u64,
    /// What its memory cgroup was charged (`--memory-max` only).
    pub memcg_kb: Option<u64>,
}

/// How many skills a fill added before the host could not hold another, and why it stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Fill {
    /// Skills added and executed before the one that stopped the fill.
    pub fitted: u32,
    pub stopped: FillStop,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FillStop {
    /// Adding the next skill made the memory cgroup reach its limit: the kernel reclaimed
    /// from it `hits` times.
    Limit { hits: u64 },
    /// The next skill could not be added or executed.
    Failed,
    /// The host was killed while adding the next skill.
    Killed,
    /// MAX skills were added without reaching the limit.
    Bound,
}

impl FillStop {
    /// As the `fill_stopped` column spells it.
    pub fn name(self) -> &'static str {
        match self {
            FillStop::Limit { .. } => "limit",
            FillStop::Failed => "failed",
            FillStop::Killed => "killed",
            FillStop::Bound => "max",
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;
    use std::time::Duration;

    use super::*;
    use crate::record::fixture::{probed, record};

    /// The report reads entries.jsonl where the run wrote commands.csv: a record that went
    /// through JSON must give the same row, to the byte.
    #[test]
    fn a_record_reads_back_as_the_same_row() {
        let mut stop = probed(record("stop", 1220.3), |c| {
            c.syscalls[0].calls = 3;
            c.kswapd.awake_ns = 1_234_567;
            c.faults.kernel = 9;
        });
        stop.measure.after = None;
        stop.measure.outcome.latencies =
            vec![Duration::from_micros(1500), Duration::from_millis(7)];
        stop.measure.stopped = Some(Stopped {
            status: Some(ExitStatus::from_raw(15)),
            killed: true,
            took: Duration::from_millis(1220),
            signalled_ns: 1,
            reaped_ns: 2,
        });
        let json = serde_json::to_string(&stop).unwrap();
        let back: EntryRecord = serde_json::from_str(&json).unwrap();
        assert_eq!(back.row(), stop.row());
        assert_eq!(
            back.row().csv("exit_status").as_deref(),
            Some("signal: 15 (SIGTERM)")
        );
        assert_eq!(back.row().csv("faults_kernel").as_deref(), Some("9"));
    }
}
