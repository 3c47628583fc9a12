//! An entry's counts as a named profile ([`TimeProfile`]: each stack's frames, skill, phase,
//! state and why it waited), and what the profile came to ([`EntryTime`]).

use std::collections::{BTreeMap, HashMap};

use skillprof_common::{NO_STACK, TimeCounts, TimeKey, TimeValue};

use super::classify::{wait_of, work_of};
use crate::producers::probes::markers::SkillNames;
use crate::record::probes::Phase;
use crate::record::time::{
    EntryTime, Frame, FrameKind, OffCpuTime, Share, TimeProfile, TimeStack, TimeState, Wait, Work,
};

/// A frame of the kernel's tracing and of skillprof's own programs.
fn is_probe(name: &str) -> bool {
    [
        "bpf_prog_",
        "bpf_trace_run",
        "__bpf_trace_",
        "__traceiter_",
        "trace_call_bpf",
    ]
    .iter()
    .any(|prefix| name.starts_with(prefix))
}

/// The requests' time between polls of `rows` (the host's marks), as stacks of their skill
/// and phase without frames: pending as sleeping, queued as runnable.
pub fn between_polls(rows: &[crate::record::probes::SkillRow]) -> Vec<TimeStack> {
    rows.iter()
        .flat_map(|row| {
            let phase = &row.counts.phase;
            [
                (TimeState::Sleeping, Wait::Pending, phase.pending_ns),
                (TimeState::Runnable, Wait::Queued, phase.queued_ns),
            ]
            .into_iter()
            .filter(|&(_, _, ns)| ns > 0)
            .map(|(state, wait, ns)| TimeStack {
                skill: row.skill.clone(),
                phase: row.phase,
                state,
                wait: Some(wait),
                frames: Vec::new(),
                count: phase.runs,
                ns,
            })
        })
        .collect()
}

/// The counts with the short waits' time shared out (`--off-cpu waits`): of the waits shorter
/// than the walk threshold, a wait of length d had its stack taken with a chance of d over
/// the threshold, so each taken one stands for the same time, the threshold, whatever its
/// length. Per skill, phase and state, the short waits' time (exact: the unwalked ones' key
/// without a stack plus the taken ones') is shared among the taken stacks by their counts,
/// the key without a stack folded in. Where none was taken, and for every other count, the
/// counts pass as they are.
fn short_waits_shared(counted: &[(TimeKey, TimeValue)]) -> Vec<(TimeKey, TimeValue)> {
    type Group = (u32, u32, u32);
    let group = |key: &TimeKey| (key.skill, key.phase, key.state);
    let unwalked = |key: &TimeKey| key.kernel_stack == NO_STACK && key.user_stack == NO_STACK;
    // Per group: the short waits' time and intervals, and the taken stacks' count.
    let mut short: BTreeMap<Group, (u64, u64, u64)> = BTreeMap::new();
    for (key, value) in counted.iter().filter(|(key, _)| key.sampled != 0) {
        let sum = short.entry(group(key)).or_default();
        sum.0 += value.ns;
        sum.1 += value.count;
        sum.2 += value.count;
    }
    for (key, value) in counted {
        // Only sleeping and blocked groups have taken stacks, so only theirs are found.
        if unwalked(key)
            && let Some(sum) = short.get_mut(&group(key))
        {
            sum.0 += value.ns;
            sum.1 += value.count;
        }
    }
    counted
        .iter()
        .filter(|(key, _)| !(unwalked(key) && short.contains_key(&group(key))))
        .map(|&(key, value)| match short.get(&group(&key)) {
            Some(&(ns, intervals, taken)) if key.sampled != 0 => {
                let share = value.count as f64 / taken as f64;
                let value = TimeValue {
                    ns: (ns as f64 * share).round() as u64,
                    count: (intervals as f64 * share).round() as u64,
                };
                (key, value)
            }
            _ => (key, value),
        })
        .collect()
}

/// Functions the summary lists by their samples.
const TOP: usize = 10;

