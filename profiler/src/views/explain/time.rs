//! Where an entry's time went, in words, from its time profile: what the host's CPU did
//! ("61% compiling (register allocation 22%), 18% in the kernel zeroing pages in faults"),
//! where its threads and its requests waited, and, when the same command cost much more or
//! less than its earlier run, what changed.

use crate::ground::machine::Machine;
use crate::ground::units::{count, ms};
use crate::record::EntryRecord;
use crate::record::time::{EntryTime, Wait, Work};

/// Fewer samples than this say too little to split (each is ±1 of them).
const ENOUGH: u64 = 20;
/// A work below this share of the samples is left unsaid.
const SAID_PCT: f64 = 5.0;
/// Stacks lost, as a share of the samples, that the sentence names.
const LOST_SAID: f64 = 0.05;
/// Two runs of one command differ when their CPU (or their wall time) does by this ratio and
/// this much.
const DIFFERENT: f64 = 1.25;
const DIFFERENT_MS: f64 = 100.0;

/// Whether two runs' figures, ms, differ by [`DIFFERENT`] and [`DIFFERENT_MS`].
fn differ(a: f64, b: f64) -> bool {
    let (high, low) = (a.max(b), a.min(b));
    high >= DIFFERENT * low && high - low >= DIFFERENT_MS
}

/// The last of `earlier` that ran `record`'s command and has what `has` asks for.
fn twin<'a>(
    record: &EntryRecord,
    earlier: &'a [EntryRecord],
    has: impl Fn(&EntryRecord) -> bool,
) -> Option<&'a EntryRecord> {
    earlier
        .iter()
        .rev()
        .find(|e| *e.measure.cmd == *record.measure.cmd && has(e))
}

