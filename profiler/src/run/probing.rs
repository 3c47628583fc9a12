//! The runner's side of the probes: a live session on the host, or none (`--no-probes`),
//! and in both cases the same columns in every row, so commands.csv keeps one header.

use std::path::Path;

use anyhow::Result;

use crate::hostctl::Stopped;
use crate::probes::{
    self, ProbeCosts, ProbeMetrics, ProbeSession, StopBreakdown, stacks::EntryStacks,
    stop_breakdown,
};
use crate::record::ProbesInfo;

use super::args::RunArgs;

pub enum Probing {
    Live(Box<ProbeSession>),
    Off,
}

impl Probing {
    /// Attaches to the host `pid` unless probes are off; `entries` is the plan's length.
    pub fn start(args: &RunArgs, pid: u32, entries: usize, folder: &Path) -> Result<Self> {
        if args.no_probes {
            return Ok(Probing::Off);
        }
        let events = args.events.then(|| folder.join("events.csv"));
        let mut options = args.mechanisms.options(events, entries as u32 + 1)?;
        options.stacks = args.stacks;
        options.mode = args.probe_mode()?;
        options.syscall_latency = args.syscall_latency;
        options.no_markers = args.no_markers;
        Ok(Probing::Live(Box::new(ProbeSession::start(pid, &options)?)))
    }

    pub fn info(&self) -> ProbesInfo {
        match self {
            Probing::Live(session) => ProbesInfo {
                enabled: true,
                mode: Some(session.mode()),
                tracefs: session.tracefs(),
                statuses: session.statuses().to_vec(),
                costs: None,
            },
            Probing::Off => ProbesInfo {
                enabled: false,
                mode: None,
                tracefs: None,
                statuses: Vec::new(),
                costs: None,
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
