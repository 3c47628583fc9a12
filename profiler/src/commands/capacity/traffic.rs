//! The other half of capacity: how many servers a fleet needs for a rate, within a latency
//! target, from `skillprof slo` experiments. Each experiment gives the peak sustained rate of
//! each host configuration; per CPU count the best of them is a server's rate with that
//! many CPUs. At the user's core count the rate is measured where a run had that count;
//! with six or more counts it is fitted with the Universal Scalability Law (Gunther's
//! X(N) = λN / (1 + σ(N-1) + κN(N-1)); codahale/usl refuses fewer points, and so does this);
//! with fewer it is bounded: at most linear in the cores from the best rate per CPU, at
//! least the best rate measured (a bigger server serves no less), and the answer says so.

use anyhow::{Result, bail};
use serde::Serialize;

use crate::record::slo::{SloReport, Target};

/// A server's peak within the target at one CPU count.
#[derive(Clone, Debug, Serialize)]
pub struct RatePoint {
    pub cpus: usize,
    pub peak_rps: u32,
    /// The configuration that reached it.
    pub config: String,
    /// The experiment folder it came from.
    pub source: String,
}

/// How a server's rate at the asked core count was found.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RateBasis {
    /// Measured at that count.
    Measured,
    /// The Universal Scalability Law fitted to six or more counts.
    Usl { lambda: f64, sigma: f64, kappa: f64 },
    /// Fewer counts than a fit needs: a range between the best rate measured and linear
    /// scaling of the best rate per CPU.
    Bounded,
}

/// What a fleet needs for `rate`.
#[derive(Clone, Debug, Serialize)]
pub struct RateCapacity {
    pub rate_rps: f64,
    pub target: Target,
    pub cores: u32,
    pub points: Vec<RatePoint>,
    pub basis: RateBasis,
    /// A server's rate within the target at `cores`: low and high ends.
    pub per_server_rps: (f64, f64),
    /// Servers the rate needs: from the high rate (fewest) to the low (most).
    pub servers: (u64, u64),
    /// Little's law at a server's high rate: requests in flight = rate × latency (the
    /// median at the peak step, from the scheduled send).
    pub in_flight_per_server: Option<f64>,
}

/// The best peak per CPU count over the experiments.
pub fn points(reports: &[(String, SloReport)]) -> Result<(Vec<RatePoint>, Target)> {
    let Some((_, first)) = reports.first() else {
        bail!("--rate needs --slo DIR: an experiment folder of skillprof slo");
    };
    let target = first.target.clone();
    let mut points: Vec<RatePoint> = Vec::new();
    for (source, report) in reports {
        if report.target != target {
            bail!(
                "{source} was measured against {}, another against {target}: one target per \
                 answer",
                report.target
            );
        }
        for peak in &report.configs {
            let Some(rps) = peak.peak_rps else { continue };
            let cpus = peak.config.cpus.len();
            let better = points
                .iter()
                .position(|p| p.cpus == cpus)
                .map(|i| (i, points[i].peak_rps < rps));
            let point = RatePoint {
                cpus,
                peak_rps: rps,
                config: peak.config.label(),
                source: source.clone(),
            };
            match better {
                None => points.push(point),
                Some((i, true)) => points[i] = point,
                Some((_, false)) => {}
            }
        }
    }
    if points.is_empty() {
        bail!("no configuration of the experiments met {target}: no server rate to plan with");
    }
    points.sort_by_key(|p| p.cpus);
    Ok((points, target))
}

/// The median latency (from the scheduled send) of the step that reached `point`'s peak.
pub fn peak_latency_ms(reports: &[(String, SloReport)], point: &RatePoint) -> Option<f64> {
    let (_, report) = reports.iter().find(|(source, _)| *source == point.source)?;
    report
        .steps
        .iter()
        .find(|s| {
            s.rps == point.peak_rps
                && s.verdict.met()
                && report.configs[s.config].config.label() == point.config
        })
        .map(|s| s.traffic.latency.p50_ms)
}

