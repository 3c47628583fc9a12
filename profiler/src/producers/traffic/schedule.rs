//! When an open loop's requests are due: every 1/rate seconds, or at the gaps of a Poisson
//! process of that rate. Pure and seeded, so a step's schedule is the same every run.

use std::time::Duration;

use crate::record::traffic::Arrivals;

/// The send times of one step, as offsets from its start, up to `length`.
pub struct Schedule {
    arrivals: Arrivals,
    rps: f64,
    length: Duration,
    rng: fastrand::Rng,
    sent: u64,
    at: f64,
}

impl Schedule {
    pub fn new(arrivals: Arrivals, rps: u32, length: Duration, seed: u64) -> Schedule {
        Schedule {
            arrivals,
            rps: f64::from(rps.max(1)),
            length,
            rng: fastrand::Rng::with_seed(seed),
            sent: 0,
            at: 0.0,
        }
    }
}

impl Iterator for Schedule {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let at = match self.arrivals {
            // From the count, not by adding gaps: no rounding drifts over a long step.
            Arrivals::Constant => self.sent as f64 / self.rps,
            Arrivals::Poisson => {
                // An exponential gap of mean 1/rate; 1 - U is in (0, 1], so ln is finite.
                let gap = -(1.0 - self.rng.f64()).ln() / self.rps;
                self.at += gap;
                self.at
            }
        };
        self.sent += 1;
        let at = Duration::from_secs_f64(at);
        (at < self.length).then_some(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_constant_schedule_sends_rate_times_seconds_evenly() {
        let times: Vec<Duration> =
            Schedule::new(Arrivals::Constant, 1000, Duration::from_secs(2), 1).collect();
        assert_eq!(times.len(), 2000);
        assert_eq!(times[0], Duration::ZERO);
        assert_eq!(times[1], Duration::from_millis(1));
        assert_eq!(times[1999], Duration::from_millis(1999));
    }

    #[test]
    fn a_poisson_schedule_keeps_the_rate_on_average_with_irregular_gaps() {
        let times: Vec<Duration> =
            Schedule::new(Arrivals::Poisson, 2000, Duration::from_secs(10), 7).collect();
        // 20,000 expected; a Poisson count's standard deviation is its square root (141).
        assert!((19_400..=20_600).contains(&times.len()), "{}", times.len());
        let gaps: Vec<f64> = times
            .windows(2)
            .map(|w| (w[1] - w[0]).as_secs_f64())
            .collect();
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let deviation =
            (gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64).sqrt();
        // An exponential's standard deviation equals its mean.
        assert!((deviation / mean - 1.0).abs() < 0.05, "{deviation} {mean}");
        // The same seed, the same schedule.
        let again: Vec<Duration> =
            Schedule::new(Arrivals::Poisson, 2000, Duration::from_secs(10), 7).collect();
        assert_eq!(times, again);
    }
}
