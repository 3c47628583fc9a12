//! Free memory as user-space allocations can reach it: the summed free pages and watermarks the
//! bands are defined on.
//!
//! Summing every zone's free pages and watermarks, as /proc/zoneinfo prints them, gives bands a
//! process can never enter: the kernel keeps part of each lower zone back from allocations that
//! could have been served higher up (`lowmem_reserve`, the zone's `protection:` line). An
//! anonymous page may come from any zone up to Movable, so a zone serves it only while
//! `free - protection[Movable] > watermark` (`__zone_watermark_ok`). On the 24 GiB machines
//! skillprof runs on, DMA (15 MiB free, 53 MiB protected) never serves user memory and DMA32
//! keeps ~82 MiB back: the plain sums bottom out ~120 MiB above the summed promo watermark,
//! so every band below baseline would be out of reach.
//!
//! Here each zone counts the free pages above its reserve, and a zone whose managed pages
//! cannot even cover its reserve and min watermark (DMA) counts neither free pages nor
//! watermarks. The sums then cross the watermarks exactly when the kernel's own checks do:
//! kswapd wakes when they fall below the summed low watermark.
//!
//! The watermarks are the kernel's current ones, as /proc/zoneinfo prints them: with the zone's
//! `boost` added, which the kernel raises for a while after an allocation had to steal a
//! pageblock of another migrate type, so that kswapd reclaims extra and defragments. A boost
//! (up to 1.5 x high) moves every band up within milliseconds, and with it the point where
//! user allocations stall in direct reclaim and, with nothing left to reclaim, the OOM killer
//! comes next: an experiment that judged safety on the configured watermarks had its balloon
//! OOM-killed while free memory sat above the configured min. The boost is also reported on
//! its own.

use std::path::Path;

use anyhow::{Context, Result};

use super::read_proc_file;
use crate::ground::band::Band;
use crate::producers::sample::zoneinfo::{self, Reserve, Zone};
use crate::record::sampling::{Watermarks, ZoneId};

/// One zone, as user-space allocations see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneReach {
    pub id: ZoneId,
    /// The zone's own free pages (`pages free`).
    pub free_pages: u64,
    /// Pages kept back from allocations that may use any zone up to Movable.
    pub reserve_pages: u64,
    /// The current watermarks, boost included.
    pub watermarks: Watermarks,
    /// What the kernel currently adds to each configured watermark (`boost`; 0 before
    /// kernel 5.0).
    pub boost_pages: u64,
    /// Whether the zone can serve user memory at all (DMA cannot).
    pub reachable: bool,
    /// The page frames it spans: which of a process's pages are the zone's.
    pub pfns: std::ops::Range<u64>,
}

impl ZoneReach {
    /// Free pages above the reserve: what a user-space allocation could still take.
    pub fn usable_pages(&self) -> u64 {
        self.free_pages.saturating_sub(self.reserve_pages)
    }

    pub fn band(&self) -> Band {
        self.watermarks.band(self.usable_pages())
    }
}

/// The reachable zones' usable free pages and watermarks, summed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reach {
    pub free_pages: u64,
    pub watermarks: Watermarks,
    /// The reachable zones' boosts, summed.
    pub boost_pages: u64,
    /// Every populated zone, reachable or not, in file order.
    pub zones: Vec<ZoneReach>,
}

impl Reach {
    pub fn band(&self) -> Band {
        self.watermarks.band(self.free_pages)
    }

    pub fn reachable(&self) -> impl Iterator<Item = &ZoneReach> {
        self.zones.iter().filter(|zone| zone.reachable)
    }

    /// The machine-wide free pages, as [`free_ram_bytes`] counts them, that guarantee at
    /// least `usable` usable free pages: that count also holds the unreachable zones' free
    /// pages and the reachable zones' reserves. (An unreachable zone's free pages barely move:
    /// only allocations that must come from it, such as DMA, take them.)
    pub fn free_ram_pages_for(&self, usable: u64) -> u64 {
        let outside: u64 = self
            .zones
            .iter()
            .map(|zone| {
                if zone.reachable {
                    zone.reserve_pages
                } else {
                    zone.free_pages
                }
            })
            .sum();
        usable + outside
    }
}

