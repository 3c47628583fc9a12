//! What bounded a step, from the host's own counters and the kernel's, read when its schedule
//! starts and when it ends (the drain after it left out): the host's CPU against the CPUs it was given, each thread's time on a CPU and
//! waiting for one (schedstat), its faults, the machine's TLB shootdowns, and its CPU by
//! phase from its ledger. [`bound`] says it in words.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use anyhow::{Context as _, Result};
use skillprof_common::PHASE_NAMES;

use crate::ground::units::{count, ms};
use crate::producers::probes::ledger::{HostLedger, LedgerReading};
use crate::producers::sample::cpu::{self, CpuTimes};
use crate::producers::sample::cpu_quota::{self, QuotaReading};
use crate::producers::sample::cpu_takers::CpuUse;
use crate::producers::sample::schedstat::Schedstats;
use crate::record::sampling::while_these_ran;
use crate::record::slo::{CpusLost, Evidence, HostConfig, RequestTimes, StallSeen};
use crate::record::time::{Share, TimelineSample};
use crate::record::traffic::TrafficStep;

/// The counters at one end of a step.
pub struct Reading {
    at: Instant,
    cpu_ms: f64,
    faults: u64,
    /// Each thread's schedstat: time on a CPU and time waiting for one, ns.
    threads: Schedstats,
    tlb: u64,
    ledger: Option<LedgerReading>,
    /// The host's CPUs' lines of /proc/stat, summed.
    cpus: Option<CpuTimes>,
    quota: Option<QuotaReading>,
    /// Every other process's CPU time.
    others: CpuUse,
}

/// Reads the host `pid`'s counters now (and its ledger's, if skillprof maps it); `cpus`:
/// the CPUs it runs on.
pub fn read(pid: u32, ledger: Option<&HostLedger>, cpus: &[usize]) -> Result<Reading> {
    let process = procfs::process::Process::new(pid as i32)
        .with_context(|| format!("the host, process {pid}"))?;
    let stat = process
        .stat()
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    let ticks = procfs::ticks_per_second() as f64;
    Ok(Reading {
        at: Instant::now(),
        cpu_ms: (stat.utime + stat.stime) as f64 * 1e3 / ticks,
        faults: stat.minflt + stat.majflt,
        threads: Schedstats::read(Path::new(crate::producers::sample::PROC), pid),
        tlb: crate::producers::sample::interrupts::tlb_shootdowns(Path::new(
            crate::producers::sample::PROC,
        ))
        .unwrap_or(0),
        ledger: ledger.map(HostLedger::read),
        cpus: cpu::read_cpus(Path::new(crate::producers::sample::PROC), Some(cpus)).ok(),
        quota: cpu_quota::read(
            Path::new(crate::producers::sample::PROC),
            Path::new(cpu_quota::CGROUP),
            pid,
        ),
        others: CpuUse::read(Path::new(crate::producers::sample::PROC), pid),
    })
}

