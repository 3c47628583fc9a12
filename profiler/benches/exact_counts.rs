//! Exact mode's counts checked against an independent counter: a skillhost is started by
//! hand, bpftrace counts its memory calls by kind (its own programs on the
//! `syscalls:sys_exit_*` tracepoints, filtered by the host's pid), and `skillprof run
//! --attach --probes exact` profiles a workload on it meanwhile. Per kind, skillprof's calls
//! summed over the entries must equal bpftrace's; its faults (user + kernel mode) must equal
//! the kernel's own count of the host's faults (minflt + majflt) over the same entries.
//! Figures only, no pass/fail; a difference is printed with both counts.
//!
//!     cargo bench -p skillprof --bench exact_counts [-- --cmds FILE [-- HOST_FLAGS]]
//!
//! Without --cmds, two workloads: cmds/bench.cmds on skillhost's defaults, and
//! cmds/pooled.cmds with `--allocator pooling`. Needs root, bpftrace (Debian's: apt-get
//! install bpftrace) and a release build of skillprof and skillhost.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{Context, Result, bail, ensure};
use skillprof::record::EntryRecord;
use skillprof_common::{SYSCALL_NAMES, SYSCALLS};

mod common;
use common::{Host, run_records, skillprof_binary};

struct Workload {
    cmds: PathBuf,
    host_flags: Vec<String>,
}

fn main() -> Result<()> {
    ensure!(
        rustix::process::geteuid().is_root(),
        "the exact-count benchmark loads BPF probes: run it as root"
    );
    let bpftrace = which("bpftrace").context(
        "bpftrace is not installed: apt-get install bpftrace (it is the independent counter)",
    )?;
    let skillprof = skillprof_binary()?;
    for workload in workloads()? {
        compare(&skillprof, &bpftrace, &workload)?;
    }
    Ok(())
}

/// skillprof's exact counts against bpftrace's on the same workloads.
#[derive(clap::Parser)]
struct Flags {
    /// One workload, from the repository's root (default: the reference ones).
    #[arg(long)]
    cmds: Option<String>,
    /// The host's own flags for that workload, after `--`.
    #[arg(last = true)]
    host_flags: Vec<String>,
}

fn workloads() -> Result<Vec<Workload>> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()?;
    let flags: Flags = common::flags();
    let chosen = match (flags.cmds, flags.host_flags) {
        (Some(cmds), host_flags) => Some(Workload {
            cmds: repo.join(cmds),
            host_flags,
        }),
        (None, host_flags) if !host_flags.is_empty() => {
            bail!("host flags after -- need --cmds FILE")
        }
        (None, _) => None,
    };
    Ok(match chosen {
        Some(workload) => vec![workload],
        None => vec![
            Workload {
                cmds: repo.join("cmds/bench.cmds"),
                host_flags: Vec::new(),
            },
            Workload {
                cmds: repo.join("cmds/pooled.cmds"),
                host_flags: vec!["--allocator".into(), "pooling".into()],
            },
        ],
    })
}

/// One workload: the host, bpftrace on it, skillprof attached; both counts side by side.
fn compare(skillprof: &Path, bpftrace: &Path, workload: &Workload) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let skills = dir.path().join("skills");
    std::fs::create_dir_all(&skills)?;
    let host = Host::start(skillprof, &skills, &workload.host_flags, None)?;
    let counter = Counter::start(bpftrace, host.pid())?;
    let url = format!("http://127.0.0.1:{}", host.port);
    let pid = host.pid().to_string();
    let records = run_records(
        skillprof,
        &workload.cmds,
        &[
            "--attach",
            &pid,
            "--host-url",
            &url,
            "--skills-dir",
            skills.to_str().context("a UTF-8 temporary path")?,
            "--probes",
            "exact",
        ],
        &[],
        dir.path(),
        "exact counts",
    )?;
    let counted = counter.finish()?;
    drop(host);

    println!(
        "\n{}{}: skillprof --probes exact against bpftrace (syscalls:sys_exit_*, pid {pid})",
        workload.cmds.display(),
        match workload.host_flags.is_empty() {
            true => String::new(),
            false => format!(" (host: {})", workload.host_flags.join(" ")),
        }
    );
    println!(
        "{:10} {:>12} {:>12} {:>8}",
        "kind", "skillprof", "bpftrace", "diff"
    );
    for (kind, name) in SYSCALL_NAMES.iter().enumerate().take(SYSCALLS) {
        let ours: u64 = records.iter().filter_map(|r| calls(r, kind)).sum();
        let theirs = counted.get(*name).copied().unwrap_or(0);
        println!(
            "{name:10} {ours:>12} {theirs:>12} {:>+8}",
            ours as i64 - theirs as i64
        );
    }
    let (ours, kernel) = records
        .iter()
        .filter_map(|r| {
            let (minor, major) = r.measure.faults()?;
            let seen = r.probe(skillprof::record::probes::Probe::PageFaults, |c| {
                c.faults.user + c.faults.kernel
            })?;
            Some((seen, minor + major))
        })
        .fold((0, 0), |(a, b), (seen, kernel)| (a + seen, b + kernel));
    println!(
        "{:10} {ours:>12} {kernel:>12} {:>+8}   (the kernel's minflt + majflt of the same \
         entries)",
        "faults",
        ours as i64 - kernel as i64
    );
    Ok(())
}

fn calls(record: &EntryRecord, kind: usize) -> Option<u64> {
    record.probe(skillprof::record::probes::Probe::Syscalls, |c| {
        c.syscalls[kind].calls
    })
}

/// bpftrace counting one process's memory calls by kind until it is told to stop (killed if
/// dropped before).
struct Counter {
    child: Option<Child>,
}

impl Counter {
    fn start(bpftrace: &Path, pid: u32) -> Result<Counter> {
        let probes: Vec<String> = SYSCALL_NAMES
            .iter()
            .map(|name| format!("tracepoint:syscalls:sys_exit_{name}"))
            .collect();
        let script = format!(
            "{} /pid == {pid}/ {{ @[probe] = count(); }}",
            probes.join(",")
        );
        let mut child = Command::new(bpftrace)
            .args(["-e", &script])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting bpftrace")?;
        let stdout = child.stdout.as_mut().context("bpftrace's stdout")?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        ensure!(
            line.starts_with("Attaching"),
            "bpftrace did not attach: {line:?}"
        );
        Ok(Counter { child: Some(child) })
    }

    /// Stops bpftrace (SIGINT: it prints its map) and reads the counts by kind.
    fn finish(mut self) -> Result<std::collections::BTreeMap<String, u64>> {
        let child = self.child.take().context("bpftrace already stopped")?;
        rustix::process::kill_process(
            rustix::process::Pid::from_child(&child),
            rustix::process::Signal::INT,
        )?;
        let output = child.wait_with_output()?;
        let text = String::from_utf8_lossy(&output.stdout);
        // `@[tracepoint:syscalls:sys_exit_mmap]: 123`
        Ok(text
            .lines()
            .filter_map(|line| {
                let (probe, count) = line.strip_prefix("@[")?.split_once("]: ")?;
                let kind = probe.rsplit_once("sys_exit_")?.1;
                Some((kind.to_owned(), count.trim().parse().ok()?))
            })
            .collect())
    }
}

impl Drop for Counter {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|dir| Path::new(dir).join(program))
        .find(|path| path.is_file())
}
