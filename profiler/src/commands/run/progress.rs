//! What a person watching a run sees: on a terminal, a live line with the entry, its
//! elapsed time and the host's RSS; elsewhere (CI logs, pipes), one plain line per entry.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use crate::ground::units;
use crate::producers::sample::{self, process};

pub struct Progress {
    bar: Option<ProgressBar>,
    total: usize,
    /// Set once the host is told to stop: from then on /proc/PID is not read (see
    /// `Sampler::release_process`).
    host_released: AtomicBool,
}

impl Progress {
    /// Live when stderr is a terminal.
    pub fn new(total: usize) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(total as u64);
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{pos}/{len}] {elapsed:>4} {msg}  {prefix}",
                )
                .expect("a valid template"),
            );
            bar.enable_steady_tick(Duration::from_millis(100));
            bar
        });
        Progress {
            bar,
            total,
            host_released: AtomicBool::new(false),
        }
    }

    /// Shows `host_pid`'s RSS next to the entry while it runs, every quarter second.
    pub fn watch_rss(self: &Arc<Self>, host_pid: u32) {
        if self.bar.is_none() {
            return;
        }
        let progress = self.clone();
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(Duration::from_millis(250));
            loop {
                ticker.tick().await;
                let Some(bar) = &progress.bar else { return };
                if bar.is_finished() || progress.host_released.load(Ordering::Relaxed) {
                    return;
                }
                if let Ok(stat) = process::read(std::path::Path::new(sample::PROC), host_pid) {
                    bar.set_prefix(format!("RSS {}", units::whole_mib(stat.rss_kb)));
                }
            }
        });
    }

    /// Stops showing the host's RSS: it is about to exit.
    pub fn release_host(&self) {
        self.host_released.store(true, Ordering::Relaxed);
    }

    pub fn begin(&self, index: usize, name: &str) {
        if let Some(bar) = &self.bar {
            bar.set_position(index as u64);
            bar.reset_elapsed();
            bar.set_message(name.to_owned());
        }
    }

    /// One line per finished entry: printed above the live line, or alone.
    pub fn done(&self, index: usize, line: &str) {
        let line = format!("[{}/{}] {line}", index + 1, self.total);
        match &self.bar {
            Some(bar) => bar.println(line),
            None => eprintln!("{line}"),
        }
    }

    pub fn note(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.println(line),
            None => eprintln!("{line}"),
        }
    }

    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
