//! `skillprof watch`: profiles a running host until stopped, in the probes' default mode
//! (nothing runs for other processes), and serves what it counts as a Prometheus target.
//! The probes count into one entry for the whole watch, never reset, so every figure a
//! scrape reads only grows; Prometheus takes the windows (`rate`, `increase`).
//!
//! Stopping (SIGINT, SIGTERM, `--duration`) drops the probes and leaves the host running,
//! untouched; a SIGKILL of skillprof leaves nothing attached either (the kernel drops a
//! process's BPF links with its file descriptors).

pub(crate) mod exposition;
mod host;
mod record;
mod serve;
mod snapshot;

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

use crate::cmds::MAX_WATCH_S;
use crate::hostctl::HostStartArgs;
use crate::hostctl::process::ExitWatch;
use crate::hostctl::profile::HostProfile;
use crate::probes::{self, ProbeMode, ProbeOptions, ProbeSession};
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

    /// Serve OpenMetrics at http://ADDR/metrics. Loopback by default: anything else
    /// exposes the host's skill names to whoever can reach the address.
    #[arg(long, default_value = "127.0.0.1:9477", value_name = "ADDR")]
    pub listen: SocketAddr,

    /// Stop after this many seconds (default: until SIGINT or SIGTERM).
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<u64>,

    /// Leave the host's markers unread: host series only, no skill series.
    #[arg(long)]
    pub no_markers: bool,

    /// Which probes run: `host-only` (the default: no program on any syscall or fault path,
    /// so only the host pays) or `exact` (every memory call and page fault of the host, by
    /// kind and skill, from programs every process on the machine passes through; see
    /// `skillprof run --help`).
    #[arg(long, value_enum, value_name = "MODE", default_value = "host-only")]
    pub probes: ProbeMode,

    /// Also record the host's life as run folders in DIR, one entry per --window, one folder
    /// per --run-windows, for report, explain, compare, export and capacity. Each folder is
    /// a `skillprof run --attach` of `watch SECONDS` lines (its log in DIR/record.log).
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
    probes::require_bpf("skillprof watch")?;
    let profile = HostProfile::load(&args.host_profile)?;
    // Bound first: a busy address fails before anything is started or attached.
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("--listen {}: cannot bind", args.listen))?;
    let address = listener.local_addr()?;
    // And the recording's folder: one that cannot be written fails before anything is
    // started or attached, too.
    let recording = args
        .record
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
            }
            .prepare()
        })
        .transpose()?;
    let watched = Watched::begin(&args, profile).await?;
    let pid = watched.host.pid();
    let options = ProbeOptions {
        max_entries: 1,
        no_markers: args.no_markers,
        mode: args.probes,
        ..ProbeOptions::default()
    };
    let session = ProbeSession::start(pid, &options)?;
    session.begin_entry(0)?;
    eprint!("{}", probes::tables::statuses(session.statuses()));
    let probes: Vec<(String, bool)> = session
        .statuses()
        .iter()
        .map(|status| (status.probe.name().to_owned(), status.attached))
        .collect();
    let markers = probes
        .iter()
        .any(|(probe, live)| probe == probes::Probe::Markers.name() && *live);
    if !markers {
        eprintln!(
            "skillprof watch: per-skill series need a host that marks its work (skillhost's \
             markers); this one gets the host series only (skillprof_watch_per_skill_series 0)"
        );
    }
    eprintln!(
        "skillprof watch: watching {pid} ({}); serving http://{address}/metrics",
        args.host_profile
    );

    // Scrapes borrow the session; stopping takes it out, so that its drop detaches every
    // probe however many connections are still open.
    let session = Arc::new(Mutex::new(Some(session)));
    let reader = Arc::new(Reader::new(pid));
    let scrape = {
        let session = session.clone();
        move || -> Result<String> {
            let session = session.lock().unwrap();
            let session = session.as_ref().context("the watch is stopping")?;
            let snapshot = reader.read(session)?;
            Ok(exposition::render(&snapshot, &probes, markers))
        }
    };
    let server = tokio::spawn(serve::serve(listener, Arc::new(scrape)));
    let stop_recording = Arc::new(Notify::new());
    let recording = recording.map(|(recording, cmds)| {
        eprintln!(
            "skillprof watch: recording {} s windows into run folders in {} ({} per folder, \
             the newest {} kept)",
            recording.window_s,
            recording.dir.display(),
            recording.run_windows,
            recording.keep
        );
        tokio::spawn(recording.run(
            pid,
            watched.host.client.base().to_owned(),
            cmds,
            stop_recording.clone(),
        ))
    });
    let started = Instant::now();
    let ended = until_stopped(pid, args.duration).await;
    server.abort();
    if let Some(recording) = recording {
        stop_recording.notify_one();
        match recording.await.context("the recorder")? {
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
    drop(session.lock().unwrap().take());
    let seconds = started.elapsed().as_secs();
    match ended? {
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

enum Stopped {
    Asked(&'static str),
    HostExited,
}

/// Until SIGINT, SIGTERM, `duration` or the host's exit.
async fn until_stopped(pid: u32, duration: Option<u64>) -> Result<Stopped> {
    let mut interrupt = signal(SignalKind::interrupt()).context("catching SIGINT")?;
    let mut terminate = signal(SignalKind::terminate()).context("catching SIGTERM")?;
    let host = ExitWatch::of(pid)?;
    let elapsed = async {
        match duration {
            Some(seconds) => tokio::time::sleep(Duration::from_secs(seconds)).await,
            None => std::future::pending().await,
        }
    };
    Ok(tokio::select! {
        _ = interrupt.recv() => Stopped::Asked("stopped by SIGINT"),
        _ = terminate.recv() => Stopped::Asked("stopped by SIGTERM"),
        () = elapsed => Stopped::Asked("--duration reached"),
        () = host.exited() => Stopped::HostExited,
    })
}
