//! `skillprof watch`: profiles a running host until stopped, in the probes' default mode
//! (nothing runs for other processes), and serves what it counts as a Prometheus target.
//! The probes count into one entry for the whole watch, never reset, so every figure a
//! scrape reads only grows; Prometheus takes the windows (`rate`, `increase`).
//!
//! Stopping (SIGINT, SIGTERM, `--duration`) drops the probes and leaves the host running,
//! untouched; a SIGKILL of skillprof leaves nothing attached either (the kernel drops a
//! process's BPF links with its file descriptors).

pub(crate) mod exposition;
mod follow;
mod host;
mod privileges;
mod record;
mod serve;
mod snapshot;
mod web_config;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use tokio::net::TcpListener;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::Notify;

use crate::ground::cmds::MAX_WATCH_S;
use crate::producers::hostctl::process::ExitWatch;
use crate::producers::hostctl::{Client, HostStartArgs};
use crate::producers::probes::time::{OffCpuMode, TimeArgs, TimeOptions, WATCH_HZ};
use crate::producers::probes::{self, ProbeOptions, ProbeSession};
use crate::record::probes::ProbeMode;
use crate::record::profile::HostProfile;
use crate::record::time::TimeProfile;
use host::Watched;
use snapshot::Reader;

/// Watch a skill host until stopped, and serve per-skill and per-host series to Prometheus
/// (OpenMetrics on --listen, loopback by default): a running host (--attach PID --host-url
/// URL), left running when the watch ends, or one skillprof starts as `run` does
/// (--skills-dir DIR, --host-profile, --host-bin ...) and stops when the watch ends. Probes
/// run in the default mode: no syscall or page-fault program, nothing that costs other
/// processes. Per-skill series need a host that marks its work (skillhost); any host gets
/// the host series.
#[derive(Args, Debug)]
pub struct WatchArgs {
    /// The process id of a running host to watch (under systemd, in a container, by hand).
    /// Without it, skillprof starts the host.
    #[arg(
        long,
        value_name = "PID",
        requires = "host_url",
        conflicts_with_all = [
            "skills_dir", "host_port", "host_log", "host_bin", "host_args", "host_env",
            "ready_timeout_s", "stop_timeout_s",
        ]
    )]
    pub attach: Option<u32>,

    /// With --attach: where the host answers, for the check that it is the host (its health
    /// route).
    #[arg(long, value_name = "URL", requires = "attach")]
    pub host_url: Option<String>,

    /// Without --attach: the directory of `<name>.wasm` skills the started host serves (the
    /// profile's `{skills_dir}`); the watch writes nothing there.
    #[arg(long, value_name = "DIR", required_unless_present = "attach")]
    pub skills_dir: Option<PathBuf>,

    /// Without --attach: the port the started host serves on, on 127.0.0.1 [default: a free
    /// one, printed on stderr].
    #[arg(long, value_name = "PORT")]
    pub host_port: Option<u16>,

    #[command(flatten)]
    pub host: HostStartArgs,

    /// Without --attach: where the started host's output goes [default: host.log in --record's
    /// DIR, else skillprof-watch-PID-host.log in the temporary directory].
    #[arg(long, value_name = "FILE")]
    pub host_log: Option<PathBuf>,

    /// Without --attach: how long the started host may take to answer its health route.
    #[arg(long, default_value_t = 60, value_name = "S")]
    pub ready_timeout_s: u64,

    /// Without --attach: how long the started host may take to exit after SIGTERM when the
    /// watch ends, before it is SIGKILLed.
    #[arg(long, default_value_t = 120, value_name = "S")]
    pub stop_timeout_s: u64,

    /// The host's API: `skillhost` (default), a profile shipped with skillprof
    /// (`pharia-kernel-2024`, `pharia-engine-2025`), or a TOML file (docs/profiles.md).
    #[arg(long, default_value = "skillhost", value_name = "NAME|FILE")]
    pub host_profile: String,

    /// Serve OpenMetrics at http://ADDR/metrics (https with --web-config's TLS). Loopback by
    /// default; any other address is refused without --web-config (or --insecure-listen), as
    /// it would show the host's skill names and memory to whoever can reach it.
    #[arg(long, default_value = "127.0.0.1:9477", value_name = "ADDR")]
    pub listen: SocketAddr,

    /// Protect the endpoint as Prometheus' exporters do: a web configuration file in the
    /// exporter-toolkit format (tls_server_config: cert_file, key_file, client_ca_file,
    /// client_auth_type, min_version; basic_auth_users: user to bcrypt hash). See
    /// docs/watch.md.
    #[arg(long, value_name = "FILE")]
    pub web_config: Option<PathBuf>,

    /// Serve plain, unauthenticated HTTP on a --listen address off loopback anyway (behind a
    /// proxy that adds TLS and authentication, say).
    #[arg(long)]
    pub insecure_listen: bool,

    /// With --attach: when the host exits, keep serving and attach to the process that takes
    /// its place (a systemd or container restart, a deploy): the one listening on --host-url's
    /// port that runs the same executable in the same cgroups. The host series count from 0
    /// again for it (a counter reset, which rate() and increase() take in their stride), and
    /// skillprof_watch_host_restarts_total counts the restarts. Without it, the watch ends
    /// with exit code 3 when the host exits.
    #[arg(long, requires = "attach")]
    pub follow: bool,

    /// With --attach, started as root: once the probes are attached and the host's files are
    /// open, become USER (its uid and group, no other group) with no capability left, for the
    /// rest of the watch. With --follow or --record, which attach again later, become USER at
    /// once, holding only the capabilities attaching needs (docs/watch.md) and never
    /// CAP_SYS_ADMIN; a --record DIR must then be USER's to write.
    #[arg(long, value_name = "USER", requires = "attach")]
    pub user: Option<String>,

    /// The most skills whose series a scrape serves: beyond it the least busy (fewest runs
    /// since the watch began) are left out, and skillprof_watch_skills_left_out says how many.
    /// A skill is 63 series (seven counters in each of four phases, seven failure reasons,
    /// its recompiles, its requests answered and their latency's 26: 24 buckets, count, sum);
    /// Prometheus takes tens of thousands per target well.
    #[arg(long, default_value_t = 1000, value_name = "N",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
    pub max_skills: usize,

    /// Stop after this many seconds (default: until SIGINT or SIGTERM).
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<u64>,

    /// Leave the host's markers unread: host series only, no skill series.
    #[arg(long)]
    pub no_markers: bool,

    /// The continuous profile served at /debug/pprof/profile?seconds=N (the CPU of the
    /// host's threads by stack, labelled by skill and phase; what Parca and Pyroscope
    /// scrape), off a CPU off by default.
    #[command(flatten)]
    pub time: TimeArgs,

    /// Which probes run: `host-only` (the default: no program on any syscall or fault path,
    /// so only the host pays) or `exact` (every memory call and page fault of the host, by
    /// kind and skill, from programs every process on the machine passes through; see
    /// `skillprof run --help`).
    #[arg(long, value_enum, value_name = "MODE", default_value = "host-only")]
    pub probes: ProbeMode,

    /// Also record the host's life as run folders in DIR, one entry per --window, one folder
    /// per --run-windows, for report, compare, export and capacity, each with its explain.md.
    /// Each folder is a `skillprof run --attach` of `watch SECONDS` lines (its log in
    /// DIR/record.log).
    #[arg(long, value_name = "DIR")]
    pub record: Option<PathBuf>,

    /// With --record: seconds per entry.
    #[arg(long, default_value_t = 60, value_name = "SECONDS", requires = "record",
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_WATCH_S)))]
    pub window: u32,

    /// With --record: entries per run folder (a folder of 60 one-minute windows is an hour).
    #[arg(long, default_value_t = 60, value_name = "N", requires = "record",
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub run_windows: u32,

    /// With --record: the run folders of this watch to keep; older ones are removed as new
    /// ones are finished (folders already in DIR are never touched).
    #[arg(long, default_value_t = 24, value_name = "N", requires = "record",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub keep: u64,
}

