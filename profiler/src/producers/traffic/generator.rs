//! The load generator: one step of open- or closed-loop traffic to one skill or a weighted
//! mix of them, on threads of
//! its own (pinned to the CPUs it is given, so that the host's CPUs are the host's), with a
//! connection pool of its own.
//!
//! Open loop: a scheduler thread sleeps until each request is due (timer slack 1 µs) and
//! hands it to the I/O thread's runtime, which sends it and records its latency from the
//! scheduled instant: a host that stalls is charged for every request it kept waiting. The
//! I/O thread never waits for the schedule, so a slow answer never delays the next send.
//! Closed loop: N tasks on the I/O thread, each sending again when answered.
//!
//! The first fifth of the step warms up (connections, the host's caches) and is not
//! measured. After the last send the step waits for the answers still due, at most
//! [`DRAIN`]; what is still unanswered then counts as failed.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use hdrhistogram::Histogram;
use serde_json::Value;
use tokio::sync::Notify;

use super::schedule::Schedule;
use crate::producers::hostctl::Client;
use crate::producers::sample::{PROC, cpu};
use crate::producers::system::affinity;
use crate::record::traffic::{Load, Percentiles, TrafficErrors, TrafficStep, UNPINNED};

/// How long after `run` is called its schedule starts (once the scheduler thread is up).
pub const START_DELAY: Duration = Duration::from_millis(20);
/// The longest a step waits for its last answers.
pub const DRAIN: Duration = Duration::from_secs(10);
/// A send this much after its scheduled time is late.
const LATE: Duration = Duration::from_millis(1);
/// The most requests the generator has on the wire at once, each on a connection of its
/// own (wrk2's `-c`): a host that falls behind makes the rest wait for one, and their wait
/// counts from their scheduled send. Without a bound, a saturated host's backlog would
/// become thousands of connections, and the generator's work, not the host's, would grow.
const CONNECTIONS: usize = 1024;
/// The schedule's seed: a step's Poisson arrivals are the same every run.
const SEED: u64 = 0x7a1f_f1c0;

/// What one step sends.
#[derive(Clone, Debug)]
pub struct StepPlan {
    /// Where each request goes: one skill, or a mix sent in proportion to its weights.
    pub targets: Targets,
    pub load: Load,
    /// The whole step, warm-up included.
    pub length: Duration,
    /// The CPUs the generator's threads run on (`None`: wherever the kernel puts them).
    pub cpus: Option<Vec<usize>>,
}

impl StepPlan {
    fn warmup(&self) -> Duration {
        self.length / 5
    }
}

/// One skill with its input, and its share of a mix.
#[derive(Clone, Debug)]
pub struct Target {
    pub skill: String,
    pub input: Value,
    pub weight: u32,
}

/// The skills a step sends to, at least one, each with a weight above 0.
#[derive(Clone, Debug)]
pub struct Targets(Vec<Target>);

impl Targets {
    /// Every request to `skill` with `input`.
    pub fn one(skill: impl Into<String>, input: Value) -> Targets {
        Targets(vec![Target {
            skill: skill.into(),
            input,
            weight: 1,
        }])
    }

    /// A mix; `None` when no target has a weight.
    pub fn mix(targets: Vec<Target>) -> Option<Targets> {
        let targets: Vec<Target> = targets.into_iter().filter(|t| t.weight > 0).collect();
        (!targets.is_empty()).then_some(Targets(targets))
    }

    /// How the step names what it sent to: the skill, or the mix with its weights.
    pub fn label(&self) -> String {
        match self.0.as_slice() {
            [one] => one.skill.clone(),
            mix => {
                let parts: Vec<String> = mix
                    .iter()
                    .map(|t| format!("{} ×{}", t.skill, t.weight))
                    .collect();
                format!("mix: {}", parts.join(", "))
            }
        }
    }
}

/// Smooth weighted round robin (nginx's): each pick adds every target's weight to its
/// credit and takes the one with the most, which then pays the total. A mix of 3:1 goes
/// A A B A, not A A A B: the weights hold over every stretch of the step, not only over all
/// of it, so a window of it holds the mix too.
struct Picker {
    credit: Vec<i64>,
    total: i64,
}

