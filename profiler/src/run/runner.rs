//! One run from start to finish: the run folder and its headers, the host, the entries in
//! order, and the bookkeeping that leaves complete files behind on every way out: the
//! last entry, Ctrl-C or SIGTERM, a host that dies, or an error of our own.

use crate::record::probes::Probe;
use std::fs::{self, File};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use chrono::Local;
use sha1::{Digest, Sha1};

use crate::cmds::{Command, Entry, InFlightCap, Plan, SkillKind};
use crate::hostctl::{
    ExitWatch, HostCounters, HostProcess, HostProfile, HostSpec, SampleSkills, SkillsDir, Stopped,
    attach, profile, trim,
};
use crate::locust::LoadRow;
use crate::output::entries_jsonl::{self, EntriesJsonl};
use crate::output::harness_log::{self, Binary, CmdsFile, FILE_SUFFIX, Header, LogWriter};
use crate::output::{
    commands_csv::CommandsCsv, compare, entry_rows_csv, entry_rows_csv::EntryRowsCsv, meta,
    run_json, samples_csv::SamplesCsv,
};
use crate::record::{
    CgroupInfo, CmdsInfo, EntryMeasure, EntryRecord, Fill, FillStop, HostInfo, LoadInfo, Outcome,
    RunInfo, Status, Step, SysctlDuring,
};
use crate::sample::composition::{Composition, EntryComposition};
use crate::sample::process::{ProcessError, ProcessStat};
use crate::sample::{self, Sampler, process, vmstat};
use crate::system::cgroup::{MemcgEntry, MemcgStat, MemoryCgroup};
use crate::system::sysctl::SysctlChange;
use crate::{explain, output, probes, units};

use super::args::RunArgs;
use super::balloon::{self as balloon_room, Pressure};
use super::interrupt::{Abort, Interruption, Signals};
use super::locust::{self as locust_room, LoadRoom};
use super::probing::Probing;
use super::progress::Progress;
use super::workload::{self, Workload};
use crate::hostctl::Cores;
use crate::machine::Machine;

