//! A probe session: the BPF object loaded and filtered to one host process, every probe
//! attached by its plan, per-entry attribution, the stop timeline, and the profiler's own cost.

use std::{
    collections::HashMap,
    fs,
    path::PathBuf,
    sync::{Arc, Mutex},
};

use anyhow::{Context as _, Result, ensure};
use aya::{
    Ebpf,
    maps::{Array, HashMap as BpfHashMap, MapData, PerCpuArray, RingBuf},
    programs::TracePoint,
};
use aya_log::EbpfLogger;
use skillprof_common::{Counters, RECLAIM_KSWAPD, ReclaimState, StopState};

use super::{
    bpf_stats::{self, StatsGuard},
    cost_model::CostModel,
    events::EventStream,
    host_symbol,
    ledger::HostLedger,
    majflt::MajorFaults,
    markers::{self, Attribution, SkillNames},
    metrics::combine,
    object,
    plan::{Allowed, Attacher, PROBES},
    pool::{self, PoolFunctions},
    privileges,
    publish::{self, PublishClock},
    stacks::{EntryStacks, Stacks},
    stop::StopTimeline,
    task_layout,
    time::{self, TimeMaps, TimeOptions},
};
use crate::record::probes::{
    Counted, Mechanism, Modelled, Per, Probe, ProbeCosts, ProbeMetrics, ProbeMode, ProbeStatus,
    ProgramCost, StatsSource, Tracefs,
};
use crate::record::time::{EntryTime, TimeProfile};

// The BPF side uses x86_64 syscall numbers and `__x64_sys_*` function names.
#[cfg(not(target_arch = "x86_64"))]
compile_error!("skillprof's probes are written for x86_64 (syscall numbers, pt_regs, __x64_sys_*)");
const _: () = {
    use skillprof_common::*;
    assert!(NR_MMAP as i64 == libc::SYS_mmap);
    assert!(NR_MUNMAP as i64 == libc::SYS_munmap);
    assert!(NR_MREMAP as i64 == libc::SYS_mremap);
    assert!(NR_MPROTECT as i64 == libc::SYS_mprotect);
    assert!(NR_MADVISE as i64 == libc::SYS_madvise);
    assert!(NR_BRK as i64 == libc::SYS_brk);
    assert!(NR_EXIT_GROUP as i64 == libc::SYS_exit_group);
    assert!(NR_GETRUSAGE as i64 == libc::SYS_getrusage);
};

/// How to run the probes.
#[derive(Clone, Debug, Default)]
pub struct ProbeOptions {
    /// Stream raw events to this events.csv.
    pub events: Option<PathBuf>,
    /// Attach only each plan's last mechanism (the most portable one).
    pub force_fallback: bool,
    /// Entries the run can have (plan length + 1); `begin_entry` refuses indexes beyond.
    pub max_entries: u32,
    /// Only these mechanisms (`None`: all). Combined with `force_fallback`, the fallback wins.
    pub mechanisms: Option<Vec<Mechanism>>,
    /// Turn the kernel's BPF stats on, to measure each program's runs and run time.
    pub self_cost: bool,
    /// Walk the host's user stack at each fault and address-space syscall (`--stacks`).
    pub stacks: bool,
    /// Without `self_cost`: estimate the cost from this cost model (`probe_cost`'s figures).
    pub cost_model: Option<PathBuf>,
    /// Which of the programs that every process's syscalls and page faults run through
    /// attach (exact: both; calls: the syscalls'). Exact is implied by `stacks` and `events`.
    pub mode: ProbeMode,
    /// Why `mode`, where skillprof chose it by the kernel (a lab run no flag decides).
    pub mode_why: Option<String>,
    /// Where the memory calls are traced, also time each memory call (`--syscall-latency`):
    /// a program at each call's entry, and two clock reads.
    pub syscall_latency: bool,
    /// Leave the host's markers unprobed (`--no-markers`): entries only.
    pub no_markers: bool,
    /// Profile the host's time: CPU samples and time off a CPU (`None`: `--no-profile`).
    pub time: Option<TimeOptions>,
    /// The host's skills directory, whose component files name its wasm functions.
    pub skills_dir: Option<PathBuf>,
}

/// Which attach mechanisms a session may use: the same flags for `skillprof probes` and
/// `skillprof run`, so that a kernel's fallback paths can be exercised either way.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct MechanismArgs {
    /// Attach only each plan's last mechanism (the most widely available: classic
    /// tracepoints, or for syscalls the raw ones), to compare with what the preferred
    /// mechanisms count.
    #[arg(long, env = "SKILLPROF_FORCE_FALLBACK")]
    pub force_fallback: bool,
    /// Use only these mechanisms (comma-separated: fentry, kprobe, tp_btf, tracepoint).
    #[arg(
        long,
        value_name = "LIST",
        env = "SKILLPROF_MECHANISMS",
        value_delimiter = ','
    )]
    pub mechanism: Vec<String>,
    /// Measure the probes' own cost: each BPF program's runs and CPU time, from the kernel's
    /// BPF stats. Off by default, because the stats add two clock reads to every program
    /// run, on every process the programs see: more than most of the programs cost.
    #[arg(long, env = "SKILLPROF_SELF_COST")]
    pub self_cost: bool,
    /// Without --self-cost, estimate the probes' cost as the events they counted times the
    /// per-event cost `cargo bench -p skillprof --bench probe_cost` measured on this machine
    /// and saved here.
    #[arg(
        long,
        value_name = "FILE",
        env = "SKILLPROF_COST_MODEL",
        default_value = super::cost_model::DEFAULT_PATH
    )]
    pub cost_model: PathBuf,
}

