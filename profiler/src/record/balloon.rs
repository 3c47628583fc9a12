//! What a balloon held during an entry (`pressure BAND`, `--pressure`).

use super::sampling::{Watermarks, ZoneId};
use crate::ground::band::Band;

/// What a band is held on.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    clap::ValueEnum,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Basis {
    /// Every zone that serves user memory, each against its own watermarks: the band is held
    /// when all of them are in it, the state the kernel's decisions are made on (an
    /// allocation falls back to the next zone while one is below low; kswapd wakes only when
    /// every zone is). Growing moves only the zone the allocator is taking from, and the zone
    /// it drained before stays where the allocator left it, so the balloon also gives back
    /// and takes pages of one zone alone (docs/findings/2026-11-24-per-zone-bands.md shows the evidence).
    PerZone,
    /// The zones' usable free pages against their watermarks, summed: reachable in every
    /// band, but one zone may be below its low watermark while another keeps kswapd asleep.
    #[default]
    Summed,
}

/// A band's range of free pages: [lower, upper), `upper` None for baseline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Bounds {
    pub lower: u64,
    pub upper: Option<u64>,
}

/// One populated zone over a window: its own usable free pages against its own watermarks.
/// `None` while not read, and always for a zone that cannot serve user memory (DMA).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ZoneHeld {
    pub id: ZoneId,
    pub min_usable_pages: Option<u64>,
    pub lowest_band: Option<Band>,
}

/// The band actually held over a window (since the hold began, the last retarget or the last
/// `reset_window`), from the readings taken every interval. A window `reset_window` starts
/// opens with the reading before it, so that an entry shorter than the interval still says
/// where free memory was.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BandHeld {
    /// The band aimed at.
    pub band: Band,
    /// What it was held on; `in_band_reads` counts readings with every zone in the band in
    /// per-zone mode.
    #[serde(default)]
    pub basis: Basis,
    pub reads: u64,
    /// Readings with free memory inside the band.
    pub in_band_reads: u64,
    /// Fewest and most usable free pages read (see `reach`).
    pub min_free_pages: u64,
    pub max_free_pages: u64,
    /// Usable free pages at the last reading.
    pub free_pages: u64,
    pub lowest_band: Band,
    pub highest_band: Band,
    /// The band and watermarks at the last reading (they grow with managed pages).
    pub bounds: Bounds,
    pub watermarks: Watermarks,
    pub balloon_bytes: u64,
    pub max_balloon_bytes: u64,
    /// Times the balloon was resized.
    pub adjustments: u64,
    /// Readings below the safety floor (each made the balloon give memory back).
    pub floor_crossings: u64,
    /// Controller steps (readings, resizes) that overran their time limit with free memory
    /// above the high watermark, and the slowest step: the machine was slow to hand out memory.
    pub late_steps: u64,
    pub slowest_step_ms: u64,
    pub zones: Vec<ZoneHeld>,
    /// The most the kernel's watermark boost added to the watermarks in a reading, summed
    /// over the zones: an allocation took part of another migrate type's pageblock, and
    /// every band moved up by it until kswapd reset it.
    #[serde(default)]
    pub max_boost_pages: u64,
    /// Why the aim was eased, if it was (the kernel had little to reclaim).
    pub eased: Option<String>,
    /// Why the hold stopped, if a safety rule stopped it.
    pub aborted: Option<String>,
}

use super::field::{Row, Value, fields};

