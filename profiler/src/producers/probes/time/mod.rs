//! The time profile's live side: the programs attached (a profile clock per CPU for the
//! samples on a CPU, the scheduler's switches and wakeups for the time off one), and each
//! entry's counts read out of the kernel, their stacks named while the host runs, and
//! summed up ([`TimeProfile`], [`EntryTime`]). What the code was doing and why a thread
//! waited are read from the named frames (`classify`).

mod classify;
mod summary;

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context as _, Result, bail};
use aya::{
    Btf, Ebpf,
    maps::{Array, HashMap as BpfHashMap, MapData, RingBuf, StackTraceMap},
    programs::{
        PerfEvent,
        perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent},
    },
};
use skillprof_common::{
    NO_STACK, OffCpu, TimeCounts, TimeKey, TimeSample, TimeValue, WAIT_STACK_ID, WaitStack,
};

use super::{markers::SkillNames, object, session::take, symbols, task_layout};
use crate::record::probes::{Mechanism, Phase, Probe, ProbeStatus, SkillRow};
use crate::record::time::{
    EntryTime, Frame, ProfileCheck, ThreadCheck, TimeProfile, TimelineSample,
};
pub use classify::{wait_of, work_of};

/// How a run profiles the host's time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeOptions {
    /// Samples per second of each CPU's profile clock.
    pub hz: u64,
    pub off_cpu: OffCpuMode,
    /// Each sample on a timeline too, with its instant (`skillprof slo`'s stalls).
    pub timeline: bool,
}

/// What the switch programs do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OffCpuMode {
    /// Nothing: no program on the scheduler's switches.
    Off,
    /// Time off a CPU by state (runnable, sleeping, blocked), skill and phase: a few map
    /// operations per switch of a host thread, no stack walk.
    States,
    /// Also why each wait worth it happened: a sleep of at least 1 ms in a skill's work (100
    /// ms in none) gets its kernel stack (a futex, epoll, a page fault, mmap_lock, a sleep),
    /// walked as the thread comes back; a shorter one by chance, in proportion to its
    /// length, and the short waits' time is shared by what the chosen ones say. No user
    /// stacks.
    #[default]
    Waits,
    /// Each wait's user and kernel stacks, walked as the thread leaves its CPU: whose wait
    /// as well as why, for an off-CPU flame graph, at about 5 µs per switch of a host thread
    /// on this 2-core machine.
    Stacks,
}

impl OffCpuMode {
    /// The switch programs' load-time constant for the mode.
    pub fn stacks(self) -> u32 {
        match self {
            OffCpuMode::Off | OffCpuMode::States => skillprof_common::OFF_CPU_NO_STACKS,
            OffCpuMode::Waits => skillprof_common::OFF_CPU_WAITS,
            OffCpuMode::Stacks => skillprof_common::OFF_CPU_EVERY_STACK,
        }
    }

    /// Whether waits are named (their kernel stacks taken).
    pub fn names_waits(self) -> bool {
        matches!(self, OffCpuMode::Waits | OffCpuMode::Stacks)
    }
}

/// With `--off-cpu waits`: the time asleep from which every wait's kernel stack is walked, in
/// a skill's work (or in a host that does not mark its work). Walks then cost at most one per
/// millisecond such a thread sleeps, and a wait long enough to move a request's latency is
/// never left unnamed.
pub const WAIT_WALK: std::time::Duration = std::time::Duration::from_millis(1);

/// The same for a wait in no skill's work of a host that marks its work: its idle threads
/// sleep as long as the wall clock runs, and a walk costs about 9 µs (a sleeping task's
/// stack, cold in cache), so one per millisecond of that was most of the switch programs'
/// cost in a default lab run (issue 70). Their waits are still named, by fewer walks that
/// each stand for more of the time, and a stop of the host (SIGSTOP), which holds every
/// thread, is walked whenever it lasts this long.
pub const WAIT_WALK_IDLE: std::time::Duration = std::time::Duration::from_millis(100);

