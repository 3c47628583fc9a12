//! `skillprof probes --host-bin FILE`: which of the probes that follow a host's own functions
//! (the marker, wasmtime's code publish, its batched decommits, PAGEMAP_SCAN) would find them
//! in a host binary, and the wasmtime it was built with. Only the symbol table and the
//! read-only data are read: nothing is loaded, and no root is needed, so an operator can
//! check a host (or a wasmtime release) before running it under skillprof.

use std::path::Path;

use ::object::{Object as _, ObjectSection as _};
use anyhow::{Context as _, Result};
use serde::Serialize;

use skillprof_common::MARKER_SYMBOL;

use super::{publish, session::find_host_functions};
use crate::record::probes::Probe;

/// What one binary offers each host probe.
#[derive(Serialize)]
pub struct HostCheck {
    pub binary: String,
    /// The wasmtime crate the binary was built with, from the source paths its panic messages
    /// keep (`…/wasmtime-33.0.0/src/…`); `None` where they were remapped or stripped.
    pub wasmtime: Option<String>,
    pub probes: Vec<HostProbe>,
}

/// One probe's answer: the function it would follow, or why the binary has none.
#[derive(Serialize)]
pub struct HostProbe {
    /// The probe's name, as the probe table and the run's columns give it.
    #[serde(serialize_with = "probe_name")]
    pub probe: Probe,
    /// `{"Ok": function}` or `{"Err": why not}`.
    pub follows: Result<String, String>,
}

impl HostCheck {
    /// Reads `file`'s symbol table once, for every host probe.
    pub fn of(file: &Path) -> Result<HostCheck> {
        let binary = file.display().to_string();
        let (marker, pool, published) = find_host_functions(file, binary.clone());
        let at = |offset: u64| format!("at file offset {offset:#x}");
        let probes = vec![
            HostProbe {
                probe: Probe::Markers,
                follows: marker.map(|marker| format!("{MARKER_SYMBOL} {}", at(marker.offset))),
            },
            HostProbe {
                probe: Probe::Publish,
                follows: publish::function(&published, &binary).map(|function| {
                    format!("wasmtime's CodeMemory::publish {}", at(function.offset))
                }),
            },
            HostProbe {
                probe: Probe::Decommits,
                follows: described(pool.decommits(), at),
            },
            HostProbe {
                probe: Probe::PagemapScan,
                follows: described(pool.pagemap_scan(), at),
            },
        ];
        Ok(HostCheck {
            wasmtime: wasmtime_version(file)?,
            binary,
            probes,
        })
    }

    /// The check as lines for a terminal.
    pub fn text(&self) -> String {
        let mut text = format!(
            "{}: wasmtime {}\n",
            self.binary,
            self.wasmtime
                .as_deref()
                .unwrap_or("unknown (no source paths in the binary)")
        );
        for probe in &self.probes {
            let (mark, what) = match &probe.follows {
                Ok(function) => ("yes", function),
                Err(why) => ("no ", why),
            };
            text.push_str(&format!("  {:<13} {mark} {what}\n", probe.probe.name()));
        }
        text
    }
}

fn probe_name<S: serde::Serializer>(probe: &Probe, to: S) -> Result<S::Ok, S::Error> {
    to.serialize_str(probe.name())
}

fn described(
    follows: Result<super::pool::Follows<'_>>,
    at: impl Fn(u64) -> String,
) -> Result<String, String> {
    follows
        .map(|(function, name, counts)| format!("{name} {} ({counts})", at(function.offset)))
        .map_err(|e| format!("{e:#}"))
}

/// The wasmtime version most of the binary's source paths name: a binary links one wasmtime,
/// and its crates' paths carry the version (`/wasmtime-50.0.1/`).
fn wasmtime_version(file: &Path) -> Result<Option<String>> {
    const STEM: &[u8] = b"/wasmtime-";
    let read = std::fs::File::open(file).with_context(|| format!("opening {}", file.display()))?;
    let cache = ::object::ReadCache::new(read);
    let elf = ::object::File::parse(&cache)
        .with_context(|| format!("{} is not an ELF executable", file.display()))?;
    let Some(data) = elf
        .section_by_name(".rodata")
        .and_then(|section| section.data().ok())
    else {
        return Ok(None);
    };
    let mut seen = std::collections::BTreeMap::<&[u8], usize>::new();
    let mut rest = data;
    while let Some(at) = rest.windows(STEM.len()).position(|window| window == STEM) {
        let tail = &rest[at + STEM.len()..];
        let end = tail
            .iter()
            .position(|byte| !(byte.is_ascii_digit() || *byte == b'.'))
            .unwrap_or(tail.len());
        if end > 0 && tail.get(end) == Some(&b'/') && tail[0].is_ascii_digit() {
            *seen.entry(&tail[..end]).or_default() += 1;
        }
        rest = &tail[end..];
    }
    Ok(seen
        .into_iter()
        .max_by_key(|(_, count)| *count)
        .map(|(version, _)| String::from_utf8_lossy(version).into_owned()))
}
