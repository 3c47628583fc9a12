//! `cargo xtask <task>`: everything that builds artifacts the Rust host build cannot
//! (BPF objects, wasm components, man pages). Nothing here runs at profiling time.

mod ebpf;
mod skills;

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, ensure};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "Build tasks for skillprof (run as `cargo xtask <task>`)")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Compile the BPF programs (profiler-ebpf/) into build/ebpf/skillprof.bpf.o, which
    /// `cargo build -p skillprof` embeds. Needs the pinned nightly with rust-src and
    /// bpf-linker 0.10 (`scripts/setup.sh` installs them).
    BuildEbpf,
    /// Build the sample skills (skills/) into wasm components: sample_rs, hello and trap
    /// with cargo for wasm32-wasip2, sample_py and sample_py_pydantic with componentize-py;
    /// each once for `skillprof:skill` (build/skills/) and once for the 2024 host's
    /// `pharia:skill@0.2` (build/skills/pharia-skill/).
    ///
    /// Incremental: cargo rebuilds only what changed, and componentize-py (15-30 s) runs only
    /// when a file on the skill's Python path or its world's WIT is newer than its component.
    /// Needs the wasm32-wasip2 target, build/venv/bin/componentize-py, and for the pydantic
    /// skill build/venv-py312 and build/py312-site (`scripts/setup.sh` installs them all).
    BuildSkills,
    /// Write skillprof's shell completions (build/share/completions: bash, zsh, fish) and man
    /// pages (build/share/man: skillprof.1 and one per subcommand), made from its clap
    /// definitions by skillprof-man, which cargo builds first if it has to.
    Man,
}

fn main() -> Result<()> {
    match Cli::parse().task {
        Task::BuildEbpf => ebpf::build(),
        Task::BuildSkills => skills::build(),
        Task::Man => man(),
    }
}

fn man() -> Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let status = Command::new(env!("CARGO"))
        .current_dir(&root)
        .args([
            "run",
            "--quiet",
            "--release",
            "-p",
            "skillprof",
            "--bin",
            "skillprof-man",
        ])
        .args(["--", "build/share"])
        .status()
        .context("running cargo")?;
    ensure!(status.success(), "skillprof-man failed: {status}");
    Ok(())
}
