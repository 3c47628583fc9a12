//! Naming JIT-compiled wasm frames without the host's help (`probes::wasm_code`), checked
//! against wasmtime's own perf map: skillhost writes one (`SKILLHOST_PERFMAP`), and every
//! wasm function in it must get the same module, index and name from the code image in the
//! host's memory and the component file alone, at its first byte, its middle and its last;
//! every trampoline must be no wasm function's. Both ways wasmtime holds code are read:
//! compiled in memory (anonymous mappings), and loaded from a precompiled file (`--cache-dir`:
//! file mappings). Root only (the host's memory is read through /proc/PID/mem): without it
//! these fail loudly, never skip.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use procfs::process::{MMapPath, Process};
use serde_json::json;
use skillprof::producers::hostctl::Client;
use skillprof::producers::probes::wasm_code::{ComponentNames, WasmCode, WasmFunction};
use skillprof::record::profile::HostProfile;

mod common;
use common::{require_root, sample_component};

/// What these tests do that needs root.
const ROOT: &str = "naming wasm frames reads the host's memory through /proc/PID/mem";

/// The sample components the host compiles: a Rust one, and a Python one (CPython and its
/// libraries: several core modules in one component).
const SAMPLES: [&str; 2] = ["sample_rs", "sample_py"];

#[test]
fn the_perf_maps_wasm_functions_are_named_from_code_compiled_in_memory() {
    require_root(ROOT);
    names_match_the_perf_map(&[], false);
}

#[test]
fn the_perf_maps_wasm_functions_are_named_from_code_loaded_from_a_file() {
    require_root(ROOT);
    let cache = tempfile::tempdir().unwrap();
    names_match_the_perf_map(&["--cache-dir", cache.path().to_str().unwrap()], true);
}

/// A skillhost writing its perf map, stopped (and its map removed) when dropped.
struct Host {
    child: Child,
    port: u16,
}

