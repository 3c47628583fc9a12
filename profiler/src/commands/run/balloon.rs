//! The runner's side of memory pressure: a balloon holding free memory in a watermark band
//! while the workload runs (`--pressure BAND`, or `pressure BAND|off` in the cmds file), and
//! what it held during each entry.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use async_trait::async_trait;

use crate::ground::band::Band;
use crate::ground::cmds::{Command, Entry, Plan};
use crate::producers::balloon::{Balloon, HeldBalloon, HoldOptions, NotHeld};
use crate::producers::system::sysctl::{self, BOOST_FACTOR, SysctlChange, WatermarkSetting};
use crate::record::balloon::BandHeld;
use crate::record::{EntryRecord, RunInfo, SysctlDuring};

use super::config::PressureConfig;
use super::interrupt::{Abort, Signals};
use super::measure::{Begin, Host, Measurer, Running};
use super::progress::Progress;

/// A balloon squeezes every process on the machine, not only the host: like `skillprof
/// pressure`, a run that holds a band needs root. Checked before anything starts.
pub fn require_root_if_used(
    from_start: Option<Band>,
    watermarks: [WatermarkSetting; 2],
    plan: &Plan,
) -> Result<()> {
    let in_plan = plan
        .entries
        .iter()
        .find(|entry| matches!(entry.command, Command::Pressure(_)));
    let set = watermarks
        .iter()
        .find_map(|setting| Some(format!("{} {}", setting.flag, setting.value?)));
    let why = match (from_start, in_plan, set) {
        (Some(band), _, _) => format!("--pressure {band}"),
        (None, Some(entry), _) => format!("line {}: {}", entry.line.unwrap_or(0), entry.name),
        (None, None, Some(flag)) => flag,
        (None, None, None) => return Ok(()),
    };
    if !crate::producers::system::running_as_root() {
        bail!(
            "{why} holds free memory near the watermarks of the whole machine, which needs \
             root: run as root (e.g. `sudo skillprof run ...`), or drop the pressure"
        );
    }
    Ok(())
}

pub struct Pressure {
    balloon: Option<HeldBalloon>,
    settle_timeout: Duration,
    /// What went wrong with holding a band, for meta.json and the end of the run.
    pub notes: Vec<String>,
    /// Every balloon process this run started (meta.json: proof none outlives it).
    pub balloon_pids: Vec<u32>,
    /// `--scale-factor` and `--boost-factor`, until the run ends.
    sysctls: Vec<SysctlChange>,
}

impl Pressure {
    pub fn new(settle_timeout: Duration) -> Self {
        Pressure {
            balloon: None,
            settle_timeout,
            notes: Vec::new(),
            balloon_pids: Vec::new(),
            sysctls: Vec::new(),
        }
    }

    /// Sets the sysctl `name` until [`Pressure::finish`], under a guardian; returns the
    /// value before and the guardian's pid.
    fn set_sysctl(
        &mut self,
        name: &'static str,
        value: u32,
        progress: &Progress,
    ) -> Result<(String, u32)> {
        let change = SysctlChange::set(name, &value.to_string())?;
        let before = change.original().to_string();
        progress.note(&format!("{name}: {before} -> {value} for the run"));
        let guardian = change.guardian_pid();
        self.sysctls.push(change);
        Ok((before, guardian))
    }

    /// Holds `band` (`None`: lets go), waiting until free memory is in it. A band that is
    /// not reached, or a hold a safety rule stopped, is a loud note, not the end of the run:
    /// the entries' `pressure_*` columns say what was really held.
    pub async fn set(
        &mut self,
        band: Option<Band>,
        progress: &Progress,
        signals: &mut Signals,
    ) -> Result<(), Abort> {
        let Some(band) = band else {
            self.release().await?;
            return Ok(());
        };
        // A balloon a safety rule stopped holds nothing: a new band gets a new balloon.
        if self
            .balloon
            .as_ref()
            .is_some_and(|held| held.aborted().is_some())
        {
            self.release().await?;
        }
        let held = match self.balloon.take() {
            Some(held) => {
                held.retarget(band)?;
                held
            }
            None => {
                let held = Balloon::hold(band, HoldOptions::default())?;
                self.balloon_pids.push(held.balloon_pid());
                held
            }
        };
        progress.note(&format!("pressure: holding free memory in the {band} band"));
        // settle blocks: it runs on its own thread, and a signal asks it to stop waiting.
        let stop = Arc::new(AtomicBool::new(false));
        let timeout = self.settle_timeout;
        let mut settling = tokio::task::spawn_blocking({
            let stop = stop.clone();
            move || {
                let outcome = held.settle(timeout, &mut |_| {
                    if stop.load(Ordering::Relaxed) {
                        ControlFlow::Break(())
                    } else {
                        ControlFlow::Continue(())
                    }
                });
                (held, outcome)
            }
        });
        let interruption = tokio::select! {
            done = &mut settling => {
                let (held, outcome) = done.context("the settling thread failed")?;
                self.balloon = Some(held);
                self.note_outcome(band, outcome, progress);
                return Ok(());
            }
            interruption = signals.next() => interruption,
        };
        stop.store(true, Ordering::Relaxed);
        let (held, _) = settling.await.context("the settling thread failed")?;
        self.balloon = Some(held);
        Err(Abort::Interrupted(interruption))
    }

