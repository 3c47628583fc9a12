//! The measurers that read the host and its cgroup at an entry's two boundaries: the sampler
//! (and the kernel's own RSS peak), the host's own counters, what holds its memory, and its
//! memory cgroup.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;

use crate::ground::cmds::Command;
use crate::producers::sample::cpu_quota::{self, QuotaReading};
use crate::producers::sample::cpu_takers::CpuUse;
use crate::producers::sample::schedstat::Schedstats;
use crate::producers::sample::{self, SampleSink, Sampler, process};
use crate::producers::system::cgroup::MemoryCgroup;
use crate::record::composition::{Composition, EntryComposition};
use crate::record::host::HostCounters;
use crate::record::memcg::{MemcgEntry, MemcgStat};
use crate::record::sampling::HostScheduling;
use crate::record::{EntryRecord, RunInfo};

use super::interrupt::Abort;
use super::measure::{Begin, Host, Measurer};
use super::progress::Progress;

/// The sampler's figures of each entry, its RSS peak (the kernel's high-water mark, reset at
/// each entry's start, where the kernel lets it be), and the host's threads' scheduler counts
/// (read at the boundaries, outside the command's timing).
pub struct Sampling {
    sampler: Option<Sampler>,
    /// Whether this entry's peak was reset, so that the kernel's peak is the entry's.
    peak_reset: bool,
    /// How rss_peak_kb is measured, said at the first reset (meta.json's rss_peak).
    peak_how: Option<String>,
    interval_ms: u64,
    attached: bool,
    /// The host's threads' scheduler counts at the entry's start.
    scheduled: Schedstats,
    /// Every other process's CPU time at the entry's start.
    others: CpuUse,
    /// The host's cgroup's CPU quota counters at the entry's start.
    quota: Option<QuotaReading>,
}

impl Sampling {
    pub fn start(
        pid: u32,
        interval: std::time::Duration,
        csv: impl SampleSink + 'static,
        attached: bool,
    ) -> anyhow::Result<Self> {
        Ok(Sampling {
            sampler: Some(Sampler::start(pid, interval, csv)?),
            peak_reset: false,
            peak_how: None,
            interval_ms: interval.as_millis() as u64,
            attached,
            scheduled: Schedstats::default(),
            others: CpuUse::default(),
            quota: None,
        })
    }

    fn sampler(&self) -> &Sampler {
        self.sampler
            .as_ref()
            .expect("sampling until the run finishes")
    }

    /// Resets the host's RSS high-water mark for the next entry, so that rss_peak_kb is the
    /// kernel's own peak of that entry. The first attempt says how the peak is measured; a
    /// refusal (not root, nor the host's user) is said once, and the peak is then the
    /// samples'.
    fn reset_peak(&mut self, progress: &Progress, pid: u32) -> bool {
        let reset = process::reset_peak(Path::new(sample::PROC), pid);
        if self.peak_how.is_none() {
            let how = match &reset {
                Ok(()) => format!(
                    "VmHWM of /proc/PID/status, the kernel's high-water mark, reset at each \
                     entry's start by writing 5 to /proc/PID/clear_refs{}",
                    if self.attached {
                        " (done on the attached host too: it changes only its VmHWM)"
                    } else {
                        ""
                    }
                ),
                Err(error) => {
                    let how = format!(
                        "the samples' most (every {} ms and at both boundaries): /proc/{pid}/\
                         clear_refs refused the reset ({error}), so a peak between samples is \
                         missed",
                        self.interval_ms
                    );
                    progress.note(&format!("warning: rss_peak_kb is {how}"));
                    how
                }
            };
            self.peak_how = Some(how);
        }
        reset.is_ok()
    }
}

#[async_trait(?Send)]
impl Measurer for Sampling {
    async fn begin(&mut self, begin: &mut Begin<'_>) -> Result<(), Abort> {
        self.sampler().begin_entry(begin.index)?;
        if matches!(begin.entry.command, Command::Stop) {
            // The host is about to go: its /proc/PID is not read again.
            self.sampler().release_process()?;
        }
        self.peak_reset = self.reset_peak(begin.host.progress, begin.host.pid);
        self.scheduled = Schedstats::read(Path::new(sample::PROC), begin.host.pid);
        self.others = CpuUse::read(Path::new(sample::PROC), begin.host.pid);
        self.quota = cpu_quota::read(
            Path::new(sample::PROC),
            Path::new(cpu_quota::CGROUP),
            begin.host.pid,
        );
        Ok(())
    }

