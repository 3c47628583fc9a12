//! The record of a run's facts, which meta.json holds: what ran where, how it was
//! configured, and how it ended. The runner fills it in as it goes and rewrites the file at
//! each change of state; the report reads it back as the same type.

use serde::{Deserialize, Serialize};

use super::memcg::Version;
use super::probes::{ProbeCosts, ProbeMode, ProbeStatus, Tracefs};
use super::profile::{HostSpec, PythonSample};
use crate::ground::machine::Machine;

#[derive(Debug, Serialize, Deserialize)]
pub struct RunInfo {
    pub skillprof_version: String,
    /// The run's name: `YYMMDD_HHMMSS.mmm`, local time.
    pub run: String,
    pub started: String,
    pub finished: Option<String>,
    pub status: Status,
    /// Why the run is incomplete.
    pub reason: Option<String>,
    pub entries_run: usize,
    /// `index: cmd` of every entry that did not run to its end.
    pub entries_not_run: Vec<String>,
    /// Requests that failed, over all entries.
    pub request_errors: u64,
    pub machine: Machine,
    pub host: HostInfo,
    pub cmds: CmdsInfo,
    /// The component `add_py` registered (absent in runs from before the choice existed:
    /// those used the pure-Python one).
    #[serde(default)]
    pub python_sample: Option<PythonSample>,
    /// Skill files were renamed into place; false under `--no-atomic-copy` (runs from before
    /// it: renamed).
    #[serde(default = "renamed")]
    pub atomic_copy: bool,
    pub sampling_interval_ms: u64,
    /// CPU time the sampler thread spent reading procfs: part of the profiler's own cost.
    pub sampler_cpu_ms: Option<f64>,
    /// Which probe attached by which mechanism, and what they cost.
    pub probes: Option<ProbesInfo>,
    /// The band `--pressure` held from the start, and what went wrong holding bands.
    pub pressure: Option<String>,
    pub pressure_notes: Vec<String>,
    pub pressure_balloon_pids: Vec<u32>,
    /// `--scale-factor`: vm.watermark_scale_factor before and during the run.
    pub scale_factor: Option<SysctlDuring>,
    /// `--boost-factor`: vm.watermark_boost_factor before and during the run.
    #[serde(default)]
    pub boost_factor: Option<SysctlDuring>,
    /// `--max-map-count`: vm.max_map_count before and during the run.
    #[serde(default)]
    pub max_map_count: Option<SysctlDuring>,
    /// `--overcommit-memory`: vm.overcommit_memory before and during the run.
    #[serde(default)]
    pub overcommit_memory: Option<SysctlDuring>,
    /// The processes that restore what the run changed, should it end without doing so.
    pub guardian_pids: Vec<u32>,
    /// `--memory-max`: the host's memory cgroup.
    #[serde(default)]
    pub memory_cgroup: Option<CgroupInfo>,
    /// `l_execute_all`, `lo_execute`: what the run made for Locust, all removed at the end.
    #[serde(default)]
    pub load: Option<LoadInfo>,
    /// The OOM killer took the host: how we know (the cgroup's or the machine's count).
    #[serde(default)]
    pub oom_killed: Option<String>,
    /// How rss_peak_kb was measured: the kernel's high-water mark, reset at each entry's
    /// start (on an attached host too, which this says), or the samples alone, and why.
    #[serde(default)]
    pub rss_peak: Option<String>,
    /// How `trim` lines reached the host's allocator (a workload with `trim` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trim_by: Option<super::host::TrimBy>,
    /// `--cores N`: the machine whose parallelism the host was given (runs without it, and
    /// from before it: this machine's).
    #[serde(default)]
    pub cores: Option<super::host::Cores>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CgroupInfo {
    pub dir: String,
    pub version: Version,
    pub limit_bytes: u64,
}

/// The load network and Locust's cgroup.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LoadInfo {
    #[serde(flatten)]
    pub network: super::locust::NetworkInfo,
    pub cgroup: String,
    pub locust: String,
}

/// A sysctl the run changed: its value before, and the run's.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SysctlDuring {
    pub before: String,
    pub during: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Running,
    Complete,
    Incomplete,
}

impl Status {
    /// As meta.json spells it.
    pub fn name(self) -> &'static str {
        match self {
            Status::Running => "running",
            Status::Complete => "complete",
            Status::Incomplete => "incomplete",
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct HostInfo {
    #[serde(flatten)]
    pub spec: HostSpec,
    /// SHA-1 of the binary, as in the harness log.
    pub sha1: String,
    pub modified: String,
    pub pid: Option<u32>,
    pub address: Option<String>,
    /// The host's effective configuration from `GET /config`, when it offers one
    /// (skillhost does; other hosts may not).
    pub config: Option<serde_json::Value>,
    /// Attached to with `--attach`, not started by skillprof (runs from before: started).
    #[serde(default)]
    pub attached: bool,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct CmdsInfo {
    /// As given on the command line.
    pub file: String,
    pub hash: String,
    pub modified: String,
    pub entries: usize,
}

/// What meta.json says about the probes.
#[derive(Debug, Serialize, Deserialize)]
pub struct ProbesInfo {
    pub enabled: bool,
    /// Which programs ran (absent in runs before the modes were named, and with probes off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<ProbeMode>,
    /// Why that mode, where skillprof chose it by the kernel (a lab run no flag decides).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode_why: Option<String>,
    pub tracefs: Option<Tracefs>,
    pub statuses: Vec<ProbeStatus>,
    /// The profiler's own cost, read at the end of the run.
    pub costs: Option<ProbeCosts>,
    /// The time profile's samples checked against the kernel's count of each thread's CPU
    /// time, read at the end of the run (absent without the profile clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile_check: Option<super::time::ProfileCheck>,
}

fn renamed() -> bool {
    true
}
