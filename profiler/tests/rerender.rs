//! Nothing a user reads changes by accident: a run folder stored in the repository
//! (`fixtures/rerender/run`, a smoke run) is rendered again by report, export, compare and
//! capacity, and every file they write must be the one they wrote when the fixture was made,
//! byte for byte (the run's own path aside). The expected files are kept as SHA-1 digests in
//! `fixtures/rerender/expected.txt`; on a difference the test leaves the new files in
//! target/rerender/ to diff, and `SKILLPROF_BLESS=1` records the new digests, for a change a
//! commit names.

use std::fs;
use std::path::{Path, PathBuf};

use sha1::{Digest, Sha1};

mod common;
use common::cli::{describe, skillprof};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/rerender")
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

#[test]
fn a_stored_run_renders_to_the_same_files() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    copy_dir(&fixtures().join("run"), &run);
    let mut printed = Vec::new();
    let mut command = |name: &str, args: &[&str]| {
        let output = skillprof().args(args).output().unwrap();
        assert!(output.status.success(), "{name}: {}", describe(&output));
        printed.push((format!("{name}.stdout"), output.stdout));
    };
    let run_arg = run.to_str().unwrap();
    let capacity = dir.path().join("capacity");
    command("report", &["report", run_arg]);
    command("perfetto", &["export", "--perfetto", run_arg]);
    command(
        "openmetrics",
        &["export", "--format", "openmetrics", run_arg],
    );
    command("compare", &["compare", run_arg, run_arg]);
    command(
        "capacity",
        &[
            "capacity",
            run_arg,
            "--memory",
            "1G",
            "--kind",
            "rust",
            "--out",
            capacity.to_str().unwrap(),
        ],
    );
    let mut rendered: Vec<(String, Vec<u8>)> = printed;
    for (folder, files) in [
        (&run, &["report.html", "trace.json", "openmetrics.txt"][..]),
        (&capacity, &["capacity.json", "explain.md"][..]),
    ] {
        for file in files {
            let name = format!("{}/{file}", folder.file_name().unwrap().to_string_lossy());
            rendered.push((name, fs::read(folder.join(file)).unwrap()));
        }
    }
    // The run's own path is the tempdir's: the same in every rendering once named so.
    let placeholder = |bytes: &[u8]| -> Vec<u8> {
        String::from_utf8_lossy(bytes)
            .replace(dir.path().to_str().unwrap(), "<DIR>")
            .into_bytes()
    };
    let actual: Vec<String> = rendered
        .iter()
        .map(|(name, bytes)| {
            let digest = Sha1::digest(placeholder(bytes));
            let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
            format!("{hex}  {name}")
        })
        .collect();
    let expected_path = fixtures().join("expected.txt");
    if std::env::var_os("SKILLPROF_BLESS").is_some() {
        fs::write(&expected_path, actual.join("\n") + "\n").unwrap();
        return;
    }
    let expected = fs::read_to_string(&expected_path).unwrap();
    let expected: Vec<&str> = expected.lines().collect();
    if expected != actual {
        let keep = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/rerender");
        let _ = fs::remove_dir_all(&keep);
        for (name, bytes) in &rendered {
            let path = keep.join(name);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, placeholder(bytes)).unwrap();
        }
        panic!(
            "re-rendering the stored run changed what users read (new files in {}):\nexpected:\n{}\nactual:\n{}",
            keep.display(),
            expected.join("\n"),
            actual.join("\n")
        );
    }
}
