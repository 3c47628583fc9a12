//! `--stacks`: the host's user stacks at its page faults and address-space syscalls, as the
//! BPF programs counted them per entry, skill and stack, symbolised while the host runs
//! (wasmtime's perf map for the JIT-compiled wasm functions; blazesym and the ELF symbols of
//! the executable and its libraries for the rest), and folded root first for flamegraphs.

use std::collections::BTreeMap;

use anyhow::{Context as _, Result};
use aya::{
    Ebpf,
    maps::{HashMap as BpfHashMap, MapData, StackTraceMap},
};
use blazesym::symbolize::{Input, Symbolized, Symbolizer, source::Process, source::Source};
use skillprof_common::{STACK_FAULT, StackKey};

use super::{
    markers::{HOST_ROW, SkillNames},
    object,
    session::take,
};

pub use crate::record::probes::StackSummary;

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
}

impl Stacks {
    pub fn take(ebpf: &mut Ebpf, tgid: u32) -> Result<Stacks> {
        Ok(Stacks {
            traces: StackTraceMap::try_from(take(ebpf, object::STACK_TRACES)?)?,
            counts: BpfHashMap::try_from(take(ebpf, object::STACK_COUNTS)?)?,
            tgid,
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

        let named = self.frame_names(frames.values().flatten().copied())?;
        let mut folded: BTreeMap<String, u64> = BTreeMap::new();
        let mut summary = StackSummary {
            lost,
            ..StackSummary::default()
        };
        for &(key, count) in &counted {
            let ips = &frames[&key.stack];
            summary.samples += count;
            if ips.first().is_some_and(|ip| named[ip].symbol) {
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
                line.push_str(&named[ip].name);
            }
            *folded.entry(line).or_default() += count;
        }
        Ok(EntryStacks {
            folded: folded.into_iter().collect(),
            summary,
        })
    }

    /// Each address's frame name, looked up once: a wasm function from the host's perf map,
    /// else a symbol (blazesym), else the file it is in (`[libc.so.6]`, `[anon]`).
    fn frame_names(&self, ips: impl Iterator<Item = u64>) -> Result<BTreeMap<u64, Frame>> {
        let jit = perf_map(self.tgid)?;
        let mut named = BTreeMap::new();
        let mut addresses = Vec::new();
        for ip in ips {
            match jit.find(ip) {
                Some(name) => {
                    named.insert(ip, Frame::symbol(name));
                }
                None => addresses.push(ip),
            }
        }
        addresses.sort_unstable();
        addresses.dedup();
        let mut process = Process::new(self.tgid.into());
        // Read above: blazesym's reader refuses the `0x` wasmtime writes before each start.
        process.perf_map = false;
        let source = Source::Process(process);
        // A symboliser per entry: blazesym's caches are not Sync, the session is shared.
        let symbolizer = Symbolizer::new();
        let symbols = symbolizer
            .symbolize(&source, Input::AbsAddr(&addresses))
            .context("symbolising the host's stacks (is it still running?)")?;
        let modules = modules(self.tgid);
        for (&ip, symbol) in addresses.iter().zip(&symbols) {
            let frame = match symbol_name(symbol) {
                Some(name) => Frame::symbol(&name),
                None => Frame {
                    name: format!("[{}]", modules.find(ip).unwrap_or("unknown")),
                    symbol: false,
                },
            };
            named.insert(ip, frame);
        }
        Ok(named)
    }
}

/// A frame as the folded stacks show it.
struct Frame {
    /// Without the `;` that separates folded frames.
    name: String,
    /// Whether the name is a function's (a symbol or a perf-map entry), not only a file's.
    symbol: bool,
}

impl Frame {
    fn symbol(name: &str) -> Frame {
        Frame {
            name: name.replace(';', ":"),
            symbol: true,
        }
    }
}

/// Named address ranges, sorted by start: a JIT's functions, the host's mappings.
struct Ranges(Vec<(u64, u64, String)>);

impl Ranges {
    fn new(mut ranges: Vec<(u64, u64, String)>) -> Ranges {
        ranges.sort_by_key(|range| range.0);
        Ranges(ranges)
    }

    fn find(&self, ip: u64) -> Option<&str> {
        let after = self.0.partition_point(|range| range.0 <= ip);
        let (_, end, name) = self.0.get(after.checked_sub(1)?)?;
        (ip < *end).then_some(name.as_str())
    }
}

/// The host's perf map (`/tmp/perf-PID.map`, seen through its own root: `START SIZE NAME` per
/// line, START and SIZE in hex, START with or without `0x`): the wasm functions wasmtime
/// compiled. Empty if the host writes none.
fn perf_map(tgid: u32) -> Result<Ranges> {
    let path = format!("/proc/{tgid}/root/tmp/perf-{tgid}.map");
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("reading {path}")),
    };
    let hex = |field: &str| u64::from_str_radix(field.trim_start_matches("0x"), 16).ok();
    Ok(Ranges::new(
        text.lines()
            .filter_map(|line| {
                let mut fields = line.splitn(3, ' ');
                let start = hex(fields.next()?)?;
                let size = hex(fields.next()?)?;
                Some((start, start + size, demangled(fields.next()?)))
            })
            .collect(),
    ))
}

