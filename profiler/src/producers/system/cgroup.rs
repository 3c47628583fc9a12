//! A memory cgroup of the host's own (`skillprof run --memory-max SIZE`): a limit to fill
//! against, and the kernel's own account of what the host was charged, how often it hit the
//! limit and whether the OOM killer took it.
//!
//! The cgroup stays inside any limit skillprof itself runs under: in v1 (which holds the
//! memory controller on this kind of machine) it is a child of skillprof's own memory
//! cgroup; in v2, whose rule against processes in inner cgroups forbids that, a sibling. A guardian process
//! removes it on every way skillprof ends, SIGKILL included, killing what is left inside.

use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::ground::keyed;
use crate::producers::system::guardian::{Guardian, Restore};

use crate::record::memcg::{MemcgStat, Version};

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Version::V1 => "cgroup v1",
            Version::V2 => "cgroup v2",
        })
    }
}

/// A cgroup of skillprof's making in the memory hierarchy, until [`Cgroup::remove`] (or
/// drop, through the guardian, which kills what is left inside).
pub struct Cgroup {
    dir: PathBuf,
    version: Version,
    guardian: Guardian,
}

/// Where each hierarchy is mounted on machines like this one.
const V2_ROOTS: [&str; 2] = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"];
const V1_ROOT: &str = "/sys/fs/cgroup/memory";

