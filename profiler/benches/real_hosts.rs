//! The real Pharia hosts against skillhost's emulation of their dialects: each workload
//! (cmds/bench.cmds, p_execute_all.cmds, saturate.cmds) on the real binary through its
//! profile, then on skillhost speaking the same dialect (`--api`) through the same profile,
//! and `skillprof compare` side by side. Where they differ (statuses, registration, listing
//! order, what a drop does), the emulation or the profile is wrong. Figures only, no
//! pass/fail; a run with failed requests says so, with the host's first error.
//!
//!     cargo bench -p skillprof --bench real_hosts [-- --only 2024|2025 --cmds bench.cmds,...]
//!
//! The binaries come from `scripts/build-real-hosts.sh --source DIR` (build/real-hosts/:
//! pharia-kernel-2024, pharia-engine-0.15); a missing one is named with the command that
//! builds it. bench.cmds takes about a minute per host on a 2-core machine (its Python
//! compiles), p_execute_all.cmds about three, saturate.cmds about two. Needs root (the probes)
//! and a release build of skillprof and skillhost.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};
use skillprof::views::output::entries_jsonl;

mod common;
use common::{REAL_HOSTS, RealHost, real_host_named, skillprof_binary};

const WORKLOADS: [&str; 3] = ["bench.cmds", "p_execute_all.cmds", "saturate.cmds"];

fn main() -> Result<()> {
    let (hosts, workloads) = parse_options()?;
    ensure!(
        rustix::process::geteuid().is_root(),
        "the real_hosts benchmark loads BPF probes: run it as root"
    );
    let skillprof = skillprof_binary()?;
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()?;
    let out = tempfile::tempdir()?;
    for real in hosts {
        let binary = real.binary()?;
        for workload in &workloads {
            let cmds = repo.join("cmds").join(workload);
            let host_bin = binary.to_str().context("a UTF-8 path")?;
            let real_run = out.path().join(format!("{}-{workload}-real", real.name));
            run(
                &skillprof,
                &cmds,
                &real_run,
                &["--host-profile", real.profile, "--host-bin", host_bin],
            )?;
            let emulated = out
                .path()
                .join(format!("{}-{workload}-skillhost", real.name));
            let host = [
                "--host-profile",
                real.profile,
                "--",
                "--skills-dir",
                "{skills_dir}",
                "--port",
                "{port}",
                "--scan-interval-ms",
                "50",
            ];
            run(
                &skillprof,
                &cmds,
                &emulated,
                &[&host[..], real.emulation].concat(),
            )?;
            println!(
                "\n{workload}: a = the real {} ({}), b = skillhost {}",
                real.profile,
                real.binary,
                real.emulation.join(" ")
            );
            for (label, folder) in [("real", &real_run), ("skillhost", &emulated)] {
                println!("  {label}: {}", errors(folder)?);
            }
            let compared = Command::new(&skillprof)
                .arg("compare")
                .arg(&real_run)
                .arg(&emulated)
                .output()?;
            println!("{}", String::from_utf8_lossy(&compared.stdout));
            if !compared.status.success() {
                println!("{}", String::from_utf8_lossy(&compared.stderr));
            }
        }
    }
    Ok(())
}

/// skillprof run on the real 2024 and 2025 hosts.
#[derive(clap::Parser)]
struct Flags {
    /// One host only: 2024 or 2025.
    #[arg(long)]
    only: Option<String>,
    /// The workloads, comma-separated cmds files (default: the reference ones).
    #[arg(long, value_delimiter = ',')]
    cmds: Vec<String>,
}

fn parse_options() -> Result<(Vec<&'static RealHost>, Vec<String>)> {
    let Flags { only, cmds } = common::flags();
    let hosts = match only {
        Some(name) => vec![real_host_named(&name)?],
        None => REAL_HOSTS.iter().collect(),
    };
    let workloads = match cmds.is_empty() {
        true => WORKLOADS.iter().map(|w| w.to_string()).collect(),
        false => cmds,
    };
    Ok((hosts, workloads))
}

/// One `skillprof run CMDS --run-dir FOLDER ARGS`; a run that fails is an error with its
/// output.
fn run(skillprof: &Path, cmds: &Path, folder: &Path, args: &[&str]) -> Result<()> {
    let output = common::run_kept(skillprof, cmds, folder, args)?;
    if !output.status.success() {
        bail!(
            "skillprof run {} {} failed:\n{}",
            cmds.display(),
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

/// The run's failed requests, in words.
fn errors(folder: &Path) -> Result<String> {
    let records = entries_jsonl::read(&folder.join(entries_jsonl::FILE))?;
    let failed: Vec<String> = records
        .iter()
        .filter(|r| r.measure.outcome.errors > 0)
        .map(|r| {
            format!(
                "{}: {} failed ({})",
                r.measure.cmd,
                r.measure.outcome.errors,
                r.measure.outcome.first_error.as_deref().unwrap_or("?")
            )
        })
        .collect();
    Ok(if failed.is_empty() {
        format!("no request failed ({} entries)", records.len())
    } else {
        failed.join("; ")
    })
}
