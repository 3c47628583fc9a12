//! The pooling allocator giving memory back, seen from the host's own binary, where only the
//! host pays: two uprobes scoped to the host's process, on in every mode.
//! - Batched decommits: wasmtime's `decommit_pages`, which, given more than one range, hands
//!   them to the kernel in one process_madvise(2) call. Hit once per batch. (A probe on
//!   glibc's `syscall()`, which wasmtime calls for it, would also trap on every futex.)
//! - Scans before reuse: wasmtime's ioctl(PAGEMAP_SCAN), issued through rustix's `_ioctl`
//!   (a kept function; the syscall itself is inline). The program counts only that request.
//!
//! The session finds their functions in the same pass over the host's symbol table as the
//! marker's: a large host's table takes a good part of a second to read.

use anyhow::{Result, bail};
use aya::Ebpf;

use super::host_symbol::HostSymbol;
use crate::record::probes::{Mechanism, Probe, ProbeStatus};

const DECOMMIT_PROGRAM: &str = "uprobe_decommit";
const SCAN_PROGRAM: &str = "uprobe_pagemap_scan";

/// wasmtime's function, by the parts of its mangled name (legacy and v0 mangling).
pub fn is_decommit_pages(name: &str) -> bool {
    name.contains("8wasmtime") && name.contains("14decommit_pages")
}

/// The flag of wasmtime's batched decommit, which only wasmtimes whose `decommit_pages`
/// takes a slice of ranges have (older ones take one range: other arguments entirely).
pub fn is_batching_flag(name: &str) -> bool {
    name.contains("8wasmtime") && name.contains("15process_madvise") && name.contains("SUPPORTED")
}

/// rustix's `_ioctl(fd, request, arg)`: `6__ioctl` in v0 mangling (an identifier that starts
/// with `_` takes a separator), `6_ioctl17h…` in legacy mangling.
pub fn is_rustix_ioctl(name: &str) -> bool {
    name.contains("6rustix5ioctl") && (name.ends_with("6__ioctl") || name.contains("6_ioctl17h"))
}

/// wasmtime's module that resets a slot's pages by asking the kernel which were written
/// (PAGEMAP_SCAN, in wasmtimes from 2025 on): a wasmtime without it never issues the ioctl.
pub fn is_wasmtime_pagemap(name: &str) -> bool {
    name.contains("8wasmtime") && name.contains("7pagemap")
}

/// The host's functions the two probes follow ([`is_batching_flag`], [`is_decommit_pages`],
/// [`is_rustix_ioctl`], [`is_wasmtime_pagemap`], in that order), or why the binary could not
/// be read.
pub struct PoolFunctions {
    pub found: Result<[Option<HostSymbol>; 4], String>,
    /// The host's binary, for messages.
    pub binary: String,
}

/// A function a probe attaches to: the symbol, its name and what the probe counts there.
pub type Follows<'a> = (&'a HostSymbol, &'static str, &'static str);

impl PoolFunctions {
    /// The function the batched-decommit probe follows, or why the host has none.
    pub fn decommits(&self) -> Result<Follows<'_>> {
        let [flag, function, _, _] = self.read()?;
        if flag.is_none() {
            bail!(
                "{} has no wasmtime with batched decommits (older wasmtimes decommit one range at \
                 a time, with madvise, which the exact mode counts; or stripped)",
                self.binary
            );
        }
        let Some(function) = function else {
            bail!(
                "{} has no wasmtime decommit_pages (not built with wasmtime's pooling allocator, \
                 or stripped): batched decommits are not counted",
                self.binary
            );
        };
        Ok((function, "wasmtime's decommit_pages", "process_madvise"))
    }

    /// The function the PAGEMAP_SCAN probe follows, or why the host has none.
    pub fn pagemap_scan(&self) -> Result<Follows<'_>> {
        let [_, _, ioctl, pagemap] = self.read()?;
        if pagemap.is_none() {
            bail!(
                "{} has no wasmtime that resets slots with PAGEMAP_SCAN (older wasmtimes reset \
                 every page, which the exact mode's madvise counts show; or stripped)",
                self.binary
            );
        }
        let Some(ioctl) = ioctl else {
            bail!(
                "{} has no rustix _ioctl (inlined by LTO, or stripped): wasmtime's PAGEMAP_SCAN \
                 ioctls are not counted; the exact mode counts every ioctl of the host",
                self.binary
            );
        };
        Ok((ioctl, "rustix's _ioctl", "PAGEMAP_SCAN requests"))
    }

    /// The batched-decommit probe's line in the probe table: attached, or why not.
    pub fn attach_decommits(&self, ebpf: &mut Ebpf, tgid: u32) -> ProbeStatus {
        self.attach(
            ebpf,
            tgid,
            Probe::Decommits,
            DECOMMIT_PROGRAM,
            self.decommits(),
        )
    }

    /// The PAGEMAP_SCAN probe's line in the probe table: attached, or why not.
    pub fn attach_pagemap_scan(&self, ebpf: &mut Ebpf, tgid: u32) -> ProbeStatus {
        self.attach(
            ebpf,
            tgid,
            Probe::PagemapScan,
            SCAN_PROGRAM,
            self.pagemap_scan(),
        )
    }

    fn read(&self) -> Result<&[Option<HostSymbol>; 4]> {
        self.found.as_ref().map_err(|why| anyhow::anyhow!("{why}"))
    }

    /// Attaches `program` for `probe` to the function `follows` names, or says why not.
    fn attach(
        &self,
        ebpf: &mut Ebpf,
        tgid: u32,
        probe: Probe,
        program: &str,
        follows: Result<Follows<'_>>,
    ) -> ProbeStatus {
        let attached = follows.and_then(|(function, name, counts)| {
            function.attach(ebpf, program, tgid)?;
            Ok(format!(
                "uprobe on {name} in {} ({counts})",
                function.exe.display()
            ))
        });
        ProbeStatus::single(
            probe,
            Mechanism::Uprobe,
            &attached.map_err(|e: anyhow::Error| format!("{e:#}")),
            &[program],
        )
    }
}
