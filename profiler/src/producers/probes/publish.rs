//! A compile seen on any wasmtime host: a uprobe on wasmtime's `CodeMemory::publish` in the
//! host's binary counts each module made executable and keeps its instant. A host without
//! markers still shows its compiles this way, and the requests in flight at those instants
//! name the skills compiled (the record joins the two). On in every mode: it is hit a few
//! times per compile, never per request.

use anyhow::Result;
use aya::{
    Ebpf,
    maps::{MapData, PerCpuArray},
};
use skillprof_common::{PUBLISH_TIMES, PublishTimes};

use super::host_symbol::HostSymbol;
use super::session::take;
use crate::record::probes::{Mechanism, Probe, ProbeStatus};

const PROGRAM: &str = "uprobe_publish";
const MAP: &str = "PUBLISHED";

/// wasmtime's `CodeMemory::publish`, by the parts of its mangled name (legacy and v0).
pub fn is_code_publish(name: &str) -> bool {
    name.contains("8wasmtime") && name.contains("10CodeMemory7publish")
}

/// The host's function the probe follows, or why there is none (`binary` names the host).
pub fn function<'a>(
    found: &'a Result<Option<HostSymbol>, String>,
    binary: &str,
) -> Result<&'a HostSymbol, String> {
    match found {
        Err(why) => Err(why.clone()),
        Ok(None) => Err(format!(
            "{binary} has no wasmtime CodeMemory::publish (not a wasmtime host, or stripped): \
             compiles are seen through markers, or in exact mode as code mapped executable"
        )),
        Ok(Some(function)) => Ok(function),
    }
}

/// Attaches the probe to the host's function, or says why not, as a probe-table line.
pub fn attach(
    ebpf: &mut Ebpf,
    tgid: u32,
    found: &Result<Option<HostSymbol>, String>,
    binary: &str,
) -> ProbeStatus {
    let attached = function(found, binary).and_then(|function| {
        function
            .attach(ebpf, PROGRAM, tgid)
            .map(|()| {
                format!(
                    "uprobe on wasmtime's CodeMemory::publish in {} (modules made executable)",
                    function.exe.display()
                )
            })
            .map_err(|e| format!("{e:#}"))
    });
    ProbeStatus::single(Probe::Publish, Mechanism::Uprobe, &attached, &[PROGRAM])
}

/// The instants of the host's publishes, read once each.
pub struct PublishClock {
    map: PerCpuArray<MapData, PublishTimes>,
    /// Per CPU: how many of its publishes have been read.
    read: Vec<u64>,
}

impl PublishClock {
    pub fn take(ebpf: &mut Ebpf) -> Result<Self> {
        Ok(PublishClock {
            map: PerCpuArray::try_from(take(ebpf, MAP)?)?,
            read: Vec::new(),
        })
    }

    /// The instants (CLOCK_MONOTONIC ns) of the publishes since the last call, in order; of
    /// more than the ring holds on one CPU, the latest.
    pub fn since_last(&mut self) -> Result<Vec<u64>> {
        let per_cpu = self.map.get(&0, 0)?;
        self.read.resize(per_cpu.len(), 0);
        let mut instants = Vec::new();
        for (times, read) in per_cpu.iter().zip(&mut self.read) {
            let kept = times.seen.saturating_sub(PUBLISH_TIMES as u64).max(*read);
            instants.extend((kept..times.seen).map(|n| times.at[n as usize & (PUBLISH_TIMES - 1)]));
            *read = times.seen;
        }
        instants.sort_unstable();
        Ok(instants)
    }
}
