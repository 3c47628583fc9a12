use anyhow::Result;
use clap::{Parser, Subcommand};

/// skillprof profiles a wasmtime skill host with kernel evidence: it drives the host through
/// a cmds workload and attributes every page fault, mmap and reclaim to the command that caused it.
#[derive(Parser)]
#[command(version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    // Help comes from ProbesArgs (a doc comment here would override it).
    Probes(skillprof::probes::ProbesArgs),
    // About and help come from the Args struct, which a doc comment here would override.
    Compare(skillprof::output::compare::Args),
}

fn main() -> Result<()> {
    match Cli::parse().command {
        Command::Probes(args) => skillprof::probes::run(args),
        Command::Compare(args) => skillprof::output::compare::run(args),
    }
}