/// What happened between two readings, for `answered` requests.
pub fn between(before: &Reading, after: &Reading, answered: u64) -> Evidence {
    let host_cpu_ms = after.cpu_ms - before.cpu_ms;
    let mut requests = None;
    let phases_cpu_ms = match (&before.ledger, &after.ledger) {
        (Some(before), Some(after)) => {
            let mut by_phase = [0.0; PHASE_NAMES.len()];
            let mut times = RequestTimes::default();
            for (_, phase, change) in after.since(before).rows {
                if let Some(cpu) = by_phase.get_mut(phase as usize) {
                    *cpu += change.task.cpu_ns as f64 / 1e6;
                }
                // A compile's time is its own; a request's is its instantiation, call and reset.
                if phase != skillprof_common::PHASE_COMPILE {
                    times.on_thread_ms += change.phase.ns as f64 / 1e6;
                }
                times.pending_ms += change.phase.pending_ns as f64 / 1e6;
                times.queued_ms += change.phase.queued_ns as f64 / 1e6;
            }
            requests = Some(times);
            // What no mark covered is the host's own: its HTTP server, its runtime.
            let marked: f64 = by_phase.iter().sum();
            by_phase[0] = (host_cpu_ms - marked).max(0.0);
            PHASE_NAMES
                .iter()
                .zip(by_phase)
                .map(|(name, cpu)| ((*name).to_owned(), cpu))
                .collect()
        }
        _ => Vec::new(),
    };
    Evidence {
        host_cpu_ms,
        wall_ms: after.at.duration_since(before.at).as_secs_f64() * 1e3,
        run_delay_ms: after.threads.total_since(&before.threads).run_delay_ns as f64 / 1e6,
        busiest_thread_ms: after
            .threads
            .since(&before.threads)
            .map(|thread| thread.cpu_ns)
            .max()
            .unwrap_or(0) as f64
            / 1e6,
        faults: after.faults.saturating_sub(before.faults),
        tlb_shootdowns: after.tlb.saturating_sub(before.tlb),
        phases_cpu_ms,
        answered,
        died: None,
        requests,
        cpus: match (&before.cpus, &after.cpus) {
            (Some(before), Some(after)) => {
                let ms = |now: u64, then: u64| {
                    now.saturating_sub(then) as f64 * 1e3 / procfs::ticks_per_second() as f64
                };
                Some(CpusLost {
                    steal_ms: ms(after.steal, before.steal),
                    irq_ms: ms(after.irq, before.irq),
                    softirq_ms: ms(after.softirq, before.softirq),
                })
            }
            _ => None,
        },
        time: None,
        stall: None,
        quota: before
            .quota
            .zip(after.quota)
            .map(|(before, after)| after.since(&before)),
        ran_instead: after
            .others
            .since(
                &before.others,
                Path::new(crate::producers::sample::PROC),
                Path::new(cpu_quota::CGROUP),
                std::process::id(),
            )
            .top,
    }
}

/// The host's threads during `step`'s stall, from the timeline's `samples` (any span; those
/// in the stall are picked), the clock's `period_ns` and the host's `cpus`.
pub fn stall_seen(
    step: &TrafficStep,
    samples: &[TimelineSample],
    period_ns: u64,
    cpus: usize,
) -> Option<StallSeen> {
    let stall = step.stall.as_ref()?;
    let from = stall.begins_at_ns;
    let to = from + (stall.lasted_ms * 1e6) as u64;
    let mut functions: BTreeMap<&str, u64> = BTreeMap::new();
    let mut seen = 0;
    let mut first_ns = to;
    for sample in samples.iter().filter(|s| (from..to).contains(&s.at_ns)) {
        seen += 1;
        first_ns = first_ns.min(sample.at_ns);
        *functions.entry(sample.function.name.as_str()).or_default() += 1;
    }
    let mut functions: Vec<Share> = functions
        .into_iter()
        .map(|(what, samples)| Share {
            what: what.to_owned(),
            samples,
        })
        .collect();
    functions.sort_by_key(|share| std::cmp::Reverse(share.samples));
    functions.truncate(3);
    Some(StallSeen {
        samples: seen,
        possible: (to - from) as f64 / period_ns.max(1) as f64 * cpus as f64,
        functions,
        quiet_ms: (first_ns - from) as f64 / 1e6,
    })
}

/// What bounded the step, in words: the generator, the host's death, a stall its tail came
/// from (first, since the tail is what a target judges), its errors, its CPU (and which phase
/// of its work took most of it), one thread that never stopped, waiting for a CPU, or none of
/// those.
pub fn bound(step: &TrafficStep, evidence: &Evidence, config: &HostConfig) -> String {
    if let Some(died) = &evidence.died {
        return format!("the host died: {died}");
    }
    if let Some(why) = step.generator_limited() {
        return format!("generator-limited: {why}");
    }
    let besides = load(step, evidence, config);
    match stalled(step, evidence) {
        Some(stall) => format!("stalled: {stall}; besides the stall, {besides}"),
        None => besides,
    }
}

