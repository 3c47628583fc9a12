//! The run's flags as one validated configuration, made before anything starts: every check
//! that can refuse the run (privileges, limits, the host profile, Locust, an attached host)
//! happens here, and nothing after this module reads `RunArgs`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use chrono::{DateTime, Local};

use crate::ground::band::Band;
use crate::ground::cmds::{Command, InFlightCap, Plan};
use crate::ground::machine::Machine;
use crate::producers::hostctl::{HostProcess, SampleSkills, SkillsDir, attach, trim};
use crate::producers::probes::{
    self, ProbeOptions,
    time::{DEFAULT_HZ, OffCpuMode},
};
use crate::producers::system::sysctl;
use crate::record::host::{Cores, TrimBy};
use crate::record::profile::{HostProfile, HostSpec, PythonSample, Registry};
use crate::views::output::harness_log;

use super::args::RunArgs;
use super::balloon as balloon_room;
use super::locust as locust_room;
use super::workload;

/// A host skillprof did not start, with the skills directory it registers from (if given).
pub type Attached = (HostProcess, Option<SkillsDir>);

/// Everything a run needs to know, checked.
pub struct RunConfig {
    pub plan: Plan,
    /// The cmds file as given.
    pub cmds: PathBuf,
    pub spec: HostSpec,
    /// `--attach`: the running host, checked.
    pub attached: Option<Attached>,
    /// The sample components `add` copies; `None` for a host attached without --skills-dir.
    pub samples: Option<SampleSkills>,
    pub machine: Machine,
    pub cores: Option<Cores>,
    /// When the run started, which names it.
    pub started: DateTime<Local>,
    pub stamp: String,
    pub folder: PathBuf,
    /// `--run-dir`: a folder given, which must be empty.
    pub folder_given: bool,
    /// `--json`: the records on stdout, the prose on stderr.
    pub json: bool,
    pub ready_timeout: Duration,
    pub stop_timeout: Duration,
    /// `--stop-attached`: an attached host is stopped at `stop` too.
    pub stop_attached: bool,
    /// `--stacks`: the host names its JIT frames in a perf map, removed at the end.
    pub stacks: bool,
    pub workload: workload::Settings,
    pub python_sample: PythonSample,
    pub atomic_copy: bool,
    pub interval: Duration,
    /// `None` under `--no-probes`.
    pub probes: Option<ProbeOptions>,
    pub pressure: PressureConfig,
    pub memory_max: Option<u64>,
    pub max_map_count: Option<u64>,
    pub overcommit_memory: Option<u64>,
    /// A plan with load lines: the Locust to run, the most workers a line wants, and how long
    /// they get to connect.
    pub locust: Option<(PathBuf, u32, Duration)>,
}

/// `--pressure`, `--scale-factor`, `--boost-factor` and how long a band may take to settle.
pub struct PressureConfig {
    pub band: Option<Band>,
    pub scale_factor: Option<u32>,
    pub boost_factor: Option<u32>,
    pub settle_timeout: Duration,
}

