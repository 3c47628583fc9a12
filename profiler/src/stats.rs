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

/// The same for the mean: where a total over steps matters (memory per skill is the growth
/// over all skills, however unevenly malloc hands it out step by step).
pub fn mean_ci(values: &[f64], resamples: usize, seed: u64) -> (f64, f64) {
    bootstrap_ci(values, resamples, seed, |sample| mean(sample))
}

/// The least-squares slope through the origin of `points` (x, y): for points centred on
/// their own series' means, the pooled within-series slope.
pub fn slope(points: &[(f64, f64)]) -> f64 {
    let (xy, xx) = points
        .iter()
        .fold((0.0, 0.0), |(xy, xx), (x, y)| (xy + x * y, xx + x * x));
    if xx == 0.0 { 0.0 } else { xy / xx }
}

/// A bootstrap 95% confidence interval of [`slope`], resampling the points.
pub fn slope_ci(points: &[(f64, f64)], resamples: usize, seed: u64) -> (f64, f64) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut estimates: Vec<f64> = (0..resamples.max(1))
        .map(|_| {
            let sample: Vec<(f64, f64)> = (0..points.len())
                .map(|_| points[rng.usize(..points.len())])
                .collect();
            slope(&sample)
        })
        .collect();
    estimates.sort_by(f64::total_cmp);
    (
        nearest_rank(&estimates, 0.025),
        nearest_rank(&estimates, 0.975),
    )
}

pub fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len().max(1) as f64
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
    fn the_slope_of_a_line_is_its_own_and_its_ci_brackets_it() {
        let line: Vec<(f64, f64)> = (-5..=5)
            .map(|x| (f64::from(x), 3.0 * f64::from(x)))
            .collect();
        assert_eq!(slope(&line), 3.0);
        let noisy: Vec<(f64, f64)> = line
            .iter()
            .enumerate()
            .map(|(i, (x, y))| (*x, y + if i % 2 == 0 { 2.0 } else { -2.0 }))
            .collect();
        let (lo, hi) = slope_ci(&noisy, 2000, 7);
        assert!(lo < 3.0 && 3.0 < hi && hi - lo < 2.0, "[{lo}, {hi}]");
    }

    #[test]
    fn the_mean_ci_brackets_the_mean() {
        let steps = [-2.0, 3.0, 1.0, 0.0, 2.0, 1.0, -1.0, 4.0];
        let (lo, hi) = mean_ci(&steps, 2000, 7);
        assert_eq!(mean(&steps), 1.0);
        assert!(
            lo < 1.0 && 1.0 < hi && lo > -2.0 && hi < 4.0,
            "[{lo}, {hi}]"
        );
    }

    #[test]
    fn medians_of_even_counts_differ_by_kind() {
        assert_eq!(median(&[1.0, 2.0, 4.0, 8.0]), 3.0);
        assert_eq!(upper_median(&[1.0, 2.0, 4.0, 8.0]), Some(4.0));
        assert_eq!(median(&[1.0, 2.0, 4.0]), 2.0);
        assert_eq!(upper_median::<f64>(&[]), None);
    }
}