/// The time profile's flags, shared by the commands that profile a host.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct TimeArgs {
    /// The profile clock's rate: samples a second of each CPU, counted when a host thread is
    /// on it (the entries' cpu_* columns, profile/ENTRY.*). Its cost grows with the rate
    /// (docs/defaults.md); at most kernel.perf_event_max_sample_rate [default: 97, and 19 in
    /// `watch`].
    #[arg(long, value_name = "HZ", conflicts_with = "no_profile")]
    pub profile_hz: Option<u64>,

    /// What the scheduler's programs record of the host's threads' time off a CPU: `waits`,
    /// why the host's threads waited (a futex, epoll, a page fault, mmap_lock, a sleep,
    /// waiting for a CPU), from the kernel stack of each wait of 1 ms or more in a skill's
    /// work (100 ms in none) and of shorter ones by chance, the default of `run` for a host it
    /// starts; `stacks`, each wait's user
    /// and kernel stacks (whose wait too, for an off-CPU flame graph, at several times the
    /// cost); `states`, the time by state only (runnable, sleeping, blocked), the default of `run
    /// --attach`, where each of the host's switches should cost little; `off`, the default
    /// of `slo` and `watch`, where a program on each of the host's switches would be part of
    /// what is measured. Their costs: docs/time.md.
    #[arg(long, value_enum, value_name = "WHAT", conflicts_with = "no_profile")]
    pub off_cpu: Option<OffCpuMode>,

    /// No time profile: no profile clock and no program on the scheduler's switches.
    #[arg(long)]
    pub no_profile: bool,
}

impl TimeArgs {
    /// The checked options (`None`: no profile); `off_cpu` and `hz`: the command's defaults.
    pub fn options(&self, off_cpu: OffCpuMode, hz: u64) -> Result<Option<TimeOptions>> {
        if self.no_profile {
            return Ok(None);
        }
        let options = TimeOptions {
            timeline: false,
            hz: self.profile_hz.unwrap_or(hz),
            off_cpu: self.off_cpu.unwrap_or(off_cpu),
        };
        options.check()?;
        Ok(Some(options))
    }
}

/// The profile clock's default rate: a prime near 100, so the clock does not tick in step
/// with the host's own periodic work (a 10 ms timer would always be seen, or never).
pub const DEFAULT_HZ: u64 = 97;

/// The watch's: always on, on every CPU whether the host is busy or not, and read over hours,
/// where 19 samples a second of each CPU still hold thousands of the host's; a prime for the
/// same reason, the rate of the OpenTelemetry eBPF profiler, which promises at most 1% of the
/// CPU. At 97 Hz the clock alone was 0.55% of a quiet host's CPU over an hour (issue 70).
pub const WATCH_HZ: u64 = 19;

/// The kernel's limit on a perf event's sampling rate.
const MAX_RATE: &str = "/proc/sys/kernel/perf_event_max_sample_rate";

impl TimeOptions {
    /// Refuses a rate the kernel would refuse, before anything runs.
    pub fn check(&self) -> Result<()> {
        if self.hz == 0 {
            bail!(
                "--profile-hz 0 samples nothing: give a rate (the default is {DEFAULT_HZ}), or --no-profile"
            );
        }
        let max: u64 = std::fs::read_to_string(MAX_RATE)
            .with_context(|| format!("reading {MAX_RATE}"))?
            .trim()
            .parse()
            .with_context(|| format!("parsing {MAX_RATE}"))?;
        if self.hz > max {
            bail!(
                "--profile-hz {} is above this kernel's limit of {max} samples a second \
                 (kernel.perf_event_max_sample_rate)",
                self.hz
            );
        }
        Ok(())
    }

    /// The clock's period, ns.
    pub fn period_ns(&self) -> u64 {
        1_000_000_000 / self.hz
    }
}

const SAMPLE_PROGRAM: &str = "profile_sample";
const SWITCH_PROGRAM: &str = "btf_sched_switch";
const WAKEUP_PROGRAM: &str = "btf_sched_wakeup";
const OFF_CPU_MAP: &str = "OFF_CPU";
const THREAD_SAMPLES_MAP: &str = "THREAD_SAMPLES";

