//! meta.json of a pressure run: what the experiment was, what it changed on the machine, and
//! how each band ended. Written as the run goes and read back typed.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::ground::machine::Machine;
use crate::record::probes::ProbeStatus;

/// The value of `kind`, which tells a pressure run's meta.json from a `skillprof run`'s.
pub const KIND: &str = "pressure";

#[derive(Debug, Serialize, Deserialize)]
pub struct PressureInfo {
    pub skillprof_version: String,
    pub kind: String,
    pub run: String,
    pub started: String,
    pub finished: Option<String>,
    pub status: PressureStatus,
    pub reason: Option<String>,
    pub command: Vec<String>,
    pub machine: Machine,
    /// What "free" and "watermark" meant for the bands, in words.
    pub bands_defined_on: String,
    pub levels: Vec<String>,
    pub iterations: u32,
    pub block_bytes: Option<u64>,
    pub margin_percent: u64,
    pub psi_full_max: f64,
    pub watermark_scale_factor: SysctlSetting,
    /// `--boost-factor`; absent where the kernel has no watermark boost (before 5.0), and in
    /// runs made before skillprof could set it.
    #[serde(default)]
    pub watermark_boost_factor: Option<SysctlSetting>,
    pub min_free_kbytes: String,
    pub swapfile: Option<SwapInfo>,
    /// `--page-cache`: the file kept hot, its size, and how often it was read through.
    pub page_cache: Option<PageCacheInfo>,
    pub cpus: Option<Vec<usize>>,
    pub probes: ProbesInfo,
    /// Processes skillprof forked; none may outlive it.
    pub balloon_pid: Option<u32>,
    pub guardian_pids: Vec<u32>,
    pub bands: Vec<BandSummary>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PressureStatus {
    Running,
    /// Every band held.
    Complete,
    /// A band was given up for the machine's safety (`--margin-percent`, `--psi-full-max`).
    Aborted,
    /// A band could not be reached in `--settle-timeout-s`.
    NotReached,
    Interrupted,
    /// An error ended the run; `reason` says which.
    Failed,
}

/// A sysctl the experiment may set: its value before, and what it was set to (`None`: left).
#[derive(Debug, Serialize, Deserialize)]
pub struct SysctlSetting {
    pub before: String,
    pub during: Option<u32>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct SwapInfo {
    pub path: PathBuf,
    pub bytes: u64,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct PageCacheInfo {
    pub path: PathBuf,
    pub bytes: u64,
    pub passes: u64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct ProbesInfo {
    pub loaded: bool,
    /// Why not, when they were wanted.
    pub error: Option<String>,
    pub statuses: Vec<ProbeStatus>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct BandSummary {
    pub band: String,
    pub outcome: String,
    pub reason: String,
}

/// The meta.json of the pressure run in `folder`.
pub fn read(folder: &Path) -> Result<PressureInfo> {
    let path = folder.join(crate::views::output::meta::FILE);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("{} has no readable meta.json", folder.display()))?;
    serde_json::from_str(&text)
        .with_context(|| format!("reading {} as a pressure run's", path.display()))
}
