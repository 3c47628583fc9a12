//! Locust's swarm over an `l_execute_all` entry, and the load network the run made.

use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

/// Requests to one skill (or, as `total`, to all), as Locust's master merged them from its
/// workers. Latencies come from Locust's histogram, whose buckets round a time above 100 ms
/// to two significant digits (9,012 ms reads 9,000).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LoadRow {
    /// The skill; `Aggregated` for the total, as Locust names it.
    pub name: String,
    pub requests: u64,
    pub failures: u64,
    pub avg_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

/// One swarm: who ran it, how long it was held and what it came to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoadEntry {
    pub users: u32,
    pub workers: u32,
    /// From the swarm's start to the last user's stop (users finish the request they are in).
    pub held_s: f64,
    pub total: LoadRow,
    pub skills: Vec<LoadRow>,
    /// Distinct failures, as Locust words them, with how often each happened.
    pub errors: Vec<(String, u64)>,
    /// Executions the host itself counted over the entry (its `/metrics`), if it has them.
    pub host_served: Option<u64>,
    /// CPU time of Locust's processes (master and workers) over the entry, in seconds: on
    /// one machine, they and the host share the cores.
    pub locust_cpu_s: f64,
}

/// What the run made, for meta.json and for anyone checking it is gone.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkInfo {
    /// The host's side of the link: the run points the host here.
    pub host_address: Ipv4Addr,
    /// The veth end in the root namespace.
    pub link: String,
    /// The namespaces' names (`ip netns list`): the bridge's, then one per worker.
    pub namespaces: Vec<String>,
}
