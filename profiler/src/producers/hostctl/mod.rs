//! Everything about a skill host as seen from outside: starting one (ours or any other that
//! follows the same conventions), its HTTP API, and its skills directory. Knows nothing of
//! probes or output formats.

pub mod attach;
pub mod client;
pub mod cores;
pub mod host_metrics;
pub mod process;
pub mod profile;
pub mod ptrace_trim;
pub mod skills_dir;
pub mod start_args;
pub mod trim;

use crate::record::profile::HostProfile;
pub use client::{Client, Reply};
pub use process::{ExitWatch, HostProcess};
pub use skills_dir::{SampleSkills, SkillsDir, sample_input};
pub use start_args::HostStartArgs;
