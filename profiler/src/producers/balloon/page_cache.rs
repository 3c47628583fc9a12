//! Something for kswapd to reclaim besides anonymous memory: a file of a chosen size in the
//! run folder, written, then re-read every couple of seconds by a thread so that its pages
//! stay referenced (on the active file list) while the bands are held. A guardian is forked
//! before the file exists, so it never outlives skillprof.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result, ensure};

use crate::producers::system::guardian::{Guardian, Restore};
use crate::producers::system::swapfile::write_zeros;

/// How often the file is read again: often enough that reclaim finds its pages referenced.
pub const REREAD: Duration = Duration::from_secs(2);

pub struct PageCache {
    path: PathBuf,
    /// Taken when the file is removed on purpose; dropped with it otherwise.
    guardian: Option<Guardian>,
    stop: Arc<AtomicBool>,
    /// Passes over the whole file, for the record.
    passes: Arc<AtomicU64>,
    reader: Option<JoinHandle<()>>,
}

impl PageCache {
    /// Writes `bytes` at `path` and starts keeping it hot.
    pub fn create(path: &Path, bytes: u64) -> Result<PageCache> {
        ensure!(bytes >= 1 << 20, "--page-cache must be at least 1 MiB");
        let guardian = Guardian::protect(
            Restore::file(path)?,
            &format!("the page-cache file {} (deleted)", path.display()),
        )?;
        write_zeros(path, bytes, &[], "the page-cache file")?;
        let stop = Arc::new(AtomicBool::new(false));
        let passes = Arc::new(AtomicU64::new(0));
        let mut file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
        let reader = {
            let (stop, passes) = (stop.clone(), passes.clone());
            std::thread::Builder::new()
                .name("skp-page-cache".into())
                .spawn(move || {
                    let mut block = vec![0u8; 1 << 20];
                    while !stop.load(Ordering::Relaxed) {
                        if std::io::Seek::rewind(&mut file).is_err() {
                            return;
                        }
                        while matches!(file.read(&mut block), Ok(n) if n > 0) {}
                        passes.fetch_add(1, Ordering::Relaxed);
                        std::thread::park_timeout(REREAD);
                    }
                })
                .context("starting the page-cache reader")?
        };
        Ok(PageCache {
            path: path.to_path_buf(),
            guardian: Some(guardian),
            stop,
            passes,
            reader: Some(reader),
        })
    }

    pub fn guardian_pid(&self) -> Option<u32> {
        self.guardian.as_ref().and_then(Guardian::pid)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stops reading, deletes the file and checks it is gone; returns the passes made.
    pub fn remove(mut self) -> Result<u64> {
        self.stop_reading();
        let passes = self.passes.load(Ordering::Relaxed);
        if let Some(guardian) = self.guardian.take() {
            guardian.restore()?;
        }
        ensure!(
            !self.path.exists(),
            "the page-cache file {} is still there: delete it",
            self.path.display()
        );
        Ok(passes)
    }

    fn stop_reading(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(reader) = self.reader.take() {
            reader.thread().unpark();
            let _ = reader.join();
        }
    }
}

impl Drop for PageCache {
    fn drop(&mut self) {
        self.stop_reading();
    }
}
