//! A host skillprof did not start (under systemd, in a container, by hand): checked before
//! anything runs, so that bad input fails with the reason and leaves nothing behind. The
//! process must be running, its address must answer, and the skills directory given must be
//! the one it watches, which only a skill that appears in its listing can show.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};

use super::client::Client;
use super::process::HostProcess;
use super::skills_dir::SkillsDir;
use crate::record::profile::HostProfile;

/// How long the address may take to answer its health route.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// The host process `pid`, running, and its address `url` answering its health route: a
/// client for it, or why not.
pub async fn answering(
    pid: u32,
    url: &str,
    dialect: crate::record::profile::Dialect,
) -> Result<Client> {
    let state = procfs::process::Process::new(pid as i32)
        .and_then(|process| process.stat())
        .map(|stat| stat.state)
        .with_context(|| format!("--attach {pid}: no such process"))?;
    ensure!(
        state != 'Z' && state != 'X',
        "--attach {pid}: the process has exited (state {state})"
    );
    let client = Client::new(url, dialect);
    let health = &client.dialect().routes.health;
    match tokio::time::timeout(ANSWER_TIMEOUT, client.call(health)).await {
        Ok(Ok(reply)) if reply.is_ok() => {}
        Ok(Ok(reply)) => bail!("--host-url {url}: {health} answered {}", reply.status),
        Ok(Err(error)) => bail!("--host-url {url} does not answer: {error:#}"),
        Err(_) => bail!(
            "--host-url {url}: no answer to {health} within {} s",
            ANSWER_TIMEOUT.as_secs()
        ),
    }
    Ok(client)
}

/// Checks the host process `pid` serving at `url` and watching `skills_dir`, and returns it
/// with that directory. `probe` is a component written there (and removed again) under a
/// name of skillprof's own, to see the host list it within `list_timeout`.
pub async fn attach(
    pid: u32,
    url: &str,
    skills_dir: &Path,
    profile: HostProfile,
    probe: &Path,
    list_timeout: Duration,
) -> Result<(HostProcess, SkillsDir)> {
    let client = answering(pid, url, profile.dialect.clone()).await?;
    ensure!(
        skills_dir.is_dir(),
        "--skills-dir {}: not a directory",
        skills_dir.display()
    );
    let skills = SkillsDir::open(skills_dir, profile.registry);
    let name = format!("skillprof_probe_{}", std::process::id());
    skills.add(&name, probe)?;
    let listed = client
        .wait_until_listed(std::slice::from_ref(&name), list_timeout)
        .await;
    skills.remove(&name)?;
    if let Err(error) = listed {
        bail!(
            "--skills-dir {}: the host at {url} did not list the skill skillprof wrote there \
             ({error:#}); is it the directory the host watches?",
            skills_dir.display()
        );
    }
    client
        .wait_until_unlisted(&name, list_timeout)
        .await
        .context("removing skillprof's probe skill again")?;
    Ok((HostProcess::attached(pid, client), skills))
}
