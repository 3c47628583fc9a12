//! What every layer stands on: the machine's facts, watermark bands, CPU lists, statistics,
//! units in words, the cmds language and the component a user brings. It imports no other
//! layer.

pub mod band;
pub mod cmds;
pub mod component;
pub mod cpus;
pub mod generated_docs;
pub(crate) mod keyed;
pub mod machine;
pub mod pidfd;
pub mod stats;
pub mod units;
