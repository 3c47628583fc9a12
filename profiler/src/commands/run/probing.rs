//! The runner's side of the probes: a live session on the host, or none (`--no-probes`),
//! and in both cases the same columns in every row, so commands.csv keeps one header.

use std::path::PathBuf;

use async_trait::async_trait;

use anyhow::Result;

use crate::ground::cmds::Command;
use crate::producers::probes::{
    self, ProbeOptions, ProbeSession, stacks::EntryStacks, stop_breakdown,
};
use crate::record::host::Stopped;
use crate::record::probes::{ProbeCosts, ProbeMetrics, StopBreakdown};
use crate::record::time::{EntryTime, ProfileCheck, TimeProfile};
use crate::record::{EntryRecord, ProbesInfo, RunInfo};
use crate::views::output;

use super::interrupt::Abort;
use super::measure::{Begin, Host, Measurer};

pub enum Probing {
    Live(Box<ProbeSession>),
    Off,
}

impl Probing {
    /// Attaches to the host `pid` with `options`, or none (`--no-probes`).
    pub fn start(options: Option<&ProbeOptions>, pid: u32) -> Result<Self> {
        match options {
            Some(options) => Ok(Probing::Live(Box::new(ProbeSession::start(pid, options)?))),
            None => Ok(Probing::Off),
        }
    }

    pub fn info(&self) -> ProbesInfo {
        match self {
            Probing::Live(session) => ProbesInfo {
                enabled: true,
                mode: Some(session.mode()),
                mode_why: session.mode_why().map(str::to_owned),
                tracefs: session.tracefs(),
                statuses: session.statuses().to_vec(),
                costs: None,
                profile_check: None,
            },
            Probing::Off => ProbesInfo {
                enabled: false,
                mode: None,
                mode_why: None,
                tracefs: None,
                statuses: Vec::new(),
                costs: None,
                profile_check: None,
            },
        }
    }

    /// The probe table, or the loud line that there is none.
    pub fn describe(&self) -> String {
        match self {
            Probing::Live(session) => probes::tables::statuses(session.statuses()),
            Probing::Off => "probes off (--no-probes): every probe column stays empty\n".to_owned(),
        }
    }

    pub fn begin_entry(&self, index: usize) -> Result<()> {
        match self {
            Probing::Live(session) => session.begin_entry(index as u32),
            Probing::Off => Ok(()),
        }
    }

    /// Just before the host is stopped: the probes only its shutdown needs go live.
    pub fn arm_stop(&mut self) -> Result<()> {
        match self {
            Probing::Live(session) => session.arm_stop(),
            Probing::Off => Ok(()),
        }
    }

    /// The entry's probe metrics and, for `stop`, its breakdown into signal, drain, exit,
    /// teardown and reap.
    pub fn entry(
        &self,
        index: usize,
        stopped: Option<&Stopped>,
    ) -> Result<(Option<ProbeMetrics>, Option<StopBreakdown>)> {
        match self {
            Probing::Live(session) => {
                let metrics = session.entry(index as u32)?;
                let stop = stopped
                    .map(|stopped| breakdown(session, stopped))
                    .transpose()?;
                Ok((Some(metrics), stop))
            }
            Probing::Off => Ok((None, None)),
        }
    }

    /// With `--stacks`: entry `index`'s stacks, symbolised now, while the host runs; `probes`
    /// are the entry's metrics from [`Probing::entry`].
    pub fn stacks(
        &self,
        index: usize,
        probes: Option<&ProbeMetrics>,
    ) -> Result<Option<EntryStacks>> {
        match (self, probes) {
            (Probing::Live(session), Some(metrics)) => session.stacks(index as u32, metrics),
            _ => Ok(None),
        }
    }

    /// Entry `index`'s time profile, named now, while the host runs; `probes` are the entry's
    /// metrics from [`Probing::entry`].
    pub fn time(
        &self,
        index: usize,
        probes: Option<&ProbeMetrics>,
    ) -> Result<Option<(TimeProfile, EntryTime)>> {
        match (self, probes) {
            (Probing::Live(session), Some(metrics)) => session.time(index as u32, metrics),
            _ => Ok(None),
        }
    }

