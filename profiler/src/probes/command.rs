//! `skillprof probes`: load and attach every probe, show how each attached, and prove the
//! counting works by reading a live count back.

use std::{thread, time::Duration};

use anyhow::{Context as _, Result, bail, ensure};
use clap::Args;
use serde::Serialize;
use skillprof_common::MmapTotals;

use super::{object::LoadedProbes, plan::ProbeStatus, privileges, tracefs::Tracefs};

/// mmaps skillprof makes itself when it watches itself, so the count has a known floor.
const SELF_MMAPS: u64 = 16;
const SELF_MMAP_LEN: usize = 64 * 1024;

/// Load and attach the BPF probes, show how each attached, and count mmaps (needs root).
#[derive(Args, Debug)]
#[command(long_about = "\
Load skillprof's BPF probes, show how each one attached, and count a process's mmap calls.

Each probe has an ordered list of attach mechanisms, cheapest first (fentry, tp_btf, kprobe \
and classic tracepoints differ in cost and in which kernels allow them); the first that \
attaches wins, and the table shows which one did or, if none did, why not. Classic \
tracepoints need tracefs: if /sys/kernel/tracing is not mounted, it is mounted (and left \
mounted).

Then the mmap calls of one process are counted for --seconds and read back from the BPF \
map. Watching itself (the default), skillprof makes 16 mmaps of its own, so a working probe \
counts at least 16.

Needs root (CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN): `sudo skillprof probes`. Exits \
non-zero if a probe did not attach or the self-check count is short.")]
pub struct ProbesArgs {
    /// Count the mmap calls of this process [default: skillprof itself].
    #[arg(long, value_name = "PID")]
    pid: Option<u32>,
    /// How long to count, in seconds.
    #[arg(long, value_name = "N", default_value_t = 1)]
    seconds: u64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

/// Everything one run found; the table and the JSON are two views of it.
#[derive(Serialize)]
struct Report {
    /// `null` when no probe needed tracefs.
    tracefs: Option<Tracefs>,
    probes: Vec<ProbeStatus>,
    /// The process counted (its tgid).
    pid: u32,
    seconds: u64,
    /// mmaps skillprof made itself during the window (0 unless it watched itself).
    self_mmaps: u64,
    /// `null` when a probe did not attach: nothing was counted.
    mmap: Option<MmapCount>,
}

#[derive(Serialize)]
struct MmapCount {
    calls: u64,
    bytes: u64,
}

pub fn run(args: ProbesArgs) -> Result<()> {
    privileges::require_bpf("skillprof probes")?;
    let me = std::process::id();
    let pid = match args.pid {
        Some(pid) => tgid_of(pid)?,
        None => me,
    };

    let probes = LoadedProbes::attach(pid)?;
    let mut report = Report {
        tracefs: probes.tracefs,
        probes: probes.statuses.clone(),
        pid,
        seconds: args.seconds,
        self_mmaps: 0,
        mmap: None,
    };
    if probes.all_attached() {
        if pid == me {
            mmap_some()?;
            report.self_mmaps = SELF_MMAPS;
        }
        thread::sleep(Duration::from_secs(args.seconds));
        let MmapTotals { calls, bytes } = probes.mmap_totals()?;
        report.mmap = Some(MmapCount { calls, bytes });
    }

    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    verdict(&report)
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
    let mut rows = vec![["probe", "mechanism", "attached", "detail"]];
    rows.extend(report.probes.iter().map(|s| {
        [
            s.probe,
            s.mechanism.as_str(),
            if s.attached { "yes" } else { "no" },
            &s.detail,
        ]
    }));
    let mut widths = [0; 3];
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    for [probe, mechanism, attached, detail] in rows {
        let [w0, w1, w2] = widths;
        println!("{probe:w0$}  {mechanism:w1$}  {attached:w2$}  {detail}");
    }

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
}

/// Non-zero exit unless every probe attached and, when watching itself, counted its own mmaps.
fn verdict(report: &Report) -> Result<()> {
    let missing: Vec<_> = report
        .probes
        .iter()
        .filter(|s| !s.attached)
        .map(|s| s.probe)
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
            "the mmap probe attached but counted {} calls, fewer than the {} skillprof made itself",
            mmap.calls,
            report.self_mmaps
        );
    }
    Ok(())
}
