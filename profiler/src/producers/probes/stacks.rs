//! `--stacks`: the host's user stacks at its page faults and address-space syscalls, as the
//! BPF programs counted them per entry, skill and stack, symbolised while the host runs
//! (probes::symbols), and folded root first for flamegraphs.

use std::collections::BTreeMap;

use anyhow::{Context as _, Result};
use aya::{
    Ebpf,
    maps::{HashMap as BpfHashMap, MapData, StackTraceMap},
};
use skillprof_common::{STACK_FAULT, StackKey};

use super::{
    markers::{HOST_ROW, SkillNames},
    object,
    session::take,
    symbols,
};

use crate::record::probes::StackSummary;

impl StackSummary {
    /// The share of walked stacks whose innermost frame is named, in percent.
    pub fn named_pct(&self) -> Option<f64> {
        (self.samples > 0).then(|| 100.0 * self.top_named as f64 / self.samples as f64)
    }
}

/// One entry's stacks, folded: `skill;kind;outermost;...;innermost` and the events counted
/// with that stack. stacks/ENTRY.folded and the flamegraph are views of it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EntryStacks {
    pub folded: Vec<(String, u64)>,
    pub summary: StackSummary,
}

/// The stack maps of a live session.
pub struct Stacks {
    traces: StackTraceMap<MapData>,
    counts: BpfHashMap<MapData, StackKey, u64>,
    tgid: u32,
    wasm: symbols::WasmNames,
}

impl Stacks {
    /// `skills_dir`: where the host's component files are, to name its wasm functions.
    pub fn take(
        ebpf: &mut Ebpf,
        tgid: u32,
        skills_dir: Option<&std::path::Path>,
    ) -> Result<Stacks> {
        Ok(Stacks {
            traces: StackTraceMap::try_from(take(ebpf, object::STACK_TRACES)?)?,
            counts: BpfHashMap::try_from(take(ebpf, object::STACK_COUNTS)?)?,
            tgid,
            wasm: symbols::WasmNames::new(skills_dir),
        })
    }

    /// Entry `index`'s stacks, symbolised now: call it while the host still runs, after the
    /// entry and before the next one begins. `names` are the markers' skill names; `lost` is
    /// the entry's lost-stack count. The entry's stacks are removed from the maps as they are
    /// read: the stack map is a hash table without chaining, where a stack whose slot is
    /// taken is lost, so a map still full of the compiles' stacks would lose the stacks of
    /// later entries.
    pub fn take_entry(&mut self, index: u32, names: &SkillNames, lost: u64) -> Result<EntryStacks> {
        let mut counted: Vec<(StackKey, u64)> = Vec::new();
        for item in self.counts.iter() {
            let (key, count) = item.context("reading the stack counts")?;
            if key.entry == index {
                counted.push((key, count));
            }
        }
        // Every distinct stack's frames, innermost first; return addresses (all but the
        // innermost frame) are moved back into their call instruction before lookup.
        let mut frames: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
        let mut lost = lost;
        counted.retain(|(key, count)| {
            if frames.contains_key(&key.stack) {
                return true;
            }
            // Gone only if removed with an earlier entry while this one's event was in flight.
            let Ok(trace) = self.traces.get(&key.stack, 0) else {
                lost += count;
                return false;
            };
            let ips = trace
                .frames()
                .iter()
                .enumerate()
                .map(|(i, frame)| if i == 0 { frame.ip } else { frame.ip - 1 })
                .collect();
            frames.insert(key.stack, ips);
            true
        });
        // Best effort: what is not removed only takes a slot.
        for (key, _) in &counted {
            let _ = self.counts.remove(key);
        }
        for stack in frames.keys() {
            let _ = self.traces.remove(stack);
        }

        let named = symbols::user_frames(
            self.tgid,
            frames.values().flatten().copied(),
            &mut self.wasm,
        )?;
        let mut folded: BTreeMap<String, u64> = BTreeMap::new();
        let mut summary = StackSummary {
            lost,
            ..StackSummary::default()
        };
        for &(key, count) in &counted {
            let ips = &frames[&key.stack];
            summary.samples += count;
            if ips.first().is_some_and(|ip| named[ip].is_named()) {
                summary.top_named += count;
            }
            let skill = names.of(key.skill);
            let kind = if key.kind == STACK_FAULT {
                "fault"
            } else {
                "syscall"
            };
            let mut line = format!("{};{kind}", skill.as_deref().unwrap_or(HOST_ROW));
            for ip in ips.iter().rev() {
                line.push(';');
                match &skill {
                    Some(skill) => line.push_str(&named[ip].of_skill(skill).name),
                    None => line.push_str(&named[ip].name),
                }
            }
            *folded.entry(line).or_default() += count;
        }
        Ok(EntryStacks {
            folded: folded.into_iter().collect(),
            summary,
        })
    }
}