impl MechanismArgs {
    pub fn options(&self, events: Option<PathBuf>, max_entries: u32) -> Result<ProbeOptions> {
        let mechanisms = match self.mechanism.as_slice() {
            [] => None,
            names => Some(
                names
                    .iter()
                    .map(|m| Mechanism::parse(m.trim()))
                    .collect::<Result<_>>()?,
            ),
        };
        Ok(ProbeOptions {
            stacks: false,
            events,
            force_fallback: self.force_fallback,
            max_entries,
            mechanisms,
            self_cost: self.self_cost,
            cost_model: (!self.self_cost).then(|| self.cost_model.clone()),
            mode: ProbeMode::HostOnly,
            mode_why: None,
            syscall_latency: false,
            no_markers: false,
            time: None,
            skills_dir: None,
        })
    }
}

impl ProbeOptions {
    /// The mode that runs: the one asked for, or exact where the per-call events or the
    /// stacks need it (they are taken at each fault too).
    pub fn mode(&self) -> ProbeMode {
        match self.stacks || self.events.is_some() {
            true => ProbeMode::Exact,
            false => self.mode,
        }
    }

    fn allowed(&self) -> Allowed {
        if self.force_fallback {
            Allowed::FallbackOnly
        } else if let Some(only) = &self.mechanisms {
            Allowed::Only(only.clone())
        } else {
            Allowed::All
        }
    }
}

/// The `rss_stat` program runs on every RSS counter change of every process on the machine,
/// a large share of what any process's page fault pays while probes are attached
/// (probe_cost), and it is needed only to bound the host's teardown. So it is attached at the
/// start, to prove it can be and to report how, unloaded again, and attached for good by
/// [`ProbeSession::arm_stop`] just before the host is stopped.
const DEFERRED: &str = "tp_rss_stat";

/// How often an entry's skill rows are read again while its counters still move or the rows
/// do not sum to them yet; past it, the rows are from the last read, off by what the host did
/// in those milliseconds.
const CONSISTENT_READS: usize = 8;

/// Where the deferred `rss_stat` program stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RssStat {
    /// It did not attach (or not as a classic tracepoint): nothing to defer.
    Absent,
    Deferred,
    Armed,
}

/// The loaded probes of one host process. Dropping it detaches everything, stops the event
/// stream and turns BPF stats back off.
pub struct ProbeSession {
    // Field order is drop order: the stream drains before the programs go.
    events: Option<Mutex<EventStream>>,
    entry_map: Mutex<Array<MapData, u32>>,
    counters: PerCpuArray<MapData, Counters>,
    stop: Array<MapData, StopState>,
    ebpf: Ebpf,
    majflt: Option<Mutex<MajorFaults>>,
    /// Major-fault counter value at each `begin_entry`.
    majflt_marks: Mutex<HashMap<u32, u64>>,
    /// Skill attribution, when the host keeps a ledger.
    markers: Option<Mutex<Attribution>>,
    /// The instants of the host's code publishes, when the host has wasmtime's function.
    publishes: Option<Mutex<PublishClock>>,
    /// `--stacks`: the stack maps and the host's symboliser.
    stacks: Option<Mutex<Stacks>>,
    /// The time profile's maps, when its programs run.
    time: Option<Mutex<TimeMaps>>,
    stats: Option<StatsGuard>,
    stats_error: Option<String>,
    /// With stats: whether the empty program runs beside the others, or why not.
    floor: Option<Result<(), String>>,
    /// The cost model, or why none applies (`None`: not asked for).
    model: Option<Result<CostModel, String>>,
    /// aya-log records from the programs (rare paths only, e.g. a full map).
    logger: Option<Mutex<EbpfLogger<Diagnostics>>>,
    diagnostics: Diagnostics,
    statuses: Vec<ProbeStatus>,
    tracefs: Option<Tracefs>,
    tgid: u32,
    mode: ProbeMode,
    mode_why: Option<String>,
    max_entries: u32,
    current: Mutex<u32>,
    rss_stat: RssStat,
}

