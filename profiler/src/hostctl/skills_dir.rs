//! The registry convention shared by every host: `<name>.wasm` in the skills directory
//! registers skill `<name>`; removing the file unregisters it.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

pub struct SkillsDir {
    path: PathBuf,
}

impl SkillsDir {
    /// Creates the directory (empty) if needed.
    pub fn create(path: &Path) -> Result<Self> {
        fs::create_dir_all(path)
            .with_context(|| format!("creating the skills directory {}", path.display()))?;
        Ok(SkillsDir {
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Registers `name` with the component at `source`.
    pub fn add(&self, name: &str, source: &Path) -> Result<()> {
        let bytes = fs::read(source).with_context(|| format!("reading {}", source.display()))?;
        self.add_bytes(name, &bytes)
    }

    /// Registers `name` with these bytes. They are written under a temporary name and
    /// renamed, so a host scanning the directory never sees half a file.
    pub fn add_bytes(&self, name: &str, bytes: &[u8]) -> Result<()> {
        let partial = self.path.join(format!(".{name}.wasm.partial"));
        fs::write(&partial, bytes).with_context(|| format!("writing {}", partial.display()))?;
        fs::rename(&partial, self.file(name))
            .with_context(|| format!("renaming {} into place", partial.display()))?;
        Ok(())
    }

    /// Unregisters `name`. Returns whether it was registered.
    pub fn remove(&self, name: &str) -> Result<bool> {
        match fs::remove_file(self.file(name)) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e).with_context(|| format!("removing skill {name}")),
        }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.path.join(format!("{name}.wasm"))
    }
}
