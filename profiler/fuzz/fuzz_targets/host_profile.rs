//! libFuzzer's entry to [`skillprof_fuzz::host_profile`]: what it asserts of an input is written there.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| skillprof_fuzz::host_profile(text));
