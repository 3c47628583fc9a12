//! The head of explain.md: how the run was measured (the host, which probes were live by
//! which mechanism, what measuring cost), from the run's info.

use clap::ValueEnum as _;

use crate::ground::units;
use crate::producers::probes::CostMode;
use crate::record::probes::{Mechanism, Probe, ProbeCosts, ProbeMode, StackSummary};
use crate::record::{EntryRecord, ProbesInfo, RunInfo};

/// The head's lines: how the run was measured, and with `--stacks` what the stacks came to.
pub fn head(info: &RunInfo, records: &[EntryRecord]) -> Vec<String> {
    let host_cpu_ms: f64 = records
        .iter()
        .filter_map(|record| record.measure.host_cpu_ms())
        .sum();
    let mut lines = measurement(info, host_cpu_ms);
    lines.extend(stacks_line(records));
    lines
}

/// With `--stacks`: how many stacks were walked, how many have a named innermost frame, how
/// many were lost, over the whole run.
fn stacks_line(records: &[EntryRecord]) -> Option<String> {
    let summaries: Vec<_> = records.iter().filter_map(|r| r.stacks).collect();
    if summaries.is_empty() {
        return None;
    }
    let sum = |read: fn(&StackSummary) -> u64| summaries.iter().map(read).sum::<u64>();
    let total = StackSummary {
        samples: sum(|s| s.samples),
        lost: sum(|s| s.lost),
        top_named: sum(|s| s.top_named),
    };
    let walked = total.samples + total.lost;
    Some(format!(
        "stacks (--stacks): {} walked at faults and address-space syscalls, {:.1}% with a named \
         innermost frame, {} lost ({:.1}%); flamegraphs in stacks/",
        units::count(total.samples as f64),
        total.named_pct().unwrap_or(0.0),
        units::count(total.lost as f64),
        100.0 * total.lost as f64 / walked.max(1) as f64
    ))
}

/// How the run was measured, for the head of explain.md: the host, which probes were live
/// by which mechanism, and what measuring cost.
fn measurement(info: &RunInfo, host_cpu_ms: f64) -> Vec<String> {
    let mut lines = vec![format!(
        "host: {}{} ({} profile) on {} ({} cores, {} GiB), kernel {}",
        if info.host.attached {
            format!(
                "attached to process {} (not started by skillprof), ",
                info.host.pid.unwrap_or_default()
            )
        } else {
            String::new()
        },
        info.host.spec.bin.display(),
        info.host.spec.profile,
        info.machine.brand,
        info.machine.cores,
        info.machine.memory_total_kb / (1024 * 1024),
        info.machine.kernel_release
    )];
    if let Some(cores) = &info.cores {
        lines.push(cores.said());
    }
    if let Some(engine) = info.host.config.as_ref().and_then(|c| c.get("engine")) {
        lines.push(format!("host configuration: {engine}"));
    }
    if let Some(cgroup) = &info.memory_cgroup {
        lines.push(format!(
            "memory limit: the host ran in its own memory cgroup {} ({}), limit {} \
             (--memory-max), removed at the end",
            cgroup.dir,
            cgroup.version,
            units::bytes(cgroup.limit_bytes as f64)
        ));
    }
    if let Some(evidence) = &info.oom_killed {
        lines.push(format!("the host was KILLED by the OOM killer: {evidence}"));
    }
    if let Some(python) = info.python_sample {
        lines.push(format!(
            "Python skill of add_py: {} (--python-sample {}), built for {}",
            python.component(),
            python
                .to_possible_value()
                .expect("no variant is skipped")
                .get_name(),
            info.host.spec.registry.world
        ));
    }
    if !info.atomic_copy {
        lines.push(
            "skill files: written in place (--no-atomic-copy), half first, so the host saw \
             each one half-written"
                .to_owned(),
        );
    }
    if let Some(probes) = &info.probes {
        lines.extend(probes_live(probes));
        lines.extend(cost(probes, info.sampler_cpu_ms, host_cpu_ms));
    }
    lines
}

