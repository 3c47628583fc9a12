//! What one entry's samples add up to: extremes over every sample of the entry, boundary
//! samples included, and changes between its two boundary samples.

use super::{Sample, psi::Psi, system::Counters};
use crate::record::sampling::{EntrySampling, Handles, Lowest, ZoneId};

impl Lowest {
    fn with(self, other: Lowest) -> Lowest {
        Lowest {
            free_pages: self.free_pages.min(other.free_pages),
            band: self.band.min(other.band),
        }
    }
}

/// An entry being sampled.
pub(super) struct Window {
    pub(super) index: usize,
    begin_psi: Option<Psi>,
    begin: Counters,
    samples: u64,
    rss_peak_kb: Option<u64>,
    handles: Handles,
    threads_peak: Option<u64>,
    vms_peak_kb: Option<u64>,
    zones_lowest: Lowest,
    zone_lowest: Vec<(ZoneId, Option<Lowest>)>,
}

impl Window {
    /// Opens entry `index` with its first boundary sample and the counters read with it;
    /// `zones` is the run's zone set.
    pub(super) fn open(index: usize, zones: &[ZoneId], first: &Sample, begin: Counters) -> Self {
        let mut window = Window {
            index,
            begin_psi: first.system.psi,
            begin,
            samples: 0,
            rss_peak_kb: None,
            handles: Handles::default(),
            threads_peak: None,
            vms_peak_kb: None,
            zones_lowest: summed_lowest(first),
            zone_lowest: zones.iter().map(|zone| (zone.clone(), None)).collect(),
        };
        window.observe(first);
        window
    }

    pub(super) fn observe(&mut self, sample: &Sample) {
        self.samples += 1;
        if let Some(process) = sample.process {
            self.rss_peak_kb = self.rss_peak_kb.max(Some(process.rss_kb));
            self.threads_peak = self.threads_peak.max(Some(process.threads));
            self.vms_peak_kb = self.vms_peak_kb.max(Some(process.vms_kb));
        }
        if let Some(handles) = sample.handles {
            self.handles = self.handles.max(handles);
        }
        self.zones_lowest = self.zones_lowest.with(summed_lowest(sample));
        for (id, lowest) in &mut self.zone_lowest {
            if let Some(zone) = sample.system.reach.zones.iter().find(|zone| zone.id == *id) {
                let seen = Lowest {
                    free_pages: zone.usable_pages(),
                    band: zone.band(),
                };
                *lowest = Some(lowest.map_or(seen, |lowest| lowest.with(seen)));
            }
        }
    }

    /// Closes the entry with its last boundary sample and the counters read with it.
    pub(super) fn close(mut self, last: &Sample, end: &Counters) -> EntrySampling {
        self.observe(last);
        let stall = self.begin_psi.zip(last.system.psi);
        // PSI totals only grow; saturating keeps a kernel bug from killing the sampler.
        EntrySampling {
            samples: self.samples,
            rss_peak_kb: self.rss_peak_kb,
            handles: self.handles,
            maps_limit: None,
            threads_peak: self.threads_peak,
            vms_peak_kb: self.vms_peak_kb,
            psi_some_us: stall
                .map(|(begin, end)| end.some_total_us.saturating_sub(begin.some_total_us)),
            psi_full_us: stall
                .map(|(begin, end)| end.full_total_us.saturating_sub(begin.full_total_us)),
            zones_lowest: self.zones_lowest,
            zone_lowest: self.zone_lowest,
            vmstat: end.vmstat.since(&self.begin.vmstat),
            cpu: end.cpu.since(&self.begin.cpu),
            tlb_shootdowns: end
                .tlb_shootdowns
                .zip(self.begin.tlb_shootdowns)
                .map(|(end, begin)| end.saturating_sub(begin)),
        }
    }
}

