//! Where the time went: each skill's flamegraphs over the whole run, on and off a CPU, and
//! each entry's, drawn from the entries' time profiles (profile/ENTRY.json). They are
//! inlined without inferno's script, as still pictures whose frames name themselves on
//! hover (their `<title>`): several interactive ones in one page would share its globals.
//! The interactive files are each entry's `profile/ENTRY.{cpu,offcpu}.svg`, linked.

use std::collections::{BTreeMap, BTreeSet};

use maud::{Markup, PreEscaped, html};

use super::super::read::Run;
use crate::record::time::{TimeProfile, TimeStack};
use crate::views::output::profile::{View, flamegraph_svg, folded};

/// An entry's graphs are inlined when it has this many samples, or this many ms off a CPU.
const ENTRY_SAMPLES: u64 = 20;
const ENTRY_OFF_MS: u64 = 10;

/// The section's body: one pair of graphs per skill, then each entry's.
pub(super) fn time(run: &Run) -> Markup {
    if run.profiles.is_empty() {
        return html! {
            p class="muted" {
                "No time profile: the run was made without probes, with --no-profile, or by \
                 a skillprof from before it."
            }
        };
    }
    let skills: BTreeSet<Option<&str>> = run
        .profiles
        .values()
        .flat_map(|p| p.stacks.iter().map(|s| s.skill.as_deref()))
        .collect();
    html! {
        p {
            "On a CPU: the profile clock's samples of the host's threads, by skill, phase and \
             stack (a skill's wasm functions named " code { "skill!function" } "). Off a CPU: \
             the threads' time by why they waited, and the requests' time between polls \
             (pending, queued). Hover a frame for its name and share; each entry's own files \
             (interactive SVG, folded stacks, pprof for " code { "go tool pprof" } ", Pyroscope, \
             Parca) are in profile/."
        }
        h3 { "By skill, over the run" }
        @for skill in &skills {
            @let name = skill.unwrap_or("host");
            div class="flames" {
                (graph(run.profiles.values(), View::OnCpu, &format!("{name}: on a CPU"), |s| s.skill.as_deref() == *skill))
                (graph(run.profiles.values(), View::OffCpu, &format!("{name}: off a CPU"), |s| s.skill.as_deref() == *skill))
            }
        }
        h3 { "By entry" }
        @for (index, profile) in &run.profiles {
            @let cmd = run.records.iter().find(|r| r.measure.index == *index).map_or("", |r| r.measure.cmd.as_str());
            @let samples: u64 = profile.stacks.iter().filter(|s| View::OnCpu.holds(s)).map(|s| s.count).sum();
            @let off_ms: u64 = profile.stacks.iter().filter(|s| View::OffCpu.holds(s)).map(|s| s.ns).sum::<u64>() / 1_000_000;
            details class="entry-flames" open[samples >= ENTRY_SAMPLES] {
                summary {
                    "#" (index) " " code { (cmd) } ": " (samples) " samples, " (off_ms) " ms off a CPU; "
                    @for view in View::written(profile) {
                        a href=(format!("profile/{index}.{}.svg", view.name())) { (view.name()) ".svg" } " "
                        a href=(format!("profile/{index}.{}.pb.gz", view.name())) { (view.name()) ".pb.gz" } " "
                    }
                }
                @if samples >= ENTRY_SAMPLES || off_ms >= ENTRY_OFF_MS {
                    div class="flames" {
                        (graph([profile], View::OnCpu, &View::OnCpu.title(&format!("#{index} {cmd}")), |_| true))
                        (graph([profile], View::OffCpu, &View::OffCpu.title(&format!("#{index} {cmd}")), |_| true))
                    }
                }
            }
        }
    }
}

/// One view's flamegraph of the stacks `keep` keeps, summed over `profiles`, inlined; a note
/// where there is nothing to draw.
fn graph<'a>(
    profiles: impl IntoIterator<Item = &'a TimeProfile>,
    view: View,
    title: &str,
    keep: impl Fn(&TimeStack) -> bool,
) -> Markup {
    let mut summed: BTreeMap<String, u64> = BTreeMap::new();
    for profile in profiles {
        for line in folded(profile, view, &keep) {
            if let Some((stack, value)) = line.rsplit_once(' ') {
                *summed.entry(stack.to_owned()).or_default() += value.parse::<u64>().unwrap_or(0);
            }
        }
    }
    let lines: Vec<String> = summed
        .into_iter()
        .map(|(stack, value)| format!("{stack} {value}"))
        .collect();
    let mut svg = Vec::new();
    if lines.is_empty() || flamegraph_svg(title, view, &lines, &mut svg).is_err() {
        return html! { div class="flame muted" { (title) ": nothing to draw" } };
    }
    let svg = still(&String::from_utf8_lossy(&svg));
    html! {
        // inferno drew it from our own folded stacks, its names escaped: trusted markup.
        div class="flame" role="img" aria-label=(title) { (PreEscaped(svg)) }
    }
}

/// inferno's SVG as a still picture inside the page: without its script and the handlers
/// that call it, the XML prologue an inline SVG must not have, its comments and the XML
/// namespaces HTML does not need (the page names no web address but SVG's).
fn still(svg: &str) -> String {
    let svg = match svg.find("<svg") {
        Some(at) => &svg[at..],
        None => svg,
    };
    let mut out = without_elements(svg, "<script", "</script>");
    out = without_elements(&out, "<!--", "-->");
    for attribute in [
        "onload",
        "onmouseover",
        "onmouseout",
        "onclick",
        "xmlns:xlink",
        "xmlns:fg",
    ] {
        out = without_attribute(&out, attribute);
    }
    out
}

/// `text` without anything from `open` to `close`, both included.
fn without_elements(text: &str, open: &str, close: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(open) {
        out.push_str(&rest[..start]);
        rest = match rest[start..].find(close) {
            Some(end) => &rest[start + end + close.len()..],
            None => "",
        };
    }
    out.push_str(rest);
    out
}

/// `text` without any `name="..."` attribute.
fn without_attribute(text: &str, name: &str) -> String {
    let pattern = format!(" {name}=\"");
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(&pattern) {
        out.push_str(&rest[..start]);
        let value = &rest[start + pattern.len()..];
        rest = match value.find('"') {
            Some(end) => &value[end + 1..],
            None => "",
        };
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_script_and_its_handlers_are_taken_out() {
        let svg = r#"<?xml version="1.0"?><svg xmlns:fg="http://github.com/jonhoo/inferno" onload="init(evt)"><!--See http://x--><script type="text/ecmascript"><![CDATA[var a = "<g>";]]></script><g onmouseover="s(this)" onclick="zoom(this)"><title>a!b (1 samples)</title></g></svg>"#;
        assert_eq!(
            super::still(svg),
            "<svg><g><title>a!b (1 samples)</title></g></svg>"
        );
    }
}
