//! Order statistics of measured values.

/// Nearest rank: the smallest value that at least `q` (0 < q <= 1) of `sorted` do not exceed.
/// `sorted` must be ascending and not empty.
pub fn nearest_rank<T: Copy>(sorted: &[T], q: f64) -> T {
    sorted[((sorted.len() as f64 * q).ceil() as usize).max(1) - 1]
}

/// The middle value, or the mean of the two middle ones: the median of a sample.
/// `sorted` must be ascending and not empty.
pub fn median(sorted: &[f64]) -> f64 {
    let middle = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[middle]
    } else {
        (sorted[middle - 1] + sorted[middle]) / 2.0
    }
}

/// The value at the middle, the upper one of two: always one of the values themselves.
pub fn upper_median<T: Copy>(sorted: &[T]) -> Option<T> {
    sorted.get(sorted.len() / 2).copied()
}

/// A bootstrap 95% confidence interval of the median of `values`: the 2.5th and 97.5th
/// percentiles of the medians of `resamples` resamples drawn with replacement. `seed` makes
/// it repeatable. `values` must not be empty.
pub fn median_ci(values: &[f64], resamples: usize, seed: u64) -> (f64, f64) {
    bootstrap_ci(values, resamples, seed, |sample| {
        sample.sort_by(f64::total_cmp);
        median(sample)
    })
}

fn bootstrap_ci(
    values: &[f64],
    resamples: usize,
    seed: u64,
    statistic: impl Fn(&mut [f64]) -> f64,
) -> (f64, f64) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut estimates: Vec<f64> = (0..resamples.max(1))
        .map(|_| {
            let mut sample: Vec<f64> = (0..values.len())
                .map(|_| values[rng.usize(..values.len())])
                .collect();
            statistic(&mut sample)
        })
        .collect();
    estimates.sort_by(f64::total_cmp);
    (
        nearest_rank(&estimates, 0.025),
        nearest_rank(&estimates, 0.975),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_are_the_smallest_values_covering_the_share() {
        let values: Vec<u32> = (1..=100).collect();
        assert_eq!(nearest_rank(&values, 0.5), 50);
        assert_eq!(nearest_rank(&values, 0.99), 99);
        assert_eq!(nearest_rank(&values, 1.0), 100);
        assert_eq!(nearest_rank(&[7], 0.0), 7);
    }

    #[test]
    fn the_median_ci_brackets_the_median_and_narrows_with_agreement() {
        let spread: Vec<f64> = (0..31).map(f64::from).collect();
        let (lo, hi) = median_ci(&spread, 2000, 7);
        assert!(lo <= 15.0 && 15.0 <= hi, "[{lo}, {hi}]");
        assert!(hi - lo < 20.0, "[{lo}, {hi}]");
        assert_eq!(median_ci(&[4.0; 9], 500, 7), (4.0, 4.0));
    }

    #[test]
    fn medians_of_even_counts_differ_by_kind() {
        assert_eq!(median(&[1.0, 2.0, 4.0, 8.0]), 3.0);
        assert_eq!(upper_median(&[1.0, 2.0, 4.0, 8.0]), Some(4.0));
        assert_eq!(median(&[1.0, 2.0, 4.0]), 2.0);
        assert_eq!(upper_median::<f64>(&[]), None);
    }
}