pub fn run(args: WatchArgs) -> Result<ExitCode> {
    if let Some(user) = &args.user {
        // Before any thread starts, so that every one inherits it: nothing the watch runs
        // later can gain privileges through a setuid binary.
        nix::sys::prctl::set_no_new_privs().context("--user: PR_SET_NO_NEW_PRIVS")?;
        if attaches_again(&args) {
            let account = privileges::account(user)?;
            let kept =
                probes::privileges::needed(args.attach, !args.no_markers, account.uid.as_raw())?;
            probes::privileges::require("skillprof watch", &kept)?;
            privileges::become_keeping(&account, &kept)?;
            let names: Vec<&str> = kept.iter().map(|cap| cap.name).collect();
            eprintln!(
                "skillprof watch: running as {user} (uid {}, gid {}) holding only {}, which \
                 attaching again needs",
                account.uid,
                account.gid,
                names.join(", ")
            );
        }
    }
    // One malloc arena for the whole watch, before its threads start: each thread that
    // builds a scrape (hundreds of KiB of text) would otherwise fill an arena of its own,
    // and a long watch would hold several MB more than it uses.
    // SAFETY: mallopt only sets glibc's malloc parameters; no other thread runs yet.
    unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(watch(args))
}

async fn watch(args: WatchArgs) -> Result<ExitCode> {
    let uid = nix::unistd::geteuid().as_raw();
    let needed = probes::privileges::needed(args.attach, !args.no_markers, uid)?;
    probes::privileges::require("skillprof watch", &needed)?;
    let profile = HostProfile::load(&args.host_profile)?;
    // The endpoint and the recording's folder first: a bad web configuration, a busy address
    // or a folder that cannot be written fails before anything is started or attached.
    // A profile rate the kernel would refuse, too.
    let time = args.time.options(OffCpuMode::Off, WATCH_HZ)?;
    let (listener, protection) = endpoint(&args).await?;
    let address = listener.local_addr()?;
    let recording = recording(&args, time)?;
    let mut stops = Stops::catch(args.duration)?;
    let mut watched = Watched::begin(&args, profile).await?;
    let following = match (args.follow, args.host_url.as_deref()) {
        (true, Some(url)) => Some(follow::Identity::of(watched.host.pid(), url)?),
        _ => None,
    };
    let options = ProbeOptions {
        max_entries: 1,
        no_markers: args.no_markers,
        mode: args.probes,
        time,
        skills_dir: args.skills_dir.clone(),
        ..ProbeOptions::default()
    };
    let live = Arc::new(Mutex::new(Live {
        attached: Some(Attachment::start(
            watched.host.pid(),
            watched.host.client.clone(),
            &options,
        )?),
        restarts: 0,
        gone: String::new(),
    }));
    if let Some(user) = args.user.as_ref().filter(|_| !attaches_again(&args)) {
        let (uid, gid) = privileges::drop_to(user)?;
        eprintln!(
            "skillprof watch: attached; now running as {user} (uid {uid}, gid {gid}) with no \
             capabilities"
        );
    }
    let scheme = match protection.as_ref().and_then(|p| p.tls.as_ref()) {
        Some(_) => "https",
        None => "http",
    };
    eprintln!(
        "skillprof watch: watching {} ({}); serving {scheme}://{address}/metrics{}",
        watched.host.pid(),
        args.host_profile,
        protection
            .as_ref()
            .map(|p| format!(" ({})", p.summary))
            .unwrap_or_default()
    );
    if let Some(identity) = &following {
        eprintln!(
            "skillprof watch: --follow: should the host exit, its successor is the process of {}",
            identity.describe()
        );
    }
    let scrape = scraper(live.clone(), args.max_skills);
    let profile = profiler(live.clone());
    let server = tokio::spawn(serve::serve(listener, scrape, profile, protection));
    // The URL stays the host's across restarts (--follow finds its successor there).
    let mut recorder = Recorder::new(recording, watched_url(&args, &watched));
    recorder.start(watched.host.pid(), Vec::new());
    let started = Instant::now();
    let ended = loop {
        let pid = watched.host.pid();
        let stopped = until_stopped(pid, &mut stops).await?;
        let (Stopped::HostExited, Some(identity)) = (&stopped, &following) else {
            break stopped;
        };
        // Followed: detach from the old host, keep serving (a scrape says why it has no
        // host), and attach to its successor once one serves.
        let gone = format!(
            "the host {pid} exited; --follow is waiting for its successor ({})",
            identity.describe()
        );
        eprintln!("skillprof watch: {gone}");
        let exited_at = Instant::now();
        live.lock().unwrap().detach(gone);
        let kept = recorder.ended().await?;
        let next = match successor(identity, pid, &mut stops).await {
            Ok(next) => next,
            Err(how) => break Stopped::Asked(how),
        };
        watched = watched.followed(next, &args).await?;
        let attachment = Attachment::start(next, watched.host.client.clone(), &options)?;
        live.lock().unwrap().attach(attachment);
        eprintln!(
            "skillprof watch: following the host: {next} took {pid}'s place; attached {:.1} s \
             after {pid} exited",
            exited_at.elapsed().as_secs_f64()
        );
        recorder.start(next, kept);
    };
    server.abort();
    recorder.finish().await;
    drop(live.lock().unwrap().attached.take());
    let seconds = started.elapsed().as_secs();
    match ended {
        Stopped::Asked(how) => {
            let fate = watched.end(Duration::from_secs(args.stop_timeout_s)).await;
            eprintln!("skillprof watch: {how} after {seconds} s; probes detached, {fate}");
            Ok(ExitCode::SUCCESS)
        }
        Stopped::HostExited => {
            let why = watched.exited().await;
            eprintln!("skillprof watch: {why}; the watch ends after {seconds} s");
            Ok(ExitCode::from(3))
        }
    }
}

