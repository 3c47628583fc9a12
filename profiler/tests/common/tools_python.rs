//! The Python that scripts/test.sh installs with prometheus_client and duckdb
//! (build/venv-tools), to read outputs with the tools users read them with. Shared by
//! skillprof's tests and skillhost's (which include this file by path).

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::Value;

/// Runs `script` with `args` and `stdin`; returns what it printed, as JSON.
pub fn run(script: &str, args: &[&str], stdin: &str) -> Value {
    let python =
        skillprof::producers::hostctl::SampleSkills::build_path("venv-tools/bin/python").unwrap();
    assert!(
        python.is_file(),
        "{} is missing: scripts/test.sh installs it (prometheus_client, duckdb)",
        python.display()
    );
    let mut child = Command::new(python)
        .arg("-c")
        .arg(script)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.as_bytes()).unwrap();
    drop(input);
    let output = child.wait_with_output().unwrap();
    let shown = || {
        format!(
            "{}\nstdout:\n{}\nstderr:\n{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    };
    assert!(output.status.success(), "{script}\n{}", shown());
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{e}: {}", shown()))
}
