//! Driving the real `skillprof` binary and reading what its runs leave behind.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// The built binary, without a backtrace setting leaking in from the caller.
pub fn skillprof() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_skillprof"));
    command.env_remove("RUST_BACKTRACE");
    command
}

/// All a failed assertion needs to show about a finished command.
pub fn describe(output: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The one run folder under `out`.
pub fn run_folder(out: &Path) -> PathBuf {
    let folders: Vec<PathBuf> = fs::read_dir(out)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    assert_eq!(
        folders.len(),
        1,
        "expected one run folder in {}: {folders:?}",
        out.display()
    );
    folders.into_iter().next().unwrap()
}

pub fn meta(folder: &Path) -> Value {
    serde_json::from_str(&fs::read_to_string(folder.join("meta.json")).unwrap()).unwrap()
}

/// Running, or a zombie nobody reaped yet (its memory is freed either way).
pub fn alive(pid: u64) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}
