//! What each fuzz target asserts of one input, in one place: libFuzzer calls these from
//! fuzz_targets/ (scripts/fuzz.sh, the benchmark), and the workspace's test
//! `profiler/tests/fuzz_inputs.rs` replays every seed and every input that once crashed a
//! target through the same functions on every `cargo test`.

use std::fs;

use skillprof::commands::report::read::Run;
use skillprof::ground::cmds::{self, Command, InFlightCap, Plan};
use skillprof::record::profile::HostProfile;
use skillprof::views::output::commands_csv;
use skillprof::views::output::harness_log::RunLog;

/// The cmds language: any text is a plan or a list of the bad lines, never a panic; and a
/// plan's entries, written back as the harness logs them, parse to the same plan. The text is
/// read as a file in the repository's cmds/ folder, so its `add FILE` and `@FILE` lines reach
/// the components and inputs there.
pub fn cmds(text: &str) {
    // The fuzz crate and the test that replays its seeds sit at different depths.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|folder| folder.join("cmds"))
        .find(|cmds| cmds.join("README.md").is_file())
        .expect("the repository's cmds/ folder");
    fn commands(plan: &Plan) -> Vec<(u32, Command)> {
        plan.entries
            .iter()
            .map(|entry| (entry.repeat, entry.command.clone()))
            .collect()
    }
    // The cap changes which lines are valid: the default and a tight one.
    for cap in [InFlightCap::DEFAULT, InFlightCap::new(2)] {
        let Ok(plan) = cmds::parse_in("fuzz.cmds", &dir, text, cap) else {
            continue;
        };
        let logged: String = plan
            .entries
            .iter()
            .filter(|entry| entry.line.is_some())
            .map(|entry| format!("{}\n", entry.name))
            .collect();
        let again = cmds::parse_in("logged.cmds", &dir, &logged, cap)
            .unwrap_or_else(|error| panic!("a plan's own lines do not parse: {error}\n{logged}"));
        assert_eq!(commands(&again), commands(&plan), "{logged}");
    }
}

/// Host profiles (TOML): any text is a profile or an error naming what is wrong.
pub fn host_profile(text: &str) {
    let _ = HostProfile::parse(text);
}

/// The 2024 harness's run logs, which `compare` reads from other people's machines.
pub fn harness_log(text: &str) {
    let _ = RunLog::parse("fuzz_run.log", text);
}

/// The files a run folder's readers open.
const RUN_FILES: [&str; 5] = [
    "meta.json",
    "entries.jsonl",
    "samples.csv",
    "commands.csv",
    "260101_000000.000_run.log",
];

/// A run folder, as `report`, `explain`, `compare` and `capacity` read one: the input is the
/// folder's files one after another, each after a line `--- NAME`, written into a scratch
/// folder (in /dev/shm: memory, not disk) and read by the readers the subcommands use.
pub fn run_folder(text: &str) {
    let folder = tempfile::tempdir_in("/dev/shm").expect("a scratch folder in /dev/shm");
    let mut name = None;
    let mut body = String::new();
    let flush = |name: Option<&str>, body: &mut String| {
        if let Some(name) = name.filter(|name| RUN_FILES.contains(name)) {
            fs::write(folder.path().join(name), body.as_bytes()).unwrap();
        }
        body.clear();
    };
    for line in text.split_inclusive('\n') {
        match line.strip_prefix("--- ") {
            Some(next) => {
                flush(name, &mut body);
                name = Some(next.trim_end());
            }
            None => body.push_str(line),
        }
    }
    flush(name, &mut body);
    let _ = Run::load(folder.path());
    let _ = commands_csv::read(&folder.path().join("commands.csv"));
    let _ = RunLog::read(&folder.path().join(RUN_FILES[4]));
}
