//! The search for a configuration's peak: the highest rate whose step meets the target.
//! From a start rate it doubles until a step misses (or the highest rate allowed is met),
//! halves instead when the start already misses, then bisects between the highest rate met
//! and the lowest missed until they are within 5% of each other (mutilate's `--search`, in
//! steps). Pure: the caller runs each step and says whether it met the target.

/// Bisection steps at most, after the bracket is found.
const BISECTIONS: u32 = 8;

#[derive(Clone, Debug)]
pub struct Search {
    start: u32,
    max: u32,
    met: Option<u32>,
    missed: Option<u32>,
    bisections: u32,
    stopped: bool,
}

impl Search {
    pub fn new(start: u32, max: u32) -> Search {
        Search {
            start: start.clamp(1, max.max(1)),
            max: max.max(1),
            met: None,
            missed: None,
            bisections: 0,
            stopped: false,
        }
    }

    /// The next rate to try, or `None` when the peak is known.
    pub fn next(&self) -> Option<u32> {
        if self.stopped {
            return None;
        }
        match (self.met, self.missed) {
            (None, None) => Some(self.start),
            (Some(met), None) => (met < self.max).then(|| met.saturating_mul(2).min(self.max)),
            (None, Some(missed)) => (missed > 1).then_some(missed / 2),
            (Some(met), Some(missed)) => {
                let close = missed - met <= (met / 20).max(1);
                (!close && self.bisections < BISECTIONS).then_some(met + (missed - met) / 2)
            }
        }
    }

    /// The step at `rps` met the target, or did not.
    pub fn record(&mut self, rps: u32, met: bool) {
        if self.met.is_some() && self.missed.is_some() {
            self.bisections += 1;
        }
        match met {
            true => self.met = Some(self.met.map_or(rps, |m| m.max(rps))),
            false => self.missed = Some(self.missed.map_or(rps, |m| m.min(rps))),
        }
    }

    /// Ends the search where it stands (the host died, or the generator could not send).
    pub fn stop(&mut self) {
        self.stopped = true;
    }

    /// The highest rate met, and the lowest missed.
    pub fn bracket(&self) -> (Option<u32>, Option<u32>) {
        (self.met, self.missed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a search against a host that meets the target up to `capacity`.
    fn peak(start: u32, max: u32, capacity: u32) -> (Option<u32>, Option<u32>, usize) {
        let mut search = Search::new(start, max);
        let mut steps = 0;
        while let Some(rps) = search.next() {
            steps += 1;
            assert!(steps < 40, "the search does not end");
            search.record(rps, rps <= capacity);
        }
        let (met, missed) = search.bracket();
        (met, missed, steps)
    }

    #[test]
    fn doubles_then_bisects_to_within_five_percent() {
        let (met, missed, steps) = peak(100, 100_000, 1850);
        let (met, missed) = (met.unwrap(), missed.unwrap());
        assert!(met <= 1850 && missed > 1850, "{met} {missed}");
        assert!(missed - met <= (met / 20).max(1), "{met} {missed}");
        assert!(steps <= 6 + 8, "{steps}");
    }

    #[test]
    fn halves_when_the_start_misses_and_stops_at_the_ceiling() {
        let (met, missed, _) = peak(1000, 100_000, 90);
        assert!(met.unwrap() <= 90 && missed.unwrap() > 90);
        let (met, missed, _) = peak(100, 400, 10_000);
        assert_eq!((met, missed), (Some(400), None));
        let (met, missed, _) = peak(8, 100, 0);
        assert_eq!((met, missed), (None, Some(1)));
    }
}