pub async fn execute(args: RunArgs, plan: Plan) -> Result<ExitCode> {
    if !args.no_probes {
        // Before anything starts: a run that cannot probe would leave a half-made folder.
        probes::require_bpf_for_run()?;
    }
    balloon_room::require_root_if_used(args.pressure, args.scale_factor, &plan)?;
    require_limits_usable(args.memory_max, args.max_map_count, &plan)?;
    let locust = locust_room::require_usable(&args, &plan)?;
    let mut signals = Signals::install()?;
    let profile = HostProfile::load(&args.host_profile)?;
    profile.dialect.routes.registry().with_context(|| {
        format!(
            "--host-profile {}: `skillprof run` adds and drops skills while the host runs; \
             measure this host's traffic with `skillprof slo --host-profile {0}`",
            args.host_profile
        )
    })?;
    let trim_line = plan
        .entries
        .iter()
        .find(|entry| matches!(entry.command, Command::Trim));
    if let (Some(by), None) = (args.trim_by, trim_line) {
        anyhow::bail!(
            "--trim-by {} says how trim lines reach the host's allocator, and {} has none",
            by.name(),
            args.cmds.display()
        );
    }
    let trim_by = trim_line
        .map(|entry| trim::resolve(args.trim_by, &profile, entry.line.unwrap_or(0)))
        .transpose()?;
    let world = profile.registry.world;
    let samples = match &args.samples {
        Some(dir) => SampleSkills::new(dir, world),
        None => SampleSkills::beside_executable(world)?,
    };
    let machine = Machine::read()?;
    let cores = args
        .cores
        .map(|cores| Cores::new(cores, u32::try_from(machine.cores).unwrap_or(u32::MAX)));
    let (spec, attached) = match (args.attach, cores) {
        (Some(pid), Some(cores)) => anyhow::bail!(
            "--cores {} cannot emulate a machine for process {pid}, which is already running: \
             its compile threads, async workers and malloc arenas were sized when it started. \
             Let skillprof start the host (drop --attach), or restart it with {}",
            cores.cores,
            cores
                .env()
                .iter()
                .map(|(name, value)| format!("{name}={value}"))
                .collect::<Vec<_>>()
                .join(" ")
        ),
        (Some(pid), None) => attach_host(&args, &plan, profile, pid, &samples).await?,
        (None, _) => (host_spec(&args, profile, cores)?, None),
    };
    let stamp = harness_log::stamp(Local::now());
    let folder = run_folder(&args, &stamp)?;
    let cmds_file = args.cmds.display().to_string();
    let header = Header {
        machine: machine.harness(),
        binary: Binary {
            bin: spec.bin.display().to_string(),
            hash: sha1_of(&spec.bin)?,
            modified: harness_log::ctime_stamp(&spec.bin)?,
        },
        cmds: CmdsFile {
            filename: cmds_file.clone(),
            hash: plan.hash.clone(),
            modified: harness_log::ctime_stamp(&args.cmds)?,
        },
    };
    let mut info = RunInfo {
        skillprof_version: env!("CARGO_PKG_VERSION").to_owned(),
        run: stamp.clone(),
        started: Local::now().to_rfc3339(),
        finished: None,
        status: Status::Running,
        reason: None,
        entries_run: 0,
        entries_not_run: Vec::new(),
        request_errors: 0,
        host: HostInfo {
            sha1: header.binary.hash.clone(),
            modified: header.binary.modified.clone(),
            spec: spec.clone(),
            pid: None,
            address: None,
            config: None,
            attached: attached.is_some(),
        },
        cmds: CmdsInfo {
            file: cmds_file,
            hash: plan.hash.clone(),
            modified: header.cmds.modified.clone(),
            entries: plan.entries.len(),
        },
        machine,
        python_sample: Some(args.python_sample),
        atomic_copy: !args.no_atomic_copy,
        sampling_interval_ms: args.interval_ms,
        sampler_cpu_ms: None,
        probes: None,
        pressure: None,
        pressure_notes: Vec::new(),
        pressure_balloon_pids: Vec::new(),
        scale_factor: None,
        max_map_count: None,
        guardian_pids: Vec::new(),
        memory_cgroup: None,
        load: None,
        oom_killed: None,
        rss_peak: None,
        cores,
        trim_by,
    };
    let log_path = folder.join(format!("{stamp}{FILE_SUFFIX}"));
    let log_file =
        File::create(&log_path).with_context(|| format!("creating {}", log_path.display()))?;
    let cgroup = args
        .memory_max
        .map(|limit| MemoryCgroup::create(&format!("skillprof-{stamp}"), limit))
        .transpose()?;
    if let Some(cgroup) = &cgroup {
        info.memory_cgroup = Some(CgroupInfo {
            dir: cgroup.cgroup().dir().display().to_string(),
            version: cgroup.cgroup().version(),
            limit_bytes: cgroup.limit_bytes(),
        });
        info.guardian_pids.extend(cgroup.cgroup().guardian_pid());
    }
    let map_limit = match args.max_map_count {
        Some(during) => {
            let change = SysctlChange::set(MAX_MAP_COUNT, &during.to_string())?;
            info.max_map_count = Some(SysctlDuring {
                before: change.original().to_owned(),
                during,
            });
            info.guardian_pids.push(change.guardian_pid());
            eprintln!(
                "{MAX_MAP_COUNT}: {} -> {during} for the run",
                change.original()
            );
            Some(change)
        }
        None => None,
    };
    let load = locust
        .map(|(locust, workers)| {
            let timeout = Duration::from_secs(
                args.locust_timeout_s
                    .unwrap_or(locust_room::DEFAULT_CONNECT_TIMEOUT_S),
            );
            LoadRoom::create(locust.clone(), workers, &stamp, timeout, &folder).inspect(|room| {
                info.load = Some(LoadInfo {
                    network: room.network().clone(),
                    cgroup: room.cgroup_dir().display().to_string(),
                    locust: locust.display().to_string(),
                });
                info.guardian_pids.extend(room.guardian_pids());
            })
        })
        .transpose()?;
    let mut run = Run {
        progress: Progress::new(plan.entries.len()).into(),
        cgroup,
        map_limit,
        oom_kills_before: vmstat::oom_kills(Path::new(sample::PROC)),
        log: LogWriter::new(log_file, &header)?,
        commands: CommandsCsv::create(&folder.join("commands.csv"))?,
        entries: EntriesJsonl::create(&folder.join(entries_jsonl::FILE))?,
        skills: EntryRowsCsv::new(&folder, entry_rows_csv::SKILLS),
        load_csv: EntryRowsCsv::new(&folder, entry_rows_csv::LOAD),
        load,
        samples_csv: Some(SamplesCsv::create(&folder.join("samples.csv"))?),
        meta_path: folder.join("meta.json"),
        entries_done: 0,
        info,
        folder,
        log_path,
        host: None,
        sampler: None,
        probing: None,
        pressure: None,
        records: Vec::new(),
        perf_map: None,
        json: args.json,
    };
    meta::write(&run.meta_path, &run.info)?;
    let ended = run
        .drive(&args, &plan, &spec, &samples, attached, &mut signals)
        .await;
    run.finish(&plan, ended).await
}

