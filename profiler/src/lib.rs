//! skillprof: a systems profiler for WebAssembly skill runtimes.
//!
//! Data flows one way: a cmds file is parsed into a plan, the runner drives a skill host
//! through it, probes and the sampler measure the host per entry, and every output format
//! is a view of the per-entry result records.

pub mod balloon;
pub mod band;
pub mod capacity;
pub mod cli;
pub mod cli_reference;
pub mod cmds;
pub mod component;
pub mod cpus;
pub mod explain;
pub mod generated_docs;
pub mod hostctl;
pub(crate) mod keyed;
pub mod locust;
pub mod machine;
pub mod output;
pub mod pidfd;
pub mod pool;
pub mod pressure;
pub mod probes;
pub mod record;
pub mod report;
pub mod run;
pub mod sample;
pub mod slo;
pub mod stats;
pub mod system;
pub mod traffic;
pub mod units;
pub mod watch;
