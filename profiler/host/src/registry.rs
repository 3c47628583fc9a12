//! The skills directory is the registry: `<name>.wasm` registers `<name>`. A scanner
//! re-reads the directory every interval; each skill is compiled lazily, once, on its first
//! request, and stays compiled until evicted or until its file changes.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::compile::{CompiledSkill, Compiler, Origin};
use crate::config::Api;
use crate::config::Compiling;
use crate::heap;
use crate::marks::{PHASE_COMPILE, SkillTag, Work};
use crate::names;

pub struct Registry {
    dir: PathBuf,
    compiler: Arc<Compiler>,
    trim_after_compile: bool,
    /// `--max-concurrent-compiles`: a permit per compile in flight.
    compile_slots: Option<tokio::sync::Semaphore>,
    /// The 2024 dialect's skill store ([`crate::dialect::Api::one_store_actor`]): held by
    /// every lookup, so a compile holds up requests for compiled skills too.
    store_actor: Option<tokio::sync::Mutex<()>>,
    /// The 2025 dialect's evictions ([`crate::dialect::Api::frees_evicted_later`]): held
    /// until the next lookup.
    evicted: Option<Mutex<Vec<Arc<CompiledSkill>>>>,
    skills: RwLock<BTreeMap<String, Arc<Slot>>>,
    /// Files already reported as unusable, so each is reported once, not every scan.
    reported: Mutex<BTreeSet<String>>,
}

/// One registered skill. A changed file gets a new slot, so a slot's state always
/// describes the bytes it was registered with.
pub struct Slot {
    pub name: String,
    /// What markers call this registration.
    pub tag: SkillTag,
    path: PathBuf,
    stamp: FileStamp,
    state: Mutex<State>,
    /// Serialises compilation: concurrent first requests wait for one compile.
    compiling: tokio::sync::Mutex<()>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
struct FileStamp {
    len: u64,
    modified: Option<SystemTime>,
}

#[derive(Clone)]
enum State {
    Registered,
    Compiled(Arc<CompiledSkill>),
    Failed(String),
}

/// What `GET /skills/{name}` reports.
#[derive(Serialize)]
pub struct SkillStatus {
    pub name: String,
    pub state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin: Option<Origin>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

impl Registry {
    pub fn new(dir: &Path, compiler: Arc<Compiler>, compiling: Compiling, api: Api) -> Self {
        Registry {
            dir: dir.to_path_buf(),
            compiler,
            trim_after_compile: compiling.trim_after_compile,
            compile_slots: (compiling.max_concurrent_compiles > 0)
                .then(|| tokio::sync::Semaphore::new(compiling.max_concurrent_compiles)),
            store_actor: api.one_store_actor().then(|| tokio::sync::Mutex::new(())),
            evicted: api.frees_evicted_later().then(|| Mutex::new(Vec::new())),
            skills: RwLock::new(BTreeMap::new()),
            reported: Mutex::new(BTreeSet::new()),
        }
    }

    /// Re-reads the directory. Blocking, but a directory listing is microseconds.
    pub fn scan(&self) -> std::io::Result<()> {
        let mut found = BTreeMap::new();
        for entry in fs::read_dir(&self.dir)? {
            let path = entry?.path();
            if path.extension().is_none_or(|ext| ext != "wasm") {
                continue;
            }
            let Some(name) = path.file_stem().and_then(|s| s.to_str()).map(str::to_owned) else {
                continue;
            };
            if let Err(why) = names::validate(&name) {
                self.report_once(&name, &format!("ignoring {}: {why}", path.display()));
                continue;
            }
            // A file removed between listing and stat is simply not registered this time.
            if let Ok(meta) = fs::metadata(&path) {
                let stamp = FileStamp {
                    len: meta.len(),
                    modified: meta.modified().ok(),
                };
                found.insert(name, (path, stamp));
            }
        }

        let mut skills = self.skills.write().unwrap();
        skills.retain(|name, _| found.contains_key(name));
        for (name, (path, stamp)) in found {
            let unchanged = skills.get(&name).is_some_and(|slot| slot.stamp == stamp);
            if !unchanged {
                let slot = Slot {
                    tag: SkillTag::new(&name),
                    name: name.clone(),
                    path,
                    stamp,
                    state: Mutex::new(State::Registered),
                    compiling: tokio::sync::Mutex::new(()),
                };
                skills.insert(name, Arc::new(slot));
            }
        }
        Ok(())
    }

    /// Scans every `interval` until the process ends.
    pub async fn watch(self: Arc<Self>, interval: Duration) {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            if let Err(error) = self.scan() {
                self.report_once("", &format!("cannot read {}: {error}", self.dir.display()));
            }
        }
    }

    fn report_once(&self, key: &str, message: &str) {
        if self.reported.lock().unwrap().insert(key.to_owned()) {
            eprintln!("skillhost: {message}");
        }
    }