struct Run {
    folder: PathBuf,
    log_path: PathBuf,
    meta_path: PathBuf,
    info: RunInfo,
    log: LogWriter<File>,
    commands: CommandsCsv,
    entries: EntriesJsonl,
    skills: EntryRowsCsv,
    load_csv: EntryRowsCsv,
    /// `l_execute_all`, `lo_execute`: the load network and Locust's cgroup, removed at the end.
    load: Option<LoadRoom>,
    /// Handed to the sampler when the host is up.
    samples_csv: Option<SamplesCsv>,
    progress: std::sync::Arc<Progress>,
    host: Option<HostProcess>,
    sampler: Option<Sampler>,
    probing: Option<Probing>,
    pressure: Option<Pressure>,
    entries_done: usize,
    /// Every entry's record, for explain.md.
    records: Vec<EntryRecord>,
    /// `--memory-max`: the host's memory cgroup, removed at the end.
    cgroup: Option<MemoryCgroup>,
    /// `--max-map-count`: restored at the end.
    map_limit: Option<SysctlChange>,
    /// The machine's OOM kills before the host started (/proc/vmstat oom_kill).
    oom_kills_before: Option<u64>,
    /// `--stacks` on a host this run started: its perf map, removed at the end.
    perf_map: Option<PathBuf>,
    /// `--json`: the records on stdout, the prose on stderr.
    json: bool,
}

/// `--run-dir`, created if missing and refused unless empty; or a new folder named by the
/// run's time stamp under `--out`.
fn run_folder(args: &RunArgs, stamp: &str) -> Result<PathBuf> {
    let folder = args.run_dir.clone().unwrap_or_else(|| args.out.join(stamp));
    fs::create_dir_all(&folder)
        .with_context(|| format!("creating the run folder {}", folder.display()))?;
    if args.run_dir.is_some() {
        let mut inside = fs::read_dir(&folder)
            .with_context(|| format!("reading the run folder {}", folder.display()))?;
        ensure!(
            inside.next().is_none(),
            "--run-dir {} is not empty: a run folder holds one run (name a new or empty folder)",
            folder.display()
        );
    }
    Ok(folder)
}

impl Run {
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

