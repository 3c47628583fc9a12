//! Names for the addresses of the host's stacks, looked up while it runs: JIT-compiled wasm
//! functions as `skill!function`, from the code image wasmtime published in the host's memory
//! and the component file it was compiled from (`wasm_code`), or else from wasmtime's perf map
//! where the host writes one; native functions with blazesym (the ELF symbols of the
//! executable and its libraries); kernel functions from kallsyms; and where nothing names a
//! function, the file it is in (`[libc.so.6]`, `[anon]`). `--stacks` and the time profile
//! share them.
//!
//! Why the image and the file rather than the perf map: every wasmtime host keeps its
//! compiled images in memory, with an address map from each instruction to its offset in the
//! wasm file, while a perf map exists only where the host was configured to write one (the
//! real engines are not, and an attached host was started without it).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use anyhow::{Context as _, Result};
use blazesym::symbolize::{
    Input, Symbolized, Symbolizer,
    source::{Kernel, Process, Source},
};

use super::wasm_code::{ComponentNames, WasmCode};
use crate::record::time::{Frame, FrameKind};

impl Frame {
    fn named(name: &str, kind: FrameKind) -> Frame {
        Frame {
            // Folded stacks separate frames with `;`.
            name: name.replace(';', ":"),
            kind,
        }
    }

    /// Whether the frame has a function's name, not only a file's.
    pub fn is_named(&self) -> bool {
        self.kind != FrameKind::Unnamed
    }
}

/// Each user-space address's frame in process `tgid`, looked up once: call it while the
/// process still runs (its mappings, memory and perf map are read now). Return addresses
/// (all but a stack's innermost frame) must already be moved back into their call
/// instruction. A wasm frame is named `LABEL!function`, LABEL the skills whose file its
/// image was compiled from (`a|b` for copies of one file, `wasm` where none is known): a
/// stack of a skill's work names its own skill there instead ([`Frame::of_skill`]).
pub fn user_frames(
    tgid: u32,
    ips: impl Iterator<Item = u64>,
    wasm: &mut WasmNames,
) -> Result<BTreeMap<u64, Frame>> {
    let mut addresses: Vec<u64> = ips.collect();
    addresses.sort_unstable();
    addresses.dedup();
    let code = WasmCode::scan(tgid, &addresses).context("finding the host's wasm code")?;
    let jit = perf_map(tgid)?;
    let mut named = BTreeMap::new();
    let mut native = Vec::new();
    for &ip in &addresses {
        match code.locate(ip) {
            Some(frame) => {
                let source = wasm.source(&code, frame.image);
                let function = match (frame.source, &source.names) {
                    (None, _) => "[wasmtime trampoline]".to_owned(),
                    (Some(at), Some(names)) => match names.function_at(at) {
                        Some(function) => function_name(&function),
                        None => format!("wasm+{at:#x}"),
                    },
                    (Some(at), None) => match jit.find(ip) {
                        Some(name) => shorter(without_index(name)),
                        None => format!("wasm+{at:#x}"),
                    },
                };
                named.insert(
                    ip,
                    Frame::named(&format!("{}!{function}", source.label()), FrameKind::Wasm),
                );
            }
            None => native.push(ip),
        }
    }
    // ELF symbols first: their demangled names have the whole path
    // (`cranelift_codegen::machinst::vcode::VCode<I>::emit`), where the DWARF of a build with
    // line tables only names a function without it (`emit<…>`). Debug symbols second, for
    // what the symbol tables lack (libc's internal memcpy variants, in libc6-dbg's files).
    let elf = symbolize(tgid, false, &native)?;
    let missing: Vec<u64> = native
        .iter()
        .zip(&elf)
        .filter(|(_, name)| name.is_none())
        .map(|(&ip, _)| ip)
        .collect();
    let mut debug = symbolize(tgid, true, &missing)?.into_iter();
    let symbols: Vec<Option<String>> = elf
        .into_iter()
        .map(|name| name.or_else(|| debug.next().flatten()))
        .collect();
    let modules = modules(tgid);
    for (&ip, symbol) in native.iter().zip(symbols) {
        let frame = match symbol {
            Some(name) => Frame::named(&shorter(&name), FrameKind::Native),
            None => Frame {
                name: format!("[{}]", modules.find(ip).unwrap_or("unknown")),
                kind: FrameKind::Unnamed,
            },
        };
        named.insert(ip, frame);
    }
    Ok(named)
}

impl Frame {
    /// This frame in a stack of `skill`'s work: a wasm frame names that skill, whose code it
    /// can only be (a skill's wasm runs in that skill's calls alone).
    pub fn of_skill(&self, skill: &str) -> Frame {
        match (self.kind, self.name.split_once('!')) {
            (FrameKind::Wasm, Some((_, function))) => Frame {
                name: format!("{skill}!{function}"),
                kind: FrameKind::Wasm,
            },
            _ => self.clone(),
        }
    }
}

