//! Kernel probes: load skillprof's BPF object, attach each probe by the best mechanism this
//! kernel allows, and read the aggregates back.
//!
//! Every probe has an ordered attach plan (cheapest mechanism first); the loader tries them in
//! order and records, per probe, what attached and why the others did not. Nothing here
//! degrades silently: a run reports its [`ProbeStatus`] list.

mod command;
mod object;
mod plan;
mod privileges;
mod tracefs;

pub use command::{ProbesArgs, run};
pub use object::LoadedProbes;
pub use plan::{Mechanism, ProbeStatus};