impl Picker {
    fn new(targets: &Targets) -> Picker {
        Picker {
            credit: vec![0; targets.0.len()],
            total: targets.0.iter().map(|t| i64::from(t.weight)).sum(),
        }
    }

    fn pick(&mut self, targets: &Targets) -> usize {
        for (credit, target) in self.credit.iter_mut().zip(&targets.0) {
            *credit += i64::from(target.weight);
        }
        let chosen = (0..self.credit.len())
            .max_by_key(|&i| (self.credit[i], std::cmp::Reverse(i)))
            .expect("a mix has a target");
        self.credit[chosen] -= self.total;
        chosen
    }
}

/// Runs one step against `client`'s host and returns what it measured. The generator's
/// threads are its own; this waits for them without holding an async worker.
/// Dropped before the step ends (the host died, the run was interrupted), the generator
/// stops sending at once.
pub async fn run(client: &Client, plan: StepPlan) -> Result<TrafficStep> {
    let client = client.with_own_pool();
    let cancel = Cancel::default();
    let (done, result) = tokio::sync::oneshot::channel();
    let stopped = cancel.flag();
    std::thread::Builder::new()
        .name("traffic-io".into())
        .spawn(move || {
            let _ = done.send(io_thread(client, plan, stopped));
        })
        .context("starting the load generator's thread")?;
    let step = result
        .await
        .context("the load generator's thread ended without a result")?;
    drop(cancel);
    step
}

/// Tells the generator's threads to stop when dropped.
#[derive(Default)]
struct Cancel(Arc<AtomicBool>);

impl Cancel {
    fn flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.0)
    }
}

impl Drop for Cancel {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// What the step's answers came to, shared by the tasks that send.
struct Recorder {
    warm_end: Instant,
    end: Instant,
    latency: Histogram<u64>,
    service: Histogram<u64>,
    lag: Histogram<u64>,
    fifths: [Histogram<u64>; 5],
    sent: u64,
    ok: u64,
    errors: TrafficErrors,
    late: u64,
    /// Answers with 2xx that arrived within the measured window, whenever they were sent.
    window_ok: u64,
    /// Every answer of the step, warm-up and drain included.
    answered: u64,
    /// Answers before the schedule's end, warm-up included.
    answered_by_end: u64,
    /// Each measured request's scheduled time from the window's start and its latency, µs:
    /// where its tail came from.
    requests: Vec<(u32, u32)>,
    /// The window's start on CLOCK_MONOTONIC, ns.
    warm_end_ns: u64,
}

/// How one request ended.
enum Answer {
    Ok,
    Status,
    Transport,
}

impl Recorder {
    fn new(start: Instant, plan: &StepPlan) -> Result<Recorder> {
        let histogram = || Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3);
        Ok(Recorder {
            warm_end: start + plan.warmup(),
            end: start + plan.length,
            latency: histogram()?,
            service: histogram()?,
            lag: histogram()?,
            fifths: [
                histogram()?,
                histogram()?,
                histogram()?,
                histogram()?,
                histogram()?,
            ],
            sent: 0,
            ok: 0,
            errors: TrafficErrors::default(),
            late: 0,
            window_ok: 0,
            answered: 0,
            answered_by_end: 0,
            requests: Vec::new(),
            warm_end_ns: crate::producers::hostctl::process::monotonic_ns()
                + (start + plan.warmup())
                    .saturating_duration_since(Instant::now())
                    .as_nanos() as u64,
        })
    }

    fn measured(&self, scheduled: Instant) -> bool {
        scheduled >= self.warm_end && scheduled < self.end
    }

    /// A measured request was sent at `sent`, due at `scheduled`.
    fn sent(&mut self, scheduled: Instant, sent: Instant) {
        let lag = sent.saturating_duration_since(scheduled);
        self.sent += 1;
        self.late += u64::from(lag > LATE);
        let _ = self.lag.record(micros(lag));
    }

