//! Embeds the BPF object that `cargo xtask build-ebpf` builds.
//!
//! Why embed: skillprof then runs as one file (under sudo, in CI, inside a VM guest), and the
//! object's maps always match the `skillprof-common` types this binary was compiled with.
//! Why not build the object here (aya-build style): that would put the pinned nightly and
//! bpf-linker in the path of every host build, test and clippy run, and nest a second cargo
//! build inside this one; the xtask keeps that an explicit, separately cached step.

use std::{path::Path, process::ExitCode};

/// Relative to the repo root; must match `OBJECT` in xtask/src/ebpf.rs.
const OBJECT: &str = "build/ebpf/skillprof.bpf.o";

fn main() -> ExitCode {
    let repo_root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("profiler/ has a parent");
    let object = repo_root.join(OBJECT);
    // Also reruns when the object appears after a failed build.
    println!("cargo::rerun-if-changed={}", object.display());
    if !object.is_file() {
        eprintln!(
            "error: the BPF object {} is missing.\n\
             Run `cargo xtask build-ebpf` first (it needs the tools `scripts/setup.sh` installs).",
            object.display()
        );
        return ExitCode::FAILURE;
    }
    println!("cargo::rustc-env=SKILLPROF_BPF_OBJECT={}", object.display());
    ExitCode::SUCCESS
}
