//! `cargo xtask build-ebpf`: compiles `profiler-ebpf/` into the BPF object that the skillprof
//! binary embeds (see `profiler/build.rs`).

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail, ensure};

/// The toolchain the BPF build is verified with: aya-ebpf 0.3 needs rustc >= 1.98, and
/// bpf-linker 0.10 loads this toolchain's own libLLVM 22. The repo's rust-toolchain.toml pins
/// stable for everything else, so every command below names this one explicitly.
const NIGHTLY: &str = "nightly-2026-07-20";
/// bpf-linker 0.11+ links against a system LLVM 21-23, which Debian bookworm does not ship.
const BPF_LINKER_SERIES: &str = "bpf-linker 0.10.";
const TARGET: &str = "bpfel-unknown-none";
/// What to run when a prerequisite is missing.
const FIX: &str =
    "run `scripts/setup.sh` (it installs the pinned nightly with rust-src and bpf-linker 0.10.0)";

/// Where the object lands; `profiler/build.rs` reads it from here.
const OBJECT: &str = "build/ebpf/skillprof.bpf.o";
/// Separate from the root `target/`: a different toolchain and target, and no lock contention
/// with host builds.
const TARGET_DIR: &str = "build/ebpf-target";

pub fn build() -> Result<()> {
    check_prerequisites()?;

    let root = repo_root();
    let target_dir = root.join(TARGET_DIR);
    let status = Command::new("cargo")
        .arg(format!("+{NIGHTLY}"))
        .args([
            "build",
            "-Z",
            "build-std=core",
            "--release",
            "--target",
            TARGET,
        ])
        .arg("--target-dir")
        .arg(&target_dir)
        .current_dir(root.join("profiler-ebpf"))
        .status()
        .context("running cargo for the BPF build")?;
    ensure!(
        status.success(),
        "the BPF build failed ({status}); see the cargo output above"
    );
    // bpf-linker tries the toolchain's libLLVM-*.so first, which is a linker script, then finds
    // the real library; rustc reports that first attempt as a linker warning on every build.
    println!(
        "note: the \"unable to open LLVM shared lib ... dlopen failed\" linker warning is harmless"
    );

    let built = target_dir.join(TARGET).join("release").join("skillprof");
    let object = root.join(OBJECT);
    let bytes = fs::read(&built).with_context(|| format!("reading {}", built.display()))?;
    // profiler/build.rs reruns when the object's mtime changes, and with it every skillprof
    // binary and test: rewriting identical bytes would rebuild them all for nothing.
    let state = if fs::read(&object).is_ok_and(|old| old == bytes) {
        "unchanged"
    } else {
        fs::create_dir_all(object.parent().expect("OBJECT has a parent"))?;
        fs::write(&object, &bytes).with_context(|| format!("writing {}", object.display()))?;
        "updated"
    };
    println!(
        "BPF object {state}: {} ({} bytes); `cargo build -p skillprof` embeds it",
        object.display(),
        bytes.len()
    );
    Ok(())
}

/// Fails with the fix when the nightly, its rust-src or bpf-linker is missing, instead of
/// leaving the user to decode a cargo or linker error.
fn check_prerequisites() -> Result<()> {
    let sysroot = Command::new("rustc")
        .arg(format!("+{NIGHTLY}"))
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .filter(|out| out.status.success());
    let Some(sysroot) = sysroot else {
        bail!("toolchain {NIGHTLY} is not installed; {FIX}");
    };
    let sysroot = PathBuf::from(String::from_utf8(sysroot.stdout)?.trim());
    let core_src = sysroot.join("lib/rustlib/src/rust/library/core");
    if !core_src.is_dir() {
        bail!("{NIGHTLY} has no rust-src (needed by -Z build-std=core); {FIX}");
    }

    let linker = Command::new("bpf-linker").arg("--version").output();
    let Ok(linker) = linker else {
        bail!("bpf-linker is not on PATH; {FIX}");
    };
    let version = String::from_utf8_lossy(&linker.stdout);
    if !version.starts_with(BPF_LINKER_SERIES) {
        bail!(
            "found `{}`, but the BPF build needs bpf-linker 0.10.x; {FIX}",
            version.trim()
        );
    }
    Ok(())
}

fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the repo root")
}
