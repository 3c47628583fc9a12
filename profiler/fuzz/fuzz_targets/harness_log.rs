//! The 2024 harness's run logs, which `compare` reads from other people's machines.
#![no_main]

use libfuzzer_sys::fuzz_target;
use skillprof::output::harness_log::RunLog;

fuzz_target!(|text: &str| {
    let _ = RunLog::parse("fuzz_run.log", text);
});
