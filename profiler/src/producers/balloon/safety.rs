//! The safety rules: a floor above min that free memory must not cross, a limit on memory
//! stalls, and a gentler aim when the kernel has little it could reclaim.

use crate::ground::units;
use crate::producers::sample::meminfo::Meminfo;
use crate::producers::sample::psi::Psi;
use crate::record::sampling::{Watermarks, ZoneId};

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Safety {
    /// The margin above min, in percent of the [min, low) band's width.
    pub margin_percent: u64,
    /// Abort when /proc/pressure/memory `full avg10` exceeds this (percent).
    pub psi_full_max: f64,
}

impl Default for Safety {
    fn default() -> Self {
        Safety {
            margin_percent: 25,
            psi_full_max: 20.0,
        }
    }
}

/// A safety rule broken, and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// Free memory is below min + margin: because something allocated, or because a
    /// watermark boost raised min. The balloon gives memory back at once; the band is aborted
    /// if that does not lift free memory above the floor by the next reading.
    BelowFloor(String),
    /// Memory stalls beyond the limit: the band is aborted.
    Stalls(String),
}

/// Below this much reclaimable memory (page cache the kernel could drop, plus free swap) an
/// allocation burst in the low band has nowhere to go but the OOM killer: aim gentler.
const LITTLE_TO_RECLAIM_KB: u64 = 128 * 1024;
/// ... and back to the normal aim only above this, so the aim does not flap.
const ENOUGH_TO_RECLAIM_KB: u64 = 256 * 1024;

impl Safety {
    /// The free pages skillprof never pushes below: min plus the margin, doubled when eased.
    pub fn floor(&self, marks: &Watermarks, eased: bool) -> u64 {
        let margin = (marks.low - marks.min) * self.margin_percent / 100;
        marks.min + if eased { 2 * margin } else { margin }
    }

    /// The rule free memory breaks now, if any. `below` is what fell below its floor, if
    /// anything did: where (a zone, or None for the sum), its free pages and its floor.
    pub fn violation(
        &self,
        below: Option<(Option<&ZoneId>, u64, u64)>,
        psi: Option<&Psi>,
    ) -> Option<Violation> {
        if let Some((zone, free_pages, floor)) = below {
            let place = zone.map_or(String::new(), |zone| {
                format!(" in zone {} (node {})", zone.name, zone.node)
            });
            return Some(Violation::BelowFloor(format!(
                "free memory{place} was {}, below the safety floor {} (min + margin)",
                units::pages(free_pages),
                units::pages(floor)
            )));
        }
        let full = psi?.full_avg10;
        (full > self.psi_full_max).then(|| {
            Violation::Stalls(format!(
                "memory stalls: PSI full avg10 was {full:.1}%, above the {:.1}% limit",
                self.psi_full_max
            ))
        })
    }
}

/// Whether the kernel has little it could reclaim, with the words to say so. `eased` is the
/// current state, for the hysteresis. Reclaimable memory is MemAvailable - MemFree (the
/// kernel's own estimate of what it can drop beyond free pages) plus free swap.
pub fn little_to_reclaim(meminfo: &Meminfo, eased: bool) -> Option<String> {
    let cache_kb = meminfo.memavailable_kb.saturating_sub(meminfo.memfree_kb);
    let reclaimable_kb = cache_kb + meminfo.swapfree_kb;
    let threshold = if eased {
        ENOUGH_TO_RECLAIM_KB
    } else {
        LITTLE_TO_RECLAIM_KB
    };
    (reclaimable_kb < threshold).then(|| {
        let swap = if meminfo.swaptotal_kb == 0 {
            "no swap".to_string()
        } else {
            format!("{} MiB of swap free", meminfo.swapfree_kb / 1024)
        };
        format!(
            "the kernel has little to reclaim ({swap}, ~{} MiB of reclaimable cache): \
             aiming higher in the band, safety margin doubled",
            cache_kb / 1024
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MARKS: Watermarks = Watermarks {
        min: 1000,
        low: 2000,
        high: 3000,
        promo: Some(4000),
    };

    #[test]
    fn the_floor_is_min_plus_a_share_of_the_low_band() {
        let safety = Safety::default();
        assert_eq!(safety.floor(&MARKS, false), 1250);
        assert_eq!(safety.floor(&MARKS, true), 1500);
    }

    #[test]
    fn crossing_the_floor_or_stalling_is_a_violation() {
        let safety = Safety::default();
        let normal = ZoneId {
            node: 0,
            name: "Normal".to_string(),
        };
        assert!(matches!(
            safety.violation(Some((Some(&normal), 1249, 1250)), None),
            Some(Violation::BelowFloor(reason))
                if reason.contains("safety floor") && reason.contains("in zone Normal (node 0)")
        ));
        assert_eq!(safety.violation(None, None), None);
        let stalled = Psi {
            some_total_us: 0,
            full_total_us: 0,
            some_avg10: 50.0,
            full_avg10: 25.0,
        };
        assert!(matches!(
            safety.violation(None, Some(&stalled)),
            Some(Violation::Stalls(reason)) if reason.contains("25.0%")
        ));
    }

    #[test]
    fn little_to_reclaim_has_hysteresis() {
        let meminfo = |cache_kb: u64, swapfree_kb: u64| Meminfo {
            memfree_kb: 100_000,
            memavailable_kb: 100_000 + cache_kb,
            swaptotal_kb: swapfree_kb,
            swapfree_kb,
        };
        let said = little_to_reclaim(&meminfo(50_000, 0), false).unwrap();
        assert!(
            said.contains("no swap") && said.contains("~48 MiB"),
            "{said}"
        );
        assert_eq!(little_to_reclaim(&meminfo(200_000, 0), false), None);
        assert!(little_to_reclaim(&meminfo(200_000, 0), true).is_some());
        assert_eq!(little_to_reclaim(&meminfo(100_000, 1 << 20), true), None);
    }
}
