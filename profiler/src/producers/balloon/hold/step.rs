//! The controller's step: what one reading means for the hold, without I/O, so that every
//! rule it applies can be tested without root, a balloon or a machine under pressure.

use anyhow::Result;

use super::{Reading, SETTLED_READS, State};
use crate::ground::band::Band;
use crate::producers::balloon::aim::Aims;
use crate::producers::balloon::process::Adjust;
use crate::producers::balloon::safety::{self, Safety, Violation};

/// What the controller does after a reading.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Action {
    /// A safety rule is broken: empty the balloon and end the hold, for this reason.
    Abort(String),
    /// Keep holding, first adjusting the balloon so, if at all.
    Hold(Option<Adjust>),
}

/// Takes `reading` into the state (easing, settling, the window) and decides on the balloon,
/// which holds `balloon_bytes` in pages of `page` bytes.
pub(super) fn step(
    state: &mut State,
    reading: &Reading,
    safety: &Safety,
    balloon_bytes: u64,
    page: u64,
) -> Result<Action> {
    let eased = safety::little_to_reclaim(&reading.meminfo, state.eased.is_some());
    // Baseline holds nothing, so there is no aim to ease.
    if eased.is_some() && state.band != Band::Baseline && state.window.eased.is_none() {
        state.window.eased.clone_from(&eased);
    }
    state.eased = eased;
    let aims = Aims::new(
        state.window.basis,
        state.band,
        &reading.reach,
        safety,
        state.eased.is_some(),
    )?;
    let below = aims
        .below_floor()
        .map(|held| (held.zone.as_ref(), held.free_pages, held.aim.floor));
    let violation = safety.violation(below, reading.psi.as_ref());
    if let Some(reason) = judge(state, violation, balloon_bytes == 0) {
        return Ok(Action::Abort(reason));
    }
    // Baseline holds nothing: once the balloon is empty the machine is as unpressed as the
    // experiment can leave it, even with a zone below its band. Only reclaim could lift such a
    // zone, and kswapd, woken below the low watermark, stops at high: a zone that page cache or
    // another process fills stays under promo for good (a CI run waited out its timeout so).
    let unpressed = state.band == Band::Baseline && balloon_bytes == 0;
    let in_band = aims.in_band();
    state.in_band_streak = if in_band || unpressed {
        state.in_band_streak + 1
    } else {
        0
    };
    state.settled |= state.in_band_streak >= SETTLED_READS;
    state.window.record(&reading.reach, &aims, balloon_bytes);
    let next = aims.next_balloon(balloon_bytes / page, &state.learnt);
    state.last = Some((reading.reach.clone(), aims));
    Ok(Action::Hold(next))
}

