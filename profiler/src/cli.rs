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
    Probes(crate::probes::ProbesArgs),
    // About and help come from CompareArgs, which a doc comment here would override.
    Compare(crate::output::compare::CompareArgs),
    // About and help come from RunArgs (boxed: it is by far the largest).
    Run(Box<crate::run::RunArgs>),
    // About and help come from PressureArgs.
    Pressure(crate::pressure::PressureArgs),
    // About and help come from ReportArgs and ExportArgs.
    Report(crate::report::cli::ReportArgs),
    Export(crate::report::cli::ExportArgs),
    // About and help come from CapacityArgs.
    Capacity(crate::capacity::CapacityArgs),
    // About and help come from SweepArgs.
    Sweep(crate::capacity::sweep::SweepArgs),
    // About and help come from WatchArgs.
    Watch(crate::watch::WatchArgs),
    // About and help come from SloArgs.
    Slo(crate::slo::SloArgs),
    // About and help come from PoolArgs.
    Pool(crate::pool::PoolArgs),
}

/// Does what `command` asks; the exit code says how it ended.
pub fn dispatch(command: Command) -> Result<ExitCode> {
    let done = |result: Result<()>| result.map(|()| ExitCode::SUCCESS);
    match command {
        Command::Probes(args) => done(crate::probes::run(args)),
        Command::Compare(args) => done(crate::output::compare::run(args)),
        Command::Run(args) => crate::run::run(*args),
        Command::Pressure(args) => crate::pressure::run(args),
        Command::Report(args) => done(crate::report::cli::report(args)),
        Command::Export(args) => done(crate::report::cli::export(args)),
        Command::Capacity(args) => done(crate::capacity::run(args)),
        Command::Sweep(args) => done(crate::capacity::sweep::run(args)),
        Command::Watch(args) => crate::watch::run(args),
        Command::Slo(args) => crate::slo::run(args),
        Command::Pool(args) => crate::pool::run(args),
    }
}
