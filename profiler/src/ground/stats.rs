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
    bootstrap_ci(values, resamples, seed, sort_median)
}

/// The median of `values`, which it sorts.
pub fn sort_median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    median(values)
}

/// The Theil-Sen slope of several series of (x, y) points: the median of the slopes between
/// every two points of one series with different x. `None` without such a pair.
pub fn theil_sen(series: &[Vec<(f64, f64)>]) -> Option<f64> {
    let mut slopes: Vec<f64> = series
        .iter()
        .flat_map(|points| {
            points.iter().enumerate().flat_map(move |(i, (x1, y1))| {
                points[i + 1..]
                    .iter()
                    .filter(move |(x2, _)| x2 != x1)
                    .map(move |(x2, y2)| (y2 - y1) / (x2 - x1))
            })
        })
        .collect();
    if slopes.is_empty() {
        return None;
    }
    slopes.sort_unstable_by(f64::total_cmp);
    Some(median(&slopes))
}

/// A bootstrap 95% confidence interval of [`theil_sen`], resampling the points of each
/// series (the slopes between them are not independent, so resampling slopes would give an
/// interval far too narrow).
pub fn theil_sen_ci(series: &[Vec<(f64, f64)>], resamples: usize, seed: u64) -> (f64, f64) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut estimates: Vec<f64> = (0..resamples.max(1))
        .filter_map(|_| {
            let resampled: Vec<Vec<(f64, f64)>> = series
                .iter()
                .map(|points| {
                    (0..points.len())
                        .map(|_| points[rng.usize(..points.len())])
                        .collect()
                })
                .collect();
            theil_sen(&resampled)
        })
        .collect();
    if estimates.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    estimates.sort_by(f64::total_cmp);
    (
        nearest_rank(&estimates, 0.025),
        nearest_rank(&estimates, 0.975),
    )
}

/// A bootstrap 95% confidence interval of `median(values) / median(baseline) - 1`, in
/// percent: both samples resampled with replacement, independently, `resamples` times.
/// Neither may be empty.
pub fn slowdown_ci(values: &[f64], baseline: &[f64], resamples: usize, seed: u64) -> (f64, f64) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut resampled_median = |sample: &[f64]| {
        let mut drawn: Vec<f64> = (0..sample.len())
            .map(|_| sample[rng.usize(..sample.len())])
            .collect();
        sort_median(&mut drawn)
    };
    let mut estimates: Vec<f64> = (0..resamples.max(1))
        .map(|_| {
            let ratio = resampled_median(values) / resampled_median(baseline);
            100.0 * (ratio - 1.0)
        })
        .collect();
    estimates.sort_by(f64::total_cmp);
    (
        nearest_rank(&estimates, 0.025),
        nearest_rank(&estimates, 0.975),
    )
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
    fn the_slowdown_ci_brackets_the_ratio_of_medians() {
        let baseline: Vec<f64> = (0..41).map(|i| 100.0 + f64::from(i % 7)).collect();
        let slower: Vec<f64> = baseline.iter().map(|ms| ms * 1.1).collect();
        let (lo, hi) = slowdown_ci(&slower, &baseline, 2000, 7);
        assert!(lo <= 10.0 && 10.0 <= hi, "[{lo}, {hi}]");
        assert!(lo > 3.0 && hi < 17.0, "[{lo}, {hi}]");
        let (lo, hi) = slowdown_ci(&baseline, &baseline, 2000, 7);
        assert!(lo <= 0.0 && 0.0 <= hi, "[{lo}, {hi}]");
    }

    #[test]
    fn theil_sen_follows_the_line_not_its_outlier() {
        let mut points: Vec<(f64, f64)> = (0..10)
            .map(|x| (f64::from(x), 3.0 * f64::from(x)))
            .collect();
        points[1].1 += 50.0;
        assert_eq!(theil_sen(&[points.clone()]), Some(3.0));
        let (lo, hi) = theil_sen_ci(&[points], 500, 7);
        assert!(lo <= 3.0 && 3.0 <= hi, "[{lo}, {hi}]");
        assert_eq!(theil_sen(&[vec![(1.0, 2.0)]]), None);
    }

    #[test]
    fn medians_of_even_counts_differ_by_kind() {
        assert_eq!(median(&[1.0, 2.0, 4.0, 8.0]), 3.0);
        assert_eq!(upper_median(&[1.0, 2.0, 4.0, 8.0]), Some(4.0));
        assert_eq!(median(&[1.0, 2.0, 4.0]), 2.0);
        assert_eq!(upper_median::<f64>(&[]), None);
    }
}
