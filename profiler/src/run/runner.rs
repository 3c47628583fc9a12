//! One run from start to finish: the run folder and its headers, the host, the entries in
//! order, and the bookkeeping that leaves complete files behind on every way out: the
//! last entry, Ctrl-C or SIGTERM, a host that dies, or an error of our own. The runner
//! sequences only: the measurers fill each entry's record (see `measure`), the sinks write
//! it (see `sinks`).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use chrono::{Local, SubsecRound};

use crate::cmds::{Command, Entry, Plan};
use crate::hostctl::{HostProcess, SkillsDir, profile};
use crate::output::harness_log::{self, Binary, CmdsFile, FILE_SUFFIX, Header};
use crate::output::meta;
use crate::output::samples_csv::SamplesCsv;
use crate::record::host::Stopped;
use crate::record::probes::Probe;
use crate::record::process::ProcessStat;
use crate::record::{
    CgroupInfo, CmdsInfo, EntryCmd, EntryMeasure, EntryRecord, HostInfo, LoadInfo, Outcome,
    RunInfo, Status, SysctlDuring,
};
use crate::sample::process;
use crate::sample::{self, vmstat};
use crate::system::cgroup::MemoryCgroup;
use crate::system::sysctl::SysctlChange;
use crate::{explain, units};

use super::args::RunArgs;
use super::balloon::Pressure;
use super::config::{Attached, RunConfig, sha1_of};
use super::entry::{self, Watched};
use super::interrupt::{Abort, Interruption, Signals};
use super::locust::{LoadRoom, Locust};
use super::measure::{Begin, Host, Measurers, Place, Running};
use super::probing::{Probes, Probing};
use super::progress::Progress;
use super::readings::{Holding, HostCounting, Memcg, Sampling};
use super::sinks::{self, LogFile, RunEnd, Sink};
use super::workload::Workload;

pub async fn execute(args: RunArgs, plan: Plan) -> Result<ExitCode> {
    let mut config = RunConfig::new(args, plan).await?;
    let mut signals = Signals::install()?;
    let mut run = Run::prepare(&config)?;
    let attached = config.attached.take();
    let ended = run.drive(&config, attached, &mut signals).await;
    run.finish(&config.plan, ended).await
}

/// What a run holds while it runs.
struct Run {
    folder: PathBuf,
    meta_path: PathBuf,
    info: RunInfo,
    sinks: Vec<Box<dyn Sink>>,
    /// Built once the host is up, in the order they begin (see `measure`).
    measurers: Measurers,
    progress: Arc<Progress>,
    host: Option<HostProcess>,
    /// `--memory-max`: the host's memory cgroup, until its measurer takes it.
    cgroup: Option<Arc<MemoryCgroup>>,
    /// A plan with load lines: the load network, until Locust's measurer takes it.
    load_room: Option<LoadRoom>,
    /// samples.csv, made with the folder and handed to the sampler when the host is up.
    samples_csv: Option<SamplesCsv>,
    /// `--max-map-count`, `--overcommit-memory`: restored at the end, the last set first.
    sysctls: Vec<SysctlChange>,
    /// The machine's OOM kills before the host started (/proc/vmstat oom_kill).
    oom_kills_before: Option<u64>,
    /// `--stacks` on a host this run started: its perf map, removed at the end.
    perf_map: Option<PathBuf>,
    /// Every entry's record, for the sinks that speak of the whole run.
    records: Vec<EntryRecord>,
}

