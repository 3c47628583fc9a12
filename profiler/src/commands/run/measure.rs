//! What measures an entry, behind one interface: the balloon, the memory cgroup, Locust, the
//! host's counters, the probes, the sampler and the composition of the host's memory. The
//! runner holds them in a list built from the run's configuration. They nest around each
//! entry like scopes: they begin in the list's order and end in the reverse, so the readings
//! that must sit closest to the entry's window (the composition's, next to the host's
//! counters) are taken last and read first, and a measurer reads, at its end, what the ones
//! after it in the list filled in.

use async_trait::async_trait;

use crate::ground::cmds::Entry;
use crate::producers::hostctl::{Client, ExitWatch};
use crate::record::{EntryRecord, Outcome, RunInfo};

use super::interrupt::{Abort, Signals};
use super::progress::Progress;

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
    /// A load line's skills: its schedule's one, or those of this run the host lists; Locust
    /// takes them. `None` for any other line.
    pub load_skills: Option<anyhow::Result<Vec<String>>>,
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

/// Each measurer's place in the list, from the first to begin an entry to the last; they end
/// it in the reverse order, so that an outer one reads what the inner ones filled in. The
/// balloon is outermost: it holds the machine's memory around everything else, and is the
/// first to give it back. The runner starts them in another order (the sampler first, so that
/// every later start is watched; the pressure last, since it may wait long): each takes its
/// place here as it starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Place {
    Pressure,
    Memcg,
    Locust,
    HostCounts,
    Probes,
    Sampler,
    Composition,
}

/// A run's measurers, in their [`Place`]s' order.
#[derive(Default)]
pub struct Measurers(Vec<(Place, Box<dyn Measurer>)>);

impl Measurers {
    /// Keeps a measurer that has started, at its place.
    pub fn keep(&mut self, place: Place, measurer: Box<dyn Measurer>) {
        let at = self.0.partition_point(|(kept, _)| *kept <= place);
        self.0.insert(at, (place, measurer));
    }

    fn each(&mut self) -> impl DoubleEndedIterator<Item = &mut Box<dyn Measurer>> {
        self.0.iter_mut().map(|(_, measurer)| measurer)
    }

    /// Begins each, in the list's order.
    pub async fn begin(&mut self, begin: &mut Begin<'_>) -> Result<(), Abort> {
        for measurer in self.each() {
            measurer.begin(begin).await?;
        }
        Ok(())
    }

    /// Runs the entry's command if one of them claims it: the first that does.
    pub async fn run(
        &mut self,
        entry: &Entry,
        running: &mut Running<'_>,
    ) -> Option<Result<(), Abort>> {
        for measurer in self.each() {
            if let Some(ran) = measurer.run(entry, running).await {
                return Some(ran);
            }
        }
        None
    }

    /// Ends each, in the reverse order: each reads what the ones after it filled in.
    pub async fn end(&mut self, record: &mut EntryRecord, host: Host<'_>) -> Result<(), Abort> {
        for measurer in self.each().rev() {
            measurer.end(record, host).await?;
        }
        Ok(())
    }

