//! One run's figures, read from its folder (the record's [`RunFigures::of`] sums them).

use std::path::Path;

use anyhow::{Result, ensure};

use crate::record::pool::RunFigures;
use crate::views::output::entries_jsonl;

/// `p99_ms`, the experiment's target, finds the peak of a workload with rates.
pub fn read(folder: &Path, p99_ms: Option<f64>) -> Result<RunFigures> {
    let records = entries_jsonl::read(&folder.join(entries_jsonl::FILE))?;
    let mut figures = RunFigures::of(&records);
    figures.peak_rps = p99_ms.and_then(|target| figures.peak_within(target));
    ensure!(
        figures.executions > 0,
        "no entry executed a skill without compiling one: a skill's first request compiles it \
         (add lines make it), so the workload needs execute lines after its adds"
    );
    Ok(figures)
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
        let figures = RunFigures::of(&[add, execute]);
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
        assert_eq!(
            RunFigures::of(&[fixture::record("add_rs", 10.0)]).executions,
            0
        );
    }
}