/// `wasm[0]::function[47]::_RNv…9sample_rs14resident_chunk` as
/// `wasm[0]::function[47]::sample_rs::resident_chunk`: wasmtime names a function by its
/// index and its symbol in the module's name section, which for Rust is mangled.
fn demangled(name: &str) -> String {
    let symbol_at = name.rfind("::").map_or(0, |i| i + 2);
    match rustc_demangle::try_demangle(&name[symbol_at..]) {
        Ok(symbol) => format!("{}{symbol:#}", &name[..symbol_at]),
        Err(_) => name.to_owned(),
    }
}

/// The host's mappings by file name, to say at least where an unnamed frame is (a library
/// without its symbol table, such as libc's internal memcpy variants).
fn modules(tgid: u32) -> Ranges {
    use procfs::process::{MMapPath, Process};
    let maps = Process::new(tgid as i32).and_then(|p| p.maps());
    Ranges::new(
        maps.map(|maps| {
            maps.into_iter()
                .map(|map| {
                    let name = match &map.pathname {
                        MMapPath::Path(path) => path
                            .file_name()
                            .map_or_else(|| "file".into(), |n| n.to_string_lossy().into_owned()),
                        MMapPath::Anonymous => "anon".to_owned(),
                        other => format!("{other:?}").to_lowercase(),
                    };
                    (map.address.0, map.address.1, name)
                })
                .collect()
        })
        .unwrap_or_default(),
    )
}

/// A symbol's function name, without the Rust symbol hash.
fn symbol_name(symbol: &Symbolized<'_>) -> Option<String> {
    let Symbolized::Sym(sym) = symbol else {
        return None;
    };
    let name: &str = &sym.name;
    let name = match name.rsplit_once("::h") {
        Some((path, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => {
            path
        }
        _ => name,
    };
    Some(name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wasm_functions_are_named_by_their_demangled_symbol() {
        assert_eq!(
            demangled("wasm[0]::function[47]::_RNvCs141OnHEiogI_9sample_rs14resident_chunk"),
            "wasm[0]::function[47]::sample_rs::resident_chunk"
        );
        assert_eq!(
            demangled("wasm[0]::function[77]::run"),
            "wasm[0]::function[77]::run"
        );
    }

    #[test]
    fn an_address_is_in_the_range_that_starts_at_or_below_it() {
        let ranges = Ranges::new(vec![
            (0x2000, 0x2100, "b".to_owned()),
            (0x1000, 0x1010, "a".to_owned()),
        ]);
        assert_eq!(ranges.find(0x1000), Some("a"));
        assert_eq!(ranges.find(0x100f), Some("a"));
        assert_eq!(ranges.find(0x1010), None);
        assert_eq!(ranges.find(0x20ff), Some("b"));
        assert_eq!(ranges.find(0xfff), None);
    }
}
