//! Whether this process may load and attach BPF programs at all, checked up front so the
//! answer names what is missing, not an EPERM from deep inside the loader. Probing a host
//! needs, on this kernel (6.18), found by running `skillprof watch` as `nobody` with one
//! capability at a time taken away (docs/watch.md):
//! - CAP_BPF and CAP_PERFMON, to load and attach the programs;
//! - CAP_CHECKPOINT_RESTORE, to map the host's ledger through /proc/PID/map_files (the
//!   per-skill rows; not with --no-markers);
//! - for a host of another user only: CAP_SYS_PTRACE (its executable, smaps and memory) and,
//!   for its ledger, CAP_DAC_READ_SEARCH (the ledger's memfd is that user's file).
//!
//! CAP_SYS_ADMIN is never required: without it the host's uprobes (code publishes, decommits,
//! pagemap scans) do not attach (perf_event_open refuses a uprobe without it), and the probe
//! table says so.

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

pub const CHECKPOINT_RESTORE: Cap = Cap {
    name: "CAP_CHECKPOINT_RESTORE",
    bit: 40,
    purpose: "map the host's ledger through /proc/PID/map_files, for the per-skill series \
              (or pass --no-markers for the host series only)",
};
pub const SYS_PTRACE: Cap = Cap {
    name: "CAP_SYS_PTRACE",
    bit: 19,
    purpose: "read the executable, smaps and memory of a host that runs as another user",
};
pub const DAC_READ_SEARCH: Cap = Cap {
    name: "CAP_DAC_READ_SEARCH",
    bit: 2,
    purpose: "open the ledger of a host that runs as another user (its memfd is that user's), \
              for the per-skill series (or pass --no-markers)",
};

/// What probing host `host_pid` (`None`: a host skillprof starts, as itself) needs, as the
/// user `uid`: CAP_BPF and CAP_PERFMON, the ledger's map_files (with markers), and another
/// user's host's files.
pub fn needed(host_pid: Option<u32>, markers: bool, uid: u32) -> Result<Vec<Cap>> {
    let mut needed = vec![BPF, PERFMON];
    if markers {
        needed.push(CHECKPOINT_RESTORE);
    }
    if let Some(pid) = host_pid {
        let host_uid = procfs::process::Process::new(pid as i32)
            .and_then(|host| host.uid())
            .with_context(|| format!("--attach {pid}: no such process"))?;
        if host_uid != uid {
            needed.push(SYS_PTRACE);
            if markers {
                needed.push(DAC_READ_SEARCH);
            }
        }
    }
    Ok(needed)
}

/// Fails naming each capability of `needed` this process lacks and what it is for, as
/// `command` (`skillprof watch`, `skillprof run --attach`); warns of CAP_SYS_ADMIN's uprobes
/// when it lacks that one.
pub fn require(command: &str, needed: &[Cap]) -> Result<()> {
    let have = effective()?;
    let missing: Vec<&Cap> = needed.iter().filter(|cap| !cap.held_in(have)).collect();
    if !missing.is_empty() {
        let list: Vec<String> = missing
            .iter()
            .map(|cap| format!("  {}: to {}", cap.name, cap.purpose))
            .collect();
        bail!(
            "{command} lacks {} capabilit{}:\n{}\nRun it as root, or grant these, e.g. \
             systemd's AmbientCapabilities= (docs/watch.md)",
            missing.len(),
            if missing.len() == 1 { "y" } else { "ies" },
            list.join("\n")
        );
    }
    if !SYS_ADMIN.held_in(have) {
        eprintln!(
            "{command}: without {} it does not {}: those probes are left out",
            SYS_ADMIN.name, SYS_ADMIN.purpose
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_capability_is_named_with_what_it_is_for() {
        // The top bit is no capability anyone holds.
        let nothing = Cap {
            name: "CAP_NONE",
            bit: 63,
            purpose: "do what no one may",
        };
        let said = format!("{:#}", require("skillprof watch", &[nothing]).unwrap_err());
        assert!(
            said.contains("lacks 1 capability:\n  CAP_NONE: to do what no one may"),
            "{said}"
        );
    }
}
