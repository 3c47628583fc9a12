use std::process::ExitCode;

use clap::Parser;
use skillprof::commands::cli::{self, Cli};

fn main() -> ExitCode {
    match cli::dispatch(Cli::parse().command) {
        Ok(code) => code,
        // The chain of causes, one line, without the backtrace anyhow would add when
        // RUST_BACKTRACE is set: errors here are for users, and say what to do.
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