impl Cgroup {
    /// Makes `name` beside or under skillprof's own memory cgroup; `what` names it in the
    /// guardian's messages.
    pub fn create(name: &str, what: &str) -> Result<Cgroup> {
        let (version, parent) = parent_for_host()?;
        let dir = parent.join(name);
        // In v2 a child has the memory controller only if its parent enables it for its
        // children (the root, where a fresh machine's processes may live, often does not).
        let control = parent.join("cgroup.subtree_control");
        let enable = version == Version::V2
            && !fs::read_to_string(&control)
                .with_context(|| format!("reading {}", control.display()))?
                .split_whitespace()
                .any(|controller| controller == "memory");
        // The guardian first: it undoes whichever of the two changes below were made.
        let guardian = Guardian::protect(
            Restore::cgroup(&dir, enable.then_some(control.as_path()))?,
            &format!(
                "{what} {} (removed){}",
                dir.display(),
                if enable {
                    format!(", and the memory controller in {}", control.display())
                } else {
                    String::new()
                }
            ),
        )?;
        if enable {
            fs::write(&control, "+memory").with_context(|| {
                format!("enabling the memory controller in {}", control.display())
            })?;
        }
        fs::create_dir(&dir)
            .with_context(|| format!("making the cgroup {} (needs root)", dir.display()))?;
        Ok(Cgroup {
            dir,
            version,
            guardian,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn version(&self) -> Version {
        self.version
    }

    pub fn guardian_pid(&self) -> Option<u32> {
        self.guardian.pid()
    }

    /// Its process list, opened for writing: a child that writes "0" to it joins the cgroup
    /// before it execs, so that all it ever does is charged here.
    pub fn procs(&self) -> Result<File> {
        let path = self.dir.join("cgroup.procs");
        OpenOptions::new()
            .write(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))
    }

    /// Removes the cgroup (killing anything left in it) and waits until it is gone.
    pub fn remove(self) -> Result<()> {
        let dir = self.dir.clone();
        self.guardian.restore()?;
        if dir.exists() {
            bail!("the cgroup {} is still there", dir.display());
        }
        Ok(())
    }

    fn write(&self, file: &str, value: &str) -> Result<()> {
        let path = self.dir.join(file);
        fs::write(&path, value).with_context(|| format!("writing {value} to {}", path.display()))
    }
}

/// The host's memory cgroup, with its hard limit.
pub struct MemoryCgroup {
    cgroup: Cgroup,
    limit_bytes: u64,
}

impl MemoryCgroup {
    /// Makes `name` beside or under skillprof's own memory cgroup, with `limit_bytes` as its
    /// hard limit.
    pub fn create(name: &str, limit_bytes: u64) -> Result<MemoryCgroup> {
        let cgroup =
            Cgroup::create(name, "the host's memory cgroup").context("--memory-max needs root")?;
        let limit = match cgroup.version {
            Version::V1 => "memory.limit_in_bytes",
            Version::V2 => "memory.max",
        };
        cgroup.write(limit, &limit_bytes.to_string())?;
        if cgroup.version == Version::V2 {
            // No swap to escape into: the limit is the limit, as v1 without memsw has it.
            let _ = cgroup.write("memory.swap.max", "0");
        }
        Ok(MemoryCgroup {
            cgroup,
            limit_bytes,
        })
    }

    pub fn cgroup(&self) -> &Cgroup {
        &self.cgroup
    }

    pub fn limit_bytes(&self) -> u64 {
        self.limit_bytes
    }

    pub fn read(&self) -> Result<MemcgStat> {
        read_stat(self.cgroup.dir(), self.cgroup.version)
    }

    /// Starts the peak afresh from the usage now (v1: `memory.max_usage_in_bytes`), so that
    /// an entry's peak is its own. v2's `memory.peak` cannot be reset for every reader: there
    /// the peak stays the run's.
    pub fn reset_peak(&self) -> Result<()> {
        match self.cgroup.version {
            Version::V1 => self.cgroup.write("memory.max_usage_in_bytes", "0"),
            Version::V2 => Ok(()),
        }
    }

    pub fn remove(self) -> Result<()> {
        self.cgroup.remove()
    }
}

/// The kernel's account of the memory cgroup at `dir`.
fn read_stat(dir: &Path, version: Version) -> Result<MemcgStat> {
    let read = |file: &str| -> Result<String> {
        let path = dir.join(file);
        fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
    };
    let number = |file: &str| -> Result<u64> {
        let text = read(file)?;
        text.trim()
            .parse()
            .with_context(|| format!("{file} holds {text:?}"))
    };
    let key =
        |file: &str, key: &str| -> Result<u64> { Ok(keyed::value(&read(file)?, key).unwrap_or(0)) };
    Ok(match version {
        Version::V1 => MemcgStat {
            usage_bytes: number("memory.usage_in_bytes")?,
            peak_bytes: number("memory.max_usage_in_bytes")?,
            limit_hits: number("memory.failcnt")?,
            oom_kills: key("memory.oom_control", "oom_kill")?,
        },
        Version::V2 => MemcgStat {
            usage_bytes: number("memory.current")?,
            // memory.peak came with 5.19; before it, the usage is the best known.
            peak_bytes: number("memory.peak").or_else(|_| number("memory.current"))?,
            limit_hits: key("memory.events", "max")?,
            oom_kills: key("memory.events", "oom_kill")?,
        },
    })
}

/// The memory cgroup a running process is charged to, which skillprof only reads (`watch`).
pub struct ChargedTo {
    dir: PathBuf,
    version: Version,
    /// As /proc/PID/cgroup names it.
    path: String,
}

impl ChargedTo {
    /// Process `pid`'s memory cgroup; `None` without one (no memory controller, the root
    /// cgroup, the process gone).
    pub fn of(pid: u32) -> Option<ChargedTo> {
        let text = fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        // The root's account is the machine's, not a limit of the process's own.
        let below_root = |path: &&str| *path != "/";
        if let Some(path) = cgroup_path(&text, "").filter(below_root) {
            for root in V2_ROOTS {
                let dir = under(root, path);
                if dir.join("memory.current").exists() {
                    return Some(ChargedTo {
                        dir,
                        version: Version::V2,
                        path: path.to_owned(),
                    });
                }
            }
        }
        let path = cgroup_path(&text, "memory").filter(below_root)?;
        let dir = under(V1_ROOT, path);
        dir.join("memory.usage_in_bytes")
            .exists()
            .then(|| ChargedTo {
                dir,
                version: Version::V1,
                path: path.to_owned(),
            })
    }

    /// The cgroup's path in its hierarchy, as /proc/PID/cgroup names it.
    pub fn path(&self) -> &str {
        &self.path
    }

    pub fn read(&self) -> Result<MemcgStat> {
        read_stat(&self.dir, self.version)
    }

    /// Its hard limit, `None` when it has none (v2 `max`, v1's page-counter maximum).
    pub fn limit_bytes(&self) -> Option<u64> {
        let file = match self.version {
            Version::V1 => "memory.limit_in_bytes",
            Version::V2 => "memory.max",
        };
        let limit: u64 = fs::read_to_string(self.dir.join(file))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        (limit < 1 << 62).then_some(limit)
    }
}

/// The hierarchy with the memory controller, and the cgroup to make the host's in.
fn parent_for_host() -> Result<(Version, PathBuf)> {
    let own = fs::read_to_string("/proc/self/cgroup").context("reading /proc/self/cgroup")?;
    if let Some(path) = cgroup_path(&own, "") {
        for root in V2_ROOTS {
            let dir = under(root, path);
            let has_memory = fs::read_to_string(dir.join("cgroup.controllers"))
                .is_ok_and(|text| text.split_whitespace().any(|c| c == "memory"));
            if has_memory {
                // The root has no siblings, and may hold processes and children at once.
                let parent = dir.parent().filter(|_| path != "/").unwrap_or(&dir);
                return Ok((Version::V2, parent.to_path_buf()));
            }
        }
    }
    match cgroup_path(&own, "memory") {
        Some(path) if Path::new(V1_ROOT).is_dir() => Ok((Version::V1, under(V1_ROOT, path))),
        _ => bail!(
            "no memory cgroup controller to make a cgroup in: none in {} or {V1_ROOT}",
            V2_ROOTS.join(" or ")
        ),
    }
}

/// The path of the `controller` line of /proc/self/cgroup (`""`: the v2 line, `0::/path`).
fn cgroup_path<'a>(own: &'a str, controller: &str) -> Option<&'a str> {
    own.lines().find_map(|line| {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        let matches = if controller.is_empty() {
            controllers.is_empty()
        } else {
            controllers.split(',').any(|c| c == controller)
        };
        matches.then_some(path)
    })
}

fn under(root: &str, path: &str) -> PathBuf {
    Path::new(root).join(path.trim_start_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_its_own_cgroup_per_controller() {
        let own = "9:name=systemd:/\n4:memory:/process_api/934\n2:cpu,cpuacct:/\n0::/\n";
        assert_eq!(cgroup_path(own, "memory"), Some("/process_api/934"));
        assert_eq!(cgroup_path(own, "cpuacct"), Some("/"));
        assert_eq!(cgroup_path(own, ""), Some("/"));
        assert_eq!(
            under(V1_ROOT, "/process_api/934"),
            Path::new("/sys/fs/cgroup/memory/process_api/934")
        );
    }

    #[test]
    fn reads_keyed_counters() {
        let oom_control = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n";
        assert_eq!(keyed::value(oom_control, "oom_kill"), Some(3));
        let events = "low 0\nhigh 0\nmax 17\noom 2\noom_kill 1\n";
        assert_eq!(keyed::value(events, "max"), Some(17));
        assert_eq!(keyed::value(events, "oom_group_kill"), None);
    }
}