/// Attaches the profile clock and, as `options` say, the switch programs; one status each.
/// A kernel that refuses either leaves the run without it, and the status says why.
pub fn attach(ebpf: &mut Ebpf, options: &TimeOptions) -> [ProbeStatus; 2] {
    let clock = attach_clock(ebpf, options.period_ns()).map(|cpus| {
        format!(
            "a software cpu-clock per CPU every {:.1} ms ({} Hz) on {cpus} CPUs, counted when a \
             host thread is on it",
            options.period_ns() as f64 / 1e6,
            options.hz
        )
    });
    let clock = ProbeStatus::single(
        Probe::CpuProfile,
        Mechanism::PerfEvent,
        &clock.map_err(|e| format!("{e:#}")),
        &[SAMPLE_PROGRAM],
    );
    // The wait for a CPU comes from the kernel's own sched_info where its BTF says where that
    // is (the session loaded the programs with the same layout); else a program stamps every
    // wakeup of the machine.
    let wakeups = task_layout::sched_info().is_err();
    let switches = match options.off_cpu {
        OffCpuMode::Off => Err("off (--off-cpu off)".to_owned()),
        mode => attach_switches(ebpf, wakeups)
            .map(|()| {
                format!(
                    "tp_btf/sched_switch{}{}",
                    match wakeups {
                        true => " and tp_btf/sched_wakeup",
                        false => " (the wait for a CPU from the kernel's sched_info)",
                    },
                    match mode {
                        OffCpuMode::Stacks => ", each wait's stacks walked".to_owned(),
                        OffCpuMode::Waits => format!(
                            ", the kernel stack of each wait of {} ms or more ({} ms in no \
                             skill's work) and of shorter ones by chance",
                            WAIT_WALK.as_millis(),
                            WAIT_WALK_IDLE.as_millis()
                        ),
                        _ => ", by state only (--off-cpu states)".to_owned(),
                    }
                )
            })
            .map_err(|e| format!("{e:#}")),
    };
    let switches = ProbeStatus::single(
        Probe::OffCpu,
        Mechanism::TpBtf,
        &switches,
        match wakeups {
            true => &[SWITCH_PROGRAM, WAKEUP_PROGRAM],
            false => &[SWITCH_PROGRAM],
        },
    );
    [clock, switches]
}

/// The sample program on a cpu-clock event of every online CPU. Returns the CPUs.
fn attach_clock(ebpf: &mut Ebpf, period_ns: u64) -> Result<usize> {
    let program: &mut PerfEvent = ebpf
        .program_mut(SAMPLE_PROGRAM)
        .context("the BPF object has no profile program")?
        .try_into()?;
    program
        .load()
        .context("loading the profile program (a perf_event program)")?;
    let cpus =
        aya::util::online_cpus().map_err(|(path, e)| anyhow::anyhow!("reading {path}: {e}"))?;
    for &cpu in &cpus {
        program
            .attach(
                PerfEventConfig::Software(SoftwareEvent::CpuClock),
                PerfEventScope::AllProcessesOneCpu { cpu },
                SamplePolicy::Period(period_ns),
                false,
            )
            .with_context(|| format!("a cpu-clock perf event on CPU {cpu}"))?;
    }
    Ok(cpus.len())
}

fn attach_switches(ebpf: &mut Ebpf, wakeups: bool) -> Result<()> {
    let btf = Btf::from_sys_fs().context("reading the kernel's BTF")?;
    let programs = [
        (SWITCH_PROGRAM, "sched_switch"),
        (WAKEUP_PROGRAM, "sched_wakeup"),
    ];
    for (name, tracepoint) in &programs[..if wakeups { 2 } else { 1 }] {
        object::attach_tp_btf(ebpf, &btf, name, tracepoint)?;
    }
    Ok(())
}

/// The profile's maps in a live session.
pub struct TimeMaps {
    counts: BpfHashMap<MapData, TimeKey, TimeValue>,
    stacks: StackTraceMap<MapData>,
    /// The waits' kernel stacks (`--off-cpu waits`), by their own ids.
    wait_stacks: BpfHashMap<MapData, u32, WaitStack>,
    off_cpu: BpfHashMap<MapData, u32, OffCpu>,
    began: Array<MapData, u64>,
    thread_samples: BpfHashMap<MapData, u32, u64>,
    timeline: Option<RingBuf<MapData>>,
    /// Each host thread's CPU time (schedstat, ns) when the clock started.
    cpu_at_start: BTreeMap<u32, u64>,
    tgid: u32,
    wasm: symbols::WasmNames,
    period_ns: u64,
    /// Whether the switch programs run, and whether they walk stacks.
    off_cpu_mode: OffCpuMode,
    /// Whether the profile clock runs.
    clock: bool,
}