/// The profile of an entry's counts: `walked` has each stack's addresses innermost first,
/// `user` and `kernel` each address's frame. Stacks with the same skill, phase, state, wait
/// and functions are one.
pub fn profile(
    period_ns: u64,
    counted: &[(TimeKey, TimeValue)],
    walked: &BTreeMap<u32, Vec<u64>>,
    user: &BTreeMap<u64, Frame>,
    kernel: &BTreeMap<u64, Frame>,
    names: &SkillNames,
) -> TimeProfile {
    let mut frames: Vec<Frame> = Vec::new();
    let mut interned: HashMap<Frame, u32> = HashMap::new();
    let mut intern = |frame: &Frame| -> u32 {
        *interned.entry(frame.clone()).or_insert_with(|| {
            frames.push(frame.clone());
            (frames.len() - 1) as u32
        })
    };
    let lost = Frame {
        name: "[stack lost]".to_owned(),
        kind: FrameKind::Unnamed,
    };
    type Place = (Option<String>, Phase, TimeState, Option<Wait>, Vec<u32>);
    let mut merged: BTreeMap<Place, (u64, u64)> = BTreeMap::new();
    for (key, value) in &short_waits_shared(counted) {
        let state = TimeState::ALL
            .get(key.state as usize)
            .copied()
            .unwrap_or(TimeState::OnCpu);
        // Outermost first: a walk lists its frames innermost first.
        let side = |id: i32, names: &BTreeMap<u64, Frame>| -> Vec<Frame> {
            if id == NO_STACK {
                return Vec::new();
            }
            match walked.get(&(id as u32)) {
                Some(ips) => ips.iter().rev().map(|ip| names[ip].clone()).collect(),
                None => vec![lost.clone()],
            }
        };
        let skill = names.of(key.skill);
        let user_side: Vec<Frame> = match &skill {
            Some(skill) => side(key.user_stack, user)
                .iter()
                .map(|frame| frame.of_skill(skill))
                .collect(),
            None => side(key.user_stack, user),
        };
        let mut kernel_side = side(key.kernel_stack, kernel);
        // A stack walked at a switch ends in the tracepoint and this BPF program: the
        // profiler's frames, not the thread's.
        while kernel_side.last().is_some_and(|f| is_probe(&f.name)) {
            kernel_side.pop();
        }
        let wait = match state {
            TimeState::OnCpu => None,
            _ => wait_of(state, &kernel_side.iter().collect::<Vec<_>>()),
        };
        let ids = user_side
            .iter()
            .chain(&kernel_side)
            .map(&mut intern)
            .collect();
        let place = (
            skill,
            Phase::from_number(key.phase).unwrap_or(Phase::Host),
            state,
            wait,
            ids,
        );
        let sum = merged.entry(place).or_default();
        sum.0 += value.count;
        sum.1 += value.ns;
    }
    TimeProfile {
        period_ns,
        stacks: merged
            .into_iter()
            .map(
                |((skill, phase, state, wait, frames), (count, ns))| TimeStack {
                    skill,
                    phase,
                    state,
                    wait,
                    frames,
                    count,
                    ns,
                },
            )
            .collect(),
        frames,
    }
}

/// What `profile` came to; `counts` are the programs' own for the entry. `clock`: whether the
/// profile clock ran; `off_cpu`: whether the switch programs did; `stacks`: whether they
/// walked stacks (which say why).
pub fn entry_time(
    profile: &TimeProfile,
    counts: &TimeCounts,
    clock: bool,
    off_cpu: bool,
    stacks: bool,
) -> EntryTime {
    let mut time = EntryTime {
        clock,
        period_ns: profile.period_ns,
        stacks_lost: counts.stacks_lost,
        lost: counts.lost,
        ..EntryTime::default()
    };
    let mut parts: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut top: BTreeMap<&str, u64> = BTreeMap::new();
    for stack in profile.in_state(TimeState::OnCpu) {
        let frames: Vec<&Frame> = profile.frames_of(stack).collect();
        let n = stack.count;
        time.samples += n;
        time.by_phase[stack.phase as usize] += n;
        if profile.in_kernel(stack) {
            time.kernel += n;
        }
        if let Some(innermost) = frames.last() {
            match innermost.kind {
                FrameKind::Wasm => time.wasm += n,
                FrameKind::Unnamed => time.unnamed += n,
                _ => {}
            }
            *top.entry(innermost.name.as_str()).or_default() += n;
        } else {
            time.unnamed += n;
        }
        let (work, part) = work_of(&frames);
        time.by_work[Work::ALL.iter().position(|w| *w == work).unwrap_or(0)] += n;
        if let Some(part) = part {
            *parts.entry(part).or_default() += n;
        }
    }
    time.parts = largest(parts);
    time.top = largest(top);
    time.top.truncate(TOP);
    if off_cpu {
        let mut off = OffCpuTime {
            switches: counts.switches_out,
            walks: counts.walks,
            by_wait: stacks.then_some([0; Wait::ALL.len()]),
            in_skills_by_wait: stacks.then_some([0; Wait::ALL.len()]),
            ..OffCpuTime::default()
        };
        for stack in profile
            .stacks
            .iter()
            .filter(|s| s.state != TimeState::OnCpu)
        {
            if let (Some(by_wait), Some(wait)) = (&mut off.by_wait, stack.wait) {
                by_wait[wait as usize] += stack.ns;
            }
            if stack.wait.is_some_and(Wait::between_polls) {
                continue;
            }
            let state = match stack.state {
                TimeState::Runnable => &mut off.runnable_ns,
                TimeState::Sleeping => &mut off.sleeping_ns,
                _ => &mut off.blocked_ns,
            };
            *state += stack.ns;
            if stack.skill.is_some() {
                off.in_skills_ns[stack.state as usize - 1] += stack.ns;
                if let (Some(by_wait), Some(wait)) = (&mut off.in_skills_by_wait, stack.wait) {
                    by_wait[wait as usize] += stack.ns;
                }
            }
        }
        time.off_cpu = Some(off);
    }
    time
}

