//! Driving the real `skillprof` binary and reading what its runs leave behind.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

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
    repo_cmds("smoke.cmds")
}

/// cmds/`name` of this repository.
pub fn repo_cmds(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../cmds")
        .join(name)
}

/// Writes a workload of the 2024 command language to `dir/name`, for `run`.
pub fn write_cmds(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    fs::write(&path, text).unwrap();
    path
}

/// `skillprof run CMDS --out OUT EXTRA..`, however it ends.
pub fn run(cmds: &Path, out: &Path, extra: &[&str]) -> Output {
    skillprof()
        .arg("run")
        .arg(cmds)
        .arg("--out")
        .arg(out)
        .args(extra)
        .output()
        .unwrap()
}

/// `skillprof run CMDS --out OUT EXTRA..`, which must succeed: its output and its one run
/// folder. `extra` comes last, so that it may end with `-- HOST-FLAGS`.
pub fn run_ok(cmds: &Path, out: &Path, extra: &[&str]) -> (Output, PathBuf) {
    let output = run(cmds, out, extra);
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

/// A run folder's meta.json, read as the report reads it.
pub fn meta(folder: &Path) -> skillprof::record::RunInfo {
    skillprof::views::output::meta::read(folder).unwrap()
}

/// Running: not reaped, and not a zombie either (its memory is freed already).
pub fn alive(pid: u64) -> bool {
    skillprof::producers::sample::process::read(Path::new("/proc"), pid as u32).is_ok()
}

/// Writes a cmds file whose second entry sleeps long enough to be interrupted.
pub fn long_workload(dir: &Path) -> PathBuf {
    let path = dir.join("long.cmds");
    fs::write(
        &path,
        "add_rs\nexecute_skill sample_rs1 Long 0 60000\nskills\n",
    )
    .unwrap();
    path
}

/// Starts a run under `dir/runs` (with `extra` arguments) and waits until its second entry is under way; returns
/// it with its run folder.
#[allow(
    clippy::zombie_processes,
    reason = "the caller waits for the child it gets"
)]
pub fn start_long_run(dir: &Path, cmds_file: &Path, extra: &[&str]) -> (Child, PathBuf) {
    let out = dir.join("runs");
    let mut child = skillprof()
        .arg("run")
        .arg(cmds_file)
        .arg("--out")
        .arg(&out)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    // Under way: the first entry is recorded, so the sleeping one runs now.
    let under_way = || {
        let folder = fs::read_dir(&out).ok()?.next()?.ok()?.path();
        let csv = fs::read_to_string(folder.join("commands.csv")).ok()?;
        (csv.lines().count() >= 2).then_some(folder)
    };
    loop {
        if let Some(folder) = under_way() {
            std::thread::sleep(Duration::from_millis(500));
            return (child, folder);
        }
        if started.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            let output = child.wait_with_output().unwrap();
            panic!("the run never got going: {}", describe(&output));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub fn host_pid(folder: &Path) -> i32 {
    meta(folder).host.pid.expect("the host pid is in meta.json") as i32
}

/// Polls `check` for up to `limit`: a killed skillprof's guardians restore asynchronously.
pub fn eventually(limit: Duration, what: &str, mut check: impl FnMut() -> Option<String>) {
    let start = Instant::now();
    loop {
        match check() {
            None => return,
            Some(problem) if start.elapsed() > limit => panic!("{what}: {problem}"),
            Some(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// A run folder's entries, typed, through the reader the report and capacity use.
pub fn entries(folder: &Path) -> Vec<skillprof::record::EntryRecord> {
    let path = folder.join(skillprof::views::output::entries_jsonl::FILE);
    skillprof::views::output::entries_jsonl::read(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e:#}", path.display()))
}

/// A CSV row by column name, as a user's script reads it.
pub type CsvRow = std::collections::BTreeMap<String, String>;

/// The cell `column` of `row` as a `T`: the tests' one cell parser. Panics, naming the row,
/// where the cell is missing or not a `T` (an empty cell, not measured, is not a number).
pub fn cell<T: std::str::FromStr>(row: &CsvRow, column: &str) -> T {
    let text = row
        .get(column)
        .unwrap_or_else(|| panic!("no column {column} in {row:?}"));
    text.parse().unwrap_or_else(|_| {
        panic!(
            "{column} is {text:?}, not a {}, in {row:?}",
            std::any::type_name::<T>()
        )
    })
}

/// A CSV file as rows of named cells.
pub fn csv_rows(path: &Path) -> Vec<CsvRow> {
    let mut reader =
        csv::Reader::from_path(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let header = reader.headers().unwrap().clone();
    reader
        .records()
        .map(|record| {
            let record = record.unwrap();
            header
                .iter()
                .zip(record.iter())
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect()
        })
        .collect()
}
