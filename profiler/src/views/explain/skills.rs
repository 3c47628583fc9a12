//! Which skills an entry's page faults belong to, from the markers' rows:
//!
//! > by skill: sample_py3 41% of the faults (all in compile), sample_py1 22% (61% in call, 39%
//! > in instantiate), 8 more skills 30%; the host's own threads 7%

use std::collections::BTreeMap;

use skillprof_common::FAILURES;

use crate::ground::units::count;
use crate::producers::probes::markers::faults_by_skill;
use crate::record::EntryRecord;
use crate::record::probes::{Phase, Probe, SkillRow};

/// Skills named one by one; the rest are summed.
const NAMED: usize = 3;

pub fn sentence(record: &EntryRecord) -> Option<String> {
    let rows = record.probes.as_ref()?.skills.as_ref()?;
    let by_skills: u64 = rows.iter().map(SkillRow::faults).sum();
    // The rows hold what each skill's threads took between their marks; the rest of the
    // kernel's count for the whole host is its own threads'.
    let total = record
        .measure
        .faults()
        .map_or(by_skills, |(minor, major)| (minor + major).max(by_skills));
    if total == 0 {
        return None;
    }
    let share = |faults: u64| 100.0 * faults as f64 / total as f64;
    let mut skills = faults_by_skill(rows);
    skills.remove(&None);
    let host = total - by_skills;
    let mut ranked: Vec<(&str, u64, BTreeMap<Phase, u64>)> = skills
        .into_iter()
        .filter_map(|(name, phases)| Some((name?, phases.values().sum(), phases)))
        .filter(|(_, faults, _)| *faults > 0)
        .collect();
    if ranked.is_empty() {
        return None;
    }
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let mut parts = Vec::new();
    for (i, (name, faults, phases)) in ranked.iter().take(NAMED).enumerate() {
        let what = if i == 0 { " of the faults" } else { "" };
        parts.push(format!(
            "{name} {:.0}%{what} ({})",
            share(*faults),
            phases_of(*faults, phases)
        ));
    }
    if ranked.len() > NAMED {
        let rest: u64 = ranked[NAMED..].iter().map(|(_, faults, _)| faults).sum();
        parts.push(format!(
            "{} more skills {:.0}%",
            ranked.len() - NAMED,
            share(rest)
        ));
    }
    Some(format!(
        "by skill: {}; the host's own threads {:.0}%",
        parts.join(", "),
        share(host)
    ))
}

/// The skills an entry compiled that an earlier entry had compiled already, each with the
/// first entry that did, from the markers' compile rows:
///
/// > sample_py5 was compiled again (11.2 s; first in entry 4, `add_py`)
///
/// A host compiles a skill again after an eviction, or when it registered the skill twice (a
/// file copied in place and scanned half-written): either way the time and memory are paid
/// twice. The host's own count of compilations (counted_compilations) and the bytes its
/// mmap and mprotect calls made executable say the same without markers.
pub fn compiled_again(record: &EntryRecord, earlier: &[EntryRecord]) -> Option<String> {
    let again: Vec<String> = compiles(record)
        .filter_map(|(skill, ns)| {
            let first = earlier
                .iter()
                .find(|e| compiles(e).any(|(name, _)| name == skill))?;
            Some(format!(
                "{skill} was compiled again ({}; first in entry {}, `{}`)",
                crate::ground::units::ms(ns as f64 / 1e6),
                first.measure.index,
                first.measure.cmd
            ))
        })
        .collect();
    (!again.is_empty()).then(|| again.join(", "))
}

/// A compile seen without markers: the code the host published (wasmtime's
/// `CodeMemory::publish`, a module compiled or loaded from a cache) and the skills whose
/// requests were in flight when it did:
///
/// > 4 modules' code published (compiles), during requests for sample_py1 (4, again): compiled
/// > or loaded while they waited
///
/// "again" when an earlier entry published code during a request for the same skill. With
/// markers the compile rows say it more exactly ([`compiled_again`]).
pub fn published(record: &EntryRecord, earlier: &[EntryRecord]) -> Option<String> {
    let probes = record.probes.as_ref()?;
    let calls = probes.read(Probe::Publish, |c| c.publish.calls)?;
    if calls == 0 || compiles(record).next().is_some() {
        return None;
    }
    let during = &probes.published_during;
    let before = |skill: &str| {
        earlier.iter().any(|e| {
            e.probes
                .as_ref()
                .is_some_and(|p| p.published_during.skills.contains_key(skill))
        })
    };
    let mut named: Vec<String> = during
        .skills
        .iter()
        .take(NAMED)
        .map(|(skill, n)| {
            let again = if before(skill) { ", again" } else { "" };
            format!("{skill} ({n}{again})")
        })
        .collect();
    if during.skills.len() > NAMED {
        named.push(format!("{} more skills", during.skills.len() - NAMED));
    }
    let modules = if calls == 1 { "module's" } else { "modules'" };
    let mut sentence = format!(
        "{} {modules} code published (compiles)",
        crate::ground::units::count(calls as f64)
    );
    if !named.is_empty() {
        sentence += &format!(
            ", during requests for {}: compiled or loaded while they waited",
            named.join(", ")
        );
    }
    let outside = calls.saturating_sub(during.in_requests);
    if outside > 0 {
        sentence += &format!(
            "{}{} outside any request (at registration, or in the host's background)",
            if named.is_empty() { ": " } else { "; " },
            crate::ground::units::count(outside as f64)
        );
    }
    Some(sentence)
}

