//! `skillprof watch --record DIR`: the watched host's life as run folders that `report`,
//! `compare`, `export` and `capacity` read as they read any run. Each folder is
//! one `skillprof run --attach` of `watch SECONDS` windows (one entry each), in a process of
//! its own whose parent-death signal is SIGTERM: however the watch ends, SIGKILL included,
//! the run finishes its files and detaches its probes. A run that ends starts the next; of
//! the folders this watch recorded, the oldest beyond `--keep` are removed.

use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

use anyhow::{Context, Result};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, ChildStderr, Command};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::producers::probes::time::TimeOptions;
use crate::record::probes::ProbeMode;

/// What `--record` was asked for.
#[derive(Clone, Debug)]
pub struct Recording {
    pub dir: PathBuf,
    pub window_s: u32,
    pub run_windows: u32,
    pub keep: usize,
    pub host_profile: String,
    pub no_markers: bool,
    /// The watch's probe mode, which each recording run keeps.
    pub probes: ProbeMode,
    /// The watch's time profile (`None`: --no-profile), which each recording run keeps: a
    /// run with --attach would otherwise take its own defaults (off a CPU by state).
    pub time: Option<TimeOptions>,
}

/// Samples every second, not every 100 ms: a window is a minute, a folder an hour.
const SAMPLE_EVERY_MS: &str = "1000";

impl Recording {
    /// Makes the folder and writes the runs' cmds file into it, before the watch attaches
    /// anything: the recording and that file's path.
    pub fn prepare(self) -> Result<(Recording, PathBuf)> {
        fs::create_dir_all(&self.dir)
            .with_context(|| format!("--record {}: cannot create it", self.dir.display()))?;
        let cmds = self.dir.join("watch.cmds");
        fs::write(&cmds, self.plan())
            .with_context(|| format!("--record: cannot write {}", cmds.display()))?;
        Ok((self, cmds))
    }

    /// Records host `pid` (serving `host_url`) until `stop` is notified or a run ends short
    /// (the host gone: the run's log and meta.json say why). `ours`: the folders this watch
    /// recorded of the hosts before (--follow), kept by the same --keep. Returns the folders
    /// recorded and kept.
    pub async fn run(
        self,
        pid: u32,
        host_url: String,
        cmds: PathBuf,
        stop: Arc<Notify>,
        mut ours: Vec<PathBuf>,
    ) -> Result<Vec<PathBuf>> {
        loop {
            let before = run_folders(&self.dir);
            let (mut child, errors) = self.start(pid, &host_url, &cmds)?;
            let finished = tokio::select! {
                status = child.wait() => Some(status?),
                () = stop.notified() => None,
            };
            if finished.is_none() {
                // The window in progress is left out (meta.json lists it as not run).
                terminate(&child);
                child.wait().await?;
            }
            ours.extend(
                run_folders(&self.dir)
                    .into_iter()
                    .filter(|folder| !before.contains(folder)),
            );
            self.prune(&mut ours)?;
            match finished {
                Some(status) if status.success() => continue,
                Some(status) => {
                    // The pipe closes as the run exits; a second bounds a child that kept it.
                    let error = tokio::time::timeout(std::time::Duration::from_secs(1), errors)
                        .await
                        .ok()
                        .and_then(Result::ok)
                        .flatten();
                    eprintln!(
                        "skillprof watch: {}",
                        self.ended_short(status, &ours, error)
                    );
                }
                None => {}
            }
            return Ok(ours);
        }
    }

    /// Why the recording ended, in a line: the run's own `error` line (as it wrote it, not
    /// as record.log kept it: on a full disk the log's copy is cut where the disk ran out),
    /// whether the disk is full, and what is kept. The watch goes on serving.
    fn ended_short(
        &self,
        status: std::process::ExitStatus,
        ours: &[PathBuf],
        error: Option<String>,
    ) -> String {
        let error = error.map_or_else(
            || format!("{} says why", self.log().display()),
            |line| format!("\"{line}\""),
        );
        let kept = format!(
            "the endpoint keeps serving, and the {} run folder(s) recorded keep every window \
             that finished",
            ours.len()
        );
        match free_bytes(&self.dir) {
            Some(free) if free < FULL_BELOW => format!(
                "recording ended: the disk of {} is full ({} KiB free): {error}; {kept}",
                self.dir.display(),
                free / 1024
            ),
            _ => format!("recording ended: the recording run ended with {status}: {error}; {kept}"),
        }
    }