    pub fn get(&self, name: &str) -> Option<Arc<Slot>> {
        self.skills.read().unwrap().get(name).cloned()
    }

    /// Registered names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.skills.read().unwrap().keys().cloned().collect()
    }

    /// Compiled names, sorted.
    pub fn cached_names(&self) -> Vec<String> {
        self.slots()
            .filter(|slot| slot.compiled().is_some())
            .map(|slot| slot.name.clone())
            .collect()
    }

    pub fn count_failed(&self) -> usize {
        self.slots()
            .filter(|slot| matches!(*slot.state.lock().unwrap(), State::Failed(_)))
            .count()
    }

    fn slots(&self) -> impl Iterator<Item = Arc<Slot>> {
        self.skills
            .read()
            .unwrap()
            .values()
            .cloned()
            .collect::<Vec<_>>()
            .into_iter()
    }

    /// The skill's compiled form, compiling it now if this is its first request. A skill
    /// that failed to compile keeps failing with the same reason until its file changes.
    pub async fn compiled(&self, slot: &Slot, work: &Work) -> Result<Arc<CompiledSkill>, String> {
        let _store = match &self.store_actor {
            Some(actor) => Some(actor.lock().await),
            None => None,
        };
        if let Some(evicted) = &self.evicted {
            evicted.lock().unwrap().clear();
        }
        if let Some(compiled) = slot.compiled() {
            return Ok(compiled);
        }
        let _only_one = slot.compiling.lock().await;
        match slot.state.lock().unwrap().clone() {
            State::Compiled(compiled) => return Ok(compiled),
            State::Failed(reason) => return Err(reason),
            State::Registered => {}
        }
        let _permit = match &self.compile_slots {
            Some(slots) => Some(
                slots
                    .acquire()
                    .await
                    .expect("the semaphore is never closed"),
            ),
            None => None,
        };
        let compiler = self.compiler.clone();
        let path = slot.path.clone();
        let work = work.clone();
        let trim = self.trim_after_compile;
        let loaded = tokio::task::spawn_blocking(move || {
            work.begin(PHASE_COMPILE);
            let loaded = compiler.load(&path, &work);
            if trim {
                heap::trim();
            }
            work.leave();
            loaded
        })
        .await;
        let state = match loaded {
            Ok(Ok(compiled)) => {
                eprintln!(
                    "skillhost: {} ready in {:.0} ms ({:?})",
                    slot.name,
                    compiled.load_time.as_secs_f64() * 1e3,
                    compiled.origin
                );
                State::Compiled(compiled)
            }
            Ok(Err(error)) => State::Failed(format!("{error:#}")),
            Err(panic) => State::Failed(format!("compilation panicked: {panic}")),
        };
        *slot.state.lock().unwrap() = state.clone();
        match state {
            State::Compiled(compiled) => Ok(compiled),
            State::Failed(reason) => {
                eprintln!("skillhost: {} {reason}", slot.name);
                Err(reason)
            }
            State::Registered => unreachable!("just set"),
        }
    }

    /// Drops the compiled form (in-flight requests keep theirs until they finish).
    /// Returns whether there was one. A failed skill is also reset, so it is retried.
    pub fn evict(&self, slot: &Slot) -> bool {
        let previous = std::mem::replace(&mut *slot.state.lock().unwrap(), State::Registered);
        match (previous, &self.evicted) {
            (State::Compiled(compiled), Some(later)) => {
                later.lock().unwrap().push(compiled);
                true
            }
            (State::Compiled(_), None) => true,
            _ => false,
        }
    }

    /// Drops every compiled skill, for shutdown.
    pub fn evict_all(&self) {
        for slot in self.slots() {
            self.evict(&slot);
        }
        if let Some(evicted) = &self.evicted {
            evicted.lock().unwrap().clear();
        }
    }
}

impl Slot {
    fn compiled(&self) -> Option<Arc<CompiledSkill>> {
        match &*self.state.lock().unwrap() {
            State::Compiled(compiled) => Some(compiled.clone()),
            _ => None,
        }
    }

    pub fn status(&self) -> SkillStatus {
        let state = self.state.lock().unwrap().clone();
        let mut status = SkillStatus {
            name: self.name.clone(),
            state: "registered",
            error: None,
            origin: None,
            load_ms: None,
            sha256: None,
        };
        match state {
            State::Registered => {}
            State::Compiled(compiled) => {
                status.state = "compiled";
                status.origin = Some(compiled.origin);
                status.load_ms = Some(compiled.load_time.as_secs_f64() * 1e3);
                status.sha256 = Some(compiled.sha256.clone());
            }
            State::Failed(reason) => {
                status.state = "failed";
                status.error = Some(reason);
            }
        }
        status
    }
}
