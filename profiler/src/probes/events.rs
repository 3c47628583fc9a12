//! `--events`: raw events from the `EVENTS` ring buffer, drained by a thread into events.csv.
//!
//! Columns: `ts_ns` (CLOCK_MONOTONIC), `entry`, `tid`, `kind`, `fields` (space-separated
//! `name=value`, depending on the kind). Each event is a typed header and the body its kind
//! names (`skillprof_common::EventKind`). Events the ring could not take are counted in the
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
use skillprof_common::{
    ADVICE_NAMES, CTX_NAMES, DirectReclaimEvent, EventHeader, EventKind, ExitGroupEvent,
    ExitMmapEvent, HandledFaultEvent, KernelFaultEvent, KswapdSleepEvent, KswapdWakeEvent,
    LruActiveEvent, LruInactiveEvent, MemcgReclaimEvent, NotifyParentEvent, RssTeardownEvent,
    SYSCALL_NAMES, ShrinkNodeEvent, ShrinkSlabEvent, SignalDeliverEvent, SyscallEvent,
    ThrottledEvent, UserFaultEvent, WakeupKswapdEvent, advice_class,
};

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
        writeln!(out, "ts_ns,entry,tid,kind,fields")?;
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
                                write_event(&mut out, &header, &item[size_of::<EventHeader>()..])?;
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

/// One event as an events.csv line: its kind's name and its body's fields as `name=value`.
fn write_event(
    out: &mut impl std::io::Write,
    header: &EventHeader,
    body: &[u8],
) -> std::io::Result<()> {
    let ctx = |i: u32| CTX_NAMES.get(i as usize).copied().unwrap_or("?");
    let unknown = || {
        (
            "unknown",
            format!("kind={} bytes={}", header.kind, body.len()),
        )
    };
    let (kind, fields) = match EventKind::from_tag(header.kind) {
        None => unknown(),
        Some(kind) => describe(kind, body, ctx).unwrap_or_else(unknown),
    };
    writeln!(
        out,
        "{},{},{},{kind},{fields}",
        header.ts_ns, header.entry, header.tid
    )
}

/// The name and fields of a body of `kind`; `None` if the body is too short for its type.
fn describe(
    kind: EventKind,
    body: &[u8],
    ctx: impl Fn(u32) -> &'static str,
) -> Option<(&'static str, String)> {
    Some(match kind {
        EventKind::Syscall => {
            let e: SyscallEvent = read(body)?;
            let name = SYSCALL_NAMES
                .get(e.syscall as usize)
                .copied()
                .unwrap_or("?");
            let arg = match name {
                "brk" => "addr",
                "mremap" => "new_len",
                _ => "len",
            };
            let mut fields = format!("{arg}={} ret={} lat_ns={}", e.arg, e.ret, e.lat_ns);
            if name == "madvise" {
                let advice = u64::from(e.advice);
                fields.push_str(&format!(
                    " advice={advice} ({})",
                    ADVICE_NAMES[advice_class(advice)]
                ));
            }
            (name, fields)
        }
        EventKind::UserFault => {
            let e: UserFaultEvent = read(body)?;
            (
                "fault",
                format!(
                    "address={:#x} write={} error_code={:#x}",
                    e.address,
                    (e.error_code >> 1) & 1,
                    e.error_code
                ),
            )
        }
        EventKind::HandledFault => {
            let e: HandledFaultEvent = read(body)?;
            (
                "fault",
                format!(
                    "address={:#x} write={} major={} flags={:#x} ret={:#x}",
                    e.address,
                    e.flags & 1,
                    (e.result >> 2) & 1,
                    e.flags,
                    e.result
                ),
            )
        }
        EventKind::KernelFault => {
            let e: KernelFaultEvent = read(body)?;
            (
                "fault_kernel",
                format!("address={:#x} write={}", e.address, e.write),
            )
        }
        EventKind::KswapdWake => {
            let e: KswapdWakeEvent = read(body)?;
            ("kswapd_wake", format!("nid={} order={}", e.nid, e.order))
        }
        EventKind::KswapdSleep => {
            let e: KswapdSleepEvent = read(body)?;
            (
                "kswapd_sleep",
                format!("nid={} awake_ns={}", e.nid, e.awake_ns),
            )
        }
        EventKind::WakeupKswapd => {
            let e: WakeupKswapdEvent = read(body)?;
            (
                "wakeup_kswapd",
                format!(
                    "nid={} order={} gfp={:#x} by_host={}",
                    e.nid, e.order, e.gfp, e.by_host
                ),
            )
        }
        EventKind::DirectReclaim => {
            let e: DirectReclaimEvent = read(body)?;
            (
                "direct_reclaim",
                format!("reclaimed={} ns={} host={}", e.reclaimed, e.ns, e.by_host),
            )
        }
        EventKind::MemcgReclaim => {
            let e: MemcgReclaimEvent = read(body)?;
            (
                "memcg_reclaim",
                format!("reclaimed={} ns={} host={}", e.reclaimed, e.ns, e.by_host),
            )
        }
        EventKind::LruInactive => {
            let e: LruInactiveEvent = read(body)?;
            (
                "lru_shrink_inactive",
                format!(
                    "ctx={} scanned={} reclaimed={} nid={}",
                    ctx(e.ctx),
                    e.scanned,
                    e.reclaimed,
                    e.nid
                ),
            )
        }
        EventKind::LruActive => {
            let e: LruActiveEvent = read(body)?;
            (
                "lru_shrink_active",
                format!(
                    "ctx={} taken={} deactivated={} nid={}",
                    ctx(e.ctx),
                    e.taken,
                    e.deactivated,
                    e.nid
                ),
            )
        }
        EventKind::ShrinkNode => {
            let e: ShrinkNodeEvent = read(body)?;
            ("shrink_node", format!("ctx={} ns={}", ctx(e.ctx), e.ns))
        }
        EventKind::ShrinkSlab => {
            let e: ShrinkSlabEvent = read(body)?;
            ("shrink_slab", format!("freed={} ns={}", e.freed, e.ns))
        }
        EventKind::Throttled => {
            let e: ThrottledEvent = read(body)?;
            (
                "throttled",
                format!(
                    "nid={} delayed_us={} reason={:#x}",
                    e.nid, e.delayed_us, e.reason
                ),
            )
        }
        EventKind::SignalDeliver => {
            let e: SignalDeliverEvent = read(body)?;
            ("signal_deliver", format!("sig={}", e.signal))
        }
        EventKind::ExitGroup => {
            let e: ExitGroupEvent = read(body)?;
            ("exit_group", format!("code={}", e.code as i64))
        }
        EventKind::ProcessExit => ("thread_exit", String::new()),
        EventKind::ExitMmap => {
            let e: ExitMmapEvent = read(body)?;
            let name = if e.end == 0 {
                "exit_mmap_start"
            } else {
                "exit_mmap_end"
            };
            (name, String::new())
        }
        EventKind::RssTeardown => {
            let e: RssTeardownEvent = read(body)?;
            (
                "rss_teardown",
                format!("member={} bytes={} curr={}", e.member, e.bytes, e.own_task),
            )
        }
        EventKind::NotifyParent => {
            let e: NotifyParentEvent = read(body)?;
            ("notify_parent", format!("sig={}", e.signal))
        }
    })
}