    /// One `watch` line per window: each its own entry.
    fn plan(&self) -> String {
        let mut plan = format!(
            "# skillprof watch --record: {} windows of {} s, the host serving its own traffic\n",
            self.run_windows, self.window_s
        );
        for _ in 0..self.run_windows {
            plan.push_str(&format!("watch {}\n", self.window_s));
        }
        plan
    }

    fn log(&self) -> PathBuf {
        self.dir.join("record.log")
    }

    /// Starts a recording run, its stdout into record.log and its stderr through us, which
    /// copies it there and keeps its last error line: the task's result.
    fn start(
        &self,
        pid: u32,
        host_url: &str,
        cmds: &Path,
    ) -> Result<(Child, JoinHandle<Option<String>>)> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log())
            .with_context(|| format!("opening {}", self.log().display()))?;
        let mut command = Command::new(std::env::current_exe().context("skillprof's own path")?);
        command
            .arg("run")
            .arg(cmds)
            .args(["--attach", &pid.to_string()])
            .args(["--host-url", host_url])
            .args(["--host-profile", &self.host_profile])
            .arg("--out")
            .arg(&self.dir)
            .args(["--interval-ms", SAMPLE_EVERY_MS])
            .args(self.no_markers.then_some("--no-markers"))
            .args(["--probes", self.probes.as_str()])
            .args(time_args(self.time))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(Stdio::piped());
        // SAFETY: prctl is async-signal-safe and touches no memory of the parent's.
        unsafe {
            command.pre_exec(|| {
                // The run finishes its files and detaches however the watch ends.
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = command
            .spawn()
            .context("starting the recording run (skillprof run --attach)")?;
        let stderr = child.stderr.take().context("the recording run's stderr")?;
        Ok((child, tokio::spawn(copy_keeping_error(stderr, log))))
    }

    /// Removes the oldest of `ours` beyond `--keep`.
    fn prune(&self, ours: &mut Vec<PathBuf>) -> Result<()> {
        ours.sort();
        let excess = ours.len().saturating_sub(self.keep);
        for old in ours.drain(..excess) {
            fs::remove_dir_all(&old)
                .with_context(|| format!("removing {} (--keep {})", old.display(), self.keep))?;
        }
        Ok(())
    }
}

/// Copies a run's stderr into `log` line by line (a write the disk refuses is dropped) and
/// returns its last `error:` line.
async fn copy_keeping_error(stderr: ChildStderr, mut log: fs::File) -> Option<String> {
    use std::io::Write as _;
    let mut lines = BufReader::new(stderr).lines();
    let mut last = None;
    while let Ok(Some(line)) = lines.next_line().await {
        let _ = writeln!(log, "{line}");
        if line.starts_with("error:") || line.starts_with("Error:") {
            last = Some(line);
        }
    }
    last
}

/// Free space below which a failed run is put down to a full disk: less than a run folder's
/// files take (tens of KiB a window).
const FULL_BELOW: u64 = 1 << 20;

/// The bytes an unprivileged writer may still use on `dir`'s filesystem.
fn free_bytes(dir: &Path) -> Option<u64> {
    let stat = rustix::fs::statvfs(dir).ok()?;
    Some(stat.f_bavail.saturating_mul(stat.f_frsize))
}

/// The run folders in `dir` (those with a meta.json), by name: their names are the times
/// they began.
fn run_folders(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut folders: Vec<PathBuf> = entries
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.join(crate::views::output::meta::FILE).is_file())
        .collect();
    folders.sort();
    folders
}

fn terminate(child: &Child) {
    if let Some(pid) = child.id() {
        // SAFETY: a signal to our own child, which has not been reaped (it is waited below).
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
    }
}

/// `skillprof run`'s flags for the time profile `time`.
fn time_args(time: Option<TimeOptions>) -> Vec<String> {
    match time {
        None => vec!["--no-profile".to_owned()],
        Some(time) => vec![
            "--profile-hz".to_owned(),
            time.hz.to_string(),
            "--off-cpu".to_owned(),
            clap::ValueEnum::to_possible_value(&time.off_cpu)
                .expect("every mode has a name")
                .get_name()
                .to_owned(),
        ],
    }
}
