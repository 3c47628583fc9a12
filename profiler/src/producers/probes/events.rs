//! `--events`: raw events from the `EVENTS` ring buffer, drained by a thread into events.csv.
//!
//! Each ring item is a typed header and the body its kind names; it is decoded into a
//! [`KernelEvent`] record, and events.csv holds the record's line (see `record::event`). Events the ring could not take are counted in the
//! kernel (per entry: `events_lost`) and reported in the costs.

use std::{
    fs::File,
    io::{BufWriter, Write as _},
    os::fd::AsRawFd as _,
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread::{self, JoinHandle},
};

use anyhow::{Context as _, Result};
use aya::maps::{MapData, RingBuf};
use skillprof_common::{EventHeader, EventKind};

use crate::record::event::{Body, CSV_HEADER, KernelEvent};

/// The file's name in a run folder.
pub const FILE: &str = "events.csv";

pub struct EventStream {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    written: Arc<AtomicU64>,
    thread: Option<JoinHandle<Result<()>>>,
}

impl EventStream {
    pub fn start(mut ring: RingBuf<MapData>, path: &Path) -> Result<Self> {
        let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        writeln!(out, "{CSV_HEADER}")?;
        let stop = Arc::new(AtomicBool::new(false));
        let written = Arc::new(AtomicU64::new(0));
        let thread = {
            let stop = Arc::clone(&stop);
            let written = Arc::clone(&written);
            thread::Builder::new()
                .name("skillprof-events".into())
                .spawn(move || -> Result<()> {
                    let fd = ring.as_raw_fd();
                    loop {
                        let stopping = stop.load(Ordering::Acquire);
                        let mut drained = 0u64;
                        while let Some(item) = ring.next() {
                            if let Some(header) = read::<EventHeader>(&item) {
                                let event = decode(&header, &item[size_of::<EventHeader>()..]);
                                writeln!(out, "{}", event.csv_line())?;
                                drained += 1;
                            }
                        }
                        written.fetch_add(drained, Ordering::Relaxed);
                        if stopping {
                            break;
                        }
                        let mut pollfd = libc::pollfd {
                            fd,
                            events: libc::POLLIN,
                            revents: 0,
                        };
                        // SAFETY: one valid pollfd; a timeout so `stop` is noticed.
                        unsafe { libc::poll(&mut pollfd, 1, 50) };
                    }
                    out.flush()?;
                    Ok(())
                })?
        };
        Ok(Self {
            path: path.to_path_buf(),
            stop,
            written,
            thread: Some(thread),
        })
    }

    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// Drains what is left, closes the file, and returns how many events it holds.
    pub fn finish(&mut self) -> Result<u64> {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread
                .join()
                .map_err(|_| anyhow::anyhow!("the events thread panicked"))?
                .with_context(|| format!("writing {}", self.path.display()))?;
        }
        Ok(self.written())
    }
}

impl Drop for EventStream {
    fn drop(&mut self) {
        if let Err(e) = self.finish() {
            eprintln!("warning: events stream: {e:#}");
        }
    }
}

/// The `T` at the start of `bytes`, if they are long enough. Ring items are not aligned for
/// `T`, so it is copied out.
fn read<T: aya::Pod>(bytes: &[u8]) -> Option<T> {
    let bytes = bytes.get(..size_of::<T>())?;
    // SAFETY: `T` is plain data (`Pod`: any bit pattern is valid) and `bytes` holds exactly
    // its size.
    Some(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
}

/// The record of one ring item: its header and the body its kind names, or `Unknown` for a
/// kind this version does not know or a body too short for its kind.
fn decode(header: &EventHeader, body: &[u8]) -> KernelEvent {
    let unknown = Body::Unknown {
        tag: header.kind,
        bytes: body.len() as u64,
    };
    let typed = EventKind::from_tag(header.kind).and_then(|kind| {
        Some(match kind {
            EventKind::Syscall => Body::Syscall(read(body)?),
            EventKind::UserFault => Body::UserFault(read(body)?),
            EventKind::HandledFault => Body::HandledFault(read(body)?),
            EventKind::KernelFault => Body::KernelFault(read(body)?),
            EventKind::KswapdWake => Body::KswapdWake(read(body)?),
            EventKind::KswapdSleep => Body::KswapdSleep(read(body)?),
            EventKind::WakeupKswapd => Body::WakeupKswapd(read(body)?),
            EventKind::DirectReclaim => Body::DirectReclaim(read(body)?),
            EventKind::MemcgReclaim => Body::MemcgReclaim(read(body)?),
            EventKind::LruInactive => Body::LruInactive(read(body)?),
            EventKind::LruActive => Body::LruActive(read(body)?),
            EventKind::ShrinkNode => Body::ShrinkNode(read(body)?),
            EventKind::ShrinkSlab => Body::ShrinkSlab(read(body)?),
            EventKind::Throttled => Body::Throttled(read(body)?),
            EventKind::SignalDeliver => Body::SignalDeliver(read(body)?),
            EventKind::ExitGroup => Body::ExitGroup(read(body)?),
            EventKind::ProcessExit => Body::ThreadExit,
            EventKind::ExitMmap => Body::ExitMmap(read(body)?),
            EventKind::RssTeardown => Body::RssTeardown(read(body)?),
            EventKind::NotifyParent => Body::NotifyParent(read(body)?),
            EventKind::Mark => Body::Mark(read(body)?),
        })
    });
    KernelEvent {
        ts_ns: header.ts_ns,
        entry: header.entry,
        tid: header.tid,
        body: typed.unwrap_or(unknown),
    }
}
