//! skillprof's CPU profile against an independent one: `perf record -g` (Debian's
//! linux-perf, the cpu-clock: this VM has no hardware counters) records the whole machine
//! while `skillprof run` profiles the same run, the host writing wasmtime's perf map
//! (`SKILLHOST_PERFMAP`) so that perf names the wasm functions too. Both at the same rate.
//! Per function (the innermost frame of each of the host's samples, self time), the share of
//! the host's samples in each: skillprof's ten largest beside perf's share of the same
//! function, then perf's ten largest beside skillprof's, and the largest gap among them in
//! points. The names are compared after what differs only in spelling between the two
//! demanglers is taken out (generic parameters, a legacy symbol's hash, a v0 symbol's crate
//! disambiguator, `{closure#0}` against `{{closure}}`, wasmtime's `wasm[M]::function[F]::`
//! against skillprof's `skill!`, glibc's memcpy against the memmove it is an alias of).
//! Figures only, no pass/fail.
//!
//!     cargo bench -p skillprof --bench time_reference [-- --cmds FILE --hz N]
//!
//! FILE is relative to the repository root (default cmds/time_reference.cmds, about 15 s).
//! Needs root (the probes, perf -a) and perf (`apt-get install linux-perf`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};
use skillprof::record::time::TimeState;
use skillprof::views::output::entries_jsonl;

mod common;

/// skillprof's CPU profile of one run against perf's.
#[derive(clap::Parser)]
struct Flags {
    /// The workload, from the repository's root.
    #[arg(long, default_value = "cmds/time_reference.cmds")]
    cmds: PathBuf,
    /// Samples per second, each CPU, for both profilers.
    #[arg(long, default_value_t = 499)]
    hz: u64,
}

/// Share of the host's samples (0..1) by function.
type Shares = BTreeMap<String, f64>;

fn main() -> Result<()> {
    let flags: Flags = common::flags();
    ensure!(
        rustix::process::geteuid().is_root(),
        "the time reference loads BPF probes and runs perf -a: run it as root"
    );
    let perf_ok = Command::new("perf").arg("--version").output();
    ensure!(
        perf_ok.is_ok_and(|o| o.status.success()),
        "perf is missing: apt-get install linux-perf"
    );
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()?;
    let cmds = repo.join(&flags.cmds);
    let skillprof = common::skillprof_binary()?;
    let out = tempfile::tempdir()?;
    let (folder, data) = (out.path().join("run"), out.path().join("perf.data"));
    let hz = flags.hz.to_string();
    eprintln!(
        "perf record -a -g -F {hz} -- skillprof run {} --profile-hz {hz}",
        cmds.display()
    );
    let status = Command::new("perf")
        .args(["record", "-a", "-g", "-F", &hz, "-o"])
        .arg(&data)
        .arg("--")
        .arg(&skillprof)
        .arg("run")
        .arg(&cmds)
        .arg("--run-dir")
        .arg(&folder)
        .args(["--profile-hz", &hz])
        .env("SKILLHOST_PERFMAP", "true")
        .status()
        .context("running perf record")?;
    ensure!(status.success(), "perf record -- skillprof run: {status}");
    let meta = skillprof::views::output::meta::read(&folder)?;
    let pid = meta.host.pid.context("meta.json names no host pid")?;
    let ours = skillprof_shares(&folder)?;
    let theirs = perf_shares(&data, pid)?;
    let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));

    println!(
        "\nthe host's CPU by function (self time), {} at {hz} Hz, this {}-CPU machine:",
        flags.cmds.display(),
        std::thread::available_parallelism().map_or(0, usize::from)
    );
    // The gap among the functions both name; the stacks skillprof lost are said apart.
    let mut gap: f64 = 0.0;
    for (title, first, second, names) in [
        (
            "skillprof's ten largest",
            &ours,
            &theirs,
            ("skillprof", "perf"),
        ),
        ("perf's ten largest", &theirs, &ours, ("perf", "skillprof")),
    ] {
        println!("\n{title}:\n{:>10} {:>10}  function", names.0, names.1);
        for (name, share) in largest(first, 10) {
            let other = second.get(&name).copied().unwrap_or(0.0);
            if name != UNNAMED && name != NO_STACK {
                gap = gap.max((share - other).abs());
            }
            println!("{:>9.1}% {:>9.1}%  {name}", 100.0 * share, 100.0 * other);
        }
    }
    println!(
        "\nlargest gap among the named functions: {:.1} points; unnamed: skillprof {:.1}%, perf \
         {:.1}%; skillprof's samples without their stack: {:.1}%",
        100.0 * gap,
        100.0 * ours.get(UNNAMED).copied().unwrap_or(0.0),
        100.0 * theirs.get(UNNAMED).copied().unwrap_or(0.0),
        100.0 * ours.get(NO_STACK).copied().unwrap_or(0.0),
    );
    Ok(())
}