    pub fn costs(&self) -> Result<Option<ProbeCosts>> {
        match self {
            Probing::Live(session) => {
                session.finish_events()?;
                Ok(Some(session.costs()?))
            }
            Probing::Off => Ok(None),
        }
    }
}

fn breakdown(session: &ProbeSession, stopped: &Stopped) -> Result<StopBreakdown> {
    let timeline = session.stop_timeline()?;
    Ok(stop_breakdown(
        &timeline,
        stopped.signalled_ns,
        stopped.reaped_ns,
    ))
}

/// The probes as an entry's measurer: their counts, the stop's breakdown, the entry's time
/// profile in the run folder's profile/, and with `--stacks` its flamegraph in stacks/.
pub struct Probes {
    pub probing: Probing,
    pub folder: PathBuf,
    /// The time profile checked against the kernel, taken before `stop` ends the host's
    /// threads (and with them their CPU time).
    pub check: Option<ProfileCheck>,
}

impl Probing {
    /// The time profile checked against the kernel, now.
    fn profile_check(&self) -> Option<ProfileCheck> {
        match self {
            Probing::Live(session) => session.profile_check(),
            Probing::Off => None,
        }
    }
}

#[async_trait(?Send)]
impl Measurer for Probes {
    async fn begin(&mut self, begin: &mut Begin<'_>) -> Result<(), Abort> {
        if matches!(begin.entry.command, Command::Stop) {
            self.check = self.probing.profile_check();
            self.probing.arm_stop()?;
        }
        self.probing.begin_entry(begin.index)?;
        Ok(())
    }

    async fn end(&mut self, record: &mut EntryRecord, host: Host<'_>) -> Result<(), Abort> {
        let measure = &mut record.measure;
        let (mut probes, stop) = self
            .probing
            .entry(measure.index, measure.stopped.as_ref())?;
        if let Some(probes) = &mut probes {
            probes.name_publishes(&std::mem::take(&mut measure.outcome.spans));
        }
        // Named while the host runs: the stop entry's stacks die with it. A failure costs
        // the flamegraph, not the run.
        if measure.stopped.is_none() {
            let warn = |what: &str, error: anyhow::Error| {
                host.progress.note(&format!(
                    "warning: entry {}: no {what}: {error:#}",
                    measure.index
                ));
            };
            let stacks = self
                .probing
                .stacks(measure.index, probes.as_ref())
                .unwrap_or_else(|error| {
                    warn("stacks", error);
                    None
                });
            if let Some(stacks) = stacks {
                output::stacks::write(&self.folder, measure.index, &measure.cmd, &stacks)?;
                record.stacks = Some(stacks.summary);
            }
            let time = self
                .probing
                .time(measure.index, probes.as_ref())
                .unwrap_or_else(|error| {
                    warn("time profile", error);
                    None
                });
            if let Some((profile, time)) = time {
                if let Some(rows) = probes.as_mut().and_then(|p| p.skills.as_mut()) {
                    let off_cpu = time.off_cpu.is_some();
                    for row in rows {
                        row.time = Some(profile.of_skill(row.skill.as_deref(), row.phase, off_cpu));
                    }
                }
                let span = output::pprof::Span::ended_now(measure.took);
                output::profile::write(&self.folder, measure.index, &measure.cmd, &profile, span)?;
                record.time = Some(time);
            }
        }
        record.probes = probes;
        record.stop = stop;
        Ok(())
    }

    async fn finish(&mut self, info: &mut RunInfo) -> anyhow::Result<()> {
        let costs = self.probing.costs()?;
        let check = self.check.take().or_else(|| self.probing.profile_check());
        if let Some(probes) = &mut info.probes {
            probes.costs = costs;
            probes.profile_check = check;
        }
        Ok(())
    }
}
