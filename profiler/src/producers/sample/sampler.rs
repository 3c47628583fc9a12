//! The sampler thread. It is a std thread, not a task: the runner's tokio runtime can be
//! saturated by thousands of in-flight requests, and samples must keep their pace. Every
//! read happens on this thread, boundary samples included, so its CPU time is the whole
//! cost of sampling.

use std::{
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
        mpsc::{self, Receiver, RecvTimeoutError, Sender},
    },
    thread::{self, JoinHandle},
    time::{Duration, Instant, SystemTime},
};

use anyhow::{Context, Result, anyhow, bail, ensure};

use super::{
    PROC,
    entry::Window,
    process::{self, ProcessError},
    system::{Counters, System, SystemReader},
    zoneinfo,
};
use crate::record::process::ProcessStat;
use crate::record::sampling::{EntrySampling, Handles, ZoneId};

pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(100);

#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// Since the sampler started.
    pub t: Duration,
    /// The wall clock at the reading, for tools that join samples with other sources by time.
    pub at: SystemTime,
    /// The entry being measured; `None` between entries.
    pub entry: Option<usize>,
    /// `None` once the host has exited.
    pub process: Option<ProcessStat>,
    /// The host's counts that cost a walk of a /proc list (its mappings, ...), read at entry
    /// boundaries and at most once per [`HANDLES_EVERY`] between them: /proc/PID/maps
    /// formats every mapping, which costs milliseconds for a host with tens of thousands.
    /// `None` when not read.
    pub handles: Option<Handles>,
    pub system: System,
}

/// How often the host's handles are counted between entry boundaries.
pub const HANDLES_EVERY: Duration = Duration::from_secs(1);

/// Where the sampler hands every sample it takes, on its own thread: what a sample becomes
/// (a row of samples.csv, for a run) is the caller's business, not the measurement's.
pub trait SampleSink: Send {
    fn write(&mut self, sample: &Sample) -> Result<()>;

    /// Called at every entry end and when sampling stops, so a crash loses no finished
    /// entry's samples.
    fn flush(&mut self) -> Result<()>;
}

/// Samples the host process `pid` and the system every interval into a sink, and
/// sums up each entry. Entry calls block for one sample (about a millisecond).
pub struct Sampler {
    commands: Sender<Command>,
    thread: JoinHandle<Result<()>>,
    cpu_time_ns: Arc<AtomicU64>,
    psi_live: bool,
}

enum Command {
    Begin(usize, Sender<Result<()>>),
    End(Sender<Result<EntrySampling>>),
    Release(Sender<Result<()>>),
}

impl Sampler {
    /// Takes a first sample (between entries) and starts sampling every `interval`.
    pub fn start(pid: u32, interval: Duration, sink: impl SampleSink + 'static) -> Result<Self> {
        let sink: Box<dyn SampleSink> = Box::new(sink);
        ensure!(
            !interval.is_zero(),
            "the sampling interval must be longer than 0"
        );
        let (commands, received) = mpsc::channel();
        let (ready, started) = mpsc::channel();
        let cpu_time_ns = Arc::new(AtomicU64::new(0));
        let published = Arc::clone(&cpu_time_ns);
        let thread = thread::Builder::new()
            .name("skillprof-sampler".into())
            .spawn(move || match Worker::start(pid, sink, published) {
                Ok(worker) => {
                    let _ = ready.send(Ok(worker.reader.psi_live()));
                    worker.run(received, interval)
                }
                Err(error) => {
                    let _ = ready.send(Err(error));
                    Ok(())
                }
            })
            .context("starting the sampler thread")?;
        let psi_live = started
            .recv()
            .context("the sampler thread died while starting")??;
        Ok(Sampler {
            commands,
            thread,
            cpu_time_ns,
            psi_live,
        })
    }

    /// From now on samples are tagged `index`; takes the entry's first boundary sample.
    pub fn begin_entry(&self, index: usize) -> Result<()> {
        self.ask(|reply| Command::Begin(index, reply))
    }

    /// Takes the entry's last boundary sample, flushes the sink, and sums the entry up.
    pub fn end_entry(&self) -> Result<EntrySampling> {
        self.ask(Command::End)
    }

    /// Stops reading /proc/PID for good: the host is about to exit, and a reader that
    /// holds its mm at that moment would run part of the address-space teardown itself,
    /// hiding it from the probes. Process columns are empty from here on.
    pub fn release_process(&self) -> Result<()> {
        self.ask(Command::Release)
    }

    /// CPU time the sampler thread has used so far: the profiler's cost of sampling.
    pub fn cpu_time(&self) -> Duration {
        Duration::from_nanos(self.cpu_time_ns.load(Ordering::Relaxed))
    }

    /// Whether /proc/pressure/memory is there (the psi columns are empty if not).
    pub fn psi_live(&self) -> bool {
        self.psi_live
    }

    /// Stops the thread and flushes the sink; returns the thread's CPU time in total.
    pub fn finish(self) -> Result<Duration> {
        // A closed channel is the thread's signal to stop.
        drop(self.commands);
        self.thread
            .join()
            .map_err(|_| anyhow!("the sampler thread panicked"))??;
        Ok(Duration::from_nanos(
            self.cpu_time_ns.load(Ordering::Relaxed),
        ))
    }

    fn ask<T>(&self, command: impl FnOnce(Sender<Result<T>>) -> Command) -> Result<T> {
        let (reply, answer) = mpsc::channel();
        let stopped = || anyhow!("the sampler thread has stopped; Sampler::finish says why");
        self.commands.send(command(reply)).map_err(|_| stopped())?;
        answer.recv().map_err(|_| stopped())?
    }
}