const UNNAMED: &str = "[unknown]";
/// skillprof's samples counted without their stack (another stack held its place in the
/// stack map).
const NO_STACK: &str = "[no stack]";

fn largest(shares: &Shares, n: usize) -> Vec<(String, f64)> {
    let mut sorted: Vec<(String, f64)> = shares.iter().map(|(k, v)| (k.clone(), *v)).collect();
    sorted.sort_by(|a, b| b.1.total_cmp(&a.1));
    sorted.truncate(n);
    sorted
}

/// The innermost frame of every on-CPU stack in the run's profiles, by samples.
fn skillprof_shares(folder: &Path) -> Result<Shares> {
    let mut samples: BTreeMap<String, u64> = BTreeMap::new();
    let records = entries_jsonl::read(&folder.join(entries_jsonl::FILE))?;
    for record in &records {
        let Some(profile) = skillprof::views::output::profile::read(folder, record.measure.index)?
        else {
            continue;
        };
        for stack in profile.in_state(TimeState::OnCpu) {
            let name = match stack.frames.last() {
                Some(&frame) => normal(&profile.frames[frame as usize].name),
                None => NO_STACK.to_owned(),
            };
            *samples.entry(name).or_default() += stack.count;
        }
    }
    Ok(shares(samples))
}

/// perf's self time of the host's samples by symbol.
fn perf_shares(data: &Path, pid: u32) -> Result<Shares> {
    let output = Command::new("perf")
        .arg("script")
        .arg("-i")
        .arg(data)
        .args(["--pid", &pid.to_string(), "-F", "ip,sym", "-G"])
        .output()
        .context("running perf script")?;
    if !output.status.success() {
        bail!("perf script: {}", String::from_utf8_lossy(&output.stderr));
    }
    // With -G (no call graphs) each sample is one line: `ADDRESS SYMBOL`.
    let mut samples: BTreeMap<String, u64> = BTreeMap::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let symbol = line.split_once(' ').map_or("", |(_, symbol)| symbol.trim());
        *samples.entry(normal(symbol)).or_default() += 1;
    }
    Ok(shares(samples))
}

fn shares(samples: BTreeMap<String, u64>) -> Shares {
    let total = samples.values().sum::<u64>().max(1) as f64;
    samples
        .into_iter()
        .map(|(name, count)| (name, count as f64 / total))
        .collect()
}

/// A function's name with what only the demanglers spell differently taken out, and its
/// last two path segments kept (a method and its type, a function and its module).
fn normal(name: &str) -> String {
    let name = name.rsplit_once('!').map_or(name, |(_, function)| function);
    if name.is_empty() || name == UNNAMED || name.starts_with("0x") || name.starts_with('[') {
        return UNNAMED.to_owned();
    }
    // wasmtime's perf map: `wasm[M]::function[F]::symbol`, or no symbol.
    let name = match name.strip_prefix("wasm[") {
        Some(_) => match name.splitn(3, "::").nth(2) {
            Some(symbol) => symbol,
            None => return UNNAMED.to_owned(),
        },
        None => name,
    };
    // glibc's memcpy is an alias of its memmove (one address), which each names its way.
    let name = name.replace("__memcpy_", "__memmove_");
    let mut plain = String::new();
    let (mut generics, mut disambiguator) = (0, false);
    for c in name.replace("{{closure}}", "{closure#0}").chars() {
        match c {
            '<' => generics += 1,
            '>' if generics > 0 => generics -= 1,
            // A v0 symbol's crate disambiguator, `sample_rs[a807a1349b7ec77f]`.
            '[' => disambiguator = true,
            ']' if disambiguator => disambiguator = false,
            _ if generics == 0 && !disambiguator => plain.push(c),
            _ => {}
        }
    }
    let plain = plain.split(" (").next().unwrap_or_default();
    let segments: Vec<&str> = plain
        .split("::")
        .filter(|s| !s.is_empty() && !is_hash(s))
        .collect();
    segments[segments.len().saturating_sub(2)..].join("::")
}

/// A legacy Rust symbol's hash segment: `h` and 16 hex digits.
fn is_hash(segment: &str) -> bool {
    segment.len() == 17
        && segment.starts_with('h')
        && segment[1..].chars().all(|c| c.is_ascii_hexdigit())
}