/// The skills an entry began compiling, with the time their compiles took.
fn compiles(record: &EntryRecord) -> impl Iterator<Item = (&str, u64)> {
    record
        .probes
        .as_ref()
        .and_then(|probes| probes.skills.as_deref())
        .unwrap_or_default()
        .iter()
        .filter(|row| row.phase == Phase::Compile && row.counts.phase.runs > 0)
        .filter_map(|row| Some((row.skill.as_deref()?, row.counts.phase.ns)))
}

/// "all in compile", "almost all in call", or the shares of the phases that round to 1% or
/// more, largest first.
fn phases_of(faults: u64, phases: &BTreeMap<Phase, u64>) -> String {
    let share = |n: u64| 100.0 * n as f64 / faults as f64;
    let mut ranked: Vec<(Phase, u64)> = phases
        .iter()
        .filter(|(_, n)| share(**n) >= 0.5)
        .map(|(p, n)| (*p, *n))
        .collect();
    ranked.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    match ranked.as_slice() {
        [(phase, n)] if *n == faults => format!("all in {}", phase.as_str()),
        [(phase, _)] => format!("almost all in {}", phase.as_str()),
        _ => ranked
            .iter()
            .map(|(phase, n)| format!("{:.0}% in {}", share(*n), phase.as_str()))
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// The requests the host failed in the entry, by skill and why, from its ledger: those
/// skillprof sent and those it did not (a watch window's).
///
/// > the host failed requests of watched_failing: 3 trapped, 2 reported an error
pub fn failed(record: &EntryRecord) -> Option<String> {
    let rows = record.probes.as_ref()?.skills.as_ref()?;
    let mut by_skill: BTreeMap<&str, [u64; FAILURES]> = BTreeMap::new();
    for row in rows {
        let Some(skill) = &row.skill else { continue };
        let counts = by_skill.entry(skill).or_default();
        for (sum, n) in counts.iter_mut().zip(row.counts.failed.by_reason) {
            *sum += n;
        }
    }
    let parts: Vec<String> = by_skill
        .into_iter()
        .filter(|(_, counts)| counts.iter().any(|&n| n > 0))
        .map(|(skill, counts)| {
            let why: Vec<String> = counts
                .iter()
                .zip(FAILED_AS)
                .filter(|(n, _)| **n > 0)
                .map(|(n, what)| format!("{} {what}", count(*n as f64)))
                .collect();
            format!("{skill}: {}", why.join(", "))
        })
        .collect();
    (!parts.is_empty()).then(|| format!("the host failed requests of {}", parts.join("; ")))
}

/// `FAILURE_NAMES` in words.
const FAILED_AS: [&str; FAILURES] = [
    "did not load",
    "found no pool slot",
    "had their input rejected",
    "reported an error",
    "trapped",
    "answered no JSON",
    "passed the deadline",
];

#[cfg(test)]
mod tests {
    use skillprof_common::SkillCounters;

    use super::*;
    use crate::record::fixture::{probed, record};

    fn row(skill: Option<&str>, phase: Phase, faults: u64) -> SkillRow {
        let mut counts = SkillCounters::default();
        counts.task.minflt = faults;
        SkillRow {
            skill: skill.map(str::to_owned),
            phase,
            counts,
            answered: Default::default(),
            time: None,
        }
    }

    #[test]
    fn names_the_skills_that_dominate_and_their_phases() {
        let mut entry = probed(record("p_add_py 5", 1000.0), |_| {});
        // The kernel counted 1,000 faults of the host; its own threads took what the skills'
        // threads did not.
        entry.measure.after.as_mut().unwrap().minflt = 997;
        entry.measure.after.as_mut().unwrap().majflt = 3;
        let mut rows = vec![
            row(Some("sample_py3"), Phase::Compile, 409),
            row(Some("sample_py1"), Phase::Call, 122),
            row(Some("sample_py1"), Phase::Instantiate, 78),
            row(Some("sample_py3"), Phase::Instantiate, 1),
            row(None, Phase::Host, 0),
        ];
        for (i, faults) in [(2, 150), (4, 100), (5, 70)] {
            rows.push(row(
                Some(&format!("sample_py{i}")),
                Phase::Compile,
                faults - 1,
            ));
        }
        entry.probes.as_mut().unwrap().skills = Some(rows);
        assert_eq!(
            sentence(&entry).unwrap(),
            "by skill: sample_py3 41% of the faults (almost all in compile), sample_py1 20% (61% in \
             call, 39% in instantiate), sample_py2 15% (all in compile), 2 more skills 17%; \
             the host's own threads 7%"
        );
    }

    #[test]
    fn names_the_skills_the_host_failed_and_why_summed_over_registrations() {
        let mut entry = probed(record("watch 60", 60_000.0), |_| {});
        let failing = |skill: &str, reason: usize, n: u64| {
            let mut call = row(Some(skill), Phase::Call, 0);
            call.counts.failed.by_reason[reason] = n;
            call
        };
        entry.probes.as_mut().unwrap().skills = Some(vec![
            failing("broken", skillprof_common::FAILED_TRAP, 3),
            failing("broken", skillprof_common::FAILED_ERROR, 2),
            failing("broken", skillprof_common::FAILED_TRAP, 1),
            failing("fine", skillprof_common::FAILED_TRAP, 0),
            row(None, Phase::Host, 5),
        ]);
        assert_eq!(
            failed(&entry).unwrap(),
            "the host failed requests of broken: 2 reported an error, 4 trapped"
        );
        // And the entry's failures say it, though skillprof sent nothing.
        assert_eq!(
            super::super::entry::failures(&entry).unwrap(),
            "the host failed requests of broken: 2 reported an error, 4 trapped"
        );
        entry.probes.as_mut().unwrap().skills = Some(vec![failing("fine", 0, 0)]);
        assert_eq!(failed(&entry), None);
    }

    #[test]
    fn says_nothing_without_markers_or_faults() {
        let mut entry = probed(record("skills", 1.0), |_| {});
        assert_eq!(sentence(&entry), None);
        entry.probes.as_mut().unwrap().skills = Some(vec![row(None, Phase::Host, 0)]);
        assert_eq!(sentence(&entry), None);
    }

    fn compiled(cmd: &str, index: usize, skills: &[(&str, u64)]) -> EntryRecord {
        let mut entry = probed(record(cmd, 1000.0), |_| {});
        entry.measure.index = index;
        let rows = skills
            .iter()
            .map(|&(skill, ms)| {
                let mut compile = row(Some(skill), Phase::Compile, 10);
                compile.counts.phase.runs = 1;
                compile.counts.phase.ns = ms * 1_000_000;
                compile
            })
            .chain([row(Some("sample_py1"), Phase::Call, 5)])
            .collect();
        entry.probes.as_mut().unwrap().skills = Some(rows);
        entry
    }

    #[test]
    fn a_skill_compiled_by_an_earlier_entry_is_named_with_that_entry() {
        let first = compiled("4 add_py", 1, &[("sample_py4", 9000), ("sample_py5", 85)]);
        let listed = probed(record("skills", 1.0), |_| {});
        let again = compiled("execute_all Bob 20 10", 3, &[("sample_py5", 11_200)]);
        let earlier = [first.clone(), listed];
        assert_eq!(
            compiled_again(&again, &earlier).unwrap(),
            "sample_py5 was compiled again (11,200 ms; first in entry 1, `4 add_py`)"
        );
        // A first compile, and an entry that only calls, say nothing.
        assert_eq!(compiled_again(&first, &[]), None);
        assert_eq!(compiled_again(&earlier[1], &earlier[..1]), None);
    }

    #[test]
    fn names_the_skills_in_flight_when_a_host_without_markers_published_code() {
        use crate::record::probes::{Mechanism, PublishedDuring};
        let publishing = |cmd: &str, calls: u64, in_requests: u64, skills: &[(&str, u64)]| {
            let mut entry = probed(record(cmd, 1000.0), |c| c.publish.calls = calls);
            let probes = entry.probes.as_mut().unwrap();
            probes.attached.insert(Probe::Publish, Mechanism::Uprobe);
            probes.published_during = PublishedDuring {
                in_requests,
                skills: skills.iter().map(|(s, n)| (s.to_string(), *n)).collect(),
            };
            entry
        };
        let added = publishing("add_py", 4, 4, &[("sample_py1", 4)]);
        let executed = publishing(
            "execute_all Bob 20 10",
            9,
            7,
            &[("sample_py1", 4), ("sample_py2", 3)],
        );
        assert_eq!(
            published(&executed, std::slice::from_ref(&added)).as_deref(),
            Some(
                "9 modules' code published (compiles), during requests for sample_py1 (4, \
                 again), sample_py2 (3): compiled or loaded while they waited; 2 outside any \
                 request (at registration, or in the host's background)"
            )
        );
        assert_eq!(
            published(&publishing("add_py", 2, 0, &[]), &[]).as_deref(),
            Some(
                "2 modules' code published (compiles): 2 outside any request (at \
                 registration, or in the host's background)"
            )
        );
        // With markers the compile rows name the compiles; no publish, nothing to say.
        let mut marked = executed.clone();
        marked.probes.as_mut().unwrap().skills = Some(vec![{
            let mut compile = row(Some("sample_py1"), Phase::Compile, 10);
            compile.counts.phase.runs = 1;
            compile
        }]);
        assert_eq!(published(&marked, &[added]), None);
        assert_eq!(published(&publishing("skills", 0, 0, &[]), &[]), None);
    }
}
