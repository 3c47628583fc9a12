//! One entry's command run by the workload: its command `repeat` times, or a fill, watched
//! for the host's exit and for interruptions, with the host's memory after every step.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::ground::cmds::{Command, Entry, SkillKind};
use crate::ground::units;
use crate::producers::hostctl::ExitWatch;
use crate::producers::sample;
use crate::producers::sample::process::{self, ProcessError};
use crate::producers::system::cgroup::MemoryCgroup;
use crate::record::memcg::MemcgStat;
use crate::record::process::ProcessStat;
use crate::record::{Fill, FillStop, Outcome, Step};

use super::interrupt::{Abort, Interruption, Signals};
use super::progress::Progress;
use super::workload::Workload;

/// How long the end of a dying host's exit may lag its closed connections.
const DEATH_GRACE: Duration = Duration::from_secs(1);

/// The host as an entry watches it: its process, its exit, its memory cgroup.
pub struct Watched<'a> {
    pub pid: u32,
    pub exit: &'a ExitWatch,
    pub cgroup: Option<Arc<MemoryCgroup>>,
    pub progress: &'a Progress,
}

impl Watched<'_> {
    /// The host's memory after a step, and its cgroup's account read for it.
    fn step(&self) -> Result<(Step, Option<MemcgStat>), Abort> {
        let memcg = self.cgroup.as_deref().map(MemoryCgroup::read).transpose()?;
        let step = Step {
            rss_kb: alive(process::read(Path::new(sample::PROC), self.pid))?.rss_kb,
            memcg_kb: memcg.map(|memcg| memcg.usage_bytes / 1024),
        };
        Ok((step, memcg))
    }
}

/// Runs one entry (its command `repeat` times, or a fill) unless interrupted or the host
/// exits; what it did until then is in the outcome either way.
pub async fn run(
    workload: &mut Workload,
    entry: &Entry,
    signals: &mut Signals,
    host: &Watched<'_>,
) -> (Outcome, Result<(), Abort>) {
    let mut outcome = Outcome::default();
    let mut ended = {
        let steps = async {
            match entry.command {
                Command::Fill { kind, max } => fill(workload, kind, max, host, &mut outcome).await,
                ref command => {
                    for _ in 0..entry.repeat {
                        workload.run(command, &mut outcome).await?;
                        outcome.steps.push(host.step()?.0);
                    }
                    Ok(())
                }
            }
        };
        tokio::select! {
            done = steps => done,
            interruption = signals.next() => Err(Abort::Interrupted(interruption)),
            () = host.exit.exited() => Err(host_gone()),
        }
    };
    // A dying host resets its connections a moment before it becomes a zombie, so the
    // requests can fail first: an entry that saw failures waits a moment to know whether
    // they were the host's death.
    if ended.is_ok()
        && outcome.errors > 0
        && tokio::time::timeout(DEATH_GRACE, host.exit.exited())
            .await
            .is_ok()
    {
        ended = Err(host_gone());
    }
    if let (Some(fill), Err(Abort::Interrupted(Interruption::HostExited))) =
        (&mut outcome.fill, &ended)
    {
        fill.stopped = FillStop::Killed;
    }
    (outcome, ended)
}

/// Adds skills one at a time until the cgroup reaches its limit, one fails, or `max` fit.
async fn fill(
    workload: &mut Workload,
    kind: SkillKind,
    max: u32,
    host: &Watched<'_>,
    outcome: &mut Outcome,
) -> Result<(), Abort> {
    let cgroup = host
        .cgroup
        .as_deref()
        .expect("a fill without --memory-max is refused before the run");
    let hits_before = cgroup.read()?.limit_hits;
    let mut fill = Fill {
        fitted: 0,
        stopped: FillStop::Bound,
    };
    outcome.fill = Some(fill);
    for _ in 0..max {
        let errors = outcome.errors;
        workload.add(kind, 1, outcome).await?;
        let (step, memcg) = host.step()?;
        outcome.steps.push(step);
        let memcg = memcg.expect("the cgroup is read with every step");
        let hits = memcg.limit_hits - hits_before;
        let stopped = if outcome.errors > errors {
            Some(FillStop::Failed)
        } else if hits > 0 {
            Some(FillStop::Limit { hits })
        } else {
            None
        };
        match stopped {
            Some(stopped) => {
                fill.stopped = stopped;
                outcome.fill = Some(fill);
                return Ok(());
            }
            None => {
                fill.fitted += 1;
                outcome.fill = Some(fill);
                host.progress.note(&format!(
                    "  fill: {} skill(s) held, the cgroup charged {} of {}",
                    fill.fitted,
                    units::bytes(memcg.usage_bytes as f64),
                    units::bytes(cgroup.limit_bytes() as f64)
                ));
            }
        }
    }
    Ok(())
}

/// The entry's end when the host exited under it.
pub fn host_gone() -> Abort {
    Abort::Interrupted(Interruption::HostExited)
}

/// A reading of the host process; its absence means the host died.
pub fn alive(read: Result<ProcessStat, ProcessError>) -> Result<ProcessStat, Abort> {
    match read {
        Ok(stat) => Ok(stat),
        Err(ProcessError::Gone { .. }) => Err(host_gone()),
        Err(error) => Err(Abort::Failed(error.into())),
    }
}
