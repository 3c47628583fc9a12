//! Whether a step's tail came from one stall: the requests at or above its 99th percentile,
//! by when they were scheduled. A stall (the host, its machine or its hypervisor not running
//! for a while) delays every request scheduled in it, each by what is left of it, so the tail
//! is one run of requests scheduled close together; a host slow all along spreads its tail
//! over the whole window.

use crate::record::traffic::Stall;

/// Requests of the tail further apart than this, in scheduled time, are not one stall's.
const GAP_US: u32 = 20_000;
/// One run of the tail holding this share of it is one stall; a tail this close to the
/// median is no tail.
const ONE_STALL: f64 = 0.8;
const TAIL_OVER_MEDIAN: f64 = 2.0;

/// The stall the tail came from, if it came from one: `requests` are the measured requests'
/// (scheduled time from the window's start, latency), µs; `p50_us` and `p99_us` the step's;
/// `window_at_ns` the window's start on CLOCK_MONOTONIC.
pub fn find(requests: &[(u32, u32)], p50_us: u64, p99_us: u64, window_at_ns: u64) -> Option<Stall> {
    if (p99_us as f64) < TAIL_OVER_MEDIAN * p50_us.max(1) as f64 {
        return None;
    }
    let mut tail: Vec<(u32, u32)> = requests
        .iter()
        .copied()
        .filter(|&(_, latency)| u64::from(latency) >= p99_us)
        .collect();
    if tail.len() < 2 {
        return None;
    }
    tail.sort_unstable();
    // Runs of the tail, by scheduled time.
    let mut runs: Vec<&[(u32, u32)]> = Vec::new();
    let mut start = 0;
    for i in 1..=tail.len() {
        if i == tail.len() || tail[i].0 - tail[i - 1].0 > GAP_US {
            runs.push(&tail[start..i]);
            start = i;
        }
    }
    let run = runs.iter().max_by_key(|run| run.len())?;
    let share = run.len() as f64 / tail.len() as f64;
    if share < ONE_STALL {
        return None;
    }
    let begins_us = run[0].0;
    let ends_us = run
        .iter()
        .map(|&(at, latency)| at.saturating_add(latency))
        .max()?;
    Some(Stall {
        begins_ms: f64::from(begins_us) / 1e3,
        lasted_ms: f64::from(ends_us - begins_us) / 1e3,
        tail_share: share,
        requests: requests
            .iter()
            .filter(|&&(at, _)| (begins_us..ends_us).contains(&at))
            .count() as u64,
        begins_at_ns: window_at_ns + u64::from(begins_us) * 1000,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2,000 requests, one every 2 ms, 1 ms each.
    fn steady() -> Vec<(u32, u32)> {
        (0..2000).map(|i| (i * 2000, 1000)).collect()
    }

    #[test]
    fn a_pause_delays_the_requests_scheduled_in_it_and_is_one_stall() {
        let mut requests = steady();
        // 40 ms from 1.2 s: each request scheduled in it waits for the pause's end.
        for (at, latency) in &mut requests {
            if (1_200_000..1_240_000).contains(at) {
                *latency = 1_240_000 - *at + 1000;
            }
        }
        let stall = find(&requests, 1000, 20_000, 0).unwrap();
        assert_eq!(stall.begins_ms, 1200.0);
        // The first request in it is answered 1 ms after the pause ends.
        assert_eq!(stall.lasted_ms, 41.0);
        assert!(stall.tail_share >= 0.8, "{stall:?}");
        assert_eq!(stall.requests, 21);
    }

    #[test]
    fn a_tail_spread_over_the_window_is_no_stall() {
        let mut requests = steady();
        for (i, (_, latency)) in requests.iter_mut().enumerate() {
            if i % 97 == 0 {
                *latency = 30_000;
            }
        }
        assert_eq!(find(&requests, 1000, 30_000, 0), None);
    }

    #[test]
    fn a_tail_close_to_the_median_is_no_tail() {
        assert_eq!(find(&steady(), 1000, 1000, 0), None);
    }
}
