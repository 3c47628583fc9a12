//! Counters behind `GET /metrics`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Default)]
pub struct Metrics {
    requests_in_flight: AtomicU64,
    instances_live: AtomicU64,
    instances_total: AtomicU64,
    requests_ok: AtomicU64,
    requests_failed: AtomicU64,
    compilations: AtomicU64,
}

/// Held by a request's store; the instance counts as live until the store is dropped.
pub struct LiveInstance(Arc<Metrics>);

impl Drop for LiveInstance {
    fn drop(&mut self) {
        self.0.instances_live.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Held by a request handler from arrival to answer.
pub struct InFlight(Arc<Metrics>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.requests_in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Metrics {
    pub fn instance_started(self: &Arc<Self>) -> LiveInstance {
        self.instances_live.fetch_add(1, Ordering::Relaxed);
        self.instances_total.fetch_add(1, Ordering::Relaxed);
        LiveInstance(self.clone())
    }

    pub fn request_started(self: &Arc<Self>) -> InFlight {
        self.requests_in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(self.clone())
    }

    pub fn in_flight(&self) -> u64 {
        self.requests_in_flight.load(Ordering::Relaxed)
    }

    pub fn request_finished(&self, ok: bool) {
        let counter = if ok {
            &self.requests_ok
        } else {
            &self.requests_failed
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn compiled(&self) {
        self.compilations.fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> serde_json::Value {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        serde_json::json!({
            "requests_in_flight": get(&self.requests_in_flight),
            "instances_live": get(&self.instances_live),
            "instances_total": get(&self.instances_total),
            "requests_ok": get(&self.requests_ok),
            "requests_failed": get(&self.requests_failed),
            "compilations": get(&self.compilations),
        })
    }
}
