//! `meta.json`: what a run was (machine, host, workload, configuration, probes) and how it
//! ended. Written when the run starts and rewritten as it ends, always atomically, so a
//! reader never sees half a file and a crashed run still says it was running.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;

use crate::record::RunInfo;

/// The file's name in a run folder.
pub const FILE: &str = "meta.json";

/// The meta.json of the run folder `folder`.
pub fn read(folder: &Path) -> Result<RunInfo> {
    let path = folder.join(FILE);
    let text = fs::read_to_string(&path).with_context(|| {
        format!(
            "{} has no readable meta.json: is it a skillprof run folder?",
            folder.display()
        )
    })?;
    serde_json::from_str(&text).with_context(|| {
        format!(
            "reading {} (a run of another skillprof version? this one reads the meta.json it \
             writes)",
            path.display()
        )
    })
}

/// A run's meta.json and the info it holds: the run changes `info`, then saves it at each
/// moment a reader should see (the run set up, the host up, probes attached, the end).
pub struct MetaFile {
    path: PathBuf,
    pub info: RunInfo,
}

impl MetaFile {
    /// The first meta.json of the run folder `folder`.
    pub fn create(folder: &Path, info: RunInfo) -> Result<MetaFile> {
        let meta = MetaFile {
            path: folder.join(FILE),
            info,
        };
        meta.save()?;
        Ok(meta)
    }

    pub fn save(&self) -> Result<()> {
        write(&self.path, &self.info)
    }
}

pub fn write(path: &Path, meta: &impl Serialize) -> Result<()> {
    let text = serde_json::to_string_pretty(meta)? + "\n";
    let partial = PathBuf::from(format!("{}.partial", path.display()));
    if let Err(error) = fs::write(&partial, text) {
        // The meta.json before stays whole; a partial file beside it would only mislead.
        let _ = fs::remove_file(&partial);
        return Err(error).with_context(|| format!("writing {}", partial.display()));
    }
    fs::rename(&partial, path).with_context(|| format!("renaming {} into place", partial.display()))
}
