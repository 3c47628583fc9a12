//! What the integration tests share: the root check, driving the built skillprof binary and
//! reading its runs, and the deterministic workload the probe tests drive.

#![allow(dead_code)] // each test file uses its own subset

pub mod cli;
pub mod exercise;
pub mod generator;
pub mod outside_host;
pub mod prometheus;
pub mod tls;
pub mod tools_python;

/// One test of a binary at a time on the machine, for tests that change what every process
/// lives under (a sysctl, a balloon), measure memory or CPU a neighbour would share, or count
/// the kernel's programs. A test that failed holding it does not fail the ones that wait.
/// How long the test waited for it goes to the suite's table, which takes it out of
/// libtest's time for the test.
pub fn machine() -> std::sync::MutexGuard<'static, ()> {
    static MACHINE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let asked = std::time::Instant::now();
    let held = MACHINE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    note_for_the_suite(
        "waits.tsv",
        &format!("{:.3}", asked.elapsed().as_secs_f64()),
    );
    held
}

/// Counts a retry of the running test, with `why`, in the suite's table. Outside
/// scripts/test.sh, only the test's own output says it.
pub fn count_retry(why: &str) {
    note_for_the_suite("retries.tsv", why);
}

/// Adds a line to `file` in the folder scripts/test.sh names in SKILLPROF_SUITE_DIR, for
/// scripts/suite_report.py: the test binary, the running test and `text`. Nothing outside
/// the suite.
fn note_for_the_suite(file: &str, text: &str) {
    use std::io::Write;
    let Some(dir) = std::env::var_os("SKILLPROF_SUITE_DIR") else {
        return;
    };
    let path = std::path::Path::new(&dir).join(file);
    let executable = std::env::current_exe().unwrap();
    let stem = executable.file_stem().unwrap().to_string_lossy();
    // target/release/deps/slo-0123456789abcdef: the binary is `slo`.
    let binary = stem.rsplit_once('-').map_or(&*stem, |(binary, _)| binary);
    // libtest runs each test on a thread named after it.
    let test = std::thread::current().name().unwrap_or("?").to_owned();
    let line = format!("{binary}\t{test}\t{}\n", text.replace(['\t', '\n'], " "));
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut file| file.write_all(line.as_bytes()))
        .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
}

/// `command` run under RLIMIT_AS of `limit` bytes (`ulimit -v`, as some container runtimes
/// set it), which what it starts inherits.
pub fn under_address_limit(command: &mut std::process::Command, limit: u64) {
    use std::os::unix::process::CommandExt;
    let rlimit = rustix::process::Rlimit {
        current: Some(limit),
        maximum: Some(limit),
    };
    // SAFETY: setrlimit is a plain syscall, safe between fork and exec.
    unsafe {
        command.pre_exec(move || {
            rustix::process::setrlimit(rustix::process::Resource::As, rlimit)
                .map_err(std::io::Error::from)
        });
    }
}

/// Stops a test that needs root, loudly: CI runs the suite as root, and a skipped test would
/// pass while proving nothing. `needs` says what the test does that needs it.
pub fn require_root(needs: &str) {
    assert!(
        skillprof::producers::system::running_as_root(),
        "{needs}, which needs root: run the tests as root (sudo scripts/test.sh)"
    );
}

/// The built sample component `name` (`hello`, `sample_rs`, `trap`, ...) of skillprof's own
/// world, for a test to copy into a host's skills directory.
pub fn sample_component(name: &str) -> std::path::PathBuf {
    skillprof::producers::hostctl::SampleSkills::beside_executable(
        skillprof::record::profile::SkillWorld::Skillprof,
    )
    .unwrap()
    .path(name)
    .unwrap()
}

/// A copy of the built skillhost without its symbol table, in `dir`: a host whose functions
/// no uprobe can find by name.
pub fn stripped_skillhost(dir: &std::path::Path) -> std::path::PathBuf {
    let built = std::path::Path::new(env!("CARGO_BIN_EXE_skillprof")).with_file_name("skillhost");
    let stripped = dir.join("stripped-skillhost");
    let strip = std::process::Command::new("strip")
        .arg("-o")
        .arg(&stripped)
        .arg(&built)
        .output()
        .expect("running strip (binutils)");
    assert!(strip.status.success(), "strip: {strip:?}");
    stripped
}

/// The ids of the BPF programs loaded in the kernel now.
pub fn loaded_ids() -> std::collections::BTreeSet<u32> {
    aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .map(|program| program.id())
        .collect()
}

/// The programs of the probes that run for every process (every syscall or page fault on
/// the machine), as the kernel names them (15 bytes).
pub fn taxing_programs() -> std::collections::BTreeSet<String> {
    programs_of(|probe| probe.taxes_every_process())
}

/// The programs of the probes `which` picks, as the kernel names them (15 bytes).
pub fn programs_of(
    which: impl Fn(skillprof::record::probes::Probe) -> bool,
) -> std::collections::BTreeSet<String> {
    skillprof::producers::probes::PROBES
        .iter()
        .filter(|plan| which(plan.probe))
        .flat_map(|plan| plan.plan.iter())
        .flat_map(|how| how.hooks.iter())
        .map(|hook| hook.program().chars().take(15).collect())
        .collect()
}

/// Names of the programs loaded in the kernel now that were not loaded before (by id).
pub fn loaded_since(
    before: &std::collections::BTreeSet<u32>,
) -> std::collections::BTreeSet<String> {
    aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .filter(|program| !before.contains(&program.id()))
        .filter_map(|program| program.name_as_str().map(str::to_owned))
        .collect()
}

/// Every function `go tool pprof -top` lists for `file`, none dropped, named as it names them.
pub fn pprof_top_names(file: &std::path::Path) -> Vec<String> {
    let top = std::process::Command::new("go")
        .args([
            "tool",
            "pprof",
            "-top",
            "-nodecount=1000000",
            "-nodefraction=0",
        ])
        .arg(file)
        .output()
        .expect("go (Debian's golang-go: scripts/test.sh installs it) runs `go tool pprof`");
    let listed = String::from_utf8_lossy(&top.stdout);
    assert!(
        top.status.success(),
        "go tool pprof -top {}: {}",
        file.display(),
        String::from_utf8_lossy(&top.stderr)
    );
    // After the header `flat  flat%   sum%  cum   cum%`, five figures and the name, which
    // may hold spaces (`<A as B>::f`).
    listed
        .lines()
        .skip_while(|line| !line.trim_start().starts_with("flat "))
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields.len() > 5).then(|| fields[5..].join(" "))
        })
        .collect()
}

/// `go tool pprof -top ARGS FILE`'s listing, as a user reads a pprof file; panics with what
/// it said unless it read the file and lists `function`.
pub fn pprof_top_lists(file: &std::path::Path, args: &[&str], function: &str) {
    let top = std::process::Command::new("go")
        .args(["tool", "pprof", "-top"])
        .args(args)
        .arg(file)
        .output()
        .expect("go (Debian's golang-go: scripts/test.sh installs it) runs `go tool pprof`");
    let listed = String::from_utf8_lossy(&top.stdout);
    assert!(
        top.status.success() && listed.contains(function),
        "go tool pprof -top {} {}: no {function}:\n{listed}\n{}",
        args.join(" "),
        file.display(),
        String::from_utf8_lossy(&top.stderr)
    );
}
