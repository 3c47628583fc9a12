//! What reading a host's memory by holder (`held_*`, `/proc/PID/smaps`) costs as the host's
//! mappings grow towards vm.max_map_count: a host with 10,000 live instances holds about
//! 60,000. This process plays the host: it maps one resident page at a time, alternating
//! read-only and read-write so that the kernel cannot merge neighbours, and reads its own
//! smaps as the runner reads a host's at each entry boundary. Per size it prints the median
//! of the readings, the cost per 1,000 mappings, and the median of raw reads of the same
//! text (the kernel's share; the rest is parsing). The kernel walks every mapping's page
//! tables under the mmap lock, which holds off the host's own mmap and munmap meanwhile.
//! Figures only, no pass/fail.
//!
//!     cargo bench -p skillprof --bench smaps_cost [-- --readings N]

use std::path::Path;

use anyhow::{Context, Result, ensure};
use skillprof::ground::stats;
use skillprof::record::composition::Composition;

mod common;

const SIZES: [u64; 4] = [1_000, 10_000, 30_000, 60_000];
const PAGE: usize = 4096;

/// What reading a host's smaps costs, by the mappings it holds.
#[derive(clap::Parser)]
struct Flags {
    /// Readings at each number of mappings (their median is reported).
    #[arg(long, default_value_t = 7)]
    readings: usize,
}

fn main() -> Result<()> {
    let Flags { readings } = common::flags();
    let limit: u64 = std::fs::read_to_string("/proc/sys/vm/max_map_count")?
        .trim()
        .parse()?;
    let pid = std::process::id();
    let read = || Composition::read(Path::new("/proc"), pid).context("reading our own smaps");
    println!(
        "smaps read cost by mappings held (vm.max_map_count {limit}), {readings} readings each"
    );
    println!(
        "{:>10} {:>12} {:>16} {:>12} {:>10} {:>12}",
        "mappings", "median ms", "ms per 1,000", "RSS MiB", "raw ms", "raw MB"
    );
    let mut mapped = 0usize;
    for size in SIZES {
        ensure!(size < limit, "vm.max_map_count {limit} is below {size}");
        let held = read()?.mappings;
        for _ in held..size {
            let protection = if mapped.is_multiple_of(2) {
                libc::PROT_READ | libc::PROT_WRITE
            } else {
                libc::PROT_READ
            };
            // SAFETY: a fresh anonymous private page; this process never frees it, and
            // touches it only through the pointer mmap returned.
            let page = unsafe {
                let page = libc::mmap(
                    std::ptr::null_mut(),
                    PAGE,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                );
                ensure!(
                    page != libc::MAP_FAILED,
                    "mmap: {}",
                    std::io::Error::last_os_error()
                );
                page.cast::<u8>().write(1);
                libc::mprotect(page, PAGE, protection);
                page
            };
            std::hint::black_box(page);
            mapped += 1;
        }
        let mut took_ms = Vec::with_capacity(readings);
        let mut last = None;
        for _ in 0..readings {
            let composition = read()?;
            took_ms.push(composition.read_us as f64 / 1e3);
            last = Some(composition);
        }
        took_ms.sort_by(f64::total_cmp);
        let median = stats::median(&took_ms);
        let last = last.context("no reading")?;
        // The kernel's share: the same text read and not parsed.
        let mut raw_ms = Vec::with_capacity(readings);
        let mut raw_bytes = 0;
        for _ in 0..readings {
            let started = std::time::Instant::now();
            raw_bytes = std::fs::read("/proc/self/smaps")?.len();
            raw_ms.push(started.elapsed().as_secs_f64() * 1e3);
        }
        raw_ms.sort_by(f64::total_cmp);
        println!(
            "{:>10} {:>12.1} {:>16.2} {:>12.1} {:>10.1} {:>12.1}",
            last.mappings,
            median,
            median / last.mappings as f64 * 1e3,
            last.rss_kb as f64 / 1024.0,
            stats::median(&raw_ms),
            raw_bytes as f64 / 1e6
        );
    }
    Ok(())
}