/// The fleet for `rate` at `cores` per server, from `points`; `latency_ms`: the median at a
/// server's peak, for Little's law.
pub fn answer(
    rate: f64,
    cores: u32,
    points: Vec<RatePoint>,
    target: Target,
    latency_ms: Option<f64>,
) -> RateCapacity {
    let n = f64::from(cores);
    let (basis, per_server) = match points.iter().find(|p| p.cpus as u32 == cores) {
        Some(point) => (
            RateBasis::Measured,
            (point.peak_rps as f64, point.peak_rps as f64),
        ),
        None => match usl(&points) {
            Some((lambda, sigma, kappa)) => {
                let x = lambda * n / (1.0 + sigma * (n - 1.0) + kappa * n * (n - 1.0));
                (
                    RateBasis::Usl {
                        lambda,
                        sigma,
                        kappa,
                    },
                    (x, x),
                )
            }
            None => {
                let best = points.iter().map(|p| p.peak_rps as f64).fold(0.0, f64::max);
                let per_cpu = points
                    .iter()
                    .map(|p| p.peak_rps as f64 / p.cpus as f64)
                    .fold(0.0, f64::max);
                (RateBasis::Bounded, (best.min(per_cpu * n), per_cpu * n))
            }
        },
    };
    let servers = |per: f64| (rate / per.max(1e-9)).ceil().max(1.0) as u64;
    RateCapacity {
        rate_rps: rate,
        target,
        cores,
        points,
        basis,
        servers: (servers(per_server.1), servers(per_server.0)),
        per_server_rps: per_server,
        in_flight_per_server: latency_ms.map(|ms| per_server.1 * ms / 1e3),
    }
}

/// The Universal Scalability Law through `points`, if they are six or more counts and
/// include one CPU (λ is the rate at one): (λ, σ, κ), fitted by least squares on the
/// linear form N/C(N) - 1 = σ(N-1) + κN(N-1), C(N) = X(N)/X(1).
pub fn usl(points: &[RatePoint]) -> Option<(f64, f64, f64)> {
    if points.len() < 6 {
        return None;
    }
    let lambda = points.iter().find(|p| p.cpus == 1)?.peak_rps as f64;
    let (mut s11, mut s12, mut s22, mut s1y, mut s2y) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for point in points.iter().filter(|p| p.cpus > 1) {
        let n = point.cpus as f64;
        let y = n * lambda / point.peak_rps as f64 - 1.0;
        let (x1, x2) = (n - 1.0, n * (n - 1.0));
        s11 += x1 * x1;
        s12 += x1 * x2;
        s22 += x2 * x2;
        s1y += x1 * y;
        s2y += x2 * y;
    }
    let det = s11 * s22 - s12 * s12;
    if det.abs() < 1e-12 {
        return None;
    }
    let sigma = (s1y * s22 - s2y * s12) / det;
    let kappa = (s2y * s11 - s1y * s12) / det;
    Some((lambda, sigma.max(0.0), kappa.max(0.0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(cpus: usize, peak_rps: u32) -> RatePoint {
        RatePoint {
            cpus,
            peak_rps,
            config: String::new(),
            source: String::new(),
        }
    }

    fn target() -> Target {
        Target {
            quantile: "p99".into(),
            ms: 10.0,
        }
    }

    #[test]
    fn fits_the_universal_scalability_law_from_six_counts() {
        let (lambda, sigma, kappa) = (1000.0, 0.05, 0.001);
        let x = |n: f64| lambda * n / (1.0 + sigma * (n - 1.0) + kappa * n * (n - 1.0));
        let points: Vec<RatePoint> = [1, 2, 4, 8, 16, 32]
            .into_iter()
            .map(|n| point(n, x(n as f64).round() as u32))
            .collect();
        let (l, s, k) = usl(&points).unwrap();
        assert_eq!(l, 1000.0);
        assert!(
            (s - sigma).abs() < 0.002 && (k - kappa).abs() < 0.0002,
            "{s} {k}"
        );
        assert!(usl(&points[..5]).is_none(), "five counts are too few");
        let fleet = answer(100_000.0, 64, points, target(), Some(2.0));
        assert!(matches!(fleet.basis, RateBasis::Usl { .. }));
        let at_64 = x(64.0);
        assert!((fleet.per_server_rps.0 - at_64).abs() / at_64 < 0.01);
    }

    #[test]
    fn from_one_and_two_cpus_the_rate_at_sixteen_is_a_range_and_says_so() {
        let fleet = answer(
            50_000.0,
            16,
            vec![point(1, 1800), point(2, 3200)],
            target(),
            None,
        );
        assert_eq!(fleet.basis, RateBasis::Bounded);
        // At most linear from the best per CPU (1,800/s); at least the best measured.
        assert_eq!(fleet.per_server_rps, (3200.0, 28_800.0));
        assert_eq!(fleet.servers, (2, 16));
        let measured = answer(
            50_000.0,
            2,
            vec![point(1, 1800), point(2, 3200)],
            target(),
            Some(1.0),
        );
        assert_eq!(measured.basis, RateBasis::Measured);
        assert_eq!(measured.servers, (16, 16));
        assert_eq!(measured.in_flight_per_server, Some(3.2));
    }
}
