//! What the watch needs of its privileges, and giving them up. On this kernel (6.18) a watch
//! in the host-only mode needs, found by running it as `nobody` with one capability at a time
//! taken away (docs/watch.md):
//! - CAP_BPF and CAP_PERFMON, to load and attach its programs;
//! - CAP_CHECKPOINT_RESTORE, to map the host's ledger through /proc/PID/map_files (the
//!   per-skill series; not with --no-markers);
//! - for a host of another user only: CAP_SYS_PTRACE (its executable, smaps and memory) and,
//!   for its ledger, CAP_DAC_READ_SEARCH (the ledger's memfd is that user's file).
//!
//! CAP_SYS_ADMIN is never required: without it the host's uprobes (code publishes, decommits,
//! pagemap scans) do not attach (perf_event_open refuses a uprobe without it), and the probe
//! table says so. Started as root with `--user NAME`, the watch attaches, opens what it reads
//! later, and then becomes NAME with no capability at all; or, where it attaches again later
//! (`--follow`'s successor, `--record`'s runs), becomes NAME at once holding exactly what
//! attaching needs (for a host of another user, the whole list above) and nothing else.

use anyhow::{Context, Result, bail};

use crate::probes::privileges::{BPF, Cap, PERFMON, SYS_ADMIN, effective};

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

/// What the watch needs to watch host `host_pid` (`None`: a host it starts, as itself) as the
/// user `uid`.
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

/// Fails naming each capability of `needed` this process lacks and what it is for; warns of
/// CAP_SYS_ADMIN's uprobes when it lacks that one.
pub fn require(needed: &[Cap]) -> Result<()> {
    let have = effective()?;
    let missing: Vec<&Cap> = needed.iter().filter(|cap| !cap.held_in(have)).collect();
    if !missing.is_empty() {
        let list: Vec<String> = missing
            .iter()
            .map(|cap| format!("  {}: to {}", cap.name, cap.purpose))
            .collect();
        bail!(
            "skillprof watch lacks {} capabilit{}:\n{}\nRun it as root (it can then drop to \
             --user NAME once attached), or grant these, e.g. systemd's AmbientCapabilities= \
             (docs/watch.md)",
            missing.len(),
            if missing.len() == 1 { "y" } else { "ies" },
            list.join("\n")
        );
    }
    if !SYS_ADMIN.held_in(have) {
        eprintln!(
            "skillprof watch: without {} it does not {}: those probes are left out",
            SYS_ADMIN.name, SYS_ADMIN.purpose
        );
    }
    Ok(())
}

/// The account `--user` names.
pub fn account(user: &str) -> Result<nix::unistd::User> {
    nix::unistd::User::from_name(user)
        .with_context(|| format!("--user {user}: looking it up"))?
        .with_context(|| format!("--user {user}: no such user"))
}

/// Becomes `account` (its uid, its group, no other groups) holding `kept` and no other
/// capability: permitted and effective, and ambient so that the `skillprof run --attach` a
/// recording starts holds them too; the bounding set cut to them. Capabilities are a
/// thread's, so this runs before any other thread starts, and every later one inherits it.
pub fn become_keeping(account: &nix::unistd::User, kept: &[Cap]) -> Result<()> {
    use caps::{CapSet, Capability, CapsHashSet};
    let kept: CapsHashSet = kept
        .iter()
        .map(|cap| cap.name.parse::<Capability>())
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let failed =
        |what: &'static str| move |e: caps::errors::CapsError| anyhow::anyhow!("--user: {what}: {e}");
    for cap in caps::runtime::thread_all_supported().difference(&kept) {
        caps::drop(None, CapSet::Bounding, *cap).map_err(failed("the bounding set"))?;
    }
    // Without it, leaving uid 0 clears every capability.
    caps::securebits::set_keepcaps(true).map_err(failed("PR_SET_KEEPCAPS"))?;
    switch_ids(account)?;
    for set in [CapSet::Effective, CapSet::Permitted, CapSet::Inheritable] {
        caps::set(None, set, &kept).map_err(failed("capset"))?;
    }
    caps::securebits::set_keepcaps(false).map_err(failed("PR_SET_KEEPCAPS"))?;
    caps::set(None, CapSet::Ambient, &kept).map_err(failed("the ambient set"))?;
    let held = caps::read(None, CapSet::Permitted).map_err(failed("reading the permitted set"))?;
    if held != kept {
        bail!("--user: holds {held:?} after the switch, not {kept:?}");
    }
    Ok(())
}

fn switch_ids(account: &nix::unistd::User) -> Result<()> {
    let (uid, gid) = (account.uid, account.gid);
    nix::unistd::setgroups(&[gid]).context("--user: setgroups")?;
    nix::unistd::setresgid(gid, gid, gid).context("--user: setresgid")?;
    nix::unistd::setresuid(uid, uid, uid).context("--user: setresuid")?;
    Ok(())
}

/// Becomes `user` (its uid, its group, no other groups) with no capability left, for the rest
/// of the watch: what it reads later it has open already, or may read as anyone.
pub fn drop_to(user: &str) -> Result<(u32, u32)> {
    let account = account(user)?;
    // glibc changes the uid of every thread; leaving uid 0 without PR_SET_KEEPCAPS clears
    // each thread's permitted and effective capabilities.
    switch_ids(&account)?;
    let (uid, gid) = (account.uid, account.gid);
    for task in std::fs::read_dir("/proc/self/task").context("listing this process's threads")? {
        let status = std::fs::read_to_string(task?.path().join("status"))?;
        let held = |field: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(field))
                .is_some_and(|value| value.trim().chars().any(|c| c != '0'))
        };
        if held("CapPrm:") || held("CapEff:") || held("CapAmb:") {
            bail!("--user {user}: a thread kept capabilities after the switch: {status}");
        }
    }
    Ok((uid.as_raw(), gid.as_raw()))
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
        let said = format!("{:#}", require(&[nothing]).unwrap_err());
        assert!(
            said.contains("lacks 1 capability:\n  CAP_NONE: to do what no one may"),
            "{said}"
        );
    }
}