impl Run {
    /// The run folder with its headers, and what must exist before the host starts: its
    /// memory cgroup, the vm.max_map_count it runs under, the load network.
    fn prepare(config: &RunConfig) -> Result<Run> {
        config.make_folder()?;
        let folder = config.folder.clone();
        let spec = &config.spec;
        let header = Header {
            machine: config.machine.harness(),
            binary: Binary {
                bin: spec.bin.display().to_string(),
                hash: sha1_of(spec.binary_file())?,
                modified: harness_log::ctime_stamp(spec.binary_file())?,
            },
            cmds: CmdsFile {
                filename: config.cmds.display().to_string(),
                hash: config.plan.hash.clone(),
                modified: harness_log::ctime_stamp(&config.cmds)?,
            },
        };
        let mut info = run_info(config, &header);
        let cgroup = config
            .memory_max
            .map(|limit| MemoryCgroup::create(&format!("skillprof-{}", config.stamp), limit))
            .transpose()?;
        if let Some(cgroup) = &cgroup {
            info.memory_cgroup = Some(CgroupInfo {
                dir: cgroup.cgroup().dir().display().to_string(),
                version: cgroup.cgroup().version(),
                limit_bytes: cgroup.limit_bytes(),
            });
            info.guardian_pids.extend(cgroup.cgroup().guardian_pid());
        }
        let mut sysctls = Vec::new();
        for (name, during) in [
            (MAX_MAP_COUNT, config.max_map_count),
            (OVERCOMMIT_MEMORY, config.overcommit_memory),
        ] {
            if let Some(during) = during {
                sysctls.push(set_sysctl(name, during, &mut info)?);
            }
        }
        let load_room = config
            .locust
            .as_ref()
            .map(|(locust, workers, timeout)| {
                let room =
                    LoadRoom::create(locust.clone(), *workers, &config.stamp, *timeout, &folder)?;
                info.load = Some(LoadInfo {
                    network: room.network().clone(),
                    cgroup: room.cgroup_dir().display().to_string(),
                    locust: locust.display().to_string(),
                });
                info.guardian_pids.extend(room.guardian_pids());
                anyhow::Ok(room)
            })
            .transpose()?;
        let log = LogFile {
            path: folder.join(format!("{}{FILE_SUFFIX}", config.stamp)),
            header,
            // As the log's name says it, to the millisecond.
            started: config.started.naive_local().trunc_subsecs(3),
        };
        let run = Run {
            sinks: sinks::all(&log, &folder, config.json)?,
            measurers: Measurers::default(),
            progress: Progress::new(config.plan.entries.len()).into(),
            host: None,
            cgroup: cgroup.map(Arc::new),
            load_room,
            samples_csv: Some(SamplesCsv::create(&folder.join("samples.csv"))?),
            sysctls,
            oom_kills_before: vmstat::oom_kills(Path::new(sample::PROC)),
            perf_map: None,
            records: Vec::new(),
            meta_path: folder.join(meta::FILE),
            folder,
            info,
        };
        meta::write(&run.meta_path, &run.info)?;
        Ok(run)
    }

    /// Why we know the OOM killer took the host, if it did: the cgroup's own count, or
    /// the machine's when the host had no cgroup (then another process may have been the
    /// victim, which the words say).
    fn oom_evidence(&self) -> Option<String> {
        if let Some(cgroup) = &self.cgroup {
            let kills = cgroup.read().ok()?.oom_kills;
            return (kills > 0).then(|| {
                format!(
                    "its memory cgroup reached its {} limit: oom_kill {kills}",
                    units::bytes(cgroup.limit_bytes() as f64)
                )
            });
        }
        let kills =
            vmstat::oom_kills(Path::new(sample::PROC))?.saturating_sub(self.oom_kills_before?);
        (kills > 0).then(|| {
            format!("the machine's OOM killer killed {kills} process(es) during the run (/proc/vmstat oom_kill)")
        })
    }

