//! /proc/pressure/memory: how long tasks stalled on memory. `some` is time in which at
//! least one task stalled, `full` time in which all non-idle tasks did at once.

use std::{io, path::Path};

use anyhow::{Context, Result};

use super::read_proc_file;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Psi {
    pub some_total_us: u64,
    pub full_total_us: u64,
    /// Percent of the last 10 s.
    pub some_avg10: f64,
    pub full_avg10: f64,
}

/// `None` when the kernel has no PSI (built without CONFIG_PSI, or booted with psi=0):
/// a missing mechanism, never zero stall time.
pub fn read(proc_root: &Path) -> Result<Option<Psi>> {
    match read_proc_file(proc_root, "pressure/memory") {
        Ok(text) => parse(&text).map(Some),
        Err(error) if unavailable(&error) => Ok(None),
        Err(error) => Err(error),
    }
}

fn unavailable(error: &anyhow::Error) -> bool {
    error.downcast_ref::<io::Error>().is_some_and(|error| {
        matches!(
            error.kind(),
            io::ErrorKind::NotFound | io::ErrorKind::Unsupported
        )
    })
}

pub fn parse(text: &str) -> Result<Psi> {
    let (some_avg10, some_total_us) = line(text, "some")?;
    let (full_avg10, full_total_us) = line(text, "full")?;
    Ok(Psi {
        some_total_us,
        full_total_us,
        some_avg10,
        full_avg10,
    })
}

/// avg10 and total of the line starting with `kind`
/// (`some avg10=0.00 avg60=0.00 avg300=0.00 total=0`).
fn line(text: &str, kind: &str) -> Result<(f64, u64)> {
    let line = text
        .lines()
        .find(|line| line.split_whitespace().next() == Some(kind))
        .with_context(|| format!("/proc/pressure/memory has no `{kind}` line"))?;
    let value = |key: &str| {
        line.split_whitespace()
            .find_map(|word| word.strip_prefix(key)?.strip_prefix('='))
            .with_context(|| format!("/proc/pressure/memory: no {key}= in {line:?}"))
    };
    let avg10 = value("avg10")?
        .parse()
        .with_context(|| format!("/proc/pressure/memory: avg10 in {line:?}"))?;
    let total = value("total")?
        .parse()
        .with_context(|| format!("/proc/pressure/memory: total in {line:?}"))?;
    Ok((avg10, total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_captured_memory_file() {
        let psi = parse(include_str!("testdata/pressure_memory")).unwrap();
        assert_eq!(
            psi,
            Psi {
                some_total_us: 0,
                full_total_us: 0,
                some_avg10: 0.0,
                full_avg10: 0.0
            }
        );
    }

    /// The memory file of an idle machine is all zeros; /proc/pressure/io has the same
    /// format and numbers that tell `some` from `full` and avg10 from avg60.
    #[test]
    fn reads_nonzero_values() {
        let psi = parse(include_str!("testdata/pressure_io")).unwrap();
        assert_eq!(psi.some_total_us, 24693027);
        assert_eq!(psi.full_total_us, 13025921);
        let psi = parse("some avg10=1.25 avg60=0.15 avg300=0.26 total=7\nfull avg10=0.50 avg60=0 avg300=0 total=3\n").unwrap();
        assert_eq!((psi.some_avg10, psi.full_avg10), (1.25, 0.5));
    }

    #[test]
    fn a_kernel_without_psi_yields_none() {
        let root = tempfile::tempdir().unwrap();
        assert_eq!(read(root.path()).unwrap(), None);
    }

    #[test]
    fn a_missing_full_line_is_an_error() {
        let error = parse("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n").unwrap_err();
        assert!(error.to_string().contains("`full`"), "{error}");
    }
}