fields! {
    impl BandHeld: pub fn write_cells(held: Option<&BandHeld>, zones: &[ZoneId], row: &mut Row) -> row {
        let kb = |pages: u64| pages * procfs::page_size() / 1024;
        let read = held.filter(|held| held.reads > 0);
    }
    BAND "pressure_band" Text "the band a balloon aimed at during the entry (readings every 50 ms of free memory as user memory reaches it: pages above each zone's lowmem reserve, summed over the zones that can serve user memory)" = held.map(|h| h.band.name());
    READS "pressure_reads" Count "readings of free memory during the entry" = held.map(|h| h.reads);
    IN_BAND "pressure_in_band_pct" Percent "share of the readings inside the band" = read.map(BandHeld::in_band_percent);
    MIN_FREE "pressure_min_free_kb" Kib "the least free memory read" = read.map(|h| kb(h.min_free_pages));
    MAX_FREE "pressure_max_free_kb" Kib "the most free memory read" = read.map(|h| kb(h.max_free_pages));
    LOWEST "pressure_lowest_band" Text "the lowest band a reading fell into" = read.map(|h| h.lowest_band.name());
    HIGHEST "pressure_highest_band" Text "the highest band a reading fell into" = read.map(|h| h.highest_band.name());
    LOWER "pressure_band_lower_kb" Kib "the band's lower end at the last reading (the watermarks include the kernel's boost)" = held.map(|h| kb(h.bounds.lower));
    UPPER "pressure_band_upper_kb" Kib "the band's upper end at the last reading (empty for baseline)" = held.and_then(|h| h.bounds.upper).map(kb);
    BALLOON "pressure_balloon_kb" Kib "what the balloon held at the end of the entry" = held.map(|h| h.balloon_bytes / 1024);
    BALLOON_MAX "pressure_balloon_max_kb" Kib "the most the balloon held during the entry" = held.map(|h| h.max_balloon_bytes / 1024);
    ADJUSTMENTS "pressure_adjustments" Count "balloon resizes" = held.map(|h| h.adjustments);
    FLOOR "pressure_floor_crossings" Count "readings below min + margin, each making the balloon give memory back" = held.map(|h| h.floor_crossings);
    LATE "pressure_late_steps" Count "controller steps that overran their time limit while free memory stayed above the high watermark: the machine was slow to hand out memory, and the entry's times include that" = held.map(|h| h.late_steps);
    SLOWEST "pressure_slowest_step_ms" Ms "the slowest controller step" = held.map(|h| h.slowest_step_ms);
    BOOST "pressure_boost_max_kb" Kib "the most the kernel's watermark boost added to the watermarks in a reading: an allocation took part of another migrate type's pageblock (fragmentation), and the band moved up by it until kswapd reset it (vm.watermark_boost_factor; --boost-factor 0 turns it off)" = read.map(|h| kb(h.max_boost_pages));
    ZONE "pressure_zone_*" Text "per populated zone: pressure_zone_<node>_<name>_min_usable_kb (fewest free KiB above the zone's lowmem reserve in any reading) and pressure_zone_<node>_<name>_lowest_band (its lowest band against its own watermarks); empty for a zone that cannot serve user memory (DMA)" for zone_cells(held, zones);
    EASED "pressure_eased" Text "why the aim was eased: the kernel had little to reclaim" = held.and_then(|h| h.eased.as_deref());
    ABORTED "pressure_aborted" Text "why the hold stopped" = held.and_then(|h| h.aborted.as_deref());
}

/// The `pressure_zone_*` cells: every zone of the run's set, so that every row has the same
/// columns; empty for a zone without a balloon's readings.
fn zone_cells(held: Option<&BandHeld>, zones: &[ZoneId]) -> Vec<(String, Value)> {
    let kb = |pages: u64| pages * procfs::page_size() / 1024;
    let unread = |id: &ZoneId| ZoneHeld {
        id: id.clone(),
        min_usable_pages: None,
        lowest_band: None,
    };
    let zones = match held {
        Some(held) => held.zones.clone(),
        None => zones.iter().map(unread).collect(),
    };
    zones
        .iter()
        .flat_map(|zone| {
            let column = |what: &str| format!("pressure_{}", zone.id.column(what));
            [
                (
                    column("min_usable_kb"),
                    zone.min_usable_pages.map(kb).into(),
                ),
                (
                    column("lowest_band"),
                    zone.lowest_band.map(Band::name).into(),
                ),
            ]
        })
        .collect()
}
