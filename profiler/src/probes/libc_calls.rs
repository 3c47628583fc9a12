//! glibc's `syscall()` in the host, for the calls wasmtime makes through it: process_madvise,
//! which decommits a batch of freed pool slots in one call. A uprobe and a uretprobe scoped to
//! the host's process: no other process runs them, so they are on in every mode.
//!
//! Not covered here: calls a host issues inline rather than through glibc (wasmtime's
//! PAGEMAP_SCAN ioctl goes through rustix, which makes the syscall itself), for which no
//! uprobe site exists in glibc.

use std::{fs, num::NonZeroU32, path::PathBuf};

use anyhow::{Context as _, Result};
use aya::{
    Ebpf,
    programs::{
        UProbe,
        uprobe::{UProbeAttachLocation, UProbeScope},
    },
};

use super::plan::{Mechanism, ProbeStatus};
use crate::record::probes::Probe;

/// The programs, entry and return.
const PROGRAMS: [&str; 2] = ["uprobe_syscall", "uretprobe_syscall"];
const FUNCTION: &str = "syscall";

/// Attaches both programs to `syscall()` in the glibc the host `tgid` has mapped.
pub fn attach(ebpf: &mut Ebpf, tgid: u32) -> Result<String> {
    let libc = libc_of(tgid)?;
    let pid = NonZeroU32::new(tgid).context("pid 0")?;
    for name in PROGRAMS {
        let program: &mut UProbe = ebpf
            .program_mut(name)
            .with_context(|| format!("the BPF object has no {name}"))?
            .try_into()?;
        program.load().with_context(|| format!("loading {name}"))?;
        program
            .attach(
                [UProbeAttachLocation::Symbol(FUNCTION)],
                &libc,
                UProbeScope::OneProcess(pid),
            )
            .with_context(|| format!("attaching {name} to {FUNCTION}() in {}", libc.display()))?;
    }
    Ok(format!(
        "uprobe and uretprobe on {FUNCTION}() in {} (process_madvise)",
        libc.display()
    ))
}

/// Its line in the probe table: attached, or why not.
pub fn status(result: &Result<String, String>) -> ProbeStatus {
    ProbeStatus::single(Probe::LibcCalls, Mechanism::Uprobe, result, &PROGRAMS)
}

/// The glibc the host has mapped, as the host sees the file.
fn libc_of(tgid: u32) -> Result<PathBuf> {
    let maps = format!("/proc/{tgid}/maps");
    let text = fs::read_to_string(&maps).with_context(|| format!("reading {maps}"))?;
    let path = text
        .lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .find(|path| {
            path.rsplit('/')
                .next()
                .is_some_and(|file| file.starts_with("libc.so"))
        })
        .context(
            "the host maps no glibc libc.so (a static or musl binary): its process_madvise \
             calls are not counted",
        )?;
    // Through the host's root, which is ours unless it runs in another mount namespace.
    Ok(PathBuf::from(format!("/proc/{tgid}/root{path}")))
}
