//! What one request's store holds: WASI (no files, no network, no environment), the memory
//! limiter, and its place in the host's count of live instances. Both the world (which links
//! against it) and the invocation (which makes one per request) use it.

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::limits::MemoryLimiter;
use crate::metrics::LiveInstance;

pub struct RequestState {
    wasi: WasiCtx,
    table: ResourceTable,
    limiter: MemoryLimiter,
    _live: LiveInstance,
}

impl RequestState {
    pub fn new(limiter: MemoryLimiter, live: LiveInstance) -> RequestState {
        RequestState {
            wasi: WasiCtx::builder().inherit_stderr().build(),
            table: ResourceTable::new(),
            limiter,
            _live: live,
        }
    }

    /// The store's limiter: what the request's memories may grow to.
    pub fn limiter(&mut self) -> &mut dyn ResourceLimiter {
        &mut self.limiter
    }

    /// Why the limiter refused a memory growth, if it did.
    pub fn refusal(&self) -> Option<String> {
        self.limiter.refusal()
    }
}

impl WasiView for RequestState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}