impl RunConfig {
    /// Checks the flags against the plan and the machine, and attaches to `--attach`'s host.
    pub async fn new(args: RunArgs, plan: Plan) -> Result<RunConfig> {
        if !args.no_probes {
            // Before anything starts: a run that cannot probe would leave a half-made folder.
            match args.attach {
                // A host already running can be probed without root: say which capability
                // of those it takes is missing.
                Some(pid) => probes::privileges::require(
                    "skillprof run --attach",
                    &probes::privileges::needed(
                        Some(pid),
                        !args.no_markers,
                        nix::unistd::geteuid().as_raw(),
                    )?,
                )?,
                None => probes::require_bpf_for_run()?,
            }
        }
        balloon_room::require_root_if_used(
            args.pressure,
            sysctl::watermark_settings(args.scale_factor, args.boost_factor),
            &plan,
        )?;
        require_limits_usable(
            args.memory_max,
            args.max_map_count.or(args.overcommit_memory),
            &plan,
        )?;
        let locust = locust_room::require_usable(&args, &plan)?.map(|(locust, workers)| {
            let timeout = args
                .locust_timeout_s
                .unwrap_or(locust_room::DEFAULT_CONNECT_TIMEOUT_S);
            (locust, workers, Duration::from_secs(timeout))
        });
        let profile = HostProfile::load(&args.host_profile)?;
        profile.dialect.routes.registry().with_context(|| {
            format!(
                "--host-profile {}: `skillprof run` adds and drops skills while the host runs; \
                 measure this host's traffic with `skillprof slo --host-profile {0}`",
                args.host_profile
            )
        })?;
        let trim_by = trim_by(&args, &plan, &profile)?;
        let world = profile.registry.world;
        served(&args, &plan, &profile.registry)?;
        // An attached host may serve skills of its own, which a mix may name.
        if let (None, Some((entry, skill))) = (args.attach, plan.unregistered_mix_skill()) {
            anyhow::bail!(
                "{}:{}: the mix sends to {skill:?}, and no line before it registers a skill of \
                 that name (add FILE NAME, p_add N FILE, add_rs, ...): every request to it \
                 would fail",
                args.cmds.display(),
                entry.line.unwrap_or(0)
            );
        }
        let samples = match &args.samples {
            Some(dir) => Some(SampleSkills::new(dir, world)),
            // A host attached without --skills-dir is given no skill (attach_host checks the
            // plan): a skillprof installed apart from its repository's build folder (as a
            // watch's recording may run it) needs none.
            None if args.attach.is_some() && args.skills_dir.is_none() => None,
            None => Some(SampleSkills::beside_executable(world)?),
        };
        let machine = Machine::read()?;
        let cores = args
            .cores
            .map(|cores| Cores::new(cores, u32::try_from(machine.cores).unwrap_or(u32::MAX)));
        let (spec, attached) = match (args.attach, cores) {
            (Some(pid), Some(cores)) => anyhow::bail!(
                "--cores {} cannot emulate a machine for process {pid}, which is already \
                 running: its compile threads, async workers and malloc arenas were sized when \
                 it started. Let skillprof start the host (drop --attach), or restart it with {}",
                cores.cores,
                cores
                    .env()
                    .iter()
                    .map(|(name, value)| format!("{name}={value}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
            (Some(pid), None) => attach_host(&args, &plan, profile, pid, samples.as_ref()).await?,
            (None, _) => (host_spec(&args, profile, cores)?, None),
        };
        let started = Local::now();
        let stamp = harness_log::stamp(started);
        let folder = args
            .run_dir
            .clone()
            .unwrap_or_else(|| args.out.join(&stamp));
        let probes = match args.no_probes {
            true => None,
            false => {
                let events = args
                    .events
                    .then(|| folder.join(crate::producers::probes::events::FILE));
                let mut options = args
                    .mechanisms
                    .options(events, plan.entries.len() as u32 + 1)?;
                options.stacks = args.stacks;
                (options.mode, options.mode_why) = match args.probe_mode()? {
                    Some(mode) => (mode, None),
                    None => {
                        let (mode, why) = crate::producers::probes::lab_default::choose();
                        (mode, Some(why))
                    }
                };
                options.syscall_latency = args.syscall_latency;
                options.no_markers = args.no_markers;
                let off_cpu = match attached {
                    Some(_) => OffCpuMode::States,
                    None => OffCpuMode::Waits,
                };
                options.time = args.time.options(off_cpu, DEFAULT_HZ)?;
                // Where the host's component files are: the run's own skills folder for a
                // host it starts, the directory given for one it attaches to.
                options.skills_dir = match &attached {
                    Some(_) => args.skills_dir.clone(),
                    None => Some(SkillsDir::of_run(&folder)),
                };
                Some(options)
            }
        };
        Ok(RunConfig {
            workload: workload::Settings {
                python: args.python_sample,
                cap: InFlightCap::new(args.max_in_flight),
                list_timeout: Duration::from_secs(args.list_timeout_s),
                in_place: args.no_atomic_copy,
                trim_by,
                load_cpus: args.load_cpus.clone(),
            },
            plan,
            cmds: args.cmds,
            spec,
            attached,
            samples,
            machine,
            cores,
            started,
            stamp,
            folder,
            folder_given: args.run_dir.is_some(),
            json: args.json,
            ready_timeout: Duration::from_secs(args.ready_timeout_s),
            stop_timeout: Duration::from_secs(args.stop_timeout_s),
            stop_attached: args.stop_attached,
            stacks: args.stacks,
            python_sample: args.python_sample,
            atomic_copy: !args.no_atomic_copy,
            interval: Duration::from_millis(args.interval_ms),
            probes,
            pressure: PressureConfig {
                band: args.pressure,
                scale_factor: args.scale_factor,
                boost_factor: args.boost_factor,
                settle_timeout: Duration::from_secs(args.pressure_timeout_s),
            },
            memory_max: args.memory_max,
            max_map_count: args.max_map_count,
            overcommit_memory: args.overcommit_memory,
            locust,
        })
    }

    /// Makes the run folder: `--run-dir`, created if missing and refused unless empty; or a
    /// new folder named by the run's time stamp under `--out`.
    pub fn make_folder(&self) -> Result<()> {
        let folder = &self.folder;
        std::fs::create_dir_all(folder)
            .with_context(|| format!("creating the run folder {}", folder.display()))?;
        if self.folder_given {
            let mut inside = std::fs::read_dir(folder)
                .with_context(|| format!("reading the run folder {}", folder.display()))?;
            ensure!(
                inside.next().is_none(),
                "--run-dir {} is not empty: a run folder holds one run (name a new or empty \
                 folder)",
                folder.display()
            );
        }
        Ok(())
    }
}

/// How `trim` lines reach the host's allocator; `--trim-by` on a plan without one is refused.
fn trim_by(args: &RunArgs, plan: &Plan, profile: &HostProfile) -> Result<Option<TrimBy>> {
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
    trim_line
        .map(|entry| trim::resolve(args.trim_by, profile, entry.line.unwrap_or(0)))
        .transpose()
}

/// A fill without a limit would fill the machine: refused before anything starts, as is a
/// limit without the root it needs (`sysctl`: a machine-wide one the run sets).
fn require_limits_usable(memory_max: Option<u64>, sysctl: Option<u64>, plan: &Plan) -> Result<()> {
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
    let why = match (memory_max, sysctl) {
        (Some(_), _) => "--memory-max makes a memory cgroup for the host",
        (None, Some(_)) => {
            "--max-map-count and --overcommit-memory set a sysctl for the whole machine"
        }
        (None, None) => return Ok(()),
    };
    if !crate::producers::system::running_as_root() {
        anyhow::bail!("{why}, which needs root: run as root (e.g. `sudo skillprof run ...`)");
    }
    Ok(())
}

/// Refuses a plan that adds a component of a world the host does not serve: the host would
/// list it and fail every request to it.
fn served(args: &RunArgs, plan: &Plan, registry: &Registry) -> Result<()> {
    for entry in &plan.entries {
        let Command::AddFile { file, exports, .. } = &entry.command else {
            continue;
        };
        if let Some(why) = registry.refuses(exports, &args.host_profile) {
            anyhow::bail!(
                "{}:{}: {} {why}",
                args.cmds.display(),
                entry.line.unwrap_or(0),
                file.display()
            );
        }
    }
    Ok(())
}

/// `--attach PID`: the running host, checked (see `hostctl::attach`) before anything is made.
/// Without `--skills-dir`, only a plan that writes no skill file, and only the host's answer
/// is checked: nothing is written where the host reads.
async fn attach_host(
    args: &RunArgs,
    plan: &Plan,
    profile: HostProfile,
    pid: u32,
    samples: Option<&SampleSkills>,
) -> Result<(HostSpec, Option<Attached>)> {
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
        &samples
            .expect("samples are found for a host attached with --skills-dir")
            .path("hello")?,
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

/// The file's SHA-1, as the harness's log header names the host binary.
pub fn sha1_of(path: &Path) -> Result<String> {
    use sha1::{Digest, Sha1};
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(Sha1::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}