    /// Any request's answer, measured or not: what the window delivered.
    fn delivered(&mut self, done: Instant, answer: &Answer) {
        self.answered += 1;
        self.answered_by_end += u64::from(done < self.end);
        if matches!(answer, Answer::Ok) && done >= self.warm_end && done < self.end {
            self.window_ok += 1;
        }
    }

    fn answered(&mut self, scheduled: Instant, sent: Instant, done: Instant, answer: Answer) {
        match answer {
            Answer::Ok => self.ok += 1,
            Answer::Status => self.errors.status += 1,
            Answer::Transport => self.errors.transport += 1,
        }
        let latency = micros(done.saturating_duration_since(scheduled));
        let _ = self.latency.record(latency);
        let at = micros(scheduled.saturating_duration_since(self.warm_end));
        self.requests.push((
            u32::try_from(at).unwrap_or(u32::MAX),
            u32::try_from(latency).unwrap_or(u32::MAX),
        ));
        let _ = self
            .service
            .record(micros(done.saturating_duration_since(sent)));
        let window = (self.end - self.warm_end).as_secs_f64();
        let at = (scheduled - self.warm_end).as_secs_f64() / window;
        let fifth = ((at * 5.0) as usize).min(4);
        let _ = self.fifths[fifth].record(latency);
    }
}

fn micros(duration: Duration) -> u64 {
    (duration.as_micros() as u64).max(1)
}

fn percentiles(histogram: &Histogram<u64>) -> Percentiles {
    let ms = |quantile: f64| histogram.value_at_quantile(quantile) as f64 / 1e3;
    Percentiles {
        p50_ms: ms(0.50),
        p90_ms: ms(0.90),
        p99_ms: ms(0.99),
        p999_ms: ms(0.999),
        max_ms: histogram.max() as f64 / 1e3,
    }
}

/// Requests sent and not yet answered, and a wake-up when that reaches 0.
#[derive(Default)]
struct InFlight {
    count: AtomicU64,
    idle: Notify,
}

impl InFlight {
    fn begin(&self) {
        self.count.fetch_add(1, Ordering::AcqRel);
    }

    fn end(&self) {
        if self.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.idle.notify_waiters();
        }
    }

    /// Waits until every request is answered, `until` passes or the step is cancelled.
    async fn drained(&self, until: Instant, cancelled: &AtomicBool) {
        while self.count.load(Ordering::Acquire) > 0 && !cancelled.load(Ordering::Relaxed) {
            let wake = self.idle.notified();
            if self.count.load(Ordering::Acquire) == 0 {
                return;
            }
            let tick = (Instant::now() + Duration::from_millis(100)).min(until);
            let _ = tokio::time::timeout_at(tick.into(), wake).await;
            if Instant::now() >= until {
                return;
            }
        }
    }
}

/// Sends one request and records it if it is measured. `dispatched`: when the schedule
/// handed it over (its lateness is the generator's); it then waits for one of the
/// generator's connections (its wait, like the answer's, counts from `scheduled`).
async fn request(client: Client, shared: Arc<Shared>, scheduled: Instant, dispatched: Instant) {
    let measured = {
        let mut recorder = shared.recorder.lock().unwrap();
        let measured = recorder.measured(scheduled);
        if measured {
            recorder.sent(scheduled, dispatched);
        }
        measured
    };
    let target = &shared.plan.targets.0[shared.picker.lock().unwrap().pick(&shared.plan.targets)];
    let permit = shared.connections.acquire().await;
    let sent = Instant::now();
    let answer = match client.execute(&target.skill, &target.input).await {
        Ok(reply) if reply.is_ok() => Answer::Ok,
        Ok(_) => Answer::Status,
        Err(_) => Answer::Transport,
    };
    drop(permit);
    let done = Instant::now();
    let mut recorder = shared.recorder.lock().unwrap();
    recorder.delivered(done, &answer);
    if measured {
        recorder.answered(scheduled, sent, done, answer);
    }
    drop(recorder);
    shared.in_flight.end();
}

