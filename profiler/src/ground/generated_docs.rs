//! Sections of the docs that are made from the code (docs/columns.md from the field table,
//! docs/cli.md from the clap definitions): a test compares each with what the code makes now,
//! and rewrites it when SKILLPROF_BLESS is set.

use std::path::{Path, PathBuf};

/// A generated section of a Markdown file, between two marker comments: a test checks it is
/// current, and rewrites it when SKILLPROF_BLESS is set.
pub struct Generated {
    /// Repository-relative.
    pub file: &'static str,
    /// The section's marker, as in `<!-- generated: NAME -->` and `<!-- end: NAME -->`.
    pub name: &'static str,
    /// The command that rewrites it, for the stale message.
    pub bless: &'static str,
}

impl Generated {
    fn path(&self) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(self.file)
    }

    /// `Ok` when the section holds `content`; rewritten instead with SKILLPROF_BLESS set.
    pub fn check(&self, content: &str) -> Result<(), String> {
        let path = self.path();
        let text = std::fs::read_to_string(&path)
            .map_err(|error| format!("reading {}: {error}", path.display()))?;
        let begin = format!("<!-- generated: {} -->\n", self.name);
        let end = format!("<!-- end: {} -->", self.name);
        let start = text
            .find(&begin)
            .ok_or_else(|| format!("{} has no {begin:?} marker", self.file))?
            + begin.len();
        let stop = start
            + text[start..]
                .find(&end)
                .ok_or_else(|| format!("{} has no {end:?} marker", self.file))?;
        if std::env::var_os("SKILLPROF_BLESS").is_some() {
            let blessed = format!("{}{content}{}", &text[..start], &text[stop..]);
            return std::fs::write(&path, blessed)
                .map_err(|error| format!("writing {}: {error}", path.display()));
        }
        if text[start..stop] == *content {
            Ok(())
        } else {
            Err(format!(
                "{} is stale (its {} section): run `{}`",
                self.file, self.name, self.bless
            ))
        }
    }
}