/// The thread's state.
struct Worker {
    pid: u32,
    /// Set once the host is seen gone; its pid is never read again, because the kernel may
    /// give it to another process.
    host_gone: bool,
    /// When the host's mappings were last counted.
    handles_counted: Option<Instant>,
    reader: SystemReader,
    sink: Box<dyn SampleSink>,
    started: Instant,
    /// The run's zones, fixed by the first sample.
    zones: Vec<ZoneId>,
    window: Option<Window>,
    /// The first sampling error; it stops sampling for good, because the samples after it
    /// would leave a hole nobody sees. Every later call reports it.
    failure: Option<String>,
    cpu_time_ns: Arc<AtomicU64>,
}

impl Worker {
    fn start(pid: u32, sink: Box<dyn SampleSink>, cpu_time_ns: Arc<AtomicU64>) -> Result<Self> {
        let mut worker = Worker {
            pid,
            host_gone: false,
            handles_counted: None,
            reader: SystemReader::new(Path::new(PROC))?,
            sink,
            started: Instant::now(),
            zones: Vec::new(),
            window: None,
            failure: None,
            cpu_time_ns,
        };
        let first = worker.record(None, true)?;
        worker.zones = zoneinfo::populated_ids(&first.system.zones);
        worker.publish_cpu_time();
        Ok(worker)
    }

    fn run(mut self, commands: Receiver<Command>, interval: Duration) -> Result<()> {
        let mut next_tick = Instant::now() + interval;
        loop {
            match commands.recv_timeout(next_tick.saturating_duration_since(Instant::now())) {
                Ok(Command::Begin(index, reply)) => {
                    let _ = reply.send(self.begin(index));
                }
                Ok(Command::End(reply)) => {
                    let _ = reply.send(self.end());
                }
                Ok(Command::Release(reply)) => {
                    self.host_gone = true;
                    let _ = reply.send(Ok(()));
                }
                Err(RecvTimeoutError::Timeout) => {
                    // An error is kept in `failure` and reported by the next call.
                    let _ = self.tick();
                    // Missed ticks are skipped, not caught up in a burst.
                    let now = Instant::now();
                    next_tick += interval;
                    if next_tick <= now {
                        next_tick = now + interval;
                    }
                }
                Err(RecvTimeoutError::Disconnected) => break,
            }
            self.publish_cpu_time();
        }
        self.sink.flush()?;
        match self.failure {
            Some(failure) => Err(anyhow!("sampling stopped early: {failure}")),
            None => Ok(()),
        }
    }

    fn tick(&mut self) -> Result<()> {
        let sample = self.record(self.window.as_ref().map(|window| window.index), false)?;
        if let Some(window) = &mut self.window {
            window.observe(&sample);
        }
        Ok(())
    }

    fn begin(&mut self, index: usize) -> Result<()> {
        if let Some(open) = &self.window {
            bail!(
                "begin_entry({index}) while entry {} is open: call end_entry first",
                open.index
            );
        }
        let sample = self.record(Some(index), true)?;
        let counters = self.counters()?;
        self.window = Some(Window::open(index, &self.zones, &sample, counters));
        Ok(())
    }

    fn end(&mut self) -> Result<EntrySampling> {
        let window = self
            .window
            .take()
            .context("end_entry without begin_entry")?;
        let sample = self.record(Some(window.index), true)?;
        let counters = self.counters()?;
        self.sink.flush()?;
        let mut sampling = window.close(&sample, &counters);
        sampling.maps_limit = crate::ground::machine::max_map_count();
        Ok(sampling)
    }

    /// Takes a sample and hands it to the sink.
    /// `boundary`: an entry begins or ends here, so the mappings are counted whatever the
    /// time since the last count.
    fn record(&mut self, entry: Option<usize>, boundary: bool) -> Result<Sample> {
        self.unless_failed(|worker| {
            let sample = worker.take(entry, boundary)?;
            worker.sink.write(&sample)?;
            Ok(sample)
        })
    }

    /// The counters at an entry boundary.
    fn counters(&mut self) -> Result<Counters> {
        self.unless_failed(|_| Counters::read(Path::new(PROC)))
    }

    /// Runs `step` unless sampling has failed already; its error is the failure from then on.
    fn unless_failed<T>(&mut self, step: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        if let Some(failure) = &self.failure {
            bail!("sampling stopped after an error: {failure}");
        }
        let done = step(self);
        if let Err(error) = &done {
            self.failure = Some(format!("{error:#}"));
        }
        done
    }

    fn take(&mut self, entry: Option<usize>, boundary: bool) -> Result<Sample> {
        let t = self.started.elapsed();
        let process = self.read_process()?;
        let due = self
            .handles_counted
            .is_none_or(|counted| counted.elapsed() >= HANDLES_EVERY);
        let handles = match (process.is_some() && (boundary || due), self.host_gone) {
            (true, false) => {
                self.handles_counted = Some(Instant::now());
                Some(process::handles(Path::new(PROC), self.pid))
            }
            _ => None,
        };
        let system = self.reader.read()?;
        Ok(Sample {
            t,
            at: SystemTime::now(),
            entry,
            process,
            handles,
            system,
        })
    }

    fn read_process(&mut self) -> Result<Option<ProcessStat>> {
        if self.host_gone {
            return Ok(None);
        }
        match process::read(Path::new(PROC), self.pid) {
            Ok(stat) => Ok(Some(stat)),
            Err(ProcessError::Gone { .. }) => {
                self.host_gone = true;
                Ok(None)
            }
            Err(error) => Err(error.into()),
        }
    }

    fn publish_cpu_time(&self) {
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes the one timespec it is given; the clock of the
        // calling thread always exists.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
        let nanos = now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64;
        self.cpu_time_ns.store(nanos, Ordering::Relaxed);
    }
}
