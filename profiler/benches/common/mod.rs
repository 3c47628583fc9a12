//! What the run-driving benchmarks share: the skillprof binary beside them, and a ratio's
//! median change with its bootstrap interval.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, ensure};
use skillprof::stats;

const RESAMPLES: usize = 10_000;

/// The release `skillprof` of the target directory this benchmark was built in.
pub fn skillprof_binary() -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let release = exe
        .parent()
        .and_then(Path::parent)
        .context("no target directory")?;
    let binary = release.join("skillprof");
    ensure!(
        binary.is_file(),
        "{} is missing: cargo build --release --workspace",
        binary.display()
    );
    Ok(binary)
}

/// `+X.X% [lo, hi]`: the median of the per-round ratios as a change, with its interval.
pub fn change(ratios: &[f64], seed: u64) -> String {
    let mut sorted = ratios.to_vec();
    sorted.sort_by(f64::total_cmp);
    let median = stats::median(&sorted);
    let (lo, hi) = stats::median_ci(ratios, RESAMPLES, seed);
    let percent = |ratio: f64| (ratio - 1.0) * 100.0;
    format!(
        "{:+.1}% [{:+.1}, {:+.1}]",
        percent(median),
        percent(lo),
        percent(hi)
    )
}