/// Whether the watch attaches again after it starts: to a followed host's successor, or in
/// each run a recording starts.
fn attaches_again(args: &WatchArgs) -> bool {
    args.follow || args.record.is_some()
}

/// `--web-config` read and `--listen` bound, or why not: off loopback only with protection
/// (or `--insecure-listen`).
async fn endpoint(args: &WatchArgs) -> Result<(TcpListener, Option<web_config::Protection>)> {
    let protection = args
        .web_config
        .as_deref()
        .map(web_config::Protection::load)
        .transpose()?;
    if !args.listen.ip().is_loopback() && protection.is_none() && !args.insecure_listen {
        anyhow::bail!(
            "--listen {}: off loopback, the endpoint would show the host's skill names and \
             memory to anyone who reaches it. Protect it with --web-config FILE (TLS, basic \
             auth; docs/watch.md), or say --insecure-listen if something in front does",
            args.listen
        );
    }
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("--listen {}: cannot bind", args.listen))?;
    Ok((listener, protection))
}

/// `--record`'s folder made and its cmds file written, if asked for; its runs profile the
/// host's time as the watch does (`time`).
fn recording(
    args: &WatchArgs,
    time: Option<TimeOptions>,
) -> Result<Option<(record::Recording, PathBuf)>> {
    args.record
        .as_ref()
        .map(|dir| {
            record::Recording {
                dir: dir.clone(),
                window_s: args.window,
                run_windows: args.run_windows,
                keep: args.keep as usize,
                host_profile: args.host_profile.clone(),
                no_markers: args.no_markers,
                probes: args.probes,
                time,
            }
            .prepare()
        })
        .transpose()
}

