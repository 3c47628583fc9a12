//! The table's load points and what it says: which configuration is the fewest that meets
//! the target at each load (swan's optimal core allocation).

use crate::record::slo::{SloReport, SloStep, Stage};

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

/// The table steps of configuration `config`.
fn table_steps(report: &SloReport, config: usize) -> impl Iterator<Item = &SloStep> + Clone {
    report
        .steps
        .iter()
        .filter(move |s| s.config == config && s.stage == Stage::Table)
}

/// The highest table rate configuration `config` met and the lowest it missed, for
/// experiments at fixed rates (no search). A rate asked for more than once is met only where
/// every one of its steps met: a host that met it once and missed it once does not hold it.
pub fn bracket(report: &SloReport, config: usize) -> (Option<u32>, Option<u32>) {
    let steps = table_steps(report, config);
    let missed = steps
        .clone()
        .filter(|s| !s.verdict.met())
        .map(|s| s.rps)
        .min();
    let met = steps
        .filter(|s| s.verdict.met() && missed.is_none_or(|missed| s.rps < missed))
        .map(|s| s.rps)
        .max();
    (met, missed)
}

/// The rates configuration `config` both met and missed in the table, each with how many of
/// its steps met: (rate, met, steps).
pub fn mixed(report: &SloReport, config: usize) -> Vec<(u32, usize, usize)> {
    let mut rates: Vec<u32> = table_steps(report, config).map(|s| s.rps).collect();
    rates.sort_unstable();
    rates.dedup();
    rates
        .into_iter()
        .filter_map(|rps| {
            let at = table_steps(report, config).filter(|s| s.rps == rps);
            let met = at.clone().filter(|s| s.verdict.met()).count();
            let steps = at.count();
            (met > 0 && met < steps).then_some((rps, met, steps))
        })
        .collect()
}

/// At load point `point`, the configuration with the fewest CPUs, then the fewest workers,
/// whose cell met the target; `None` if none did.
pub fn fewest_meeting(report: &SloReport, point: usize) -> Option<usize> {
    (0..report.configs.len())
        .filter(|&c| report.cell(c, point).is_some_and(|s| s.verdict.met()))
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