    async fn end(&mut self, record: &mut EntryRecord, host: Host<'_>) -> Result<(), Abort> {
        let mut sampling = self.sampler().end_entry()?;
        let measure = &record.measure;
        for reading in std::iter::once(&measure.before).chain(&measure.after) {
            sampling.cover_rss(reading.rss_kb);
        }
        // The kernel's own peak, between any two samples; unknown once the host is gone.
        if self.peak_reset
            && measure.after.is_some()
            && let Some(peak) = process::peak_rss_kb(Path::new(sample::PROC), host.pid)
        {
            sampling.cover_rss(peak);
        }
        record.sampling = sampling;
        if measure.after.is_some() {
            let now = Schedstats::read(Path::new(sample::PROC), host.pid);
            let since = now.total_since(&self.scheduled);
            let taken = CpuUse::read(Path::new(sample::PROC), host.pid).since(
                &self.others,
                Path::new(sample::PROC),
                Path::new(cpu_quota::CGROUP),
                std::process::id(),
            );
            record.scheduling = Some(HostScheduling {
                run_delay_ms: since.run_delay_ns as f64 / 1e6,
                timeslices: since.timeslices,
                others_cpu_ms: Some(taken.total_ms),
                ran_instead: taken.top,
                quota: self
                    .quota
                    .zip(cpu_quota::read(
                        Path::new(sample::PROC),
                        Path::new(cpu_quota::CGROUP),
                        host.pid,
                    ))
                    .map(|(before, after)| after.since(&before)),
            });
        }
        Ok(())
    }

    async fn finish(&mut self, info: &mut RunInfo) -> anyhow::Result<()> {
        if let Some(how) = self.peak_how.take() {
            info.rss_peak = Some(how);
        }
        if let Some(sampler) = self.sampler.take() {
            info.sampler_cpu_ms = Some(sampler.finish()?.as_secs_f64() * 1e3);
        }
        Ok(())
    }
}

/// What the host itself counted over the entry (its `/metrics`), asked once the sampler and
/// the probes have read the entry: the scrape is ours, not the entry's.
#[derive(Default)]
pub struct HostCounting {
    before: Option<HostCounters>,
}

#[async_trait(?Send)]
impl Measurer for HostCounting {
    async fn begin(&mut self, begin: &mut Begin<'_>) -> Result<(), Abort> {
        self.before = HostCounters::read(begin.host.client).await;
        Ok(())
    }

    async fn end(&mut self, record: &mut EntryRecord, host: Host<'_>) -> Result<(), Abort> {
        record.host = match (self.before.take(), &record.measure.after) {
            (Some(before), Some(_)) => HostCounters::read(host.client)
                .await
                .map(|after| after.since(&before)),
            _ => None,
        };
        Ok(())
    }
}

/// What held the host's memory at the entry's two boundaries (its smaps), read next to the
/// runner's own readings: a host still freeing what the entry left would otherwise split one
/// RSS and add up to another.
#[derive(Default)]
pub struct Holding {
    before: Option<Composition>,
}

#[async_trait(?Send)]
impl Measurer for Holding {
    async fn begin(&mut self, begin: &mut Begin<'_>) -> Result<(), Abort> {
        self.before = Composition::read(Path::new(sample::PROC), begin.host.pid);
        Ok(())
    }

    async fn end(&mut self, record: &mut EntryRecord, host: Host<'_>) -> Result<(), Abort> {
        let after = record
            .measure
            .after
            .as_ref()
            .and_then(|_| Composition::read(Path::new(sample::PROC), host.pid));
        record.held = self
            .before
            .take()
            .zip(after)
            .map(|(before, after)| EntryComposition { before, after });
        Ok(())
    }
}

/// `--memory-max`: the host's memory cgroup over each entry (the runner, which made it,
/// removes it).
pub struct Memcg {
    cgroup: Arc<MemoryCgroup>,
    before: Option<MemcgStat>,
}

impl Memcg {
    pub fn new(cgroup: Arc<MemoryCgroup>) -> Self {
        Memcg {
            cgroup,
            before: None,
        }
    }
}

#[async_trait(?Send)]
impl Measurer for Memcg {
    async fn begin(&mut self, _begin: &mut Begin<'_>) -> Result<(), Abort> {
        self.cgroup.reset_peak()?;
        self.before = Some(self.cgroup.read()?);
        Ok(())
    }

    async fn end(&mut self, record: &mut EntryRecord, _host: Host<'_>) -> Result<(), Abort> {
        let before = self.before.take().expect("read at the entry's begin");
        record.memcg = Some(MemcgEntry {
            limit_bytes: self.cgroup.limit_bytes(),
            before,
            after: self.cgroup.read()?,
        });
        Ok(())
    }
}
