//! Whether a step's tail came from one stall. A stall (the host, its machine or its hypervisor
//! not running for a while) delays every request scheduled in it, each by what is left of it:
//! in the order they were scheduled, the slow requests are one unbroken run, with no request
//! answered at the usual speed among them, and the tail (the requests at or above the 99th
//! percentile) is in it. A host slow all along spreads its slow requests over the window,
//! between fast ones.
//!
//! Runs are told apart by the fast requests between them, not by time: at 30 requests a
//! second the requests of one stall are 33 ms apart, at 4,000 a second 0.25 ms.

use crate::record::traffic::Stall;

/// A request at least this many times the median is slow; a tail this close to the median is
/// no tail.
const TAIL_OVER_MEDIAN: f64 = 2.0;
/// One run holding this share of the tail is one stall.
const ONE_STALL: f64 = 0.8;
/// A run of one request is a slow request, not a stall: a stall delays every request
/// scheduled in it, and a stall between two sends delays none.
const FEWEST_DELAYED: usize = 2;
/// A stall delays its first request by most of its length; a run whose slowest request waited
/// less than this share of the run's span is slow requests that happened to be neighbours (a
/// CPU shared with another process at 10 req/s: two requests of 6 ms, 100 ms apart).
const DELAYED_BY_MOST: f64 = 0.5;

/// The median of `latency` (µs) and the lowest latency in its 99th percentile's bucket: the
/// histogram says a bucket's highest value, which can be above every request in it, and with
/// few requests (40 at 10/s) the p99 is the slowest one's bucket, so no request was at or
/// above it and no stall was found.
pub fn thresholds(latency: &hdrhistogram::Histogram<u64>) -> (u64, u64) {
    (
        latency.value_at_quantile(0.5),
        latency.lowest_equivalent(latency.value_at_quantile(0.99)),
    )
}

