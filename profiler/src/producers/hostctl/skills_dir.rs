//! A host's skills directory: writing skill `<name>`'s file (as the host profile's
//! registry names it, `<name>.wasm` for both that ship) registers it; removing the file
//! unregisters it.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::record::profile::{PythonSample, Registry, SkillWorld};

pub struct SkillsDir {
    path: PathBuf,
    registry: Registry,
}

impl SkillsDir {
    /// The skills directory of a host started for a run folder.
    pub fn of_run(run_folder: &Path) -> PathBuf {
        run_folder.join("skills")
    }

    /// Creates the directory (empty) if needed.
    pub fn create(path: &Path, registry: Registry) -> Result<Self> {
        fs::create_dir_all(path)
            .with_context(|| format!("creating the skills directory {}", path.display()))?;
        // Absolute: a host that runs in a working directory of its own (the 2025 engine)
        // would read a relative one from there.
        let path = fs::canonicalize(path)
            .with_context(|| format!("resolving the skills directory {}", path.display()))?;
        Ok(SkillsDir::open(&path, registry))
    }

    /// A directory that exists already: an attached host's, which holds its own skills too.
    pub fn open(path: &Path, registry: Registry) -> Self {
        SkillsDir {
            path: path.to_path_buf(),
            registry,
        }
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
        let partial = self
            .path
            .join(format!(".{}.partial", self.registry.file_of(name)));
        fs::write(&partial, bytes).with_context(|| format!("writing {}", partial.display()))?;
        fs::rename(&partial, self.file(name))
            .with_context(|| format!("renaming {} into place", partial.display()))?;
        Ok(())
    }

    /// Starts writing `name`'s file in place, as the 2024 harness copied (`--no-atomic-copy`):
    /// the first half now, the rest when the returned copy is finished. Written in between,
    /// a scanning host sees the half-written file every time, not once in a while.
    pub fn begin_in_place(&self, name: &str, source: &Path) -> Result<HalfCopied> {
        let mut bytes =
            fs::read(source).with_context(|| format!("reading {}", source.display()))?;
        let path = self.file(name);
        let rest = bytes.split_off(bytes.len() / 2);
        let mut file =
            fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        file.write_all(&bytes)
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(HalfCopied { file, rest, path })
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
        self.path.join(self.registry.file_of(name))
    }
}

/// A skill file written in place, its first half so far.
pub struct HalfCopied {
    file: fs::File,
    rest: Vec<u8>,
    path: PathBuf,
}

impl HalfCopied {
    pub fn finish(mut self) -> Result<()> {
        self.file
            .write_all(&self.rest)
            .with_context(|| format!("writing {}", self.path.display()))
    }
}

/// Which Python sample `add_py` registers.
impl PythonSample {
    /// Its component's name in build/skills.
    pub fn component(self) -> &'static str {
        match self {
            PythonSample::Pydantic => "sample_py_pydantic",
            PythonSample::Pure => "sample_py",
        }
    }
}

/// Where the sample skill components of one world are (`cargo xtask build-skills` writes
/// them to `build/skills/` in the repository, those of `pharia:skill` to its
/// `pharia-skill/`).
pub struct SampleSkills {
    dir: PathBuf,
}

/// A sample skill's input: greet TOPIC after allocating MEMORY_KB and sleeping WAIT_MS (see
/// cmds/README.md). Every request skillprof sends, its own or Locust's, carries this.
pub fn sample_input(topic: &str, memory_kb: u64, wait_ms: u64) -> serde_json::Value {
    serde_json::json!({ "topic": topic, "memory": memory_kb, "wait_time": wait_ms })
}

impl SampleSkills {
    /// `world`'s components under `dir`, laid out as build/skills is.
    pub fn new(dir: &Path, world: SkillWorld) -> Self {
        SampleSkills {
            dir: dir.join(world.samples_folder()),
        }
    }

    /// `world`'s components in `build/skills` of the repository whose `target/<profile>/`
    /// holds the running executable.
    pub fn beside_executable(world: SkillWorld) -> Result<Self> {
        // An installed skillprof has no checkout above it: say the flag that replaces one.
        let dir = Self::build_path("skills")
            .context("finding the sample skills: pass --samples DIR")?
            .join(world.samples_folder());
        anyhow::ensure!(
            dir.is_dir(),
            "{} is missing: run `cargo xtask build-skills`, or pass --samples DIR",
            dir.display()
        );
        Ok(SampleSkills { dir })
    }

    /// `relative` under the `build/` of the repository whose `target/<profile>/` holds the
    /// running executable (test executables sit one level deeper, in `deps/`; cargo's own
    /// `target/<profile>/build/` is not it).
    pub fn build_path(relative: &str) -> Result<PathBuf> {
        let exe = std::env::current_exe().context("locating the running executable")?;
        exe.ancestors()
            .skip(1)
            .take(4)
            .find(|dir| dir.join("Cargo.toml").is_file() && dir.join("build").is_dir())
            .map(|root| root.join("build").join(relative))
            .with_context(|| {
                format!(
                    "no build folder above {}: run scripts/setup.sh and `cargo xtask build-skills`",
                    exe.display()
                )
            })
    }

    /// The component of sample `name` (`sample_py`, `sample_rs`, `hello`, `trap`).
    pub fn path(&self, name: &str) -> Result<PathBuf> {
        let path = self.dir.join(format!("{name}.wasm"));
        anyhow::ensure!(
            path.is_file(),
            "{} is missing: run `cargo xtask build-skills`",
            path.display()
        );
        Ok(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relative_directory_is_given_to_hosts_as_an_absolute_one() {
        let dir = tempfile::tempdir_in(".").unwrap();
        let relative = dir
            .path()
            .strip_prefix(std::env::current_dir().unwrap())
            .unwrap();
        assert!(relative.is_relative());
        let registry = Registry {
            file: "{name}.wasm".into(),
            world: SkillWorld::Skillprof,
            also_serves: Vec::new(),
        };
        let skills = SkillsDir::create(&relative.join("skills"), registry).unwrap();
        assert!(skills.path().is_absolute(), "{}", skills.path().display());
        assert_eq!(
            skills.path(),
            dir.path().canonicalize().unwrap().join("skills")
        );
    }
}
