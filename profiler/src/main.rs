use std::process::ExitCode;

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
    // About and help come from RunArgs (boxed: it is by far the largest).
    Run(Box<skillprof::run::RunArgs>),
    // About and help come from PressureArgs.
    Pressure(skillprof::experiment::PressureArgs),
    // About and help come from ReportArgs and ExportArgs.
    Report(skillprof::report::cli::ReportArgs),
    Export(skillprof::report::cli::ExportArgs),
    // About and help come from CapacityArgs.
    Capacity(skillprof::capacity::CapacityArgs),
}

fn main() -> ExitCode {
    match dispatch(Cli::parse().command) {
        Ok(code) => code,
        // The chain of causes, one line, without the backtrace anyhow would add when
        // RUST_BACKTRACE is set: errors here are for users, and say what to do.
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn dispatch(command: Command) -> Result<ExitCode> {
    let done = |result: Result<()>| result.map(|()| ExitCode::SUCCESS);
    match command {
        Command::Probes(args) => done(skillprof::probes::run(args)),
        Command::Compare(args) => done(skillprof::output::compare::run(args)),
        Command::Run(args) => skillprof::run::run(*args),
        Command::Pressure(args) => skillprof::experiment::run(args),
        Command::Report(args) => done(skillprof::report::cli::report(args)),
        Command::Export(args) => done(skillprof::report::cli::export(args)),
        Command::Capacity(args) => done(skillprof::capacity::run(args)),
    }
}
