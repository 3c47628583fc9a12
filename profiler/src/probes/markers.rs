//! Skill attribution from the host's markers: find `skillhost_mark` in the host's
//! executable, attach the uprobe that follows it, and read each entry's rows (skill × phase)
//! back as typed [`SkillRow`]s. A host without the marker (another binary, a stripped one)
//! keeps entry attribution only, and the probe table says so.

use crate::record::probes::Probe;
use std::collections::BTreeMap;

use anyhow::{Context as _, Result};
use aya::{
    Ebpf,
    maps::{HashMap as BpfHashMap, MapData, MapError, PerCpuHashMap, PerCpuValues},
    sys::SyscallError,
};
use skillprof_common::{
    Combine as _, Counters, HOST_SKILL, MARKER_SYMBOL, PHASE_IDLE, PHASE_NAMES, PHASES,
    SKILL_NAME_LEN, SkillCounters, SkillKey,
};

/// bpf(2)'s map update flag: create the element, fail with EEXIST if it is there.
const BPF_NOEXIST: u64 = 1;

use super::{
    host_symbol::HostSymbol,
    object,
    plan::{Mechanism, ProbeStatus},
    session::take,
};

pub use crate::record::probes::{Phase, SkillRow};

/// The probe's name in the probe table and meta.json.
const PROGRAM: &str = "uprobe_mark";

/// The host's marker function.
pub type Marker = HostSymbol;

/// The marker's name in the host's symbol table.
pub fn is_marker(name: &str) -> bool {
    name == MARKER_SYMBOL
}

/// Why a host binary has no marker, for the probe table.
pub fn missing(binary: &str) -> String {
    format!("{binary} has no `{MARKER_SYMBOL}` marker (not skillhost, or stripped)")
}

/// Attaches the marker's uprobe to process `tgid`.
pub fn attach(ebpf: &mut Ebpf, tgid: u32, marker: &Marker) -> Result<String> {
    marker
        .attach(ebpf, PROGRAM, tgid)
        .with_context(|| format!("the uprobe on {MARKER_SYMBOL}"))?;
    Ok(format!(
        "uprobe on {MARKER_SYMBOL} in {}",
        marker.exe.display()
    ))
}

/// The status line of the markers: attached by uprobe, or why not.
pub fn status(result: &Result<String, String>) -> ProbeStatus {
    ProbeStatus::single(Probe::Markers, Mechanism::Uprobe, result, &[PROGRAM])
}

impl Phase {
    const ALL: [Phase; PHASES] = [Phase::Host, Phase::Compile, Phase::Instantiate, Phase::Call];

    fn from_number(phase: u32) -> Option<Phase> {
        Self::ALL.get(phase as usize).copied()
    }

    pub fn as_str(self) -> &'static str {
        PHASE_NAMES[self as usize]
    }
}

/// The name of the row of work no marker covers.
pub const HOST_ROW: &str = "host";

/// Skill id → name, as the host's markers named them.
#[derive(Debug, Default)]
pub struct SkillNames(BTreeMap<u32, String>);

impl SkillNames {
    /// The name of skill `id`: `None` for the unattributed work ([`HOST_SKILL`]), `skill#ID`
    /// for a skill whose name the uprobe could not copy.
    pub fn of(&self, id: u32) -> Option<String> {
        (id != HOST_SKILL).then(|| {
            self.0
                .get(&id)
                .cloned()
                .unwrap_or_else(|| format!("skill#{id}"))
        })
    }
}

/// An entry's faults by skill (`None`: the host's own work) and phase, from its rows: what
/// explain.md and the report say of it.
pub fn faults_by_skill(rows: &[SkillRow]) -> BTreeMap<Option<&str>, BTreeMap<Phase, u64>> {
    let mut faults: BTreeMap<Option<&str>, BTreeMap<Phase, u64>> = BTreeMap::new();
    for row in rows {
        *faults
            .entry(row.skill.as_deref())
            .or_default()
            .entry(row.phase)
            .or_default() += row.faults();
    }
    faults
}

