//! The report's first section: the run's answers in a few lines (what the memory is, where it
//! went, what failed and why, what capacity says, what the profiler cost), each drawn from
//! the records, so that the plots and the full table are there to check them.

use maud::{Markup, html};

use super::read::Run;
use crate::commands::capacity::model::{self, Machine, RunRecords};

use crate::ground::units::{bytes, count};
use crate::record::{EntryRecord, Status};
use crate::views::explain;

/// The server capacity answers for: the 2024 study's question.
const SERVER_BYTES: u64 = 64 << 30;
/// Memory kept free on it, as `skillprof capacity` does unless told otherwise.
const HEADROOM: f64 = 0.1;

pub fn answers(run: &Run, cost: Markup) -> Markup {
    html! {
        dl class="facts answers" {
            dt { "memory" } dd { (memory(run)) }
            dt { "where it went" } dd { (where_it_went(run)) }
            dt { "failures" } dd { (failures(run)) }
            dt { "capacity" } dd { (capacity(run)) }
            dt { "profiler's cost" } dd { (cost) }
        }
    }
}

fn kib(kb: u64) -> String {
    bytes(kb as f64 * 1024.0)
}

/// The entries that measured the host, `stop` aside (it ends the host).
fn entries(run: &Run) -> impl Iterator<Item = &EntryRecord> {
    run.records
        .iter()
        .filter(|record| record.measure.stopped.is_none())
}

fn named(record: &EntryRecord) -> Markup {
    html! { "#" (record.measure.index) " " code { (record.measure.cmd.as_str()) } }
}

/// RSS at the start and before the stop, and the most at any moment.
fn memory(run: &Run) -> Markup {
    let (Some(first), Some(last)) = (entries(run).next(), entries(run).last()) else {
        return html! { "no entry measured the host" };
    };
    let peak = entries(run)
        .filter_map(|record| Some((record.sampling.rss_peak_kb?, record)))
        .max_by_key(|(kb, _)| *kb);
    html! {
        "The host's RSS went from " (kib(first.measure.before.rss_kb)) " to "
        (kib(last.measure.rss_after_kb())) " by the end of " (named(last))
        @if let Some((kb, record)) = peak {
            "; at most " (kib(kb)) ", in " (named(record))
        }
        "."
    }
}

/// What held the memory after the last entry that read it, by holder.
fn where_it_went(run: &Run) -> Markup {
    let Some((record, held)) = entries(run)
        .filter_map(|record| Some((record, record.held?)))
        .last()
    else {
        return html! { "not read (the host's smaps were not readable)" };
    };
    let after = held.after;
    let mut parts = vec![format!("heap {}", kib(after.heap_kb))];
    if let Some((in_use, kept)) = record.heap_kept_kb() {
        parts[0] += &format!(
            " (malloc {} in use, {} freed and kept)",
            kib(in_use),
            kib(kept)
        );
    }
    for (name, kb) in [
        ("compiled code", after.code_kb),
        ("wasm memories", after.wasm_kb),
        ("stacks", after.stacks_kb),
        ("mapped files", after.files_kb),
    ] {
        parts.push(format!("{name} {}", kib(kb)));
    }
    html! {
        "After " (named(record)) ": " (parts.join(", ")) " of " (kib(after.rss_kb)) "."
    }
}

/// Failed requests with their causes, and a host that did not finish.
fn failures(run: &Run) -> Markup {
    let failed: Vec<(&EntryRecord, String)> = run
        .records
        .iter()
        .filter_map(|record| Some((record, explain::failures(record)?)))
        .collect();
    let status = run.meta.status;
    html! {
        @if status != Status::Complete {
            span class="warn" { "the run " (status.name()) }
            @if let Some(reason) = &run.meta.reason { ": " (reason) }
            ". "
        }
        @if failed.is_empty() {
            (nothing_failed(run))
        } @else {
            ul {
                @for (record, why) in &failed {
                    li { (named(record)) ": " (why) }
                }
            }
        }
    }
}

/// Nothing failed: of the requests skillprof sent, or, in windows of the host's own traffic
/// (a recorded watch), of those the host's ledger counted.
fn nothing_failed(run: &Run) -> &'static str {
    if run
        .records
        .iter()
        .any(|record| record.measure.outcome.requests > 0)
    {
        return "Every request was answered.";
    }
    let counted = run.records.iter().any(|record| {
        record
            .probes
            .as_ref()
            .is_some_and(|probes| probes.skills.is_some())
    });
    match counted {
        true => {
            "skillprof sent no request (the host served its own traffic); its ledger counted no failed request."
        }
        false => {
            "skillprof sent no request (the host served its own traffic); a host without markers does not say which of its own requests failed."
        }
    }
}

/// What `skillprof capacity RUN --memory 64G` says from this run alone, or what it lacks.
fn capacity(run: &Run) -> Markup {
    let cores = run
        .meta
        .cores
        .as_ref()
        .map_or(run.meta.machine.cores, |cores| u64::from(cores.cores));
    let runs = [RunRecords {
        name: run.name.clone(),
        records: run.records.clone(),
        cores: None,
    }];
    let machine = Machine {
        memory_bytes: SERVER_BYTES,
        cores: u32::try_from(cores).unwrap_or(u32::MAX),
        headroom: HEADROOM,
    };
    let kinds = model::kinds(&runs);
    let said: Vec<Markup> = kinds
        .iter()
        .map(|kind| match model::ingredients(&runs, kind) {
            Ok((ingredients, _)) => {
                let skills = model::predict(&ingredients, &machine, None).skills;
                html! {
                    strong { (count(skills.value)) } " " (kind.label()) " skills"
                    @if skills.low != skills.high {
                        " [" (count(skills.low)) "-" (count(skills.high)) "]"
                    }
                }
            }
            Err(missing) => html! {
                (kind.label()) " skills: not from this run (it lacks "
                (missing.iter().map(|m| m.figure.as_str()).collect::<Vec<_>>().join(", ")) ")"
            },
        })
        .collect();
    html! {
        "On a 64 GiB server with " (cores) " cores' parallelism, 10% kept free: "
        @for (i, part) in said.iter().enumerate() {
            @if i > 0 { "; " }
            (part)
        }
        ". " code { "skillprof capacity RUN --memory 64G" } " says how, and for other machines."
    }
}