impl Host {
    fn start(skills: &Path, args: &[&str]) -> Host {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let bin = Path::new(env!("CARGO_BIN_EXE_skillprof")).with_file_name("skillhost");
        let child = Command::new(bin)
            .args(["--skills-dir", skills.to_str().unwrap()])
            .args(["--port", &port.to_string(), "--scan-interval-ms", "50"])
            .args(args)
            .env("SKILLHOST_PERFMAP", "true")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let host = Host { child, port };
        let started = Instant::now();
        while !runtime().block_on(host.client().healthy()) {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "skillhost did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        host
    }

    fn client(&self) -> Client {
        Client::new(
            &format!("http://127.0.0.1:{}", self.port),
            HostProfile::skillhost().dialect,
        )
    }

    fn perf_map(&self) -> PathBuf {
        PathBuf::from(format!("/tmp/perf-{}.map", self.child.id()))
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = fs::remove_file(self.perf_map());
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A perf map line's name, `wasm[M]::function[F]` with `::symbol` or not, taken apart.
fn wasm_function(name: &str) -> Option<(u32, u32, Option<&str>)> {
    let rest = name.strip_prefix("wasm[")?;
    let (module, rest) = rest.split_once("]::function[")?;
    let (index, rest) = rest.split_once(']')?;
    let symbol = match rest {
        "" => None,
        rest => Some(rest.strip_prefix("::")?),
    };
    Some((module.parse().ok()?, index.parse().ok()?, symbol))
}

/// What wasmtime 50 writes of a name-section name in a symbol (`clean_symbol` in
/// crates/wasmtime/src/compile.rs): runs of characters other than graphic ASCII as one `?`,
/// and at most 96 characters.
fn cleaned(symbol: &str) -> String {
    const MAX: usize = 96;
    if symbol.chars().all(|c| c.is_ascii_graphic()) {
        return symbol[..symbol.len().min(MAX)].to_owned();
    }
    let mut cleaned = String::new();
    for c in symbol
        .chars()
        .map(|c| if c.is_ascii_graphic() { c } else { '?' })
    {
        if !(c == '?' && cleaned.ends_with('?')) {
            cleaned.push(c);
        }
    }
    cleaned.chars().take(MAX).collect()
}

/// `wasm[M]::function[F]` and the symbol demangled as `--stacks` demangles the perf map's
/// names: a Rust symbol without its hash, anything else as it is.
fn perf_name(module: u32, index: u32, symbol: Option<&str>) -> String {
    let mut name = format!("wasm[{module}]::function[{index}]");
    if let Some(symbol) = symbol {
        match rustc_demangle::try_demangle(symbol) {
            Ok(symbol) => name.push_str(&format!("::{symbol:#}")),
            Err(_) => name.push_str(&format!("::{symbol}")),
        }
    }
    name
}

/// How one component's functions fared against the perf map.
#[derive(Debug, Default)]
struct Tally {
    /// The perf map's `wasm[M]::function[F]` functions in this component's image.
    functions: usize,
    /// ... named as the perf map names them (module, index, and the name wasmtime makes of
    /// the symbol) at their first byte, middle and last byte.
    same: usize,
    /// ... whose name as we give it is the perf map's exactly (a symbol wasmtime neither cut
    /// at 96 characters nor cleaned).
    identical: usize,
    /// The core modules these functions are in.
    modules: BTreeSet<u32>,
    /// The image's trampolines (`wasm[M]::*_trampoline[F]`), and how many of them are
    /// named no wasm function at their middle.
    trampolines: usize,
    trampolines_unnamed: usize,
    mismatches: Vec<String>,
}

/// Starts skillhost with `args` on both samples, runs each once (compiling it), and checks
/// every wasm function of its perf map against what the images and the files say.
fn names_match_the_perf_map(args: &[&str], from_files: bool) {
    let dir = tempfile::tempdir().unwrap();
    let skills = dir.path().join("skills");
    fs::create_dir(&skills).unwrap();
    let mut files = BTreeMap::new();
    for sample in SAMPLES {
        let path = sample_component(sample);
        fs::copy(&path, skills.join(format!("{sample}.wasm"))).unwrap();
        files.insert(
            sample,
            ComponentNames::parse(&fs::read(&path).unwrap()).unwrap(),
        );
    }

    let host = Host::start(&skills, args);
    let rt = runtime();
    let client = host.client();
    rt.block_on(client.wait_until_listed(&SAMPLES.map(String::from), Duration::from_secs(30)))
        .unwrap();
    for sample in SAMPLES {
        let input = json!({"topic": "wasm code", "memory": 0, "wait_time": 0});
        let reply = rt.block_on(client.execute(sample, &input)).unwrap();
        assert!(reply.is_ok(), "{sample}: {}", reply.status);
    }

    // wasmtime registers a component's whole image once per core module: each function
    // once under its symbol (`wasm[M]::function[F]::…`) for every module but its own, which
    // names it by the demangled name alone. The `wasm[` line is the one to check.
    let text = fs::read_to_string(host.perf_map()).unwrap();
    let mut lines: BTreeMap<u64, (u64, &str)> = BTreeMap::new();
    for line in text.lines() {
        let mut fields = line.splitn(3, ' ');
        let (Some(start), Some(size), Some(name)) = (fields.next(), fields.next(), fields.next())
        else {
            panic!("perf map line {line:?}");
        };
        let hex = |field: &str| u64::from_str_radix(field.trim_start_matches("0x"), 16).unwrap();
        if name.starts_with("wasm[") {
            lines.insert(hex(start), (hex(size), name));
        }
    }
    let ips: Vec<u64> = lines
        .iter()
        .flat_map(|(start, (size, _))| [*start, start + size / 2, start + size - 1])
        .collect();
    let code = WasmCode::scan(host.child.id(), &ips).unwrap();

    // Each image is matched to its file by coverage, and the other file refused.
    let maps = Process::new(host.child.id() as i32)
        .unwrap()
        .maps()
        .unwrap();
    let mut image_files: BTreeMap<u64, &str> = BTreeMap::new();
    for (&ip, frame) in ips.iter().filter_map(|ip| Some(ip).zip(code.locate(*ip))) {
        image_files.entry(frame.image).or_insert_with(|| {
            let coverage: BTreeMap<&str, f64> = files
                .iter()
                .map(|(sample, names)| (*sample, names.coverage(&code, frame.image)))
                .collect();
            let (&sample, &best) = coverage.iter().max_by(|a, b| a.1.total_cmp(b.1)).unwrap();
            let text = maps
                .iter()
                .find(|map| (map.address.0..map.address.1).contains(&ip))
                .unwrap();
            eprintln!(
                "image at {:#x}, text in {:?}: the share of its source positions in each \
                 file's function bodies: {coverage:?}",
                frame.image, text.pathname
            );
            assert!(best >= 0.99, "image {:#x}: {coverage:?}", frame.image);
            for (other, share) in &coverage {
                assert!(
                    *other == sample || *share < 0.5,
                    "image {:#x}: {coverage:?}",
                    frame.image
                );
            }
            match &text.pathname {
                MMapPath::Path(path) => assert!(
                    from_files && path.extension().is_some_and(|e| e == "cwasm"),
                    "{path:?}"
                ),
                other => assert!(!from_files && *other == MMapPath::Anonymous, "{other:?}"),
            }
            sample
        });
    }
    let matched: BTreeSet<&str> = image_files.values().copied().collect();
    assert_eq!(matched, BTreeSet::from(SAMPLES), "an image per component");
    assert_eq!(image_files.len(), SAMPLES.len(), "an image per component");

    let mut tallies: BTreeMap<&str, Tally> = BTreeMap::new();
    for (&start, &(size, name)) in &lines {
        let at = [start, start + size / 2, start + size - 1];
        let frames: Vec<_> = at.iter().map(|&ip| code.locate(ip)).collect();
        let Some(image) = frames[1].map(|frame| frame.image) else {
            panic!("{name} at {start:#x} is in no image");
        };
        let sample = image_files[&image];
        let tally = tallies.entry(sample).or_default();
        let Some((module, index, symbol)) = wasm_function(name) else {
            assert!(name.contains("_trampoline["), "{name}");
            tally.trampolines += 1;
            tally.trampolines_unnamed += usize::from(frames[1].unwrap().source.is_none());
            continue;
        };
        tally.functions += 1;
        tally.modules.insert(module);
        let expected = perf_name(module, index, symbol);
        let found: Vec<_> = frames
            .iter()
            .map(|frame| {
                let source = frame.filter(|frame| frame.image == image)?.source?;
                files[sample].function_at(source)
            })
            .collect();
        let named = |function: &WasmFunction<'_>| {
            let symbol = function.symbol.map(cleaned);
            perf_name(function.module, function.index, symbol.as_deref())
        };
        if found
            .iter()
            .all(|f| f.as_ref().map(named).as_ref() == Some(&expected))
        {
            tally.same += 1;
            let ours = found[1].unwrap().to_string();
            tally.identical += usize::from(ours == expected);
        } else {
            tally.mismatches.push(format!(
                "{name} at {start:#x}+{size:#x}: {:?}",
                found
                    .iter()
                    .map(|f| f.map(|f| f.to_string()))
                    .collect::<Vec<_>>()
            ));
        }
    }
    for sample in SAMPLES {
        let tally = &tallies[sample];
        let share = tally.same as f64 / tally.functions as f64;
        eprintln!(
            "{sample}: {} of {} wasm functions (in modules {:?}) named as the perf map names \
             them ({:.2}%), {} of them identically (the rest cut or cleaned by wasmtime); {} of \
             {} trampolines named no function",
            tally.same,
            tally.functions,
            tally.modules,
            100.0 * share,
            tally.identical,
            tally.trampolines_unnamed,
            tally.trampolines
        );
        for mismatch in tally.mismatches.iter().take(10) {
            eprintln!("  {mismatch}");
        }
        assert!(
            tally.functions > 0,
            "{sample}: no wasm functions in the perf map"
        );
        assert!(share >= 0.99, "{sample}: {tally:?}");
        assert_eq!(tally.trampolines_unnamed, tally.trampolines, "{sample}");
    }
}
