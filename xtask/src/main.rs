//! `cargo xtask <task>`: everything that builds artifacts the Rust host build cannot
//! (BPF objects, wasm components). Nothing here runs at profiling time.

mod ebpf;
mod skills;

use anyhow::Result;
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
    /// Build the sample skills (skills/) into wasm components in build/skills/: sample_rs,
    /// hello and trap with cargo for wasm32-wasip2, sample_py with componentize-py.
    ///
    /// Incremental: cargo rebuilds only what changed, and componentize-py (~15 s) runs only
    /// when a file under skills/sample_py or skills/wit is newer than build/skills/sample_py.wasm.
    /// Needs the wasm32-wasip2 target and build/venv/bin/componentize-py
    /// (`scripts/setup.sh` installs both).
    BuildSkills,
}

fn main() -> Result<()> {
    match Cli::parse().task {
        Task::BuildEbpf => ebpf::build(),
        Task::BuildSkills => skills::build(),
    }
}