    fn note_outcome(&mut self, band: Band, outcome: Result<(), NotHeld>, progress: &Progress) {
        let note = match outcome {
            Ok(()) => {
                progress.note(&format!("pressure: free memory is in the {band} band"));
                return;
            }
            Err(NotHeld::Aborted(why)) => {
                format!("pressure {band}: a safety rule stopped the balloon: {why}")
            }
            Err(NotHeld::TimedOut(why)) => format!("pressure {band}: {why}"),
            Err(NotHeld::Stopped) => format!("pressure {band}: stopped waiting"),
        };
        progress.note(&format!(
            "warning: {note}; the entries' pressure_* columns show what was held"
        ));
        self.notes.push(note);
    }

    /// Starts an entry's window of what the balloon held.
    pub fn begin_entry(&self) {
        if let Some(held) = &self.balloon {
            held.reset_window();
        }
    }

    /// What the balloon held since the entry began, if one was held.
    pub fn held(&self) -> Option<BandHeld> {
        self.balloon.as_ref().map(|held| held.held())
    }

    /// The end of the run: the balloon's memory back, then the sysctl. What fails is a note;
    /// the guardians still restore when skillprof exits.
    pub async fn finish(&mut self) {
        if let Err(error) = self.release().await {
            self.notes
                .push(format!("releasing the balloon failed: {error:#}"));
        }
        for change in self.sysctls.drain(..).rev() {
            let (name, before) = (change.name(), change.original().to_string());
            match change.restore() {
                Ok(()) => eprintln!("{name} restored to {before}"),
                Err(error) => self.notes.push(format!("{error:#}")),
            }
        }
    }

    /// Gives the balloon's memory back and waits until it is.
    pub async fn release(&mut self) -> Result<()> {
        if let Some(held) = self.balloon.take() {
            // Said once: an abort seen while settling was noted then.
            if let Some(why) = held.aborted()
                && !self.notes.iter().any(|note| note.contains(&why))
            {
                self.notes.push(format!(
                    "a safety rule stopped the balloon during the run: {why}"
                ));
            }
            tokio::task::spawn_blocking(move || held.release())
                .await
                .context("the releasing thread failed")??;
        }
        Ok(())
    }
}

/// The balloon as an entry's measurer: what it held over the entry; and `pressure` lines are
/// its to run.
#[async_trait(?Send)]
impl Measurer for Pressure {
    async fn begin(&mut self, _begin: &mut Begin<'_>) -> Result<(), Abort> {
        self.begin_entry();
        Ok(())
    }

    async fn run(&mut self, entry: &Entry, running: &mut Running<'_>) -> Option<Result<(), Abort>> {
        let Command::Pressure(band) = entry.command else {
            return None;
        };
        Some(self.set(band, running.progress, running.signals).await)
    }

    async fn end(&mut self, record: &mut EntryRecord, _host: Host<'_>) -> Result<(), Abort> {
        record.pressure = self.held();
        Ok(())
    }

    /// The machine goes back first: it is not ours.
    async fn finish(&mut self, info: &mut RunInfo) -> Result<()> {
        Pressure::finish(self).await;
        info.pressure_notes = std::mem::take(&mut self.notes);
        info.pressure_balloon_pids = std::mem::take(&mut self.balloon_pids);
        Ok(())
    }
}

impl Pressure {
    /// The run's pressure from its start: `--scale-factor` and `--boost-factor` set and
    /// `--pressure`'s band held (all said in `info`), or none yet.
    pub async fn start(
        &mut self,
        config: &PressureConfig,
        info: &mut RunInfo,
        progress: &Progress,
        signals: &mut Signals,
    ) -> Result<(), Abort> {
        for setting in sysctl::watermark_settings(config.scale_factor, config.boost_factor) {
            let Some(during) = setting.value else {
                continue;
            };
            let (before, guardian) = self.set_sysctl(setting.sysctl, during, progress)?;
            let said = Some(SysctlDuring {
                before,
                during: during.into(),
            });
            match setting.sysctl {
                BOOST_FACTOR => info.boost_factor = said,
                _ => info.scale_factor = said,
            }
            info.guardian_pids.push(guardian);
        }
        if let Some(band) = config.band {
            info.pressure = Some(band.to_string());
            self.set(Some(band), progress, signals).await?;
        }
        Ok(())
    }
}
