//! Starting a host process, waiting until it serves, and stopping it the way the harness
//! did (SIGTERM, wait until reaped), with SIGKILL as the last resort.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use std::os::fd::{AsRawFd, OwnedFd};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::process::{Child, Command};

use super::client::Client;
use crate::ground::pidfd;
use crate::record::profile::{HostProfile, HostSpec};

use crate::record::host::Stopped;

impl HostSpec {
    /// Our skillhost in its own dialect, with `extra` flags appended.
    pub fn skillhost(extra: &[String]) -> Result<Self> {
        HostSpec::new(HostProfile::skillhost(), None, &[], extra, &[])
    }

    /// Process `pid`, already running, spoken to in `profile`'s dialect: its binary and
    /// arguments as /proc shows them, for the record (nothing of the profile's start is used).
    pub fn attached(profile: HostProfile, pid: u32) -> Result<Self> {
        let process = procfs::process::Process::new(pid as i32)
            .with_context(|| format!("--attach {pid}: no such process"))?;
        let bin = process
            .exe()
            .with_context(|| format!("reading /proc/{pid}/exe"))?;
        let args = process
            .cmdline()
            .with_context(|| format!("reading /proc/{pid}/cmdline"))?
            .into_iter()
            .skip(1)
            .collect();
        Ok(HostSpec {
            bin,
            args,
            env: Vec::new(),
            profile: profile.name,
            registry: profile.registry,
            dialect: profile.dialect,
            files: BTreeMap::new(),
            cpus: None,
            file: Some(PathBuf::from(format!("/proc/{pid}/exe"))),
        })
    }

    /// The host `profile` describes, started from `bin` (`None`: our skillhost, found next to
    /// the running executable), with `args` instead of the profile's if any, and `extra`
    /// appended.
    pub fn new(
        profile: HostProfile,
        bin: Option<PathBuf>,
        args: &[String],
        extra: &[String],
        env: &[(String, String)],
    ) -> Result<Self> {
        let bin = match bin {
            Some(bin) => bin,
            None => find_skillhost()?,
        };
        let mut all_args = if args.is_empty() {
            profile.start.args.clone()
        } else {
            args.to_vec()
        };
        all_args.extend_from_slice(extra);
        let mut all_env: Vec<(String, String)> = profile.start.env.into_iter().collect();
        all_env.extend_from_slice(env);
        Ok(HostSpec {
            bin,
            args: all_args,
            env: all_env,
            profile: profile.name,
            registry: profile.registry,
            dialect: profile.dialect,
            files: profile.start.files,
            cpus: None,
            file: None,
        })
    }

    /// What the start's strings name, for one start: see [`crate::record::profile::Start`].
    fn placeholders(
        &self,
        skills_dir: &Path,
        address: Ipv4Addr,
        port: u16,
    ) -> Result<Vec<(&'static str, String)>> {
        let mut placeholders = vec![
            ("{skills_dir}", skills_dir.display().to_string()),
            ("{address}", address.to_string()),
            ("{port}", port.to_string()),
        ];
        let texts = self.args.iter().chain(self.env.iter().map(|(_, v)| v));
        if texts
            .chain(self.files.values())
            .any(|text| text.contains("{skill_file}"))
        {
            placeholders.push(("{skill_file}", one_skill_file(skills_dir)?));
        }
        Ok(placeholders)
    }
}

fn expand(text: &str, placeholders: &[(&str, String)]) -> String {
    placeholders
        .iter()
        .fold(text.to_owned(), |text, (from, to)| text.replace(from, to))
}

/// The skills directory's one file, for a host that serves the component it is started with.
fn one_skill_file(skills_dir: &Path) -> Result<String> {
    let files: Vec<PathBuf> = fs::read_dir(skills_dir)
        .with_context(|| format!("reading {}", skills_dir.display()))?
        .map(|entry| entry.map(|entry| entry.path()))
        .collect::<std::io::Result<_>>()
        .with_context(|| format!("reading {}", skills_dir.display()))?;
    match files.as_slice() {
        [file] => Ok(file.display().to_string()),
        _ => bail!(
            "the host serves the one component it is started with ({{skill_file}}), and {} \
             holds {} files",
            skills_dir.display(),
            files.len()
        ),
    }
}