/// What the tasks of one step share.
struct Shared {
    plan: StepPlan,
    /// Which target the next request goes to.
    picker: Mutex<Picker>,
    recorder: Mutex<Recorder>,
    in_flight: InFlight,
    /// At most [`CONNECTIONS`] requests on the wire (wrk2's connections).
    connections: tokio::sync::Semaphore,
}

/// The I/O thread: its runtime sends every request and, in a closed loop, schedules them
/// too.
fn io_thread(client: Client, plan: StepPlan, cancelled: Arc<AtomicBool>) -> Result<TrafficStep> {
    let cpus = pin(plan.cpus.as_deref())?;
    let io_cpu = ThreadCpu::now();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the load generator's runtime")?;
    let start = Instant::now() + START_DELAY;
    let recorder = Mutex::new(Recorder::new(start, &plan)?);
    let shared = Arc::new(Shared {
        picker: Mutex::new(Picker::new(&plan.targets)),
        plan,
        recorder,
        in_flight: InFlight::default(),
        connections: tokio::sync::Semaphore::new(CONNECTIONS),
    });
    let plan = &shared.plan;
    let cpus_time = || cpu::read_cpus(Path::new(PROC), plan.cpus.as_deref()).ok();
    let cpus_at_start = cpus_time();
    let (scheduler_cpu, cpus_at_end) = runtime.block_on(async {
        let scheduler_cpu = match plan.load {
            Load::Open { rps, arrivals } => {
                let handle = tokio::runtime::Handle::current();
                let (client, shared) = (client.clone(), Arc::clone(&shared));
                let schedule = Schedule::new(arrivals, rps, plan.length, SEED);
                let pinned = plan.cpus.clone();
                let cancelled = Arc::clone(&cancelled);
                let scheduler = tokio::task::spawn_blocking(move || {
                    pin(pinned.as_deref())?;
                    let cpu = ThreadCpu::now();
                    // Wake within a microsecond of the time asked (the default slack is 50),
                    // and before the I/O thread it shares a CPU with: as a real-time thread
                    // where allowed (root), since a waking thread of the same class can wait a
                    // whole slice (ms) for a busy one. It sleeps between sends, and the
                    // kernel keeps 5% of each CPU for others whatever real-time threads do.
                    // SAFETY: prctl and sched_setscheduler with integer arguments and a
                    // valid sched_param.
                    unsafe {
                        libc::prctl(libc::PR_SET_TIMERSLACK, 1);
                        let param = libc::sched_param { sched_priority: 1 };
                        libc::sched_setscheduler(0, libc::SCHED_FIFO, &param);
                    }
                    for at in schedule {
                        if cancelled.load(Ordering::Relaxed) {
                            break;
                        }
                        let due = start + at;
                        let now = Instant::now();
                        if due > now {
                            std::thread::sleep(due - now);
                        }
                        shared.in_flight.begin();
                        handle.spawn(request(
                            client.clone(),
                            Arc::clone(&shared),
                            due,
                            Instant::now(),
                        ));
                    }
                    Ok::<_, anyhow::Error>(cpu.since())
                });
                Some(scheduler.await.context("the scheduler thread")??)
            }
            Load::Closed { concurrency } => {
                let end = start + plan.length;
                tokio::time::sleep_until(start.into()).await;
                let senders: Vec<_> = (0..concurrency)
                    .map(|_| {
                        let (client, shared, cancelled) =
                            (client.clone(), Arc::clone(&shared), Arc::clone(&cancelled));
                        tokio::spawn(async move {
                            while Instant::now() < end && !cancelled.load(Ordering::Relaxed) {
                                shared.in_flight.begin();
                                let now = Instant::now();
                                request(client.clone(), Arc::clone(&shared), now, now).await;
                            }
                        })
                    })
                    .collect();
                for sender in senders {
                    let _ = tokio::time::timeout_at((end + DRAIN).into(), sender).await;
                }
                None
            }
        };
        // The schedule is over: the drain that follows sends nothing.
        let cpus_at_end = cpus_time();
        shared
            .in_flight
            .drained(start + plan.length + DRAIN, &cancelled)
            .await;
        Ok::<_, anyhow::Error>((scheduler_cpu, cpus_at_end))
    })?;
    let generator_cpu = io_cpu.since() + scheduler_cpu.unwrap_or_default();
    drop(runtime);
    let recorder = shared.recorder.lock().unwrap();
    let answered = recorder.ok + recorder.errors.status + recorder.errors.transport;
    let mut errors = recorder.errors;
    errors.unanswered = recorder.sent.saturating_sub(answered);
    let fifth = |i: usize| recorder.fifths[i].value_at_quantile(0.5) as f64 / 1e3;
    Ok(TrafficStep {
        skill: plan.targets.label(),
        load: plan.load,
        measured_s: (plan.length - plan.warmup()).as_secs_f64(),
        warmup_s: plan.warmup().as_secs_f64(),
        sent: recorder.sent,
        ok: recorder.ok,
        delivered: recorder.window_ok,
        answered_all: recorder.answered,
        answered_by_end: recorder.answered_by_end,
        errors,
        late_sends: recorder.late,
        send_lag_p99_ms: recorder.lag.value_at_quantile(0.99) as f64 / 1e3,
        latency: percentiles(&recorder.latency),
        service: percentiles(&recorder.service),
        first_fifth_p50_ms: fifth(0),
        last_fifth_p50_ms: fifth(4),
        generator_cpu_ms: generator_cpu.as_secs_f64() * 1e3,
        generator_cpus: cpus,
        generator_cpus_time: cpus_at_start
            .zip(cpus_at_end)
            .and_then(|(start, end)| end.since(&start)),
        stall: {
            let (p50_us, p99_us) = super::stall::thresholds(&recorder.latency);
            super::stall::find(&recorder.requests, p50_us, p99_us, recorder.warm_end_ns)
        },
    })
}