/// The host's functions the uprobes follow, in the order [`host_symbol::find_each`] returns
/// them: the marker, the pooling allocator's ([`PoolFunctions`]'s four), and wasmtime's code
/// publish. One list, so that `probes --host-bin` checks a binary for exactly what a run looks
/// for.
const HOST_FUNCTIONS: [fn(&str) -> bool; 6] = [
    markers::is_marker,
    pool::is_batching_flag,
    pool::is_decommit_pages,
    pool::is_rustix_ioctl,
    pool::is_wasmtime_pagemap,
    publish::is_code_publish,
];

/// The host functions of [`HOST_FUNCTIONS`] in the executable `exe` (`binary` in messages):
/// the marker, the pooling allocator's and the code publish, or why there is none of each.
pub(super) fn find_host_functions(
    exe: &std::path::Path,
    binary: String,
) -> (
    Result<host_symbol::HostSymbol, String>,
    PoolFunctions,
    Result<Option<host_symbol::HostSymbol>, String>,
) {
    let (marker, pool, publish) = match host_symbol::find_each(exe, HOST_FUNCTIONS) {
        Ok([marker, flag, decommit, ioctl, pagemap, publish]) => (
            marker.ok_or_else(|| markers::missing(&binary)),
            Ok([flag, decommit, ioctl, pagemap]),
            Ok(publish),
        ),
        Err(why) => (Err(why.clone()), Err(why.clone()), Err(why)),
    };
    let pool = PoolFunctions {
        found: pool,
        binary,
    };
    (marker, pool, publish)
}

/// The host's functions the probes follow, found in one pass over its symbol table: the
/// marker (whose uprobe only streams the marks, with `--events`: the rows are the ledger's),
/// the pooling allocator's, and wasmtime's code publish.
fn host_functions(
    tgid: u32,
    options: &ProbeOptions,
    ledger: &Result<HostLedger, String>,
) -> (
    Result<host_symbol::HostSymbol, String>,
    PoolFunctions,
    Result<Option<host_symbol::HostSymbol>, String>,
) {
    let (marker, pool, publish) =
        find_host_functions(&host_symbol::running_exe(tgid), host_symbol::binary(tgid));
    let marker = marker.and_then(|marker| match (options.events.is_some(), ledger) {
        (true, Ok(_)) => Ok(marker),
        (false, _) => Err("only with --events".to_owned()),
        (true, Err(why)) => Err(why.clone()),
    });
    (marker, pool, publish)
}

/// The major-fault perf counter's status: on every host thread in exact mode; the kernel's
/// own majflt, read at the boundaries, says the same in the other modes, where a perf counter
/// on every host thread would add to each of their context switches.
fn major_faults_status(majflt: &Option<Result<MajorFaults>>, tgid: u32) -> ProbeStatus {
    match majflt {
        Some(opened) => ProbeStatus::single(
            Probe::MajorFaults,
            Mechanism::PerfCounter,
            &opened
                .as_ref()
                .map(|m| {
                    format!(
                        "PERF_COUNT_SW_PAGE_FAULTS_MAJ on {} threads of {tgid} (inherited)",
                        m.threads()
                    )
                })
                .map_err(|e| format!("{e:#}")),
            &[],
        ),
        None => ProbeStatus::left_to_exact_mode(
            Probe::MajorFaults,
            &[Mechanism::PerfCounter],
            "exact mode only (--probes exact): the other modes read the kernel's own \
             count of the host's major faults (majflt) at each boundary, and a perf \
             counter on every host thread would add to each of their context switches",
        ),
    }
}

