//! wasi:clocks' monotonic clock as wasmtime-wasi serves it, but for a zero wait. A guest that
//! polls with a zero timeout (Python's `time.sleep(0)`, wasi-libc's `poll` with a timeout of
//! 0) asks to yield; wasmtime-wasi answers with tokio's `yield_now`, which wakes the request
//! only once its worker has run its other ready tasks. The request was ready all along, so
//! that wait is queued, not pending on the skill's own waits: the pollable says so to the
//! marks before it yields. Every other wait is wasmtime-wasi's own.

use std::future::Future;
use std::pin::Pin;

use anyhow::Result;
use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::clocks::WasiClocksView;
use wasmtime_wasi::p2::bindings::clocks::monotonic_clock::Host;
use wasmtime_wasi::p2::{DynPollable, Pollable};

use crate::request::RequestState;

/// The interface as wasmtime-wasi defines it; a guest's older 0.2 import resolves to it.
const MONOTONIC_CLOCK: &str = "wasi:clocks/monotonic-clock@0.2.12";

/// Replaces `subscribe-duration` and `subscribe-instant` in `linker`, which already holds
/// wasmtime-wasi's.
pub fn add_to_linker(linker: &mut Linker<RequestState>) -> Result<()> {
    linker.allow_shadowing(true);
    let mut clock = linker.instance(MONOTONIC_CLOCK)?;
    clock.func_wrap(
        "subscribe-duration",
        |mut store: StoreContextMut<RequestState>, (nanos,): (u64,)| {
            let mut clocks = store.data_mut().clocks();
            Ok((match nanos {
                0 => zero(&mut clocks)?,
                _ => clocks.subscribe_duration(nanos)?,
            },))
        },
    )?;
    clock.func_wrap(
        "subscribe-instant",
        |mut store: StoreContextMut<RequestState>, (when,): (u64,)| {
            let mut clocks = store.data_mut().clocks();
            Ok((match when <= clocks.now()? {
                true => zero(&mut clocks)?,
                false => clocks.subscribe_instant(when)?,
            },))
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}

fn zero(
    clocks: &mut wasmtime_wasi::clocks::WasiClocksCtxView<'_>,
) -> wasmtime::Result<Resource<DynPollable>> {
    let past = clocks.table.push(Past { yielded: false })?;
    wasmtime_wasi::p2::subscribe(clocks.table, past)
}

/// A deadline already past: ready after one yield to tokio, as wasmtime-wasi's (which yields
/// so that a guest polling in a busy loop cannot starve the I/O driver).
struct Past {
    yielded: bool,
}

impl Pollable for Past {
    // The trait is async_trait's: its signature, written out.
    fn ready<'life, 'future>(&'life mut self) -> Pin<Box<dyn Future<Output = ()> + Send + 'future>>
    where
        'life: 'future,
        Self: 'future,
    {
        Box::pin(async move {
            if !std::mem::replace(&mut self.yielded, true) {
                skillprof_marks::yielding();
                tokio::task::yield_now().await;
            }
        })
    }
}