/// A wasm function's name: its symbol in the module's name section, demangled without its
/// hash, or wasmtime's `wasm[M]::function[F]` where it has none.
fn function_name(function: &super::wasm_code::WasmFunction<'_>) -> String {
    match function.symbol {
        Some(symbol) => match rustc_demangle::try_demangle(symbol) {
            Ok(demangled) => shorter(&format!("{demangled:#}")),
            Err(_) => symbol.to_owned(),
        },
        None => format!("wasm[{}]::function[{}]", function.module, function.index),
    }
}

/// A perf map's `wasm[M]::function[F]::name` as `name`, where it has one.
fn without_index(name: &str) -> &str {
    match name.rsplit_once("]::") {
        Some((_, symbol)) if name.starts_with("wasm[") => symbol,
        _ => name,
    }
}

/// A Rust name with the generic arguments inside the outermost ones elided
/// (`<std::thread::spawn_unchecked<…>::{closure#1} as core::ops::FnOnce<…>>::call_once`):
/// the whole of them makes a frame of several hundred characters.
fn shorter(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut depth = 0usize;
    let mut previous = ' ';
    for c in name.chars() {
        // The `>` of a function type's `->` closes nothing.
        let c_closes = c == '>' && previous != '-';
        previous = c;
        match c {
            '<' => {
                depth += 1;
                if depth == 2 {
                    out.push_str("<…");
                }
                if depth <= 1 {
                    out.push(c);
                }
            }
            '>' if c_closes => {
                if depth <= 1 {
                    out.push(c);
                }
                if depth == 2 {
                    out.push('>');
                }
                depth = depth.saturating_sub(1);
            }
            _ if depth <= 1 => out.push(c),
            _ => {}
        }
    }
    out
}

/// Names for the host's compiled wasm: each code image matched, once, to the component file
/// it was compiled from, among the files of the host's skills directory (parsed once each,
/// and once per distinct content).
#[derive(Default)]
pub struct WasmNames {
    dir: Option<PathBuf>,
    /// Each file's length, modification time, content digest and functions.
    files: HashMap<PathBuf, (u64, SystemTime, [u8; 20], Arc<ComponentNames>)>,
    /// Per image start: where it came from.
    images: HashMap<u64, ImageSource>,
}

/// Where an image came from: the skills whose file it was compiled from, and that file's
/// functions; nothing where no file of the skills directory matches it.
#[derive(Clone, Default)]
pub struct ImageSource {
    skills: Vec<String>,
    names: Option<Arc<ComponentNames>>,
}

impl ImageSource {
    fn label(&self) -> String {
        match self.skills.is_empty() {
            true => "wasm".to_owned(),
            false => self.skills.join("|"),
        }
    }
}

/// The least share of an image's source positions a file's functions must hold to be the
/// file it was compiled from (the right file holds all of them; another file a few percent).
const MATCH: f64 = 0.99;

impl WasmNames {
    /// Names from the component files in `dir` (`None`: no file known, wasm frames are named
    /// by their offset, or from the host's perf map).
    pub fn new(dir: Option<&Path>) -> WasmNames {
        WasmNames {
            dir: dir.map(Path::to_path_buf),
            ..WasmNames::default()
        }
    }

    /// Where image `image` of `code` came from, matched on first sight.
    fn source(&mut self, code: &WasmCode, image: u64) -> ImageSource {
        if let Some(found) = self.images.get(&image) {
            return found.clone();
        }
        let files = self.refresh();
        let mut found = ImageSource::default();
        let mut tried: HashMap<[u8; 20], bool> = HashMap::new();
        for (stem, digest, names) in files {
            let matches = *tried
                .entry(digest)
                .or_insert_with(|| names.coverage(code, image) >= MATCH);
            if matches {
                found.skills.push(stem);
                found.names.get_or_insert(names);
            }
        }
        found.skills.sort();
        self.images.insert(image, found.clone());
        found
    }

    /// The directory's `*.wasm` files now, as (skill, digest, functions), parsing those new
    /// or changed since the last look. A file that cannot be read or parsed is left out: its
    /// images are named by offset.
    fn refresh(&mut self) -> Vec<(String, [u8; 20], Arc<ComponentNames>)> {
        let Some(dir) = &self.dir else {
            return Vec::new();
        };
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Vec::new();
        };
        let mut by_digest: HashMap<[u8; 20], Arc<ComponentNames>> = self
            .files
            .values()
            .map(|(_, _, digest, names)| (*digest, names.clone()))
            .collect();
        let mut found = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            let (Some(stem), Some("wasm")) = (
                path.file_stem().and_then(|s| s.to_str()),
                path.extension().and_then(|e| e.to_str()),
            ) else {
                continue;
            };
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            let (len, modified) = (
                meta.len(),
                meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            );
            let kept = self
                .files
                .get(&path)
                .filter(|(l, m, _, _)| (*l, *m) == (len, modified))
                .map(|(_, _, digest, names)| (*digest, names.clone()));
            let parsed = kept.or_else(|| {
                let bytes = std::fs::read(&path).ok()?;
                let digest: [u8; 20] = <sha1::Sha1 as sha1::Digest>::digest(&bytes).into();
                let names = match by_digest.get(&digest) {
                    Some(names) => names.clone(),
                    None => Arc::new(ComponentNames::parse(&bytes).ok()?),
                };
                by_digest.insert(digest, names.clone());
                self.files
                    .insert(path.clone(), (len, modified, digest, names.clone()));
                Some((digest, names))
            });
            if let Some((digest, names)) = parsed {
                found.push((stem.to_owned(), digest, names));
            }
        }
        found
    }
}

