//! Kernel probes: load skillprof's BPF object, attach each probe by the best mechanism this
//! kernel allows, attribute events to entries, and read the aggregates back.
//!
//! Every probe has an ordered attach plan (fentry/fexit, kprobe, tp_btf, classic tracepoint);
//! the loader tries them in order and records, per probe, what attached and why the others did
//! not. Nothing here degrades silently: a run reports its [`ProbeStatus`] list.
//!
//! The runner's view: [`ProbeSession::start`] on the host's pid, [`ProbeSession::begin_entry`]
//! at each boundary, [`ProbeSession::entry`] for each entry's [`ProbeMetrics`] (a
//! `record::Metrics`), [`ProbeSession::stop_timeline`] and [`stop_breakdown`] for the stop,
//! and [`ProbeSession::costs`] for the profiler's own cost.

mod bpf_stats;
mod cli;
pub mod cost_model;
pub mod events;
mod formats;
mod host_check;
mod host_symbol;
pub mod lab_default;
pub mod ledger;
mod majflt;
pub mod markers;
mod metrics;
mod object;
mod plan;
mod pool;
pub mod privileges;
mod publish;
mod session;
pub mod stacks;
pub mod stop;
mod symbols;
pub mod tables;
mod task_layout;
pub mod time;
mod tracefs;
pub mod wasm_code;

pub use cli::{ProbesArgs, is_required, run};
pub use plan::PROBES;
pub use privileges::{can_load_bpf, require_bpf, require_bpf_for_run};
pub use session::{CostMode, MechanismArgs, ProbeOptions, ProbeSession};
pub use stop::{StopTimeline, stop_breakdown};
pub use tracefs::ensure_mounted as ensure_tracefs;