/// What the host's load did to the step: its errors, its CPU, one thread, waiting for a CPU,
/// or none of those; then where the time went.
fn load(step: &TrafficStep, evidence: &Evidence, config: &HostConfig) -> String {
    let cpus = config.cpus.len();
    let share = evidence.cpu_share(cpus);
    let rate = step.achieved_rps();
    let per_request = evidence.per_request(evidence.host_cpu_ms * 1e3);
    // In CPUs used, not the share, so that "1.62 of its 2 CPUs" reads as it is meant.
    let cpu = format!(
        "{:.2} of its {} at {}/s, {} of CPU per request",
        share * cpus as f64,
        match cpus {
            1 => "1 CPU".to_owned(),
            n => format!("{n} CPUs ({:.0}%)", 100.0 * share),
        },
        count(rate),
        micros(per_request),
    );
    let busiest = evidence
        .phases_cpu_ms
        .iter()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .filter(|(_, cpu)| evidence.host_cpu_ms > 0.0 && *cpu > 0.0)
        .map(|(phase, cpu)| {
            let what = match phase.as_str() {
                "host" => "in the host's own work (HTTP, runtime, outside any skill)",
                "compile" => "compiling",
                "instantiate" => "instantiating",
                _ => "in the skill's call",
            };
            format!(", {:.0}% of it {what}", 100.0 * cpu / evidence.host_cpu_ms)
        })
        .unwrap_or_default();
    let waited = evidence.per_request(evidence.run_delay_ms);
    let errors = step.errors.total();
    let went = went(evidence, config, false);
    // A quota that ran out holds the host's threads runnable with no CPU busy: schedstat
    // counts it as waiting for a CPU, and a host far under its CPUs reads as not CPU-bound.
    // It comes first, failures included: a throttled host is what makes requests time out.
    if let Some(quota) = evidence.quota.filter(|q| q.held_back()) {
        return format!(
            "throttled by its cgroup's CPU quota ({}): held back in {} of {} periods, {} in all \
             ({} per request){}; the host used {cpu}{went}",
            quota.said(),
            count(quota.throttled_periods as f64),
            count(quota.periods as f64),
            ms(quota.throttled_ms),
            ms(evidence.per_request(quota.throttled_ms)),
            match errors {
                0 => String::new(),
                _ => format!("; {errors} requests failed"),
            }
        );
    }
    if errors > 0 {
        return format!(
            "failing: {errors} of {} requests failed ({} without an answer, {} outside 2xx, {} \
             unanswered at the end); the host used {cpu}{went}",
            count(step.sent as f64),
            step.errors.transport,
            step.errors.status,
            step.errors.unanswered
        );
    }
    // The kernel's own work for the host (its network stack's softirqs) is not charged to
    // it: a host at 0.8 of its CPUs has the rest of them busy for it.
    if share >= 0.8 {
        return format!("CPU-bound: {cpu}{busiest}{went}");
    }
    // A host given every CPU shares them with the generator: the two together are what ran
    // out, and the host's own share alone would read as headroom it did not have.
    let generator = step.generator_cpu_ms / evidence.wall_ms.max(1e-9);
    if step.generator_unpinned() && share + generator / cpus.max(1) as f64 >= 0.8 {
        return format!(
            "CPU-bound with the generator on the same CPUs: the host used {cpu}{busiest}, and \
             the generator {generator:.2} more{went}"
        );
    }
    // One thread that never stopped: the rest of the CPUs could not help it (a single
    // worker, or work that stays on one thread).
    let thread = evidence.busiest_thread_ms / evidence.wall_ms.max(1e-9);
    if thread >= 0.9 {
        let workers = match config.workers {
            Some(1) => "1 worker thread".to_owned(),
            Some(n) => format!("{n} worker threads"),
            None => "the host's default worker threads".to_owned(),
        };
        return format!(
            "thread-bound: its busiest thread was on a CPU {thread:.2} of the step, with \
             {workers}; the host used {cpu}{busiest}{went}"
        );
    }
    if waited > 0.3 * step.latency.p50_ms {
        return format!(
            "waiting for a CPU: its threads waited {} per request to run (the median request \
             took {}){}; the host used {cpu}{went}",
            ms(waited),
            ms(step.latency.p50_ms),
            while_these_ran(&evidence.ran_instead, evidence.wall_ms)
        );
    }
    format!(
        "not CPU-bound: the host used {cpu}{busiest}; its threads waited {} per request for a \
         CPU{}",
        ms(waited),
        self::went(evidence, config, true)
    )
}

