//! The result record: one per entry ([`EntryRecord`]), the contract between measuring and
//! reporting. explain reads its typed fields; each metric group also writes itself into a
//! [`Row`] of named cells, from which `commands.csv` is written, and every column is
//! documented once, in [`columns`].

pub mod balloon;
pub mod composition;
mod entry;
pub mod event;
#[cfg(test)]
pub(crate) mod fixture;
pub mod host;
pub mod locust;
pub mod memcg;
pub mod probes;
pub mod process;
pub mod profile;
mod run;
pub mod sampling;

use std::fmt::Write as _;

pub use entry::{EntryMeasure, EntryRecord, Fill, FillStop, Latency, Outcome, Step};
pub use run::{
    CgroupInfo, CmdsInfo, HostInfo, LoadInfo, ProbesInfo, RunInfo, Status, SysctlDuring,
};

/// Named cells in a fixed order. Column names carry their unit (`took_ms`, `rss_kb`).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Row {
    cells: Vec<(String, String)>,
}

impl Row {
    pub fn int(&mut self, name: impl Into<String>, value: impl Into<i128>) -> &mut Self {
        self.cells.push((name.into(), value.into().to_string()));
        self
    }

    /// Three decimals: enough for milliseconds measured in microseconds.
    pub fn float(&mut self, name: impl Into<String>, value: f64) -> &mut Self {
        let mut text = String::new();
        let _ = write!(text, "{value:.3}");
        self.cells.push((name.into(), text));
        self
    }

    pub fn text(&mut self, name: impl Into<String>, value: impl Into<String>) -> &mut Self {
        self.cells.push((name.into(), value.into()));
        self
    }

    /// A value that was not measured for this entry: an empty cell, never a made-up zero.
    pub fn missing(&mut self, name: impl Into<String>) -> &mut Self {
        self.cells.push((name.into(), String::new()));
        self
    }

    /// A value that may not have been measured: empty when it was not.
    pub fn int_or_empty(
        &mut self,
        name: impl Into<String>,
        value: Option<impl Into<i128>>,
    ) -> &mut Self {
        match value {
            Some(value) => self.int(name, value),
            None => self.missing(name),
        }
    }

    pub fn float_or_empty(&mut self, name: impl Into<String>, value: Option<f64>) -> &mut Self {
        match value {
            Some(value) => self.float(name, value),
            None => self.missing(name),
        }
    }

    pub fn text_or_empty(&mut self, name: impl Into<String>, value: Option<&str>) -> &mut Self {
        match value {
            Some(value) => self.text(name, value),
            None => self.missing(name),
        }
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.cells.iter().map(|(name, _)| name.as_str())
    }