/// Where the entry's CPU and waiting went; `None` without a profile or anything to say.
pub fn sentence(record: &EntryRecord) -> Option<String> {
    let time = record.time.as_ref()?;
    let mut parts = Vec::new();
    if time.samples >= ENOUGH {
        parts.push(cpu(record, time));
    }
    parts.extend(waits(record, time));
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// "the host's CPU by its profile (412 samples at 97 Hz, ≈4,247 ms; the kernel counted
/// 4,620 ms): 61% compiling (register allocation 22%), 18% in the kernel zeroing pages in
/// faults; hottest: clear_page_erms (18%)"
fn cpu(record: &EntryRecord, time: &EntryTime) -> String {
    let hz = 1e9 / time.period_ns as f64;
    let mut text = format!(
        "the host's CPU by its profile ({} samples at {hz:.0} Hz, ≈{}",
        count(time.samples as f64),
        ms(time.sampled_ms())
    );
    if let Some(kernel) = record.measure.host_cpu_ms() {
        text.push_str(&format!("; the kernel counted {}", ms(kernel)));
    }
    text.push_str("): ");
    text.push_str(&cpu_split(time).unwrap_or_default());
    if let Some(top) = time.top.first()
        && let Some(pct) = time.pct(top.samples)
    {
        text.push_str(&format!("; hottest {} ({pct:.0}%)", top.what));
    }
    // A split that left out many samples says so: those were counted, but not where.
    if time.stacks_lost as f64 >= LOST_SAID * time.samples as f64 {
        text.push_str(&format!(
            "; {} samples and waits were counted without their stack (another stack held \
             its place in the stack map: time_stacks_lost)",
            count(time.stacks_lost as f64)
        ));
    }
    text
}

/// What the CPU did, by the works of at least 5% of the samples, largest first: "61%
/// compiling (register allocation 22%, instruction selection 18%), 18% in the kernel zeroing
/// pages in faults"; `None` without samples.
pub fn cpu_split(time: &EntryTime) -> Option<String> {
    let mut works: Vec<(Work, u64)> = Work::ALL
        .iter()
        .copied()
        .zip(time.by_work)
        .filter(|&(_, n)| time.pct(n).is_some_and(|pct| pct >= SAID_PCT))
        .collect();
    works.sort_by_key(|w| std::cmp::Reverse(w.1));
    let said: Vec<String> = works
        .iter()
        .map(|&(work, n)| {
            let mut said = format!("{:.0}% {}", time.pct(n).unwrap_or(0.0), work.words());
            if work == Work::Compile {
                let parts: Vec<String> = time
                    .parts
                    .iter()
                    .take(2)
                    .filter_map(|p| Some(format!("{} {:.0}%", p.what, time.pct(p.samples)?)))
                    .collect();
                if !parts.is_empty() {
                    said.push_str(&format!(" ({})", parts.join(", ")));
                }
            }
            said
        })
        .collect();
    (!said.is_empty()).then(|| said.join(", "))
}

/// Where the skills' threads and requests waited, where the profile says: their threads
/// off a CPU inside the skills' work, and their requests between polls (the host's marks).
fn waits(record: &EntryRecord, time: &EntryTime) -> Option<String> {
    let mut said = Vec::new();
    // A stop holds every thread, the idle ones too, and most likely outside a skill's work:
    // said of the whole host, before the skills' part.
    if let Some(stopped) = time
        .off_cpu
        .as_ref()
        .and_then(|off| off.by_wait)
        .map(|by_wait| by_wait[Wait::Stopped as usize] as f64 / 1e6)
        .filter(|stopped| *stopped >= 1.0)
    {
        said.push(format!(
            "the host was stopped by a signal (SIGSTOP, SIGTSTP) or a debugger: its threads \
             were held {} in all (summed over them) until SIGCONT",
            ms(stopped)
        ));
    }
    if let Some(off) = &time.off_cpu {
        let [runnable, sleeping, blocked] = off.in_skills_ns;
        let total = runnable + sleeping + blocked;
        if total as f64 / 1e6 >= 1.0 {
            let mut text = format!(
                "the skills' threads were off a CPU {} inside their work (runnable, waiting for \
                 a CPU, {}; asleep {}; blocked {})",
                ms(total as f64 / 1e6),
                ms(runnable as f64 / 1e6),
                ms(sleeping as f64 / 1e6),
                ms(blocked as f64 / 1e6)
            );
            if let Some(by_wait) = &off.in_skills_by_wait {
                let mut why: Vec<(Wait, u64)> = Wait::ALL
                    .iter()
                    .copied()
                    .zip(*by_wait)
                    .filter(|(wait, ns)| !wait.between_polls() && *ns > 0)
                    .collect();
                why.sort_by_key(|w| std::cmp::Reverse(w.1));
                let said: Vec<String> = why
                    .iter()
                    .take(2)
                    .map(|(wait, ns)| format!("{} {}", ms(*ns as f64 / 1e6), wait.words()))
                    .collect();
                if !said.is_empty() {
                    text.push_str(&format!(": {}", said.join(", ")));
                }
            }
            said.push(text);
        }
    }
    let rows = record
        .probes
        .as_ref()?
        .skills
        .as_deref()
        .unwrap_or_default();
    let pending: u64 = rows.iter().map(|r| r.counts.phase.pending_ns).sum();
    let queued: u64 = rows.iter().map(|r| r.counts.phase.queued_ns).sum();
    let requests = record.measure.outcome.requests.max(1) as f64;
    if (pending + queued) as f64 / 1e6 >= 1.0 {
        said.push(format!(
            "the requests waited between polls {} each: pending {} (the skills' own waits: \
             timers, I/O, host calls), queued {} for a thread of the host's runtime",
            ms((pending + queued) as f64 / 1e6 / requests),
            ms(pending as f64 / 1e6 / requests),
            ms(queued as f64 / 1e6 / requests)
        ));
    }
    (!said.is_empty()).then(|| said.join("; "))
}

/// When this entry's command ran earlier in the run and took much longer or shorter on the
/// wall clock: by how much, and which of the host's parts grew, each summed over its threads
/// (so they may add up to more than the wall time): its CPU, its threads' wait for a CPU
/// (schedstat), and the skills' work asleep or blocked (the time profile). Twins that ran as
/// long but cost different CPU are [`variance`]'s.
pub fn wall_variance(record: &EntryRecord, earlier: &[EntryRecord]) -> Option<String> {
    let twin = twin(record, earlier, |_| true)?;
    let took = |r: &EntryRecord| r.measure.took.as_secs_f64() * 1e3;
    let (now, before) = (took(record), took(twin));
    if !differ(now, before) {
        return None;
    }
    let gap = (now - before).abs();
    let mut grew: Vec<(&str, f64)> = Vec::new();
    let mut part = |what: &'static str, of: &dyn Fn(&EntryRecord) -> Option<f64>| {
        if let (Some(now), Some(before)) = (of(record), of(twin)) {
            grew.push((what, now - before));
        }
    };
    part("its CPU", &|r| r.measure.host_cpu_ms());
    part("waiting runnable for a CPU", &|r| {
        r.scheduling.as_ref().map(|sched| sched.run_delay_ms)
    });
    // Off the CPU inside the skills' work only: the host's idle threads sleep as long as the
    // wall clock runs, so theirs grows with any longer entry and says nothing of why.
    let in_skills = |r: &EntryRecord, state: usize| {
        let off = r.time.as_ref()?.off_cpu.as_ref()?;
        Some(off.in_skills_ns[state] as f64 / 1e6)
    };
    part("asleep inside the skills' work (timers, waits)", &|r| {
        in_skills(r, 1)
    });
    part("blocked inside the skills' work (I/O, locks)", &|r| {
        in_skills(r, 2)
    });
    grew.sort_by(|a, b| b.1.abs().total_cmp(&a.1.abs()));
    let said: Vec<String> = grew
        .iter()
        .filter(|(_, delta)| delta.abs() >= 0.1 * gap)
        .map(|(what, delta)| {
            format!(
                "{what} {}{}",
                if *delta < 0.0 { "-" } else { "+" },
                ms(delta.abs())
            )
        })
        .collect();
    let mut text = format!(
        "{} than the same command in entry {} ({} against {}, {:+.0}%)",
        match now > before {
            true => format!("{} longer", ms(now - before)),
            false => format!("{} shorter", ms(before - now)),
        },
        twin.measure.index,
        ms(now),
        ms(before),
        100.0 * (now - before) / before.max(1e-9)
    );
    match said.is_empty() {
        true => text.push_str(
            ": none of the host's parts measured (its CPU, its wait for a CPU, the skills' work \
             asleep or blocked) moved by a tenth of it, so the difference was not in the host's \
             measured time: look at the wire and the client",
        ),
        false => {
            text.push_str(": ");
            text.push_str(&said.join(", "));
            text.push_str(" (summed over its threads)");
            // Which of the wait's growth the others' CPU answers for: theirs in this entry.
            if grew
                .iter()
                .any(|(what, delta)| what.starts_with("waiting runnable") && *delta >= 0.1 * gap)
                && let Some(scheduling) = &record.scheduling
            {
                text.push_str(&crate::record::sampling::while_these_ran(
                    &scheduling.ran_instead,
                    now,
                ));
            }
        }
    }
    Some(text)
}