/// What a scrape renders: the host attached now, or why there is none.
fn scraper(live: Arc<Mutex<Live>>, max_skills: usize) -> serve::Scrape {
    Arc::new(move || -> Result<String> {
        let live = live.lock().unwrap();
        let attached = live.attached.as_ref().with_context(|| live.gone.clone())?;
        let snapshot = attached.reader.read(&attached.session)?;
        Ok(exposition::render(
            &snapshot,
            &exposition::Watching {
                probes: &attached.probes,
                markers: attached.markers,
                restarts: live.restarts,
                max_skills,
            },
        ))
    })
}

/// The continuous profile: the host's CPU samples over the next N seconds as a pprof file.
/// One window at a time (the samples are taken out of the kernel's map at both of its ends,
/// so two at once would split them): a second request waits for the first.
fn profiler(live: Arc<Mutex<Live>>) -> serve::Profile {
    let window = Arc::new(tokio::sync::Mutex::new(()));
    Arc::new(move |seconds: u64| {
        let (live, window) = (live.clone(), window.clone());
        Box::pin(async move {
            let _one = window.lock().await;
            let take = || -> Result<Option<TimeProfile>> {
                let live = live.lock().unwrap();
                let attached = live.attached.as_ref().with_context(|| live.gone.clone())?;
                let metrics = attached.session.entry(0)?;
                Ok(attached
                    .session
                    .time(0, &metrics)?
                    .map(|(profile, _)| profile))
            };
            // What the kernel counted before the window is no part of it.
            tokio::task::block_in_place(take)?;
            let start = std::time::SystemTime::now();
            tokio::time::sleep(Duration::from_secs(seconds)).await;
            let profile = tokio::task::block_in_place(take)?.context(
                "the watch runs without a time profile (--no-profile, or its probes did not \
                 attach: see its probe table)",
            )?;
            let span = crate::views::output::pprof::Span {
                start_unix_ns: start
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_nanos() as i64,
                duration_ns: (seconds * 1_000_000_000) as i64,
            };
            crate::views::output::pprof::encode(
                &profile,
                crate::views::output::profile::View::OnCpu,
                span,
                "skillprof watch: the host's CPU by stack",
                |_| true,
            )
        })
    })
}

