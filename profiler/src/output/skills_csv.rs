//! `skills.csv`: one row per entry × skill × phase, from the probes' skill rows
//! (`probes::markers::SkillRow`): what each skill's compiles, instantiations and calls cost
//! in faults and address-space syscalls, and the unattributed `host` row. Within an entry the
//! rows sum to the entry's own counts in commands.csv. Written only when the host had
//! markers.

use std::fs::File;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::probes::markers::SkillRow;
use crate::record::Row;

pub const FILE: &str = "skills.csv";

pub struct SkillsCsv {
    path: PathBuf,
    /// Created with the first rows: a run without markers has no skills.csv.
    out: Option<csv::Writer<File>>,
}

impl SkillsCsv {
    pub fn new(folder: &Path) -> Self {
        SkillsCsv {
            path: folder.join(FILE),
            out: None,
        }
    }

    /// Writes one entry's rows and flushes them, so a crash loses nothing already measured.
    pub fn write(&mut self, index: usize, cmd: &str, rows: &[SkillRow]) -> Result<()> {
        for skill in rows {
            let mut row = Row::default();
            row.int("entry", index as i128).text("cmd", cmd);
            skill.write_cells(&mut row);
            let out = match &mut self.out {
                Some(out) => out,
                None => {
                    let file = File::create(&self.path)
                        .with_context(|| format!("creating {}", self.path.display()))?;
                    let mut out = csv::Writer::from_writer(file);
                    out.write_record(row.names())?;
                    self.out.insert(out)
                }
            };
            out.write_record(row.values())?;
        }
        if let Some(out) = &mut self.out {
            out.flush()
                .with_context(|| format!("writing {}", self.path.display()))?;
        }
        Ok(())
    }
}
