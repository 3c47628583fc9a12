//! The runner's side of `l_execute_all` and `lo_execute`: the load network and Locust's cgroup, made once for
//! the run when its file has such a line, and one swarm per entry.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Result, bail};
use async_trait::async_trait;

use crate::ground::cmds::{Command, Entry, Load, Plan};
use crate::producers::hostctl::{Client, ExitWatch, SampleSkills};
use crate::producers::locust::{LoadNetwork, Swarm, SwarmSetup};
use crate::producers::system::cgroup::Cgroup;
use crate::record::locust::{LoadEntry, NetworkInfo};
use crate::record::{EntryRecord, Outcome, RunInfo};

use super::args::RunArgs;
use super::interrupt::{Abort, Interruption, Signals};
use super::measure::{Begin, Host, Measurer, Running};

/// How long workers get to connect without `--locust-timeout-s`.
pub const DEFAULT_CONNECT_TIMEOUT_S: u64 = 60;

/// Where `scripts/setup.sh` installs Locust, under the repository's `build/`.
const LOCUST: &str = "venv-locust/bin/locust";

/// The load lines of `plan`, checked before anything runs: the network needs root, an
/// attached host listens where it was told to (not on the run's bridge), and Locust must
/// be installed. Returns the Locust to run and the most workers a line wants.
pub fn require_usable(args: &RunArgs, plan: &Plan) -> Result<Option<(PathBuf, u32)>> {
    let loads: Vec<(&Load, usize)> = plan
        .entries
        .iter()
        .filter_map(|entry| match &entry.command {
            Command::LExecuteAll(load) => Some((load, entry.line.unwrap_or(0))),
            _ => None,
        })
        .collect();
    let Some(&(first, line)) = loads.first() else {
        // A Locust flag on a file without load lines would be silently ignored.
        let flag = match (&args.locust, args.locust_timeout_s) {
            (Some(_), _) => "--locust",
            (None, Some(_)) => "--locust-timeout-s",
            (None, None) => return Ok(None),
        };
        bail!(
            "{flag} is for l_execute_all and lo_execute lines, and {} has none",
            args.cmds.display()
        );
    };
    if args.attach.is_some() {
        bail!(
            "line {line}: {} sends load from network namespaces of the run's making \
             to a host that listens on their bridge, so it needs a host the run starts: drop \
             --attach",
            first.command()
        );
    }
    if !crate::producers::system::running_as_root() {
        bail!(
            "line {line}: {} makes network namespaces for Locust's workers, which \
             needs root: run as root (e.g. `sudo skillprof run ...`)",
            first.command()
        );
    }
    let locust = match &args.locust {
        Some(path) => path.clone(),
        None => SampleSkills::build_path(LOCUST)?,
    };
    if !locust.is_file() {
        bail!(
            "line {line}: {} needs Locust, and {} is missing: run `scripts/setup.sh` \
             (it installs the pinned Locust into build/venv-locust), or pass --locust PATH",
            first.command(),
            locust.display()
        );
    }
    let workers = loads
        .iter()
        .map(|(load, _)| load.workers)
        .max()
        .unwrap_or(1);
    Ok(Some((locust, workers)))
}

/// The run's load network and Locust cgroup, until [`LoadRoom::finish`] (or the guardians,
/// on any other way the run ends).
pub struct LoadRoom {
    /// The run folder's `locust/`.
    folder: PathBuf,
    network: LoadNetwork,
    cgroup: Cgroup,
    locust: PathBuf,
    connect_timeout: Duration,
}

impl LoadRoom {
    pub fn create(
        locust: PathBuf,
        workers: u32,
        stamp: &str,
        connect_timeout: Duration,
        run_folder: &Path,
    ) -> Result<Self> {
        let cgroup = Cgroup::create(&format!("skillprof-locust-{stamp}"), "Locust's cgroup")?;
        let network = LoadNetwork::create(workers)?;
        Ok(LoadRoom {
            folder: run_folder.join("locust"),
            network,
            cgroup,
            locust,
            connect_timeout,
        })
    }

    /// Where the host listens: the bridge's host address.
    pub fn host_address(&self) -> Ipv4Addr {
        self.network.info().host_address
    }

    pub fn network(&self) -> &NetworkInfo {
        self.network.info()
    }

    pub fn cgroup_dir(&self) -> &Path {
        self.cgroup.dir()
    }

    pub fn guardian_pids(&self) -> impl Iterator<Item = u32> {
        self.network
            .guardian_pid()
            .into_iter()
            .chain(self.cgroup.guardian_pid())
    }