/// `--record`'s recording runs, one host after another (--follow), under one --keep.
struct Recorder {
    recording: Option<(record::Recording, PathBuf)>,
    host_url: String,
    stop: Arc<Notify>,
    running: Option<tokio::task::JoinHandle<Result<Vec<PathBuf>>>>,
}

impl Recorder {
    fn new(recording: Option<(record::Recording, PathBuf)>, host_url: String) -> Recorder {
        Recorder {
            recording,
            host_url,
            stop: Arc::new(Notify::new()),
            running: None,
        }
    }

    /// Records host `pid`, `kept` being the folders of the hosts before.
    fn start(&mut self, pid: u32, kept: Vec<PathBuf>) {
        let Some((recording, cmds)) = &self.recording else {
            return;
        };
        eprintln!(
            "skillprof watch: recording {} s windows of host {pid} into run folders in {} ({} \
             per folder, the newest {} kept)",
            recording.window_s,
            recording.dir.display(),
            recording.run_windows,
            recording.keep
        );
        self.running = Some(tokio::spawn(recording.clone().run(
            pid,
            self.host_url.clone(),
            cmds.clone(),
            self.stop.clone(),
            kept,
        )));
    }

    /// The folders kept so far, once the recording of a host that exited has ended.
    async fn ended(&mut self) -> Result<Vec<PathBuf>> {
        match self.running.take() {
            Some(running) => running.await.context("the recorder")?,
            None => Ok(Vec::new()),
        }
    }

