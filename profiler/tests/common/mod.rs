//! What the integration tests share: the root check, driving the built skillprof binary and
//! reading its runs, and the deterministic workload the probe tests drive.

#![allow(dead_code)] // each test file uses its own subset

pub mod cli;
pub mod exercise;
pub mod outside_host;
pub mod tools_python;

/// Stops a test that needs root, loudly: CI runs the suite as root, and a skipped test would
/// pass while proving nothing. `needs` says what the test does that needs it.
pub fn require_root(needs: &str) {
    assert!(
        skillprof::system::running_as_root(),
        "{needs}, which needs root: run the tests as root (sudo scripts/test.sh)"
    );
}
