//! What the benchmarks share: their flags (clap), the skillprof binary beside them, one run's
//! typed records, and a ratio's median change with its bootstrap interval.
// Each benchmark is its own crate and uses part of this.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{Context, Result, bail, ensure};
use skillprof::ground::stats;
use skillprof::record::EntryRecord;
use skillprof::views::output::entries_jsonl;

const RESAMPLES: usize = 10_000;

/// A benchmark's flags, parsed by clap from what `cargo bench --bench NAME -- FLAGS` hands it
/// (cargo's own `--bench` left out): `--help` says each one.
pub fn flags<T: clap::Parser>() -> T {
    T::parse_from(std::env::args().filter(|arg| arg != "--bench"))
}

/// The release `skillprof` of the target directory this benchmark was built in.
pub fn skillprof_binary() -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let release = exe
        .parent()
        .and_then(Path::parent)
        .context("no target directory")?;
    let binary = release.join("skillprof");
    ensure!(
        binary.is_file(),
        "{} is missing: cargo build --release --workspace",
        binary.display()
    );
    Ok(binary)
}

/// One `skillprof run CMDS ARGS -- HOST_FLAGS` into a folder under `out`, which is removed
/// after: the run's records (entries.jsonl). `label` names the run in an error.
pub fn run_records(
    skillprof: &Path,
    cmds: &Path,
    args: &[&str],
    host_flags: &[&str],
    out: &Path,
    label: &str,
) -> Result<Vec<EntryRecord>> {
    Ok(run_folder(skillprof, cmds, args, host_flags, out, label)?.0)
}

/// As [`run_records`], with the run's meta.json beside its records.
pub fn run_folder(
    skillprof: &Path,
    cmds: &Path,
    args: &[&str],
    host_flags: &[&str],
    out: &Path,
    label: &str,
) -> Result<(Vec<EntryRecord>, skillprof::record::RunInfo)> {
    let folder = out.join("run");
    let mut command = Command::new(skillprof);
    command.arg("run").arg(cmds).arg("--run-dir").arg(&folder);
    command.args(args);
    if !host_flags.is_empty() {
        command.arg("--").args(host_flags);
    }
    let output = command.output().context("running skillprof")?;
    if !output.status.success() {
        bail!(
            "skillprof run {} ({label}) failed: {}",
            cmds.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let records = entries_jsonl::read(&folder.join(entries_jsonl::FILE))?;
    let meta = skillprof::views::output::meta::read(&folder)?;
    fs::remove_dir_all(&folder)?;
    Ok((records, meta))
}

/// One `skillprof run CMDS --run-dir FOLDER ARGS`, its folder kept, however it ended: the
/// caller judges its output (a fill, for one, ends at its limit).
pub fn run_kept(skillprof: &Path, cmds: &Path, folder: &Path, args: &[&str]) -> Result<Output> {
    eprintln!("skillprof run {} {}", cmds.display(), args.join(" "));
    Command::new(skillprof)
        .arg("run")
        .arg(cmds)
        .arg("--run-dir")
        .arg(folder)
        .args(args)
        .output()
        .context("running skillprof")
}

/// `+X.X% [lo, hi]`: the median of the per-round ratios as a change, with its interval.
pub fn change(ratios: &[f64], seed: u64) -> String {
    let mut sorted = ratios.to_vec();
    sorted.sort_by(f64::total_cmp);
    let median = stats::median(&sorted);
    let (lo, hi) = stats::median_ci(ratios, RESAMPLES, seed);
    let percent = |ratio: f64| (ratio - 1.0) * 100.0;
    format!(
        "{:+.1}% [{:+.1}, {:+.1}]",
        percent(median),
        percent(lo),
        percent(hi)
    )
}

/// A real Pharia host: its profile, the binary `scripts/build-real-hosts.sh` builds, and the
/// skillhost flags that emulate it (its dialect, and the engine settings the real one has
/// and skillhost's defaults do not).
pub struct RealHost {
    pub name: &'static str,
    pub profile: &'static str,
    pub binary: &'static str,
    pub emulation: &'static [&'static str],
}

pub const REAL_HOSTS: [RealHost; 2] = [
    RealHost {
        name: "2024",
        profile: "pharia-kernel-2024",
        binary: "pharia-kernel-2024",
        emulation: &["--api", "pharia-2024"],
    },
    RealHost {
        name: "2025",
        profile: "pharia-engine-2025",
        binary: "pharia-engine-0.15",
        // The engine's in-memory incremental compilation cache, of its default size.
        emulation: &["--api", "pharia-2025", "--incremental-cache-mib", "128"],
    },
];

/// `--only 2024|2025`'s host.
pub fn real_host_named(name: &str) -> Result<&'static RealHost> {
    REAL_HOSTS
        .iter()
        .find(|real| real.name == name)
        .with_context(|| format!("--only {name}: expected 2024 or 2025"))
}

impl RealHost {
    /// Its binary in build/real-hosts/, or the command that builds it.
    pub fn binary(&self) -> Result<PathBuf> {
        let binary = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../build/real-hosts")
            .join(self.binary);
        ensure!(
            binary.is_file(),
            "{} is missing: scripts/build-real-hosts.sh --source DIR --only {} builds it \
             (DIR: a clone of github.com/Aleph-Alpha/pharia-engine)",
            binary.display(),
            self.name
        );
        Ok(binary)
    }
}

/// The value of the sample `series` (a name with its labels) in an OpenMetrics exposition.
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|value| value.split(' ').next()?.parse().ok())
}

/// A skillhost started by hand, as a team's host would be, on `cpus` if given; killed when
/// dropped.
pub struct Host {
    pub child: std::process::Child,
    pub port: u16,
}

impl Host {
    pub fn start(
        skillprof: &Path,
        skills: &Path,
        flags: &[String],
        cpus: Option<&[usize]>,
    ) -> Result<Host> {
        use std::os::unix::process::CommandExt as _;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let mut command = Command::new(skillprof.with_file_name("skillhost"));
        command
            .arg("--skills-dir")
            .arg(skills)
            .args(["--port", &port.to_string(), "--scan-interval-ms", "50"])
            .args(flags)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        if let Some(cpus) = cpus {
            let cpus = cpus.to_vec();
            // SAFETY: sched_setaffinity is async-signal-safe.
            unsafe {
                command.pre_exec(move || {
                    skillprof::producers::system::affinity::pin_current_thread(&cpus)
                });
            }
        }
        let child = command.spawn().context("starting skillhost")?;
        let host = Host { child, port };
        let started = std::time::Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            ensure!(
                started.elapsed() < std::time::Duration::from_secs(30),
                "skillhost did not listen on port {port} within 30 s"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Ok(host)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
