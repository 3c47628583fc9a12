//! `skillprof run`: sequences a plan's entries against a host, marks each entry's
//! boundaries for the sampler (and the probes), and hands one result record per entry to
//! the output formats. It owns the notion of "the current entry".

mod args;
mod balloon;
mod interrupt;
mod locust;
mod probing;
mod progress;
mod runner;
mod workload;

use std::process::ExitCode;

use anyhow::{Context, Result};

pub use args::RunArgs;

use crate::cmds::{self, InFlightCap};

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