    /// Stops the recording and says what it kept.
    async fn finish(mut self) {
        if self.running.is_none() {
            return;
        }
        self.stop.notify_one();
        match self.ended().await {
            Ok(folders) => eprintln!(
                "skillprof watch: {} run folder(s) recorded and kept: {}",
                folders.len(),
                folders
                    .iter()
                    .map(|folder| folder.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Err(error) => eprintln!("skillprof watch: recording failed: {error:#}"),
        }
    }
}

/// Where the watched host answers.
fn watched_url(args: &WatchArgs, watched: &Watched) -> String {
    args.host_url
        .clone()
        .unwrap_or_else(|| watched.host.client.base().to_owned())
}

/// The probes on one host process, and what a scrape reads of it.
struct Attachment {
    session: ProbeSession,
    reader: Reader,
    /// Each probe and whether it attached.
    probes: Vec<(String, bool)>,
    markers: bool,
}

impl Attachment {
    /// Attaches to `pid`, which answers through `client`, and says what attached.
    fn start(pid: u32, client: Client, options: &ProbeOptions) -> Result<Attachment> {
        let session = ProbeSession::start(pid, options)?;
        session.begin_entry(0)?;
        eprint!("{}", probes::tables::statuses(session.statuses()));
        let probes: Vec<(String, bool)> = session
            .statuses()
            .iter()
            .map(|status| (status.probe.name().to_owned(), status.attached))
            .collect();
        let markers = probes
            .iter()
            .any(|(probe, live)| probe == crate::record::probes::Probe::Markers.name() && *live);
        if !markers {
            eprintln!(
                "skillprof watch: per-skill series need a host that marks its work (skillhost's \
                 markers); this one gets the host series only (skillprof_watch_per_skill_series 0)"
            );
        }
        Ok(Attachment {
            session,
            reader: Reader::new(pid, client),
            probes,
            markers,
        })
    }
}

/// What the scrapes read: the host attached now (none between a host's exit and its
/// successor, `gone` saying why), and how many times the watch followed a restart.
struct Live {
    attached: Option<Attachment>,
    restarts: u64,
    gone: String,
}

impl Live {
    /// The host exited: its probes are detached, and scrapes say `gone`.
    fn detach(&mut self, gone: String) {
        self.gone = gone;
        drop(self.attached.take());
    }

    /// Its successor, attached.
    fn attach(&mut self, attachment: Attachment) {
        self.attached = Some(attachment);
        self.restarts += 1;
    }
}

enum Stopped {
    Asked(&'static str),
    HostExited,
}

/// What stops the watch other than its host: SIGINT, SIGTERM, --duration. Caught once, so
/// that a signal between two waits is not lost.
struct Stops {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    deadline: Option<tokio::time::Instant>,
}

impl Stops {
    fn catch(duration: Option<u64>) -> Result<Stops> {
        Ok(Stops {
            interrupt: signal(SignalKind::interrupt()).context("catching SIGINT")?,
            terminate: signal(SignalKind::terminate()).context("catching SIGTERM")?,
            deadline: duration
                .map(|seconds| tokio::time::Instant::now() + Duration::from_secs(seconds)),
        })
    }

    async fn asked(&mut self) -> &'static str {
        let deadline = self.deadline;
        let elapsed = async move {
            match deadline {
                Some(deadline) => tokio::time::sleep_until(deadline).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = self.interrupt.recv() => "stopped by SIGINT",
            _ = self.terminate.recv() => "stopped by SIGTERM",
            () = elapsed => "--duration reached",
        }
    }
}

/// Until a stop or the host's exit.
async fn until_stopped(pid: u32, stops: &mut Stops) -> Result<Stopped> {
    let host = match ExitWatch::of(pid) {
        Ok(host) => host,
        // Gone before it could be watched: it exited.
        Err(_) if !std::path::Path::new(&format!("/proc/{pid}")).exists() => {
            return Ok(Stopped::HostExited);
        }
        Err(error) => return Err(error),
    };
    Ok(tokio::select! {
        how = stops.asked() => Stopped::Asked(how),
        () = host.exited() => Stopped::HostExited,
    })
}

/// How often --follow looks for the host's successor: a scrape interval is seconds.
const FOLLOW_POLL: Duration = Duration::from_millis(200);

/// The successor of host `gone`, once one serves; what stopped the watch, if that came first.
async fn successor(
    identity: &follow::Identity,
    gone: u32,
    stops: &mut Stops,
) -> std::result::Result<u32, &'static str> {
    loop {
        if let Some(pid) = identity.successor().filter(|&pid| pid != gone) {
            return Ok(pid);
        }
        tokio::select! {
            how = stops.asked() => return Err(how),
            () = tokio::time::sleep(FOLLOW_POLL) => {}
        }
    }
}