/// Pins the calling thread to `cpus`; returns them as a list, or [`UNPINNED`].
fn pin(cpus: Option<&[usize]>) -> Result<String> {
    let Some(cpus) = cpus else {
        return Ok(UNPINNED.into());
    };
    affinity::pin_current_thread(cpus)
        .with_context(|| format!("pinning the load generator to CPUs {cpus:?}"))?;
    Ok(crate::ground::cpus::format_list(cpus))
}

/// A thread's CPU time at one instant (user + system, getrusage RUSAGE_THREAD).
struct ThreadCpu(Duration);

impl ThreadCpu {
    fn now() -> ThreadCpu {
        ThreadCpu(thread_cpu())
    }

    fn since(&self) -> Duration {
        thread_cpu().saturating_sub(self.0)
    }
}

fn thread_cpu() -> Duration {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: a valid out pointer; on failure the zeroed value reads 0.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, usage.as_mut_ptr()) };
    // SAFETY: zero-initialised, and filled by a successful call.
    let usage = unsafe { usage.assume_init() };
    let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    time(usage.ru_utime) + time(usage.ru_stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(skill: &str, weight: u32) -> Target {
        Target {
            skill: skill.to_owned(),
            input: serde_json::json!({}),
            weight,
        }
    }

    #[test]
    fn a_mix_sends_in_proportion_to_its_weights_over_every_stretch() {
        let mix = Targets::mix(vec![target("a", 3), target("off", 0), target("b", 1)]).unwrap();
        assert_eq!(mix.label(), "mix: a ×3, b ×1");
        let mut picker = Picker::new(&mix);
        let picks: Vec<&str> = (0..4000)
            .map(|_| mix.0[picker.pick(&mix)].skill.as_str())
            .collect();
        // Interleaved, not in runs: the weights hold within each cycle of four.
        assert_eq!(picks[..8], ["a", "a", "b", "a", "a", "a", "b", "a"]);
        assert_eq!(picks.iter().filter(|&&s| s == "b").count(), 1000);
        assert!(Targets::mix(vec![target("off", 0)]).is_none());
        assert_eq!(
            Targets::one("hello", serde_json::json!({})).label(),
            "hello"
        );
    }
}