impl TimeMaps {
    /// The maps, for whichever of the programs attached (`statuses` from [`attach`]);
    /// `skills_dir`: where the host's component files are, to name its wasm functions.
    pub fn take(
        ebpf: &mut Ebpf,
        tgid: u32,
        options: &TimeOptions,
        statuses: &[ProbeStatus; 2],
        skills_dir: Option<&std::path::Path>,
    ) -> Result<TimeMaps> {
        Ok(TimeMaps {
            counts: BpfHashMap::try_from(take(ebpf, object::TIME)?)?,
            stacks: StackTraceMap::try_from(take(ebpf, object::TIME_STACKS)?)?,
            wait_stacks: BpfHashMap::try_from(take(ebpf, object::WAIT_STACKS)?)?,
            off_cpu: BpfHashMap::try_from(take(ebpf, OFF_CPU_MAP)?)?,
            began: Array::try_from(take(ebpf, object::ENTRY_BEGAN)?)?,
            thread_samples: BpfHashMap::try_from(take(ebpf, THREAD_SAMPLES_MAP)?)?,
            timeline: match options.timeline {
                true => Some(RingBuf::try_from(take(ebpf, object::TIME_SAMPLES)?)?),
                false => None,
            },
            cpu_at_start: threads_cpu(tgid)
                .into_iter()
                .map(|(tid, _, ns)| (tid, ns))
                .collect(),
            tgid,
            wasm: symbols::WasmNames::new(skills_dir),
            period_ns: options.period_ns(),
            off_cpu_mode: match statuses[1].attached {
                true => options.off_cpu,
                false => OffCpuMode::Off,
            },
            clock: statuses[0].attached,
        })
    }

    /// An entry begins now: an interval off a CPU that spans this instant is split at it.
    pub fn begin_entry(&mut self) -> Result<()> {
        self.began
            .set(0, &crate::producers::hostctl::process::monotonic_ns(), 0)
            .context("writing the entry's beginning into the BPF map")
    }

    /// Entry `index`'s samples and intervals, named now (the host must still run), and then
    /// cleared from the maps: call it once per entry. The stacks go with them, but for those
    /// a thread asleep now will be counted with when it wakes. `rows` are the entry's rows by
    /// skill, whose requests' time between polls joins the profile.
    pub fn take_entry(
        &mut self,
        index: u32,
        names: &SkillNames,
        counts: &TimeCounts,
        rows: &[SkillRow],
    ) -> Result<(TimeProfile, EntryTime)> {
        let mut counted: Vec<(TimeKey, TimeValue)> = Vec::new();
        for item in self.counts.iter() {
            let (key, value) = item.context("reading the time counts")?;
            if key.entry == index {
                counted.push((key, value));
            }
        }
        for (key, _) in &counted {
            // Best effort: what is not removed only takes a slot.
            let _ = self.counts.remove(key);
        }
        let ids: BTreeSet<u32> = counted
            .iter()
            .flat_map(|(key, _)| [key.user_stack, key.kernel_stack])
            .filter(|&id| id != NO_STACK)
            .map(|id| id as u32)
            .collect();
        let walked = self.walked(&ids);
        let (user, kernel) = self.named(&counted, &walked)?;
        self.forget(ids.into_iter().filter(|id| walked.contains_key(id)))?;
        let mut profile =
            summary::profile(self.period_ns, &counted, &walked, &user, &kernel, names);
        profile.stacks.extend(summary::between_polls(rows));
        let off_cpu = self.off_cpu_mode != OffCpuMode::Off;
        let stacks = self.off_cpu_mode.names_waits();
        let time = summary::entry_time(&profile, counts, self.clock, off_cpu, stacks);
        Ok((profile, time))
    }

    /// The timeline's samples since the last call, oldest first, each with the function it
    /// was in named now (the host must still run); empty without the timeline.
    pub fn timeline(&mut self, names: &SkillNames) -> Result<Vec<TimelineSample>> {
        let Some(ring) = &mut self.timeline else {
            return Ok(Vec::new());
        };
        let mut raw: Vec<TimeSample> = Vec::new();
        while let Some(item) = ring.next() {
            if item.len() >= std::mem::size_of::<TimeSample>() {
                // SAFETY: the program writes whole `TimeSample`s; read unaligned from the ring.
                raw.push(unsafe { std::ptr::read_unaligned(item.as_ptr() as *const TimeSample) });
            }
        }
        let user = symbols::user_frames(
            self.tgid,
            raw.iter().filter(|s| s.kernel == 0).map(|s| s.ip),
            &mut self.wasm,
        )?;
        let kernel = symbols::kernel_frames(raw.iter().filter(|s| s.kernel != 0).map(|s| s.ip))?;
        let mut samples: Vec<TimelineSample> = raw
            .iter()
            .map(|s| {
                let skill = names.of(s.skill);
                let frame = match s.kernel {
                    0 => &user[&s.ip],
                    _ => &kernel[&s.ip],
                };
                TimelineSample {
                    at_ns: s.ts_ns,
                    tid: s.tid,
                    phase: Phase::from_number(s.phase).unwrap_or(Phase::Host),
                    function: match &skill {
                        Some(skill) => frame.of_skill(skill),
                        None => frame.clone(),
                    },
                    skill,
                }
            })
            .collect();
        samples.sort_by_key(|s| s.at_ns);
        Ok(samples)
    }

