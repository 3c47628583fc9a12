//! The probes' per-entry counters, combined from their per-CPU copies. What they mean as
//! columns is the record's ([`crate::record::probes::probe_columns`]).

use skillprof_common::{Combine as _, Counters};

#[cfg(test)]
use crate::record::probes::ProbeMetrics;

/// Combines the per-CPU copies of one entry's counters: sums, and maxima for the `*_max`
/// counters.
pub fn combine<'a>(per_cpu: impl IntoIterator<Item = &'a Counters>) -> Counters {
    let mut total = Counters::default();
    for cpu in per_cpu {
        total.combine(cpu);
    }
    total
}

#[cfg(test)]
impl ProbeMetrics {
    /// `counters` as if every probe of the plan had attached by tp_btf, without --events.
    pub(crate) fn attached_everywhere(counters: Counters) -> Self {
        ProbeMetrics {
            counters,
            attached: super::PROBES
                .iter()
                .map(|plan| (plan.probe, crate::record::probes::Mechanism::TpBtf))
                .collect(),
            majflt_perf: None,
            streaming: false,
            skills: None,
            published_at: Vec::new(),
            published_during: Default::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Row;
    use crate::record::probes::{Mechanism, Probe};

    #[test]
    fn missing_probes_write_empty_cells() {
        let mut counters = Counters::default();
        counters.syscalls[0].calls = 3;
        counters.faults.user = 10;
        counters.faults.user_write = 4;
        let metrics = ProbeMetrics {
            counters,
            attached: [(Probe::Syscalls, Mechanism::TpBtf)].into(),
            majflt_perf: Some(2),
            streaming: false,
            skills: None,
            published_at: Vec::new(),
            published_during: Default::default(),
        };
        let mut row = Row::default();
        ProbeMetrics::write_cells(Some(&metrics), &mut row);
        let csv = |name: &str| row.get(name).map(ToString::to_string);
        assert_eq!(csv("mmap_calls").as_deref(), Some("3"));
        assert_eq!(csv("faults_user").as_deref(), Some(""));
        assert_eq!(csv("majflt_perf").as_deref(), Some("2"));
        assert_eq!(csv("events_lost").as_deref(), Some(""));
        assert_eq!(
            metrics.read(Probe::Syscalls, |c| c.syscalls[0].calls),
            Some(3)
        );
        assert_eq!(metrics.read(Probe::PageFaults, |c| c.faults.user), None);
    }

    /// Found by the run_folder fuzz target: an entries.jsonl whose counts the kernel could
    /// not have made (more write faults than faults) panicked the report.
    #[test]
    fn counts_the_kernel_could_not_have_made_do_not_overflow() {
        let mut counters = Counters::default();
        counters.faults.user = 1;
        counters.faults.user_write = 5;
        let mut row = Row::default();
        ProbeMetrics::write_cells(Some(&ProbeMetrics::attached_everywhere(counters)), &mut row);
        assert_eq!(
            row.get("faults_user_read")
                .map(ToString::to_string)
                .as_deref(),
            Some("0")
        );
    }

    #[test]
    fn per_cpu_copies_sum_and_keep_maxima() {
        let mut a = Counters::default();
        a.syscalls[1].calls = 2;
        a.syscalls[1].lat_max_ns = 50;
        a.direct.host_max_ns = 7;
        let mut b = a;
        b.syscalls[1].lat_max_ns = 30;
        b.direct.host_max_ns = 9;
        let total = combine([&a, &b]);
        assert_eq!(total.syscalls[1].calls, 4);
        assert_eq!(total.syscalls[1].lat_max_ns, 50);
        assert_eq!(total.direct.host_max_ns, 9);
    }

    #[test]
    fn a_publish_names_every_skill_with_a_request_in_flight_at_its_instant() {
        use crate::record::probes::RequestSpan;
        let span = |skill: &str, start_ns, end_ns| RequestSpan {
            skill: skill.into(),
            start_ns,
            end_ns,
        };
        let mut metrics = ProbeMetrics::attached_everywhere(Counters::default());
        metrics.published_at = vec![5, 15, 15, 40];
        metrics.name_publishes(&[
            span("a", 0, 10),
            span("a", 12, 20),
            span("b", 14, 30),
            span("b", 16, 18),
        ]);
        let during = &metrics.published_during;
        // 40 is outside every request; 15 is in one of a's and one of b's, counted once each.
        assert_eq!(during.in_requests, 3);
        assert_eq!(
            during.skills,
            [("a".to_owned(), 3), ("b".to_owned(), 2)].into()
        );
    }
}
