//! One run's figures from its entries: the workload's entries (those that executed skills)
//! summed, read through their commands.csv row, the record's one view of every column.

use std::path::Path;

use anyhow::{Result, ensure};

use crate::output::entries_jsonl;
use crate::record::pool::RunFigures;
use crate::record::probes::Phase;
use crate::record::{EntryRecord, Value};

pub fn read(folder: &Path) -> Result<RunFigures> {
    let records = entries_jsonl::read(&folder.join("entries.jsonl"))?;
    let figures = of(&records);
    ensure!(
        figures.executions > 0,
        "no entry executed a skill without compiling one: a skill's first request compiles it \
         (add lines make it), so the workload needs execute lines after its adds"
    );
    Ok(figures)
}

pub fn of(records: &[EntryRecord]) -> RunFigures {
    let mut figures = RunFigures::default();
    let workload: Vec<&EntryRecord> = records
        .iter()
        .filter(|record| !record.measure.outcome.latencies.is_empty())
        // A skill's first request compiles it: seconds of Cranelift that no allocator setting
        // changes, and that would drown what they do.
        .filter(|record| record.host.is_none_or(|host| host.compilations == 0))
        .collect();
    let mut sums = Sums::default();
    for record in &workload {
        let row = record.row();
        let number = |name: &str| row.get(name).and_then(Value::number);
        let measure = &record.measure;
        figures.executions += measure.outcome.latencies.len() as u64;
        figures.request_errors += measure.outcome.errors;
        figures.host_cpu_ms += measure.host_cpu_ms().unwrap_or(0.0);
        figures.wall_ms += measure.took_ms();
        figures.minflt += measure.faults().map_or(0, |(minor, _)| minor);
        if let Some((instantiate, call)) = measure.outcome.host_split_ms() {
            add(&mut figures.instantiate_ms, instantiate);
            add(&mut figures.call_ms, call);
        }
        if let Some(rows) = record.probes.as_ref().and_then(|p| p.skills.as_ref()) {
            for phase_row in rows {
                let cpu_ms = phase_row.counts.task.cpu_ns as f64 / 1e6;
                match phase_row.phase {
                    Phase::Instantiate => add(&mut figures.instantiate_cpu_ms, cpu_ms),
                    Phase::Call => add(&mut figures.call_cpu_ms, cpu_ms),
                    _ => {}
                }
            }
        }
        if let (Some(pct), Some(samples)) = (number("cpu_kernel_pct"), number("cpu_samples")) {
            sums.kernel_samples += pct / 100.0 * samples;
            sums.samples += samples;
        }
        if let Some(latency) = measure.latency() {
            figures.p99_ms = Some(figures.p99_ms.map_or(latency.p99_ms, |p99| p99.max(latency.p99_ms)));
        }
        for (field, column) in [
            (&mut figures.mmap_calls, "mmap_calls"),
            (&mut figures.munmap_calls, "munmap_calls"),
            (&mut figures.mprotect_calls, "mprotect_calls"),
            (&mut figures.madvise_calls, "madvise_calls"),
            (&mut figures.madvise_bytes, "madvise_bytes"),
            (&mut figures.process_madvise_calls, "process_madvise_calls"),
            (&mut figures.tlb_shootdowns, "tlb_shootdowns"),
        ] {
            if let Some(value) = number(column) {
                *field.get_or_insert(0) += value as u64;
            }
        }
        figures.rss_peak_kb = figures.rss_peak_kb.max(record.sampling.rss_peak_kb);
        figures.maps_peak = figures.maps_peak.max(record.sampling.handles.maps_peak);
    }
    if let Some(last) = workload.last() {
        figures.rss_end_kb = last.measure.rss_after_kb();
        figures.vms_kb = last.measure.process().vms_after_kb();
        figures.warm_resident_kb = last
            .host
            .and_then(|host| host.pool_warm_resident_bytes)
            .map(|bytes| bytes / 1024);
    }
    figures.kernel_pct = (sums.samples > 0.0).then(|| sums.kernel_samples / sums.samples * 100.0);
    figures
}

#[derive(Default)]
struct Sums {
    kernel_samples: f64,
    samples: f64,
}

fn add(total: &mut Option<f64>, value: f64) {
    *total.get_or_insert(0.0) += value;
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use skillprof_common::SYS_MADVISE;

    use super::*;
    use crate::record::fixture;
    use crate::record::process::ProcessStat;

    #[test]
    fn only_the_entries_that_executed_count() {
        let add = fixture::record("add_rs", 10.0);
        let mut execute = fixture::probed(fixture::record("execute_all Pool 1024 0", 4.0), |c| {
            c.syscalls[SYS_MADVISE].calls = 6;
        });
        execute.measure.outcome.latencies = vec![Duration::from_millis(1); 3];
        execute.measure.after = Some(ProcessStat {
            minflt: 30,
            rss_kb: 2048,
            ..ProcessStat::default()
        });
        let figures = of(&[add, execute]);
        assert_eq!(figures.executions, 3);
        assert_eq!(figures.wall_ms, 4.0);
        assert_eq!(figures.minflt, 30);
        assert_eq!(figures.madvise_calls, Some(6));
        assert_eq!(figures.rss_end_kb, 2048);
        let per_request = crate::record::pool::FIGURES
            .iter()
            .find(|figure| figure.name == "madvise per request")
            .unwrap();
        assert_eq!((per_request.value)(&figures), Some(2.0));
        assert_eq!(of(&[fixture::record("add_rs", 10.0)]).executions, 0);
    }
}