/// Which probes were live, by which mechanism, in which mode, and what they could not see.
fn probes_live(probes: &ProbesInfo) -> Vec<String> {
    let mut lines = Vec::new();
    if !probes.enabled {
        lines.push("probes: off (--no-probes); procfs and the sampler only".to_owned());
    }
    let live: Vec<String> = probes
        .statuses
        .iter()
        .filter(|s| s.attached)
        .map(|s| format!("{} ({})", s.probe, s.mechanism))
        .collect();
    if !live.is_empty() {
        lines.push(format!("probes live: {}", live.join(", ")));
    }
    // The markers depend on the host, not on the kernel: their own line.
    let markers = probes.statuses.iter().find(|s| s.probe == Probe::Markers);
    match markers {
        Some(status) if status.attached => lines.push(
            "skill attribution: by the host's markers; skills.csv splits every entry by skill \
             and phase"
                .to_owned(),
        ),
        Some(status) => lines.push(format!(
            "skill attribution: OFF, entry windows only: {}",
            status.detail
        )),
        None => {}
    }
    for (probe, what) in [
        (
            Probe::Decommits,
            "batched decommits (process_madvise): not counted",
        ),
        (
            Probe::PagemapScan,
            "scans before reuse (PAGEMAP_SCAN): not counted",
        ),
        (
            Probe::Publish,
            "code published (compiles, any wasmtime host): not counted",
        ),
        (
            Probe::CpuProfile,
            "CPU profile: not sampled (no cpu_* columns, no on-CPU flamegraphs)",
        ),
        (
            Probe::OffCpu,
            "time off a CPU: not timed (no offcpu_* columns; the requests' time between polls \
             still comes from the host's marks)",
        ),
    ] {
        if let Some(status) = probes
            .statuses
            .iter()
            .find(|s| s.probe == probe && !s.attached)
        {
            lines.push(format!("{what}: {}", status.detail));
        }
    }
    let exact_only: Vec<&str> = probes
        .statuses
        .iter()
        .filter(|s| s.exact_only())
        .map(|s| s.probe.name())
        .collect();
    let mode = probes.mode.unwrap_or(match exact_only.is_empty() {
        true => ProbeMode::Exact,
        false => ProbeMode::HostOnly,
    });
    // Where skillprof chose the mode by the kernel, why: before what it leaves out.
    let why = probes
        .mode_why
        .as_deref()
        .map_or(String::new(), |why| format!(" ({why})"));
    match mode {
        ProbeMode::Exact => lines.push(
            "probe mode: exact: every memory call and page fault of the host counted by kind, \
             entry and skill; their programs run on every process's syscalls and faults on \
             this machine (what they cost: below, and docs/defaults.md); --probes calls leaves \
             out the faults' programs, --probes host-only both"
                .to_owned(),
        ),
        ProbeMode::Calls => lines.push(format!(
            "probe mode: calls{why}: every memory call of the host counted by kind, entry and \
             skill, by programs on every process's memory calls on this machine (what they \
             cost: below); page faults are the kernel's own counts (minflt, majflt), without a \
             read/write or user/kernel split: --probes exact adds a program on every fault of \
             the machine for those, --probes host-only leaves out the memory calls' programs \
             too"
        )),
        ProbeMode::HostOnly => lines.push(format!(
            "probe mode: host-only{why}, only the host pays: {} left out (their programs run \
             for every process); faults per entry are the kernel's own counts (minflt, majflt); \
             --probes calls for per-call counts, bytes and errnos, --probes exact also for \
             per-fault splits",
            exact_only.join(", ")
        )),
    }
    if mode.traces_calls() && probes.statuses.iter().any(|s| s.not_asked()) {
        lines.push(
            "memory calls not timed (--syscall-latency times them, with a program at each \
             call's entry and two clock reads)"
                .to_owned(),
        );
    }
    let missing: Vec<&str> = probes
        .statuses
        .iter()
        .filter(|s| !s.attached && !s.exact_only() && !s.not_asked() && !s.probe.follows_the_host())
        .map(|s| s.probe.name())
        .collect();
    if !missing.is_empty() {
        lines.push(format!(
            "probes not attached on this kernel: {} (meta.json says why; others cover their ground)",
            missing.join(", ")
        ));
    }
    if let Some(status) = probes
        .statuses
        .iter()
        .find(|s| s.probe == Probe::PageFaults && s.attached && s.mechanism != Mechanism::Fentry)
    {
        lines.push(format!(
            "page faults not seen by {}: those taken for get_user_pages (MAP_POPULATE, mlock, \
             MADV_POPULATE_*, O_DIRECT I/O), which the kernel counts in minflt; only fexit \
             handle_mm_fault sees them",
            status.mechanism
        ));
    }
    lines
}

