//! Whether this process may load and attach BPF programs at all, checked up front so the
//! answer is "run it as root", not an EPERM from deep inside the loader.

use anyhow::{Context as _, Result, bail};

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// Whether the effective capabilities allow loading tracing programs: CAP_BPF with
/// CAP_PERFMON (kernel >= 5.8), or CAP_SYS_ADMIN.
pub fn can_load_bpf() -> Result<bool> {
    let status = procfs::process::Process::myself()
        .and_then(|me| me.status())
        .context("reading /proc/self/status")?;
    let has = |cap: u32| status.capeff & (1 << cap) != 0;
    Ok(has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON)))
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
