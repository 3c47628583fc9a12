//! Every knob of the host, as command-line flags. `engine.rs` turns the engine-related
//! ones into a wasmtime `Config`; the rest configure the registry, the API and shutdown.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, ValueEnum};
use serde::Serialize;

/// skillhost serves WebAssembly skill components over HTTP.
///
/// Every `<name>.wasm` file in the skills directory is a skill named `<name>`; adding or
/// removing a file registers or unregisters it within `--scan-interval-ms`. A skill is
/// compiled on its first request and kept compiled until evicted (`DELETE /cached_skills/NAME`).
/// Each request runs in a fresh instance.
///
/// Routes: POST /execute_skill {"skill": NAME, "input": {...}}, GET /skills, GET /skills/NAME,
/// GET /cached_skills, DELETE /cached_skills/NAME, GET /healthcheck,
/// GET /metrics (OpenMetrics text), GET /metrics.json, GET /config.
///
/// On SIGTERM or SIGINT the host stops accepting connections, lets in-flight requests finish
/// for up to `--drain-timeout-ms`, drops every compiled skill and exits 0 (1 if the drain
/// timed out).
#[derive(Parser, Debug, Clone, Serialize)]
#[command(name = "skillhost", version, about, long_about)]
pub struct HostConfig {
    /// Directory whose `<name>.wasm` files are the registered skills.
    #[arg(long, value_name = "DIR")]
    pub skills_dir: PathBuf,

    /// Address to listen on. Loopback by default: the API has no authentication.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: IpAddr,

    /// Port to listen on; 0 picks a free port. The chosen address is printed on stdout as
    /// `listening on http://ADDR`.
    #[arg(long, default_value_t = 8081)]
    pub port: u16,

    /// How often the skills directory is re-read, in milliseconds.
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    pub scan_interval_ms: u64,

    /// Compile identical skill files once and share the compiled component between their
    /// names. Off by default, as in the 2024 host, so that N copies of a skill cost N
    /// compilations and results stay comparable with old runs.
    #[arg(long)]
    pub share_identical: bool,

    /// Requests that may run at once; further requests wait for a free slot. With the pooling
    /// allocator the effective limit is also capped at `--pool-instances`.
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    pub max_concurrent_requests: usize,

    /// Deadline of one request (instantiation and call), in milliseconds. A request past it
    /// is answered with 504; CPU-bound guest code is interrupted at the next epoch tick.
    #[arg(long, default_value_t = 60_000, value_name = "MS")]
    pub deadline_ms: u64,

    /// How long in-flight requests may run after SIGTERM/SIGINT before the host exits anyway.
    #[arg(long, default_value_t = 30_000, value_name = "MS")]
    pub drain_timeout_ms: u64,

    /// The path every execute of a wasi:http/proxy component is sent to, as `POST PATH` with
    /// the input as its JSON body (a proxy picks its own routes).
    #[arg(long, default_value = "/", value_name = "PATH", value_parser = http_path)]
    pub http_path: String,

    /// The dialect of the HTTP API. `skillhost`: bare names, `{"error": …}` bodies, sorted
    /// listings. `pharia-2024`: the Pharia Kernel's of October 2024: skills are
    /// `dev/<name>` (a bare name means the empty `pharia-kernel-team` namespace), execute
    /// needs an `Authorization: Bearer` header, errors are JSON strings, input a skill
    /// rejects is a 500, listings are in no particular order, and dropping a compiled skill
    /// (`DELETE /cached_skills/dev%2F<name>`) answers 200 with a message either way.
    /// `pharia-2025`: the Pharia Engine's of November 2025 (0.15): `POST
    /// /v1/skills/dev/<name>/run` with the input as the body and the output as the answer,
    /// `GET /v1/skills` (sorted), `GET /cached_skills` (in no order), `DELETE
    /// /cached_skills/dev/<name>`, `GET /health`; no header needed; errors are plain text;
    /// input the skill rejects and its own errors are 400, traps and components that do not
    /// load 503.
    #[arg(long, value_enum, default_value_t = Api::Skillhost)]
    pub api: Api,

    /// Configure the engine with the other flags (the pooling allocator reserves its slots
    /// then), print `{"reserved_bytes": N}` (the address space that took) on stdout, and
    /// exit without serving: 0 if the host would start, 2 with the reason if not. The skills
    /// directory is not read.
    #[arg(long)]
    pub check_config: bool,

    #[command(flatten)]
    pub compiling: Compiling,

    #[command(flatten)]
    pub engine: EngineConfig,
}

/// How compiles share the host's memory. Cranelift frees most of what a compile allocated
/// when it ends, but glibc's malloc keeps the freed memory, resident, in its arenas: after
/// a first Python compile that is most of the host's RSS, and ten compiles at once keep
/// about ten times as much. No option changes compiled code.
#[derive(Args, Debug, Clone, Serialize)]
pub struct Compiling {
    /// Give malloc's free memory back to the kernel after every compile (`malloc_trim(0)`,
    /// counted in the compile's time).
    #[arg(long)]
    pub trim_after_compile: bool,

