//! The shipped systemd units booted under a real systemd: a Debian bookworm root
//! (build/units-root, which scripts/test.sh makes with debootstrap) runs in systemd-nspawn
//! with systemd as its init, the units as docs/systemd has them, and the skillhost just
//! built. `systemd-analyze verify` (tests/watch.rs) checks a unit's syntax; only booting it
//! shows what a fresh system lacks, as the skills directory skillhost refuses to start
//! without.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The container's root: systemd and nothing else of a distribution's.
fn units_root() -> PathBuf {
    let root = skillprof::hostctl::SampleSkills::build_path("units-root").unwrap();
    assert!(
        root.join("usr/lib/systemd/systemd").is_file(),
        "{} has no systemd: scripts/test.sh makes it (debootstrap --variant=minbase \
         --include=systemd,systemd-sysv,dbus bookworm)",
        root.display()
    );
    root
}

/// Boots the units in a throwaway overlay of the root (the root itself is never written),
/// on a network of the container's own, so that its host's port is nobody else's; the
/// check unit writes what it saw into `check`, then powers the container off.
fn boot(check: &Path, units: &[&str]) -> String {
    let repository = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let skillhost = Path::new(env!("CARGO_BIN_EXE_skillprof")).with_file_name("skillhost");
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/boot");
    for file in ["check.sh", "skillprof-boot-check.service"] {
        fs::copy(fixtures.join(file), check.join(file)).unwrap();
    }
    // systemd-nspawn shares files with a running container through this folder, and refuses
    // to boot without it where systemd is not the machine's init (here).
    fs::create_dir_all("/run/systemd/nspawn/propagate").unwrap();
    let mut nspawn = Command::new("timeout");
    nspawn.args([
        "--kill-after=10",
        "120",
        "systemd-nspawn",
        "--quiet",
        "--boot",
    ]);
    nspawn.args([
        "--register=no",
        "--keep-unit",
        "--console=pipe",
        "--private-network",
    ]);
    nspawn.args(["--volatile=overlay", "-D"]).arg(units_root());
    nspawn.arg(format!("--bind={}:/check", check.display()));
    nspawn.arg(format!(
        "--bind-ro={}:/usr/local/bin/skillhost",
        skillhost.display()
    ));
    for unit in units {
        nspawn.arg(format!(
            "--bind-ro={}:/etc/systemd/system/{unit}",
            repository.join("docs/systemd").join(unit).display()
        ));
    }
    nspawn.arg(format!(
        "--bind-ro={}:/etc/systemd/system/skillprof-boot-check.service",
        check.join("skillprof-boot-check.service").display()
    ));
    nspawn.arg("systemd.wants=skillprof-boot-check.service");
    let output = nspawn.output().expect("systemd-nspawn (systemd-container)");
    let result = fs::read_to_string(check.join("result")).unwrap_or_default();
    assert!(
        output.status.success() && result.ends_with("done\n"),
        "the container did not run its check to the end ({}):\n{result}\n{}",
        output.status,
        common::cli::describe(&output)
    );
    result
}

/// The line of `result` that begins with `key: `, without it.
fn said<'a>(result: &'a str, key: &str) -> &'a str {
    result
        .lines()
        .find_map(|line| line.strip_prefix(key)?.strip_prefix(": "))
        .unwrap_or_else(|| panic!("no {key} in the check's result:\n{result}"))
}

/// On a fresh system, skillhost.service comes up with an empty skills directory, as its own
/// dynamic user, answers, is enabled by its [Install] section, restarts into a new process
/// when told, and leaves no process behind when stopped.
#[test]
fn skillhost_service_boots_on_a_fresh_system_restarts_and_stops_clean() {
    common::require_root("systemd-nspawn boots a container");
    let check = tempfile::tempdir().unwrap();
    let result = boot(check.path(), &["skillhost.service"]);
    assert_eq!(said(&result, "enable"), "enabled", "{result}");
    assert_eq!(said(&result, "health"), "HTTP/1.0 200 OK", "{result}");
    assert_eq!(said(&result, "active"), "active", "{result}");
    // A unit in a restart loop is active between two deaths: the count shows it.
    assert_eq!(said(&result, "restarts"), "0", "{result}");
    assert_eq!(said(&result, "skills dir"), "directory", "{result}");
    // DynamicUser= allocates from 61184-65519; root would be 0.
    let uid: u32 = said(&result, "uid").parse().expect("a uid");
    assert!((61184..=65519).contains(&uid), "{result}");
    assert_eq!(said(&result, "health after restart"), "HTTP/1.0 200 OK");
    assert_eq!(said(&result, "restarted"), "a new process", "{result}");
    assert_eq!(
        said(&result, "after stop"),
        "inactive, main pid 0",
        "{result}"
    );
    assert_eq!(said(&result, "left"), "none", "{result}");
    assert!(
        said(&result, "journal").contains("drained in"),
        "SIGTERM drains the host: {result}"
    );
}
