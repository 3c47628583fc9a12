//! Where in a band the balloon aims, and how far it moves per step.
//!
//! Positions are shares of the held range: from the band's lower edge, raised to the safety
//! floor where that is higher (the low band), to its upper edge. The aim sits high in the
//! range so that the experiment's iterations, which take a block of memory and give it back,
//! dip without leaving the band; the balloon only moves when free memory leaves a comfort
//! zone around the aim, so it does not chase those dips.

use std::ops::Range;

use anyhow::{Result, ensure};

use super::bounds;
use super::process::Adjust;
use super::safety::Safety;
use crate::ground::band::{self, Band};
use crate::producers::sample::reach::{Reach, ZoneReach};
use crate::record::balloon::{Basis, Bounds};
use crate::record::sampling::{Watermarks, ZoneId};

/// Aim and comfort zone, as shares of the held range.
struct Shares {
    aim: f64,
    comfort: (f64, f64),
}

const NORMAL: Shares = Shares {
    aim: 0.7,
    comfort: (0.25, 0.95),
};
/// With little to reclaim: higher, so an allocation burst has more room before the floor.
const EASED: Shares = Shares {
    aim: 0.9,
    comfort: (0.4, 0.98),
};
use crate::ground::units;

/// The default iteration block, as a share of the narrowest held range. An iteration that
/// starts at the aim dips by up to two blocks (the one it writes, and the previous one's pages,
/// which wait uncounted in the per-CPU free lists until reused) and stays above the comfort
/// zone's lower edge.
pub const BLOCK_SHARE: f64 = 0.2;
/// The most the balloon grows in one step: the controller cannot see free memory while the
/// balloon touches, and the watchdog gives a grow a second plus 128 MiB/s before it checks
/// free memory against the high watermark. In 256 MiB steps a machine touching pages at ~110 MB/s
/// (busy writing back a build's page cache) keeps within that, and a real stall is caught
/// within 3 s.
const MAX_STEP_PAGES: u64 = (256 << 20) / 4096;

/// The controller's view of one band under one reading of the watermarks, in free pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Aim {
    pub band: Band,
    pub bounds: Bounds,
    pub floor: u64,
    /// `None` for baseline: the balloon holds nothing.
    pub target: Option<u64>,
    /// [from, to): the balloon stays put while free memory is in here.
    pub comfort: (u64, u64),
}

/// The held range of a band: [max(lower, floor), upper).
fn held_range(band: Band, marks: &Watermarks, floor: u64) -> Result<Option<(u64, u64)>> {
    let bounds = bounds::bounds(band, marks)?;
    let Some(upper) = bounds.upper else {
        return Ok(None);
    };
    let bottom = bounds.lower.max(floor);
    ensure!(
        bottom + 16 <= upper,
        "the {band} band {} is {} wide here, no wider than the safety margin: widen the bands \
         with --scale-factor, or lower --margin-percent",
        band::interval(band),
        units::pages(upper - bounds.lower)
    );
    Ok(Some((bottom, upper)))
}

impl Aim {
    pub fn new(band: Band, marks: &Watermarks, safety: &Safety, eased: bool) -> Result<Aim> {
        let floor = safety.floor(marks, eased);
        let bounds = bounds::bounds(band, marks)?;
        let shares = if eased { &EASED } else { &NORMAL };
        Ok(match held_range(band, marks, floor)? {
            None => Aim {
                band,
                bounds,
                floor,
                target: None,
                comfort: (bounds.lower, u64::MAX),
            },
            Some((bottom, upper)) => {
                let at = |share: f64| bottom + ((upper - bottom) as f64 * share) as u64;
                Aim {
                    band,
                    bounds,
                    floor,
                    target: Some(at(shares.aim)),
                    comfort: (at(shares.comfort.0), at(shares.comfort.1)),
                }
            }
        })
    }

    /// The balloon size (pages) to move to, or `None` to stay.
    pub fn next_balloon(&self, free_pages: u64, balloon_pages: u64) -> Option<u64> {
        let next = match self.target {
            None => 0,
            Some(_) if (self.comfort.0..self.comfort.1).contains(&free_pages) => return None,
            Some(target) if free_pages > target => {
                let distance = free_pages - target;
                let width = self.comfort.1 - self.comfort.0;
                // Halve the distance while far away: the reading ages while pages are touched,
                // and other processes allocate too.
                let step = if distance <= width {
                    distance
                } else {
                    (distance / 2).max(width)
                };
                balloon_pages + step.min(MAX_STEP_PAGES)
            }
            Some(target) => balloon_pages.saturating_sub(target - free_pages),
        };
        (next != balloon_pages).then_some(next)
    }
}

