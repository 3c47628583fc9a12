//! The C allocator's own view of the host's heap: the bytes the host (Cranelift above all)
//! holds in use, and the bytes the allocator keeps after they were let go. After a first
//! Python compile most of the host's RSS is the second kind; `trim` hands it back.
//!
//! glibc's malloc answers through `mallinfo2` and `malloc_trim`. jemalloc, preloaded in its
//! place (`--malloc jemalloc`), through `mallctl`, found at run time: the host links no
//! allocator of its own, so any preloaded one takes every C and Rust allocation.

use std::ffi::{CStr, OsString, c_char, c_int, c_void};
use std::os::unix::process::CommandExt;
use std::sync::OnceLock;

use anyhow::{Result, bail, ensure};
use serde::Serialize;

use crate::config::Malloc;

#[derive(Clone, Copy, Debug, Serialize)]
pub struct Heap {
    /// Allocated and not freed.
    pub in_use_bytes: u64,
    /// Freed memory the allocator keeps for reuse, resident where it was touched: glibc's
    /// free chunks in its arenas; jemalloc's resident pages beyond what is allocated (dirty
    /// pages not yet purged, and its metadata).
    pub free_bytes: u64,
}

type Mallctl =
    unsafe extern "C" fn(*const c_char, *mut c_void, *mut usize, *mut c_void, usize) -> c_int;

enum Live {
    Glibc,
    Jemalloc(Mallctl),
    /// Another preloaded allocator: glibc's arenas are then empty, and its zeros would read
    /// as "nothing kept".
    Unknown,
}

fn live() -> &'static Live {
    static LIVE: OnceLock<Live> = OnceLock::new();
    LIVE.get_or_init(|| {
        // SAFETY: dlsym with RTLD_DEFAULT only looks a name up in the loaded objects.
        let mallctl = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"mallctl".as_ptr()) };
        if !mallctl.is_null() {
            // SAFETY: jemalloc's mallctl has this signature in every 5.x release.
            return Live::Jemalloc(unsafe { std::mem::transmute::<*mut c_void, Mallctl>(mallctl) });
        }
        // SAFETY: mallinfo2 takes each arena's lock and only reads its counters.
        let info = unsafe { libc::mallinfo2() };
        if info.arena == 0 && info.hblkhd == 0 {
            Live::Unknown
        } else {
            Live::Glibc
        }
    })
}

/// Set before the host runs itself again with jemalloc preloaded: if it is still missing
/// then, the loader could not find it.
const PRELOADED: &str = "SKILLHOST_JEMALLOC_PRELOADED";

/// Makes `malloc` the allocator in this process, running the host again with it preloaded
/// when it is not (the process keeps its pid). Call it first, before any thread starts.
pub fn adopt(malloc: Malloc, decay_ms: Option<i64>) -> Result<()> {
    match (malloc, live()) {
        (Malloc::Glibc, Live::Jemalloc(_)) => {
            bail!("jemalloc is preloaded (LD_PRELOAD): pass --malloc jemalloc, so the host says so")
        }
        (Malloc::Glibc, _) => {
            ensure!(
                decay_ms.is_none(),
                "--malloc-decay-ms sets jemalloc's decay: pass --malloc jemalloc"
            );
            Ok(())
        }
        (Malloc::Jemalloc, Live::Jemalloc(mallctl)) => {
            let Some(wanted) = decay_ms else {
                return Ok(());
            };
            for option in [c"opt.dirty_decay_ms", c"opt.muzzy_decay_ms"] {
                let set = read::<isize>(*mallctl, option);
                ensure!(
                    set == Some(wanted as isize),
                    "jemalloc's {} is {set:?}, not {wanted}: MALLOC_CONF was set before the \
                     host could set it",
                    option.to_string_lossy()
                );
            }
            Ok(())
        }
        (Malloc::Jemalloc, _) if std::env::var_os(PRELOADED).is_some() => bail!(
            "libjemalloc.so.2 could not be preloaded: install it (as root: apt-get install \
             libjemalloc2)"
        ),
        (Malloc::Jemalloc, _) => {
            let mut preload = OsString::from("libjemalloc.so.2");
            if let Some(others) = std::env::var_os("LD_PRELOAD") {
                preload.push(" ");
                preload.push(others);
            }
            let mut command = std::process::Command::new("/proc/self/exe");
            command
                .args(std::env::args_os().skip(1))
                .env("LD_PRELOAD", preload)
                .env(PRELOADED, "1");
            if let Some(arg0) = std::env::args_os().next() {
                command.arg0(arg0);
            }
            if let Some(ms) = decay_ms {
                // jemalloc reads MALLOC_CONF left to right, so ours come last and win.
                let mut conf = std::env::var_os("MALLOC_CONF").unwrap_or_default();
                if !conf.is_empty() {
                    conf.push(",");
                }
                conf.push(format!("dirty_decay_ms:{ms},muzzy_decay_ms:{ms}"));
                command.env("MALLOC_CONF", conf);
            }
            let error = command.exec();
            bail!("running the host again with jemalloc preloaded: {error}")
        }
    }
}

/// `None` when the allocator is neither glibc's nor jemalloc.
pub fn now() -> Option<Heap> {
    match live() {
        Live::Glibc => {
            // SAFETY: as in `live`.
            let info = unsafe { libc::mallinfo2() };
            Some(Heap {
                in_use_bytes: (info.uordblks + info.hblkhd) as u64,
                free_bytes: info.fordblks as u64,
            })
        }
        Live::Jemalloc(mallctl) => {
            // jemalloc's statistics are a snapshot taken when the epoch advances.
            let mut epoch = 1u64;
            // SAFETY: "epoch" takes a u64 to write; nothing is read back.
            unsafe {
                mallctl(
                    c"epoch".as_ptr(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    (&raw mut epoch).cast(),
                    size_of::<u64>(),
                )
            };
            let allocated = read::<usize>(*mallctl, c"stats.allocated")?;
            let resident = read::<usize>(*mallctl, c"stats.resident")?;
            Some(Heap {
                in_use_bytes: allocated as u64,
                free_bytes: resident.saturating_sub(allocated) as u64,
            })
        }
        Live::Unknown => None,
    }
}

/// Gives the allocator's free memory back to the kernel.
pub fn trim() {
    match live() {
        // SAFETY: malloc_trim takes each arena's lock; it is safe to call from any thread.
        Live::Glibc => unsafe {
            libc::malloc_trim(0);
        },
        // SAFETY: purging every arena (MALLCTL_ARENAS_ALL, 4096) takes no arguments.
        Live::Jemalloc(mallctl) => unsafe {
            mallctl(
                c"arena.4096.purge".as_ptr(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            );
        },
        Live::Unknown => {}
    }
}

/// One of jemalloc's values, of the type its documentation gives the name.
fn read<T: Copy + Default>(mallctl: Mallctl, name: &CStr) -> Option<T> {
    let mut value = T::default();
    let mut size = size_of::<T>();
    // SAFETY: mallctl writes at most `size` bytes into `value` and says how many it wrote.
    let status = unsafe {
        mallctl(
            name.as_ptr(),
            (&raw mut value).cast(),
            &mut size,
            std::ptr::null_mut(),
            0,
        )
    };
    (status == 0 && size == size_of::<T>()).then_some(value)
}