impl ProbeSession {
    /// Loads the object filtered to `tgid`, attaches every probe by its plan and, with
    /// `self_cost`, enables BPF stats (off again when the session drops). Only a failure to
    /// load at all is an error
    /// (including missing privileges, with the fix); per-probe failures are in `statuses`.
    pub fn start(tgid: u32, options: &ProbeOptions) -> Result<ProbeSession> {
        privileges::require_bpf_for_run()?;
        ensure!(
            fs::metadata(format!("/proc/{tgid}")).is_ok(),
            "no process {tgid} to probe"
        );
        let max_entries = options.max_entries.max(1);
        // Stats first, so the first runs of every program are counted.
        let (stats, stats_error) = match options.self_cost.then(StatsGuard::enable) {
            Some(Ok(guard)) => (Some(guard), None),
            Some(Err(e)) => (None, Some(e)),
            None => (None, None),
        };
        let model = match &options.cost_model {
            Some(path) => Some(CostModel::load(
                path,
                &crate::ground::machine::Machine::read()?,
            )),
            None => None,
        };
        // The host's ledger first: where the memory calls are traced, whether their programs
        // (and the faults') attribute to skills is a load-time constant, and they do where
        // the host marks.
        let mode = options.mode();
        let calls = mode.traces_calls();
        let ledger = match options.no_markers {
            true => Err("off (--no-markers): entries only, no per-skill rows".to_owned()),
            false => HostLedger::open(tgid),
        };
        let (marker, pool, publish) = host_functions(tgid, options, &ledger);
        // The programs read a thread's mark slot where the host keeps one: the traced
        // memory calls and the time profile's samples and switches.
        let mark_slots = match (calls || options.time.is_some(), &ledger) {
            (true, Ok(ledger)) => Some(ledger.mark_slot().and_then(|mark_slot| {
                Ok(object::MarkSlots {
                    task_fsbase: task_layout::fsbase_offset()?,
                    mark_slot,
                    in_call: ledger.slot_in_call(),
                })
            })),
            _ => None,
        };
        let time_settings = match &options.time {
            // The switch programs read the switched tasks' ids (the load sets the offsets).
            Some(time) => Some(
                task_layout::ids_offsets()
                    .map(|_| object::TimeSettings {
                        off_cpu_stacks: time.off_cpu.stacks(),
                        wait_walk_ns: time::WAIT_WALK.as_nanos() as u64,
                        wait_walk_idle_ns: time::WAIT_WALK_IDLE.as_nanos() as u64,
                        sched_info: task_layout::sched_info().ok(),
                        timeline: time.timeline,
                    })
                    .map_err(|why| anyhow::anyhow!("where the kernel keeps a task's ids: {why}"))?,
            ),
            None => None,
        };
        let mut ebpf = object::load(&object::Settings {
            tgid,
            max_entries,
            stream_events: options.events.is_some(),
            mark_slots: mark_slots
                .as_ref()
                .and_then(|slots| slots.as_ref().ok().copied()),
            attribute_calls: calls,
            time: time_settings,
            syscall_latency: calls && options.syscall_latency,
            stacks: options.stacks,
        })?;
        seed_kswapd(&mut ebpf)?;
        seed_brk(&mut ebpf, tgid)?;
        let floor = stats
            .is_some()
            .then(|| bpf_stats::attach_floor(&mut ebpf).map_err(|e| format!("{e:#}")));
        let diagnostics = Diagnostics::default();
        let logger = EbpfLogger::init_with_logger(&mut ebpf, diagnostics.clone())
            .context("reading the BPF programs' log ring (aya-log)")?;

        let mut attacher = Attacher::default();
        let allowed = options.allowed();
        let mut statuses: Vec<ProbeStatus> = Vec::new();
        for probe in PROBES {
            let status = if !mode.runs(probe.probe) {
                ProbeStatus::exact_mode_only(probe)
            } else if probe.probe == Probe::SyscallLatency {
                latency_status(&mut attacher, &mut ebpf, probe, &statuses, options)
            } else {
                attacher.attach(&mut ebpf, probe, &allowed)
            };
            statuses.push(status);
        }
        let rss_stat = defer_rss_stat(&mut ebpf, &mut statuses)?;
        let uprobe = marker.and_then(|marker| {
            markers::attach(&mut ebpf, tgid, &marker).map_err(|e| format!("{e:#}"))
        });
        statuses.push(markers::status(
            ledger.as_ref().map_err(String::clone),
            mark_slots
                .as_ref()
                .filter(|_| calls)
                .map(|slots| slots.as_ref().map(|_| ())),
            &uprobe,
        ));
        statuses.push(pool.attach_decommits(&mut ebpf, tgid));
        statuses.push(pool.attach_pagemap_scan(&mut ebpf, tgid));
        let published = publish::attach(&mut ebpf, tgid, &publish, &pool.binary);
        let publishes = match published.attached {
            true => Some(Mutex::new(PublishClock::take(&mut ebpf)?)),
            false => None,
        };
        statuses.push(published);
        let time = match &options.time {
            Some(time_options) => {
                let time_statuses = time::attach(&mut ebpf, time_options);
                let maps = TimeMaps::take(
                    &mut ebpf,
                    tgid,
                    time_options,
                    &time_statuses,
                    options.skills_dir.as_deref(),
                )?;
                let live = time_statuses.iter().any(|s| s.attached);
                statuses.extend(time_statuses);
                live.then(|| Mutex::new(maps))
            }
            None => None,
        };
        let attributed = calls && matches!(mark_slots, Some(Ok(_)));
        let markers = match ledger {
            Ok(ledger) => Some(Mutex::new(Attribution::new(
                ledger,
                attributed.then_some(&mut ebpf),
            )?)),
            Err(_) => None,
        };
        let stacks = if options.stacks {
            Some(Mutex::new(Stacks::take(
                &mut ebpf,
                tgid,
                options.skills_dir.as_deref(),
            )?))
        } else {
            None
        };

        // The kernel's own majflt, read at the boundaries, says the same without the fault
        // programs; a perf counter on every host thread adds to each of their switches.
        let majflt = mode
            .runs(Probe::MajorFaults)
            .then(|| MajorFaults::open(tgid));
        statuses.push(major_faults_status(&majflt, tgid));

        let entry_map = Array::try_from(take(&mut ebpf, object::ENTRY)?)?;
        let counters = PerCpuArray::try_from(take(&mut ebpf, object::COUNTERS)?)?;
        let stop = Array::try_from(take(&mut ebpf, object::STOP)?)?;
        let events = match &options.events {
            Some(path) => {
                let ring = RingBuf::try_from(take(&mut ebpf, object::EVENTS)?)?;
                Some(Mutex::new(EventStream::start(ring, path)?))
            }
            None => None,
        };
        let session = ProbeSession {
            events,
            entry_map: Mutex::new(entry_map),
            counters,
            stop,
            ebpf,
            majflt: majflt.and_then(Result::ok).map(Mutex::new),
            majflt_marks: Mutex::new(HashMap::new()),
            stats,
            stats_error,
            floor,
            model,
            logger: Some(Mutex::new(logger)),
            diagnostics,
            markers,
            publishes,
            stacks,
            time,
            statuses,
            tracefs: attacher.tracefs(),
            tgid,
            mode,
            mode_why: options.mode_why.clone(),
            max_entries,
            current: Mutex::new(0),
            rss_stat,
        };
        session.begin_entry(0)?;
        Ok(session)
    }

