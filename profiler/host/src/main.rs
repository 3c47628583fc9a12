//! skillhost: the wasmtime skill host that skillprof drives and measures.

mod api;
mod clock;
mod compile;
mod config;
mod dialect;
mod engine;
mod heap;
mod incremental;
mod invoke;
mod limits;
mod metrics;
mod names;
mod registry;
mod request;
mod world;

// The marks are a crate of their own, for any host to depend on (docs/own-host.md).
use skillprof_marks as marks;

use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Parser;
use tokio::net::TcpListener;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{Notify, Semaphore};

use crate::api::App;
use crate::compile::Compiler;
use crate::config::HostConfig;
use crate::metrics::Metrics;
use crate::registry::Registry;

fn main() {
    let config = HostConfig::parse();
    // Before any thread marks: the ledger is there from the start, or never.
    if config.engine.no_marks {
        marks::never();
    } else {
        marks::ready();
        marks::repeat(config.engine.mark_repeat);
    }
    if let Err(error) = heap::adopt(config.compiling.malloc, config.compiling.malloc_decay_ms) {
        eprintln!("skillhost: error: {error:#}");
        std::process::exit(2);
    }
    if config.check_config {
        std::process::exit(match check(&config) {
            Ok(()) => 0,
            Err(error) => {
                eprintln!("skillhost: error: {error:#}");
                2
            }
        });
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("building the tokio runtime");
    let code = match runtime.block_on(serve(config)) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("skillhost: error: {error:#}");
            2
        }
    };
    // Exit without waiting for blocking tasks (a compilation cannot be cancelled); the
    // compiled skills were already dropped, which is the part of shutdown worth measuring.
    std::process::exit(code);
}

async fn serve(config: HostConfig) -> Result<i32> {
    anyhow::ensure!(
        config.skills_dir.is_dir(),
        "the skills directory {} does not exist; create it or pass --skills-dir",
        config.skills_dir.display()
    );
    let engine = engine::build(&config.engine)?;
    let _ticker = engine::EpochTicker::start(&engine, &config.engine);
    let metrics = Arc::new(Metrics::default());
    let compiler = Arc::new(Compiler::new(
        &engine,
        &config.engine,
        config.api,
        config.share_identical,
        &config.http_path,
        metrics.clone(),
    )?);
    let registry = Arc::new(Registry::new(
        &config.skills_dir,
        compiler,
        config.compiling.clone(),
        config.api,
    ));
    registry
        .scan()
        .with_context(|| format!("reading {}", config.skills_dir.display()))?;
    tokio::spawn(registry.clone().watch(config.scan_interval()));

    let listener = TcpListener::bind((config.bind, config.port))
        .await
        .with_context(|| format!("binding {}:{}", config.bind, config.port))?;
    let address = listener.local_addr()?;
    let app = Arc::new(App {
        admission: Semaphore::new(config.effective_concurrency()),
        config,
        engine,
        registry: registry.clone(),
        metrics,
    });
    announce(&app, address)?;

    let stop_accepting = Arc::new(Notify::new());
    let server = axum::serve(listener, api::router(app.clone())).with_graceful_shutdown({
        let stop_accepting = stop_accepting.clone();
        async move { stop_accepting.notified().await }
    });
    let mut server = tokio::spawn(server.into_future());

    let signal_name = tokio::select! {
        ended = &mut server => {
            ended.context("the server task panicked")?.context("the server failed")?;
            anyhow::bail!("the server stopped without being asked to");
        }
        name = shutdown_signal() => name?,
    };

    let drain_started = Instant::now();
    let in_flight = app.metrics.in_flight();
    eprintln!(
        "skillhost: {signal_name}: draining {in_flight} in-flight request(s), for up to {} ms",
        app.config.drain_timeout_ms
    );
    stop_accepting.notify_one();
    app.admission.close();
    let drained = tokio::time::timeout(app.config.drain_timeout(), &mut server)
        .await
        .is_ok();
    registry.evict_all();
    let code = if drained {
        eprintln!(
            "skillhost: drained in {} ms; exiting",
            drain_started.elapsed().as_millis()
        );
        0
    } else {
        eprintln!(
            "skillhost: drain timed out after {} ms with {} request(s) still running; exiting",
            drain_started.elapsed().as_millis(),
            app.metrics.in_flight()
        );
        1
    };
    Ok(code)
}

/// `--check-config`: the engine these flags make, and the address space it reserved.
fn check(config: &HostConfig) -> Result<()> {
    let before = virtual_size()?;
    let engine = engine::build(&config.engine)?;
    let reserved = virtual_size()?.saturating_sub(before);
    println!("{}", serde_json::json!({ "reserved_bytes": reserved }));
    drop(engine);
    Ok(())
}

/// The process's address space (VmSize), in bytes.
fn virtual_size() -> Result<u64> {
    let status =
        std::fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmSize:"))
        .and_then(|kb| kb.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .context("no VmSize in /proc/self/status")
}

/// Tells the caller where to connect and how the host is configured: the address on
/// stdout (one line, for scripts), the configuration on stderr.
fn announce(app: &App, address: std::net::SocketAddr) -> Result<()> {
    let config = &app.config;
    eprintln!(
        "skillhost: skills from {}, allocator {:?}, memory limit {} MiB, deadline {} ms, {} concurrent requests",
        config.skills_dir.display(),
        config.engine.allocator,
        config.engine.memory_limit_mib,
        config.deadline_ms,
        config.effective_concurrency()
    );
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "listening on http://{address}")?;
    stdout.flush()?;
    Ok(())
}

async fn shutdown_signal() -> Result<&'static str> {
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    Ok(tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    })
}
