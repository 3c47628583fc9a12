//! Major faults of the host from a perf software counter (`PERF_COUNT_SW_PAGE_FAULTS_MAJ`):
//! no tracepoint says whether a fault was major, and fexit on `handle_mm_fault` is not allowed
//! everywhere.
//!
//! A perf counter opened on a pid counts that one thread; `inherit` adds the threads and
//! children it creates afterwards. The host already has threads when the session starts, so
//! there is one inheriting counter per existing thread, opened until a rescan of
//! /proc/PID/task finds no thread without one.

use std::{collections::HashSet, fs};

use anyhow::{Context as _, Result};
use perf_event::{Builder, Counter, events::Software};

pub struct MajorFaults {
    counters: Vec<Counter>,
}

impl MajorFaults {
    pub fn open(tgid: u32) -> Result<Self> {
        let mut counters = Vec::new();
        let mut seen = HashSet::new();
        loop {
            let mut new = 0;
            for tid in threads(tgid)? {
                if !seen.insert(tid) {
                    continue;
                }
                let mut builder = Builder::new()
                    .kind(Software::PAGE_FAULTS_MAJ)
                    .observe_pid(tid as i32);
                builder.inherit(true);
                let mut counter = match builder.build() {
                    Ok(counter) => counter,
                    // The thread exited between the listing and the open.
                    Err(e) if e.raw_os_error() == Some(libc::ESRCH) => continue,
                    Err(e) => {
                        return Err(e).context(format!(
                            "perf_event_open(PAGE_FAULTS_MAJ) on thread {tid} of {tgid}"
                        ));
                    }
                };
                counter.enable()?;
                counters.push(counter);
                new += 1;
            }
            if new == 0 {
                break;
            }
        }
        anyhow::ensure!(
            !counters.is_empty(),
            "process {tgid} has no threads left to count"
        );
        Ok(Self { counters })
    }

    /// Major faults of every thread since the counters were opened.
    pub fn read(&mut self) -> Result<u64> {
        let mut total = 0;
        for counter in &mut self.counters {
            total += counter.read().context("reading a major-fault counter")?;
        }
        Ok(total)
    }

    pub fn threads(&self) -> usize {
        self.counters.len()
    }
}

fn threads(tgid: u32) -> Result<Vec<u32>> {
    let dir = format!("/proc/{tgid}/task");
    let mut tids = Vec::new();
    for entry in fs::read_dir(&dir).with_context(|| format!("listing {dir}"))? {
        if let Some(tid) = entry?.file_name().to_str().and_then(|s| s.parse().ok()) {
            tids.push(tid);
        }
    }
    Ok(tids)
}
