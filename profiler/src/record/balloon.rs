//! What a balloon held during an entry (`pressure BAND`, `--pressure`).

use super::sampling::{Watermarks, ZoneId};
use crate::band::Band;

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
    /// Why the aim was eased, if it was (the kernel had little to reclaim).
    pub eased: Option<String>,
    /// Why the hold stopped, if a safety rule stopped it.
    pub aborted: Option<String>,
}
