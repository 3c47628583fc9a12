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

use crate::ground::cmds::{Command, Entry, Plan};
use crate::producers::hostctl::{HostProcess, SkillsDir, profile};
use crate::producers::sample::process;
use crate::producers::sample::{self};
use crate::producers::system::run_changes::{RunChanges, Wanted};
use crate::record::host::Stopped;
use crate::record::probes::Probe;
use crate::record::process::ProcessStat;
use crate::record::{
    CmdsInfo, EntryCmd, EntryMeasure, EntryRecord, HostInfo, LoadInfo, Outcome, RunInfo, Status,
};
use crate::views::explain;
use crate::views::output::harness_log::{self, Binary, CmdsFile, FILE_SUFFIX, Header};
use crate::views::output::meta::MetaFile;
use crate::views::output::samples_csv::{self, SamplesCsv};

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
    meta: MetaFile,
    sinks: Vec<Box<dyn Sink>>,
    /// Built once the host is up, in the order they begin (see `measure`).
    measurers: Measurers,
    progress: Arc<Progress>,
    host: Option<HostProcess>,
    /// The machine changes made before the host starts (its memory cgroup, sysctls).
    changes: RunChanges,
    /// A plan with load lines: the load network, until Locust's measurer takes it.
    load_room: Option<LoadRoom>,
    /// samples.csv, made with the folder and handed to the sampler when the host is up.
    samples_csv: Option<SamplesCsv>,
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
        let changes = RunChanges::make(
            &Wanted {
                name: &format!("skillprof-{}", config.stamp),
                memory_max: config.memory_max,
                max_map_count: config.max_map_count,
                overcommit_memory: config.overcommit_memory,
            },
            &mut info,
        )?;
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
            changes,
            load_room,
            samples_csv: Some(SamplesCsv::create(&folder.join(samples_csv::FILE))?),
            perf_map: None,
            records: Vec::new(),
            meta: MetaFile::create(&folder, info)?,
            folder,
        };
        Ok(run)
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
        self.meta.info.host.pid = Some(pid);
        self.meta.info.host.address = Some(host.client.base().to_owned());
        self.meta.info.host.config = host.client.get_json("/config").await.ok();
        self.meta.save()?;
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
            cgroup: self.changes.cgroup().cloned(),
            progress: &progress,
        };
        let ready = Instant::now();
        for (index, entry) in config.plan.entries.iter().enumerate() {
            let leave_running =
                self.host.as_ref().is_some_and(HostProcess::is_attached) && !config.stop_attached;
            if matches!(entry.command, Command::Stop) && leave_running {
                self.meta.info.entries_not_run.push(format!(
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
        let skills = SkillsDir::create(&SkillsDir::of_run(&self.folder), spec.registry.clone())?;
        self.progress.note(&format!(
            "starting {} ({} profile)",
            spec.bin.display(),
            spec.profile
        ));
        let (log, workdir) = (profile::log(&self.folder), profile::workdir(&self.folder));
        let procs = self
            .changes
            .cgroup()
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
        let sampling = Sampling::start(pid, config.interval, csv, self.meta.info.host.attached)?;
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
        self.meta.info.probes = Some(info);
        self.meta.save()?;
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
        if let Some(cgroup) = self.changes.cgroup() {
            self.measurers
                .keep(Place::Memcg, Box::new(Memcg::new(cgroup.clone())));
        }
        let mut pressure = Pressure::new(config.pressure.settle_timeout);
        let started = pressure
            .start(
                &config.pressure,
                &mut self.meta.info,
                &self.progress,
                signals,
            )
            .await;
        self.measurers.keep(Place::Pressure, Box::new(pressure));
        self.meta.save()?;
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
        self.meta.info.entries_run = self.records.len() + 1;
        self.meta.info.request_errors += measure.outcome.errors;
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
                self.meta.info.status = Status::Complete;
                ExitCode::SUCCESS
            }
            Err(abort) => self.aborted(plan, abort).await,
        };
        if let Some(perf_map) = self.perf_map.take() {
            // The host is gone; its perf map was written for this run only.
            let _ = std::fs::remove_file(perf_map);
        }
        self.measurers.finish(&mut self.meta.info).await?;
        if let Some(room) = self.load_room.take() {
            // The host never came up: Locust's measurer was not made.
            room.finish();
        }
        // The host has been stopped above or at `stop`.
        self.changes.undo();
        self.progress.finish();
        self.meta.info.finished = Some(Local::now().to_rfc3339());
        self.meta.save()?;
        let explanation = explain::document(&self.meta.info, &self.records);
        let end = RunEnd {
            folder: &self.folder,
            info: &self.meta.info,
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
            self.meta.info.oom_killed = self.changes.oom_evidence();
            if let Some(evidence) = &self.meta.info.oom_killed {
                reason = format!("the host was killed by the OOM killer ({evidence}); {reason}");
            }
        }
        let done = self.records.len();
        self.meta.info.status = Status::Incomplete;
        self.meta.info.entries_not_run = plan.entries[done..]
            .iter()
            .enumerate()
            .map(|(offset, entry)| format!("{}: {}", done + offset, entry.name))
            .collect();
        self.meta.info.reason = Some(reason);
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
        boost_factor: None,
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

/// The host's counters at an entry's boundary; their absence means it died.
fn host_process(pid: u32) -> Result<ProcessStat, Abort> {
    entry::alive(process::at_boundary(Path::new(sample::PROC), pid))
}
