//! What measures an entry, behind one interface: the balloon, the memory cgroup, Locust, the
//! host's counters, the probes, the sampler and the composition of the host's memory. The
//! runner holds them in a list built from the run's configuration. They nest around each
//! entry like scopes: they begin in the list's order and end in the reverse, so the readings
//! that must sit closest to the entry's window (the composition's, next to the host's
//! counters) are taken last and read first, and a measurer reads, at its end, what the ones
//! after it in the list filled in.

use async_trait::async_trait;

use crate::cmds::Entry;
use crate::hostctl::{Client, ExitWatch};
use crate::record::{EntryRecord, Outcome, RunInfo};

use super::interrupt::{Abort, Signals};
use super::progress::Progress;
use super::workload::Workload;

/// The host as a measurer sees it.
#[derive(Clone, Copy)]
pub struct Host<'a> {
    pub pid: u32,
    pub client: &'a Client,
    pub progress: &'a Progress,
}

/// An entry about to begin.
pub struct Begin<'a> {
    pub index: usize,
    pub entry: &'a Entry,
    pub host: Host<'a>,
    /// What runs the entry's command: Locust asks it which of the host's skills are ours.
    pub workload: &'a Workload,
    pub signals: &'a mut Signals,
}

/// The entry's window, for a measurer that runs its command.
pub struct Running<'a> {
    pub progress: &'a Progress,
    pub signals: &'a mut Signals,
    pub exit: &'a ExitWatch,
    pub outcome: &'a mut Outcome,
}

#[async_trait(?Send)]
pub trait Measurer {
    /// Entry `begin.index` is about to start: the readings its figures start from.
    async fn begin(&mut self, _begin: &mut Begin<'_>) -> Result<(), Abort> {
        Ok(())
    }

    /// Runs the entry's command, if it is this measurer's (`pressure` lines are the
    /// balloon's, load lines Locust's); `None` if it is not.
    async fn run(
        &mut self,
        _entry: &Entry,
        _running: &mut Running<'_>,
    ) -> Option<Result<(), Abort>> {
        None
    }

    /// The entry ended: its part of `record`, whose `measure` is the runner's own. The host
    /// is gone when `record.measure.after` is `None`.
    async fn end(&mut self, record: &mut EntryRecord, host: Host<'_>) -> Result<(), Abort>;

    /// The run is over, however it ended, and the host stopped: undo what the measurer
    /// changed on the machine, and fill in its share of the run's info.
    async fn finish(&mut self, _info: &mut RunInfo) -> anyhow::Result<()> {
        Ok(())
    }
}