/// The function names of `addresses` in process `tgid`, from its ELF symbols or, with
/// `debug_syms`, its debug symbols too.
fn symbolize(tgid: u32, debug_syms: bool, addresses: &[u64]) -> Result<Vec<Option<String>>> {
    if addresses.is_empty() {
        return Ok(Vec::new());
    }
    let mut process = Process::new(tgid.into());
    process.debug_syms = debug_syms;
    // Read by the caller: blazesym's reader refuses the `0x` wasmtime writes before each start.
    process.perf_map = false;
    // A symboliser per call: blazesym's caches are not Sync, and sessions are shared.
    let symbolizer = Symbolizer::new();
    Ok(symbolizer
        .symbolize(&Source::Process(process), Input::AbsAddr(addresses))
        .context("symbolising the host's stacks (is it still running?)")?
        .iter()
        .map(symbol_name)
        .collect())
}

/// Each kernel address's frame, from the running kernel's kallsyms.
pub fn kernel_frames(ips: impl Iterator<Item = u64>) -> Result<BTreeMap<u64, Frame>> {
    let mut addresses: Vec<u64> = ips.collect();
    addresses.sort_unstable();
    addresses.dedup();
    let kernel = Kernel {
        // kallsyms already holds the addresses as this boot placed them; a vmlinux image
        // would need the KASLR offset and is not installed where skillprof runs.
        vmlinux: blazesym::MaybeDefault::None,
        ..Kernel::default()
    };
    let symbolizer = Symbolizer::new();
    let symbols = symbolizer
        .symbolize(&Source::Kernel(kernel), Input::AbsAddr(&addresses))
        .context("symbolising kernel stacks (/proc/kallsyms)")?;
    Ok(addresses
        .iter()
        .zip(&symbols)
        .map(|(&ip, symbol)| {
            let frame = match symbol_name(symbol) {
                Some(name) => Frame::named(&name, FrameKind::Kernel),
                None => Frame {
                    name: "[kernel]".to_owned(),
                    kind: FrameKind::Unnamed,
                },
            };
            (ip, frame)
        })
        .collect())
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
    fn generic_arguments_inside_the_outermost_are_elided() {
        assert_eq!(
            shorter(
                "<std::thread::spawn_unchecked<<skillhost::engine::EpochTicker>::start::{closure#0}, ()>::{closure#1} as core::ops::function::FnOnce<()>>::call_once"
            ),
            "<std::thread::spawn_unchecked<…>::{closure#1} as core::ops::function::FnOnce<…>>::call_once"
        );
        assert_eq!(
            shorter("wasmtime_internal_fiber::unix::fiber_start::<wasmtime::Foo<u8>>"),
            "wasmtime_internal_fiber::unix::fiber_start::<wasmtime::Foo<…>>"
        );
        assert_eq!(shorter("malloc"), "malloc");
    }

    #[test]
    fn a_wasm_frame_in_a_skills_stack_names_that_skill() {
        let frame = Frame {
            name: "sample_rs1|sample_rs2!sample_rs::burn".to_owned(),
            kind: FrameKind::Wasm,
        };
        assert_eq!(
            frame.of_skill("sample_rs2").name,
            "sample_rs2!sample_rs::burn"
        );
        let native = Frame {
            name: "a!b".to_owned(),
            kind: FrameKind::Native,
        };
        assert_eq!(native.of_skill("x").name, "a!b");
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

    /// kallsyms names this kernel's own functions (skillprof runs as root, so its addresses
    /// are not hidden).
    #[test]
    fn kernel_addresses_are_named_from_kallsyms() {
        let kallsyms = std::fs::read_to_string("/proc/kallsyms").unwrap();
        let address = kallsyms
            .lines()
            .find_map(|line| {
                let mut fields = line.split(' ');
                let address = u64::from_str_radix(fields.next()?, 16).ok()?;
                (fields.nth(1)? == "schedule" && address != 0).then_some(address)
            })
            .expect("schedule in /proc/kallsyms, with its address (run as root)");
        let frames = kernel_frames([address + 1].into_iter()).unwrap();
        assert_eq!(frames[&(address + 1)].name, "schedule");
        assert_eq!(frames[&(address + 1)].kind, FrameKind::Kernel);
    }
}
