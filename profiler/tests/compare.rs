//! `skillprof compare` against the old harness's own output, byte for byte.

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Output},
};

const BENCH_A: &str = "241022_204217.730_run.log";
const BENCH_B: &str = "241022_204217.737_run.log";
const P_EXECUTE_ALL: &str = "241023_155316.286_run.log";

fn fixture(name: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/pharia-logs")
        .join(name);
    assert!(
        path.exists(),
        "the fixture {} is missing: the harness fixtures are part of the repository",
        path.display()
    );
    path
}

/// A scratch folder holding `logs/` with copies of the fixture logs, so that the paths given
/// (and printed) are `logs/...` as in the expected outputs. Removed when dropped.
struct Workdir(PathBuf);

impl Workdir {
    fn new(test: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("skillprof-compare-{test}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("logs")).unwrap();
        for log in [BENCH_A, BENCH_B, P_EXECUTE_ALL] {
            fs::copy(fixture(log), dir.join("logs").join(log)).unwrap();
        }
        Self(dir)
    }

    fn compare(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_skillprof"))
            .arg("compare")
            .args(args)
            .current_dir(&self.0)
            .env_remove("RUST_BACKTRACE")
            .env_remove("RUST_LIB_BACKTRACE")
            .output()
            .unwrap()
    }

    fn succeeds(&self, args: &[&str]) -> String {
        let output = self.compare(args);
        assert!(
            output.status.success(),
            "compare {args:?} failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    }

    fn fails(&self, args: &[&str]) -> String {
        let output = self.compare(args);
        assert!(
            !output.status.success(),
            "compare {args:?} should fail, but printed:\n{}",
            String::from_utf8_lossy(&output.stdout)
        );
        String::from_utf8(output.stderr).unwrap()
    }

    /// Moves `logs/<log>` into the folder `dir`.
    fn move_into(&self, log: &str, dir: &str) {
        fs::create_dir_all(self.0.join(dir)).unwrap();
        fs::rename(self.0.join("logs").join(log), self.0.join(dir).join(log)).unwrap();
    }
}

impl Drop for Workdir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

#[test]
fn compares_two_logs_exactly_as_the_harness_did() {
    let out =
        Workdir::new("two").succeeds(&[&format!("logs/{BENCH_A}"), &format!("logs/{BENCH_B}")]);
    assert_eq!(
        out,
        fs::read_to_string(fixture("expected_compare_bench.txt")).unwrap()
    );
}

#[test]
fn prints_a_single_log_exactly_as_the_harness_did() {
    let out = Workdir::new("single").succeeds(&[&format!("logs/{P_EXECUTE_ALL}")]);
    assert_eq!(
        out,
        fs::read_to_string(fixture("expected_single_p_execute_all.txt")).unwrap()
    );
}

#[test]
fn accepts_run_folders() {
    let workdir = Workdir::new("folders");
    workdir.move_into(BENCH_A, "before");
    workdir.move_into(BENCH_B, "after");
    let expected = fs::read_to_string(fixture("expected_compare_bench.txt"))
        .unwrap()
        .replace(&format!("logs/{BENCH_A}"), &format!("before/{BENCH_A}"))
        .replace(&format!("logs/{BENCH_B}"), &format!("after/{BENCH_B}"));
    assert_eq!(workdir.succeeds(&["before", "after/"]), expected);
}

#[test]
fn refuses_a_folder_without_exactly_one_log() {
    let workdir = Workdir::new("bad-folders");
    fs::create_dir(workdir.0.join("empty")).unwrap();
    assert!(
        workdir
            .fails(&["empty"])
            .contains("empty is a folder without a *_run.log; give a run log or a run folder")
    );
    let error = workdir.fails(&["logs"]);
    assert!(
        error.contains("logs holds 3 run logs; give the one you mean: "),
        "{error}"
    );
}

#[test]
fn refuses_logs_of_different_workloads() {
    let error = Workdir::new("hashes")
        .fails(&[&format!("logs/{BENCH_A}"), &format!("logs/{P_EXECUTE_ALL}")]);
    for part in [
        "cannot compare logs/241022_204217.730_run.log with logs/241023_155316.286_run.log: they ran different workloads",
        "logs/241022_204217.730_run.log has cmds bench.cmds with hash 3c6d21c18c26d4130b6f57d617d2131cedd58d1d",
        "logs/241023_155316.286_run.log has cmds cmds/test_p_execute_all.cmds with hash c43cb5d37cabddd93e11c576235223e0bd695992",
    ] {
        assert!(error.contains(part), "{part:?} not in:\n{error}");
    }
}

#[test]
fn refuses_logs_with_different_entry_counts() {
    let workdir = Workdir::new("counts");
    let without_stop: String = fs::read_to_string(fixture(BENCH_B))
        .unwrap()
        .lines()
        .take(11)
        .map(|line| format!("{line}\n"))
        .collect();
    fs::write(
        workdir.0.join("logs/241022_210000.000_run.log"),
        without_stop,
    )
    .unwrap();
    let error = workdir.fails(&[&format!("logs/{BENCH_A}"), "logs/241022_210000.000_run.log"]);
    let expected = "cannot compare logs/241022_204217.730_run.log with logs/241022_210000.000_run.log: \
                    logs/241022_204217.730_run.log has 9 entries but logs/241022_210000.000_run.log has 8";
    assert!(error.contains(expected), "{error}");
}

#[test]
fn refuses_a_log_whose_name_has_no_date() {
    let workdir = Workdir::new("names");
    fs::rename(
        workdir.0.join("logs").join(BENCH_A),
        workdir.0.join("logs/bench.log"),
    )
    .unwrap();
    let error = workdir.fails(&["logs/bench.log"]);
    assert!(error.contains("logs/bench.log: cannot tell when the run started: a run log is named YYMMDD_HHMMSS.mmm_run.log"), "{error}");
}

/// --json carries the CSV's rows, numbers as numbers and an infinite vs a(%) as null.
#[test]
fn writes_json() {
    let out = Workdir::new("json").succeeds(&[
        "--json",
        &format!("logs/{BENCH_A}"),
        &format!("logs/{BENCH_B}"),
    ]);
    let document: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rows = document["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2 * 9);
    assert_eq!(
        rows[11],
        serde_json::json!({
            "step": 6, "cmd": "10 execute_all Cecilia 0 0", "id": "b",
            "file_name": "logs/241022_204217.737_run.log",
            "took_ms": 196, "took_vs_a_pct": 140.0,
            "rss_diff_kb": 432, "rss_diff_vs_a_pct": null, "extended": {},
        })
    );
}

#[test]
fn writes_csv() {
    let out = Workdir::new("csv").succeeds(&[
        "--csv",
        &format!("logs/{BENCH_A}"),
        &format!("logs/{BENCH_B}"),
    ]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1 + 2 * 9);
    assert_eq!(
        lines[0],
        "step,cmd,id,file_name,took_ms,took_vs_a_pct,rss_diff_kb,rss_diff_vs_a_pct"
    );
    assert_eq!(
        lines[11],
        "6,10 execute_all Cecilia 0 0,a,logs/241022_204217.730_run.log,140,,0,"
    );
    assert_eq!(
        lines[12],
        "6,10 execute_all Cecilia 0 0,b,logs/241022_204217.737_run.log,196,140,432,inf"
    );
}

#[test]
fn extended_needs_commands_csv_beside_every_log() {
    let work = Workdir::new("extended-refused");
    let stderr = work.fails(&["--extended", "logs/241022_204217.730_run.log"]);
    assert!(
        stderr.contains("--extended needs a commands.csv"),
        "{stderr}"
    );
}

#[test]
fn extended_adds_commands_csv_columns_side_by_side() {
    let work = Workdir::new("extended");
    work.move_into(BENCH_A, "a");
    work.move_into(BENCH_B, "b");
    // Nine entries each, as in the logs; b has twice a's faults and no errors.
    for (dir, factor) in [("a", 1), ("b", 2)] {
        let mut csv = String::from("index,cmd,minflt,request_errors,rss_peak_kb\n");
        for index in 0..9 {
            csv.push_str(&format!(
                "{index},x,{},0,{}\n",
                (index + 1) * 100 * factor,
                1000
            ));
        }
        fs::write(work.0.join(dir).join("commands.csv"), csv).unwrap();
    }
    let table = work.succeeds(&["--extended=minflt,request_errors", "a", "b"]);
    let heading = table.lines().find(|l| l.starts_with("cmd ")).unwrap();
    assert!(
        heading.ends_with("minflt  vs a(%)   request_errors  vs a(%)"),
        "{heading:?}"
    );
    let lines: Vec<&str> = table.lines().collect();
    let add_py_a = lines.iter().position(|l| l.starts_with("add_py ")).unwrap();
    // b's first entry: minflt 200 is 200% of a's 100; no errors in either: 100.
    let add_py_b = lines[add_py_a + 1];
    assert!(
        add_py_b.ends_with("200      200                0      100"),
        "{add_py_b:?}"
    );
    assert_eq!(
        add_py_b.len(),
        heading.len(),
        "cells line up with their headings"
    );

    let csv = work.succeeds(&["--csv", "--extended=minflt", "a", "b"]);
    let header = csv.lines().next().unwrap();
    assert!(
        header.ends_with(",rss_diff_vs_a_pct,minflt,minflt_vs_a_pct"),
        "{header}"
    );
    assert!(csv.lines().nth(2).unwrap().ends_with(",200,200"), "{csv}");

    // The default columns include majflt, which these files lack: named in the error.
    let stderr = work.fails(&["--extended", "a", "b"]);
    assert!(stderr.contains("has no column majflt"), "{stderr}");
}
