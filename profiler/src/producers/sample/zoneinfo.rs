//! /proc/zoneinfo: each zone's free pages and watermarks, and the band between watermarks
//! its free pages are in. The kernel wakes kswapd when a zone falls below `low` and
//! reclaims in the allocating task (direct reclaim) below `min`; `promo` (kernels >= 6.3,
//! with memory tiering) sits above `high`.
//!
//! Watermarks and `managed` are read afresh every time: memory is initialised lazily on
//! the machines skillprof runs on, so a zone's managed pages, and with them its
//! watermarks, grow during a run.

use std::path::Path;

use anyhow::{Context, Result, bail};

use super::read_proc_file;
use crate::ground::band::Band;

use crate::record::sampling::{Watermarks, ZoneId};

impl Watermarks {
    pub fn band(&self, free_pages: u64) -> Band {
        if free_pages < self.min {
            Band::Min
        } else if free_pages < self.low {
            Band::Low
        } else if free_pages < self.high {
            Band::High
        } else if self.promo.is_some_and(|promo| free_pages < promo) {
            Band::Promo
        } else {
            Band::Baseline
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Zone {
    pub id: ZoneId,
    /// `pages free`, the zone's nr_free_pages.
    pub free_pages: u64,
    pub watermarks: Watermarks,
    pub managed_pages: u64,
    pub present_pages: u64,
    pub spanned_pages: u64,
    /// The zone's first page frame (`start_pfn`; 0 for an empty zone, which prints none).
    pub start_pfn: u64,
}

impl Zone {
    /// Has memory at all. Empty zones (Movable, Device here) still print watermarks, which
    /// mean nothing and must not count in sums.
    pub fn populated(&self) -> bool {
        self.present_pages > 0
    }

    /// The page frames the zone spans: a page whose frame number is in here is the zone's.
    pub fn pfns(&self) -> std::ops::Range<u64> {
        self.start_pfn..self.start_pfn + self.spanned_pages
    }
}

/// What a zone keeps back from user allocations, which only `reach` needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reserve {
    /// `boost`: what the kernel currently adds to each watermark (0 before kernel 5.0).
    pub boost_pages: u64,
    /// The `protection:` line: pages kept back from allocations that may use any zone up to
    /// the node's zone of that index.
    pub protection: Option<Vec<u64>>,
}

/// The populated zones' ids, in file order.
pub fn populated_ids(zones: &[Zone]) -> Vec<ZoneId> {
    zones
        .iter()
        .filter(|zone| zone.populated())
        .map(|zone| zone.id.clone())
        .collect()
}

pub fn read(proc_root: &Path) -> Result<Vec<Zone>> {
    parse(&read_proc_file(proc_root, "zoneinfo")?)
}

/// A zone is a `Node N, zone NAME` line followed by indented blocks: the node's statistics
/// (in the first populated zone of each node only), then `pages free` with the watermarks
/// and the zone's own statistics, then `pagesets`. Only the block that starts at
/// `pages free` is read, so a per-node or per-cpu key can never pass for a zone's own.
pub fn parse(text: &str) -> Result<Vec<Zone>> {
    Ok(parse_with_reserves(text)?
        .into_iter()
        .map(|(zone, _)| zone)
        .collect())
}

/// Every zone with its reserve, in file order.
pub fn parse_with_reserves(text: &str) -> Result<Vec<(Zone, Reserve)>> {
    let mut zones = Vec::new();
    let mut zone: Option<Fields> = None;
    let mut in_zone_block = false;
    for line in text.lines() {
        let line = line.trim();
        if let Some(header) = line.strip_prefix("Node ") {
            zones.extend(zone.take().map(Fields::finish).transpose()?);
            zone = Some(Fields::new(parse_header(header)?));
            in_zone_block = false;
            continue;
        }
        let Some(fields) = zone.as_mut() else {
            bail!("/proc/zoneinfo: {line:?} before the first `Node` line");
        };
        if let Some(free) = line.strip_prefix("pages free") {
            fields.free = Some(number(free.trim(), line)?);
            in_zone_block = true;
        } else if line == "per-node stats" || line == "pagesets" {
            in_zone_block = false;
        } else if let Some(start) = line.strip_prefix("start_pfn:") {
            // After the pagesets, which carry keys of their own (`high`).
            fields.start_pfn = Some(number(start.trim(), line)?);
        } else if in_zone_block {
            fields.set(line)?;
        }
    }
    zones.extend(zone.map(Fields::finish).transpose()?);
    if zones.is_empty() {
        bail!("/proc/zoneinfo lists no zones");
    }
    Ok(zones)
}

/// `0, zone      DMA` (after `Node `).
fn parse_header(header: &str) -> Result<ZoneId> {
    let (node, name) = header
        .split_once(", zone")
        .with_context(|| format!("/proc/zoneinfo: unexpected zone header `Node {header}`"))?;
    Ok(ZoneId {
        node: number(node, header)? as u32,
        name: name.trim().to_string(),
    })
}

fn number(text: &str, line: &str) -> Result<u64> {
    text.parse()
        .with_context(|| format!("/proc/zoneinfo: expected a number in {line:?}"))
}

/// A zone's values as they are found; which are required is decided in `finish`.
struct Fields {
    id: ZoneId,
    free: Option<u64>,
    min: Option<u64>,
    low: Option<u64>,
    high: Option<u64>,
    promo: Option<u64>,
    spanned: Option<u64>,
    start_pfn: Option<u64>,
    present: Option<u64>,
    managed: Option<u64>,
    boost: Option<u64>,
    protection: Option<Vec<u64>>,
}

impl Fields {
    fn new(id: ZoneId) -> Self {
        Fields {
            id,
            free: None,
            min: None,
            low: None,
            high: None,
            promo: None,
            spanned: None,
            start_pfn: None,
            present: None,
            managed: None,
            boost: None,
            protection: None,
        }
    }

    fn set(&mut self, line: &str) -> Result<()> {
        if let Some(values) = line.strip_prefix("protection:") {
            let values = values
                .trim()
                .trim_start_matches('(')
                .trim_end_matches(')')
                .split(',')
                .map(|value| number(value.trim(), line))
                .collect::<Result<_>>()?;
            self.protection = Some(values);
            return Ok(());
        }
        let mut words = line.split_whitespace();
        let (Some(key), Some(value)) = (words.next(), words.next()) else {
            return Ok(());
        };
        let slot = match key {
            "min" => &mut self.min,
            "low" => &mut self.low,
            "high" => &mut self.high,
            "promo" => &mut self.promo,
            "spanned" => &mut self.spanned,
            "present" => &mut self.present,
            "managed" => &mut self.managed,
            "boost" => &mut self.boost,
            _ => return Ok(()),
        };
        *slot = Some(number(value, line)?);
        Ok(())
    }

    fn finish(self) -> Result<(Zone, Reserve)> {
        let id = self.id;
        let required = |value: Option<u64>, key: &str| {
            value.with_context(|| {
                format!(
                    "/proc/zoneinfo: node {} zone {} has no `{key}` line",
                    id.node, id.name
                )
            })
        };
        let zone = Zone {
            free_pages: required(self.free, "pages free")?,
            watermarks: Watermarks {
                min: required(self.min, "min")?,
                low: required(self.low, "low")?,
                high: required(self.high, "high")?,
                promo: self.promo,
            },
            managed_pages: required(self.managed, "managed")?,
            present_pages: required(self.present, "present")?,
            spanned_pages: required(self.spanned, "spanned")?,
            start_pfn: self.start_pfn.unwrap_or(0),
            id,
        };
        let reserve = Reserve {
            boost_pages: self.boost.unwrap_or(0),
            protection: self.protection,
        };
        Ok((zone, reserve))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAPTURED: &str = include_str!("testdata/zoneinfo");

    fn zone(node: u32, name: &str) -> ZoneId {
        ZoneId {
            node,
            name: name.to_string(),
        }
    }

    #[test]
    fn reads_every_zone_of_the_captured_file() {
        let zones = parse(CAPTURED).unwrap();
        let ids: Vec<_> = zones.iter().map(|z| z.id.clone()).collect();
        assert_eq!(
            ids,
            ["DMA", "DMA32", "Normal", "Movable", "Device"].map(|name| zone(0, name))
        );
        // Normal: memory initialised lazily, so managed is far below present.
        assert_eq!(
            zones[2],
            Zone {
                id: zone(0, "Normal"),
                free_pages: 2080781,
                watermarks: Watermarks {
                    min: 13142,
                    low: 16427,
                    high: 19712,
                    promo: Some(22997),
                },
                managed_pages: 2719744,
                present_pages: 5505024,
                spanned_pages: 5505024,
                start_pfn: 1048576,
            }
        );
        // DMA holds the per-node stats block; its values must not leak into the zone.
        assert_eq!(zones[0].free_pages, 3840);
        assert_eq!(zones[0].watermarks.high, 26);
        assert_eq!(
            populated_ids(&zones),
            ["DMA", "DMA32", "Normal"].map(|n| zone(0, n))
        );
    }

    #[test]
    fn a_kernel_without_promo_reads_none_and_sums_none() {
        let old: String = CAPTURED
            .lines()
            .filter(|line| !line.trim_start().starts_with("promo"))
            .map(|line| format!("{line}\n"))
            .collect();
        let zones = parse(&old).unwrap();
        assert!(zones.iter().all(|zone| zone.watermarks.promo.is_none()));
        // Summed over zones, a missing promo stays missing.
        let reach = crate::producers::sample::reach::parse(&old).unwrap();
        assert_eq!(reach.watermarks.promo, None);
        assert_eq!(zones[2].watermarks.high, 19712);
    }

    #[test]
    fn every_node_has_its_own_per_node_block() {
        let two_nodes = format!("{CAPTURED}{}", CAPTURED.replace("Node 0,", "Node 1,"));
        let zones = parse(&two_nodes).unwrap();
        assert_eq!(zones.len(), 10);
        assert_eq!(zones[5].id, zone(1, "DMA"));
        assert_eq!(
            zones[5],
            Zone {
                id: zone(1, "DMA"),
                ..zones[0].clone()
            }
        );
        assert_eq!(
            zone(1, "Normal").column("free_pages"),
            "zone_1_Normal_free_pages"
        );
    }

    #[test]
    fn a_missing_watermark_names_the_zone() {
        let broken = CAPTURED.replacen("        low      4667\n", "", 1);
        let error = parse(&broken).unwrap_err().to_string();
        assert!(error.contains("node 0 zone DMA32 has no `low`"), "{error}");
    }

    #[test]
    fn bands_are_named_after_the_watermark_free_pages_are_below() {
        let marks = Watermarks {
            min: 10,
            low: 20,
            high: 30,
            promo: Some(40),
        };
        let bands = [0, 9, 10, 19, 20, 29, 30, 39, 40, 1000].map(|free| marks.band(free));
        use Band::*;
        assert_eq!(
            bands,
            [
                Min, Min, Low, Low, High, High, Promo, Promo, Baseline, Baseline
            ]
        );
        let old = Watermarks {
            promo: None,
            ..marks
        };
        assert_eq!(old.band(35), Baseline);
        assert_eq!([Baseline, Low, Promo].into_iter().min(), Some(Low));
    }
}