/// `skillhost` sits next to `skillprof` in a cargo target directory (or one level up, for
/// test executables in `deps/`).
pub fn find_skillhost() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("locating the running executable")?;
    let dir = exe.parent().context("the executable has no directory")?;
    [dir.join("skillhost"), dir.join("../skillhost")]
        .into_iter()
        .find(|candidate| candidate.is_file())
        .with_context(|| {
            format!(
                "skillhost is not next to {}; build it with `cargo build --release -p skillhost`, \
                 or name another host with --host-bin",
                exe.display()
            )
        })
}

/// A running host: one skillprof started (its child), or one it attached to.
pub struct HostProcess {
    /// `None`: attached, not ours to reap.
    child: Option<Child>,
    pid: u32,
    /// The host's output, when skillprof started it.
    log: Option<PathBuf>,
    pub client: Client,
}

/// Readable once the process has exited (a pidfd): no polling, no reaping.
pub struct ExitWatch(AsyncFd<OwnedFd>);

impl ExitWatch {
    /// Watches process `pid`, which need not be ours.
    pub fn of(pid: u32) -> Result<ExitWatch> {
        let fd = pidfd::open(pid).context("watching the host")?;
        // SAFETY: a fresh descriptor that nothing else owns; the AsyncFd owns it for its whole
        // life.
        let watch = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) };
        Ok(ExitWatch(
            watch.context("watching the host through a pidfd")?,
        ))
    }

    pub async fn exited(&self) {
        // An error here means the descriptor is unusable, which only happens if the process
        // is gone: treat it as exited.
        let _ = self.0.readable().await;
    }
}

/// CLOCK_MONOTONIC now, in nanoseconds (`bpf_ktime_get_ns` reads the same clock).
pub fn monotonic_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