    /// The host up, its measurers built, then the entries in order until the last, an
    /// interruption, or the host's death.
    async fn drive(
        &mut self,
        config: &RunConfig,
        attached: Option<Attached>,
        signals: &mut Signals,
    ) -> Result<(), Abort> {
        let (host, skills) = self.host_up(config, attached, signals).await?;
        let pid = host.pid();
        self.info.host.pid = Some(pid);
        self.info.host.address = Some(host.client.base().to_owned());
        self.info.host.config = host.client.get_json("/config").await.ok();
        meta::write(&self.meta_path, &self.info)?;
        let exit = host.exit_watch()?;
        let client = host.client.clone();
        let mut workload = Workload::new(
            client.clone(),
            skills.map(|dir| {
                let samples = config
                    .samples
                    .as_ref()
                    .expect("a run with a skills directory has its samples");
                (dir, samples)
            }),
            pid,
            config.workload.clone(),
        )?;
        self.host = Some(host);
        self.start_measurers(config, pid, signals).await?;
        let progress = self.progress.clone();
        let watched = Watched {
            pid,
            exit: &exit,
            cgroup: self.cgroup.clone(),
            progress: &progress,
        };
        let ready = Instant::now();
        for (index, entry) in config.plan.entries.iter().enumerate() {
            let leave_running =
                self.host.as_ref().is_some_and(HostProcess::is_attached) && !config.stop_attached;
            if matches!(entry.command, Command::Stop) && leave_running {
                self.info.entries_not_run.push(format!(
                    "{index}: {} (the attached host was left running; --stop-attached stops it)",
                    entry.name
                ));
                continue;
            }
            self.progress.begin(index, &entry.name);
            let host = Host {
                pid,
                client: &client,
                progress: &progress,
            };
            let mut begin = Begin {
                index,
                entry,
                host,
                load_skills: load_skills(entry, &workload).await,
                signals,
            };
            self.measurers.begin(&mut begin).await?;
            let before = host_process(pid)?;
            let started = ready.elapsed();
            let clock = Instant::now();
            let (outcome, stopped, ended) = self
                .run_command(entry, config, &mut workload, &watched, signals)
                .await?;
            let took = clock.elapsed().saturating_sub(outcome.untimed);
            let died = ended.err();
            let after = match (&died, &stopped) {
                (None, None) => Some(host_process(pid)?),
                _ => None,
            };
            let mut record = EntryRecord::new(EntryMeasure {
                index,
                cmd: EntryCmd::new(entry.name.clone(), entry.command.clone()),
                line: entry.line,
                repeat: entry.repeat,
                started,
                took: stopped.as_ref().map_or(took, |stopped| stopped.took),
                before,
                after,
                outcome,
                stopped,
            });
            self.measurers.end(&mut record, host).await?;
            self.record(record)?;
            if let Some(died) = died {
                return Err(died);
            }
        }
        Ok(())
    }

    /// The host: attached to, or started in the run's folder.
    async fn host_up(
        &mut self,
        config: &RunConfig,
        attached: Option<Attached>,
        signals: &mut Signals,
    ) -> Result<(HostProcess, Option<SkillsDir>), Abort> {
        if let Some(attached) = attached {
            self.progress.note(&format!(
                "attached to process {} at {} ({} profile); it is left running{}",
                attached.0.pid(),
                attached.0.client.base(),
                config.spec.profile,
                if config.stop_attached {
                    ", but stopped at `stop` (--stop-attached)"
                } else {
                    ""
                }
            ));
            let perf_map = format!("/proc/{0}/root/tmp/perf-{0}.map", attached.0.pid());
            if config.stacks && !Path::new(&perf_map).exists() {
                // Only a host started by the run gets SKILLHOST_PERFMAP from --stacks.
                self.progress.note(
                    "warning: --stacks on an attached host without a perf map: its JIT wasm \
                     frames stay unnamed ([anon]); start it with SKILLHOST_PERFMAP=true to \
                     name them",
                );
            }
            return Ok(attached);
        }
        let (host, skills) = self.start_host(config, signals).await?;
        if config.stacks {
            self.perf_map = Some(format!("/tmp/perf-{}.map", host.pid()).into());
        }
        Ok((host, Some(skills)))
    }

