use std::fmt;

/// The most requests one `p_execute_all` may have in flight at once (`--max-in-flight`).
///
/// A `p_execute_all` puts TIMES requests per listed skill in flight. TIMES alone is checked
/// when the file is validated (a TIMES above the cap fails even with a single skill); the
/// number of skills is known only when the command runs, so the runner checks the product
/// then, with [`InFlightCap::check`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InFlightCap(u64);

impl InFlightCap {
    /// The old harness refused more than 1,000; a host worth profiling takes far more.
    pub const DEFAULT: Self = Self(10_000);

    pub fn new(max_in_flight: u64) -> Self {
        Self(max_in_flight)
    }

    /// The number of requests a `p_execute_all` with `times` puts in flight over `skills`
    /// skills, or why it may not.
    pub fn check(self, times: u32, skills: usize) -> Result<u64, TooManyInFlight> {
        let skills = u64::try_from(skills).unwrap_or(u64::MAX);
        let requests = u64::from(times).saturating_mul(skills);
        if requests <= self.0 {
            Ok(requests)
        } else {
            Err(TooManyInFlight {
                times,
                skills,
                cap: self,
            })
        }
    }
}

impl fmt::Display for InFlightCap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[derive(Debug, PartialEq, Eq)]
pub struct TooManyInFlight {
    times: u32,
    skills: u64,
    cap: InFlightCap,
}

impl fmt::Display for TooManyInFlight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self { times, skills, cap } = self;
        write!(
            f,
            "the line would put {times} × {skills} skills = {} requests in flight, more than \
             --max-in-flight {cap}; lower TIMES or raise --max-in-flight",
            u64::from(*times).saturating_mul(*skills)
        )
    }
}

impl std::error::Error for TooManyInFlight {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_up_to_the_cap() {
        let cap = InFlightCap::new(100);
        assert_eq!(cap.check(10, 10), Ok(100));
        assert_eq!(cap.check(5, 0), Ok(0));
        let refused = cap.check(11, 10).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "the line would put 11 × 10 skills = 110 requests in flight, more than --max-in-flight 100; \
             lower TIMES or raise --max-in-flight"
        );
        assert!(cap.check(u32::MAX, usize::MAX).is_err());
    }
}
