//! The pooling allocator giving freed slots back in batches: a uprobe on wasmtime's
//! `decommit_pages` in the host's own binary, which, given more than one range, hands them to
//! the kernel in one process_madvise(2) call. Hit once per batch, only in the host, so it is
//! on in every mode (a probe on glibc's `syscall()`, which wasmtime calls for it, would also
//! trap on every futex of the host).
//!
//! Not covered: wasmtime's PAGEMAP_SCAN ioctl, which rustix issues inline (no function to
//! probe in glibc, and none of wasmtime's own that is reliably kept by name).

use std::num::NonZeroU32;

use anyhow::{Context as _, Result, bail};
use aya::{
    Ebpf,
    programs::{
        UProbe,
        uprobe::{UProbeAttachLocation, UProbeScope},
    },
};

use super::host_symbol;
use super::plan::{Mechanism, ProbeStatus};
use crate::record::probes::Probe;

const PROGRAM: &str = "uprobe_decommit";

/// wasmtime's function, by the parts of its mangled name (legacy and v0 mangling).
fn is_decommit_pages(name: &str) -> bool {
    name.contains("8wasmtime") && name.contains("14decommit_pages")
}

/// The flag of wasmtime's batched decommit, which only wasmtimes whose `decommit_pages`
/// takes a slice of ranges have (older ones take one range: other arguments entirely).
fn is_batching_flag(name: &str) -> bool {
    name.contains("8wasmtime") && name.contains("15process_madvise") && name.contains("SUPPORTED")
}

/// Attaches the uprobe to `decommit_pages` in the host `tgid`.
pub fn attach(ebpf: &mut Ebpf, tgid: u32) -> Result<String> {
    let [flag, function] = host_symbol::find_each(tgid, [&is_batching_flag, &is_decommit_pages])
        .map_err(|why| anyhow::anyhow!(why))?;
    let binary = || host_symbol::binary(tgid);
    if flag.is_none() {
        bail!(
            "{} has no wasmtime with batched decommits (older wasmtimes decommit one range at \
             a time, with madvise, which the exact mode counts; or stripped)",
            binary()
        );
    }
    let Some(function) = function else {
        bail!(
            "{} has no wasmtime decommit_pages (not built with wasmtime's pooling allocator, \
             or stripped): batched decommits are not counted",
            binary()
        );
    };
    let program: &mut UProbe = ebpf
        .program_mut(PROGRAM)
        .with_context(|| format!("the BPF object has no {PROGRAM}"))?
        .try_into()?;
    program
        .load()
        .with_context(|| format!("loading {PROGRAM}"))?;
    let pid = NonZeroU32::new(tgid).context("pid 0")?;
    program
        .attach(
            [UProbeAttachLocation::AbsoluteOffset(function.offset)],
            &function.exe,
            UProbeScope::OneProcess(pid),
        )
        .with_context(|| format!("attaching {PROGRAM}"))?;
    Ok(format!(
        "uprobe on wasmtime's decommit_pages in {} (process_madvise)",
        function.exe.display()
    ))
}

/// Its line in the probe table: attached, or why not.
pub fn status(result: &Result<String, String>) -> ProbeStatus {
    ProbeStatus::single(Probe::Decommits, Mechanism::Uprobe, result, &[PROGRAM])
}
