//! skillprof: a systems profiler for WebAssembly skill runtimes.
//!
//! Data flows one way: a cmds file is parsed into a plan, the runner drives a skill host
//! through it, probes and the sampler measure the host per entry, and every output format
//! is a view of the per-entry result records. The folders are the layers, each importing
//! only from the ones below it (tests/layers.rs holds them to it):

pub mod commands;
pub mod ground;
pub mod producers;
pub mod record;
pub mod views;