    async fn drive(
        &mut self,
        args: &RunArgs,
        plan: &Plan,
        spec: &HostSpec,
        samples: &SampleSkills,
        attached: Option<(HostProcess, Option<SkillsDir>)>,
        signals: &mut Signals,
    ) -> Result<(), Abort> {
        let (host, skills) = match attached {
            Some(attached) => {
                self.progress.note(&format!(
                    "attached to process {} at {} ({} profile); it is left running{}",
                    attached.0.pid(),
                    attached.0.client.base(),
                    spec.profile,
                    if args.stop_attached {
                        ", but stopped at `stop` (--stop-attached)"
                    } else {
                        ""
                    }
                ));
                let perf_map = format!("/proc/{0}/root/tmp/perf-{0}.map", attached.0.pid());
                if args.stacks && !Path::new(&perf_map).exists() {
                    // Only a host started by the run gets SKILLHOST_PERFMAP from --stacks.
                    self.progress.note(
                        "warning: --stacks on an attached host without a perf map: its JIT wasm \
                         frames stay unnamed ([anon]); start it with SKILLHOST_PERFMAP=true to \
                         name them",
                    );
                }
                attached
            }
            None => {
                let (host, skills) = self.start_host(args, spec, signals).await?;
                if args.stacks {
                    self.perf_map = Some(format!("/tmp/perf-{}.map", host.pid()).into());
                }
                (host, Some(skills))
            }
        };
        let pid = host.pid();
        self.info.host.pid = Some(pid);
        self.info.host.address = Some(host.client.base().to_owned());
        self.info.host.config = host.client.get_json("/config").await.ok();
        meta::write(&self.meta_path, &self.info)?;
        let exit_watch = host.exit_watch()?;
        let mut workload = Workload::new(
            host.client.clone(),
            skills,
            samples,
            pid,
            workload::Settings {
                python: args.python_sample,
                cap: InFlightCap::new(args.max_in_flight),
                list_timeout: Duration::from_secs(args.list_timeout_s),
                in_place: args.no_atomic_copy,
                trim_by: self.info.trim_by,
                load_cpus: args.load_cpus.clone(),
            },
        )?;
        self.host = Some(host);
        let csv = self.samples_csv.take().expect("the sampler starts once");
        self.sampler = Some(Sampler::start(
            pid,
            Duration::from_millis(args.interval_ms),
            csv,
        )?);
        self.progress.watch_rss(pid);
        let probing = Probing::start(args, pid, plan.entries.len(), &self.folder)?;
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
        self.probing = Some(probing);
        let pressure = self
            .pressure
            .insert(Pressure::new(Duration::from_secs(args.pressure_timeout_s)));
        if let Some(during) = args.scale_factor {
            let (before, guardian) = pressure.set_scale_factor(during, &self.progress)?;
            self.info.scale_factor = Some(SysctlDuring {
                before,
                during: during.into(),
            });
            self.info.guardian_pids.push(guardian);
            meta::write(&self.meta_path, &self.info)?;
        }
        if let Some(band) = args.pressure {
            self.info.pressure = Some(band.to_string());
            pressure.set(Some(band), &self.progress, signals).await?;
        }

        let ready = Instant::now();
        for (index, entry) in plan.entries.iter().enumerate() {
            let leave_running =
                self.host.as_ref().is_some_and(HostProcess::is_attached) && !args.stop_attached;
            if matches!(entry.command, Command::Stop) && leave_running {
                self.info.entries_not_run.push(format!(
                    "{index}: {} (the attached host was left running; --stop-attached stops it)",
                    entry.name
                ));
                continue;
            }
            self.progress.begin(index, &entry.name);
            // Locust starts before the entry's window: its start-up is not the host's work.
            let client = self
                .host
                .as_ref()
                .expect("running until stop")
                .client
                .clone();
            let swarm = match &entry.command {
                Command::LExecuteAll(load) => {
                    let room = self.load.as_ref().expect("made for a plan with load lines");
                    let skills = match &load.schedule {
                        Some(schedule) => Ok(vec![schedule.skill.clone()]),
                        None => workload.ours_listed().await,
                    };
                    Some(match skills {
                        Ok(skills) => {
                            self.progress.note(&format!(
                                "  locust: starting the master and {} worker(s) in their \
                                 namespaces",
                                load.workers
                            ));
                            room.start(index, load, &client, skills, signals).await?
                        }
                        Err(error) => Err(error),
                    })
                }
                _ => None,
            };
            let counted_before = HostCounters::read(&client).await;
            let held_before = Composition::read(Path::new(sample::PROC), pid);
            let before = host_process(pid)?;
            let sampler = self.sampler.as_ref().expect("started above");
            sampler.begin_entry(index)?;
            if matches!(entry.command, Command::Stop) {
                self.probing.as_mut().expect("started above").arm_stop()?;
            }
            let probing = self.probing.as_ref().expect("started above");
            probing.begin_entry(index)?;
            let pressure = self.pressure.as_mut().expect("started above");
            pressure.begin_entry();
            if let Some(cgroup) = &self.cgroup {
                cgroup.reset_peak()?;
            }
            let memcg_before = self.cgroup.as_ref().map(MemoryCgroup::read).transpose()?;
            let peak_reset = reset_peak(&mut self.info, &self.progress, pid);
            let started = ready.elapsed();
            let clock = Instant::now();
            let mut died = None;
            let mut held = None;
            let (mut outcome, after, stopped) = match &entry.command {
                Command::Stop => {
                    let host = self.host.take().expect("stop is the last entry");
                    sampler.release_process()?;
                    self.progress.release_host();
                    let stopped = host.stop(Duration::from_secs(args.stop_timeout_s)).await?;
                    (Outcome::default(), None, Some(stopped))
                }
                Command::Pressure(band) => {
                    pressure.set(*band, &self.progress, signals).await?;
                    (Outcome::default(), Some(host_process(pid)?), None)
                }
                Command::LExecuteAll(_) => {
                    let mut outcome = Outcome::default();
                    let swarm = swarm.expect("started above");
                    match locust_room::hold(swarm, signals, &exit_watch, &mut outcome).await {
                        Ok(swarm) => held = swarm,
                        Err(Abort::Interrupted(Interruption::HostExited)) => {
                            died = Some(host_gone())
                        }
                        Err(abort) => return Err(abort),
                    }
                    let after = if died.is_none() {
                        Some(host_process(pid)?)
                    } else {
                        None
                    };
                    (outcome, after, None)
                }
                _ => {
                    let watched = Watched {
                        pid,
                        exit: &exit_watch,
                        cgroup: self.cgroup.as_ref(),
                        progress: &self.progress,
                    };
                    let (outcome, ended) = run_entry(&mut workload, entry, signals, &watched).await;
                    match ended {
                        Ok(()) => (outcome, Some(host_process(pid)?), None),
                        // The entry the host died in is kept, with what it did until then:
                        // for a fill, that is the answer.
                        Err(Abort::Interrupted(Interruption::HostExited)) => {
                            died = Some(host_gone());
                            (outcome, None, None)
                        }
                        Err(abort) => return Err(abort),
                    }
                }
            };
            let took = clock.elapsed().saturating_sub(outcome.untimed);
            // Read next to `after`: a host still freeing what the entry left would otherwise
            // split one RSS and add up to another.
            let held_after = after
                .as_ref()
                .and_then(|_| Composition::read(Path::new(sample::PROC), pid));
            let mut sampling = sampler.end_entry()?;
            for reading in std::iter::once(&before).chain(&after) {
                sampling.cover_rss(reading.rss_kb);
            }
            // The kernel's own peak, between any two samples; unknown once the host is gone.
            if peak_reset
                && after.is_some()
                && let Some(peak) = process::peak_rss_kb(Path::new(sample::PROC), pid)
            {
                sampling.cover_rss(peak);
            }
            let (mut probes, stop) = probing.entry(index, stopped.as_ref())?;
            if let Some(probes) = &mut probes {
                probes.name_publishes(&std::mem::take(&mut outcome.spans));
            }
            // Asked once the sampler and the probes have read the entry: the scrape is ours,
            // not the entry's.
            let counted = match (&counted_before, &after) {
                (Some(before), Some(_)) => HostCounters::read(&client)
                    .await
                    .map(|after| after.since(before)),
                _ => None,
            };
            let composition = held_before
                .zip(held_after)
                .map(|(before, after)| EntryComposition { before, after });
            let load = match held {
                Some(swarm) => {
                    let served = counted.map(|counted| counted.requests);
                    locust_room::finish(swarm, served, &mut outcome).await
                }
                None => None,
            };
            let measure = EntryMeasure {
                index,
                cmd: entry.name.clone(),
                line: entry.line,
                repeat: entry.repeat,
                started,
                took: stopped.as_ref().map_or(took, |stopped| stopped.took),
                before,
                after,
                outcome,
                stopped,
            };
            let memcg = match (&self.cgroup, memcg_before) {
                (Some(cgroup), Some(before)) => Some(MemcgEntry {
                    limit_bytes: cgroup.limit_bytes(),
                    before,
                    after: cgroup.read()?,
                }),
                _ => None,
            };
            // Symbolised while the host runs: the stop entry's stacks die with it. A failure
            // costs the flamegraph, not the run.
            let stacks = match measure.stopped {
                None => probing.stacks(index, probes.as_ref()).unwrap_or_else(|e| {
                    self.progress
                        .note(&format!("warning: entry {index}: no stacks: {e:#}"));
                    None
                }),
                Some(_) => None,
            };
            if let Some(stacks) = &stacks {
                output::stacks::write(&self.folder, index, &measure.cmd, stacks)?;
            }
            let record = EntryRecord {
                measure,
                sampling,
                probes,
                stop,
                pressure: pressure.held(),
                memcg,
                stacks: stacks.map(|stacks| stacks.summary),
                load,
                host: counted,
                held: composition,
            };
            self.record(record)?;
            if let Some(died) = died {
                return Err(died);
            }
        }
        Ok(())
    }

