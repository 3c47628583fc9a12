//! From a `.wasm` file to a ready-to-instantiate skill: compile (or load a precompiled
//! artifact from the on-disk cache, or reuse an identical skill's compilation), check the
//! component's shape against the pool, and pre-link it once against WASI.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::Serialize;
use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

use crate::config::{Allocator, Api, EngineConfig};
use crate::marks::{PHASE_COMPILE, Work};
use crate::metrics::Metrics;
use crate::world::{Linkers, SkillPre};

/// Where a skill's compiled code came from.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// Compiled with Cranelift just now.
    Compiled,
    /// Loaded (mmap-backed) from the on-disk cache.
    DiskCache,
    /// The same bytes were already compiled for another name (`--share-identical`).
    Shared,
}

pub struct CompiledSkill {
    pub pre: SkillPre,
    pub sha256: String,
    pub origin: Origin,
    pub load_time: Duration,
}

pub struct Compiler {
    engine: Engine,
    linkers: Linkers,
    /// Its dialect's world decides which components run.
    api: Api,
    config: EngineConfig,
    share_identical: bool,
    engine_key: String,
    metrics: Arc<Metrics>,
    /// Live compilations by content hash, for `--share-identical`. Weak, so that evicting
    /// every name of a skill really frees its code.
    by_digest: Mutex<HashMap<String, Weak<CompiledSkill>>>,
}

impl Compiler {
    pub fn new(
        engine: &Engine,
        config: &EngineConfig,
        api: Api,
        share_identical: bool,
        http_path: &str,
        metrics: Arc<Metrics>,
    ) -> Result<Self> {
        let linkers = Linkers::new(engine, http_path).context("linking WASI p2")?;
        if let Some(dir) = &config.cache_dir {
            fs::create_dir_all(dir)
                .with_context(|| format!("creating the cache directory {}", dir.display()))?;
        }
        Ok(Compiler {
            engine: engine.clone(),
            linkers,
            api,
            config: config.clone(),
            share_identical,
            engine_key: engine_key(engine),
            metrics,
            by_digest: Mutex::new(HashMap::new()),
        })
    }

    /// Blocking: compiling a Python skill takes seconds of CPU.
    pub fn load(&self, path: &Path, work: &Work) -> Result<Arc<CompiledSkill>> {
        let started = Instant::now();
        let bytes =
            fs::read(path).with_context(|| format!("could not be read from {}", path.display()))?;
        let sha256 = hex(&Sha256::digest(&bytes));

        if self.share_identical
            && let Some(existing) = self.live_compilation(&sha256)
        {
            return Ok(Arc::new(CompiledSkill {
                pre: existing.pre.clone(),
                sha256,
                origin: Origin::Shared,
                load_time: started.elapsed(),
            }));
        }

        let compile_started = Instant::now();
        let (component, origin) = compile_pool(work)?
            .install(|| match &self.config.cache_dir {
                Some(dir) => self.through_disk_cache(dir, &bytes, &sha256),
                None => Ok((Component::new(&self.engine, &bytes)?, Origin::Compiled)),
            })
            .context("failed to compile")?;
        if matches!(origin, Origin::Compiled) {
            self.metrics.compiled(compile_started.elapsed());
        }
        self.check_shape(&component)
            .context("does not fit a pool slot")?;
        let pre = self.linkers.link(self.api, &self.engine, &component)?;
        let compiled = Arc::new(CompiledSkill {
            pre,
            sha256,
            origin,
            load_time: started.elapsed(),
        });
        if self.share_identical {
            self.by_digest
                .lock()
                .unwrap()
                .insert(compiled.sha256.clone(), Arc::downgrade(&compiled));
        }
        Ok(compiled)
    }

    fn live_compilation(&self, sha256: &str) -> Option<Arc<CompiledSkill>> {
        let mut by_digest = self.by_digest.lock().unwrap();
        by_digest.retain(|_, weak| weak.strong_count() > 0);
        by_digest.get(sha256).and_then(Weak::upgrade)
    }

    /// Artifacts are keyed by the wasm's hash and the engine's compatibility hash, written
    /// atomically, and always loaded through `deserialize_file`, so their code is a shared
    /// file mapping rather than anonymous memory.
    fn through_disk_cache(
        &self,
        dir: &Path,
        bytes: &[u8],
        sha256: &str,
    ) -> Result<(Component, Origin)> {
        let artifact = dir.join(format!("{sha256}-{}.cwasm", self.engine_key));
        if artifact.exists() {
            // SAFETY: the artifact was written by `precompile_component` of an engine with
            // the same compatibility hash, by us, and is only ever replaced atomically.
            match unsafe { Component::deserialize_file(&self.engine, &artifact) } {
                Ok(component) => return Ok((component, Origin::DiskCache)),
                Err(error) => eprintln!(
                    "skillhost: discarding unreadable cache artifact {}: {error}",
                    artifact.display()
                ),
            }
        }
        let precompiled = self.engine.precompile_component(bytes)?;
        let partial = temporary_sibling(&artifact);
        fs::write(&partial, &precompiled)
            .with_context(|| format!("writing {}", partial.display()))?;
        fs::rename(&partial, &artifact)
            .with_context(|| format!("renaming {} into place", partial.display()))?;
        // SAFETY: as above; we wrote this file a moment ago.
        let component = unsafe { Component::deserialize_file(&self.engine, &artifact)? };
        Ok((component, Origin::Compiled))
    }

    /// A component that cannot fit a pool slot would fail every request; refuse it once,
    /// with the flag that fixes it.
    fn check_shape(&self, component: &Component) -> Result<()> {
        if self.config.allocator != Allocator::Pooling {
            return Ok(());
        }
        let Some(needs) = component.resources_required() else {
            return Ok(());
        };
        let pool = &self.config.pool;
        if needs.num_memories > pool.pool_memories_per_component {
            bail!(
                "the component has {} linear memories but pool slots hold {}; raise --pool-memories-per-component",
                needs.num_memories,
                pool.pool_memories_per_component
            );
        }
        if needs.num_tables > pool.pool_tables_per_component {
            bail!(
                "the component has {} tables but pool slots hold {}; raise --pool-tables-per-component",
                needs.num_tables,
                pool.pool_tables_per_component
            );
        }
        Ok(())
    }
}

/// Cranelift compiles a component's functions in parallel on the current rayon pool. A pool
/// of this compile's own, whose threads are marked as working for the skill, attributes that
/// work (most of a Python skill's compile) to it rather than to the host.
fn compile_pool(work: &Work) -> Result<rayon::ThreadPool> {
    let (start, exit) = (work.clone(), work.clone());
    rayon::ThreadPoolBuilder::new()
        .thread_name(|i| format!("compile-{i}"))
        .start_handler(move |_| start.help(PHASE_COMPILE))
        .exit_handler(move |_| exit.leave())
        .build()
        .context("starting the compile threads")
}

fn engine_key(engine: &Engine) -> String {
    // DefaultHasher::new() has fixed keys, so the key is stable for one build of the host;
    // a different wasmtime gets a different key anyway.
    let mut hasher = DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

/// Unique per writer: two names with the same bytes may be compiled at the same time.
fn temporary_sibling(path: &Path) -> PathBuf {
    static WRITERS: AtomicU64 = AtomicU64::new(0);
    let writer = WRITERS.fetch_add(1, Ordering::Relaxed);
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{}.{writer}.partial", std::process::id()));
    path.with_file_name(name)
}

fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut out, b| {
            let _ = write!(out, "{b:02x}");
            out
        })
}