    /// Attaches the deferred `rss_stat` program for the host's shutdown: call it just before
    /// the host is signalled. Its counters before the teardown start from the host's RSS in
    /// /proc (the program updates them with every change the host makes until it exits).
    pub fn arm_stop(&mut self) -> Result<()> {
        if self.rss_stat != RssStat::Deferred {
            return Ok(());
        }
        let status = procfs::process::Process::new(self.tgid as i32)
            .and_then(|process| process.status())
            .with_context(|| format!("reading /proc/{}/status", self.tgid))?;
        let bytes = |kb: Option<u64>| kb.unwrap_or(0) * 1024;
        // Indexed by the kernel's MM_FILEPAGES, MM_ANONPAGES, MM_SWAPENTS, MM_SHMEMPAGES.
        let now = [
            bytes(status.rssfile),
            bytes(status.rssanon),
            bytes(status.vmswap),
            bytes(status.rssshmem),
        ];
        let mut state = self.stop.get(&0, 0).context("reading the stop state")?;
        for (before, now) in state.rss_before.iter_mut().zip(now) {
            if *before == 0 {
                *before = now;
            }
        }
        self.stop
            .set(0, &state, 0)
            .context("seeding the stop state")?;
        let program: &mut TracePoint = self
            .ebpf
            .program_mut(DEFERRED)
            .context("the BPF object has no rss_stat program")?
            .try_into()?;
        program.load().context("loading tp_rss_stat")?;
        program
            .attach("kmem", "rss_stat")
            .context("attaching kmem:rss_stat")?;
        self.rss_stat = RssStat::Armed;
        Ok(())
    }

    /// Per probe: attached or not, by which mechanism, and why not.
    pub fn statuses(&self) -> &[ProbeStatus] {
        &self.statuses
    }

    /// What was done about tracefs, if a probe needed it.
    pub fn tracefs(&self) -> Option<Tracefs> {
        self.tracefs
    }

    pub fn tgid(&self) -> u32 {
        self.tgid
    }

    /// Which programs run.
    pub fn mode(&self) -> ProbeMode {
        self.mode
    }

    /// Why the mode, where skillprof chose it by the kernel.
    pub fn mode_why(&self) -> Option<&str> {
        self.mode_why.as_deref()
    }

    /// From now on, events are attributed to entry `index`.
    pub fn begin_entry(&self, index: u32) -> Result<()> {
        ensure!(
            index < self.max_entries,
            "entry {index} is beyond the {} entries the probes were loaded for \
             (ProbeOptions::max_entries)",
            self.max_entries
        );
        // Mark the major-fault counter first: faults after this instant belong to `index`.
        if let Some(majflt) = &self.majflt {
            let value = majflt.lock().unwrap().read()?;
            self.majflt_marks.lock().unwrap().insert(index, value);
        }
        if let Some(markers) = &self.markers {
            markers.lock().unwrap().begin_entry(index)?;
        }
        if let Some(time) = &self.time {
            time.lock().unwrap().begin_entry()?;
        }
        self.entry_map
            .lock()
            .unwrap()
            .set(0, &index, 0)
            .context("writing the entry index into the BPF map")?;
        *self.current.lock().unwrap() = index;
        Ok(())
    }

    /// What the BPF programs logged (aya-log), oldest first: things that cost counts, such as
    /// a full map. Empty in a healthy run.
    pub fn diagnostics(&self) -> Vec<String> {
        if let Some(logger) = &self.logger {
            logger.lock().unwrap().flush();
        }
        self.diagnostics.0.lock().unwrap().clone()
    }

