//! A run folder, as `report`, `explain`, `compare` and `capacity` read one: the input is the
//! folder's files one after another, each after a line `--- NAME`, written into a scratch
//! folder (in /dev/shm: memory, not disk) and read by the readers the subcommands use.
#![no_main]

use std::fs;

use libfuzzer_sys::fuzz_target;
use skillprof::output::commands_csv;
use skillprof::output::harness_log::RunLog;
use skillprof::report::read::Run;

/// The files a run folder's readers open.
const FILES: [&str; 5] = [
    "meta.json",
    "entries.jsonl",
    "samples.csv",
    "commands.csv",
    "260101_000000.000_run.log",
];

fuzz_target!(|text: &str| {
    let folder = tempfile::tempdir_in("/dev/shm").expect("a scratch folder in /dev/shm");
    let mut name = None;
    let mut body = String::new();
    let mut flush = |name: Option<&str>, body: &mut String| {
        if let Some(name) = name.filter(|name| FILES.contains(name)) {
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
    let _ = RunLog::read(&folder.path().join(FILES[4]));
});
