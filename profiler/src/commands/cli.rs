//! The command line: one subcommand per job, each taking its arguments from the module that
//! does the job. The skillprof binary parses and dispatches; skillprof-man renders the same
//! definitions as man pages and shell completions.

use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};

/// skillprof profiles a wasmtime skill host with kernel evidence: it drives the host through
/// a cmds workload and attributes every page fault, mmap and reclaim to the command that caused it.
#[derive(Parser)]
#[command(version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    // Help comes from ProbesArgs (a doc comment here would override it).
    Probes(crate::producers::probes::ProbesArgs),
    // About and help come from CompareArgs, which a doc comment here would override.
    Compare(crate::views::output::compare::CompareArgs),
    // About and help come from RunArgs (boxed: it is by far the largest).
    Run(Box<crate::commands::run::RunArgs>),
    // About and help come from PressureArgs.
    Pressure(crate::commands::pressure::PressureArgs),
    // About and help come from ReportArgs and ExportArgs.
    Report(crate::commands::report::cli::ReportArgs),
    Export(crate::commands::report::cli::ExportArgs),
    // About and help come from CapacityArgs.
    Capacity(crate::commands::capacity::CapacityArgs),
    // About and help come from SweepArgs.
    Sweep(crate::commands::capacity::sweep::SweepArgs),
    // About and help come from WatchArgs.
    Watch(crate::commands::watch::WatchArgs),
    // About and help come from SloArgs.
    Slo(crate::commands::slo::SloArgs),
    // About and help come from PoolArgs.
    Pool(crate::commands::pool::PoolArgs),
}

/// Does what `command` asks; the exit code says how it ended.
pub fn dispatch(command: Command) -> Result<ExitCode> {
    let done = |result: Result<()>| result.map(|()| ExitCode::SUCCESS);
    match command {
        Command::Probes(args) => done(crate::producers::probes::run(args)),
        Command::Compare(args) => done(crate::views::output::compare::run(args)),
        Command::Run(args) => crate::commands::run::run(*args),
        Command::Pressure(args) => crate::commands::pressure::run(args),
        Command::Report(args) => done(crate::commands::report::cli::report(args)),
        Command::Export(args) => done(crate::commands::report::cli::export(args)),
        Command::Capacity(args) => done(crate::commands::capacity::run(args)),
        Command::Sweep(args) => done(crate::commands::capacity::sweep::run(args)),
        Command::Watch(args) => crate::commands::watch::run(args),
        Command::Slo(args) => crate::commands::slo::run(args),
        Command::Pool(args) => crate::commands::pool::run(args),
    }
}