/// `(what, samples)` as shares, largest first (ties by name).
fn largest<S: AsRef<str>>(counts: BTreeMap<S, u64>) -> Vec<Share> {
    let mut shares: Vec<Share> = counts
        .into_iter()
        .map(|(what, samples)| Share {
            what: what.as_ref().to_owned(),
            samples,
        })
        .collect();
    shares.sort_by(|a, b| b.samples.cmp(&a.samples).then_with(|| a.what.cmp(&b.what)));
    shares
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(state: TimeState, kernel_stack: i32, sampled: u32) -> TimeKey {
        TimeKey {
            entry: 1,
            skill: 2,
            phase: 3,
            state: state as u32,
            user_stack: NO_STACK,
            kernel_stack,
            sampled,
        }
    }

    /// Short sleeps of 9 ms in all, two of whose stacks were taken on a futex and one on
    /// epoll: the 9 ms are shared two to one; a long wait's own stack and the runnable time
    /// are left as they were, and so is another state with no stack taken.
    #[test]
    fn the_short_waits_time_is_shared_by_the_stacks_taken_among_them() {
        let (futex, epoll, long) = (WAIT_FUTEX, WAIT_EPOLL, WAIT_LONG);
        let counted = [
            (key(TimeState::Sleeping, NO_STACK, 0), value(27, 8_000_000)),
            (key(TimeState::Sleeping, futex, 1), value(2, 600_000)),
            (key(TimeState::Sleeping, epoll, 1), value(1, 400_000)),
            (key(TimeState::Sleeping, long, 0), value(1, 50_000_000)),
            (key(TimeState::Runnable, NO_STACK, 0), value(30, 3_000_000)),
            (key(TimeState::Blocked, NO_STACK, 0), value(4, 200_000)),
        ];
        let shared = short_waits_shared(&counted);
        let ns = |stack: i32, state: TimeState| {
            shared
                .iter()
                .filter(|(k, _)| k.kernel_stack == stack && k.state == state as u32)
                .map(|(_, v)| (v.count, v.ns))
                .collect::<Vec<_>>()
        };
        assert_eq!(ns(futex, TimeState::Sleeping), [(20, 6_000_000)]);
        assert_eq!(ns(epoll, TimeState::Sleeping), [(10, 3_000_000)]);
        assert_eq!(ns(NO_STACK, TimeState::Sleeping), []);
        assert_eq!(ns(long, TimeState::Sleeping), [(1, 50_000_000)]);
        assert_eq!(ns(NO_STACK, TimeState::Runnable), [(30, 3_000_000)]);
        assert_eq!(ns(NO_STACK, TimeState::Blocked), [(4, 200_000)]);
        let total = |list: &[(TimeKey, TimeValue)]| list.iter().map(|(_, v)| v.ns).sum::<u64>();
        assert_eq!(total(&shared), total(&counted));
    }

    const WAIT_FUTEX: i32 = skillprof_common::WAIT_STACK_ID | 1;
    const WAIT_EPOLL: i32 = skillprof_common::WAIT_STACK_ID | 2;
    const WAIT_LONG: i32 = skillprof_common::WAIT_STACK_ID | 3;

    fn value(count: u64, ns: u64) -> TimeValue {
        TimeValue { count, ns }
    }
}