/// Whether `rows` hold exactly what `counters` count: every fault and syscall a program adds
/// to an entry's counters it adds to one skill row too, so once both are read at rest the
/// rows sum to the counters.
pub fn rows_sum_to(rows: &[SkillRow], counters: &Counters) -> bool {
    let mut sum = SkillCounters::default();
    for row in rows {
        sum.combine(&row.counts);
    }
    let faults = |f: &skillprof_common::FaultCounts| (f.user, f.user_write, f.kernel, f.gup);
    faults(&sum.faults) == faults(&counters.faults)
        && sum
            .syscalls
            .iter()
            .zip(&counters.syscalls)
            .all(|(row, entry)| (row.calls, row.bytes) == (entry.calls, entry.bytes))
}

impl SkillRow {
    /// The name skills.csv and explain use: `host` for the unattributed row.
    pub fn name(&self) -> &str {
        self.skill.as_deref().unwrap_or(HOST_ROW)
    }

    /// Page faults of every kind (user, kernel-mode on user addresses, get_user_pages), as
    /// the fault programs counted them in exact mode; otherwise as the threads' own counters
    /// did between their marks.
    pub fn faults(&self) -> u64 {
        let f = &self.counts.faults;
        match f.user + f.kernel + f.gup {
            0 => self.counts.task.minflt + self.counts.task.majflt,
            counted => counted,
        }
    }
}

/// The attribution maps of a live session.
pub struct Markers {
    rows: PerCpuHashMap<MapData, SkillKey, SkillCounters>,
    names: BpfHashMap<MapData, u32, [u8; SKILL_NAME_LEN]>,
}

impl Markers {
    pub fn take(ebpf: &mut Ebpf) -> Result<Markers> {
        Ok(Markers {
            rows: PerCpuHashMap::try_from(take(ebpf, object::SKILLS)?)?,
            names: BpfHashMap::try_from(take(ebpf, object::SKILL_NAMES)?)?,
        })
    }

    /// Creates entry `index`'s unattributed row, so the programs can always count in it,
    /// even when the map is full.
    pub fn begin_entry(&mut self, index: u32) -> Result<()> {
        let cpus = aya::util::nr_cpus()
            .map_err(|(what, e)| anyhow::anyhow!("{what}: {e}"))?
            .get() as usize;
        let zeros = PerCpuValues::try_from(vec![SkillCounters::default(); cpus])?;
        // Created only if missing: the first entry's row can already hold what the host did
        // since the probes attached (its counters do), and zeroing it would lose that.
        match self.rows.insert(&host_key(index), zeros, BPF_NOEXIST) {
            Err(MapError::SyscallError(SyscallError { io_error, .. }))
                if io_error.raw_os_error() == Some(libc::EEXIST) =>
            {
                Ok(())
            }
            created => created.context("creating the entry's unattributed row"),
        }
    }

    /// Entry `index`'s rows, summed over CPUs and merged by skill name (a skill whose file
    /// changed is registered again under a new id), sorted with the unattributed row last.
    pub fn entry(&self, index: u32) -> Result<Vec<SkillRow>> {
        let names = self.names()?;
        let mut rows: BTreeMap<(Option<String>, Phase), SkillCounters> = BTreeMap::new();
        for item in self.rows.iter() {
            let (key, per_cpu) = item.context("reading the skill rows")?;
            if key.entry != index {
                continue;
            }
            let Some(phase) = Phase::from_number(key.phase) else {
                continue;
            };
            let total = rows.entry((names.of(key.skill), phase)).or_default();
            for cpu in per_cpu.iter() {
                total.combine(cpu);
            }
        }
        let mut rows: Vec<SkillRow> = rows
            .into_iter()
            .map(|((skill, phase), counts)| SkillRow {
                skill,
                phase,
                counts,
            })
            .collect();
        // The map's order with the unattributed row (`None`, first there) moved last.
        let unattributed = rows.iter().take_while(|row| row.skill.is_none()).count();
        rows.rotate_left(unattributed);
        Ok(rows)
    }

    /// The skills' names, as the uprobe copied them.
    pub fn names(&self) -> Result<SkillNames> {
        let mut names = BTreeMap::new();
        for item in self.names.iter() {
            let (id, bytes) = item.context("reading the skill names")?;
            let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
            names.insert(id, String::from_utf8_lossy(&bytes[..end]).into_owned());
        }
        Ok(SkillNames(names))
    }
}

fn host_key(entry: u32) -> SkillKey {
    SkillKey {
        entry,
        skill: HOST_SKILL,
        phase: PHASE_IDLE,
        _pad: 0,
    }
}