    /// Everything attributed to entry `index`, summed over CPUs.
    pub fn entry(&self, index: u32) -> Result<ProbeMetrics> {
        ensure!(index < self.max_entries, "entry {index} was never begun");
        let read_counters = || -> Result<Counters> {
            let per_cpu = self
                .counters
                .get(&index, 0)
                .context("reading the per-entry counters")?;
            Ok(combine(per_cpu.iter()))
        };
        let mut counters = read_counters()?;
        // The host goes on between entries, and a program adds each event to the entry's
        // counters and then to its skill row; it can be preempted between the two. So the rows
        // are read between two reads of the counters, again until the counters stood still
        // and the rows sum to them, a moment apart.
        let mut skills = None;
        let mut marks = None;
        if let Some(markers) = &self.markers {
            for read in 0..CONSISTENT_READS {
                if read > 0 {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                let (rows, read_marks) = markers.lock().unwrap().entry(index)?;
                let after = read_counters()?;
                let settled = after == counters && markers::rows_sum_to(&rows, &after);
                counters = after;
                skills = Some(rows);
                marks = Some(read_marks);
                if settled {
                    break;
                }
            }
        }
        // The marks are the ledger's: the programs count none.
        if let Some(marks) = marks {
            counters.marks.hits = marks.hits;
            counters.marks.overflow += marks.overflow;
        }
        let attached = self
            .statuses
            .iter()
            .filter(|s| s.attached)
            .map(|s| (s.probe, s.mechanism))
            .collect();
        let published_at = match &self.publishes {
            Some(clock) => clock.lock().unwrap().since_last()?,
            None => Vec::new(),
        };
        Ok(ProbeMetrics {
            counters,
            attached,
            majflt_perf: self.majflt_delta(index)?,
            streaming: self.events.is_some(),
            skills,
            published_at,
            published_during: Default::default(),
        })
    }

    /// With `--stacks`: entry `index`'s stacks, symbolised now (the host must still run), and
    /// then cleared from the maps: call it once per entry, before the next one begins, with
    /// the entry's metrics as [`ProbeSession::entry`] read them.
    pub fn stacks(&self, index: u32, metrics: &ProbeMetrics) -> Result<Option<EntryStacks>> {
        let Some(stacks) = &self.stacks else {
            return Ok(None);
        };
        let names = match &self.markers {
            Some(markers) => markers.lock().unwrap().names(),
            None => SkillNames::default(),
        };
        stacks
            .lock()
            .unwrap()
            .take_entry(index, &names, metrics.counters.stacks.lost)
            .map(Some)
    }

    /// Entry `index`'s time profile, its stacks named now (the host must still run), and then
    /// cleared from the maps: call it once per entry, before the next one begins, with the
    /// entry's metrics as [`ProbeSession::entry`] read them. `None` when no time program runs.
    pub fn time(
        &self,
        index: u32,
        metrics: &ProbeMetrics,
    ) -> Result<Option<(TimeProfile, EntryTime)>> {
        let Some(time) = &self.time else {
            return Ok(None);
        };
        let names = match &self.markers {
            Some(markers) => markers.lock().unwrap().names(),
            None => SkillNames::default(),
        };
        let rows = metrics.skills.as_deref().unwrap_or_default();
        time.lock()
            .unwrap()
            .take_entry(index, &names, &metrics.counters.time, rows)
            .map(Some)
    }

    /// The timeline's samples since the last call (with [`TimeOptions::timeline`]), their
    /// functions named now.
    pub fn timeline(&self) -> Result<Vec<crate::record::time::TimelineSample>> {
        let Some(time) = &self.time else {
            return Ok(Vec::new());
        };
        let names = match &self.markers {
            Some(markers) => markers.lock().unwrap().names(),
            None => SkillNames::default(),
        };
        time.lock().unwrap().timeline(&names)
    }

    /// The profile clock's samples of each live host thread against the kernel's count of
    /// its CPU time; `None` without the clock.
    pub fn profile_check(&self) -> Option<crate::record::time::ProfileCheck> {
        self.time.as_ref()?.lock().unwrap().check()
    }

    /// Major faults between `begin_entry(index)` and the next entry's begin (or now).
    fn majflt_delta(&self, index: u32) -> Result<Option<u64>> {
        let Some(majflt) = &self.majflt else {
            return Ok(None);
        };
        let marks = self.majflt_marks.lock().unwrap();
        let Some(&start) = marks.get(&index) else {
            return Ok(None);
        };
        let next = marks
            .iter()
            .filter(|&(&i, _)| i > index)
            .min_by_key(|&(&i, _)| i);
        let end = match next {
            Some((_, &v)) => v,
            None => majflt.lock().unwrap().read()?,
        };
        Ok(Some(end.saturating_sub(start)))
    }

    /// Kernel-side instants of the host's shutdown (CLOCK_MONOTONIC ns).
    pub fn stop_timeline(&self) -> Result<StopTimeline> {
        let state = self.stop.get(&0, 0).context("reading the STOP map")?;
        let mut timeline = StopTimeline::from_state(&state);
        let attached = |probe: Probe| self.statuses.iter().any(|s| s.probe == probe && s.attached);
        timeline.exit_probes_attached = attached(Probe::Exit);
        timeline.syscall_probes_attached = attached(Probe::Syscalls);
        timeline.exit_mmap_attached = attached(Probe::ExitMmap);
        timeline.rss_stat_attached = attached(Probe::RssStat);
        Ok(timeline)
    }

    /// Per program: runs, total ns, ns/run (BPF stats, only with `self_cost`: without them
    /// the kernel counts nothing), and the events streamed and lost.
    pub fn costs(&self) -> Result<ProbeCosts> {
        let mut programs = Vec::new();
        let measured = self.stats.is_some();
        for status in self.statuses.iter().filter(|s| measured && s.attached) {
            for name in &status.programs {
                if name == DEFERRED && self.rss_stat == RssStat::Deferred {
                    continue;
                }
                let Some(program) = self.ebpf.program(name) else {
                    continue;
                };
                let info = program
                    .info()
                    .with_context(|| format!("reading the info of program {name}"))?;
                let runs = info.run_count();
                let run_ns = info.run_time().as_nanos() as u64;
                programs.push(ProgramCost {
                    probe: status.probe,
                    program: name.clone(),
                    mechanism: status.mechanism,
                    runs,
                    run_ns,
                    ns_per_run: (runs > 0).then(|| run_ns as f64 / runs as f64),
                });
            }
        }
        let per_entry = (0..self.max_entries)
            .map(|index| Ok(combine(self.counters.get(&index, 0)?.iter())))
            .collect::<Result<Vec<_>>>()?;
        let mut total = combine(&per_entry);
        // The marks are the ledger's: the programs count none.
        if let Some(markers) = &self.markers {
            total.marks.hits = markers.lock().unwrap().marks_since_attach();
        }
        let (modelled, model_error) = match (&self.stats, &self.model) {
            (None, Some(Ok(model))) => match model.apply(&self.counted(&total)) {
                Ok(modelled) => (Some(modelled), None),
                Err(why) => (None, Some(why)),
            },
            (None, Some(Err(why))) => (None, Some(why.clone())),
            _ => (None, None),
        };
        Ok(ProbeCosts {
            stats: self.stats.as_ref().map(StatsGuard::source),
            stats_error: self.stats_error.clone(),
            total_runs: programs.iter().map(|p| p.runs).sum(),
            total_run_ns: programs.iter().map(|p| p.run_ns).sum(),
            programs,
            floor: match &self.floor {
                Some(Ok(())) => Some(bpf_stats::floor(&self.ebpf)?),
                _ => None,
            },
            floor_error: self.floor.clone().and_then(Result::err),
            events_streamed: self.events.is_some(),
            events_sent: total.events.sent,
            events_lost: total.events.lost,
            modelled,
            model_error,
            events_written: self
                .events
                .as_ref()
                .map(|stream| stream.lock().unwrap().written()),
            diagnostics: self.diagnostics(),
        })
    }

    /// What the cost model multiplies: the events of the probes it has figures for, by the
    /// mechanism each attached with.
    fn counted(&self, total: &Counters) -> Vec<Counted> {
        let calls = total.syscalls.iter().map(|c| c.calls).sum();
        let faults = total.faults.user + total.faults.kernel;
        [
            (Probe::Syscalls, Per::Syscall, calls),
            (Probe::PageFaults, Per::Fault, faults),
            (Probe::Markers, Per::Mark, total.marks.hits),
        ]
        .into_iter()
        .filter_map(|(probe, per, events)| {
            let status = self
                .statuses
                .iter()
                .find(|s| s.probe == probe && s.attached)?;
            Some(Counted {
                probe,
                mechanism: status.mechanism,
                per,
                events,
            })
        })
        .collect()
    }

    /// Stops the event stream: drains the ring into events.csv and closes it. Returns the
    /// number of events written (`None` without `--events`). Dropping the session does the
    /// same; this is for callers that want the count or the error.
    pub fn finish_events(&self) -> Result<Option<u64>> {
        match &self.events {
            Some(stream) => Ok(Some(stream.lock().unwrap().finish()?)),
            None => Ok(None),
        }
    }
}

/// How a session's own cost is known.
pub enum CostMode<'a> {
    /// BPF stats counted every program run and its CPU time.
    Measured(&'a StatsSource),
    /// Events counted × per-event cost measured by `probe_cost` on this machine.
    Modelled(&'a Modelled),
    /// Neither; why, in words every output shares.
    Unknown(String),
}

/// Collects aya-log records.
#[derive(Clone, Default)]
struct Diagnostics(Arc<Mutex<Vec<String>>>);

impl log::Log for Diagnostics {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        self.0
            .lock()
            .unwrap()
            .push(format!("{}: {}", record.level(), record.args()));
    }

    fn flush(&self) {}
}

impl ProbeCosts {
    /// How the programs' own cost was measured or modelled or, in words every output
    /// shares, why it was neither.
    pub fn mode(&self) -> CostMode<'_> {
        if let Some(source) = &self.stats {
            return CostMode::Measured(source);
        }
        if let Some(modelled) = &self.modelled {
            return CostMode::Modelled(modelled);
        }
        let mut why = match &self.stats_error {
            Some(why) => format!("--self-cost could not turn BPF stats on ({why})"),
            None => "BPF stats are off unless --self-cost: they add two clock reads to every \
                     program run"
                .to_owned(),
        };
        if let Some(no_model) = &self.model_error {
            why.push_str("; ");
            why.push_str(no_model);
        }
        CostMode::Unknown(why)
    }
}

