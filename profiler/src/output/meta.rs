//! `meta.json`: what a run was (machine, host, workload, configuration, probes) and how it
//! ended. Written when the run starts and rewritten as it ends, always atomically, so a
//! reader never sees half a file and a crashed run still says it was running.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;

pub fn write(path: &Path, meta: &impl Serialize) -> Result<()> {
    let text = serde_json::to_string_pretty(meta)? + "\n";
    let partial = PathBuf::from(format!("{}.partial", path.display()));
    fs::write(&partial, text).with_context(|| format!("writing {}", partial.display()))?;
    fs::rename(&partial, path).with_context(|| format!("renaming {} into place", partial.display()))
}
