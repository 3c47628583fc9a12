//! The host's ledger (skillprof_common::ledger), seen from skillprof: found by its memfd's
//! name in `/proc/PID/maps`, mapped through `/proc/PID/map_files`, kept recording by a lease
//! renewed from a thread of its own, and read at each boundary. What its rows say per skill
//! and phase (instances, time, the threads' own faults and CPU) costs the host one
//! `getrusage` per mark and no program in the kernel.

use std::fs::OpenOptions;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use memmap2::MmapRaw;
use skillprof_common::ledger::{
    LEASE_NS, LEASE_RENEW_NS, LEDGER_BYTES, LEDGER_MAGIC, LEDGER_NAME, LedgerView, NO_MARK_SLOT,
};
use skillprof_common::{
    FAILURE_PHASES, FailureCounts, Latency, PHASE_CALL, PHASES, PhaseCounts, SKILL_NAME_LEN,
    TaskCounts,
};

use crate::producers::hostctl::process::monotonic_ns;

/// A host's ledger, mapped, with skillprof's lease on it.
pub struct HostLedger {
    map: Arc<MmapRaw>,
    lease: Option<Lease>,
}

/// The cumulative counts of one skill registration's phase.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PhaseTotals {
    pub marks: u64,
    pub phase: PhaseCounts,
    pub task: TaskCounts,
    /// The reasons of this phase only (`FAILURE_PHASES`); the others are 0.
    pub failed: FailureCounts,
    /// The requests answered, by latency: in the call phase's totals only (a request's
    /// latency spans its phases; the call is the one every request has).
    pub answered: Latency,
}

/// The whole ledger at one instant: per registration (by skill id), per phase number.
#[derive(Clone, Debug, Default)]
pub struct LedgerReading {
    pub rows: Vec<[PhaseTotals; PHASES]>,
    pub overflow: u64,
}

/// What changed between two readings.
#[derive(Clone, Debug, Default)]
pub struct LedgerChange {
    /// (skill id, phase number, change), the unchanged left out.
    pub rows: Vec<(u32, u32, PhaseTotals)>,
    /// Marks for skills beyond the ledger's rows.
    pub overflow: u64,
}

impl LedgerReading {
    /// What changed since `before`.
    pub fn since(&self, before: &LedgerReading) -> LedgerChange {
        let mut changed = Vec::new();
        for (id, phases) in self.rows.iter().enumerate() {
            for (phase, now) in phases.iter().enumerate() {
                let then = before
                    .rows
                    .get(id)
                    .map_or_else(PhaseTotals::default, |row| row[phase]);
                let delta = now.minus(&then);
                if delta != PhaseTotals::default() {
                    changed.push((id as u32, phase as u32, delta));
                }
            }
        }
        LedgerChange {
            rows: changed,
            overflow: self.overflow.saturating_sub(before.overflow),
        }
    }
}

impl PhaseTotals {
    fn minus(&self, then: &PhaseTotals) -> PhaseTotals {
        let d = |now: u64, then: u64| now.saturating_sub(then);
        PhaseTotals {
            marks: d(self.marks, then.marks),
            phase: PhaseCounts {
                runs: d(self.phase.runs, then.phase.runs),
                ns: d(self.phase.ns, then.phase.ns),
                pending_ns: d(self.phase.pending_ns, then.phase.pending_ns),
                queued_ns: d(self.phase.queued_ns, then.phase.queued_ns),
            },
            task: TaskCounts {
                minflt: d(self.task.minflt, then.task.minflt),
                majflt: d(self.task.majflt, then.task.majflt),
                cpu_ns: d(self.task.cpu_ns, then.task.cpu_ns),
            },
            failed: FailureCounts {
                by_reason: std::array::from_fn(|reason| {
                    d(self.failed.by_reason[reason], then.failed.by_reason[reason])
                }),
            },
            answered: Latency {
                buckets: std::array::from_fn(|bucket| {
                    d(self.answered.buckets[bucket], then.answered.buckets[bucket])
                }),
                ns: d(self.answered.ns, then.answered.ns),
            },
        }
    }
}

