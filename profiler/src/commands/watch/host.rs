//! The host a watch profiles: one already running that it attaches to and leaves running, or
//! one it starts as `run` does (same profiles and flags) and stops when the watch ends.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};

use super::WatchArgs;
use crate::producers::hostctl::HostProcess;
use crate::producers::hostctl::attach::answering;
use crate::record::profile::HostProfile;

pub struct Watched {
    pub host: HostProcess,
    /// The profile's working directory for a host the watch started.
    _workdir: Option<tempfile::TempDir>,
}

impl Watched {
    /// Attaches to `--attach`'s host once it answers on `--host-url`, or starts the profile's
    /// host on loopback (`--host-port`, or a free port) with `--skills-dir` as its skills.
    pub async fn begin(args: &WatchArgs, profile: HostProfile) -> Result<Watched> {
        if let Some(pid) = args.attach {
            let url = args
                .host_url
                .as_deref()
                .context("--attach needs --host-url")?;
            let client = answering(pid, url, profile.dialect.clone()).await?;
            return Ok(Watched {
                host: HostProcess::attached(pid, client),
                _workdir: None,
            });
        }
        let skills = args.skills_dir.as_ref().context(
            "without --attach, skillprof starts the host: --skills-dir DIR names its skills",
        )?;
        let skills = skills
            .canonicalize()
            .with_context(|| format!("--skills-dir {}", skills.display()))?;
        let spec = args.host.spec(profile, &[], &[])?;
        let log = host_log(args);
        let workdir = tempfile::Builder::new()
            .prefix("skillprof-watch-host.")
            .tempdir()
            .context("a working directory for the host")?;
        eprintln!(
            "skillprof watch: starting {} ({} profile, skills in {}, output in {})",
            spec.bin.display(),
            spec.profile,
            skills.display(),
            log.display()
        );
        let host = HostProcess::start(
            &spec,
            &skills,
            &log,
            workdir.path(),
            None,
            SocketAddrV4::new(Ipv4Addr::LOCALHOST, args.host_port.unwrap_or(0)),
            Duration::from_secs(args.ready_timeout_s),
        )
        .await?;
        eprintln!(
            "skillprof watch: host {} serving {}",
            host.pid(),
            host.client.base()
        );
        Ok(Watched {
            host,
            _workdir: Some(workdir),
        })
    }

    /// The same watch on `pid`, the process that took an attached host's place (--follow),
    /// once it answers where the host did.
    pub async fn followed(self, pid: u32, args: &WatchArgs) -> Result<Watched> {
        let url = args
            .host_url
            .as_deref()
            .context("--follow needs --host-url")?;
        let client = answering(pid, url, self.host.client.dialect().clone()).await?;
        Ok(Watched {
            host: HostProcess::attached(pid, client),
            _workdir: None,
        })
    }

    pub fn started(&self) -> bool {
        !self.host.is_attached()
    }

    /// The end of a watch whose host is still running: an attached host is left as it is;
    /// one the watch started is stopped (SIGTERM, SIGKILL after `grace`). What became of it.
    pub async fn end(self, grace: Duration) -> String {
        let pid = self.host.pid();
        if !self.started() {
            return format!("host {pid} left running");
        }
        match self.host.stop(grace).await {
            Ok(stopped) => format!(
                "the host {pid} it started stopped ({}{} after {:.1} s)",
                stopped
                    .status
                    .map_or("reaped".to_owned(), |s| s.to_string()),
                if stopped.killed {
                    ", SIGKILLed after the grace"
                } else {
                    ""
                },
                stopped.took.as_secs_f64()
            ),
            Err(e) => format!("stopping the host {pid} it started failed: {e:#}"),
        }
    }

    /// Why the host is gone, when it exited under the watch: for a host the watch started,
    /// its exit status and the end of its log.
    pub async fn exited(self) -> String {
        let pid = self.host.pid();
        if !self.started() {
            return format!(
                "the host {pid} exited (a restarted host has a new pid: watch it again, or \
                 with --follow)"
            );
        }
        let tail = self.host.log_tail();
        match self.host.stop(Duration::ZERO).await {
            Ok(stopped) => format!(
                "the host {pid} it started exited ({}); {tail}",
                stopped
                    .status
                    .map_or("status unknown".to_owned(), |s| s.to_string())
            ),
            Err(e) => format!("the host {pid} it started exited ({e:#}); {tail}"),
        }
    }
}

/// `--host-log`, or host.log in `--record`'s folder, or a file of this watch in the temporary
/// directory.
fn host_log(args: &WatchArgs) -> PathBuf {
    match (&args.host_log, &args.record) {
        (Some(log), _) => log.clone(),
        (None, Some(dir)) => crate::producers::hostctl::profile::log(dir),
        (None, None) => {
            std::env::temp_dir().join(format!("skillprof-watch-{}-host.log", std::process::id()))
        }
    }
}