/// Whether a violation of the safety rules aborts the hold, and why. Below the floor, the
/// balloon first gives memory back (the adjustment shrinks it to the aim); the hold is aborted
/// if that is not enough by the next reading, or if there was nothing to give back.
fn judge(state: &mut State, violation: Option<Violation>, balloon_empty: bool) -> Option<String> {
    match violation {
        None => {
            state.below_floor = false;
            None
        }
        Some(Violation::Stalls(reason)) => Some(reason),
        Some(Violation::BelowFloor(reason)) if balloon_empty => {
            // Nothing the experiment holds is left to give: say what else fills the memory.
            Some(format!(
                "{reason}, with the balloon already empty: the machine's own memory fills it \
                 (another process, or page cache, which kswapd leaves in a lower zone once a \
                 higher one is above its high watermark); `sync; echo 1 > \
                 /proc/sys/vm/drop_caches` drops the clean cache before a rerun"
            ))
        }
        Some(Violation::BelowFloor(reason)) if state.below_floor => Some(format!(
            "{reason}, still, after the balloon gave memory back"
        )),
        Some(Violation::BelowFloor(_)) => {
            state.below_floor = true;
            state.window.floor_crossings += 1;
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::producers::balloon::aim::{Aim, Learnt};
    use crate::producers::balloon::hold::BandHeld;
    use crate::producers::sample::{meminfo, reach};
    use crate::record::balloon::Basis;

    const CAPTURED: &str = include_str!("../../sample/testdata/zoneinfo");
    const PAGE: u64 = 4096;

    /// The captured machine with DMA32 and Normal at these free pages; no PSI, so only the
    /// floor can be broken.
    fn reading(dma32_free: u64, normal_free: u64) -> Reading {
        let zoneinfo = CAPTURED
            .replacen(
                "pages free     772808",
                &format!("pages free     {dma32_free}"),
                1,
            )
            .replacen(
                "pages free     2080781",
                &format!("pages free     {normal_free}"),
                1,
            );
        Reading {
            reach: reach::parse(&zoneinfo).unwrap(),
            psi: None,
            meminfo: meminfo::parse(include_str!("../../sample/testdata/meminfo")).unwrap(),
        }
    }

    fn holding_high() -> State {
        holding(Basis::Summed)
    }

    fn holding(basis: Basis) -> State {
        let reach = reading(772808, 2080781).reach;
        let aim = Aim::new(Band::High, &reach.watermarks, &Safety::default(), false).unwrap();
        State {
            band: Band::High,
            settled: false,
            in_band_streak: 0,
            below_floor: false,
            window: BandHeld::new(
                Band::High,
                basis,
                aim.bounds,
                reach.watermarks,
                0,
                reach.zones.iter().map(|zone| zone.id.clone()),
            ),
            last: None,
            eased: None,
            aborted: None,
            learnt: Learnt::default(),
        }
    }

    /// One step with a 1 GiB balloon and the default safety rules.
    fn step_gib(state: &mut State, reading: &Reading) -> Result<Action> {
        step(state, reading, &Safety::default(), 1 << 30, PAGE)
    }

    /// High is [21,094, 25,312) usable pages here; DMA32 keeps 10,624 back.
    #[test]
    fn far_above_the_band_the_balloon_grows_and_the_band_is_not_reached() {
        let mut state = holding_high();
        let action = step(
            &mut state,
            &reading(772808, 2080781),
            &Safety::default(),
            0,
            PAGE,
        );
        let Ok(Action::Hold(Some(Adjust::To(pages)))) = action else {
            panic!("{action:?}");
        };
        assert!(pages > 0);
        assert_eq!((state.in_band_streak, state.settled), (0, false));
        assert_eq!(state.window.reads, 1);
        assert!(state.last.is_some());
    }

    #[test]
    fn the_band_is_reached_after_settled_reads_in_a_row() {
        let mut state = holding_high();
        let in_band = reading(10624 + 4666, 18000);
        for read in 1..=SETTLED_READS {
            assert!(!state.settled, "read {read}");
            let action = step_gib(&mut state, &in_band).unwrap();
            assert!(matches!(action, Action::Hold(_)), "{action:?}");
        }
        assert!(state.settled);
        assert_eq!(state.window.in_band_reads, u64::from(SETTLED_READS));
    }

    /// Normal below its promo watermark, where no balloon can lift it: with the balloon empty
    /// the baseline is held as the machine is, and the window says it was not in the band.
    #[test]
    fn baseline_with_the_balloon_empty_settles_though_a_zone_is_below_its_band() {
        let mut state = holding(Basis::PerZone);
        state.band = Band::Baseline;
        let full_normal = reading(772808, 20000);
        for _ in 0..SETTLED_READS {
            let action = step(&mut state, &full_normal, &Safety::default(), 0, PAGE).unwrap();
            assert_eq!(action, Action::Hold(None));
        }
        assert!(state.settled);
        assert_eq!(state.window.in_band_reads, 0);

        // A balloon still holding memory is not baseline yet.
        let mut state = holding(Basis::PerZone);
        state.band = Band::Baseline;
        for _ in 0..SETTLED_READS {
            step_gib(&mut state, &full_normal).unwrap();
        }
        assert!(!state.settled);
    }

    #[test]
    fn below_the_floor_the_balloon_shrinks_once_then_the_hold_aborts() {
        let mut state = holding_high();
        let below = reading(10624 + 4666, 1000);
        let action = step_gib(&mut state, &below).unwrap();
        let Action::Hold(Some(Adjust::To(pages))) = action else {
            panic!("{action:?}");
        };
        assert!(pages < (1 << 30) / PAGE);
        assert_eq!(state.window.floor_crossings, 1);
        let action = step_gib(&mut state, &below).unwrap();
        let Action::Abort(reason) = action else {
            panic!("{action:?}");
        };
        assert!(
            reason.contains("after the balloon gave memory back"),
            "{reason}"
        );

        let mut state = holding_high();
        let action = step(&mut state, &below, &Safety::default(), 0, PAGE).unwrap();
        let Action::Abort(reason) = action else {
            panic!("{action:?}");
        };
        assert!(
            reason.contains("with the balloon already empty")
                && reason.contains("/proc/sys/vm/drop_caches"),
            "{reason}"
        );
    }

    /// DMA32 [min 3,734, low 4,667, high 5,600) above its reserve of 10,624; Normal [13,142,
    /// 16,427, 19,712). The summed high band is [21,094, 25,312).
    const DMA32_RESERVE: u64 = 10624;

    const DMA32_PFNS: std::ops::Range<u64> = 4096..4096 + 1044480;
    const NORMAL_PFNS: std::ops::Range<u64> = 1048576..1048576 + 5505024;

    /// The allocator drains Normal to its low watermark before it falls back to DMA32: summed,
    /// that state is in the high band while DMA32 is still above its own; per zone it is not.
    /// Each zone then moves alone: Normal, at the bottom of its band, gets pages of its own
    /// back, and pages are taken from DMA32 alone.
    #[test]
    fn per_zone_the_band_needs_every_zone_and_each_zone_moves_alone() {
        let normal_at_low = 16427;
        let dma32_above = reading(DMA32_RESERVE + 7000, normal_at_low);
        let mut summed = holding(Basis::Summed);
        step_gib(&mut summed, &dma32_above).unwrap();
        assert_eq!(summed.window.in_band_reads, 1, "summed: 23,427 is in high");
        let mut per_zone = holding(Basis::PerZone);
        let action = step_gib(&mut per_zone, &dma32_above).unwrap();
        assert_eq!(per_zone.window.in_band_reads, 0, "DMA32 is in promo");
        // Normal's aim: 16,427 + 0.7 × 3,285.
        let give = Adjust::Give {
            pfns: NORMAL_PFNS,
            pages: 2299,
            or_tail: false,
        };
        assert_eq!(action, Action::Hold(Some(give)));

        // A balloon with none of Normal's pages: DMA32 steers, and it is reached by growing
        // through Normal (half of its 1,680 pages over its aim of 4,667 + 0.7 × 933), which
        // gets back the pages it lends, up to all it has above its floor (which is above min).
        per_zone
            .learnt
            .holds_none
            .push(per_zone.window.zones[2].id.clone());
        let action = step_gib(&mut per_zone, &dma32_above).unwrap();
        let Action::Hold(Some(Adjust::Take { pfns, pages, most })) = action else {
            panic!("{action:?}");
        };
        assert_eq!((pfns, pages), (DMA32_PFNS, 840));
        assert!(most > pages && most < pages + 16427 - 13142, "{most}");
        // Normal over its band while DMA32 is in it: taken from Normal alone, lending it
        // up to DMA32's pages above its floor.
        let normal_above = reading(DMA32_RESERVE + 5300, 30_000);
        let action = step_gib(&mut per_zone, &normal_above).unwrap();
        let Action::Hold(Some(Adjust::Take { pfns, pages, most })) = action else {
            panic!("{action:?}");
        };
        assert_eq!(pfns, NORMAL_PFNS);
        assert!(most > pages && most < pages + 5300, "{pages} {most}");

        // Both over: Normal first, however far over DMA32 is, since growing through Normal
        // would only take its pages.
        let both_over = reading(DMA32_RESERVE + 300_000, 19_600);
        let action = step_gib(&mut per_zone, &both_over).unwrap();
        let Action::Hold(Some(Adjust::Take { pfns, .. })) = action else {
            panic!("{action:?}");
        };
        assert_eq!(pfns, NORMAL_PFNS);
        // ... unless a take from Normal got none of its pages: its free pages are ones the
        // allocator keeps while DMA32 has room, so DMA32 is lowered first.
        let normal = per_zone.window.zones[2].id.clone();
        per_zone.learnt.refused.push(normal);
        let action = step_gib(&mut per_zone, &both_over).unwrap();
        let Action::Hold(Some(Adjust::Take { pfns, .. })) = action else {
            panic!("{action:?}");
        };
        assert_eq!(pfns, DMA32_PFNS);
        // With DMA32 in its band, Normal is taken from again, lending DMA32's pages.
        let normal_over = reading(DMA32_RESERVE + 5300, 25_000);
        let action = step_gib(&mut per_zone, &normal_over).unwrap();
        let Action::Hold(Some(Adjust::Take { pfns, .. })) = action else {
            panic!("{action:?}");
        };
        assert_eq!(pfns, NORMAL_PFNS);
        per_zone.learnt.refused.clear();

        let both_in_high = reading(DMA32_RESERVE + 5300, normal_at_low);
        let action = step_gib(&mut per_zone, &both_in_high);
        assert_eq!(action.unwrap(), Action::Hold(None), "DMA32 is at its aim");
        assert_eq!(per_zone.window.in_band_reads, 1);
    }

    /// In low, Normal just under its low watermark is passed by while DMA32 is above its
    /// own: growing would take DMA32's pages, so DMA32 is lowered first, however close to
    /// its aim Normal is; then Normal, which the allocator comes back to in its slow path.
    #[test]
    fn per_zone_low_lowers_the_zone_the_allocator_falls_back_to_first() {
        let mut per_zone = holding(Basis::PerZone);
        per_zone.band = Band::Low;
        let normal_passed_by = reading(DMA32_RESERVE + 7000, 16_400);
        let action = step_gib(&mut per_zone, &normal_passed_by).unwrap();
        let Action::Hold(Some(Adjust::Take { pfns, .. })) = action else {
            panic!("{action:?}");
        };
        assert_eq!(pfns, DMA32_PFNS);
        let dma32_in_low = reading(DMA32_RESERVE + 4400, 16_400);
        let action = step_gib(&mut per_zone, &dma32_in_low).unwrap();
        let Action::Hold(Some(Adjust::Take { pfns, .. })) = action else {
            panic!("{action:?}");
        };
        assert_eq!(pfns, NORMAL_PFNS);
    }

    /// Per zone, the floor is each zone's own: Normal below it is a violation, named, while
    /// the sum is still far above the summed floor.
    #[test]
    fn per_zone_a_zone_below_its_floor_is_named_and_the_balloon_gives_back() {
        let normal_low = reading(DMA32_RESERVE + 300_000, 13_500);
        let mut per_zone = holding(Basis::PerZone);
        per_zone.band = Band::Low;
        let action = step_gib(&mut per_zone, &normal_low);
        let Ok(Action::Hold(Some(Adjust::Give {
            pfns,
            pages,
            or_tail: true,
        }))) = action
        else {
            panic!("{action:?}");
        };
        assert_eq!(pfns, NORMAL_PFNS);
        assert!(pages > 0);
        assert_eq!(per_zone.window.floor_crossings, 1);
        let action = step_gib(&mut per_zone, &normal_low);
        let Ok(Action::Abort(reason)) = action else {
            panic!("{action:?}");
        };
        assert!(reason.contains("in zone Normal"), "{reason}");

        let mut summed = holding(Basis::Summed);
        summed.band = Band::Low;
        let action = step_gib(&mut summed, &normal_low);
        assert_eq!(summed.window.floor_crossings, 0, "{action:?}");
    }
}