    /// The samples of each live host thread against the CPU time the kernel counted for it
    /// since the clock started; `None` without the clock.
    pub fn check(&self) -> Option<ProfileCheck> {
        if !self.clock {
            return None;
        }
        let threads = threads_cpu(self.tgid)
            .into_iter()
            .map(|(tid, name, ns)| ThreadCheck {
                tid,
                name,
                samples: self.thread_samples.get(&tid, 0).unwrap_or(0),
                cpu_ns: ns.saturating_sub(self.cpu_at_start.get(&tid).copied().unwrap_or(0)),
            })
            .collect();
        Some(ProfileCheck {
            period_ns: self.period_ns,
            threads,
        })
    }

    /// Each stack's frames, innermost first, return addresses moved back into their call
    /// instruction (all but the innermost frame). A stack removed while an event was in
    /// flight is missing: its samples keep their time and lose their frames.
    fn walked(&self, ids: &BTreeSet<u32>) -> BTreeMap<u32, Vec<u64>> {
        ids.iter()
            .filter_map(|&id| {
                let ips: Vec<u64> = match is_wait_stack(id) {
                    true => {
                        let stack = self.wait_stacks.get(&id, 0).ok()?;
                        stack.ips.into_iter().take_while(|&ip| ip != 0).collect()
                    }
                    false => {
                        let trace = self.stacks.get(&id, 0).ok()?;
                        trace.frames().iter().map(|frame| frame.ip).collect()
                    }
                };
                let calls = ips
                    .iter()
                    .enumerate()
                    .map(|(i, &ip)| if i == 0 { ip } else { ip - 1 })
                    .collect();
                Some((id, calls))
            })
            .collect()
    }

    /// Names for every address of the entry's user and kernel stacks.
    fn named(
        &mut self,
        counted: &[(TimeKey, TimeValue)],
        walked: &BTreeMap<u32, Vec<u64>>,
    ) -> Result<(BTreeMap<u64, Frame>, BTreeMap<u64, Frame>)> {
        let of = |pick: fn(&TimeKey) -> i32| {
            counted
                .iter()
                .filter_map(move |(key, _)| walked.get(&(pick(key) as u32)))
                .flatten()
                .copied()
                .collect::<BTreeSet<u64>>()
        };
        let user = symbols::user_frames(
            self.tgid,
            of(|key| key.user_stack).into_iter(),
            &mut self.wasm,
        )?;
        let kernel = symbols::kernel_frames(of(|key| key.kernel_stack).into_iter())?;
        Ok((user, kernel))
    }

    /// Removes `ids` from the stack map, but for the stacks a thread asleep now left with:
    /// its interval is counted, with them, when it runs again.
    fn forget(&mut self, ids: impl Iterator<Item = u32>) -> Result<()> {
        let mut asleep = BTreeSet::new();
        for item in self.off_cpu.iter() {
            let (_, off) = item.context("reading the threads off a CPU")?;
            if off.since_ns != 0 {
                asleep.extend([off.user_stack, off.kernel_stack]);
            }
        }
        // A wait stack stays for the session: the waits of a host come from few places.
        for id in ids.filter(|&id| !is_wait_stack(id) && !asleep.contains(&(id as i32))) {
            // Best effort, as for the counts.
            let _ = self.stacks.remove(&id);
        }
        Ok(())
    }
}

/// Whether a stack id is the wait stack map's (`--off-cpu waits`), not the stack map's.
fn is_wait_stack(id: u32) -> bool {
    id & WAIT_STACK_ID as u32 != 0
}

/// Each thread of process `tgid`: its id, its name and the CPU time the kernel counted for it
/// (the first field of `/proc/PID/task/TID/schedstat`, ns). A thread that ends while it is
/// read is left out.
fn threads_cpu(tgid: u32) -> Vec<(u32, String, u64)> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{tgid}/task")) else {
        return Vec::new();
    };
    tasks
        .filter_map(|task| {
            let path = task.ok()?.path();
            let tid = path.file_name()?.to_str()?.parse().ok()?;
            let schedstat = std::fs::read_to_string(path.join("schedstat")).ok()?;
            let ns = schedstat.split_whitespace().next()?.parse().ok()?;
            let name = std::fs::read_to_string(path.join("comm")).ok()?;
            Some((tid, name.trim_end().to_owned(), ns))
        })
        .collect()
}
