//! What one request's store holds: WASI (no files, no network, no environment), wasi:http
//! for a proxy component (its outgoing requests are refused), the memory limiter, and its
//! place in the host's count of live instances. Both the world (which links against it) and
//! the invocation (which makes one per request) use it.

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{
    RequestOptions, WasiBody, WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks, WasiHttpView,
};

use crate::limits::MemoryLimiter;
use crate::metrics::LiveInstance;

pub struct RequestState {
    wasi: WasiCtx,
    table: ResourceTable,
    http: WasiHttpCtx,
    hooks: NoNetwork,
    limiter: MemoryLimiter,
    _live: LiveInstance,
}

impl RequestState {
    pub fn new(limiter: MemoryLimiter, live: LiveInstance) -> RequestState {
        RequestState {
            wasi: WasiCtx::builder().inherit_stderr().build(),
            table: ResourceTable::new(),
            http: WasiHttpCtx::new(),
            hooks: NoNetwork,
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

/// A skill has no network, as over WASI: a wasi:http component's outgoing request is denied.
struct NoNetwork;

/// What `send_request` answers: the response and the future of its body's end.
type Sent = wasmtime_wasi_http::Result<(
    hyper::Response<WasiBody>,
    Box<dyn Future<Output = wasmtime_wasi_http::Result<()>> + Send>,
)>;

impl WasiHttpHooks for NoNetwork {
    fn send_request(
        &mut self,
        _request: hyper::Request<WasiBody>,
        _options: Option<RequestOptions>,
        _done: Box<dyn Future<Output = wasmtime_wasi_http::Result<()>> + Send>,
    ) -> Box<dyn Future<Output = Sent> + Send> {
        Box::new(async { Err(wasmtime_wasi_http::Error::HttpRequestDenied) })
    }
}

impl WasiHttpView for RequestState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.hooks,
        }
    }
}
