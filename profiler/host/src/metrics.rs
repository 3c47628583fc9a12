//! What the host counts, served at `GET /metrics` in the Prometheus (OpenMetrics) text format
//! that scrapers expect, and as JSON at `GET /metrics.json` for scripts. Both are views of the
//! same prometheus-client metrics; figures known only at scrape time (the registry's skill
//! counts, the pool's occupancy) are set on the gauges just before each is rendered.

use skillprof_common::host_metrics as metric;
use std::collections::BTreeSet;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use serde_json::{Value, json};

use crate::heap::Heap;

/// The content type of the text `/metrics` answers with (what prometheus-client encodes).
pub const OPENMETRICS_TEXT: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Answered {
    status: u16,
}

/// Figures the host learns only when asked: set on their gauges at each scrape.
pub struct AtScrape {
    pub registered_skills: u64,
    pub compiled_skills: u64,
    pub failed_skills: u64,
    pub max_concurrent_requests: u64,
    /// The pooling allocator's occupancy, by slot kind; empty on demand.
    pub pool: Vec<(&'static str, u64)>,
    /// malloc's own figures; `None` under another allocator.
    pub heap: Option<Heap>,
}

pub struct Metrics {
    registry: Registry,
    requests_in_flight: Gauge,
    instances_live: Gauge,
    instances: Counter,
    executions: Family<Executed, Counter>,
    compilations: Counter,
    requests: Family<Answered, Counter>,
    /// The statuses `requests` has seen, so the JSON view can list them all.
    statuses: Mutex<BTreeSet<u16>>,
    request_seconds: Histogram,
    compile_seconds: Histogram,
    skills: Family<SkillState, Gauge>,
    max_concurrent_requests: Gauge,
    pool: Family<PoolSlot, Gauge<u64, AtomicU64>>,
    /// In use and free; registered only when the allocator is one `heap` can read, so that
    /// another one's host shows no heap figures rather than zeros.
    heap: Option<[Gauge<u64, AtomicU64>; 2]>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SkillState {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Executed {
    skill: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolSlot {
    kind: &'static str,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut metrics = Metrics {
            registry: Registry::with_prefix(metric::PREFIX),
            requests_in_flight: Gauge::default(),
            instances_live: Gauge::default(),
            instances: Counter::default(),
            executions: Family::default(),
            compilations: Counter::default(),
            requests: Family::default(),
            statuses: Mutex::default(),
            // 1 ms to 65 s: a warm Rust skill answers in about a millisecond, and a first
            // request that compiles a Python skill takes tens of seconds.
            request_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 17)),
            compile_seconds: Histogram::new(exponential_buckets(0.01, 2.0, 14)),
            skills: Family::default(),
            max_concurrent_requests: Gauge::default(),
            pool: Family::default(),
            heap: crate::heap::now().map(|_| Default::default()),
        };
        let registry = &mut metrics.registry;
        registry.register(
            "requests_in_flight",
            "execute_skill requests between arrival and answer",
            metrics.requests_in_flight.clone(),
        );
        registry.register(
            "instances_live",
            "skill instances whose store is alive",
            metrics.instances_live.clone(),
        );
        registry.register(
            metric::INSTANCES,
            "skill instances created",
            metrics.instances.clone(),
        );
        registry.register(
            "executions",
            "skill instances created, by skill: its executions that got as far as instantiating",
            metrics.executions.clone(),
        );
        registry.register(
            metric::COMPILATIONS,
            "components compiled by Cranelift (not loaded from a cache or shared)",
            metrics.compilations.clone(),
        );
        registry.register(
            metric::REQUESTS,
            "execute_skill requests answered, by HTTP status",
            metrics.requests.clone(),
        );
        registry.register_with_unit(
            "request_duration",
            "execute_skill requests from arrival to answer",
            Unit::Seconds,
            metrics.request_seconds.clone(),
        );
        registry.register_with_unit(
            "compile_duration",
            "Cranelift compilations of a component",
            Unit::Seconds,
            metrics.compile_seconds.clone(),
        );
        registry.register(
            metric::SKILLS,
            "skills in the skills directory, by state (registered includes the others)",
            metrics.skills.clone(),
        );
        registry.register(
            "max_concurrent_requests",
            "requests admitted at once (the pool's size or --max-concurrency)",
            metrics.max_concurrent_requests.clone(),
        );
        registry.register(
            metric::POOL_SLOTS,
            "the pooling allocator's occupied slots and warm, resident bytes, by kind",
            metrics.pool.clone(),
        );
        if let Some([in_use, free]) = &metrics.heap {
            registry.register_with_unit(
                metric::HEAP_IN_USE,
                "bytes the C allocator has handed out and not had back (glibc's mallinfo2 or \
                 jemalloc's stats.allocated)",
                Unit::Bytes,
                in_use.clone(),
            );
            registry.register_with_unit(
                metric::HEAP_FREE,
                "freed bytes the C allocator keeps for reuse instead of returning them \
                 (glibc: free chunks in its arenas; jemalloc: resident beyond allocated)",
                Unit::Bytes,
                free.clone(),
            );
        }
        metrics
    }
}

