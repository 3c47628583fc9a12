//! `--user`: the watch giving up its privileges. Started as root, the watch attaches, opens
//! what it reads later, and then becomes the user with no capability at all; or, where it
//! attaches again later (`--follow`'s successor, `--record`'s runs), becomes the user at once
//! holding exactly what attaching needs ([`crate::producers::probes::privileges::needed`]) and nothing
//! else.

use anyhow::{Context, Result, bail};

use crate::producers::probes::privileges::Cap;

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
    let failed = |what: &'static str| {
        move |e: caps::errors::CapsError| anyhow::anyhow!("--user: {what}: {e}")
    };
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