    /// Compiles that may run at once; a first request beyond waits for one to end (its
    /// wait counts in its time, not as compiling). 0: no limit. The 2024 host compiled one
    /// at a time and answered nothing else meanwhile, which `--api pharia-2024` emulates.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub max_concurrent_compiles: usize,

    /// The C allocator, which holds every heap allocation, Rust's included. `jemalloc`
    /// preloads the system's libjemalloc.so.2 (Debian: libjemalloc2) and runs the host again;
    /// `/metrics` then shows jemalloc's figures, and `--trim-after-compile` purges its arenas.
    #[arg(long, value_enum, default_value_t = Malloc::Glibc)]
    pub malloc: Malloc,

    /// jemalloc's dirty_decay_ms and muzzy_decay_ms: how long freed pages stay resident
    /// before they are handed back (0: at once; -1: never). Unset: jemalloc's defaults, or
    /// whatever MALLOC_CONF says.
    #[arg(long, value_name = "MS", allow_negative_numbers = true)]
    pub malloc_decay_ms: Option<i64>,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Malloc {
    Glibc,
    Jemalloc,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Api {
    Skillhost,
    #[value(name = "pharia-2024")]
    #[serde(rename = "pharia-2024")]
    Pharia2024,
    #[value(name = "pharia-2025")]
    #[serde(rename = "pharia-2025")]
    Pharia2025,
}

/// The wasmtime engine's configuration. Changing any of these changes how skills are
/// compiled or instantiated, so they all take part in the on-disk cache key.
#[derive(Args, Debug, Clone, Serialize)]
pub struct EngineConfig {
    /// How instance memory is allocated: `on-demand` maps memory for every instance;
    /// `pooling` reserves slots for all instances up front and reuses them.
    #[arg(long, value_enum, default_value_t = Allocator::OnDemand)]
    pub allocator: Allocator,

    /// Linear memory one request's instance may use in total, across all its core
    /// memories, in MiB. Growth past it fails, which guests usually turn into a trap.
    #[arg(long, default_value_t = 4096, value_name = "MiB")]
    pub memory_limit_mib: u64,

    /// Address space reserved for each linear memory, in bytes: with wasmtime's default
    /// (4 GiB on 64-bit hosts) a 32-bit memory never moves and needs no bounds checks; each
    /// pooled memory slot reserves this much plus its guard, used or not.
    #[arg(long, value_name = "BYTES")]
    pub memory_reservation: Option<u64>,

    /// Guard region after each linear memory, in bytes (wasmtime's default: 32 MiB), which
    /// lets compiled code skip bounds checks on static offsets; reserved, never resident.
    #[arg(long, value_name = "BYTES")]
    pub memory_guard_size: Option<u64>,

    /// Initialise linear memory from copy-on-write images of the compiled code, so that
    /// data segments are mapped rather than copied for each instance.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub memory_cow: bool,

    /// Keep precompiled skills in this directory, keyed by the content hash of the wasm
    /// file and the engine configuration, and load them with the mmap-backed deserializer.
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,

    /// wasmtime's incremental compilation cache, in memory, of this many MiB (0: off): a
    /// function compiled before is not compiled again, so further copies of one language's
    /// runtime compile in a fraction of the time. The 2025 Pharia Engine keeps 128 MiB.
    #[arg(long, default_value_t = 0, value_name = "MiB")]
    pub incremental_cache_mib: u64,

    /// Epoch tick: how often running guest code checks its deadline and yields to other
    /// requests, in milliseconds.
    #[arg(long, default_value_t = 10, value_name = "MS")]
    pub epoch_tick_ms: u64,

    /// Mark nothing and keep no ledger, as a host that does not know skillprof: a profiler
    /// sees this host's work whole, not by skill.
    #[arg(long)]
    pub no_marks: bool,

    /// For `cargo bench --bench overhead`: each mark is recorded N times instead of once (the
    /// ledger's rows then count N-fold), so that a mark's cost in a busy host rises above the
    /// noise.
    #[arg(long, default_value_t = 1, value_name = "N", hide = true,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub mark_repeat: u32,

    /// Write /tmp/perf-PID.map, naming the compiled code of every skill's wasm functions,
    /// so that profilers (`skillprof run --stacks`, perf) can name JIT-compiled frames.
    #[arg(long, env = "SKILLHOST_PERFMAP")]
    pub perfmap: bool,

    #[command(flatten)]
    pub pool: PoolConfig,
}

/// Pool sizes, used only with `--allocator pooling`. wasmtime's defaults (1,000 of each)
/// fit only ~71 componentize-py components at once, because one of them holds 14 core
/// instances; so the pools are sized from the shape of one component times the number of
/// component instances that may be live at once.
#[derive(Args, Debug, Clone, Serialize)]
pub struct PoolConfig {
    /// Component instances (requests) the pool holds at once.
    #[arg(long, default_value_t = 1000, value_name = "N")]
    pub pool_instances: u32,

    /// Core instances in one component (componentize-py components have 14).
    #[arg(long, default_value_t = 16, value_name = "N")]
    pub pool_core_instances_per_component: u32,

    /// Linear memories in one component.
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub pool_memories_per_component: u32,

    /// Tables in one component.
    #[arg(long, default_value_t = 16, value_name = "N")]
    pub pool_tables_per_component: u32,

    /// Elements of one table (CPython's function table is large).
    #[arg(long, default_value_t = 100_000, value_name = "N")]
    pub pool_table_elements: usize,

    /// Slots to decommit together: above 1, wasmtime gives back a batch of freed slots in one
    /// process_madvise(2) call (Linux 5.10+) instead of one madvise per range. wasmtime's
    /// default is 1.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub pool_decommit_batch_size: usize,

    /// Bytes at the bottom of each linear memory a freed slot keeps resident, reset in place
    /// instead of decommitted (wasmtime's linear_memory_keep_resident; default 0).
    #[arg(long, default_value_t = 0, value_name = "BYTES")]
    pub pool_keep_resident: usize,

    /// Find what to reset in a kept-resident memory with the PAGEMAP_SCAN ioctl (Linux 6.7+)
    /// instead of resetting all of it: wasmtime's pagemap_scan, off by default.
    #[arg(long)]
    pub pool_pagemap_scan: bool,

    /// Bytes of each table a freed slot keeps resident, zeroed in place instead of
    /// decommitted (wasmtime's table_keep_resident; default 0).
    #[arg(long, default_value_t = 0, value_name = "BYTES")]
    pub pool_table_keep_resident: usize,

    /// Bytes of each async stack a freed slot keeps resident, zeroed with memset instead of
    /// decommitted (wasmtime's async_stack_keep_resident; default 0).
    #[arg(long, default_value_t = 0, value_name = "BYTES")]
    pub pool_stack_keep_resident: usize,

    /// Freed slots kept warm (still holding their last instance's resident pages, reused
    /// first) before cold ones are taken: wasmtime's max_unused_warm_slots, default 100.
    #[arg(long, default_value_t = 100, value_name = "N")]
    pub pool_max_unused_warm_slots: u32,

    /// Memory protection keys (Intel MPK; Linux's pkeys): slots share their guard regions,
    /// striped over up to 15 keys, so a pool reserves less address space. `yes` fails to
    /// start where the CPU or the kernel lacks them; wasmtime's default is `no`.
    #[arg(long, value_enum, default_value_t = Toggle::No, value_name = "WHEN")]
    pub pool_memory_protection_keys: Toggle,
}

/// wasmtime's `Enabled`, as a flag's value.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Toggle {
    No,
    Auto,
    Yes,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Allocator {
    OnDemand,
    Pooling,
}

impl HostConfig {
    pub fn scan_interval(&self) -> Duration {
        Duration::from_millis(self.scan_interval_ms)
    }

    pub fn deadline(&self) -> Duration {
        Duration::from_millis(self.deadline_ms)
    }

    pub fn drain_timeout(&self) -> Duration {
        Duration::from_millis(self.drain_timeout_ms)
    }

    /// Requests admitted at once: a pooling allocator cannot hold more instances than its
    /// pool, and queueing beats failing them.
    pub fn effective_concurrency(&self) -> usize {
        match self.engine.allocator {
            Allocator::OnDemand => self.max_concurrent_requests,
            Allocator::Pooling => self
                .max_concurrent_requests
                .min(self.engine.pool.pool_instances as usize),
        }
    }
}

impl EngineConfig {
    pub fn memory_limit_bytes(&self) -> usize {
        usize::try_from(self.memory_limit_mib << 20).unwrap_or(usize::MAX)
    }

    pub fn epoch_tick(&self) -> Duration {
        Duration::from_millis(self.epoch_tick_ms.max(1))
    }
}

/// `--http-path`: an absolute path, as a request line has it.
fn http_path(path: &str) -> Result<String, String> {
    match path.parse::<hyper::Uri>() {
        Ok(uri) if path.starts_with('/') && uri.path() == path => Ok(path.to_owned()),
        _ => Err(format!(
            "{path:?} is not an absolute path such as /echo (no scheme, host or query)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;
    use skillprof::ground::generated_docs::Generated;

    use super::{HostConfig, http_path};

    #[test]
    fn an_http_path_is_a_request_lines_absolute_path() {
        assert_eq!(http_path("/echo").unwrap(), "/echo");
        for bad in ["echo", "http://host/echo", "/echo?x=1", "/a b"] {
            assert!(
                http_path(bad)
                    .unwrap_err()
                    .contains("is not an absolute path"),
                "{bad}"
            );
        }
    }

    /// `SKILLPROF_BLESS=1 cargo test -p skillhost config` rewrites it.
    #[test]
    fn the_cli_reference_documents_every_flag_of_skillhost() {
        let reference = Generated {
            file: "docs/cli.md",
            name: "skillhost",
            bless: "SKILLPROF_BLESS=1 cargo test -p skillhost config",
        };
        reference
            .check(&skillprof::commands::cli_reference::markdown(
                &HostConfig::command(),
            ))
            .unwrap();
    }
}
