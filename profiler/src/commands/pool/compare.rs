//! A configuration's figure over the rounds (its median) and against pooling at its defaults
//! in the same rounds (the median of the ratios, with a bootstrap 95% interval).

use crate::ground::stats;
use crate::record::pool::{BASE, Figure, PoolExperiment};

const RESAMPLES: usize = 2000;

/// Rounds measured by both a configuration and the base before its change gets an interval:
/// a bootstrap of fewer ratios is little more than their range, and claims more than it
/// knows (the pool_advice benchmark's 3-round checks missed once in four).
pub const MIN_ROUNDS: usize = 5;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    pub median: f64,
    /// Against the base, in percent; `None` for the base itself, with fewer than
    /// [`MIN_ROUNDS`] rounds measured by both, or where the base's figure is 0.
    pub change: Option<Change>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Change {
    pub pct: f64,
    pub lo: f64,
    pub hi: f64,
}

impl Change {
    /// The interval leaves out no change at all.
    pub fn is_clear(&self) -> bool {
        self.lo > 0.0 || self.hi < 0.0
    }

    pub fn words(&self) -> String {
        format!("{:+.1}% [{:+.1}, {:+.1}]", self.pct, self.lo, self.hi)
    }
}

/// `figure` of configuration `config`; `None` where no run gave it.
pub fn summary(experiment: &PoolExperiment, config: usize, figure: &Figure) -> Option<Summary> {
    let values = |index: usize| -> Vec<(u32, f64)> {
        experiment.configs[index]
            .measured()
            .filter_map(|(round, figures)| Some((round, (figure.value)(figures)?)))
            .collect()
    };
    let own = values(config);
    if own.is_empty() {
        return None;
    }
    let mut sorted: Vec<f64> = own.iter().map(|(_, value)| *value).collect();
    let median = stats::sort_median(&mut sorted);
    let change = (config != BASE).then(|| {
        let base = values(BASE);
        let ratios: Vec<f64> = own
            .iter()
            .filter_map(|(round, value)| {
                let (_, base) = base.iter().find(|(r, _)| r == round)?;
                (*base > 0.0).then(|| value / base)
            })
            .collect();
        (ratios.len() >= MIN_ROUNDS).then(|| {
            let mut sorted = ratios.clone();
            let ratio = stats::sort_median(&mut sorted);
            let (lo, hi) = stats::median_ci(&ratios, RESAMPLES, experiment.seed ^ config as u64);
            Change {
                pct: (ratio - 1.0) * 100.0,
                lo: (lo - 1.0) * 100.0,
                hi: (hi - 1.0) * 100.0,
            }
        })
    });
    Some(Summary {
        median,
        change: change.flatten(),
    })
}
