//! The subcommands: each parses its flags, sequences producers and hands the records to
//! views. Nothing below imports from here.

pub mod capacity;
pub mod cli;
pub mod cli_reference;
pub mod pool;
pub mod pressure;
pub mod report;
pub mod run;
pub mod slo;
pub mod watch;
