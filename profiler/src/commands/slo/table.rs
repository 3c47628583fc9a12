//! The table's load points and what it says: which configuration is the fewest that meets
//! the target at each load (swan's optimal core allocation).

use crate::record::slo::{SloReport, Stage};

/// `points` fractions of `peak` (1/N, 2/N, ... N/N), each at least 1 request per second,
/// without repeats; none without a peak.
pub fn load_points(peak: Option<u32>, points: u32) -> Vec<u32> {
    let Some(peak) = peak else {
        return Vec::new();
    };
    let mut rates: Vec<u32> = (1..=points)
        .map(|i| ((u64::from(peak) * u64::from(i) / u64::from(points)) as u32).max(1))
        .collect();
    rates.dedup();
    rates
}

/// The highest table rate configuration `config` met and the lowest it missed, for
/// experiments at fixed rates (no search).
pub fn bracket(report: &SloReport, config: usize) -> (Option<u32>, Option<u32>) {
    let steps = report
        .steps
        .iter()
        .filter(|s| s.config == config && s.stage == Stage::Table);
    let met = steps
        .clone()
        .filter(|s| s.verdict.met())
        .map(|s| s.rps)
        .max();
    let missed = steps.filter(|s| !s.verdict.met()).map(|s| s.rps).min();
    (met, missed)
}

/// At `rps`, the configuration with the fewest CPUs, then the fewest workers, whose cell
/// met the target; `None` if none did.
pub fn fewest_meeting(report: &SloReport, rps: u32) -> Option<usize> {
    (0..report.configs.len())
        .filter(|&c| report.cell(c, rps).is_some_and(|s| s.verdict.met()))
        .min_by_key(|&c| {
            let config = &report.configs[c].config;
            (config.cpus.len(), config.workers.unwrap_or(u32::MAX))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_points_are_fractions_of_the_peak() {
        assert_eq!(load_points(Some(1000), 4), vec![250, 500, 750, 1000]);
        assert_eq!(load_points(Some(3), 10), vec![1, 2, 3]);
        assert!(load_points(None, 10).is_empty());
    }
}
