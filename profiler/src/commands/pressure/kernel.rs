//! What the kernel did while one band was held: kswapd, direct reclaim, LRU scanning, memory
//! stalls, major faults and swap. Each figure comes from the probes when they run and from
//! procfs otherwise, and says which: a figure neither can measure stays empty.

use crate::record::probes::{Probe, ProbeMetrics};
use std::time::{Duration, Instant};

use anyhow::Result;

use super::kswapd::Kswapd;
use skillprof_common::{Counters as ProbeCounters, LruCounts};

use crate::producers::probes::ProbeSession;
use crate::producers::sample::PROC;
use crate::producers::sample::psi::{self, Psi};
use crate::producers::sample::vmstat::{self, Vmstat};
use crate::record::{Column, Metrics, Row, Unit};

/// Where a figure came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The BPF probes (vmscan tracepoints), attributed to the band's window.
    Probes,
    /// A /proc counter read at both ends of the window.
    Procfs,
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Source::Probes => "probes",
            Source::Procfs => "procfs",
        }
    }
}

/// One figure and its source; `None` when nothing here measures it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Figure {
    pub value: f64,
    pub source: Source,
}

/// The counters read at both ends of a window.
struct Counters {
    at: Instant,
    vmstat: Vmstat,
    psi: Option<Psi>,
    kswapd: Duration,
}

impl Counters {
    fn read(kswapd: &Kswapd) -> Result<Counters> {
        let proc_root = std::path::Path::new(PROC);
        Ok(Counters {
            at: Instant::now(),
            vmstat: vmstat::read(proc_root)?,
            psi: psi::read(proc_root)?,
            kswapd: kswapd.cpu_time()?,
        })
    }
}

/// The start of one band's window.
pub struct Window {
    index: u32,
    before: Counters,
}

impl Window {
    /// Starts the window; with probes, their events count in entry `index` from now on.
    pub fn begin(index: u32, probes: Option<&ProbeSession>, kswapd: &Kswapd) -> Result<Window> {
        if let Some(session) = probes {
            session.begin_entry(index)?;
        }
        Ok(Window {
            index,
            before: Counters::read(kswapd)?,
        })
    }

    pub fn end(self, probes: Option<&ProbeSession>, kswapd: &Kswapd) -> Result<KernelMetrics> {
        let after = Counters::read(kswapd)?;
        let psi = self.before.psi.zip(after.psi).map(|(before, after)| {
            (
                after.some_total_us - before.some_total_us,
                after.full_total_us - before.full_total_us,
            )
        });
        Ok(KernelMetrics {
            probes: probes
                .map(|session| session.entry(self.index))
                .transpose()?,
            vmstat: after.vmstat.since(&self.before.vmstat),
            psi_us: psi,
            kswapd_cpu: after.kswapd.saturating_sub(self.before.kswapd),
            wall: after.at - self.before.at,
        })
    }
}

/// The kernel's side of one band.
#[derive(Clone, Debug)]
pub struct KernelMetrics {
    pub probes: Option<ProbeMetrics>,
    /// Changes of the kept /proc/vmstat counters.
    pub vmstat: Vec<(String, i64)>,
    /// PSI memory (some, full) stall time, µs; `None` without PSI.
    pub psi_us: Option<(u64, u64)>,
    pub kswapd_cpu: Duration,
    pub wall: Duration,
}

impl KernelMetrics {
    /// A figure of `probe`'s counters; `None` without probes or if it did not attach.
    fn probe(&self, probe: Probe, figure: impl Fn(&ProbeCounters) -> f64) -> Option<Figure> {
        let value = self.probes.as_ref()?.read(probe, figure)?;
        Some(Figure {
            value,
            source: Source::Probes,
        })
    }

    /// An LRU figure over every reclaim context.
    fn lru(&self, figure: impl Fn(&LruCounts) -> u64) -> Option<Figure> {
        self.probe(Probe::LruShrink, |c| figure(&c.lru_total()) as f64)
    }

    /// The sum of the vmstat counters `counted` picks; `None` if it picks none.
    fn vmstat_sum(&self, counted: impl Fn(&str) -> bool) -> Option<Figure> {
        let mut picked = self
            .vmstat
            .iter()
            .filter(|(name, _)| counted(name))
            .peekable();
        picked.peek()?;
        Some(Figure {
            value: picked.map(|(_, change)| *change as f64).sum(),
            source: Source::Procfs,
        })
    }

    fn vmstat(&self, name: &str) -> Option<Figure> {
        self.vmstat_sum(|counter| counter == name)
    }

