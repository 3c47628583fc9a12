//! Skill attribution from the host's marks: its ledger (every mode) gives each skill's phases
//! their instances, time and the threads' own faults and CPU; in exact mode the programs
//! also attribute each memory call they count, reading the thread's skill from its mark slot
//! (a thread-local the host writes at each mark). Each entry's rows
//! (skill × phase) come back as typed [`SkillRow`]s. A host that keeps no ledger (another
//! binary, a skillhost told not to mark) keeps entry attribution only, and the probe table
//! says so.

use crate::record::probes::{Mechanism, Phase, Probe, ProbeStatus, SkillRow};
use std::collections::BTreeMap;

use anyhow::{Context as _, Result};
use aya::{
    Ebpf,
    maps::{MapData, MapError, PerCpuHashMap, PerCpuValues},
    sys::SyscallError,
};
use skillprof_common::{
    Combine as _, Counters, HOST_SKILL, Latency, MARKER_SYMBOL, PHASE_IDLE, PHASE_NAMES, PHASES,
    SkillCounters, SkillKey,
};

/// bpf(2)'s map update flag: create the element, fail with EEXIST if it is there.
const BPF_NOEXIST: u64 = 1;

use super::{
    host_symbol::HostSymbol,
    ledger::{HostLedger, LedgerChange, LedgerReading},
    object,
    session::take,
};

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

/// The status line of the markers: the host's ledger (or why there is none), in exact mode
/// whether the programs read each thread's skill from it (or why not), and with `--events`
/// where the marker's uprobe attached.
pub fn status<T>(
    ledger: Result<T, String>,
    attribution: Option<Result<(), &String>>,
    uprobe: &Result<String, String>,
) -> ProbeStatus {
    const LEDGER: &str = "the host's ledger (instances, time, faults and CPU per skill and \
                          phase, read at each boundary)";
    let detail = ledger.map(|_| {
        let mut detail = LEDGER.to_owned();
        match attribution {
            Some(Ok(())) => detail
                .push_str("; each memory call by skill, from the thread's mark slot in its TLS"),
            Some(Err(why)) => {
                detail.push_str("; memory calls not by skill: ");
                detail.push_str(why);
            }
            None => detail.push_str("; no program, no probe per mark"),
        }
        if let Ok(place) = uprobe {
            detail.push_str(&format!("; {place}: each mark streamed"));
        }
        detail
    });
    match uprobe {
        Ok(_) => ProbeStatus::single(Probe::Markers, Mechanism::Uprobe, &detail, &[PROGRAM]),
        Err(_) => ProbeStatus::single(Probe::Markers, Mechanism::Ledger, &detail, &[]),
    }
}

impl Phase {
    const ALL: [Phase; PHASES] = [
        Phase::Host,
        Phase::Compile,
        Phase::Instantiate,
        Phase::Call,
        Phase::Reset,
    ];

    pub(super) fn from_number(phase: u32) -> Option<Phase> {
        Self::ALL.get(phase as usize).copied()
    }

    pub fn as_str(self) -> &'static str {
        PHASE_NAMES[self as usize]
    }
}

/// The name of the row of work no marker covers.
pub const HOST_ROW: &str = "host";

/// Skill id → name, as the host registered them in its ledger.
#[derive(Debug, Default)]
pub struct SkillNames(BTreeMap<u32, String>);

impl SkillNames {
    /// The name of skill `id`: `None` for the unattributed work ([`HOST_SKILL`]), `skill#ID`
    /// for a skill whose name is not in the ledger (beyond its rows).
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

/// Whether `rows` hold exactly what `counters` count: every syscall a program adds to an
/// entry's counters it adds to one skill row too, so once both are read at rest the rows sum
/// to the counters. (Faults are the ledger's by skill: the programs count them by entry.)
pub fn rows_sum_to(rows: &[SkillRow], counters: &Counters) -> bool {
    let mut sum = SkillCounters::default();
    for row in rows {
        sum.combine(&row.counts);
    }
    sum.syscalls
        .iter()
        .zip(&counters.syscalls)
        .all(|(row, entry)| (row.calls, row.bytes) == (entry.calls, entry.bytes))
}

impl SkillRow {
    /// The name skills.csv and explain use: `host` for the unattributed row.
    pub fn name(&self) -> &str {
        self.skill.as_deref().unwrap_or(HOST_ROW)
    }

    /// Page faults, as the threads' own counters counted them between their marks (the
    /// host's ledger, in every mode).
    pub fn faults(&self) -> u64 {
        self.counts.task.minflt + self.counts.task.majflt
    }
}

/// Skill attribution in a live session: the host's ledger, its reading at each entry's
/// begin, and in exact mode the programs' rows.
pub struct Attribution {
    ledger: HostLedger,
    /// The entry in progress and the ledger at its begin.
    current: Option<(u32, LedgerReading)>,
    /// What changed in each ended entry: (skill id, phase number, change), the skills that
    /// worked in it only.
    ended: BTreeMap<u32, LedgerChange>,
    exact: Option<ExactRows>,
}

/// What the ledger says of one entry besides its rows.
#[derive(Clone, Copy, Debug, Default)]
pub struct LedgerMarks {
    /// Marks counted in the entry's rows.
    pub hits: u64,
    /// Marks for skills beyond the ledger's rows.
    pub overflow: u64,
}

impl Attribution {
    /// From `ledger`, with the exact mode's rows if the programs attribute to skills.
    pub fn new(ledger: HostLedger, ebpf: Option<&mut Ebpf>) -> Result<Attribution> {
        Ok(Attribution {
            ledger,
            current: None,
            ended: BTreeMap::new(),
            exact: ebpf.map(ExactRows::take).transpose()?,
        })
    }