/// Where the step's time went, as far as its evidence says, each part after a `; `: the
/// host's CPU by what its code did (the time profile), each request's time inside the host
/// (on a thread, queued for one, pending on the skill's own waits: the host's ledger), and
/// what the host's CPUs did that no task sees (steal, interrupts). `waits`: where a request
/// waited is the question (the host was not CPU-bound), so not knowing it is said too.
fn went(evidence: &Evidence, config: &HostConfig, waits: bool) -> String {
    let mut parts = Vec::new();
    if let Some(split) = evidence
        .time
        .as_ref()
        .and_then(crate::views::explain::cpu_split)
    {
        parts.push(format!("its CPU: {split}"));
    }
    match &evidence.requests {
        Some(times) if evidence.answered > 0 => parts.push(format!(
            "each request inside the host: {} on a thread, {} queued for a thread of its \
             runtime, {} pending on the skill's own waits",
            ms(evidence.per_request(times.on_thread_ms)),
            ms(evidence.per_request(times.queued_ms)),
            ms(evidence.per_request(times.pending_ms))
        )),
        Some(_) => {}
        None if !waits => {}
        None => parts.push(
            "the host keeps no ledger, so where a request waited inside it (queued for a thread, \
             or on the skill's own waits) is not known"
                .to_owned(),
        ),
    }
    if let Some(lost) = &evidence.cpus {
        let given = evidence.wall_ms * config.cpus.len().max(1) as f64;
        let pct = |ms: f64| 100.0 * ms / given.max(1e-9);
        let mut said = Vec::new();
        for (what, ms) in [
            ("taken by the hypervisor (steal)", lost.steal_ms),
            ("in softirqs", lost.softirq_ms),
            ("in interrupts", lost.irq_ms),
        ] {
            if pct(ms) >= 2.0 {
                said.push(format!("{:.0}% {what}", pct(ms)));
            }
        }
        if !said.is_empty() {
            parts.push(format!("its CPUs' time: {}", said.join(", ")));
        }
    }
    parts.into_iter().map(|part| format!("; {part}")).collect()
}

/// The stall the step's tail came from, in words, with what the time profile saw of the
/// host's threads in it.
fn stalled(step: &TrafficStep, evidence: &Evidence) -> Option<String> {
    let stall = step.stall.as_ref()?;
    let mut text = crate::views::explain::one_stall(stall);
    if let Some(seen) = &evidence.stall {
        let functions: Vec<String> = seen
            .functions
            .iter()
            .map(|f| format!("{} ×{}", f.what, f.samples))
            .collect();
        text.push_str(&format!(
            ": the host's threads were sampled {} times in it of {:.0} possible",
            seen.samples, seen.possible
        ));
        if !functions.is_empty() {
            text.push_str(&format!(" ({})", functions.join(", ")));
        }
        if (seen.samples as f64) < 0.25 * seen.possible {
            text.push_str(
                ", so they were mostly off their CPUs: waiting for work, or not given a CPU",
            );
        }
        // A host that serves requests side by side drains the backlog of a pause slowly:
        // every request of it is answered late, and the stall by its requests outlasts the
        // pause. The first sample says where the pause ended.
        if seen.samples > 0 && seen.quiet_ms < 0.9 * stall.lasted_ms {
            text.push_str(&format!(
                "; they ran nothing for its first {} (no sample), then drained the requests \
                 that had waited for {}",
                ms(seen.quiet_ms),
                ms(stall.lasted_ms - seen.quiet_ms)
            ));
        }
    }
    Some(text)
}

