//! Host profiles (TOML): any text is a profile or an error naming what is wrong.
#![no_main]

use libfuzzer_sys::fuzz_target;
use skillprof::hostctl::profile::HostProfile;

fuzz_target!(|text: &str| {
    let _ = HostProfile::parse(text);
});