    /// Entry `index` begins: the ledger read now ends the entry in progress and starts this
    /// one. Beginning the entry in progress again changes nothing (entry 0 counts from the
    /// attach, as the programs' counters do).
    pub fn begin_entry(&mut self, index: u32) -> Result<()> {
        if let Some(exact) = &mut self.exact {
            exact.begin_entry(index)?;
        }
        if matches!(&self.current, Some((current, _)) if *current == index) {
            return Ok(());
        }
        let now = self.ledger.read();
        if let Some((ended, start)) = self.current.take() {
            self.ended.insert(ended, now.since(&start));
        }
        self.current = Some((index, now));
        Ok(())
    }

    /// Entry `index`'s rows, merged by skill name (a skill whose file changed is registered
    /// again under a new id), sorted with the unattributed row last, and its marks.
    pub fn entry(&self, index: u32) -> Result<(Vec<SkillRow>, LedgerMarks)> {
        let changed = match (self.ended.get(&index), &self.current) {
            (Some(changed), _) => changed.clone(),
            (None, Some((current, start))) if *current == index => self.ledger.read().since(start),
            _ => anyhow::bail!("entry {index} was never begun"),
        };
        let names = self.names();
        let mut rows: BTreeMap<(Option<String>, Phase), (SkillCounters, Latency)> = BTreeMap::new();
        let mut marks = LedgerMarks {
            hits: 0,
            overflow: changed.overflow,
        };
        for (skill, phase, delta) in changed.rows {
            let Some(phase) = Phase::from_number(phase) else {
                continue;
            };
            marks.hits += delta.marks;
            let (row, answered) = rows.entry((names.of(skill), phase)).or_default();
            row.phase.combine(&delta.phase);
            row.task.combine(&delta.task);
            row.failed.combine(&delta.failed);
            answered.combine(&delta.answered);
        }
        if let Some(exact) = &self.exact {
            for (skill, phase, counts) in exact.entry(index)? {
                let Some(phase) = Phase::from_number(phase) else {
                    continue;
                };
                rows.entry((names.of(skill), phase))
                    .or_default()
                    .0
                    .combine(&counts);
            }
        }
        let mut rows: Vec<SkillRow> = rows
            .into_iter()
            .map(|((skill, phase), (counts, answered))| SkillRow {
                skill,
                phase,
                counts,
                answered,
                time: None,
            })
            .collect();
        // The map's order with the unattributed row (`None`, first there) moved last.
        let unattributed = rows.iter().take_while(|row| row.skill.is_none()).count();
        rows.rotate_left(unattributed);
        Ok((rows, marks))
    }

    /// Marks the ledger counted in every entry so far (the session begins entry 0 as it
    /// attaches, and each entry ends where the next begins).
    pub fn marks_since_attach(&self) -> u64 {
        let in_progress = self
            .current
            .as_ref()
            .map(|(_, start)| self.ledger.read().since(start));
        self.ended
            .values()
            .chain(&in_progress)
            .flat_map(|change| &change.rows)
            .map(|(_, _, delta)| delta.marks)
            .sum()
    }

    /// The skills' names, as the host registered them.
    pub fn names(&self) -> SkillNames {
        SkillNames(
            (0..self.ledger.registered())
                .filter_map(|id| Some((id, self.ledger.name(id)?)))
                .collect(),
        )
    }
}

/// The exact mode's per-skill rows: what the fault and syscall programs counted.
struct ExactRows {
    rows: PerCpuHashMap<MapData, SkillKey, SkillCounters>,
}

impl ExactRows {
    fn take(ebpf: &mut Ebpf) -> Result<ExactRows> {
        Ok(ExactRows {
            rows: PerCpuHashMap::try_from(take(ebpf, object::SKILLS)?)?,
        })
    }

    /// Creates entry `index`'s unattributed row, so the programs can always count in it,
    /// even when the map is full.
    fn begin_entry(&mut self, index: u32) -> Result<()> {
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

    /// Entry `index`'s rows by skill id and phase number, summed over CPUs.
    fn entry(&self, index: u32) -> Result<Vec<(u32, u32, SkillCounters)>> {
        let mut rows = Vec::new();
        for item in self.rows.iter() {
            let (key, per_cpu) = item.context("reading the skill rows")?;
            if key.entry != index {
                continue;
            }
            let mut total = SkillCounters::default();
            for cpu in per_cpu.iter() {
                total.combine(cpu);
            }
            rows.push((key.skill, key.phase, total));
        }
        Ok(rows)
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
