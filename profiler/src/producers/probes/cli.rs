//! `skillprof probes`: load and attach every probe, show how each attached, and prove the
//! counting works by reading a live count back.

use crate::record::probes::{
    Mechanism, Outcome, Probe, ProbeCosts, ProbeMetrics, ProbeMode, ProbeStatus, Tracefs,
};
use std::{path::PathBuf, thread, time::Duration};

use anyhow::{Context as _, Result, bail, ensure};
use clap::Args;
use serde::Serialize;
use skillprof_common::SYS_MMAP;

use crate::record::Row;

use super::{
    host_check::HostCheck,
    plan::PROBES,
    privileges,
    session::{MechanismArgs, ProbeSession},
    tables,
};

/// mmaps skillprof makes itself when it watches itself, so the count has a known floor.
const SELF_MMAPS: u64 = 16;
const SELF_MMAP_LEN: usize = 64 * 1024;

/// Load and attach the BPF probes, show how each attached, and count mmaps (needs root).
#[derive(Args, Debug)]
#[command(long_about = "\
Load skillprof's BPF probes, show how each one attached, and count a process's events.

Each probe has an ordered list of attach mechanisms: fentry/fexit, kprobe, tp_btf, classic \
tracepoint (they differ in cost and in which kernels allow them). The first that attaches \
wins, and the table shows which one did or, if none did, why not. Classic tracepoints need \
tracefs: if /sys/kernel/tracing is not mounted, it is mounted (and left mounted). \
shrink_node and exit_mmap exist only as function probes (fentry, kprobe); where neither is \
allowed they are reported and skipped, and lru_shrink and rss_stat cover their ground.

Then the events of one process are counted for --seconds and read back from the BPF maps. \
Watching itself (the default), skillprof makes 16 mmaps of its own, so a working probe \
counts at least 16. The BPF cost of each program (runs, ns per run) is shown too.

Needs root (CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN): `sudo skillprof probes`. Exits \
non-zero if a probe that has a tracepoint in its plan did not attach, or the self-check \
count is short.

With --host-bin FILE, nothing is loaded and no root is needed: each host binary's symbol \
table says which of the probes that follow the host's own functions (markers, publish, \
decommits, pagemap_scan) would find them, and the wasmtime it was built with. Check a host \
before running it under skillprof: `skillprof probes --host-bin /usr/local/bin/my-host`.")]
pub struct ProbesArgs {
    /// Count the events of this process [default: skillprof itself].
    #[arg(long, value_name = "PID")]
    pid: Option<u32>,
    /// How long to count, in seconds.
    #[arg(long, value_name = "N", default_value_t = 1)]
    seconds: u64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    selection: MechanismArgs,
    /// Also stream raw events to this CSV file.
    #[arg(long, value_name = "PATH")]
    events: Option<PathBuf>,
    /// Only read this host binary's symbols: which host probes would find their functions,
    /// and its wasmtime version (no BPF, no root; repeatable).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["pid", "seconds", "events"])]
    host_bin: Vec<PathBuf>,
}

/// Everything one run found; the table and the JSON are two views of it.
#[derive(Serialize)]
struct Report {
    /// `uname -r`: mechanisms differ by kernel, and later runs compare these reports.
    kernel: String,
    /// `null` when no probe needed tracefs.
    tracefs: Option<Tracefs>,
    force_fallback: bool,
    mechanisms: Option<Vec<Mechanism>>,
    probes: Vec<ProbeStatus>,
    /// The process counted (its tgid).
    pid: u32,
    seconds: u64,
    /// mmaps skillprof made itself during the window (0 unless it watched itself).
    self_mmaps: u64,
    /// `null` when the syscalls probe did not attach: nothing was counted.
    mmap: Option<MmapCount>,
    /// Every measured probe column of the window (unmeasured ones are left out).
    counts: serde_json::Map<String, serde_json::Value>,
    costs: ProbeCosts,
    /// events.csv rows written, with --events.
    events_written: Option<u64>,
}

#[derive(Serialize)]
struct MmapCount {
    calls: u64,
    bytes: u64,
}

pub fn run(args: ProbesArgs) -> Result<()> {
    if !args.host_bin.is_empty() {
        return check_host_binaries(&args.host_bin, args.json);
    }
    privileges::require_bpf("skillprof probes")?;
    let me = std::process::id();
    let pid = match args.pid {
        Some(pid) => tgid_of(pid)?,
        None => me,
    };
    // A check of what this kernel attaches: every probe, the exact mode's too.
    let mut options = args.selection.options(args.events.clone(), 1)?;
    options.mode = ProbeMode::Exact;
    options.syscall_latency = true;
    let (force_fallback, mechanisms) = (options.force_fallback, options.mechanisms.clone());
    let session = ProbeSession::start(pid, &options)?;
    let mut self_mmaps = 0;
    if pid == me {
        mmap_some()?;
        self_mmaps = SELF_MMAPS;
    }
    thread::sleep(Duration::from_secs(args.seconds));
    let metrics = session.entry(0)?;
    let events_written = session.finish_events()?;
    let mmap = metrics.read(Probe::Syscalls, |c| MmapCount {
        calls: c.syscalls[SYS_MMAP].calls,
        bytes: c.syscalls[SYS_MMAP].bytes,
    });
    let mut cells = Row::default();
    ProbeMetrics::write_cells(Some(&metrics), &mut cells);
    let mut counts = serde_json::Map::new();
    for (name, value) in cells.names().zip(cells.values()) {
        let number = match value.parse::<u64>() {
            Ok(int) => serde_json::json!(int),
            Err(_) => match value.parse::<f64>() {
                Ok(float) => serde_json::json!(float),
                Err(_) => continue, // empty: not measured
            },
        };
        counts.insert(name.to_string(), number);
    }
    let report = Report {
        kernel: kernel_release(),
        tracefs: session.tracefs(),
        force_fallback,
        mechanisms,
        probes: session.statuses().to_vec(),
        pid,
        seconds: args.seconds,
        self_mmaps,
        mmap,
        counts,
        costs: session.costs()?,
        events_written,
    };
    drop(session);

    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    verdict(&report)
}