/// One quantity held in the band: a zone's usable free pages (`zone` names it), or the sum.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    pub zone: Option<ZoneId>,
    /// The zone's page frames, for a balloon that moves one zone alone; `None` for the sum.
    pub pfns: Option<Range<u64>>,
    pub free_pages: u64,
    /// Its low watermark: below it, the allocator passes the zone by for any zone above its
    /// own, and comes back only in its slow path, which wakes kswapd.
    pub low: u64,
    pub aim: Aim,
}

impl Held {
    /// Where free memory is in the held range: 0 at its bottom, 1 at its top; above 1 over
    /// the band. Baseline has no top: every quantity sits at 0 there.
    fn position(&self) -> f64 {
        let Some(upper) = self.aim.bounds.upper else {
            return 0.0;
        };
        let bottom = self.aim.bounds.lower.max(self.aim.floor);
        (self.free_pages as f64 - bottom as f64) / (upper - bottom) as f64
    }

    fn below_floor(&self) -> bool {
        self.free_pages < self.aim.floor
    }
}

/// What the balloon's last adjustments showed of the zones, beyond what a reading says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Learnt {
    /// Zones it was asked to give pages of and had none: not asked again until it grows.
    pub holds_none: Vec<ZoneId>,
    /// Zones a take got none of, though free: the allocator passes them by. Normal's free
    /// pages may all sit in pageblocks of other migrate types, which it breaks up only once
    /// DMA32 is down to its low watermark (a CI run after `drop_caches` left 528 MiB so).
    /// While another zone is over its band, that one is lowered first; a take that gets the
    /// zone's pages clears it.
    pub refused: Vec<ZoneId>,
}

impl Learnt {
    /// Remembers `zone` in `list` once.
    pub fn note(list: &mut Vec<ZoneId>, zone: Option<ZoneId>) {
        if let Some(zone) = zone.filter(|zone| !list.contains(zone)) {
            list.push(zone);
        }
    }
}

/// The controller's view of one reading: what it holds in the band, each with its aim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Aims {
    /// The summed view, whatever the basis: the band's bounds as reported.
    pub summed: Aim,
    pub held: Vec<Held>,
}