/// When this entry's command ran earlier in the run and cost much more or less of the host's
/// CPU: where the difference went, by what the code did, with the cost per fault where the
/// faults' work changed, and what that points to outside the host.
pub fn variance(
    record: &EntryRecord,
    earlier: &[EntryRecord],
    machine: Option<&Machine>,
) -> Option<String> {
    let now = record.time.as_ref()?;
    let before_record = twin(record, earlier, |e| e.time.is_some())?;
    let before = before_record.time.as_ref()?;
    let (cpu_now, cpu_before) = (
        record.measure.host_cpu_ms()?,
        before_record.measure.host_cpu_ms()?,
    );
    if !differ(cpu_now, cpu_before) || now.samples + before.samples < ENOUGH {
        return None;
    }
    let this_slower = cpu_now > cpu_before;
    let (slow, fast) = match this_slower {
        true => ((record, now), (before_record, before)),
        false => ((before_record, before), (record, now)),
    };
    let work_ms = |time: &EntryTime, work: Work| {
        let i = Work::ALL.iter().position(|w| *w == work).unwrap_or(0);
        (time.by_work[i] * time.period_ns) as f64 / 1e6
    };
    let mut grew: Vec<(Work, f64)> = Work::ALL
        .iter()
        .map(|&work| (work, work_ms(slow.1, work) - work_ms(fast.1, work)))
        .filter(|(_, delta)| *delta > 0.0)
        .collect();
    grew.sort_by(|a, b| b.1.total_cmp(&a.1));
    let extra = (cpu_now - cpu_before).abs();
    let mut text = format!(
        "the same command in entry {} took {} of the host's CPU, this one {}; the {} one's \
         extra {}:",
        before_record.measure.index,
        ms(cpu_before),
        ms(cpu_now),
        match this_slower {
            true => "second",
            false => "first",
        },
        ms(extra)
    );
    // A category's sampled time is uncertain by about ±2√n samples.
    let margin = |time: &EntryTime, work: Work| {
        let i = Work::ALL.iter().position(|w| *w == work).unwrap_or(0);
        2.0 * (time.by_work[i] as f64).sqrt() * time.period_ns as f64 / 1e6
    };
    let said: Vec<String> = grew
        .iter()
        .take_while(|(_, delta)| *delta >= 0.1 * extra)
        .take(3)
        .map(|&(work, delta)| {
            let spread = margin(slow.1, work).hypot(margin(fast.1, work));
            let mut said = format!("{} +{} (±{})", work.words(), ms(delta), ms(spread));
            if matches!(work, Work::PageZeroing | Work::PageFaults) {
                said.push_str(&per_fault(slow, fast, work_ms));
            }
            said
        })
        .collect();
    if said.is_empty() {
        return None;
    }
    text.push(' ');
    text.push_str(&said.join(", "));
    if let Some(why) = outside(slow, fast, &grew, machine) {
        text.push_str("; ");
        text.push_str(&why);
    }
    Some(text)
}

