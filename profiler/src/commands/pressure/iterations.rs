//! The experiment's unit of work: take a block of anonymous memory, write every page, give it
//! back; timed. `mmap`/`munmap` directly, so every iteration faults fresh pages in (an
//! allocator would keep the block around and the second iteration would fault nothing).

use std::io;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::ground::stats::nearest_rank;

/// One iteration over `bytes` (whole pages of `page` bytes).
pub fn allocate_touch_free(bytes: usize, page: usize) -> Result<Duration> {
    let started = Instant::now();
    // SAFETY: a fresh private anonymous mapping, written only within its length, then unmapped.
    unsafe {
        let block = libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if block == libc::MAP_FAILED {
            return Err(io::Error::last_os_error())
                .with_context(|| format!("mapping an iteration block of {bytes} bytes"));
        }
        let block = block.cast::<u8>();
        for offset in (0..bytes).step_by(page) {
            block.add(offset).write_volatile(1);
        }
        if libc::munmap(block.cast(), bytes) != 0 {
            return Err(io::Error::last_os_error()).context("unmapping an iteration block");
        }
    }
    Ok(started.elapsed())
}

/// Iteration times in milliseconds: mean, median, 99th percentile (nearest rank), extremes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Summary {
    pub count: usize,
    pub mean_ms: f64,
    pub median_ms: f64,
    pub p99_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
}

impl Summary {
    pub fn of(times: &[Duration]) -> Option<Summary> {
        if times.is_empty() {
            return None;
        }
        let mut ms: Vec<f64> = times.iter().map(|t| t.as_secs_f64() * 1e3).collect();
        ms.sort_by(f64::total_cmp);
        let rank = |q: f64| nearest_rank(&ms, q);
        Some(Summary {
            count: ms.len(),
            mean_ms: ms.iter().sum::<f64>() / ms.len() as f64,
            median_ms: rank(0.5),
            p99_ms: rank(0.99),
            min_ms: ms[0],
            max_ms: ms[ms.len() - 1],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_iteration_takes_time_and_gives_the_memory_back() {
        let took = allocate_touch_free(1 << 20, 4096).unwrap();
        assert!(took > Duration::ZERO);
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let times: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        let summary = Summary::of(&times).unwrap();
        assert_eq!(summary.count, 100);
        assert_eq!(summary.median_ms, 50.0);
        assert_eq!(summary.p99_ms, 99.0);
        assert_eq!(summary.mean_ms, 50.5);
        assert_eq!((summary.min_ms, summary.max_ms), (1.0, 100.0));
        assert_eq!(Summary::of(&[]), None);
    }
}