/// The latency probe: attached only when asked for, and then by the mechanism the syscalls
/// probe attached with, whose exit programs read the entry instants it keeps.
fn latency_status(
    attacher: &mut Attacher,
    ebpf: &mut Ebpf,
    probe: &super::plan::ProbePlan,
    statuses: &[ProbeStatus],
    options: &ProbeOptions,
) -> ProbeStatus {
    if !options.syscall_latency {
        return ProbeStatus::left_unasked(probe, "--syscall-latency");
    }
    match statuses
        .iter()
        .find(|s| s.probe == Probe::Syscalls && s.attached)
    {
        Some(syscalls) => attacher.attach(ebpf, probe, &Allowed::Only(vec![syscalls.mechanism])),
        None => ProbeStatus::single(
            probe.probe,
            probe.plan[0].mechanism,
            &Err("the syscalls probe did not attach: there is no call to time".to_owned()),
            &[],
        ),
    }
}

/// Unloads the `rss_stat` program again if it attached (see [`DEFERRED`]), and says so in
/// its status.
fn defer_rss_stat(ebpf: &mut Ebpf, statuses: &mut [ProbeStatus]) -> Result<RssStat> {
    let Some(status) = statuses
        .iter_mut()
        .find(|s| s.attached && s.programs.iter().any(|p| p == DEFERRED))
    else {
        return Ok(RssStat::Absent);
    };
    let program: &mut TracePoint = ebpf
        .program_mut(DEFERRED)
        .context("the BPF object has no rss_stat program")?
        .try_into()?;
    program
        .unload()
        .context("unloading tp_rss_stat until the stop")?;
    status
        .detail
        .push_str(" (armed only for the stop: it runs on every RSS change of every process)");
    Ok(RssStat::Deferred)
}

