//! The one place where the wasmtime engine is configured, in the spirit of `wasmtime serve`:
//! read this file to know how skills are compiled and instantiated.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use anyhow::{Context, Result};
use wasmtime::{
    Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, ProfilingStrategy,
};

use crate::config::{Allocator, EngineConfig, Toggle};
use crate::incremental::IncrementalCache;

pub fn build(config: &EngineConfig) -> Result<Engine> {
    let mut wasm = Config::new();
    wasm.wasm_component_model(true);
    // Deadlines and fair sharing of the CPU between requests both hang off epochs:
    // guest code checks the epoch at loop headers and function entries.
    wasm.epoch_interruption(true);
    wasm.memory_init_cow(config.memory_cow);
    if config.incremental_cache_mib > 0 {
        wasm.enable_incremental_compilation(Arc::new(IncrementalCache::new(
            config.incremental_cache_mib,
        )))
        .map_err(anyhow::Error::from)
        .context("enabling the incremental compilation cache")?;
    }
    if config.perfmap {
        wasm.profiler(ProfilingStrategy::PerfMap);
    }
    if let Some(bytes) = config.memory_reservation {
        wasm.memory_reservation(bytes);
    }
    if let Some(bytes) = config.memory_guard_size {
        wasm.memory_guard_size(bytes);
    }
    if config.allocator == Allocator::Pooling {
        wasm.allocation_strategy(InstanceAllocationStrategy::Pooling(pooling(config)));
    } else {
        let pool = &config.pool;
        anyhow::ensure!(
            pool.pool_decommit_batch_size == 1
                && pool.pool_keep_resident == 0
                && !pool.pool_pagemap_scan
                && pool.pool_table_keep_resident == 0
                && pool.pool_stack_keep_resident == 0
                && pool.pool_max_unused_warm_slots == 100
                && pool.pool_memory_protection_keys == Toggle::No,
            "--pool-decommit-batch-size, --pool-keep-resident, --pool-pagemap-scan, \
             --pool-table-keep-resident, --pool-stack-keep-resident, \
             --pool-max-unused-warm-slots and --pool-memory-protection-keys shape the pooling \
             allocator's slots: add --allocator pooling"
        );
    }
    Engine::new(&wasm)
        .map_err(anyhow::Error::from)
        .context("configuring the wasmtime engine")
}

fn pooling(config: &EngineConfig) -> PoolingAllocationConfig {
    let pool = &config.pool;
    let instances = pool.pool_instances;
    let mut pooling = PoolingAllocationConfig::new();
    pooling
        .total_component_instances(instances)
        .max_core_instances_per_component(pool.pool_core_instances_per_component)
        .total_core_instances(instances.saturating_mul(pool.pool_core_instances_per_component))
        .max_memories_per_component(pool.pool_memories_per_component)
        .total_memories(instances.saturating_mul(pool.pool_memories_per_component))
        .max_tables_per_component(pool.pool_tables_per_component)
        .total_tables(instances.saturating_mul(pool.pool_tables_per_component))
        .table_elements(pool.pool_table_elements)
        // One async fiber stack per in-flight request.
        .total_stacks(instances)
        // A slot never needs more than one instance may use in total.
        .max_memory_size(config.memory_limit_bytes().min(1 << 32))
        // How freed slots go back to the kernel: what skillprof counts as given back.
        .decommit_batch_size(pool.pool_decommit_batch_size)
        .linear_memory_keep_resident(pool.pool_keep_resident)
        .pagemap_scan(if pool.pool_pagemap_scan {
            Enabled::Yes
        } else {
            Enabled::No
        })
        .table_keep_resident(pool.pool_table_keep_resident)
        .async_stack_keep_resident(pool.pool_stack_keep_resident)
        .max_unused_warm_slots(pool.pool_max_unused_warm_slots)
        .memory_protection_keys(match pool.pool_memory_protection_keys {
            Toggle::No => Enabled::No,
            Toggle::Auto => Enabled::Auto,
            Toggle::Yes => Enabled::Yes,
        });
    pooling
}

/// Advances the engine's epoch every tick on a plain thread, so that deadlines keep firing
/// even when every runtime worker is busy running guest code.
pub struct EpochTicker {
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

impl EpochTicker {
    pub fn start(engine: &Engine, config: &EngineConfig) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let tick = config.epoch_tick();
        let thread = {
            let engine = engine.clone();
            let stop = stop.clone();
            thread::Builder::new()
                .name("epoch-ticker".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        thread::sleep(tick);
                        engine.increment_epoch();
                    }
                })
                .expect("spawning the epoch thread")
        };
        EpochTicker {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
