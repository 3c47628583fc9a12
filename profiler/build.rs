//! Embeds the BPF object that `cargo xtask build-ebpf` builds.
//!
//! Why embed: skillprof then runs as one file (under sudo, in CI, inside a VM guest), and the
//! object's maps always match the `skillprof-common` types this binary was compiled with.
//! Why not build the object here (aya-build style): that would put the pinned nightly and
//! bpf-linker in the path of every host build, test and clippy run, and nest a second cargo
//! build inside this one; the xtask keeps that an explicit, separately cached step.

use std::path::Path;

/// Relative to the repo root; must match `OBJECT` in xtask/src/ebpf.rs.
const OBJECT: &str = "build/ebpf/skillprof.bpf.o";
/// Set when the object is missing, so that `cargo check` and clippy of the host crates work
/// without the BPF toolchain; only loading the probes then fails (src/producers/probes/object.rs).
const NO_OBJECT_CFG: &str = "skillprof_no_bpf_object";

fn main() {
    let repo_root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("profiler/ has a parent");
    let object = repo_root.join(OBJECT);
    println!("cargo::rustc-check-cfg=cfg({NO_OBJECT_CFG})");
    if object.is_file() {
        println!("cargo::rerun-if-changed={}", object.display());
        println!("cargo::rustc-env=SKILLPROF_BPF_OBJECT={}", object.display());
    } else {
        // The folder rather than the object: an object moved back in keeps an mtime older than
        // this run and would not count as changed, while the folder's mtime moves.
        let folder = object.parent().expect("OBJECT has a parent");
        println!("cargo::rerun-if-changed={}", folder.display());
        println!(
            "cargo::warning=the BPF object {} is missing: this skillprof cannot load its probes; \
             run `cargo xtask build-ebpf` (scripts/setup.sh installs its tools)",
            object.display()
        );
        println!("cargo::rustc-cfg={NO_OBJECT_CFG}");
    }
}
