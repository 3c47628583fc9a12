//! What one scrape of a watched host reads: the probes' counts since the watch began, and
//! the host's and the machine's state now. Reading is the only work a scrape does; the
//! exposition renders what was read.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::producers::hostctl::Client;
use crate::producers::hostctl::host_metrics::{HostGauges, read_gauges};
use crate::producers::probes::ProbeSession;
use crate::producers::sample::composition::HostFiles;
use crate::producers::sample::psi::{self, Psi};
use crate::producers::sample::zoneinfo::{self, Zone};
use crate::producers::sample::{PROC, process};
use crate::producers::system::cgroup::ChargedTo;
use crate::record::composition::Composition;
use crate::record::memcg::MemcgStat;
use crate::record::probes::ProbeMetrics;
use crate::record::process::ProcessStat;

/// How old the host's smaps reading may be: reading it walks every mapping (milliseconds to
/// tens of them for a large host; a hundred and more for one of 10,000 skills), too much for
/// every scrape. A scrape that finds it older serves it still and has a thread of its own read
/// it again, so no scrape waits for smaps but the first.
pub const HELD_EVERY: Duration = Duration::from_secs(10);

/// How long a scrape waits for the host's own metrics.
const HOST_METRICS_WAIT: Duration = Duration::from_millis(500);

pub struct Snapshot {
    /// Everything the probes counted since the watch began (entry 0, never reset: every
    /// figure only grows, as Prometheus counters do).
    pub probes: ProbeMetrics,
    /// The host's memory by holder, at most [`HELD_EVERY`] and a scrape interval old; `None`
    /// if unreadable.
    pub held: Option<Composition>,
    pub max_map_count: Option<u64>,
    pub psi: Option<Psi>,
    pub zones: Vec<Zone>,
    /// The memory cgroup the host is charged to, if it has one: its path, the kernel's
    /// account and its limit.
    pub cgroup: Option<(String, MemcgStat, Option<u64>)>,
    /// The host's own gauges: its pooling allocator's slots by kind (skillhost's
    /// `skillhost_pool_slots`; empty on demand) and its skills by state (`skillhost_skills`);
    /// empty for a host without them.
    pub host_gauges: HostGauges,
    /// The host process now (statm and stat, every scrape: the held parts are up to
    /// [`HELD_EVERY`] old): its RSS and CPU time.
    pub process: Option<ProcessStat>,
    /// The machine's memory (MemTotal), and the CPUs the host may run on (its affinity).
    pub memory_kb: Option<u64>,
    pub host_cpus: Option<u64>,
    pub own: OwnCost,
}

/// skillprof's own cost so far.
pub struct OwnCost {
    pub cpu: Duration,
    pub rss_kb: Option<u64>,
    /// The previous scrape's reading time.
    pub last_scrape: Duration,
}

/// What a scrape reads, and the readings it keeps between scrapes.
pub struct Reader {
    pid: u32,
    /// The host's API, for its own pool gauges.
    client: Client,
    /// Opened while the watch has its privileges, so that it reads them without.
    host_files: Option<Arc<HostFiles>>,
    held: Arc<Mutex<Held>>,
    last_scrape: Mutex<Duration>,
}

/// The host's memory by holder as last read, and whether a thread is reading it again.
#[derive(Default)]
struct Held {
    read: Option<(Instant, Option<Composition>)>,
    reading: bool,
}

impl Reader {
    pub fn new(pid: u32, client: Client) -> Self {
        Reader {
            pid,
            client,
            host_files: HostFiles::open(Path::new(PROC), pid).map(Arc::new),
            held: Arc::default(),
            last_scrape: Mutex::new(Duration::ZERO),
        }
    }

    pub fn read(&self, session: &ProbeSession) -> Result<Snapshot> {
        let started = Instant::now();
        let proc_root = Path::new(PROC);
        let probes = session.entry(0)?;
        let held = self.held();
        let max_map_count = std::fs::read_to_string("/proc/sys/vm/max_map_count")
            .ok()
            .and_then(|text| text.trim().parse().ok());
        let own = OwnCost {
            cpu: own_cpu(),
            rss_kb: process::read(proc_root, std::process::id())
                .ok()
                .map(|stat| stat.rss_kb),
            last_scrape: *self.last_scrape.lock().unwrap(),
        };
        let snapshot = Snapshot {
            probes,
            held,
            max_map_count,
            psi: psi::read(proc_root).ok().flatten(),
            zones: zoneinfo::read(proc_root)
                .map(|zones| zones.into_iter().filter(Zone::populated).collect())
                .unwrap_or_default(),
            // Found again at every scrape: a host can be moved to another cgroup.
            cgroup: ChargedTo::of(self.pid).and_then(|cgroup| {
                Some((
                    cgroup.path().to_owned(),
                    cgroup.read().ok()?,
                    cgroup.limit_bytes(),
                ))
            }),
            host_gauges: self.host_gauges(),
            process: process::read(proc_root, self.pid).ok(),
            memory_kb: crate::ground::machine::memory_kb()
                .ok()
                .map(|(total, _)| total),
            host_cpus: rustix::process::Pid::from_raw(self.pid as i32)
                .and_then(|pid| rustix::thread::sched_getaffinity(Some(pid)).ok())
                .map(|set| set.count() as u64),
            own,
        };
        *self.last_scrape.lock().unwrap() = started.elapsed();
        Ok(snapshot)
    }
}

impl Reader {
    /// The host's gauges as it serves them, waiting at most [`HOST_METRICS_WAIT`]: a host
    /// too busy to answer leaves them out of the scrape, not the scrape waiting.
    fn host_gauges(&self) -> HostGauges {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return HostGauges::default();
        };
        let read = tokio::time::timeout(HOST_METRICS_WAIT, read_gauges(&self.client));
        runtime.block_on(read).unwrap_or_default()
    }

    /// The last reading of the host's memory by holder (the first scrape reads it itself),
    /// and a fresh one started if it is older than [`HELD_EVERY`].
    fn held(&self) -> Option<Composition> {
        let Some(files) = &self.host_files else {
            return None;
        };
        let mut held = self.held.lock().unwrap();
        match held.read {
            None => {
                let read = files.read();
                held.read = Some((Instant::now(), read));
                read
            }
            Some((at, read)) => {
                if at.elapsed() >= HELD_EVERY && !held.reading {
                    held.reading = true;
                    let (files, kept) = (files.clone(), self.held.clone());
                    std::thread::spawn(move || {
                        let read = files.read();
                        let mut held = kept.lock().unwrap();
                        held.read = Some((Instant::now(), read));
                        held.reading = false;
                    });
                }
                read
            }
        }
    }
}

/// This process's CPU time, user and system; zero if /proc/self cannot be read.
fn own_cpu() -> Duration {
    let Ok(stat) = procfs::process::Process::myself().and_then(|me| me.stat()) else {
        return Duration::ZERO;
    };
    let ticks = procfs::ticks_per_second() as f64;
    Duration::from_secs_f64((stat.utime + stat.stime) as f64 / ticks)
}