fn micros(us: f64) -> String {
    match us {
        us if us >= 1000.0 => ms(us / 1e3),
        us => format!("{us:.0} µs"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::sampling::CpuQuota;
    use crate::record::slo::StallSeen;
    use crate::record::traffic::{Stall, UNPINNED};

    fn step(generator_cpus: &str, generator_cpu_ms: f64) -> TrafficStep {
        TrafficStep {
            generator_cpu_ms,
            generator_cpus: generator_cpus.into(),
            ..crate::record::fixture::traffic(400)
        }
    }

    fn config(workers: Option<u32>, cpus: usize) -> HostConfig {
        HostConfig {
            workers,
            cpus: (0..cpus).collect(),
            allocator: None,
        }
    }

    fn evidence(host_cpu_ms: f64, busiest_thread_ms: f64) -> Evidence {
        Evidence {
            host_cpu_ms,
            wall_ms: 4000.0,
            busiest_thread_ms,
            answered: 1600,
            ..Evidence::default()
        }
    }

    /// A step whose tail came from one stall says so first: the 2024 users' heavy skill at
    /// 30/s, the host stopped for a second with a tenth of its CPU used. The stall came last,
    /// after "not CPU-bound" and where the time went.
    #[test]
    fn a_stall_is_named_first() {
        let stalled = TrafficStep {
            stall: Some(Stall {
                begins_ms: 2000.0,
                lasted_ms: 1003.0,
                tail_share: 1.0,
                requests: 31,
                begins_at_ns: 0,
                give_or_take_ms: 0.0,
            }),
            ..crate::record::fixture::traffic(30)
        };
        let said = bound(&stalled, &evidence(400.0, 200.0), &config(None, 1));
        assert!(
            said.starts_with(
                "stalled: the tail came from one stall 2,000 ms into the window, 1,003 ms long \
                 (100% of the requests at or above p99 were sent in it); besides the stall, not \
                 CPU-bound: the host used 0.10 of its 1 CPU"
            ),
            "{said}"
        );
    }

    /// A host whose cgroup has a twentieth of a CPU: its threads wait, runnable, for the next
    /// period, which schedstat counts as waiting for a CPU, though none was busy.
    #[test]
    fn a_throttled_host_is_named_first() {
        let throttled = Evidence {
            run_delay_ms: 2400.0,
            quota: Some(CpuQuota {
                quota_cpus: Some(0.05),
                periods: 40,
                throttled_periods: 30,
                throttled_ms: 900.0,
            }),
            ..evidence(200.0, 150.0)
        };
        let said = bound(
            &crate::record::fixture::traffic(30),
            &throttled,
            &config(None, 1),
        );
        assert!(
            said.starts_with(
                "throttled by its cgroup's CPU quota (0.050 of a CPU): held back in 30 of 40 \
                 periods, 900 ms in all (0.6 ms per request); the host used 0.05 of its 1 CPU"
            ),
            "{said}"
        );
        // A quota that held the host back in under a twentieth of its periods is not named.
        let rarely = Evidence {
            quota: Some(CpuQuota {
                throttled_periods: 1,
                ..throttled.quota.unwrap()
            }),
            ..throttled
        };
        let said = bound(
            &crate::record::fixture::traffic(30),
            &rarely,
            &config(None, 1),
        );
        assert!(!said.contains("throttled"), "{said}");
    }

    /// The Python sample at 100/s on one CPU, stopped for 1.5 s: the backlog of 150 requests
    /// shares the CPU as it drains, each answered late, and the stall by its requests read
    /// 1,970 ms, 31% longer than the pause. The time profile's first sample in it says where
    /// the pause ended.
    #[test]
    fn a_stalls_pause_is_told_from_its_backlog() {
        let stalled = TrafficStep {
            stall: Some(Stall {
                begins_ms: 1130.0,
                lasted_ms: 1970.0,
                tail_share: 1.0,
                requests: 197,
                begins_at_ns: 0,
                give_or_take_ms: 0.0,
            }),
            ..crate::record::fixture::traffic(100)
        };
        let seen = |quiet_ms| Evidence {
            stall: Some(StallSeen {
                samples: 40,
                possible: 191.0,
                functions: Vec::new(),
                quiet_ms,
            }),
            ..evidence(400.0, 200.0)
        };
        let said = bound(&stalled, &seen(1505.0), &config(None, 1));
        assert!(
            said.contains(
                "; they ran nothing for its first 1,505 ms (no sample), then drained the \
                 requests that had waited for 465 ms; besides the stall"
            ),
            "{said}"
        );
        // Quiet all along (a host that serves one request at a time): no backlog to tell.
        let said = bound(&stalled, &seen(1900.0), &config(None, 1));
        assert!(!said.contains("ran nothing"), "{said}");
    }

    #[test]
    fn one_late_send_in_a_short_step_is_a_hiccup_and_more_than_one_percent_a_limit() {
        let late = |sent, late_sends| TrafficStep {
            sent,
            late_sends,
            ..step("1", 30.0)
        };
        // 80 sends at 50/s: one or two late are over 1% and are one preemption, not a limit.
        assert_eq!(late(80, 1).unsustained(), None);
        assert_eq!(late(80, 2).generator_limited(), None);
        let limited = late(80, 3).unsustained().unwrap();
        assert!(limited.starts_with("the generator could not hold its schedule: 3 of 80"));
        assert_eq!(late(1280, 12).generator_limited(), None);
        assert!(late(1280, 13).generator_limited().is_some());
    }

    /// What took the generator's CPU is said where it took 1% or more: on this VM, late
    /// sends came with 7-9% of each CPU's time stolen by the hypervisor.
    #[test]
    fn late_sends_name_what_took_the_generators_cpu() {
        let stolen = |steal_pct, softirq_pct| TrafficStep {
            late_sends: 58,
            send_lag_p99_ms: 11.49,
            generator_cpus_time: Some(crate::record::sampling::CpuShare {
                busy_pct: 12.0,
                steal_pct,
                irq_pct: Some(0.0),
                softirq_pct: Some(softirq_pct),
            }),
            ..step("0", 250.0)
        };
        assert_eq!(
            stolen(7.2, 0.5).generator_limited().unwrap(),
            "58 of 1280 sends were more than 1 ms late (send lag p99 11.49 ms); of the \
             generator's CPU time, 7% went to the hypervisor (steal)"
        );
        assert_eq!(
            stolen(0.4, 0.5).generator_limited().unwrap(),
            "58 of 1280 sends were more than 1 ms late (send lag p99 11.49 ms)"
        );
        assert!(
            stolen(3.0, 2.0)
                .generator_limited()
                .unwrap()
                .ends_with("3% went to the hypervisor (steal), 2% to interrupts and softirqs"),
        );
    }

    #[test]
    fn the_cpus_given_used_up_bound_the_step_in_cpus_used() {
        let said = bound(
            &step("0", 100.0),
            &evidence(3400.0, 3400.0),
            &config(Some(2), 1),
        );
        assert!(
            said.starts_with("CPU-bound: 0.85 of its 1 CPU at 400/s, 2.1 ms of CPU"),
            "{said}"
        );
        let said = bound(
            &step("0", 100.0),
            &evidence(7000.0, 3500.0),
            &config(Some(2), 2),
        );
        assert!(
            said.starts_with("CPU-bound: 1.75 of its 2 CPUs (88%) at 400/s"),
            "{said}"
        );
    }

    #[test]
    fn one_thread_that_never_stopped_bounds_a_host_with_cpus_to_spare() {
        let said = bound(
            &step("0", 100.0),
            &evidence(3700.0, 3680.0),
            &config(Some(1), 2),
        );
        assert!(
            said.starts_with("thread-bound: its busiest thread was on a CPU 0.92 of the step, with 1 worker thread; the host used 0.93 of its 2 CPUs (46%)"),
            "{said}"
        );
    }

    #[test]
    fn cpus_shared_with_the_generator_bound_them_together() {
        let said = bound(
            &step(UNPINNED, 1800.0),
            &evidence(4800.0, 2500.0),
            &config(Some(2), 2),
        );
        assert!(
            said.starts_with("CPU-bound with the generator on the same CPUs: the host used 1.20 of its 2 CPUs (60%)")
                && said.ends_with("and the generator 0.45 more"),
            "{said}"
        );
        // The generator elsewhere is not the host's business.
        let said = bound(
            &step("0", 1800.0),
            &evidence(4800.0, 2500.0),
            &config(Some(2), 2),
        );
        assert!(said.starts_with("not CPU-bound"), "{said}");
    }
}
