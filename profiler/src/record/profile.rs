//! Host profiles as data: how to start a host (HostSpec, Start) and how to speak its dialect
//! of the skill API (Dialect, Routes). Read and used by `crate::producers::hostctl`; recorded in meta.json.

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
    /// How the host's pooling allocator is switched on, where it has one without knobs of
    /// its own (`skillprof pool` runs it on and off); skillhost's knobs are its flags.
    #[serde(default)]
    pub pooling: Option<PoolingSwitch>,
}

/// What turns a host's pooling allocator on: its environment, at wasmtime's defaults.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolingSwitch {
    pub env: BTreeMap<String, String>,
}

impl PoolingSwitch {
    /// The variables as a shell sets them: `KEY=VALUE ...`.
    pub fn setting(&self) -> String {
        self.env
            .iter()
            .map(|(key, value)| format!("{key}={value}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Whether a host started with `env` pooled.
    pub fn is_on(&self, env: &[(String, String)]) -> bool {
        self.env
            .iter()
            .all(|(key, value)| env.iter().any(|(k, v)| k == key && v == value))
    }
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
    /// Further worlds whose components the host serves when a user adds them (skillhost
    /// serves wasi:http/proxy components beside its own).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also_serves: Vec<SkillWorld>,
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
    /// A wasi:http proxy (`wasmtime serve`'s): every request runs the skill on its body.
    #[serde(rename = "wasi:http/proxy")]
    WasiHttp,
}

/// How to start the host; `{skills_dir}`, `{address}` (where it listens: loopback, or the
/// load network's host address) and `{port}` are replaced in every string, and
/// `{skill_file}` by the skills directory's one skill file, for a host that serves the one
/// component it is started with (`wasmtime serve`).
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

/// How the host's API names skills, where its routes are, what a request carries and what
/// its answers look like.
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
    /// What an execute request's body holds.
    #[serde(default)]
    pub execute_body: ExecuteBody,
    /// What the listing routes (`skills`, `cached_skills`) answer.
    #[serde(default)]
    pub listing: Listing,
}

/// The body of an execute request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecuteBody {
    /// `{"skill": "<namespace>/<name>", "input": {...}}`, to a route that names no skill.
    #[default]
    Envelope,
    /// The input alone; the route's path names the skill (`{name}` or `{skill}`).
    Input,
}

/// A listing's JSON answer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Listing {
    /// A list of names (`"dev/hello"`, or `"hello"` without a namespace).
    #[default]
    Names,
    /// A list of objects, each naming its skill in this field (`{ objects = "name" }`).
    Objects(String),
}

/// The routes. In a path, `{name}` is the skill's bare name, `{namespace}` the dialect's
/// namespace, `{skill}` both as the host names the skill (`dev/hello`) in one path segment
/// (its `/` percent-encoded); each is percent-encoded. Only `execute` and `drop_cached` take
/// them. A route may end with the statuses that mean success (`-> 200, 204`; default: any
/// 2xx). A host that serves the one component it was started with (a wasi:http host) has no
/// `skills`, `cached_skills` or `drop_cached`: what it runs is fixed at its start, so it
/// serves `skillprof slo` and traffic, not the cmds that add and drop skills.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Routes {
    pub health: Route,
    /// Executes a skill with its input (see [`ExecuteBody`]).
    pub execute: Route,
    /// Answer: the registered skills (see [`Listing`]), in any order.
    #[serde(default)]
    pub skills: Option<Route>,
    /// Answer: the compiled skills, as `skills`.
    #[serde(default)]
    pub cached_skills: Option<Route>,
    /// Drops a skill's compiled copy.
    #[serde(default)]
    pub drop_cached: Option<Route>,
    /// Asks the host's allocator to give its free memory back (the cmds command `trim`).
    /// Without one, `trim` needs `skillprof run --trim-by ptrace`.
    #[serde(default)]
    pub trim: Option<Route>,
}

/// The routes of a host that registers skills while it runs ([`Routes`] has all three or
/// none).
#[derive(Clone, Debug)]
pub struct RegistryRoutes {
    pub skills: Route,
    pub cached_skills: Route,
    pub drop_cached: Route,
}

/// `METHOD /path` or `METHOD /path -> STATUS, ...`, as a profile writes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    pub method: Method,
    pub path: String,
    /// The statuses that mean success; empty: any 2xx.
    pub success: Vec<u16>,
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
    /// The CPUs the host may run on (`--host-cpus`; absent: every CPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<crate::ground::cpus::CpuList>,
    /// Where the binary's bytes are read, when not at `bin`: `/proc/PID/exe` for a host
    /// attached to, which opens the file the process runs even from another mount namespace
    /// (a host in a container), where `bin`, its path as the process sees it, may not exist.
    #[serde(skip)]
    pub file: Option<PathBuf>,
}

impl HostSpec {
    /// The path that opens the host's binary, from skillprof's mount namespace.
    pub fn binary_file(&self) -> &std::path::Path {
        self.file.as_deref().unwrap_or(&self.bin)
    }
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