    pub fn kswapd_cpu_percent(&self) -> Figure {
        Figure {
            value: 100.0 * self.kswapd_cpu.as_secs_f64() / self.wall.as_secs_f64().max(1e-9),
            source: Source::Procfs,
        }
    }

    pub fn kswapd_wakes(&self) -> Option<Figure> {
        self.probe(Probe::Kswapd, |c| c.kswapd.wakes as f64)
    }

    pub fn kswapd_awake_ms(&self) -> Option<Figure> {
        self.probe(Probe::Kswapd, |c| c.kswapd.awake_ns as f64 / 1e6)
    }

    /// Direct reclaims by every process: the probes' count (the iterating process and the
    /// others), else the allocstall counters.
    pub fn direct_reclaims(&self) -> Option<Figure> {
        self.probe(Probe::DirectReclaim, |c| {
            (c.direct.host + c.direct.others) as f64
        })
        .or_else(|| self.vmstat_sum(|name| name.starts_with("allocstall_")))
    }

    /// Time the iterating process spent in direct reclaim (probes only).
    pub fn direct_reclaim_ms(&self) -> Option<Figure> {
        self.probe(Probe::DirectReclaim, |c| c.direct.host_ns as f64 / 1e6)
    }

    pub fn direct_reclaim_max_ms(&self) -> Option<Figure> {
        self.probe(Probe::DirectReclaim, |c| c.direct.host_max_ns as f64 / 1e6)
    }

    pub fn lru_scanned(&self) -> Option<Figure> {
        self.lru(|ctx| ctx.scanned)
            .or_else(|| self.vmstat_sum(|name| ["pgscan_kswapd", "pgscan_direct"].contains(&name)))
    }

    pub fn lru_reclaimed(&self) -> Option<Figure> {
        self.lru(|ctx| ctx.reclaimed).or_else(|| {
            self.vmstat_sum(|name| ["pgsteal_kswapd", "pgsteal_direct"].contains(&name))
        })
    }

    pub fn psi_ms(&self) -> Option<(Figure, Figure)> {
        let (some, full) = self.psi_us?;
        let ms = |us: u64| Figure {
            value: us as f64 / 1e3,
            source: Source::Procfs,
        };
        Some((ms(some), ms(full)))
    }

    /// Major faults, system-wide.
    pub fn major_faults(&self) -> Option<Figure> {
        self.vmstat("pgmajfault")
    }

    /// Pages reclaimed from the page cache and from anonymous memory, by kswapd and direct
    /// reclaim together, system-wide (vmstat pgsteal_file, pgsteal_anon: 5.8 and later).
    pub fn reclaimed_file_anon(&self) -> Option<(Figure, Figure)> {
        self.vmstat("pgsteal_file").zip(self.vmstat("pgsteal_anon"))
    }

    pub fn swap_in_out(&self) -> Option<(Figure, Figure)> {
        self.vmstat("pswpin").zip(self.vmstat("pswpout"))
    }
}

static VMSTAT: Column = Column::new(
    "vmstat_*",
    Unit::Count,
    "change of a /proc/vmstat counter over the band's iterations",
);
static PSI_SOME: Column = Column::new(
    "psi_some_us",
    Unit::Us,
    "memory stall time over the band in which at least one task stalled",
);
static PSI_FULL: Column = Column::new(
    "psi_full_us",
    Unit::Us,
    "memory stall time over the band in which all non-idle tasks stalled at once",
);
static KSWAPD_CPU: Column = Column::new("kswapd_cpu_ms", Unit::Ms, "CPU time kswapd used");
static KSWAPD_PCT: Column = Column::new(
    "kswapd_cpu_pct",
    Unit::Percent,
    "kswapd's CPU time as a share of the band's wall time",
);

/// Every probe column (absent without probes), then the procfs figures.
impl Metrics for KernelMetrics {
    fn write(&self, row: &mut Row) {
        ProbeMetrics::write_cells(self.probes.as_ref(), row);
        for (name, change) in &self.vmstat {
            row.put_in(&VMSTAT, format!("vmstat_{name}"), *change);
        }
        row.put(&PSI_SOME, self.psi_us.map(|psi| psi.0))
            .put(&PSI_FULL, self.psi_us.map(|psi| psi.1))
            .put(&KSWAPD_CPU, self.kswapd_cpu.as_secs_f64() * 1e3)
            .put(&KSWAPD_PCT, self.kswapd_cpu_percent().value);
    }
}
