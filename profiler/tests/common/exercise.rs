//! What the probe tests share: the deterministic workload (`skillprof-exercise`), procfs readings to compare the probes with, and the kernel
//! matrix's side (`scripts/kernel-matrix.sh`): which mechanisms the kernel under test must
//! attach (`SKILLPROF_EXPECT_MECHANISMS`), and where to save results for the cross-kernel
//! comparison (`SKILLPROF_MATRIX_OUT`).

use std::{
    env::VarError,
    fmt::Write as _,
    io::{BufRead as _, BufReader, Write as _},
    path::{Path, PathBuf},
    process::{Child, ChildStdin, ChildStdout, Command, Stdio},
};

use serde_json::{Value, json};
use skillprof::record::probes::{Mechanism, Outcome, ProbeMetrics, ProbeStatus};
use skillprof::record::process::ProcessStat;
use skillprof::{producers::probes::PROBES, producers::sample::process, record::Row};

/// The workload process, driven line by line.
pub struct Exercise {
    pub child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Exercise {
    pub fn start() -> Exercise {
        Exercise::start_with_env(&[])
    }

    /// With these environment variables besides the inherited ones.
    pub fn start_with_env(env: &[(&str, &str)]) -> Exercise {
        let mut child = Command::new(env!("CARGO_BIN_EXE_skillprof-exercise"))
            .envs(env.iter().copied())
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

/// The kernel's own counters of a process (/proc/PID/stat), to check the probes against.
pub fn kernel_stat(pid: u32) -> ProcessStat {
    process::read(Path::new("/proc"), pid).unwrap()
}

/// The metrics as the result record's cells.
pub fn row(metrics: &ProbeMetrics) -> Row {
    let mut row = Row::default();
    ProbeMetrics::write_cells(Some(metrics), &mut row);
    row
}

/// An integer cell, typed as the record wrote it; panics if it is missing or empty.
pub fn int(row: &Row, column: &str) -> u64 {
    match row.get(column) {
        Some(skillprof::record::Value::Int(value)) => {
            u64::try_from(*value).unwrap_or_else(|_| panic!("{column} is {value}"))
        }
        other => panic!("column {column} is {other:?}, not an integer, in {row:?}"),
    }
}

// ---- the kernel matrix -------------------------------------------------------------------

/// What the kernel under test allows, as `SKILLPROF_EXPECT_MECHANISMS` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelKind {
    /// fentry/fexit and kprobes work (a stock distribution kernel: Debian's 6.1 in the
    /// kernel matrix's guest), so the function probes must be the ones attached.
    Preferred,
    /// Neither works (this machine's 6.18: fentry loads fail with EPERM, CONFIG_KPROBES is
    /// not set), so tp_btf and classic tracepoints must be the ones attached. The default:
    /// plain `cargo test` runs on this machine's kernel.
    Fallback,
}

impl KernelKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Preferred => "preferred",
            Self::Fallback => "fallback",
        }
    }
}

/// The kernel kind from `SKILLPROF_EXPECT_MECHANISMS` (`preferred` or `fallback`; unset:
/// `fallback`). Any other value fails the test: a typo must not weaken the assertions.
pub fn kernel_kind() -> KernelKind {
    match std::env::var("SKILLPROF_EXPECT_MECHANISMS") {
        Err(VarError::NotPresent) => KernelKind::Fallback,
        Ok(v) if v == "fallback" => KernelKind::Fallback,
        Ok(v) if v == "preferred" => KernelKind::Preferred,
        other => panic!(
            "SKILLPROF_EXPECT_MECHANISMS is {other:?}; it must be `preferred` (fentry/fexit and \
             kprobes work) or `fallback` (they do not), or unset (fallback)"
        ),
    }
}

/// The mechanism selection a session ran with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Selection {
    /// Every mechanism, best first (the default).
    All,
    /// fentry/fexit excluded (`kprobe,tp_btf,tracepoint`): kprobes attach where the kernel
    /// has them, so their programs are exercised too.
    NoFentry,
    /// `--force-fallback`: only each plan's last mechanism.
    ForcedFallback,
}

impl Selection {
    pub const ALL: [Selection; 3] = [Self::All, Self::NoFentry, Self::ForcedFallback];

    pub fn label(self) -> &'static str {
        match self {
            Self::All => "default",
            Self::NoFentry => "no_fentry",
            Self::ForcedFallback => "forced_fallback",
        }
    }

    /// `ProbeOptions::mechanisms` for this selection.
    pub fn mechanisms(self) -> Option<Vec<Mechanism>> {
        (self == Self::NoFentry)
            .then(|| vec![Mechanism::Kprobe, Mechanism::TpBtf, Mechanism::Tracepoint])
    }

    pub fn force_fallback(self) -> bool {
        self == Self::ForcedFallback
    }

    /// Whether the selection lets a plan's `index`-th mechanism be tried.
    fn allows(self, mechanism: Mechanism, index: usize, plan_len: usize) -> bool {
        match self {
            Self::All => true,
            Self::NoFentry => mechanism != Mechanism::Fentry,
            Self::ForcedFallback => index + 1 == plan_len,
        }
    }
}

