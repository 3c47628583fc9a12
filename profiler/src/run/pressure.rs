//! The runner's side of memory pressure: a balloon holding free memory in a watermark band
//! while the workload runs (`--pressure BAND`, or `pressure BAND|off` in the cmds file), and
//! the same `pressure_*` columns in every row, empty where no balloon was held.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::cmds::{Command, Plan};
use crate::pressure::{Balloon, HeldBalloon, HoldOptions, NoBalloon, NotHeld};
use crate::record::{Metrics as _, Row};
use crate::sample::zoneinfo::Band;

use super::interrupt::{Interruption, Signals};
use super::progress::Progress;

/// A balloon squeezes every process on the machine, not only the host: like `skillprof
/// pressure`, a run that holds a band needs root. Checked before anything starts.
pub fn require_root_if_used(from_start: Option<Band>, plan: &Plan) -> Result<()> {
    let in_plan = plan
        .entries
        .iter()
        .find(|entry| matches!(entry.command, Command::Pressure(_)));
    let why = match (from_start, in_plan) {
        (Some(band), _) => format!("--pressure {band}"),
        (None, Some(entry)) => format!("line {}: {}", entry.line.unwrap_or(0), entry.name),
        (None, None) => return Ok(()),
    };
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!(
            "{why} holds free memory near the watermarks of the whole machine, which needs \
             root: run as root (e.g. `sudo skillprof run ...`), or drop the pressure"
        );
    }
    Ok(())
}

pub struct Pressure {
    balloon: Option<HeldBalloon>,
    none: NoBalloon,
    settle_timeout: Duration,
    /// What went wrong with holding a band, for meta.json and the end of the run.
    pub notes: Vec<String>,
    /// Every balloon process this run started (meta.json: proof none outlives it).
    pub balloon_pids: Vec<u32>,
}

/// Why changing the pressure did not end normally.
pub enum Interrupted {
    By(Interruption),
    Failed(anyhow::Error),
}

impl Pressure {
    pub fn new(settle_timeout: Duration) -> Result<Self> {
        Ok(Pressure {
            balloon: None,
            none: NoBalloon::new()?,
            settle_timeout,
            notes: Vec::new(),
            balloon_pids: Vec::new(),
        })
    }

    /// Holds `band` (`None`: lets go), waiting until free memory is in it. A band that is
    /// not reached, or a hold a safety rule stopped, is a loud note, not the end of the run:
    /// the entries' `pressure_*` columns say what was really held.
    pub async fn set(
        &mut self,
        band: Option<Band>,
        progress: &Progress,
        signals: &mut Signals,
    ) -> Result<(), Interrupted> {
        let Some(band) = band else {
            self.release().await.map_err(Interrupted::Failed)?;
            return Ok(());
        };
        let held = match self.balloon.take() {
            Some(held) => {
                held.retarget(band).map_err(Interrupted::Failed)?;
                held
            }
            None => {
                let held =
                    Balloon::hold(band, HoldOptions::default()).map_err(Interrupted::Failed)?;
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
                let (held, outcome) = done.context("the settling thread failed").map_err(Interrupted::Failed)?;
                self.balloon = Some(held);
                self.note_outcome(band, outcome, progress);
                return Ok(());
            }
            interruption = signals.next() => interruption,
        };
        stop.store(true, Ordering::Relaxed);
        let (held, _) = settling
            .await
            .context("the settling thread failed")
            .map_err(Interrupted::Failed)?;
        self.balloon = Some(held);
        Err(Interrupted::By(interruption))
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

    pub fn write_entry(&self, row: &mut Row) {
        match &self.balloon {
            Some(held) => held.held().write(row),
            None => self.none.write(row),
        }
    }

    /// Gives the balloon's memory back and waits until it is.
    pub async fn release(&mut self) -> Result<()> {
        if let Some(held) = self.balloon.take() {
            tokio::task::spawn_blocking(move || held.release())
                .await
                .context("the releasing thread failed")??;
        }
        Ok(())
    }
}