/// Over free memory as user allocations reach it (`reach`): the plain sums of /proc/zoneinfo
/// include pages no user allocation may take, and never leave the baseline band.
fn summed_lowest(sample: &Sample) -> Lowest {
    let reach = &sample.system.reach;
    Lowest {
        free_pages: reach.free_pages,
        band: reach.band(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::ground::band::Band;
    use crate::producers::sample::cpu::CpuTimes;
    use crate::producers::sample::{System, meminfo, psi, reach, vmstat, zoneinfo};
    use crate::record::process::ProcessStat;
    use crate::record::sampling::CpuShare;
    use crate::record::{Metrics, Row};

    fn sample(rss_kb: Option<u64>, normal_free: u64, psi_total_us: u64) -> Sample {
        let zoneinfo = normal_with_free(normal_free);
        Sample {
            t: Duration::ZERO,
            at: std::time::SystemTime::UNIX_EPOCH,
            entry: Some(7),
            process: rss_kb.map(|rss_kb| ProcessStat {
                rss_kb,
                vms_kb: 1,
                threads: 1,
                ..ProcessStat::default()
            }),
            handles: rss_kb.map(|_| Handles {
                maps_peak: Some(40),
                ..Handles::default()
            }),
            system: System {
                psi: Some(psi::Psi {
                    some_total_us: psi_total_us,
                    full_total_us: psi_total_us / 2,
                    some_avg10: 0.0,
                    full_avg10: 0.0,
                }),
                meminfo: meminfo::parse(include_str!("testdata/meminfo")).unwrap(),
                zones: zoneinfo::parse(&zoneinfo).unwrap(),
                reach: reach::parse(&zoneinfo).unwrap(),
            },
        }
    }

    fn counters(pgfault: u64) -> Counters {
        Counters {
            vmstat: vmstat::parse(&format!("pgfault {pgfault}\npswpin 0\n")).unwrap(),
            // Both CPUs busy a quarter of the time, one tick in ten stolen.
            cpu: CpuTimes {
                total: 200 * pgfault,
                idle: 150 * pgfault,
                steal: 20 * pgfault,
                irq: 0,
                softirq: 2 * pgfault,
            },
            tlb_shootdowns: Some(3 * pgfault),
        }
    }

    /// The captured zoneinfo with the Normal zone's free pages set.
    fn normal_with_free(pages: u64) -> String {
        let captured = include_str!("testdata/zoneinfo");
        assert!(
            captured.contains("pages free     2080781"),
            "the capture's Normal zone"
        );
        captured.replace("pages free     2080781", &format!("pages free     {pages}"))
    }

    fn normal() -> ZoneId {
        ZoneId {
            node: 0,
            name: "Normal".to_string(),
        }
    }

    #[test]
    fn sums_up_extremes_and_boundary_changes() {
        // Normal: min 13142, low 16427, high 19712, promo 22997.
        let first = sample(Some(100), 2_000_000, 1_000);
        let mut window = Window::open(7, &[normal()], &first, counters(50));
        window.observe(&sample(Some(900), 15_000, 1_500));
        window.observe(&sample(None, 20_000, 1_700));
        let entry = window.close(&sample(Some(300), 2_000_000, 4_000), &counters(80));

        assert_eq!(entry.samples, 4);
        assert_eq!(entry.rss_peak_kb, Some(900));
        // The runner's own reading after the entry, higher than any sample, is the peak.
        let mut covered = entry.clone();
        covered.cover_rss(950);
        covered.cover_rss(120);
        assert_eq!(covered.rss_peak_kb, Some(950));
        assert_eq!(
            (entry.psi_some_us, entry.psi_full_us),
            (Some(3_000), Some(1_500))
        );
        assert_eq!(
            entry.zone_lowest,
            [(
                normal(),
                Some(Lowest {
                    free_pages: 15_000,
                    band: Band::Low
                })
            )]
        );
        // DMA32 keeps the reachable sum above its watermarks; DMA does not count at all.
        let lowest = reach::parse(&normal_with_free(15_000)).unwrap();
        assert_eq!(entry.zones_lowest.band, Band::Baseline);
        assert_eq!(entry.zones_lowest.free_pages, lowest.free_pages);
        assert!(
            lowest.free_pages < 3840 + 772808 + 15_000,
            "reserves are left out"
        );
        assert_eq!(
            entry.vmstat,
            [("pgfault".to_string(), 30), ("pswpin".to_string(), 0)]
        );
        assert_eq!(
            entry.cpu,
            Some(CpuShare {
                busy_pct: 25.0,
                steal_pct: 10.0,
                irq_pct: Some(0.0),
                softirq_pct: Some(1.0),
            })
        );
    }

    #[test]
    fn writes_documented_cells_and_leaves_the_unmeasured_empty() {
        let mut first = sample(None, 2_000_000, 0);
        first.system.psi = None;
        let unseen = ZoneId {
            node: 1,
            name: "Normal".to_string(),
        };
        let window = Window::open(0, &[normal(), unseen], &first, counters(1));
        let mut row = Row::default();
        window
            .close(&sample(None, 2_000_000, 0), &counters(2))
            .write(&mut row);

        // The record's columns in its order, each pattern (zone_*, vmstat_*) expanded in place.
        let names: Vec<&str> = row.names().collect();
        let expanded = |name: &'static str| -> Vec<&'static str> {
            match name {
                "zone_*" => vec![
                    "zone_0_Normal_min_free_pages",
                    "zone_0_Normal_lowest_band",
                    "zone_1_Normal_min_free_pages",
                    "zone_1_Normal_lowest_band",
                ],
                "vmstat_*" => vec!["vmstat_pgfault", "vmstat_pswpin"],
                name => vec![name],
            }
        };
        let want: Vec<&str> = EntrySampling::COLUMNS
            .iter()
            .flat_map(|column| expanded(&column.name))
            .collect();
        assert_eq!(names, want);
        for name in names {
            assert!(
                crate::record::documentation(name).is_some(),
                "{name} is not in record::columns()"
            );
        }
        // A host gone at the boundary leaves its figures empty: every handle count among them.
        for empty in [
            "rss_peak_kb",
            "maps_limit",
            "threads_peak",
            "psi_some_us",
            "zone_1_Normal_lowest_band",
            "maps_peak",
            "fds_peak",
            "fds_limit",
            "vms_peak_kb",
            "as_limit_kb",
        ] {
            assert_eq!(row.csv(empty).as_deref(), Some(""), "{empty}");
        }
        assert_eq!(
            row.csv("zone_0_Normal_lowest_band").as_deref(),
            Some("baseline")
        );
        assert_eq!(row.csv("vmstat_pgfault").as_deref(), Some("1"));
        assert_eq!(row.csv("tlb_shootdowns").as_deref(), Some("3"));
    }

    #[test]
    fn the_band_uses_each_sample_s_own_watermarks() {
        // Watermarks rise as a zone's managed pages grow: the same free pages fall lower.
        let first = sample(Some(1), 20_000, 0);
        let mut raised = sample(Some(1), 20_000, 0);
        let zone = &mut raised.system.reach.zones[2];
        assert_eq!(zone.id, normal());
        zone.watermarks.low = 25_000;
        zone.watermarks.high = 30_000;
        let window = Window::open(0, &[normal()], &first, counters(0));
        let entry = window.close(&raised, &counters(0));
        assert_eq!(entry.zone_lowest[0].1.unwrap().band, Band::Low);
    }
}
