//! Host profiles as data: how to start a host (HostSpec, Start) and how to speak its dialect
//! of the skill API (Dialect, Routes). Read and used by `crate::hostctl`; recorded in meta.json.

use std::collections::BTreeMap;
use std::path::PathBuf;

use hyper::Method;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostProfile {
    pub name: String,
    pub start: Start,
    pub registry: Registry,
    pub dialect: Dialect,
}

/// How a skill is registered: a file in the skills directory, named after the skill.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Registry {
    /// The file of skill `{name}`; its modification time is its version to both hosts that
    /// ship, so files are written aside and renamed into place.
    pub file: String,
    /// The skill world the host runs: the runner registers the sample components built
    /// for it.
    #[serde(default)]
    pub world: SkillWorld,
}

/// A WIT world of skills, as a profile names it. A host refuses components of another.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum SkillWorld {
    /// skillhost's own (skills/wit/skillprof).
    #[default]
    #[serde(rename = "skillprof:skill")]
    Skillprof,
    /// The Pharia Kernel's of 2024 (skills/wit/pharia), `skill-handler` exported.
    #[serde(rename = "pharia:skill@0.2")]
    Pharia,
}

/// How to start the host; `{skills_dir}`, `{address}` (where it listens: loopback, or the
/// load network's host address) and `{port}` are replaced in every string.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Start {
    /// Arguments (`--host-arg` replaces them all).
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Files written into a fresh, otherwise empty working directory of the host's own, so
    /// that no stray configuration is picked up (name → contents). Without any, the host
    /// runs in skillprof's working directory.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
}

/// How the host's API names skills, where its routes are and what every request carries.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dialect {
    /// Skills are `<namespace>/<name>` in requests and listings (`None`: bare names).
    #[serde(default)]
    pub namespace: Option<String>,
    pub routes: Routes,
    /// Sent with every request.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Routes {
    pub health: Route,
    /// Takes `{"skill": NAME, "input": {...}}`.
    pub execute: Route,
    /// Answer: a JSON list of names, in any order.
    pub skills: Route,
    pub cached_skills: Route,
    /// `{name}` is the skill's name, percent-encoded (a namespace's `/` becomes `%2F`).
    pub drop_cached: Route,
    /// Asks the host's allocator to give its free memory back (the cmds command `trim`).
    /// Without one, `trim` needs `skillprof run --trim-by ptrace`.
    #[serde(default)]
    pub trim: Option<Route>,
}

/// `METHOD /path`, as a profile writes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    pub method: Method,
    pub path: String,
}

/// How to start a host and speak to it. Any host works that serves a skill API on loopback
/// its profile describes and registers skills from a directory; `{skills_dir}` and `{port}`
/// in `args`, `env` values and `files` are replaced by the run's skills directory and port.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HostSpec {
    pub bin: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// The host profile it came from (runs from before profiles: skillhost's).
    #[serde(default = "skillhost_profile")]
    pub profile: String,
    #[serde(default = "skillhost_registry")]
    pub registry: Registry,
    #[serde(default = "skillhost_dialect")]
    pub dialect: Dialect,
    /// Files for a fresh working directory of the host's own (none: skillprof's).
    #[serde(default)]
    pub files: BTreeMap<String, String>,
}

#[derive(
    Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum PythonSample {
    /// sample_py_pydantic: validates its input with pydantic, whose core is native code
    /// compiled to WASI, as the 2024 study's skill did (a 48 MB component).
    Pydantic,
    /// sample_py: the same work, its input checked by hand in pure Python (an 18 MB
    /// component).
    Pure,
}

fn skillhost_profile() -> String {
    HostProfile::skillhost().name
}

fn skillhost_registry() -> Registry {
    HostProfile::skillhost().registry
}

fn skillhost_dialect() -> Dialect {
    HostProfile::skillhost().dialect
}