    /// Starts entry `index`'s swarm on this run's skills the host lists, unless interrupted.
    /// `Ok(Err(..))`: the swarm could not start, which fails the entry, not the run.
    pub async fn start(
        &self,
        index: usize,
        load: &Load,
        client: &Client,
        skills: Vec<String>,
        signals: &mut Signals,
    ) -> Result<Result<Swarm>, Abort> {
        let setup = SwarmSetup {
            locust: &self.locust,
            network: &self.network,
            cgroup: &self.cgroup,
            folder: &self.folder,
            host: client.base(),
            dialect: client.dialect(),
            connect_timeout: self.connect_timeout,
        };
        tokio::select! {
            swarm = Swarm::start(&setup, index, load, &skills) => Ok(swarm),
            interruption = signals.next() => Err(Abort::Interrupted(interruption)),
        }
    }

    /// Removes the network and the cgroup (killing any Locust process left), reporting
    /// what could not be undone.
    pub fn finish(self) {
        for removed in [self.cgroup.remove(), self.network.remove()] {
            if let Err(error) = removed {
                eprintln!("warning: {error:#}");
            }
        }
    }
}

/// Locust as an entry's measurer: a load line's swarm starts before the entry's window (its
/// start-up is not the host's work), is held as the entry's command, and is read once the
/// host's own count of what it served is known.
pub struct Locust {
    room: Option<LoadRoom>,
    /// Started for the entry; `Err`: it could not start, which fails the entry.
    starting: Option<Result<Swarm>>,
    held: Option<Swarm>,
}

impl Locust {
    pub fn new(room: LoadRoom) -> Self {
        Locust {
            room: Some(room),
            starting: None,
            held: None,
        }
    }
}

#[async_trait(?Send)]
impl Measurer for Locust {
    async fn begin(&mut self, begin: &mut Begin<'_>) -> Result<(), Abort> {
        let Command::LExecuteAll(load) = &begin.entry.command else {
            return Ok(());
        };
        let room = self.room.as_ref().expect("made for a plan with load lines");
        let skills = begin
            .load_skills
            .take()
            .expect("the runner lists a load line's skills");
        self.starting = Some(match skills {
            Ok(skills) => {
                begin.host.progress.note(&format!(
                    "  locust: starting the master and {} worker(s) in their namespaces",
                    load.workers
                ));
                room.start(begin.index, load, begin.host.client, skills, begin.signals)
                    .await?
            }
            Err(error) => Err(error),
        });
        Ok(())
    }

    async fn run(
        &mut self,
        _entry: &Entry,
        running: &mut Running<'_>,
    ) -> Option<Result<(), Abort>> {
        let swarm = self.starting.take()?;
        Some(
            hold(swarm, running.signals, running.exit, running.outcome)
                .await
                .map(|held| self.held = held),
        )
    }

    async fn end(&mut self, record: &mut EntryRecord, _host: Host<'_>) -> Result<(), Abort> {
        if let Some(swarm) = self.held.take() {
            let served = record.host.map(|counted| counted.requests);
            record.load = finish(swarm, served, &mut record.measure.outcome).await;
        }
        Ok(())
    }

    async fn finish(&mut self, _info: &mut RunInfo) -> Result<()> {
        if let Some(room) = self.room.take() {
            room.finish();
        }
        Ok(())
    }
}

/// Holds the entry's swarm, unless it could not start (the entry then fails with the reason)
/// or the run is interrupted, or the host exits. Returns the swarm to read once the entry's
/// window is closed; a swarm that failed while held is ended here, its failure counted.
async fn hold(
    swarm: Result<Swarm>,
    signals: &mut Signals,
    exit: &ExitWatch,
    outcome: &mut Outcome,
) -> Result<Option<Swarm>, Abort> {
    let mut swarm = match swarm {
        Ok(swarm) => swarm,
        Err(error) => {
            outcome.fail(format!("Locust: {error:#}"));
            return Ok(None);
        }
    };
    tokio::select! {
        held = swarm.hold() => match held {
            Ok(()) => Ok(Some(swarm)),
            Err(error) => {
                outcome.fail(format!("Locust: {error:#}"));
                Ok(None)
            }
        },
        interruption = signals.next() => Err(Abort::Interrupted(interruption)),
        () = exit.exited() => Err(Abort::Interrupted(Interruption::HostExited)),
    }
}

/// Reads the held swarm's figures into the entry's outcome: Locust's requests and failures
/// are the entry's, its first distinct failure the entry's first error.
async fn finish(swarm: Swarm, served: Option<u64>, outcome: &mut Outcome) -> Option<LoadEntry> {
    match swarm.finish(served).await {
        Ok(load) => {
            outcome.requests += load.total.requests;
            outcome.errors += load.total.failures;
            if let Some((error, times)) = load.errors.first() {
                outcome
                    .first_error
                    .get_or_insert_with(|| format!("{error} ({times}×)"));
            }
            Some(load)
        }
        Err(error) => {
            outcome.fail(format!("reading Locust's figures: {error:#}"));
            None
        }
    }
}