    /// Starts the host in the run's folder: its skills directory, log and working directory.
    async fn start_host(
        &self,
        args: &RunArgs,
        spec: &HostSpec,
        signals: &mut Signals,
    ) -> Result<(HostProcess, SkillsDir), Abort> {
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
            .load
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
                Duration::from_secs(args.ready_timeout_s),
            ) => Ok((host?, skills)),
            interruption = signals.next() => Err(Abort::Interrupted(interruption)),
        }
    }

    /// Hands one finished entry to every output, each flushed to disk.
    fn record(&mut self, record: EntryRecord) -> Result<()> {
        let measure = &record.measure;
        let logged = harness_log::LoggedEntry::from(measure);
        self.log.write_entry(&logged)?;
        self.commands.write(&record.row())?;
        self.entries.write(&record)?;
        if let Some(probes) = &record.probes
            && let Some(rows) = &probes.skills
        {
            let counted = probes.calls_by_skill();
            self.skills
                .write(measure.index, &measure.cmd, rows, |row, cells| {
                    row.write_cells(cells, counted)
                })?;
        }
        if let Some(load) = &record.load {
            let rows: Vec<&LoadRow> = load.skills.iter().chain([&load.total]).collect();
            self.load_csv
                .write(measure.index, &measure.cmd, &rows, |row, cells| {
                    row.write_cells(cells)
                })?;
        }
        self.entries_done += 1;
        self.info.entries_run = self.entries_done;
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

    /// Stops whatever still runs, completes meta.json, and tells the user how it went.
    async fn finish(mut self, plan: &Plan, ended: Result<(), Abort>) -> Result<ExitCode> {
        let mut code = ExitCode::SUCCESS;
        if let Err(abort) = ended {
            let mut reason = match &abort {
                Abort::Interrupted(interruption) => interruption.to_string(),
                Abort::Failed(error) => format!("{error:#}"),
            };
            code = ExitCode::from(match &abort {
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
                    Err(error) => {
                        reason.push_str(&format!("; stopping the host failed: {error:#}"))
                    }
                }
            }
            if matches!(abort, Abort::Interrupted(Interruption::HostExited)) {
                self.info.oom_killed = self.oom_evidence();
                if let Some(evidence) = &self.info.oom_killed {
                    reason =
                        format!("the host was killed by the OOM killer ({evidence}); {reason}");
                }
            }
            self.info.status = Status::Incomplete;
            self.info.entries_not_run = plan.entries[self.entries_done..]
                .iter()
                .enumerate()
                .map(|(offset, entry)| format!("{}: {}", self.entries_done + offset, entry.name))
                .collect();
            self.info.reason = Some(reason);
        } else {
            self.info.status = Status::Complete;
        }
        if let Some(perf_map) = self.perf_map.take() {
            // The host is gone; its perf map was written for this run only.
            let _ = fs::remove_file(perf_map);
        }
        if let Some(mut pressure) = self.pressure.take() {
            // The machine goes back before anything else: it is not ours.
            pressure.finish().await;
            self.info.pressure_notes = pressure.notes;
            self.info.pressure_balloon_pids = pressure.balloon_pids;
        }
        if let Some(change) = self.map_limit.take()
            && let Err(error) = change.restore()
        {
            eprintln!("warning: {error:#}");
        }
        if let Some(load) = self.load.take() {
            load.finish();
        }
        if let Some(cgroup) = self.cgroup.take() {
            // The host has been stopped above or at `stop`: nothing is left inside.
            if let Err(error) = cgroup.remove() {
                eprintln!("warning: {error:#}");
            }
        }
        if let Some(sampler) = self.sampler.take() {
            let cpu = sampler.finish()?;
            self.info.sampler_cpu_ms = Some(cpu.as_secs_f64() * 1e3);
        }
        if let Some(probing) = self.probing.take() {
            let costs = probing.costs()?;
            if let Some(costs) = &costs {
                eprint!("\n{}", probes::tables::costs(costs));
                for diagnostic in &costs.diagnostics {
                    eprintln!("warning: a BPF program reported: {diagnostic}");
                }
            }
            if let Some(info) = &mut self.info.probes {
                info.costs = costs;
            }
        }
        self.progress.finish();
        self.info.finished = Some(Local::now().to_rfc3339());
        meta::write(&self.meta_path, &self.info)?;

        let table = compare::table_of(&[self.log_path.clone()])?;
        let explanation = explain::write_run(&self.folder, &self.info, &self.records)?;
        if self.json {
            eprint!("{table}\n{explanation}");
            run_json::write(
                std::io::stdout().lock(),
                &self.folder,
                &self.info,
                &self.records,
            )?;
        } else {
            print!("{table}\n{explanation}");
        }
        eprintln!("\nrun folder: {}", self.folder.display());
        if self.info.request_errors > 0 {
            eprintln!(
                "warning: {} request(s) failed; see first_error in commands.csv",
                self.info.request_errors
            );
        }
        for note in &self.info.pressure_notes {
            eprintln!("warning: {note}");
        }
        if let Some(reason) = &self.info.reason {
            eprintln!("run incomplete: {reason}");
            eprintln!("not run: {}", self.info.entries_not_run.join(", "));
        }
        Ok(code)
    }
}