impl HostProcess {
    /// Starts the host on `address` (loopback, unless a load network gives it another; port
    /// 0: a free one), its output going to `log` and, if its
    /// profile has files, in the fresh working directory `workdir` holding them, inside
    /// `cgroup` if given (its `cgroup.procs`, open for writing); then waits until its health
    /// route answers. Fails with the end of the log if the host exits first or is not ready
    /// within `ready_timeout`.
    pub async fn start(
        spec: &HostSpec,
        skills_dir: &Path,
        log: &Path,
        workdir: &Path,
        cgroup: Option<&File>,
        address: SocketAddrV4,
        ready_timeout: Duration,
    ) -> Result<Self> {
        let port = match address.port() {
            0 => free_port(*address.ip())?,
            port => port,
        };
        let address = *address.ip();
        let output = File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let mut command = Command::new(&spec.bin);
        let placeholders = spec.placeholders(skills_dir, address, port)?;
        if !spec.files.is_empty() {
            fs::create_dir_all(workdir)
                .with_context(|| format!("creating {}", workdir.display()))?;
            for (name, text) in &spec.files {
                let path = workdir.join(name);
                fs::write(&path, expand(text, &placeholders))
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            command.current_dir(workdir);
        }
        command
            .args(spec.args.iter().map(|arg| expand(arg, &placeholders)))
            .envs(spec.env.iter().map(|(k, v)| (k, expand(v, &placeholders))))
            .stdin(Stdio::null())
            .stdout(output.try_clone()?)
            .stderr(output)
            .kill_on_drop(true);
        // A host skillprof started ends with it, however skillprof ends (a SIGKILL, the OOM
        // killer): the kernel sends it SIGKILL when the thread that started it exits. That
        // thread is an async worker of the run, which lives until the run has stopped the
        // host. A parent gone before the flag was set is caught by the check after it.
        // SAFETY: prctl and getppid are async-signal-safe and touch no memory of the parent's.
        let parent = std::process::id();
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::getppid() as u32 != parent {
                    return Err(std::io::Error::other(
                        "skillprof ended while starting the host",
                    ));
                }
                Ok(())
            });
        }
        if let Some(cpus) = spec.cpus.clone() {
            // SAFETY: sched_setaffinity is async-signal-safe; the list was parsed before.
            unsafe {
                command.pre_exec(move || {
                    crate::producers::system::affinity::pin_current_thread(&cpus.0)
                });
            }
        }
        if let Some(procs) = cgroup {
            let fd = procs.as_raw_fd();
            // SAFETY: between fork and exec the child only makes one write(2) on a descriptor
            // the parent keeps open; "0" moves the writing process itself.
            unsafe {
                command.pre_exec(move || {
                    if libc::write(fd, b"0".as_ptr().cast(), 1) == 1 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
        }
        let child = command
            .spawn()
            .with_context(|| format!("starting the host {}", spec.bin.display()))?;
        let pid = child.id().context("the host exited at once")?;
        let mut host = HostProcess {
            child: Some(child),
            pid,
            log: Some(log.to_path_buf()),
            client: Client::new(&format!("http://{address}:{port}"), spec.dialect.clone()),
        };
        host.wait_until_ready(ready_timeout).await?;
        Ok(host)
    }

    /// A host that is already running, as process `pid` serving `client`'s address.
    pub fn attached(pid: u32, client: Client) -> Self {
        HostProcess {
            child: None,
            pid,
            log: None,
            client,
        }
    }

    async fn wait_until_ready(&mut self, timeout: Duration) -> Result<()> {
        let started = Instant::now();
        loop {
            if let Some(child) = &mut self.child
                && let Some(status) = child.try_wait()?
            {
                bail!(
                    "the host exited ({status}) before it was ready; {}",
                    self.log_tail()
                );
            }
            if self.client.healthy().await {
                return Ok(());
            }
            if started.elapsed() > timeout {
                bail!(
                    "the host did not answer {} at {} within {} s; {}",
                    self.client.dialect().routes.health,
                    self.client.base(),
                    timeout.as_secs(),
                    self.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// A handle that becomes ready when the host exits, for racing against an entry.
    pub fn exit_watch(&self) -> Result<ExitWatch> {
        ExitWatch::of(self.pid)
    }

    /// The end of the host's log, with where it is, for error messages.
    pub fn log_tail(&self) -> String {
        match &self.log {
            Some(log) => format!("the end of its log {}:\n{}", log.display(), tail(log)),
            None => "its output is not skillprof's to read (attached)".to_owned(),
        }
    }

    pub fn is_attached(&self) -> bool {
        self.child.is_none()
    }

    /// Sends SIGTERM and waits until the host is reaped (attached: until it exits);
    /// SIGKILL after `grace`.
    pub async fn stop(mut self, grace: Duration) -> Result<Stopped> {
        let started = Instant::now();
        let signalled_ns = monotonic_ns();
        let Some(child) = &mut self.child else {
            return self.stop_attached(grace, started, signalled_ns).await;
        };
        if let Some(status) = child.try_wait()? {
            return Ok(Stopped {
                status: Some(status),
                killed: false,
                took: Duration::ZERO,
                signalled_ns,
                reaped_ns: signalled_ns,
            });
        }
        signal(self.pid, libc::SIGTERM)?;
        let (status, killed) = match tokio::time::timeout(grace, child.wait()).await {
            Ok(status) => (status?, false),
            Err(_) => {
                child.start_kill()?;
                (child.wait().await?, true)
            }
        };
        Ok(Stopped {
            status: Some(status),
            killed,
            took: started.elapsed(),
            signalled_ns,
            reaped_ns: monotonic_ns(),
        })
    }

    /// The same for a host that is not our child: its pidfd says when it has exited; how it
    /// ended only its parent learns.
    async fn stop_attached(
        self,
        grace: Duration,
        started: Instant,
        signalled_ns: u64,
    ) -> Result<Stopped> {
        let exited = self.exit_watch()?;
        signal(self.pid, libc::SIGTERM)?;
        let killed = tokio::time::timeout(grace, exited.exited()).await.is_err();
        if killed {
            signal(self.pid, libc::SIGKILL)?;
            exited.exited().await;
        }
        Ok(Stopped {
            status: None,
            killed,
            took: started.elapsed(),
            signalled_ns,
            reaped_ns: monotonic_ns(),
        })
    }
}

fn signal(pid: u32, signal: i32) -> Result<()> {
    let pid = libc::pid_t::try_from(pid)?;
    // SAFETY: kill(2) on our own child's pid, which stays valid until we reap it, or on an
    // attached host's, which the user named and whose exit we watch through a pidfd.
    if unsafe { libc::kill(pid, signal) } != 0 {
        return Err(std::io::Error::last_os_error()).context("signalling the host");
    }
    Ok(())
}

/// A port on `address` that was free a moment ago. Another host's API cannot be told to
/// pick one and report it, so the runner picks (and so for Locust's ports).
pub fn free_port(address: Ipv4Addr) -> Result<u16> {
    let listener = std::net::TcpListener::bind((address, 0))
        .with_context(|| format!("finding a free port on {address}"))?;
    Ok(listener.local_addr()?.port())
}

fn tail(log: &Path) -> String {
    const LINES: usize = 20;
    let text = fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(LINES)..].join("\n")
}