/// `--host-bin`: each binary's host probes, read from its symbols.
fn check_host_binaries(files: &[PathBuf], json: bool) -> Result<()> {
    let checks = files
        .iter()
        .map(|file| HostCheck::of(file))
        .collect::<Result<Vec<_>>>()?;
    if json {
        println!("{}", serde_json::to_string_pretty(&checks)?);
    } else {
        for check in &checks {
            print!("{}", check.text());
        }
    }
    Ok(())
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The thread-group id of `pid`: the programs filter by tgid, and a thread id would never match.
fn tgid_of(pid: u32) -> Result<u32> {
    let status = i32::try_from(pid)
        .ok()
        .and_then(|pid| procfs::process::Process::new(pid).ok())
        .and_then(|process| process.status().ok())
        .with_context(|| format!("no process with pid {pid} (nothing at /proc/{pid})"))?;
    Ok(u32::try_from(status.tgid)?)
}

/// Maps and unmaps `SELF_MMAPS` anonymous regions.
fn mmap_some() -> Result<()> {
    for _ in 0..SELF_MMAPS {
        // SAFETY: a fresh anonymous mapping, unmapped right away and never touched.
        unsafe {
            let addr = libc::mmap(
                std::ptr::null_mut(),
                SELF_MMAP_LEN,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            ensure!(
                addr != libc::MAP_FAILED,
                "mmap failed: {}",
                std::io::Error::last_os_error()
            );
            libc::munmap(addr, SELF_MMAP_LEN);
        }
    }
    Ok(())
}

fn print_table(report: &Report) {
    println!("kernel {}", report.kernel);
    print!("{}", tables::statuses(&report.probes));

    if let Some(tracefs) = report.tracefs {
        println!("\ntracefs: {tracefs}");
    }
    if let Some(mmap) = &report.mmap {
        let who = if report.self_mmaps > 0 {
            let kib = SELF_MMAP_LEN / 1024;
            format!(
                "skillprof itself, which made {} of {kib} KiB on purpose",
                report.self_mmaps
            )
        } else {
            std::fs::read_link(format!("/proc/{}/exe", report.pid))
                .map_or_else(|_| "exe unknown".into(), |exe| exe.display().to_string())
        };
        println!(
            "mmap calls by pid {} ({who}) in {} s: {} calls, {} bytes requested",
            report.pid, report.seconds, mmap.calls, mmap.bytes
        );
    }
    let nonzero: Vec<String> = report
        .counts
        .iter()
        .filter(|(_, v)| v.as_f64() != Some(0.0))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if !nonzero.is_empty() {
        println!("non-zero counts: {}", nonzero.join(" "));
    }

    print!("\n{}", tables::costs(&report.costs));
}

/// Whether a probe's plan has a mechanism every kernel skillprof supports has (tp_btf or a
/// classic tracepoint); the others (shrink_node, exit_mmap) are optional, and so are the
/// markers, which only a host that has them can give.
pub fn is_required(probe: Probe) -> bool {
    // A host without the function such a probe follows (skillprof itself, here) is no
    // failure of the kernel.
    if probe.follows_the_host() {
        return false;
    }
    PROBES.iter().find(|p| p.probe == probe).is_none_or(|p| {
        p.plan
            .iter()
            .any(|a| matches!(a.mechanism, Mechanism::TpBtf | Mechanism::Tracepoint))
    })
}

/// Non-zero exit unless every required probe that was tried attached and, when watching
/// itself, the mmap count covers skillprof's own mmaps.
fn verdict(report: &Report) -> Result<()> {
    let missing: Vec<_> = report
        .probes
        .iter()
        .filter(|s| {
            !s.attached
                && is_required(s.probe)
                && s.attempts.iter().any(|a| a.outcome == Outcome::Failed)
        })
        .map(|s| s.probe.name())
        .collect();
    if !missing.is_empty() {
        bail!(
            "probes did not attach: {} (see the detail column)",
            missing.join(", ")
        );
    }
    if let Some(mmap) = &report.mmap
        && mmap.calls < report.self_mmaps
    {
        bail!(
            "the syscalls probe attached but counted {} mmap calls, fewer than the {} \
             skillprof made itself",
            mmap.calls,
            report.self_mmaps
        );
    }
    Ok(())
}