/// How much of the programs' count the count's own floor may be: an empty program's time a
/// run (the call into it and a clock read), which every run of every program includes, at
/// the rate it reads on the wakeups (on other tracepoints it reads less or more).
fn floor(costs: &ProbeCosts) -> String {
    let Some(ns) = costs.floor.and_then(|floor| floor.ns_per_run()) else {
        return costs.floor_error.as_ref().map_or(String::new(), |why| {
            format!(" (the count's floor not measured: {why})")
        });
    };
    format!(
        " (an empty program on the scheduler's wakeups reads {ns:.0} ns a run, the call and \
         the clock read every run includes: at that rate, {} of the count)",
        units::ms(ns * costs.total_runs as f64 / 1e6)
    )
}

/// The probes' share of the host's CPU from which explain.md says the host's figures include
/// it: the run-to-run spread of the host's CPU for the same work on this machine is about
/// that (the overhead bench's control).
const MOVES_FIGURES_PCT: f64 = 3.0;

/// What the probes and the sampler cost the machine, and the probes' cost as a share of the
/// host's CPU over the entries (`host_cpu_ms`), with a caution where it is large enough to
/// move the host's figures.
fn cost(probes: &ProbesInfo, sampler_cpu_ms: Option<f64>, host_cpu_ms: f64) -> Option<String> {
    let costs = probes.costs.as_ref()?;
    let share = |ns: f64| 100.0 * ns / (host_cpu_ms * 1e6);
    let (mode, pct) = match costs.mode() {
        CostMode::Measured(_) => (
            format!(
                "measured (--self-cost: BPF stats on): BPF programs ran {} times for {} in \
                 total{}",
                units::count(costs.total_runs as f64),
                units::ms(costs.total_run_ns as f64 / 1e6),
                floor(costs)
            ),
            Some(share(costs.total_run_ns as f64)),
        ),
        CostMode::Modelled(modelled) => (
            format!("modelled (BPF stats off): {modelled}"),
            Some(share(modelled.total_ns.median)),
        ),
        CostMode::Unknown(why) => (format!("not measured ({why})"), None),
    };
    let pct = pct.filter(|pct| host_cpu_ms > 0.0 && pct.is_finite());
    Some(format!(
        "probe cost mode: {mode}{}{}; the sampler thread used {} of CPU",
        pct.map_or(String::new(), |pct| format!(
            ", equal to {pct:.1}% of the host's {} of CPU in the entries (some of it spent on \
             other processes' events){}",
            units::ms(host_cpu_ms),
            match pct >= MOVES_FIGURES_PCT {
                true =>
                    ": the host's CPU and latencies below include the part spent in its threads",
                false => "",
            }
        )),
        if costs.events_streamed {
            format!(
                ", {} events streamed, {} lost",
                costs.events_sent, costs.events_lost
            )
        } else {
            String::new()
        },
        units::ms(sampler_cpu_ms.unwrap_or(0.0))
    ))
}
