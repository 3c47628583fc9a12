//! An entry's time profile in the run folder's `profile/`: `ENTRY.json`, the profile itself
//! (a [`TimeProfile`], which the report and `skillprof report` read back), and its views:
//! folded stacks (`ENTRY.cpu.folded`: `skill;phase;outermost;...;innermost SAMPLES`,
//! `ENTRY.offcpu.folded`: `skill;phase;wait;outermost;...;innermost MICROSECONDS`) with an
//! inferno flamegraph of each, and a pprof file of each (`ENTRY.cpu.pb.gz`,
//! `ENTRY.offcpu.pb.gz`).

use std::fs::{self, File};
use std::io::{BufWriter, Write as _};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use inferno::flamegraph::{self, Options};

use super::pprof;
use crate::record::time::{TimeProfile, TimeStack, TimeState};

pub const DIR: &str = "profile";

/// The profile file of entry `index` in run folder `folder`.
pub fn json_path(folder: &Path, index: usize) -> PathBuf {
    folder.join(DIR).join(format!("{index}.json"))
}

/// Reads entry `index`'s profile back; `None` if the run has none for it.
pub fn read(folder: &Path, index: usize) -> Result<Option<TimeProfile>> {
    let path = json_path(folder, index);
    match fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .with_context(|| format!("reading {}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// Writes entry `index`'s profile and its views; `span` is when the entry ran.
pub fn write(
    folder: &Path,
    index: usize,
    cmd: &str,
    profile: &TimeProfile,
    span: pprof::Span,
) -> Result<()> {
    let json = json_path(folder, index);
    let dir = json.parent().expect("inside the profile folder");
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    fs::write(&json, serde_json::to_vec(profile)?)
        .with_context(|| format!("writing {}", json.display()))?;
    for view in View::written(profile) {
        let lines = folded(profile, view, |_| true);
        let path = dir.join(format!("{index}.{}.folded", view.name()));
        write_lines(&path, &lines)?;
        flamegraph(&path.with_extension("svg"), &view.title(cmd), view, &lines)?;
        let pprof = dir.join(format!("{index}.{}.pb.gz", view.name()));
        let bytes = pprof::encode(
            profile,
            view,
            span,
            &format!("entry {index}: {cmd}"),
            |_| true,
        )?;
        fs::write(&pprof, bytes).with_context(|| format!("writing {}", pprof.display()))?;
    }
    Ok(())
}

/// The on-CPU or the off-CPU half of a profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    OnCpu,
    OffCpu,
}

impl View {
    pub fn name(self) -> &'static str {
        match self {
            View::OnCpu => "cpu",
            View::OffCpu => "offcpu",
        }
    }

    pub fn title(self, what: &str) -> String {
        match self {
            View::OnCpu => format!("{what}: the host's CPU by stack (samples)"),
            View::OffCpu => format!("{what}: the host's threads off a CPU by why and stack (µs)"),
        }
    }

    fn count_name(self) -> &'static str {
        match self {
            View::OnCpu => "samples",
            View::OffCpu => "µs",
        }
    }

    /// The views an entry's files hold: its CPU always (no samples is an answer too), off a
    /// CPU only when anything was recorded there (a watch or an slo step runs without the
    /// switch programs, and twenty empty kilobytes a window add up).
    pub fn written(profile: &TimeProfile) -> Vec<View> {
        let off = profile.stacks.iter().any(|s| View::OffCpu.holds(s));
        [View::OnCpu, View::OffCpu]
            .into_iter()
            .filter(|&view| view == View::OnCpu || off)
            .collect()
    }

    /// Whether `stack` is of this half.
    pub fn holds(self, stack: &TimeStack) -> bool {
        (stack.state == TimeState::OnCpu) == (self == View::OnCpu)
    }
}

/// The folded lines of one view of `profile`, of the stacks `keep` keeps: the skill and the
/// phase first (the flamegraph's roots), then off a CPU why, then the frames.
pub fn folded(profile: &TimeProfile, view: View, keep: impl Fn(&TimeStack) -> bool) -> Vec<String> {
    let mut lines: std::collections::BTreeMap<String, u64> = Default::default();
    for stack in profile.stacks.iter().filter(|s| view.holds(s) && keep(s)) {
        let mut line = format!(
            "{};{}",
            stack.skill.as_deref().unwrap_or("host"),
            stack.phase.as_str()
        );
        if view == View::OffCpu {
            line.push(';');
            line.push_str(match stack.wait {
                Some(wait) => wait.as_str(),
                None => stack.state.as_str(),
            });
        }
        for frame in profile.frames_of(stack) {
            line.push(';');
            line.push_str(&frame.name);
        }
        let value = match view {
            View::OnCpu => stack.count,
            View::OffCpu => stack.ns / 1000,
        };
        *lines.entry(line).or_default() += value;
    }
    lines
        .into_iter()
        .filter(|(_, value)| *value > 0)
        .map(|(line, value)| format!("{line} {value}"))
        .collect()
}

fn write_lines(path: &Path, lines: &[String]) -> Result<()> {
    let mut out =
        BufWriter::new(File::create(path).with_context(|| format!("creating {}", path.display()))?);
    for line in lines {
        writeln!(out, "{line}")?;
    }
    out.flush()
        .with_context(|| format!("writing {}", path.display()))
}

/// An inferno flamegraph of folded `lines` into `out` (an SVG); nothing for no lines, which
/// inferno refuses (the folded file says there was nothing).
pub fn flamegraph_svg(
    title: &str,
    view: View,
    lines: &[String],
    out: impl std::io::Write,
) -> Result<()> {
    let mut options = Options::default();
    options.title = title.to_owned();
    options.count_name = view.count_name().to_owned();
    flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), out)
        .context("drawing a flamegraph")
}

fn flamegraph(path: &Path, title: &str, view: View, lines: &[String]) -> Result<()> {
    if lines.is_empty() {
        return Ok(());
    }
    let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    flamegraph_svg(title, view, lines, file).with_context(|| format!("writing {}", path.display()))
}
