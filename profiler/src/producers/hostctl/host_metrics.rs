//! The host's own counters, read from its Prometheus `/metrics` at entry boundaries: what the
//! host says it did (requests answered, compilations, instances), beside what the kernel saw.

use super::Client;

use skillprof_common::host_metrics::{
    COMPILATIONS_TOTAL, HEAP_FREE_BYTES, HEAP_IN_USE_BYTES, INSTANCES_TOTAL, POOL_KIND,
    POOL_SLOTS_EXPOSED as POOL_SLOTS, REQUESTS_TOTAL, SKILL_STATE, SKILLS_EXPOSED,
    UNUSED_MEMORY_BYTES_RESIDENT, UNUSED_TABLE_BYTES_RESIDENT, UNUSED_WARM_MEMORIES,
};

use crate::record::host::HostCounters;

/// The gauges of a host's exposition the watch serves again: the pool's slots by kind and
/// its skills by state, as the host names them; empty for a host without skillhost's
/// metrics (and the pool's on demand).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct HostGauges {
    pub pool: Vec<(String, u64)>,
    pub skills: Vec<(String, u64)>,
}

pub fn gauges(text: &str) -> HostGauges {
    let Ok(scrape) = prometheus_parse::Scrape::parse(text.lines().map(|line| Ok(line.to_owned())))
    else {
        return HostGauges::default();
    };
    let labelled = |family: &str, label: &str| -> Vec<(String, u64)> {
        scrape
            .samples
            .iter()
            .filter(|sample| sample.metric == family)
            .filter_map(|sample| {
                let value = match sample.value {
                    prometheus_parse::Value::Gauge(v) | prometheus_parse::Value::Untyped(v) => v,
                    _ => return None,
                };
                Some((sample.labels.get(label)?.to_owned(), value as u64))
            })
            .collect()
    };
    HostGauges {
        pool: labelled(POOL_SLOTS, POOL_KIND),
        skills: labelled(SKILLS_EXPOSED, SKILL_STATE),
    }
}

/// Those gauges as the host serves them now; empty if it does not answer.
pub async fn read_gauges(client: &Client) -> HostGauges {
    match client.get("/metrics").await {
        Ok(reply) if reply.is_ok() => gauges(&reply.text()),
        _ => HostGauges::default(),
    }
}

