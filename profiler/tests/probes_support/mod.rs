//! What the probe tests share: the root check, the deterministic workload
//! (`skillprof-exercise`), and procfs readings to compare the probes with.

#![allow(dead_code)] // each test file uses its own subset

use std::{
    io::{BufRead as _, BufReader, Write as _},
    process::{Child, ChildStdin, ChildStdout, Command, Stdio},
};

use skillprof::record::{Metrics, Row};

/// The probe tests load BPF programs: they need root, and fail loudly without it (a skipped
/// probe test would pass while proving nothing).
pub fn require_root() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "this test needs root: run as root / via sudo (e.g. `sudo -E cargo test -p skillprof --test probes_counts`)"
    );
}

/// The workload process, driven line by line.
pub struct Exercise {
    pub child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Exercise {
    pub fn start() -> Exercise {
        let mut child = Command::new(env!("CARGO_BIN_EXE_skillprof-exercise"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting skillprof-exercise");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut exercise = Exercise {
            child,
            stdin,
            stdout,
        };
        assert_eq!(exercise.read_line(), "ok ready");
        exercise
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends one command and returns its `ok ...` answer; panics on `error ...`.
    pub fn cmd(&mut self, line: &str) -> String {
        self.send(line);
        let answer = self.read_line();
        assert!(answer.starts_with("ok"), "`{line}` answered `{answer}`");
        answer
    }

    pub fn send(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
    }

    pub fn read_line(&mut self) -> String {
        let mut answer = String::new();
        self.stdout.read_line(&mut answer).unwrap();
        answer.trim_end().to_string()
    }
}

impl Drop for Exercise {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The kernel's own minor-fault count of a process (/proc/PID/stat field 10).
pub fn minflt(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit_once(") ").unwrap().1.split(' ').collect();
    fields[10 - 3].parse().unwrap()
}

/// CLOCK_MONOTONIC in ns: the clock of the kernel's timestamps.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: fills a local timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The metrics as the result record's cells.
pub fn row(metrics: &impl Metrics) -> Row {
    let mut row = Row::default();
    metrics.write(&mut row);
    row
}

/// An integer cell; panics if it is missing or empty.
pub fn int(row: &Row, column: &str) -> u64 {
    let cell = row
        .get(column)
        .unwrap_or_else(|| panic!("no column {column} in {row:?}"));
    cell.parse()
        .unwrap_or_else(|_| panic!("column {column} is {cell:?}, not an integer"))
}