/// The host as an entry watches it: its process, its exit, its memory cgroup.
struct Watched<'a> {
    pid: u32,
    exit: &'a ExitWatch,
    cgroup: Option<&'a MemoryCgroup>,
    progress: &'a Progress,
}

impl Watched<'_> {
    /// The host's memory after a step, and its cgroup's account read for it.
    fn step(&self) -> Result<(Step, Option<MemcgStat>), Abort> {
        let memcg = self.cgroup.map(MemoryCgroup::read).transpose()?;
        let step = Step {
            rss_kb: alive(process::read(Path::new(sample::PROC), self.pid))?.rss_kb,
            memcg_kb: memcg.map(|memcg| memcg.usage_bytes / 1024),
        };
        Ok((step, memcg))
    }
}

/// Runs one entry (its command `repeat` times, or a fill) unless interrupted or the host
/// exits; what it did until then is in the outcome either way.
async fn run_entry(
    workload: &mut Workload,
    entry: &Entry,
    signals: &mut Signals,
    host: &Watched<'_>,
) -> (Outcome, Result<(), Abort>) {
    let mut outcome = Outcome::default();
    let mut ended = {
        let steps = async {
            match entry.command {
                Command::Fill { kind, max } => fill(workload, kind, max, host, &mut outcome).await,
                ref command => {
                    for _ in 0..entry.repeat {
                        workload.run(command, &mut outcome).await?;
                        outcome.steps.push(host.step()?.0);
                    }
                    Ok(())
                }
            }
        };
        tokio::select! {
            done = steps => done,
            interruption = signals.next() => Err(Abort::Interrupted(interruption)),
            () = host.exit.exited() => Err(host_gone()),
        }
    };
    // A dying host resets its connections a moment before it becomes a zombie, so the
    // requests can fail first: an entry that saw failures waits a moment to know whether
    // they were the host's death.
    if ended.is_ok()
        && outcome.errors > 0
        && tokio::time::timeout(DEATH_GRACE, host.exit.exited())
            .await
            .is_ok()
    {
        ended = Err(host_gone());
    }
    if let (Some(fill), Err(Abort::Interrupted(Interruption::HostExited))) =
        (&mut outcome.fill, &ended)
    {
        fill.stopped = FillStop::Killed;
    }
    (outcome, ended)
}

