//! libFuzzer's entry to [`skillprof_fuzz::run_folder`]: what it asserts of an input is written there.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| skillprof_fuzz::run_folder(text));
