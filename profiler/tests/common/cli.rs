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

/// cmds/smoke.cmds of this repository.
pub fn smoke_cmds() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../cmds/smoke.cmds")
}

/// `skillprof run CMDS --out OUT EXTRA..`, which must succeed: its output and its one run
/// folder. `extra` comes last, so that it may end with `-- HOST-FLAGS`.
pub fn run_ok(cmds: &Path, out: &Path, extra: &[&str]) -> (Output, PathBuf) {
    let output = skillprof()
        .arg("run")
        .arg(cmds)
        .arg("--out")
        .arg(out)
        .args(extra)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", describe(&output));
    let folder = run_folder(out);
    (output, folder)
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

/// Running: not reaped, and not a zombie either (its memory is freed already).
pub fn alive(pid: u64) -> bool {
    skillprof::sample::process::read(Path::new("/proc"), pid as u32).is_ok()
}
