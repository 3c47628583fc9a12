//! /proc/meminfo: the free and available memory the kernel reports, and swap (pressure
//! experiments add and remove a swap file, so they need to see it).

use std::path::Path;

use anyhow::{Context, Result};

use super::read_proc_file;
use crate::ground::keyed;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meminfo {
    pub memfree_kb: u64,
    pub memavailable_kb: u64,
    pub swaptotal_kb: u64,
    pub swapfree_kb: u64,
}

pub fn read(proc_root: &Path) -> Result<Meminfo> {
    parse(&read_proc_file(proc_root, "meminfo")?)
}

pub fn parse(text: &str) -> Result<Meminfo> {
    let (mut memfree, mut memavailable, mut swaptotal, mut swapfree) = (None, None, None, None);
    for pair in keyed::pairs(text, "/proc/meminfo") {
        let (key, value) = pair?;
        let slot = match key {
            "MemFree" => &mut memfree,
            "MemAvailable" => &mut memavailable,
            "SwapTotal" => &mut swaptotal,
            "SwapFree" => &mut swapfree,
            _ => continue,
        };
        *slot = Some(value);
    }
    let required = |value: Option<u64>, key: &str| {
        value.with_context(|| format!("/proc/meminfo has no {key} line"))
    };
    Ok(Meminfo {
        memfree_kb: required(memfree, "MemFree")?,
        memavailable_kb: required(memavailable, "MemAvailable")?,
        swaptotal_kb: required(swaptotal, "SwapTotal")?,
        swapfree_kb: required(swapfree, "SwapFree")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_captured_file() {
        let meminfo = parse(include_str!("testdata/meminfo")).unwrap();
        assert_eq!(
            meminfo,
            Meminfo {
                memfree_kb: 22127752,
                memavailable_kb: 24163924,
                swaptotal_kb: 0,
                swapfree_kb: 0,
            }
        );
    }

    #[test]
    fn a_missing_field_is_named() {
        let error = parse("MemFree: 1 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n").unwrap_err();
        assert!(error.to_string().contains("MemAvailable"), "{error}");
    }

    #[test]
    fn reads_this_machine() {
        let meminfo = read(Path::new(super::super::PROC)).unwrap();
        assert!(meminfo.memavailable_kb > 0);
    }
}