/// Free memory machine-wide, in bytes, as sysinfo(2) reports it: every zone's free pages,
/// reserves included. It reads a global counter and allocates nothing, so it answers at once
/// even when reading /proc would wait for memory.
pub fn free_ram_bytes() -> std::io::Result<u64> {
    // SAFETY: sysinfo fills the struct it is given; all-zero is a valid value of it.
    let mut info: libc::sysinfo = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a struct of the right type.
    if unsafe { libc::sysinfo(&mut info) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(info.freeram as u64 * u64::from(info.mem_unit))
}

/// Reads /proc/zoneinfo afresh: watermarks and reserves grow with a zone's managed pages.
pub fn read(proc_root: &Path) -> Result<Reach> {
    parse(&read_proc_file(proc_root, "zoneinfo")?)
}

pub fn parse(text: &str) -> Result<Reach> {
    of(&zoneinfo::parse_with_reserves(text)?)
}

/// The reach of zones as `zoneinfo::parse_with_reserves` reads them.
pub fn of(zones: &[(Zone, Reserve)]) -> Result<Reach> {
    let mut reach = Vec::new();
    for (zone, reserve) in zones.iter().filter(|(zone, _)| zone.populated()) {
        let reserve_pages = movable_reserve(zones, zone, reserve)?;
        // Reachability judged without the boost: a boost is temporary, a zone's size is not.
        let configured_min = zone.watermarks.min.saturating_sub(reserve.boost_pages);
        reach.push(ZoneReach {
            id: zone.id.clone(),
            free_pages: zone.free_pages,
            reserve_pages,
            watermarks: zone.watermarks,
            boost_pages: reserve.boost_pages,
            reachable: zone.managed_pages > reserve_pages + configured_min,
            pfns: zone.pfns(),
        });
    }
    let reachable = || reach.iter().filter(|zone| zone.reachable);
    let sum = |value: fn(&ZoneReach) -> u64| reachable().map(value).sum();
    Ok(Reach {
        free_pages: sum(ZoneReach::usable_pages),
        watermarks: Watermarks {
            min: sum(|zone| zone.watermarks.min),
            low: sum(|zone| zone.watermarks.low),
            high: sum(|zone| zone.watermarks.high),
            promo: reachable().map(|zone| zone.watermarks.promo).sum(),
        },
        boost_pages: sum(|zone| zone.boost_pages),
        zones: reach,
    })
}

/// The zone's protection against allocations that may use any zone up to the node's Movable
/// zone, the highest an anonymous page may come from (`gfp_zone(GFP_HIGHUSER_MOVABLE)`). A
/// node lists its zones in zone-index order, which is what the protection values are
/// indexed by.
fn movable_reserve(zones: &[(Zone, Reserve)], zone: &Zone, reserve: &Reserve) -> Result<u64> {
    let id = &zone.id;
    let protection = reserve.protection.as_ref().with_context(|| {
        format!(
            "/proc/zoneinfo: node {} zone {} has no `protection:` line",
            id.node, id.name
        )
    })?;
    let movable = zones
        .iter()
        .filter(|(other, _)| other.id.node == id.node)
        .position(|(other, _)| other.id.name == "Movable")
        .with_context(|| format!("/proc/zoneinfo: node {} lists no Movable zone", id.node))?;
    protection.get(movable).copied().with_context(|| {
        format!(
            "/proc/zoneinfo: the protection line of node {} zone {} has no Movable entry",
            id.node, id.name
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAPTURED: &str = include_str!("../sample/testdata/zoneinfo");

    #[test]
    fn dma_is_out_of_reach_and_dma32_counts_above_its_reserve() {
        let reach = parse(CAPTURED).unwrap();
        let names: Vec<_> = reach.zones.iter().map(|z| z.id.name.as_str()).collect();
        assert_eq!(names, ["DMA", "DMA32", "Normal"]);
        assert!(
            !reach.zones[0].reachable,
            "DMA: 3840 managed < 13642 reserved"
        );
        assert_eq!(reach.zones[1].reserve_pages, 10624);
        assert_eq!(reach.zones[1].usable_pages(), 772808 - 10624);
        assert_eq!(reach.zones[2].reserve_pages, 0);
        assert_eq!(reach.free_pages, 772808 - 10624 + 2080781);
        assert_eq!(
            reach.watermarks,
            Watermarks {
                min: 3734 + 13142,
                low: 4667 + 16427,
                high: 5600 + 19712,
                promo: Some(6533 + 22997),
            }
        );
        assert_eq!(reach.band(), Band::Baseline);
    }

    /// The state in which kswapd woke on this machine: every reachable zone at its low
    /// watermark above its reserve. The plain sums call it baseline; reach calls it low.
    #[test]
    fn zones_at_their_low_watermark_sum_to_the_low_band() {
        let at_low = CAPTURED
            .replacen("pages free     772808", "pages free     15290", 1)
            .replacen("pages free     2080781", "pages free     16426", 1);
        let reach = parse(&at_low).unwrap();
        assert_eq!(reach.free_pages, 4666 + 16426);
        assert_eq!(reach.band(), Band::Low);
        assert_eq!(reach.zones[1].band(), Band::Low);
        // Summed as /proc/zoneinfo prints them (populated zones, reserves included), the
        // same state sits far above even the promo watermark.
        let zones = zoneinfo::parse(&at_low).unwrap();
        let populated = || zones.iter().filter(|zone| zone.populated());
        let free: u64 = populated().map(|zone| zone.free_pages).sum();
        let promo: u64 = populated().filter_map(|zone| zone.watermarks.promo).sum();
        assert!(
            free > promo,
            "plain sums call it baseline: {free} > {promo}"
        );
    }

    /// zoneinfo prints the watermarks with the boost added, as the kernel applies them.
    #[test]
    fn boosts_raise_the_watermarks_and_are_reported() {
        let boosted = CAPTURED
            .replacen("        boost    0\n        min      13142\n        low      16427\n        high     19712\n        promo    22997",
                "        boost    4608\n        min      17750\n        low      21035\n        high     24320\n        promo    27605", 1);
        assert_ne!(boosted, CAPTURED, "the Normal zone's block");
        let reach = parse(&boosted).unwrap();
        assert_eq!(reach.zones[2].boost_pages, 4608);
        assert_eq!(reach.boost_pages, 4608);
        let configured = parse(CAPTURED).unwrap().watermarks;
        assert_eq!(reach.watermarks.min, configured.min + 4608);
        assert_eq!(reach.watermarks.promo, configured.promo.map(|p| p + 4608));
    }

    /// The watchdog's check: machine-wide free pages at this count leave at least the usable
    /// pages asked for, even with DMA32 drained to its reserve.
    #[test]
    fn the_machine_wide_count_for_a_floor_covers_dma_and_the_reserves() {
        let reach = parse(CAPTURED).unwrap();
        assert_eq!(reach.free_ram_pages_for(5000), 5000 + 3840 + 10624);
        let drained = CAPTURED
            .replacen("pages free     772808", "pages free     10000", 1)
            .replacen("pages free     2080781", "pages free     5000", 1);
        let drained = parse(&drained).unwrap();
        let machine_wide = 3840 + 10000 + 5000;
        assert_eq!(drained.free_pages, 5000);
        // Conservative by what DMA32 lacks of its reserve, never the other way.
        assert_eq!(
            drained.free_ram_pages_for(5000) - machine_wide,
            10624 - 10000
        );
    }

    /// sysinfo(2) and /proc/meminfo read the same counter, a few pages of per-CPU drift apart.
    #[test]
    fn sysinfo_counts_the_free_memory_meminfo_does() {
        let free = free_ram_bytes().unwrap() / 1024;
        let meminfo =
            crate::producers::sample::meminfo::read(Path::new(crate::producers::sample::PROC))
                .unwrap();
        let drift = free.abs_diff(meminfo.memfree_kb);
        assert!(
            drift < 64 * 1024,
            "sysinfo {free} kB, MemFree {} kB",
            meminfo.memfree_kb
        );
    }

    #[test]
    fn a_zone_without_protection_is_named() {
        let broken = CAPTURED.replacen("        protection: (0, 0, 10624, 10624, 10624)\n", "", 1);
        let error = parse(&broken).unwrap_err().to_string();
        assert!(error.contains("node 0 zone DMA32"), "{error}");
    }

    #[test]
    fn each_node_indexes_its_own_zones() {
        let two_nodes = format!("{CAPTURED}{}", CAPTURED.replace("Node 0,", "Node 1,"));
        let reach = parse(&two_nodes).unwrap();
        assert_eq!(reach.zones.len(), 6);
        assert_eq!(reach.zones[4].reserve_pages, 10624);
        assert_eq!(reach.free_pages, 2 * (772808 - 10624 + 2080781));
    }
}