impl HostCounters {
    /// Reads the counters from a Prometheus or OpenMetrics text exposition. `None` if it has
    /// none of skillhost's families: another host's metrics say nothing we can name.
    pub fn parse(text: &str) -> Option<Self> {
        let scrape =
            prometheus_parse::Scrape::parse(text.lines().map(|line| Ok(line.to_owned()))).ok()?;
        let mut counters = HostCounters::default();
        let mut seen = false;
        for sample in &scrape.samples {
            let value = match sample.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => v as u64,
                _ => continue,
            };
            let field = match sample.metric.as_str() {
                REQUESTS_TOTAL => {
                    let status: u16 = sample.labels.get("status")?.parse().ok()?;
                    if !(200..300).contains(&status) {
                        counters.failed += value;
                    }
                    &mut counters.requests
                }
                COMPILATIONS_TOTAL => &mut counters.compilations,
                INSTANCES_TOTAL => &mut counters.instances,
                HEAP_IN_USE_BYTES => {
                    counters.heap_in_use_bytes = Some(value);
                    continue;
                }
                HEAP_FREE_BYTES => {
                    counters.heap_free_bytes = Some(value);
                    continue;
                }
                POOL_SLOTS => {
                    match sample.labels.get(POOL_KIND) {
                        Some(UNUSED_WARM_MEMORIES) => counters.pool_warm_memories = Some(value),
                        Some(UNUSED_MEMORY_BYTES_RESIDENT | UNUSED_TABLE_BYTES_RESIDENT) => {
                            *counters.pool_warm_resident_bytes.get_or_insert(0) += value;
                        }
                        _ => {}
                    }
                    continue;
                }
                _ => continue,
            };
            *field += value;
            seen = true;
        }
        seen.then_some(counters)
    }

    /// The counters' growth since `before`: what the host did over an entry.
    pub fn since(&self, before: &HostCounters) -> HostCounters {
        HostCounters {
            requests: self.requests.saturating_sub(before.requests),
            failed: self.failed.saturating_sub(before.failed),
            compilations: self.compilations.saturating_sub(before.compilations),
            instances: self.instances.saturating_sub(before.instances),
            heap_in_use_bytes: self.heap_in_use_bytes,
            heap_free_bytes: self.heap_free_bytes,
            pool_warm_memories: self.pool_warm_memories,
            pool_warm_resident_bytes: self.pool_warm_resident_bytes,
        }
    }

    /// `None` for a host without skillhost's metrics, or that did not answer.
    pub async fn read(client: &Client) -> Option<HostCounters> {
        let reply = client.get("/metrics").await.ok()?;
        reply.is_ok().then(|| HostCounters::parse(&reply.text()))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What prometheus-client encodes, OpenMetrics suffixes and all.
    const SCRAPE: &str = "\
# HELP skillhost_requests execute_skill requests answered, by HTTP status.
# TYPE skillhost_requests counter
skillhost_requests_total{status=\"200\"} 12
skillhost_requests_total{status=\"500\"} 2
skillhost_requests_total{status=\"503\"} 1
# HELP skillhost_compilations Components compiled.
# TYPE skillhost_compilations counter
skillhost_compilations_total 3
# TYPE skillhost_instances counter
skillhost_instances_total 15
# TYPE skillhost_heap_in_use_bytes gauge
# UNIT skillhost_heap_in_use_bytes bytes
skillhost_heap_in_use_bytes 104857600
# TYPE skillhost_heap_free_bytes gauge
# UNIT skillhost_heap_free_bytes bytes
skillhost_heap_free_bytes 314572800
# TYPE skillhost_pool_slots gauge
skillhost_pool_slots{kind=\"memories\"} 2
skillhost_pool_slots{kind=\"unused_warm_memories\"} 5
skillhost_pool_slots{kind=\"unused_memory_bytes_resident\"} 1048576
skillhost_pool_slots{kind=\"unused_table_bytes_resident\"} 4096
# TYPE skillhost_skills gauge
skillhost_skills{state=\"registered\"} 4
skillhost_skills{state=\"compiled\"} 3
# TYPE skillhost_request_duration_seconds histogram
# UNIT skillhost_request_duration_seconds seconds
skillhost_request_duration_seconds_sum 1.5
skillhost_request_duration_seconds_count 15
skillhost_request_duration_seconds_bucket{le=\"0.001\"} 0
skillhost_request_duration_seconds_bucket{le=\"+Inf\"} 15
# EOF
";

    #[test]
    fn reads_skillhost_counters_from_openmetrics_text() {
        let counters = HostCounters::parse(SCRAPE).unwrap();
        assert_eq!(
            counters,
            HostCounters {
                requests: 15,
                failed: 3,
                compilations: 3,
                instances: 15,
                heap_in_use_bytes: Some(100 << 20),
                heap_free_bytes: Some(300 << 20),
                pool_warm_memories: Some(5),
                pool_warm_resident_bytes: Some((1 << 20) + 4096),
            }
        );
        let before = HostCounters {
            requests: 10,
            failed: 1,
            compilations: 3,
            instances: 11,
            heap_in_use_bytes: Some(1),
            heap_free_bytes: None,
            pool_warm_memories: None,
            pool_warm_resident_bytes: None,
        };
        assert_eq!(
            counters.since(&before),
            HostCounters {
                requests: 5,
                failed: 2,
                compilations: 0,
                instances: 4,
                heap_in_use_bytes: Some(100 << 20),
                heap_free_bytes: Some(300 << 20),
                pool_warm_memories: Some(5),
                pool_warm_resident_bytes: Some((1 << 20) + 4096),
            }
        );
    }

    #[test]
    fn the_pools_gauges_pass_by_kind_and_the_skills_by_state() {
        let read = gauges(SCRAPE);
        assert_eq!(
            read.pool,
            [
                ("memories".to_owned(), 2),
                ("unused_warm_memories".to_owned(), 5),
                ("unused_memory_bytes_resident".to_owned(), 1 << 20),
                ("unused_table_bytes_resident".to_owned(), 4096),
            ]
        );
        assert_eq!(
            read.skills,
            [("registered".to_owned(), 4), ("compiled".to_owned(), 3)]
        );
        let other = gauges("# TYPE http_requests counter\nhttp_requests_total 7\n");
        assert_eq!(other, HostGauges::default());
    }

    #[test]
    fn another_hosts_metrics_are_none() {
        let text = "# TYPE http_requests counter\nhttp_requests_total 7\n";
        assert_eq!(HostCounters::parse(text), None);
        assert_eq!(HostCounters::parse("{\"requests_ok\": 3}"), None);
    }
}
