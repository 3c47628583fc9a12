//! `--events`: raw events from the `EVENTS` ring buffer, drained by a thread into events.csv.
//!
//! Columns: `ts_ns` (CLOCK_MONOTONIC), `entry`, `tid`, `kind`, `fields` (space-separated
//! `name=value`, depending on the kind). Events the ring could not take are counted in the
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
    ADVICE_NAMES, CTX_NAMES, EV_DIRECT_RECLAIM, EV_EXIT_GROUP, EV_EXIT_MMAP, EV_FAULT,
    EV_FAULT_FEXIT, EV_FAULT_KERNEL, EV_KSWAPD_SLEEP, EV_KSWAPD_WAKE, EV_LRU_ACTIVE,
    EV_LRU_INACTIVE, EV_MEMCG_RECLAIM, EV_NOTIFY_PARENT, EV_PROCESS_EXIT, EV_RSS_TEARDOWN,
    EV_SHRINK_NODE, EV_SHRINK_SLAB, EV_SIGNAL_DELIVER, EV_SYSCALL, EV_THROTTLED, EV_WAKEUP_KSWAPD,
    Event, SYSCALL_NAMES, advice_class,
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
                            if item.len() >= size_of::<Event>() {
                                // SAFETY: the kernel wrote one `Event` (48 bytes, no padding,
                                // any bit pattern valid); read unaligned from the ring.
                                let event = unsafe {
                                    std::ptr::read_unaligned(item.as_ptr().cast::<Event>())
                                };
                                write_event(&mut out, &event)?;
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

fn write_event(out: &mut impl std::io::Write, e: &Event) -> std::io::Result<()> {
    let ctx = |i: u32| CTX_NAMES.get(i as usize).copied().unwrap_or("?");
    let (kind, fields) = match e.kind {
        EV_SYSCALL => {
            let name = SYSCALL_NAMES
                .get((e.aux & 0xff) as usize)
                .copied()
                .unwrap_or("?");
            let arg = match name {
                "brk" => "addr",
                "mremap" => "new_len",
                _ => "len",
            };
            let mut fields = format!("{arg}={} ret={} lat_ns={}", e.a, e.b as i64, e.c);
            if name == "madvise" {
                let advice = u64::from(e.aux >> 8);
                fields.push_str(&format!(
                    " advice={advice} ({})",
                    ADVICE_NAMES[advice_class(advice)]
                ));
            }
            (name, fields)
        }
        EV_FAULT => (
            "fault",
            format!(
                "address={:#x} write={} error_code={:#x}",
                e.a,
                (e.b >> 1) & 1,
                e.b
            ),
        ),
        EV_FAULT_FEXIT => (
            "fault",
            format!(
                "address={:#x} write={} major={} flags={:#x} ret={:#x}",
                e.a,
                e.b & 1,
                (e.c >> 2) & 1,
                e.b,
                e.c
            ),
        ),
        EV_FAULT_KERNEL => ("fault_kernel", format!("address={:#x} write={}", e.a, e.b)),
        EV_KSWAPD_WAKE => ("kswapd_wake", format!("nid={} order={}", e.aux, e.a)),
        EV_KSWAPD_SLEEP => ("kswapd_sleep", format!("nid={} awake_ns={}", e.aux, e.a)),
        EV_WAKEUP_KSWAPD => (
            "wakeup_kswapd",
            format!("nid={} order={} gfp={:#x} by_host={}", e.aux, e.a, e.b, e.c),
        ),
        EV_DIRECT_RECLAIM => (
            "direct_reclaim",
            format!("reclaimed={} ns={} host={}", e.a, e.b, e.c),
        ),
        EV_MEMCG_RECLAIM => (
            "memcg_reclaim",
            format!("reclaimed={} ns={} host={}", e.a, e.b, e.c),
        ),
        EV_LRU_INACTIVE => (
            "lru_shrink_inactive",
            format!(
                "ctx={} scanned={} reclaimed={} nid={}",
                ctx(e.aux),
                e.a,
                e.b,
                e.c
            ),
        ),
        EV_LRU_ACTIVE => (
            "lru_shrink_active",
            format!(
                "ctx={} taken={} deactivated={} nid={}",
                ctx(e.aux),
                e.a,
                e.b,
                e.c
            ),
        ),
        EV_SHRINK_NODE => ("shrink_node", format!("ctx={} ns={}", ctx(e.aux), e.a)),
        EV_SHRINK_SLAB => ("shrink_slab", format!("freed={} ns={}", e.a, e.b)),
        EV_THROTTLED => (
            "throttled",
            format!("nid={} delayed_us={} reason={:#x}", e.aux, e.a, e.b),
        ),
        EV_SIGNAL_DELIVER => ("signal_deliver", format!("sig={}", e.a)),
        EV_EXIT_GROUP => ("exit_group", format!("code={}", e.a as i64)),
        EV_PROCESS_EXIT => ("thread_exit", String::new()),
        EV_EXIT_MMAP => (
            if e.aux == 0 {
                "exit_mmap_start"
            } else {
                "exit_mmap_end"
            },
            String::new(),
        ),
        EV_RSS_TEARDOWN => (
            "rss_teardown",
            format!("member={} bytes={} curr={}", e.aux, e.a, e.b),
        ),
        EV_NOTIFY_PARENT => ("notify_parent", format!("sig={}", e.a)),
        _ => (
            "unknown",
            format!("kind={} a={} b={} c={}", e.kind, e.a, e.b, e.c),
        ),
    };
    writeln!(out, "{},{},{},{kind},{fields}", e.ts_ns, e.entry, e.tid)
}