    /// Starts the host in the run's folder: its skills directory, log and working directory.
    async fn start_host(
        &self,
        config: &RunConfig,
        signals: &mut Signals,
    ) -> Result<(HostProcess, SkillsDir), Abort> {
        let spec = &config.spec;
        let skills = SkillsDir::create(&self.folder.join("skills"), spec.registry.clone())?;
        self.progress.note(&format!(
            "starting {} ({} profile)",
            spec.bin.display(),
            spec.profile
        ));
        let (log, workdir) = (self.folder.join("host.log"), profile::workdir(&self.folder));
        let procs = self
            .cgroup
            .as_ref()
            .map(|c| c.cgroup().procs())
            .transpose()?;
        let address = self
            .load_room
            .as_ref()
            .map_or(Ipv4Addr::LOCALHOST, LoadRoom::host_address);
        tokio::select! {
            host = HostProcess::start(
                spec,
                skills.path(),
                &log,
                &workdir,
                procs.as_ref(),
                SocketAddrV4::new(address, 0),
                config.ready_timeout,
            ) => Ok((host?, skills)),
            interruption = signals.next() => Err(Abort::Interrupted(interruption)),
        }
    }

    /// Starts the run's measurers, each kept at its [`Place`] as soon as it starts, so that the
    /// end of the run finishes it whatever fails next; meta.json says what started.
    async fn start_measurers(
        &mut self,
        config: &RunConfig,
        pid: u32,
        signals: &mut Signals,
    ) -> Result<(), Abort> {
        let csv = self.samples_csv.take().expect("the sampler starts once");
        let sampling = Sampling::start(pid, config.interval, csv, self.info.host.attached)?;
        self.measurers.keep(Place::Sampler, Box::new(sampling));
        self.measurers
            .keep(Place::Composition, Box::new(Holding::default()));
        self.progress.watch_rss(pid);
        let probing = Probing::start(config.probes.as_ref(), pid)?;
        self.progress.note(&probing.describe());
        let info = probing.info();
        if let Some(off) = info
            .statuses
            .iter()
            .find(|s| s.probe == Probe::Markers && !s.attached)
        {
            self.progress.note(&format!(
                "warning: skill attribution OFF, entry windows only: {}",
                off.detail
            ));
        }
        self.info.probes = Some(info);
        meta::write(&self.meta_path, &self.info)?;
        let probes = Probes {
            probing,
            folder: self.folder.clone(),
            check: None,
        };
        self.measurers.keep(Place::Probes, Box::new(probes));
        self.measurers
            .keep(Place::HostCounts, Box::new(HostCounting::default()));
        if let Some(room) = self.load_room.take() {
            self.measurers
                .keep(Place::Locust, Box::new(Locust::new(room)));
        }
        if let Some(cgroup) = &self.cgroup {
            self.measurers
                .keep(Place::Memcg, Box::new(Memcg::new(cgroup.clone())));
        }
        let mut pressure = Pressure::new(config.pressure.settle_timeout);
        let started = pressure
            .start(&config.pressure, &mut self.info, &self.progress, signals)
            .await;
        self.measurers.keep(Place::Pressure, Box::new(pressure));
        meta::write(&self.meta_path, &self.info)?;
        started
    }

    /// Runs the entry's command: `stop` stops the host, a measurer runs its own lines, the
    /// workload the rest. The outcome is kept however it ended: for a fill whose host died,
    /// it is the answer.
    async fn run_command(
        &mut self,
        entry: &Entry,
        config: &RunConfig,
        workload: &mut Workload,
        watched: &Watched<'_>,
        signals: &mut Signals,
    ) -> Result<(Outcome, Option<Stopped>, Result<(), Abort>), Abort> {
        let mut outcome = Outcome::default();
        if matches!(entry.command, Command::Stop) {
            let host = self.host.take().expect("stop is the last entry");
            self.progress.release_host();
            let stopped = host.stop(config.stop_timeout).await?;
            return Ok((outcome, Some(stopped), Ok(())));
        }
        let mut running = Running {
            progress: &self.progress,
            signals,
            exit: watched.exit,
            outcome: &mut outcome,
        };
        let ended = match self.measurers.run(entry, &mut running).await {
            Some(ended) => ended,
            None => {
                let (done, ended) = entry::run(workload, entry, signals, watched).await;
                outcome = done;
                ended
            }
        };
        match ended {
            // The entry the host died in is kept, with what it did until then.
            Err(Abort::Interrupted(Interruption::HostExited)) => Ok((outcome, None, ended)),
            Err(abort) => Err(abort),
            Ok(()) => Ok((outcome, None, Ok(()))),
        }
    }