/// The faults' kernel work per fault in both runs, when both counted their faults.
fn per_fault(
    slow: (&EntryRecord, &EntryTime),
    fast: (&EntryRecord, &EntryTime),
    work_ms: impl Fn(&EntryTime, Work) -> f64,
) -> String {
    let faults = |record: &EntryRecord| record.measure.faults().map(|(minor, major)| minor + major);
    let (Some(slow_faults), Some(fast_faults)) = (faults(slow.0), faults(fast.0)) else {
        return String::new();
    };
    if slow_faults == 0 || fast_faults == 0 {
        return String::new();
    }
    let us = |time: &EntryTime, faults: u64| {
        1000.0 * (work_ms(time, Work::PageZeroing) + work_ms(time, Work::PageFaults))
            / faults as f64
    };
    format!(
        ": {:.2} µs of the kernel's fault work a fault against {:.2} µs, with {} faults and {}",
        us(slow.1, slow_faults),
        us(fast.1, fast_faults),
        count(slow_faults as f64),
        count(fast_faults as f64)
    )
}

/// What lies outside the host: the hypervisor's share, seen as steal time, and, where the
/// same faults cost more to zero on a VM that hands its freed pages back, the inference.
fn outside(
    slow: (&EntryRecord, &EntryTime),
    fast: (&EntryRecord, &EntryTime),
    grew: &[(Work, f64)],
    machine: Option<&Machine>,
) -> Option<String> {
    let mut said = Vec::new();
    let steal = |record: &EntryRecord| record.sampling.cpu.map_or(0.0, |cpu| cpu.steal_pct);
    if steal(slow.0) >= steal(fast.0) + 5.0 {
        said.push(format!(
            "seen: the hypervisor took {:.0}% of the CPUs from this VM in the slower run \
             against {:.0}% (steal)",
            steal(slow.0),
            steal(fast.0)
        ));
    }
    let zeroing_grew = grew
        .first()
        .is_some_and(|(work, _)| *work == Work::PageZeroing);
    let faults = |record: &EntryRecord| record.measure.faults().map(|(minor, major)| minor + major);
    let same_faults = match (faults(slow.0), faults(fast.0)) {
        (Some(a), Some(b)) => a.max(b) as f64 <= 1.1 * a.min(b).max(1) as f64,
        _ => false,
    };
    if zeroing_grew && same_faults {
        let reporting = match machine.and_then(|m| m.free_page_reporting) {
            Some(true) => {
                "this VM hands the pages it frees back to its hypervisor (virtio-balloon \
                           free page reporting is on), and the first write to such a page pays \
                           the hypervisor's work to provide it again, inside the guest's zeroing"
            }
            Some(false) => {
                "this VM does not report its free pages to the hypervisor; the \
                            hypervisor may still have reclaimed or not yet backed them"
            }
            None => {
                "on a VM, the hypervisor providing the pages again (freed pages it \
                     reclaimed) is paid inside the guest's zeroing"
            }
        };
        said.push(format!(
            "inferred, not seen: the same number of pages cost more to zero, so each page's \
             first touch cost more, not more pages; {reporting}"
        ));
    }
    (!said.is_empty()).then(|| said.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::fixture;
    use crate::record::time::Share;

    /// A burst of `faults` faults whose host CPU was `cpu_ms`, sampled at 97 Hz: `zeroing`
    /// samples zeroing pages in faults, 60 other fault work, 20 wasm.
    fn burst(index: usize, cpu_ms: u64, faults: u64, zeroing: u64) -> EntryRecord {
        let mut record = fixture::record("p_execute_all Twin 66560 0 10", 1500.0);
        record.measure.index = index;
        record.measure.after.as_mut().unwrap().cpu_ticks = cpu_ms / 10;
        record.measure.after.as_mut().unwrap().minflt = faults;
        let mut by_work = [0; Work::ALL.len()];
        let at = |work| Work::ALL.iter().position(|w| *w == work).unwrap();
        by_work[at(Work::PageZeroing)] = zeroing;
        by_work[at(Work::PageFaults)] = 60;
        by_work[at(Work::Wasm)] = 20;
        record.time = Some(EntryTime {
            clock: true,
            period_ns: 10_309_278,
            samples: by_work.iter().sum(),
            by_work,
            top: vec![Share {
                what: "clear_page_erms".to_owned(),
                samples: zeroing,
            }],
            ..EntryTime::default()
        });
        record
    }

    fn machine(reporting: bool) -> Machine {
        let mut machine = Machine::read().unwrap();
        machine.free_page_reporting = Some(reporting);
        machine
    }

    /// The twin bursts of the issue: 3,770 and 1,220 ms with the same 667,000 faults, most of
    /// the first's samples zeroing pages.
    #[test]
    fn the_slower_twins_extra_cpu_is_named_with_its_cost_per_fault_and_the_inference() {
        let first = burst(1, 3770, 667_000, 285);
        let second = burst(2, 1220, 667_000, 38);
        let said = variance(&second, &[first], Some(&machine(true))).unwrap();
        for part in [
            "the same command in entry 1 took 3,770 ms of the host's CPU, this one 1,220 ms",
            "the first one's extra 2,550 ms: in the kernel zeroing pages in faults +2,546 ms",
            "µs of the kernel's fault work a fault against",
            "with 667,000 faults and 667,000",
            "inferred, not seen: the same number of pages cost more to zero",
            "free page reporting is on",
        ] {
            assert!(said.contains(part), "{part:?} not in: {said}");
        }
        // Without the VM's reporting, the inference says what else could be.
        let said = variance(
            &second,
            &[burst(1, 3770, 667_000, 285)],
            Some(&machine(false)),
        )
        .unwrap();
        assert!(said.contains("does not report its free pages"), "{said}");
    }

    #[test]
    fn twins_that_cost_alike_are_left_unsaid() {
        let first = burst(1, 2500, 667_000, 40);
        let second = burst(2, 2600, 667_000, 42);
        assert_eq!(variance(&second, &[first], None), None);
    }
}