/// The stall the tail came from, if it came from one: `requests` are the measured requests'
/// (scheduled time from the window's start, latency), µs; `p50_us` and `p99_us` the step's;
/// `window_at_ns` the window's start on CLOCK_MONOTONIC.
pub fn find(requests: &[(u32, u32)], p50_us: u64, p99_us: u64, window_at_ns: u64) -> Option<Stall> {
    let slow_us = TAIL_OVER_MEDIAN * p50_us.max(1) as f64;
    if (p99_us as f64) < slow_us {
        return None;
    }
    let mut by_schedule = requests.to_vec();
    by_schedule.sort_unstable();
    let in_tail = |&(_, latency): &(u32, u32)| u64::from(latency) >= p99_us;
    let tail = by_schedule.iter().filter(|r| in_tail(r)).count();
    // Runs of slow requests, each ended by a request answered at the usual speed.
    let (of_tail, run) = by_schedule
        .split(|&(_, latency)| f64::from(latency) < slow_us)
        .filter(|run| run.len() >= FEWEST_DELAYED)
        .map(|run| (run.iter().filter(|r| in_tail(r)).count(), run))
        .max_by_key(|&(of_tail, _)| of_tail)?;
    let share = of_tail as f64 / tail.max(1) as f64;
    if share < ONE_STALL {
        return None;
    }
    // It began after the send before its first request (which it did not delay) and by that
    // request's: halfway, which at 10 req/s is 50 ms from either.
    let first = by_schedule.partition_point(|request| request < &run[0]);
    let half_gap_us = match first {
        0 => 0,
        _ => (run[0].0 - by_schedule[first - 1].0) / 2,
    };
    let begins_us = run[0].0 - half_gap_us;
    let ends_us = run
        .iter()
        .map(|&(at, latency)| at.saturating_add(latency))
        .max()?;
    let slowest = run.iter().map(|&(_, latency)| latency).max()?;
    if f64::from(slowest) < DELAYED_BY_MOST * f64::from(ends_us - run[0].0) {
        return None;
    }
    Some(Stall {
        begins_ms: f64::from(begins_us) / 1e3,
        lasted_ms: f64::from(ends_us - begins_us) / 1e3,
        give_or_take_ms: f64::from(half_gap_us) / 1e3,
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
        // Put halfway from the send before its first request, 1 ms earlier.
        assert_eq!(stall.begins_ms, 1199.0);
        assert_eq!(stall.give_or_take_ms, 1.0);
        // The first request in it is answered 1 ms after the pause ends.
        assert_eq!(stall.lasted_ms, 42.0);
        assert!(stall.tail_share >= 0.8, "{stall:?}");
        assert_eq!(stall.requests, 21);
    }

    /// The stall the 2024 users met at the rates heavy skills are served at: 30 requests a
    /// second, 3 ms each, the host stopped for a second. Its delayed requests are 33 ms apart,
    /// and each is the only one of the tail in its 20 ms: the tail's runs by time were one
    /// request each, and no stall was found.
    #[test]
    fn a_second_long_pause_at_thirty_requests_a_second_is_one_stall() {
        let mut requests: Vec<(u32, u32)> = (0..150).map(|i| (i * 33_333, 3_000)).collect();
        // Stopped from the 61st request's send to 3.0 s: the 30 scheduled in it wait.
        for (at, latency) in &mut requests[60..90] {
            *latency = 3_000_000 - *at + 3_000;
        }
        // Of 150 requests, the 99th percentile is the second slowest.
        let p99 = 3_000_000 - 61 * 33_333 + 3_000;
        let stall = find(&requests, 3_000, p99, 0).expect("one stall");
        // Halfway from the send before, 16.7 ms earlier.
        assert!((stall.begins_ms - 1_983.314).abs() < 1e-6, "{stall:?}");
        // Until its first request was answered, 3 ms after the host went on.
        assert!((stall.lasted_ms - 1_019.686).abs() < 1e-6, "{stall:?}");
        assert_eq!(stall.tail_share, 1.0);
        assert_eq!(stall.requests, 31);
    }

    /// 4 s at 10/s, 1 ms a request, the host stopped for 350 ms from 1.95 s, between two
    /// sends: three requests delayed, the slowest alone in the 99th percentile, by the step's
    /// own histogram.
    #[test]
    fn a_stall_at_ten_requests_a_second_is_found_by_its_histogram() {
        let mut requests: Vec<(u32, u32)> = (0..40).map(|i| (i * 100_000, 1_000)).collect();
        for (at, latency) in &mut requests[20..23] {
            *latency = 2_300_000 - *at + 1_000;
        }
        let mut latency =
            hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).unwrap();
        for &(_, us) in &requests {
            latency.record(u64::from(us)).unwrap();
        }
        let (p50, p99) = thresholds(&latency);
        assert!(
            latency.value_at_quantile(0.99) > 301_000,
            "the bucket's highest"
        );
        let stall = find(&requests, p50, p99, 0).expect("one stall");
        assert_eq!(stall.begins_ms, 1950.0);
        assert!((stall.lasted_ms - 351.0).abs() < 1e-6, "{stall:?}");
        assert_eq!(stall.give_or_take_ms, 50.0);
    }

    /// A CPU shared with a busy loop at 10/s: two neighbouring requests of 6 ms against a
    /// median of 2 ms, the slowest in the tail, read as a stall of 105 ms.
    #[test]
    fn slow_neighbours_far_apart_are_no_stall() {
        let mut requests: Vec<(u32, u32)> = (0..40).map(|i| (i * 100_000, 2_000)).collect();
        requests[6].1 = 6_000;
        requests[7].1 = 5_000;
        assert_eq!(find(&requests, 2_000, 6_000, 0), None);
    }

    #[test]
    fn a_lone_slow_request_is_no_stall() {
        let mut requests = steady();
        requests[500].1 = 900_000;
        assert_eq!(find(&requests, 1000, 900_000, 0), None);
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