/// Adds skills one at a time until the cgroup reaches its limit, one fails, or `max` fit.
async fn fill(
    workload: &mut Workload,
    kind: SkillKind,
    max: u32,
    host: &Watched<'_>,
    outcome: &mut Outcome,
) -> Result<(), Abort> {
    let cgroup = host
        .cgroup
        .expect("a fill without --memory-max is refused before the run");
    let hits_before = cgroup.read()?.limit_hits;
    let mut fill = Fill {
        fitted: 0,
        stopped: FillStop::Bound,
    };
    outcome.fill = Some(fill);
    for _ in 0..max {
        let errors = outcome.errors;
        workload.add(kind, 1, outcome).await?;
        let (step, memcg) = host.step()?;
        outcome.steps.push(step);
        let memcg = memcg.expect("the cgroup is read with every step");
        let hits = memcg.limit_hits - hits_before;
        let stopped = if outcome.errors > errors {
            Some(FillStop::Failed)
        } else if hits > 0 {
            Some(FillStop::Limit { hits })
        } else {
            None
        };
        match stopped {
            Some(stopped) => {
                fill.stopped = stopped;
                outcome.fill = Some(fill);
                return Ok(());
            }
            None => {
                fill.fitted += 1;
                outcome.fill = Some(fill);
                host.progress.note(&format!(
                    "  fill: {} skill(s) held, the cgroup charged {} of {}",
                    fill.fitted,
                    units::bytes(memcg.usage_bytes as f64),
                    units::bytes(cgroup.limit_bytes() as f64)
                ));
            }
        }
    }
    Ok(())
}

/// A fill without a limit would fill the machine: refused before anything starts, as is a
/// limit without the root it needs.
fn require_limits_usable(
    memory_max: Option<u64>,
    max_map_count: Option<u64>,
    plan: &Plan,
) -> Result<()> {
    let fill = plan
        .entries
        .iter()
        .find(|entry| matches!(entry.command, Command::Fill { .. }));
    if let (Some(entry), None) = (fill, memory_max) {
        anyhow::bail!(
            "line {}: {} adds skills until the host holds no more, which needs a limit: give \
             --memory-max SIZE (a memory cgroup for the host), or the machine itself is filled",
            entry.line.unwrap_or(0),
            entry.name
        );
    }
    let why = match (memory_max, max_map_count) {
        (Some(_), _) => "--memory-max makes a memory cgroup for the host",
        (None, Some(_)) => "--max-map-count sets vm.max_map_count for the whole machine",
        (None, None) => return Ok(()),
    };
    if !crate::system::running_as_root() {
        anyhow::bail!("{why}, which needs root: run as root (e.g. `sudo skillprof run ...`)");
    }
    Ok(())
}

