//! Whether this process may load and attach BPF programs at all, checked up front so the
//! answer is "run it as root", not an EPERM from deep inside the loader.

use anyhow::{Context as _, Result, bail};

/// A capability: its name, its bit in /proc/PID/status's sets, and what skillprof does with
/// it (for a refusal that names what is missing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cap {
    pub name: &'static str,
    pub bit: u32,
    pub purpose: &'static str,
}

impl Cap {
    /// Whether the capability set `set` holds it.
    pub fn held_in(self, set: u64) -> bool {
        set & (1 << self.bit) != 0
    }
}

pub const BPF: Cap = Cap {
    name: "CAP_BPF",
    bit: 39,
    purpose: "load the BPF programs and maps",
};
pub const PERFMON: Cap = Cap {
    name: "CAP_PERFMON",
    bit: 38,
    purpose: "attach the tracing programs (reclaim, kswapd, exits)",
};
pub const SYS_ADMIN: Cap = Cap {
    name: "CAP_SYS_ADMIN",
    bit: 21,
    purpose: "attach the host's uprobes (code publishes, decommits, pagemap scans)",
};

/// This process's effective capabilities.
pub fn effective() -> Result<u64> {
    let status = procfs::process::Process::myself()
        .and_then(|me| me.status())
        .context("reading /proc/self/status")?;
    Ok(status.capeff)
}

/// Whether the effective capabilities allow loading tracing programs: CAP_BPF with
/// CAP_PERFMON (kernel >= 5.8), or CAP_SYS_ADMIN.
pub fn can_load_bpf() -> Result<bool> {
    let have = effective()?;
    Ok(SYS_ADMIN.held_in(have) || (BPF.held_in(have) && PERFMON.held_in(have)))
}

const NEEDS: &str = "needs root (CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN) to load BPF probes";

/// Fails unless BPF programs can be loaded, telling how to run `command` instead.
pub fn require_bpf(command: &str) -> Result<()> {
    if !can_load_bpf()? {
        bail!("{command} {NEEDS}; run it as root, e.g. `sudo {command}`");
    }
    Ok(())
}

/// The check `ProbeSession::start` makes: the same, and it names `--no-probes`.
pub fn require_bpf_for_run() -> Result<()> {
    if !can_load_bpf()? {
        bail!(
            "skillprof {NEEDS}; run it as root (e.g. `sudo skillprof run ...`), or pass \
             --no-probes to measure from procfs only (no syscall, fault, reclaim or stop \
             breakdown columns)"
        );
    }
    Ok(())
}