impl HostLedger {
    /// Maps the ledger of host `tgid` and starts recording into it; `Err` says why there is
    /// none (for the probe table).
    pub fn open(tgid: u32) -> Result<HostLedger, String> {
        let maps = procfs::process::Process::new(tgid as i32)
            .and_then(|process| process.maps())
            .map_err(|e| format!("cannot read /proc/{tgid}/maps: {e}"))?;
        let wanted = format!("/memfd:{LEDGER_NAME}");
        let Some(found) = maps.iter().find(|map| {
            matches!(&map.pathname, procfs::process::MMapPath::Path(path)
                if path.to_string_lossy().starts_with(&wanted))
        }) else {
            return Err(format!(
                "the host keeps no ledger (no {wanted} mapping): it does not mark its work \
                 for skills (not skillhost, or run with --no-marks)"
            ));
        };
        let (start, end) = found.address;
        if ((end - start) as usize) < LEDGER_BYTES {
            return Err(format!(
                "the host's ledger is {} bytes, not the {LEDGER_BYTES} this skillprof reads: \
                 a skillhost of another version",
                end - start
            ));
        }
        let path = format!("/proc/{tgid}/map_files/{start:x}-{end:x}");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| format!("cannot open {path}: {e}"))?;
        let map = MmapRaw::map_raw(&file).map_err(|e| format!("cannot map {path}: {e}"))?;
        let mut ledger = HostLedger {
            map: Arc::new(map),
            lease: None,
        };
        let magic = ledger.view().header.magic.load(Ordering::Acquire);
        if magic != LEDGER_MAGIC {
            return Err(format!(
                "the host's ledger has layout {magic:#x}, not {LEDGER_MAGIC:#x}: a skillhost \
                 of another version"
            ));
        }
        ledger.lease = Some(Lease::start(Arc::clone(&ledger.map)));
        Ok(ledger)
    }

    /// Where each thread's mark slot is: its distance from the thread's FS base, as the host
    /// found it when it made the ledger; `Err` says why the host could not.
    pub fn mark_slot(&self) -> Result<u64, String> {
        match self.view().header.mark_slot.load(Ordering::Relaxed) {
            NO_MARK_SLOT => Err("the host could not say where its threads' mark slots are \
                                 (not x86_64, or arch_prctl refused): memory calls are not \
                                 attributed to skills (the ledger's rows still are)"
                .to_owned()),
            offset => Ok(offset),
        }
    }

    /// Whether the host's marks pass the slot in their getrusage call too.
    pub fn slot_in_call(&self) -> bool {
        self.view().header.slot_in_call.load(Ordering::Relaxed) == 1
    }

    fn view(&self) -> LedgerView<'_> {
        // SAFETY: a shared mapping of at least LEDGER_BYTES (checked in `open`), page-aligned,
        // alive as long as `self`.
        unsafe { LedgerView::at(self.map.as_mut_ptr()) }
    }

    /// Every row's counts now.
    pub fn read(&self) -> LedgerReading {
        let view = self.view();
        let load = |counter: &std::sync::atomic::AtomicU64| counter.load(Ordering::Relaxed);
        let rows = view.rows[..view.used()]
            .iter()
            .map(|row| {
                std::array::from_fn(|phase| {
                    let c = &row.phases[phase];
                    PhaseTotals {
                        marks: load(&c.marks),
                        phase: PhaseCounts {
                            runs: load(&c.runs),
                            ns: load(&c.ns),
                            pending_ns: load(&c.pending_ns),
                            queued_ns: load(&c.queued_ns),
                        },
                        task: TaskCounts {
                            minflt: load(&c.minflt),
                            majflt: load(&c.majflt),
                            cpu_ns: load(&c.cpu_ns),
                        },
                        failed: FailureCounts {
                            by_reason: std::array::from_fn(|reason| {
                                match FAILURE_PHASES[reason] as usize == phase {
                                    true => load(&row.failed[reason]),
                                    false => 0,
                                }
                            }),
                        },
                        answered: match phase as u32 == PHASE_CALL {
                            true => Latency {
                                buckets: std::array::from_fn(|b| load(&row.answered[b])),
                                ns: load(&row.answered_ns),
                            },
                            false => Latency::default(),
                        },
                    }
                })
            })
            .collect();
        LedgerReading {
            rows,
            overflow: load(&view.header.overflow),
        }
    }

    /// The name of skill `id`, as the host registered it.
    pub fn name(&self, id: u32) -> Option<String> {
        let bytes: [u8; SKILL_NAME_LEN] = self.view().name(id as usize)?;
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        Some(String::from_utf8_lossy(&bytes[..end]).into_owned())
    }

    /// Skills registered so far.
    pub fn registered(&self) -> u32 {
        self.view().used() as u32
    }
}

/// skillprof's lease on the ledger: renewed every [`LEASE_RENEW_NS`] to [`LEASE_NS`] ahead,
/// given back when dropped. A SIGKILLed skillprof cannot give it back; the host stops
/// recording when it runs out.
struct Lease {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
    map: Arc<MmapRaw>,
}

impl Lease {
    fn start(map: Arc<MmapRaw>) -> Lease {
        let renew = |map: &MmapRaw| {
            // SAFETY: as in HostLedger::view; the Arc keeps the mapping.
            let view = unsafe { LedgerView::at(map.as_mut_ptr()) };
            view.header
                .lease_until_ns
                .store(monotonic_ns() + LEASE_NS, Ordering::Relaxed);
        };
        // Recording starts now, not at the thread's first turn.
        renew(&map);
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let thread = {
            let (stop, map) = (Arc::clone(&stop), Arc::clone(&map));
            std::thread::Builder::new()
                .name("ledger-lease".into())
                .spawn(move || {
                    let (stopped, wake) = &*stop;
                    let mut stopped = stopped.lock().unwrap();
                    while !*stopped {
                        stopped = wake
                            .wait_timeout(stopped, Duration::from_nanos(LEASE_RENEW_NS))
                            .unwrap()
                            .0;
                        if !*stopped {
                            renew(&map);
                        }
                    }
                })
                .ok()
        };
        Lease { stop, thread, map }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        *self.stop.0.lock().unwrap() = true;
        self.stop.1.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        // SAFETY: as in HostLedger::view.
        let view = unsafe { LedgerView::at(self.map.as_mut_ptr()) };
        view.header.lease_until_ns.store(0, Ordering::Relaxed);
    }
}
