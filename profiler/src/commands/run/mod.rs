//! `skillprof run`: the flags become one checked configuration (`config`), then the runner
//! sequences the plan's entries against a host: the measurers (`measure`) begin and end
//! around each entry and fill its record, the sinks (`sinks`) write every view of it. It owns
//! the notion of "the current entry".

mod args;
mod balloon;
mod config;
mod entry;
mod interrupt;
mod locust;
mod measure;
mod probing;
mod progress;
mod readings;
mod runner;
mod sinks;
mod workload;

use std::process::ExitCode;

use anyhow::{Context, Result};

pub use args::RunArgs;

use crate::ground::cmds::{self, InFlightCap};

pub fn run(args: RunArgs) -> Result<ExitCode> {
    // Validate the flags and the whole workload before anything starts.
    args.probe_mode()?;
    args.check_cpus()?;
    let plan = cmds::read(&args.cmds, InFlightCap::new(args.max_in_flight))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(runner::execute(args, plan))
}