pub(super) fn take(ebpf: &mut Ebpf, name: &str) -> Result<aya::maps::Map> {
    ebpf.take_map(name)
        .with_context(|| format!("map {name} is not in the BPF object"))
}

/// Marks the kswapd threads as such in `RECLAIM`, so LRU shrinking by a kswapd that was
/// already awake at attach time is classified (kswapd_wake marks them too).
fn seed_kswapd(ebpf: &mut Ebpf) -> Result<()> {
    let map = ebpf
        .map_mut(object::RECLAIM)
        .with_context(|| format!("map {} is not in the BPF object", object::RECLAIM))?;
    let mut reclaim: BpfHashMap<_, u32, ReclaimState> = BpfHashMap::try_from(map)?;
    for entry in fs::read_dir("/proc")? {
        let Some(pid) = entry?
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(comm) = fs::read_to_string(format!("/proc/{pid}/comm")) else {
            continue;
        };
        // kswapd0, kswapd1, ...: kernel threads, children of kthreadd (pid 2).
        if comm.starts_with("kswapd") && parent(pid) == Some(2) {
            let state = ReclaimState {
                kinds: RECLAIM_KSWAPD,
                ..ReclaimState::default()
            };
            reclaim.insert(&pid, &state, 0)?;
        }
    }
    Ok(())
}

/// Sets the host's current program break in `BRK_LAST`, so its first brk after the start is
/// measured too: the end of the `[heap]` mapping (glibc moves the break in whole pages), or
/// the start of the heap if it has none yet.
fn seed_brk(ebpf: &mut Ebpf, tgid: u32) -> Result<()> {
    let maps = fs::read_to_string(format!("/proc/{tgid}/maps")).unwrap_or_default();
    let heap_end = maps
        .lines()
        .find(|line| line.ends_with("[heap]"))
        .and_then(|line| line.split(['-', ' ']).nth(1))
        .and_then(|end| u64::from_str_radix(end, 16).ok());
    let brk = heap_end.or_else(|| {
        // /proc/PID/stat field 47: start_brk.
        let stat = fs::read_to_string(format!("/proc/{tgid}/stat")).ok()?;
        stat.rsplit_once(") ")?
            .1
            .split(' ')
            .nth(47 - 3)?
            .parse()
            .ok()
    });
    if let Some(brk) = brk {
        let map = ebpf
            .map_mut(object::BRK_LAST)
            .with_context(|| format!("map {} is not in the BPF object", object::BRK_LAST))?;
        Array::<_, u64>::try_from(map)?.set(0, &brk, 0)?;
    }
    Ok(())
}

fn parent(pid: u32) -> Option<u32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.split(' ').nth(1)?.parse().ok()
}

// The runner may move the session into a thread or share it behind an Arc.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<ProbeSession>();
};
