//! Whether this process may load and attach BPF programs at all, checked up front so the
//! answer is "run it as root", not an EPERM from deep inside the loader.

use anyhow::{Context as _, Result, bail};

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// Fails unless the effective capabilities allow loading tracing programs: CAP_BPF with
/// CAP_PERFMON (kernel >= 5.8), or CAP_SYS_ADMIN.
pub fn require_bpf(command: &str) -> Result<()> {
    let status = procfs::process::Process::myself()
        .and_then(|me| me.status())
        .context("reading /proc/self/status")?;
    let has = |cap: u32| status.capeff & (1 << cap) != 0;
    if !(has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON))) {
        bail!(
            "{command} needs root (CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN) to load BPF probes; \
             run it as root, e.g. `sudo {command}`"
        );
    }
    Ok(())
}