    /// Hands one finished entry to every sink, each flushed to disk.
    fn record(&mut self, record: EntryRecord) -> Result<()> {
        for sink in &mut self.sinks {
            sink.entry(&record)?;
        }
        let measure = &record.measure;
        let logged = harness_log::LoggedEntry::from(measure);
        self.info.entries_run = self.records.len() + 1;
        self.info.request_errors += measure.outcome.errors;
        let errors = match (&measure.outcome.first_error, measure.outcome.errors) {
            (Some(first), n) => format!(", {n} failed request(s), first: {first}"),
            (None, _) => String::new(),
        };
        self.progress.done(
            measure.index,
            &format!(
                "{}: {} ms, rss {} KB ({:+} KB), {} request(s){errors}",
                measure.cmd,
                logged.took_ms,
                logged.rss_kb,
                logged.rss_diff_kb,
                measure.outcome.requests
            ),
        );
        self.records.push(record);
        Ok(())
    }

    /// Stops whatever still runs, undoes what the run changed, completes meta.json, and
    /// hands the run to the sinks.
    async fn finish(mut self, plan: &Plan, ended: Result<(), Abort>) -> Result<ExitCode> {
        let code = match ended {
            Ok(()) => {
                self.info.status = Status::Complete;
                ExitCode::SUCCESS
            }
            Err(abort) => self.aborted(plan, abort).await,
        };
        if let Some(perf_map) = self.perf_map.take() {
            // The host is gone; its perf map was written for this run only.
            let _ = std::fs::remove_file(perf_map);
        }
        self.measurers.finish(&mut self.info).await?;
        if let Some(room) = self.load_room.take() {
            // The host never came up: Locust's measurer was not made.
            room.finish();
        }
        if let Some(cgroup) = self.cgroup.take() {
            // The host has been stopped above or at `stop`: nothing is left inside.
            let removed = match Arc::into_inner(cgroup) {
                Some(cgroup) => cgroup.remove(),
                None => Err(anyhow::anyhow!(
                    "the host's memory cgroup is still held: its guardian removes it"
                )),
            };
            if let Err(error) = removed {
                eprintln!("warning: {error:#}");
            }
        }
        while let Some(change) = self.sysctls.pop() {
            if let Err(error) = change.restore() {
                eprintln!("warning: {error:#}");
            }
        }
        self.progress.finish();
        self.info.finished = Some(Local::now().to_rfc3339());
        meta::write(&self.meta_path, &self.info)?;
        let explanation = explain::document(&self.info, &self.records);
        let end = RunEnd {
            folder: &self.folder,
            info: &self.info,
            records: &self.records,
            explanation: &explanation,
        };
        for sink in &mut self.sinks {
            sink.run(&end)?;
        }
        Ok(code)
    }