    /// Finishes each, in the list's order (the balloon first: the machine is not ours), then
    /// lets them go.
    pub async fn finish(&mut self, info: &mut RunInfo) -> anyhow::Result<()> {
        for measurer in self.each() {
            measurer.finish(info).await?;
        }
        self.0.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use super::*;
    use crate::ground::cmds::{self, InFlightCap};
    use crate::record::fixture::record;
    use crate::record::host::HostCounters;
    use crate::record::profile::HostProfile;

    /// A measurer that says what it was asked, in `said`; `claims` the lines it runs.
    struct StandIn {
        name: &'static str,
        claims: &'static str,
        said: Rc<RefCell<Vec<String>>>,
    }

    #[async_trait(?Send)]
    impl Measurer for StandIn {
        async fn begin(&mut self, begin: &mut Begin<'_>) -> Result<(), Abort> {
            let said = format!("begin {} {}", self.name, begin.index);
            self.said.borrow_mut().push(said);
            Ok(())
        }

        async fn run(
            &mut self,
            entry: &Entry,
            running: &mut Running<'_>,
        ) -> Option<Result<(), Abort>> {
            if !entry.name.starts_with(self.claims) {
                return None;
            }
            running.outcome.requests += 1;
            let said = format!("run {} {}", self.name, entry.name);
            self.said.borrow_mut().push(said);
            Some(Ok(()))
        }

        async fn end(&mut self, record: &mut EntryRecord, _host: Host<'_>) -> Result<(), Abort> {
            // The innermost fills in what the outer ones read.
            let seen = record.host.map_or(0, |counted| counted.requests);
            record.host = Some(HostCounters {
                requests: seen + 1,
                ..HostCounters::default()
            });
            let said = format!("end {} saw {seen}", self.name);
            self.said.borrow_mut().push(said);
            Ok(())
        }
    }

    fn stand_ins(said: &Rc<RefCell<Vec<String>>>) -> Measurers {
        let stand_in = |name, claims| -> Box<dyn Measurer> {
            Box::new(StandIn {
                name,
                claims,
                said: said.clone(),
            })
        };
        // Kept out of order, as the runner starts them.
        let mut measurers = Measurers::default();
        measurers.keep(Place::Sampler, stand_in("sampler", "-"));
        measurers.keep(Place::Pressure, stand_in("balloon", "pressure"));
        measurers.keep(Place::Locust, stand_in("locust", "l_execute_all"));
        measurers
    }

    /// The runner's contract with its measurers, without a host or root: they nest around an
    /// entry, the first that claims a command runs it, and an outer one reads at its end what
    /// the inner ones filled in.
    #[tokio::test]
    async fn measurers_nest_around_an_entry_and_one_runs_its_own_line() {
        let said = Rc::new(RefCell::new(Vec::new()));
        let mut measurers = stand_ins(&said);
        let plan = cmds::parse("t.cmds", "pressure low\nadd_rs\n", InFlightCap::new(1)).unwrap();
        let client = Client::new(
            "http://127.0.0.1:9",
            HostProfile::load("skillhost").unwrap().dialect,
        );
        let progress = Progress::new(plan.entries.len());
        let host = Host {
            pid: std::process::id(),
            client: &client,
            progress: &progress,
        };
        let mut signals = Signals::install().unwrap();
        let exit = ExitWatch::of(std::process::id()).unwrap();
        for (index, entry) in plan.entries.iter().take(2).enumerate() {
            let mut begin = Begin {
                index,
                entry,
                host,
                load_skills: None,
                signals: &mut signals,
            };
            assert!(measurers.begin(&mut begin).await.is_ok());
            let mut outcome = Outcome::default();
            let mut running = Running {
                progress: &progress,
                signals: &mut signals,
                exit: &exit,
                outcome: &mut outcome,
            };
            let ran = measurers.run(entry, &mut running).await;
            assert_eq!(
                ran.is_some(),
                index == 0,
                "only the pressure line is a measurer's"
            );
            let mut entry_record = record(&entry.name, 1.0);
            entry_record.measure.outcome = outcome;
            assert!(measurers.end(&mut entry_record, host).await.is_ok());
            assert_eq!(entry_record.host.map(|counted| counted.requests), Some(3));
        }
        assert_eq!(
            *said.borrow(),
            [
                "begin balloon 0",
                "begin locust 0",
                "begin sampler 0",
                "run balloon pressure low",
                "end sampler saw 0",
                "end locust saw 1",
                "end balloon saw 2",
                "begin balloon 1",
                "begin locust 1",
                "begin sampler 1",
                "end sampler saw 0",
                "end locust saw 1",
                "end balloon saw 2",
            ]
        );
    }
}
