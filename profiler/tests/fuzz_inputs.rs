//! Every fuzz target's seeds (the repository's own files of each kind, as scripts/fuzz.sh
//! seeds its corpus) and every input that once crashed a target (profiler/fuzz/regressions/)
//! through what the target asserts, on the stable toolchain: the fuzzing itself, minutes per
//! target under libFuzzer, is the benchmark `scripts/fuzz.sh`.

use std::fs;
use std::path::{Path, PathBuf};

#[path = "../fuzz/src/lib.rs"]
mod checks;

fn files(dir: &Path, extension: Option<&str>) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|error| panic!("{}: {error}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_file())
        .filter(|path| extension.is_none_or(|ext| path.to_string_lossy().ends_with(ext)))
        .collect();
    files.sort();
    files
}

fn text(path: &Path) -> String {
    String::from_utf8_lossy(&fs::read(path).unwrap()).into_owned()
}

/// Each input through `check`, and the inputs that once crashed `target` after them.
fn replay(target: &str, seeds: Vec<String>, check: fn(&str)) {
    let regressions = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/regressions")
        .join(target);
    let mut inputs = seeds;
    if regressions.is_dir() {
        inputs.extend(files(&regressions, None).iter().map(|path| text(path)));
    }
    assert!(!inputs.is_empty(), "no inputs for {target}");
    for input in &inputs {
        check(input);
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

#[test]
fn every_cmds_file_round_trips_through_its_logged_lines() {
    let seeds = files(&root().join("cmds"), Some(".cmds"))
        .iter()
        .map(|p| text(p))
        .collect();
    replay("cmds", seeds, checks::cmds);
}

#[test]
fn every_host_profile_parses_or_names_its_error() {
    let dir = root().join("profiler/profiles");
    replay(
        "host_profile",
        files(&dir, Some(".toml")).iter().map(|p| text(p)).collect(),
        checks::host_profile,
    );
}

#[test]
fn every_harness_log_fixture_parses_or_names_its_error() {
    let fixtures = root().join("profiler/tests/fixtures");
    let mut logs = files(&fixtures.join("pharia-logs"), Some("_run.log"));
    logs.extend(files(&fixtures.join("rerender/run"), Some("_run.log")));
    replay(
        "harness_log",
        logs.iter().map(|p| text(p)).collect(),
        checks::harness_log,
    );
}

#[test]
fn the_rerender_run_folder_and_each_crash_input_read_without_a_panic() {
    let run = root().join("profiler/tests/fixtures/rerender/run");
    let mut folder = String::new();
    for name in ["meta.json", "entries.jsonl", "samples.csv", "commands.csv"] {
        folder += &format!("--- {name}\n{}", text(&run.join(name)));
    }
    for log in files(&run, Some("_run.log")) {
        folder += &format!("--- 260101_000000.000_run.log\n{}", text(&log));
    }
    replay("run_folder", vec![folder], checks::run_folder);
}