const MAX_MAP_COUNT: &str = "vm.max_map_count";

/// How long the end of a dying host's exit may lag its closed connections.
const DEATH_GRACE: Duration = Duration::from_secs(1);

fn host_gone() -> Abort {
    Abort::Interrupted(Interruption::HostExited)
}

/// Resets the host's RSS high-water mark for the next entry, so that rss_peak_kb is the
/// kernel's own peak of that entry. The first attempt says in meta.json how the peak is
/// measured; a refusal (not root, nor the host's user) is said once, and the peak is then the
/// samples'.
fn reset_peak(info: &mut RunInfo, progress: &Progress, pid: u32) -> bool {
    let reset = process::reset_peak(Path::new(sample::PROC), pid);
    if info.rss_peak.is_none() {
        let how = match &reset {
            Ok(()) => format!(
                "VmHWM of /proc/PID/status, the kernel's high-water mark, reset at each \
                 entry's start by writing 5 to /proc/PID/clear_refs{}",
                if info.host.attached {
                    " (done on the attached host too: it changes only its VmHWM)"
                } else {
                    ""
                }
            ),
            Err(error) => {
                let how = format!(
                    "the samples' most (every {} ms and at both boundaries): /proc/{pid}/\
                     clear_refs refused the reset ({error}), so a peak between samples is \
                     missed",
                    info.sampling_interval_ms
                );
                progress.note(&format!("warning: rss_peak_kb is {how}"));
                how
            }
        };
        info.rss_peak = Some(how);
    }
    reset.is_ok()
}

/// The host's counters at an entry's boundary; their absence means it died.
fn host_process(pid: u32) -> Result<ProcessStat, Abort> {
    alive(process::at_boundary(Path::new(sample::PROC), pid))
}

fn alive(read: Result<ProcessStat, ProcessError>) -> Result<ProcessStat, Abort> {
    match read {
        Ok(stat) => Ok(stat),
        Err(ProcessError::Gone { .. }) => Err(host_gone()),
        Err(error) => Err(Abort::Failed(error.into())),
    }
}

/// `--attach PID`: the running host, checked (see `hostctl::attach`) before anything is made.
/// Without `--skills-dir`, only a plan that writes no skill file, and only the host's answer
/// is checked: nothing is written where the host reads.
async fn attach_host(
    args: &RunArgs,
    plan: &Plan,
    profile: HostProfile,
    pid: u32,
    samples: &SampleSkills,
) -> Result<(HostSpec, Option<(HostProcess, Option<SkillsDir>)>)> {
    let Some(url) = &args.host_url else {
        anyhow::bail!("--attach needs --host-url");
    };
    let Some(dir) = &args.skills_dir else {
        if let Some(entry) = plan
            .entries
            .iter()
            .find(|entry| entry.command.writes_skills())
        {
            anyhow::bail!(
                "{}:{}: `{}` registers or removes skills, and --attach was given no \
                 --skills-dir (the directory the host registers `<name>.wasm` files from)",
                args.cmds.display(),
                entry.line.unwrap_or(0),
                entry.name
            );
        }
        let client = attach::answering(pid, url, profile.dialect.clone()).await?;
        let host = HostProcess::attached(pid, client);
        return Ok((HostSpec::attached(profile, pid)?, Some((host, None))));
    };
    // The checks first: they say what is wrong with the input (an exited process, say)
    // where reading its binary from /proc would only fail.
    let (host, skills) = attach::attach(
        pid,
        url,
        dir,
        profile.clone(),
        &samples.path("hello")?,
        Duration::from_secs(args.list_timeout_s),
    )
    .await?;
    Ok((
        HostSpec::attached(profile, pid)?,
        Some((host, Some(skills))),
    ))
}

fn host_spec(args: &RunArgs, profile: HostProfile, cores: Option<Cores>) -> Result<HostSpec> {
    // skillhost names its JIT-compiled wasm functions in /tmp/perf-PID.map; other hosts
    // ignore the variable.
    let env = match args.stacks {
        true => vec![("SKILLHOST_PERFMAP".to_owned(), "true".to_owned())],
        false => Vec::new(),
    };
    let mut spec = args.host.spec(profile, &args.host_flags, &env)?;
    if let Some(cores) = cores {
        Cores::check_env(&spec.env).map_err(anyhow::Error::msg)?;
        spec.env.extend(cores.env());
    }
    Ok(spec)
}

fn sha1_of(path: &Path) -> Result<String> {
    let bytes = fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(Sha1::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}