    /// How the run ended early, in meta.json's words: the host stopped if still running,
    /// the OOM killer named if it was the cause.
    async fn aborted(&mut self, plan: &Plan, abort: Abort) -> ExitCode {
        let mut reason = match &abort {
            Abort::Interrupted(interruption) => interruption.to_string(),
            Abort::Failed(error) => format!("{error:#}"),
        };
        let code = ExitCode::from(match &abort {
            Abort::Interrupted(interruption) => interruption.exit_code(),
            Abort::Failed(_) => 1,
        });
        if let Some(host) = self.host.take().filter(|host| !host.is_attached()) {
            match host.stop(Duration::from_secs(10)).await {
                Ok(Stopped {
                    status: Some(status),
                    ..
                }) => reason.push_str(&format!("; the host then ended: {status}")),
                Ok(_) => reason.push_str("; the host was then stopped"),
                Err(error) => reason.push_str(&format!("; stopping the host failed: {error:#}")),
            }
        }
        if matches!(abort, Abort::Interrupted(Interruption::HostExited)) {
            self.info.oom_killed = self.oom_evidence();
            if let Some(evidence) = &self.info.oom_killed {
                reason = format!("the host was killed by the OOM killer ({evidence}); {reason}");
            }
        }
        let done = self.records.len();
        self.info.status = Status::Incomplete;
        self.info.entries_not_run = plan.entries[done..]
            .iter()
            .enumerate()
            .map(|(offset, entry)| format!("{}: {}", done + offset, entry.name))
            .collect();
        self.info.reason = Some(reason);
        code
    }
}

/// A load line's skills: its schedule's one, or those of this run the host lists now.
async fn load_skills(entry: &Entry, workload: &Workload) -> Option<Result<Vec<String>>> {
    let Command::LExecuteAll(load) = &entry.command else {
        return None;
    };
    Some(match &load.schedule {
        Some(schedule) => Ok(vec![schedule.skill.clone()]),
        None => workload.ours_listed().await,
    })
}

/// The run's info as it starts: the host, the workload, the machine, the settings.
fn run_info(config: &RunConfig, header: &Header) -> RunInfo {
    RunInfo {
        skillprof_version: env!("CARGO_PKG_VERSION").to_owned(),
        run: config.stamp.clone(),
        started: config.started.to_rfc3339(),
        finished: None,
        status: Status::Running,
        reason: None,
        entries_run: 0,
        entries_not_run: Vec::new(),
        request_errors: 0,
        host: HostInfo {
            sha1: header.binary.hash.clone(),
            modified: header.binary.modified.clone(),
            spec: config.spec.clone(),
            pid: None,
            address: None,
            config: None,
            attached: config.attached.is_some(),
        },
        cmds: CmdsInfo {
            file: header.cmds.filename.clone(),
            hash: config.plan.hash.clone(),
            modified: header.cmds.modified.clone(),
            entries: config.plan.entries.len(),
        },
        machine: config.machine.clone(),
        python_sample: Some(config.python_sample),
        atomic_copy: config.atomic_copy,
        sampling_interval_ms: config.interval.as_millis() as u64,
        sampler_cpu_ms: None,
        probes: None,
        pressure: None,
        pressure_notes: Vec::new(),
        pressure_balloon_pids: Vec::new(),
        scale_factor: None,
        max_map_count: None,
        overcommit_memory: None,
        guardian_pids: Vec::new(),
        memory_cgroup: None,
        load: None,
        oom_killed: None,
        rss_peak: None,
        cores: config.cores,
        trim_by: config.workload.trim_by,
    }
}

const MAX_MAP_COUNT: &str = "vm.max_map_count";
const OVERCOMMIT_MEMORY: &str = "vm.overcommit_memory";

/// `--max-map-count`, `--overcommit-memory`: the sysctl `name` for the run, under a
/// guardian, said in `info`.
fn set_sysctl(name: &'static str, during: u64, info: &mut RunInfo) -> Result<SysctlChange> {
    let change = SysctlChange::set(name, &during.to_string())?;
    let said = Some(SysctlDuring {
        before: change.original().to_owned(),
        during,
    });
    match name {
        MAX_MAP_COUNT => info.max_map_count = said,
        _ => info.overcommit_memory = said,
    }
    info.guardian_pids.push(change.guardian_pid());
    eprintln!("{name}: {} -> {during} for the run", change.original());
    Ok(change)
}

/// The host's counters at an entry's boundary; their absence means it died.
fn host_process(pid: u32) -> Result<ProcessStat, Abort> {
    entry::alive(process::at_boundary(Path::new(sample::PROC), pid))
}