    pub fn values(&self) -> impl Iterator<Item = &str> {
        self.cells.iter().map(|(_, value)| value.as_str())
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.cells
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Anything measured per entry writes its cells through this.
pub trait Metrics {
    fn write(&self, row: &mut Row);
}

/// The documentation of the runner's and the sampler's columns. A name ending in `*` stands
/// for a family (per zone, per vmstat counter). With the probes' columns and the ones after
/// them, this is [`columns`], from which docs/columns.md is generated; a test
/// checks that every emitted column is documented there.
const RUN_COLUMNS: &[(&str, &str)] = &[
    ("index", "entry number, from 0, in file order"),
    (
        "cmd",
        "the entry as the harness names it: its tokens joined by single spaces",
    ),
    (
        "line",
        "line of the cmds file (empty for the implicit stop)",
    ),
    ("repeat", "how often the command ran within the entry"),
    (
        "started_s",
        "start of the entry, in seconds since the host was ready",
    ),
    (
        "took_ms",
        "wall time of the entry, as the 2024 harness timed it (delete_skill: without the wait for the host to stop listing the skill, which listing_ms has)",
    ),
    ("rss_before_kb", "host resident set size before the entry"),
    (
        "rss_after_kb",
        "host resident set size after the entry (0 after stop)",
    ),
    ("rss_diff_kb", "rss_after_kb - rss_before_kb"),
    (
        "rss_peak_kb",
        "largest host RSS during the entry: the kernel's high-water mark (VmHWM), reset at the entry's start through /proc/PID/clear_refs, so a peak between samples counts; where the reset is refused, the most of the samples and both ends (meta.json's rss_peak says which)",
    ),
    (
        "maps_peak",
        "most memory mappings (VMAs) the host held in any count of the entry (/proc/PID/maps, at both ends and once a second between), against maps_limit: past it, mmap and mprotect fail with ENOMEM",
    ),
    (
        "maps_limit",
        "vm.max_map_count at the end of the entry: the mappings one process may hold",
    ),
    (
        "threads_peak",
        "most threads the host ran in any sample of the entry (/proc/PID/stat): a compile's own threads (skillhost: one per CPU) are gone by its end",
    ),
    ("vms_before_kb", "host virtual memory size before the entry"),
    (
        "vms_after_kb",
        "host virtual memory size after the entry (0 after stop)",
    ),
    ("vms_diff_kb", "vms_after_kb - vms_before_kb"),
    (
        "minflt",
        "minor page faults of the host during the entry (/proc/PID/stat)",
    ),
    (
        "majflt",
        "major page faults of the host during the entry (/proc/PID/stat)",
    ),
    ("threads", "host threads at the end of the entry"),
    (
        "host_cpu_ms",
        "CPU time the host used during the entry, user + system, all threads (/proc/PID/stat, in 10 ms ticks; empty after stop). Far below took_ms on a CPU-bound entry: the host waited for a CPU",
    ),
    ("requests", "HTTP requests the entry sent to the host"),
    (
        "request_errors",
        "requests that failed: transport errors and non-2xx answers",
    ),
    ("first_error", "the first failure's message"),
    ("executions", "skill executions among the requests"),
    (
        "execute_p50_ms",
        "median latency of the skill executions, as the runner saw them",
    ),
    (
        "execute_p99_ms",
        "99th percentile (nearest rank) of the skill executions' latency",
    ),
    ("execute_max_ms", "slowest skill execution"),
    (
        "host_instantiate_ms",
        "time the host spent instantiating skills, summed over the executions (its Server-Timing header; empty if the host sends none)",
    ),
    (
        "host_call_ms",
        "time the host spent in the skills' run calls, summed (Server-Timing)",
    ),
    (
        "listing_ms",
        "time spent waiting for the host to list (or unlist) skills after the skills directory changed; for delete_skill it is not in took_ms, which counts the file's removal only, as the 2024 harness timed it",
    ),
    (
        "fill_fitted",
        "fill_py/fill_rs only: skills added and executed before the one that stopped the fill",
    ),
    (
        "fill_stopped",
        "fill_py/fill_rs only, why the fill stopped: limit (the next skill made the host's memory cgroup reach its limit, so the kernel began reclaiming from it), failed (the next skill could not be added or executed), killed (the host was killed, by the OOM killer if memcg_oom_kills says so), max (MAX skills fitted)",
    ),
    (
        "trim_by",
        "trim only, how the host's allocator was asked to give its free memory back: route (the host profile's trim route, skillhost's POST /admin/trim) or ptrace (glibc's malloc_trim(0) called in one of the host's threads, --trim-by ptrace). The entry's rss_diff_kb is what it had kept",
    ),
    (
        "trim_held_ms",
        "trim only: how long the host was held, the route's answer, or one thread stopped, calling malloc_trim and put back (the profiler's cost)",
    ),
    (
        "exit_status",
        "stop only: how the host ended (exit code or signal)",
    ),
    (
        "killed",
        "stop only: 1 if the host ignored SIGTERM and was SIGKILLed",
    ),
    (
        "samples",
        "samples the sampler took during the entry, both boundary samples included",
    ),
    (
        "psi_some_us",
        "memory stall time during the entry in which at least one task stalled (/proc/pressure/memory; empty without PSI)",
    ),
    (
        "psi_full_us",
        "memory stall time during the entry in which all non-idle tasks stalled at once (empty without PSI)",
    ),
    (
        "cpu_busy_pct",
        "share of all the machine's CPU time that was busy during the entry, every process (/proc/stat; empty when no 10 ms tick passed)",
    ),
    (
        "cpu_steal_pct",
        "share of all the machine's CPU time the hypervisor gave to other guests while this one wanted to run",
    ),
    (
        "zones_min_free_pages",
        "fewest free pages user allocations could reach (each zone's free pages above its reserve, summed over the zones that serve user memory) in any sample of the entry",
    ),
    (
        "zones_lowest_band",
        "lowest watermark band those reachable free pages fell into, against the same zones' summed watermarks (boost included): baseline [promo, inf), promo [high, promo), high [low, high), low [min, low), min [0, min); baseline starts at high without promo",
    ),
    (
        "zone_*",
        "per populated zone, zone_<node>_<name>_min_free_pages (fewest free pages above the zone's reserve in any sample) and zone_<node>_<name>_lowest_band (its lowest band, as zones_lowest_band, against the zone's own watermarks)",
    ),
    (
        "vmstat_*",
        "change of a /proc/vmstat counter over the entry (pgfault, pgmajfault, pgscan_*, pgsteal_*, allocstall_*, pgrefill, workingset_*, pswpin, pswpout; workingset_nodes is a gauge and can fall)",
    ),
];

/// Documentation of the columns that follow the probes' (whose own documentation lives with
/// their definitions, `probes::metrics::columns`).
const COLUMNS_AFTER_PROBES: &[(&str, &str)] = &[
    (
        "stop_*",
        "stop only, the breakdown (parts sum to stop_total_ms): stop_signal_ms (SIGTERM sent → delivered), stop_drain_ms (→ exit_group), stop_exit_ms (→ teardown start), stop_teardown_ms (address space), stop_last_thread_ms (→ parent notified), stop_reap_ms (→ reaped); stop_drain_munmaps and stop_drain_munmap_bytes; stop_teardown_pages (freed); stop_teardown_by (exit_mmap or rss_stat)",
    ),
    // The balloon of `pressure BAND` (`skillprof run --pressure`), per entry; absent without one.
    (
        "pressure_zone_*",
        "per populated zone: pressure_zone_<node>_<name>_min_usable_kb (fewest free pages above the zone's lowmem reserve in any reading) and pressure_zone_<node>_<name>_lowest_band (its lowest band against its own watermarks); empty for a zone that cannot serve user memory (DMA)",
    ),
    (
        "pressure_*",
        "the band a balloon held during the entry, from readings every 50 ms of free memory as user memory reaches it (pages above each zone's lowmem reserve, summed over the zones that can serve user memory): pressure_band (aimed at), pressure_reads, pressure_in_band_pct, pressure_min_free_kb, pressure_max_free_kb, pressure_lowest_band, pressure_highest_band, pressure_band_lower_kb and pressure_band_upper_kb (the band at the last reading; the watermarks include the kernel's boost), pressure_balloon_kb (at the end), pressure_balloon_max_kb, pressure_adjustments (balloon resizes), pressure_floor_crossings (readings below min + margin, each making the balloon give memory back), pressure_late_steps and pressure_slowest_step_ms (controller steps that overran their time limit while free memory stayed above the high watermark, and the slowest step: the machine was slow to hand out memory, and the entry's times include that), pressure_eased (why the aim was eased: the kernel had little to reclaim), pressure_aborted (why the hold stopped)",
    ),
    (
        "stacks_*",
        "with --stacks, the host's user stacks walked at its page faults and address-space syscalls during the entry: stacks_samples (walked and counted; stacks/ENTRY.folded and ENTRY.svg show them), stacks_lost (not kept: the stack map was full, or another stack had the same hash) and stacks_top_named (samples whose innermost frame has a name: a native symbol, or a wasm function from wasmtime's perf map)",
    ),
    (
        "memcg_*",
        "with --memory-max, the host's memory cgroup as the kernel accounts it: memcg_limit_kb, memcg_usage_kb (charged at the end of the entry: the host's memory, the page cache it brought in, the kernel memory it caused), memcg_peak_kb (the most charged during the entry, by the kernel's own account; cgroup v2: since the run began), memcg_limit_hits (charges that hit the limit and reclaimed first, during the entry: v1 memory.failcnt, v2 memory.events max) and memcg_oom_kills (processes the OOM killer killed in the cgroup during the entry)",
    ),
    (
        "load_*",
        "l_execute_all only: Locust's swarm, merged by its master from every worker: load_users, load_workers, load_requests and load_failures (requests Locust counted, all skills), load_rps (requests per second of the held window), load_p50_ms, load_p90_ms, load_p99_ms and load_max_ms (response times from Locust's histogram, which rounds times above 100 ms to two significant digits), load_host_served (executions the host itself counted over the entry, from its /metrics; empty for a host without them) and load_locust_cpu_s (CPU time of Locust's master and workers: on one machine they share the cores with the host); load.csv has the same per skill",
    ),
    (
        "counted_*",
        "the host's own count over the entry, from its Prometheus /metrics (skillhost's; empty for a host without them, and for stop): counted_requests (execute_skill requests it answered), counted_failed (of those, answered outside 2xx), counted_compilations (components Cranelift compiled: a second compile of a skill shows here) and counted_instances (instances created)",
    ),
    (
        "host_heap_*",
        "the host's malloc at the end of the entry, as it reports it on /metrics (skillhost, with glibc's mallinfo2; empty for a host without it): host_heap_in_use_kb (handed out, not yet freed) and host_heap_free_kb (freed, and kept in malloc's arenas instead of being returned: resident where it was touched)",
    ),
    (
        "held_*",
        "what holds the host's resident memory at the end of the entry, from /proc/PID/smaps, each mapping's Rss in one part by its layout (docs/memory.md says how each is recognised; the parts sum to the smaps total): held_heap_kb (the allocator: the brk heap, malloc's arenas and its large chunks, however many arenas there are), held_wasm_kb (wasm linear memories: the open parts of wasmtime's reservations, and their copy-on-write images), held_code_kb (compiled code: anonymous executable mappings and the read-only data beside them), held_files_kb (mapped files: the binary and its libraries), held_stacks_kb (thread and fiber stacks); held_mappings (how many), held_arenas (malloc's thread arenas, from the headers glibc writes at the start of each heap; empty where the host's memory could not be read and the heaps were told by their layout alone) and held_read_ms (what reading smaps cost the profiler); empty once the host is gone",
    ),
];

/// The documentation of every column `commands.csv` can have, in row order.
pub fn columns() -> Vec<(&'static str, &'static str)> {
    let mut columns = RUN_COLUMNS.to_vec();
    columns.extend(crate::probes::column_documentation());
    columns.extend_from_slice(COLUMNS_AFTER_PROBES);
    columns
}

/// The documentation of `column`, if it has any.
pub fn documentation(column: &str) -> Option<&'static str> {
    columns().into_iter().find_map(|(name, doc)| {
        let matches = match name.strip_suffix('*') {
            Some(prefix) => column.starts_with(prefix),
            None => column == name,
        };
        matches.then_some(doc)
    })
}

/// docs/columns.md's table of `commands.csv` columns, generated from [`columns`].
pub fn columns_markdown() -> String {
    let mut table = String::from("| column | meaning |\n|---|---|\n");
    for (name, doc) in columns() {
        let _ = writeln!(table, "| `{name}` | {} |", doc.replace('|', "\\|"));
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEGIN: &str = "<!-- columns: generated from profiler/src/record/ and probes/metrics.rs; a test keeps this list true -->\n";
    const END: &str = "<!-- end columns -->";

    /// `SKILLPROF_BLESS=1 cargo test -p skillprof --lib record` rewrites docs/columns.md.
    #[test]
    fn the_column_reference_documents_every_column() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/columns.md");
        let readme = std::fs::read_to_string(&path).unwrap();
        let start = readme.find(BEGIN).expect("the column reference's markers") + BEGIN.len();
        let end = start
            + readme[start..]
                .find(END)
                .expect("the column reference's end marker");
        let table = columns_markdown();
        if std::env::var_os("SKILLPROF_BLESS").is_some() {
            let blessed = format!("{}{table}{}", &readme[..start], &readme[end..]);
            std::fs::write(&path, blessed).unwrap();
        } else {
            assert_eq!(
                readme[start..end],
                table,
                "docs/columns.md is stale: run `SKILLPROF_BLESS=1 cargo test -p skillprof --lib record`"
            );
        }
    }

    #[test]
    fn rows_keep_order_and_format() {
        let mut row = Row::default();
        row.int("a_kb", -5)
            .float("b_ms", 1.23456)
            .text("c", "x")
            .missing("d");
        assert_eq!(row.names().collect::<Vec<_>>(), ["a_kb", "b_ms", "c", "d"]);
        assert_eq!(row.values().collect::<Vec<_>>(), ["-5", "1.235", "x", ""]);
        assert_eq!(row.get("b_ms"), Some("1.235"));
    }

    #[test]
    fn columns_are_looked_up_by_name() {
        assert!(documentation("took_ms").is_some());
        assert!(documentation("nonsense").is_none());
    }
}