impl Aims {
    pub fn new(
        basis: Basis,
        band: Band,
        reach: &Reach,
        safety: &Safety,
        eased: bool,
    ) -> Result<Aims> {
        let held = quantities(basis, reach)
            .into_iter()
            .map(|quantity| {
                Ok(Held {
                    zone: quantity.zone.map(|zone| zone.id.clone()),
                    pfns: quantity.zone.map(|zone| zone.pfns.clone()),
                    free_pages: quantity.free_pages,
                    low: quantity.marks.low,
                    aim: Aim::new(band, &quantity.marks, safety, eased)?,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Aims {
            summed: Aim::new(band, &reach.watermarks, safety, eased)?,
            held,
        })
    }

    /// Every held quantity is in the band.
    pub fn in_band(&self) -> bool {
        self.held
            .iter()
            .all(|held| held.aim.bounds.contains(held.free_pages))
    }

    /// The first quantity below its safety floor, if any.
    pub fn below_floor(&self) -> Option<&Held> {
        self.held.iter().find(|held| held.below_floor())
    }

    /// Where free memory is against the band, in words: the sum, or each zone.
    pub fn describe(&self) -> String {
        let each = |held: &Held| {
            let place = held
                .zone
                .as_ref()
                .map_or("free memory".to_string(), |zone| {
                    format!("zone {}", zone.name)
                });
            let target = held.aim.target.map_or(String::new(), |target| {
                format!(" (aim {})", units::pages(target))
            });
            format!(
                "{place} {}{target} in [{}, {})",
                units::pages(held.free_pages),
                units::pages(held.aim.bounds.lower),
                held.aim
                    .bounds
                    .upper
                    .map_or("inf".to_string(), units::pages)
            )
        };
        self.held.iter().map(each).collect::<Vec<_>>().join(", ")
    }

    /// What the balloon does next, or `None` to stay.
    ///
    /// Summed, one quantity steers a balloon that grows and shrinks at its tail. Per zone, the
    /// tail is whatever zone the allocator took last, and the allocator drains the zones in
    /// order, so the balloon moves one zone at a time: a zone below its floor, then one below
    /// its comfort zone (unless the balloon holds none of its pages), gets pages of its own
    /// back; otherwise the first zone in the allocator's order above its comfort zone is
    /// lowered by taking from it alone (the zones the allocator takes from first lend it
    /// their pages, and get them back); a zone a take was refused comes after the others. In
    /// baseline the balloon empties.
    pub fn next_balloon(&self, balloon_pages: u64, learnt: &Learnt) -> Option<Adjust> {
        let resize = |next: u64| (next != balloon_pages).then_some(Adjust::To(next));
        let short = |held: &Held| held.aim.target.unwrap_or(held.aim.floor) - held.free_pages;
        if let Some(low) = self.below_floor() {
            return match &low.pfns {
                // What the zone lacks must come back now: from the tail if not from the zone.
                Some(pfns) => Some(Adjust::Give {
                    pfns: pfns.clone(),
                    pages: short(low),
                    or_tail: true,
                }),
                None => resize(balloon_pages.saturating_sub(short(low))),
            };
        }
        let under = self
            .held
            .iter()
            .filter(|held| held.pfns.is_some() && held.aim.target.is_some())
            .filter(|held| {
                held.zone
                    .as_ref()
                    .is_some_and(|zone| !learnt.holds_none.contains(zone))
            })
            .filter(|held| held.free_pages < held.aim.comfort.0)
            .min_by(|a, b| a.position().total_cmp(&b.position()));
        if let Some(under) = under {
            return Some(Adjust::Give {
                pfns: under.pfns.clone()?,
                pages: short(under),
                or_tail: false,
            });
        }
        // Lowering a zone while the allocator still prefers another one over its comfort zone
        // would only take that one's pages, to give them back: the first zone over its
        // comfort zone in the allocator's order is lowered. It takes from zones above their
        // low watermark first, then (in its slow path, waking kswapd) from the others, each
        // highest first; a zone it was seen to pass by goes with the others.
        let over =
            |held: &&Held| held.aim.target.is_some() && held.free_pages >= held.aim.comfort.1;
        let taken_first = |held: &&Held| {
            held.free_pages >= held.low
                && held
                    .zone
                    .as_ref()
                    .is_none_or(|zone| !learnt.refused.contains(zone))
        };
        let mut order = self.held.iter().rev().filter(taken_first);
        let mut passed = self.held.iter().rev().filter(|held| !taken_first(held));
        let first_over = order.find(over).or_else(|| passed.find(over));
        let leading = match first_over {
            Some(over) => over,
            None => self
                .held
                .iter()
                .max_by(|a, b| a.position().total_cmp(&b.position()))?,
        };
        let next = leading
            .aim
            .next_balloon(leading.free_pages, balloon_pages)?;
        // Taking rather than growing at the tail: the zones the allocator takes from first
        // get back what they lend (and the highest zone what the allocator took from the
        // others while its free pages were of a migrate type it prefers not to break up).
        // Tail growth alone stalls: the zone ahead's band sits above its low watermark, and
        // the balloon gives that zone its pages back before the allocator falls through.
        match &leading.pfns {
            Some(pfns) if next > balloon_pages => {
                let others: u64 = self
                    .held
                    .iter()
                    .filter(|held| held.zone != leading.zone)
                    .map(|held| held.free_pages.saturating_sub(held.aim.floor))
                    .sum();
                Some(Adjust::Take {
                    pfns: pfns.clone(),
                    pages: next - balloon_pages,
                    most: next - balloon_pages + others.min(MAX_STEP_PAGES),
                })
            }
            _ => resize(next),
        }
    }
}

/// One quantity `basis` holds in the band: the zone (None for the sum), its usable free pages
/// and the watermarks they are measured against.
struct Quantity<'a> {
    zone: Option<&'a ZoneReach>,
    free_pages: u64,
    marks: Watermarks,
}

/// What `basis` holds in the band.
fn quantities(basis: Basis, reach: &Reach) -> Vec<Quantity<'_>> {
    match basis {
        Basis::Summed => vec![Quantity {
            zone: None,
            free_pages: reach.free_pages,
            marks: reach.watermarks,
        }],
        Basis::PerZone => reach
            .reachable()
            .map(|zone| Quantity {
                zone: Some(zone),
                free_pages: zone.usable_pages(),
                marks: zone.watermarks,
            })
            .collect(),
    }
}

/// The watermarks each held quantity is measured against: the sum, or each zone's own.
pub fn held_watermarks(basis: Basis, reach: &Reach) -> Vec<Watermarks> {
    quantities(basis, reach)
        .into_iter()
        .map(|quantity| quantity.marks)
        .collect()
}

/// The default block of an iteration: [`BLOCK_SHARE`] of the narrowest held range of the
/// bands below baseline, over every held quantity (per zone, a small zone's bands are
/// narrow: its pages are what an iteration takes once the larger zones are drained), so
/// every band gets the same block and their times compare.
pub fn default_block_pages(held: &[Watermarks], safety: &Safety) -> Result<u64> {
    let mut narrowest = u64::MAX;
    for marks in held {
        let floor = safety.floor(marks, false);
        for band in band::HOLDABLE {
            if band == Band::Promo && marks.promo.is_none() {
                continue;
            }
            if let Some((bottom, upper)) = held_range(band, marks, floor)? {
                narrowest = narrowest.min(upper - bottom);
            }
        }
    }
    Ok((narrowest as f64 * BLOCK_SHARE) as u64)
}

/// Refuses a block that would take free memory out of `band` (or below the floor) in any
/// held quantity.
pub fn check_block(
    block_pages: u64,
    band: Band,
    held: &[Watermarks],
    safety: &Safety,
) -> Result<()> {
    for marks in held {
        let aim = Aim::new(band, marks, safety, false)?;
        if let Some(target) = aim.target {
            ensure!(
                target.saturating_sub(2 * block_pages) >= aim.comfort.0,
                "a block of {} would take free memory out of the {band} band {} ({} wide \
                 here): use a smaller --block-size (the default fits), or widen the bands \
                 with --scale-factor",
                units::pages(block_pages),
                band::interval(band),
                units::pages(aim.bounds.upper.unwrap_or(aim.bounds.lower) - aim.bounds.lower)
            );
        }
    }
    Ok(())
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
    fn the_aim_sits_high_in_the_band_and_the_low_band_starts_at_the_floor() {
        let safety = Safety::default();
        let promo = Aim::new(Band::Promo, &MARKS, &safety, false).unwrap();
        assert_eq!(promo.target, Some(3700));
        assert_eq!(promo.comfort, (3250, 3950));
        let low = Aim::new(Band::Low, &MARKS, &safety, false).unwrap();
        assert_eq!(low.floor, 1250);
        assert_eq!(low.target, Some(1250 + 525));
        let eased = Aim::new(Band::Low, &MARKS, &safety, true).unwrap();
        assert_eq!(eased.floor, 1500);
        assert_eq!(eased.target, Some(1950));
        let baseline = Aim::new(Band::Baseline, &MARKS, &safety, false).unwrap();
        assert_eq!(baseline.target, None);
    }

    #[test]
    fn the_balloon_moves_only_outside_the_comfort_zone() {
        let aim = Aim::new(Band::High, &MARKS, &Safety::default(), false).unwrap();
        assert_eq!(aim.target, Some(2700));
        assert_eq!(aim.next_balloon(2500, 10_000), None);
        // Just above: the whole distance.
        assert_eq!(aim.next_balloon(3000, 10_000), Some(10_300));
        // Far above: half of it.
        assert_eq!(aim.next_balloon(102_700, 0), Some(50_000));
        // Below: give back what is missing, never below empty.
        assert_eq!(aim.next_balloon(2200, 10_000), Some(9500));
        assert_eq!(aim.next_balloon(2200, 100), Some(0));
        assert_eq!(aim.next_balloon(2200, 0), None);
        let baseline = Aim::new(Band::Baseline, &MARKS, &Safety::default(), false).unwrap();
        assert_eq!(baseline.next_balloon(10, 5), Some(0));
        assert_eq!(baseline.next_balloon(10, 0), None);
    }

    #[test]
    fn the_default_block_fits_every_band() {
        let safety = Safety::default();
        let block = default_block_pages(&[MARKS], &safety).unwrap();
        assert_eq!(block, 150);
        let small = Watermarks {
            min: 100,
            low: 200,
            high: 300,
            promo: Some(400),
        };
        assert_eq!(default_block_pages(&[MARKS, small], &safety).unwrap(), 15);
        for band in band::HOLDABLE {
            check_block(block, band, &[MARKS], &safety).unwrap();
        }
        assert!(check_block(block, Band::High, &[MARKS, small], &safety).is_err());
        let error = check_block(300, Band::Low, &[MARKS], &safety).unwrap_err();
        assert!(error.to_string().contains("--scale-factor"), "{error}");
    }

    #[test]
    fn a_margin_wider_than_the_band_is_refused() {
        let safety = Safety {
            margin_percent: 100,
            ..Safety::default()
        };
        let error = Aim::new(Band::Low, &MARKS, &safety, false).unwrap_err();
        assert!(error.to_string().contains("--margin-percent"), "{error}");
    }
}