/// The mechanism `probe` must attach by on a `kind` kernel under `selection`; `None`: it must
/// not attach at all (a function-probe-only probe on a kernel without function probes).
pub fn expected_mechanism(
    kind: KernelKind,
    selection: Selection,
    probe: &str,
) -> Option<Mechanism> {
    use Mechanism::*;
    if probe == "major_faults" {
        return Some(PerfCounter);
    }
    let plan = &PROBES
        .iter()
        .find(|p| p.probe.name() == probe)
        .unwrap_or_else(|| panic!("no probe {probe} in the plan"))
        .plan;
    // The first mechanism of the plan that the selection allows and the kernel has.
    plan.iter()
        .enumerate()
        .filter(|(i, a)| selection.allows(a.mechanism, *i, plan.len()))
        .map(|(_, a)| a.mechanism)
        .find(|m| match kind {
            KernelKind::Preferred => true,
            KernelKind::Fallback => !matches!(m, Fentry | Kprobe),
        })
}

/// Asserts that each of `probes`, which the test needs, attached by some mechanism.
pub fn assert_attached(statuses: &[ProbeStatus], probes: &[&str]) {
    for probe in probes {
        assert!(
            statuses
                .iter()
                .any(|s| s.probe.name() == *probe && s.attached),
            "probe {probe} did not attach: {statuses:#?}"
        );
    }
}

/// Asserts that every probe attached by the mechanism this kernel must give under
/// `selection`, and that every mechanism tried before it failed (so a fallback is the
/// kernel's refusal, never a mechanism left untried). Reports every mismatch at once.
pub fn assert_mechanisms(statuses: &[ProbeStatus], selection: Selection) {
    let kind = kernel_kind();
    let mut wrong = String::new();
    let names: Vec<&str> = PROBES
        .iter()
        .map(|p| p.probe.name())
        .chain(["major_faults"])
        .collect();
    for name in names {
        let Some(status) = statuses.iter().find(|s| s.probe.name() == name) else {
            let _ = writeln!(wrong, "  {name}: missing from the statuses");
            continue;
        };
        if name == "syscall_latency" {
            // Asked for or not; where asked, it follows the syscalls probe's mechanism.
            let syscalls = statuses.iter().find(|s| s.probe.name() == "syscalls");
            let follows = syscalls.is_some_and(|s| s.attached && s.mechanism == status.mechanism);
            if !status.not_asked() && !(status.attached && follows) {
                let _ = writeln!(wrong, "  {name}: {status:?}, syscalls: {syscalls:?}");
            }
            continue;
        }
        let expected = expected_mechanism(kind, selection, name);
        let got = status.attached.then_some(status.mechanism);
        if got != expected {
            let show = |m: Option<Mechanism>| m.map_or("nothing".to_string(), |m| m.to_string());
            let _ = writeln!(
                wrong,
                "  {name}: attached {}, expected {} ({})",
                show(got),
                show(expected),
                status.detail
            );
            continue;
        }
        // Before the attached mechanism (or all of them, if none attached): tried and
        // failed where the selection allowed it, skipped where it did not.
        let plan_len = status.attempts.len();
        for (i, attempt) in status.attempts.iter().enumerate() {
            if attempt.outcome == Outcome::Attached {
                break;
            }
            let allowed =
                name == "major_faults" || selection.allows(attempt.mechanism, i, plan_len);
            let want = if allowed {
                Outcome::Failed
            } else {
                Outcome::Skipped
            };
            if attempt.outcome != want {
                let _ = writeln!(
                    wrong,
                    "  {name}: {} was {:?}, expected {want:?} ({})",
                    attempt.mechanism, attempt.outcome, attempt.detail
                );
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "on a `{}` kernel (SKILLPROF_EXPECT_MECHANISMS; unset means fallback, this machine's \
         kernel, which has neither fentry nor kprobes), selection {}, the probes attached \
         otherwise than expected:\n{wrong}If the kernel changed (e.g. now allows fentry), set \
         SKILLPROF_EXPECT_MECHANISMS to what it allows.",
        kind.as_str(),
        selection.label()
    );
}

/// probe -> attached mechanism (`null`: not attached), for the saved results.
pub fn mechanisms_json(statuses: &[ProbeStatus]) -> Value {
    statuses
        .iter()
        .map(|s| {
            let mechanism = s.attached.then(|| s.mechanism.as_str());
            (s.probe.name().to_owned(), json!(mechanism))
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// The folder the kernel matrix collects results in (`SKILLPROF_MATRIX_OUT`), if set.
pub fn matrix_out() -> Option<PathBuf> {
    let dir = PathBuf::from(std::env::var_os("SKILLPROF_MATRIX_OUT")?);
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("creating SKILLPROF_MATRIX_OUT {}: {e}", dir.display()));
    Some(dir)
}

/// Saves `value` as `<SKILLPROF_MATRIX_OUT>/<name>.json`, with the kernel release and the
/// expected kernel kind added; does nothing when SKILLPROF_MATRIX_OUT is unset.
pub fn save_result(name: &str, mut value: Value) {
    let Some(dir) = matrix_out() else { return };
    if let Some(object) = value.as_object_mut() {
        object.insert("kernel".into(), json!(kernel_release()));
        object.insert("expect".into(), json!(kernel_kind().as_str()));
    }
    let path = dir.join(format!("{name}.json"));
    let text = serde_json::to_string_pretty(&value).unwrap() + "\n";
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    println!("saved {}", path.display());
}

/// `uname -r`.
pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap()
        .trim()
        .to_string()
}

/// An integer cell as JSON: `null` if empty (not measured by this mechanism).
pub fn cell_json(row: &Row, column: &str) -> Value {
    match row.get(column) {
        Some(skillprof::record::Value::Absent) => Value::Null,
        Some(_) => json!(int(row, column)),
        None => panic!("no column {column} in {row:?}"),
    }
}