/// Held by a request's store; the instance counts as live until the store is dropped.
pub struct LiveInstance(Arc<Metrics>);

impl Drop for LiveInstance {
    fn drop(&mut self) {
        self.0.instances_live.dec();
    }
}

/// Held by a request handler from arrival to answer.
pub struct InFlight(Arc<Metrics>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.requests_in_flight.dec();
    }
}

impl Metrics {
    pub fn instance_started(self: &Arc<Self>, skill: &str) -> LiveInstance {
        self.instances_live.inc();
        self.instances.inc();
        self.executions
            .get_or_create(&Executed {
                skill: skill.to_owned(),
            })
            .inc();
        LiveInstance(self.clone())
    }

    pub fn request_started(self: &Arc<Self>) -> InFlight {
        self.requests_in_flight.inc();
        InFlight(self.clone())
    }

    pub fn in_flight(&self) -> u64 {
        self.requests_in_flight.get().max(0) as u64
    }

    pub fn request_finished(&self, status: u16, took: Duration) {
        self.statuses
            .lock()
            .expect("no panic while holding the status set")
            .insert(status);
        self.requests.get_or_create(&Answered { status }).inc();
        self.request_seconds.observe(took.as_secs_f64());
    }

    pub fn compiled(&self, took: Duration) {
        self.compilations.inc();
        self.compile_seconds.observe(took.as_secs_f64());
    }

    /// Puts the scrape-time figures on their gauges, for the text encoder to read.
    fn set(&self, now: &AtScrape) {
        let gauge = |value: u64| value.min(i64::MAX as u64) as i64;
        for (state, count) in [
            ("registered", now.registered_skills),
            ("compiled", now.compiled_skills),
            ("failed", now.failed_skills),
        ] {
            self.skills
                .get_or_create(&SkillState { state })
                .set(gauge(count));
        }
        self.max_concurrent_requests
            .set(gauge(now.max_concurrent_requests));
        for &(kind, value) in &now.pool {
            self.pool.get_or_create(&PoolSlot { kind }).set(value);
        }
        if let (Some([in_use, free]), Some(heap)) = (&self.heap, now.heap) {
            in_use.set(heap.in_use_bytes);
            free.set(heap.free_bytes);
        }
    }

    /// The OpenMetrics text a Prometheus scrape reads.
    pub fn text(&self, now: &AtScrape) -> String {
        self.set(now);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("writing to a String does not fail");
        text
    }

    /// The same figures as one JSON object (the scrape-time ones straight from `now`).
    pub fn json(&self, now: &AtScrape) -> Value {
        let answered: Vec<(u16, u64)> = self
            .statuses
            .lock()
            .expect("no panic while holding the status set")
            .iter()
            .map(|&status| {
                let count = self.requests.get_or_create(&Answered { status }).get();
                (status, count)
            })
            .collect();
        let by_status: serde_json::Map<String, Value> = answered
            .iter()
            .map(|(status, count)| (status.to_string(), json!(count)))
            .collect();
        let ok: u64 = answered
            .iter()
            .filter(|(status, _)| (200..300).contains(status))
            .map(|(_, count)| count)
            .sum();
        let all: u64 = answered.iter().map(|(_, count)| count).sum();
        let mut report = json!({
            "requests_in_flight": self.in_flight(),
            "instances_live": self.instances_live.get(),
            "instances_total": self.instances.get(),
            "requests_ok": ok,
            "requests_failed": all - ok,
            "requests_by_status": by_status,
            "compilations": self.compilations.get(),
            "registered_skills": now.registered_skills,
            "compiled_skills": now.compiled_skills,
            "failed_skills": now.failed_skills,
            "max_concurrent_requests": now.max_concurrent_requests,
        });
        if let Some(heap) = now.heap {
            report["heap"] = json!(heap);
        }
        if !now.pool.is_empty() {
            report["pooling"] = now
                .pool
                .iter()
                .map(|&(kind, value)| (kind.to_owned(), json!(value)))
                .collect::<serde_json::Map<_, _>>()
                .into();
        }
        report
    }
}
