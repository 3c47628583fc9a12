//! skillprof-exercise: a deterministic workload for the probe tests. It does exactly what it
//! is told, one command per stdin line, and answers each with one `ok ...` (or `error ...`)
//! line on stdout, so a test can put an entry boundary between any two commands.
//!
//! Transparent huge pages are disabled for it (PR_SET_THP_DISABLE), so touching a page is
//! one fault. Everything it needs is allocated before the first command and the replies are written
//! with raw `write(2)` from a fixed buffer, so a command makes no syscalls or faults beyond
//! the ones it is asked for (apart from reading stdin, the one write of its reply, and
//! `wait-sigterm`'s signal mask).
//!
//! Commands:
//! - `mmap <n> <bytes>`: n anonymous private read-write mappings of `bytes` each;
//! - `touch <pages>`: write one byte to each of the first `pages` untouched pages of the
//!   mappings, in order;
//! - `read-into <pages>`: read(2) from /dev/zero into the next `pages` untouched pages, one
//!   read per mapping: the kernel faults them in (kernel mode, on user addresses) while it
//!   copies;
//! - `populate <pages>`: madvise(MADV_POPULATE_WRITE) on the next `pages` untouched pages,
//!   one call per mapping: the kernel faults them in through get_user_pages, without an
//!   exception;
//! - `munmap <k>`: unmap the k oldest mappings, whole;
//! - `munmap-bad`: one munmap of a misaligned address (fails with EINVAL);
//! - `madvise-dontneed`: MADV_DONTNEED on the oldest remaining mapping, whole;
//! - `brk <bytes>`: move the program break by `bytes` (sbrk: one brk call);
//! - `mprotect-exec`: make the first page of the newest mapping read-execute, as a runtime
//!   publishes compiled code (one mprotect call with PROT_EXEC);
//! - `hold <MiB>`: map and touch `MiB` MiB in one mapping (the stop test's resident memory);
//! - `drain-on-sigterm <MiB>`: on SIGTERM, munmap that much of the held mapping, in 64 MiB
//!   calls, then exit 0 (the graceful drain);
//! - `wait-sigterm`: block until SIGTERM arrives (then drain and exit); a SIGTERM sent any
//!   time after the reply is never missed;
//! - `readfile <path>`: read a file through the page cache, 1 MiB at a time;
//! - `mark <phase>`: mark as skillhost does (request 1, the skill `exercise`, registered in
//!   the ledger before the first command; phase as `skillprof_common::PHASE_*`, flags
//!   included);
//! - `faults`: answer with this process's minflt and majflt (getrusage);
//! - `arenas <n> <MiB>`: start n threads that each malloc `MiB` MiB in 64 KiB chunks (from
//!   an arena of its own, up to MALLOC_ARENA_MAX), touch it, free every other chunk (kept by
//!   malloc) and stay parked; answer with malloc's figures (mallinfo2): `in_use=` and
//!   `free=` bytes. The layout of a many-core machine's arenas, built on purpose;
//! - `wasm-memory <MiB>`: reserve a wasm memory as wasmtime does (4 GiB and 32 MiB guards,
//!   inaccessible) and open and touch its first `MiB` MiB;
//! - `exit`: exit 0.

use std::{
    ffi::CString,
    io::{BufRead as _, BufReader},
    ptr,
    sync::atomic::{AtomicBool, Ordering},
};

const PAGE: usize = 4096;
const MIB: usize = 1 << 20;

static SIGTERM: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigterm(_: libc::c_int) {
    SIGTERM.store(true, Ordering::SeqCst);
}

struct Region {
    addr: *mut u8,
    len: usize,
}

struct State {
    regions: Vec<Region>,
    /// Pages of `regions` touched so far, counting from the first mapping still held.
    touched: usize,
    held: Option<Region>,
    drain_bytes: usize,
    out: [u8; 256],
    read_buf: Vec<u8>,
    /// /dev/zero, opened before the first command so that `read-into` only reads.
    zero: libc::c_int,
    /// The skill `mark` marks for, registered in the ledger before the first command.
    skill: u32,
}

fn main() {
    let mut state = State {
        regions: Vec::with_capacity(1024),
        touched: 0,
        held: None,
        drain_bytes: 0,
        out: [0; 256],
        read_buf: vec![1; MIB],
        // SAFETY: a NUL-terminated path; the fd lives as long as the process.
        zero: unsafe { libc::open(c"/dev/zero".as_ptr(), libc::O_RDONLY) },
        skill: skillprof_common::ledger::register("exercise"),
    };
    // No transparent huge pages: one fault per touched page, whatever the machine's THP mode
    // (adjacent mappings merge into one VMA, where THP=always would map 2 MiB per fault).
    // SAFETY: a process-wide flag, no pointers.
    unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    // SAFETY: installs a handler that only stores to an atomic.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigterm as *const () as usize;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGTERM, &action, ptr::null_mut());
    }
    let stdin = std::io::stdin();
    let mut input = BufReader::with_capacity(64 * 1024, stdin.lock());
    let mut line = String::with_capacity(4096);
    reply(&mut state, "ok ready");
    loop {
        line.clear();
        match input.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let result = run(&mut state, &words);
        match result {
            Ok(Some(answer)) => reply(&mut state, &answer),
            Ok(None) => reply(&mut state, "ok"),
            Err(why) => reply(&mut state, &format!("error {why}")),
        }
    }
}

fn run(state: &mut State, words: &[&str]) -> Result<Option<String>, String> {
    let number = |i: usize| -> Result<usize, String> {
        words
            .get(i)
            .ok_or("missing argument")?
            .parse()
            .map_err(|e| format!("{e}"))
    };
    match words.first().copied() {
        Some("mmap") => {
            let (n, len) = (number(1)?, number(2)?);
            for _ in 0..n {
                let addr = map(len)?;
                state.regions.push(Region { addr, len });
            }
            Ok(None)
        }
        Some("mark") => {
            skillprof_common::ledger::mark(1, state.skill, number(1)? as u32);
            Ok(None)
        }
        Some("touch") => {
            take_untouched(state, number(1)?, |start, pages| {
                for page in 0..pages {
                    // SAFETY: inside a live read-write mapping.
                    unsafe { ptr::write_volatile(start.add(page * PAGE), 1) };
                }
            })?;
            Ok(None)
        }
        Some("populate") => populate(state, number(1)?),
        Some("read-into") => read_into(state, number(1)?),
        Some("munmap") => {
            let k = number(1)?;
            if k > state.regions.len() {
                return Err("not that many mappings".into());
            }
            for region in state.regions.drain(..k) {
                state.touched = state.touched.saturating_sub(region.len / PAGE);
                // SAFETY: a whole mapping this program made and no longer uses.
                if unsafe { libc::munmap(region.addr.cast(), region.len) } != 0 {
                    return Err(format!("munmap: {}", std::io::Error::last_os_error()));
                }
            }
            Ok(None)
        }
        Some("mprotect-exec") => {
            let region = state.regions.last().ok_or("no mapping")?;
            // SAFETY: the first page of a live mapping of this program, which no later
            // command writes.
            let rc = unsafe {
                libc::mprotect(region.addr.cast(), PAGE, libc::PROT_READ | libc::PROT_EXEC)
            };
            if rc != 0 {
                return Err(format!("mprotect: {}", std::io::Error::last_os_error()));
            }
            Ok(None)
        }
        Some("munmap-bad") => {
            // SAFETY: a misaligned address: the kernel refuses it (EINVAL) and unmaps nothing.
            let rc = unsafe { libc::munmap(ptr::without_provenance_mut(1), PAGE) };
            if rc == 0 {
                return Err("munmap of a misaligned address succeeded".into());
            }
            Ok(None)
        }
        Some("madvise-dontneed") => {
            let region = state.regions.first().ok_or("no mapping")?;
            // SAFETY: a whole mapping of this program; its contents may be discarded.
            let rc = unsafe { libc::madvise(region.addr.cast(), region.len, libc::MADV_DONTNEED) };
            if rc != 0 {
                return Err(format!("madvise: {}", std::io::Error::last_os_error()));
            }
            Ok(None)
        }
        Some("brk") => {
            let bytes = number(1)?;
            // SAFETY: grows the heap; nothing else in this process moves the break meanwhile.
            let old = unsafe { libc::sbrk(bytes as libc::intptr_t) };
            if old as isize == -1 {
                return Err(format!("sbrk: {}", std::io::Error::last_os_error()));
            }
            Ok(None)
        }
        Some("hold") => {
            let len = number(1)? * MIB;
            let addr = map(len)?;
            for page in 0..len / PAGE {
                // SAFETY: inside the fresh mapping.
                unsafe { ptr::write_volatile(addr.add(page * PAGE), 1) };
            }
            state.held = Some(Region { addr, len });
            Ok(None)
        }
        Some("drain-on-sigterm") => {
            state.drain_bytes = number(1)? * MIB;
            Ok(None)
        }
        Some("wait-sigterm") => wait_sigterm(state),
        Some("readfile") => readfile(state, words.get(1).ok_or("missing path")?),
        Some("faults") => {
            // SAFETY: fills a zeroed struct.
            let usage = unsafe {
                let mut usage: libc::rusage = std::mem::zeroed();
                libc::getrusage(libc::RUSAGE_SELF, &mut usage);
                usage
            };
            Ok(Some(format!(
                "ok minflt={} majflt={}",
                usage.ru_minflt, usage.ru_majflt
            )))
        }
        Some("arenas") => {
            let (threads, mib) = (number(1)?, number(2)?);
            arenas(threads, mib * MIB);
            // SAFETY: mallinfo2 only reads malloc's state.
            let info = unsafe { libc::mallinfo2() };
            Ok(Some(format!(
                "ok in_use={} free={}",
                info.uordblks, info.fordblks
            )))
        }
        Some("wasm-memory") => {
            wasm_memory(number(1)? * MIB)?;
            Ok(None)
        }
        Some("exit") => std::process::exit(0),
        _ => Err(format!("unknown command {words:?}")),
    }
}

/// Faults in the next `pages` untouched pages with one madvise(MADV_POPULATE_WRITE) per span:
/// faults the kernel takes for get_user_pages.
fn populate(state: &mut State, pages: usize) -> Result<Option<String>, String> {
    let mut failed = None;
    take_untouched(state, pages, |start, pages| {
        // SAFETY: a span of a live read-write mapping.
        let rc = unsafe { libc::madvise(start.cast(), pages * PAGE, libc::MADV_POPULATE_WRITE) };
        if rc != 0 {
            failed = Some(std::io::Error::last_os_error());
        }
    })?;
    match failed {
        Some(error) => Err(format!("madvise(MADV_POPULATE_WRITE): {error}")),
        None => Ok(None),
    }
}

/// Fills the next `pages` untouched pages by read(2) from /dev/zero: faults taken in the
/// kernel, copying to user memory.
fn read_into(state: &mut State, pages: usize) -> Result<Option<String>, String> {
    let zero = state.zero;
    if zero < 0 {
        return Err("/dev/zero did not open".into());
    }
    take_untouched(state, pages, |start, pages| {
        let mut done = 0;
        while done < pages * PAGE {
            // SAFETY: into a live read-write mapping, within the span.
            let n = unsafe { libc::read(zero, start.add(done).cast(), pages * PAGE - done) };
            if n <= 0 {
                break;
            }
            done += n as usize;
        }
    })?;
    Ok(None)
}

/// Answers, then waits for SIGTERM, drains and exits.
fn wait_sigterm(state: &mut State) -> Result<Option<String>, String> {
    // SIGTERM stays blocked from before the reply until sigsuspend unblocks it and
    // waits in one step. With a flag check and pause(), a SIGTERM sent right after
    // the reply could land between the two, and the wait never ended (a kernel-matrix
    // guest hung so).
    // SAFETY: this (only) thread's signal mask, from and into sets on the stack.
    let waiting = unsafe {
        let mut term: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut term);
        libc::sigaddset(&mut term, libc::SIGTERM);
        let mut before: libc::sigset_t = std::mem::zeroed();
        libc::sigprocmask(libc::SIG_BLOCK, &term, &mut before);
        libc::sigdelset(&mut before, libc::SIGTERM);
        before
    };
    reply(state, "ok waiting");
    while !SIGTERM.load(Ordering::SeqCst) {
        // SAFETY: waits for a signal with `waiting` as the mask, SIGTERM unblocked.
        unsafe { libc::sigsuspend(&waiting) };
    }
    drain_and_exit(state)
}

/// Reads the file at `path` through the page cache; answers how many bytes.
fn readfile(state: &mut State, path: &str) -> Result<Option<String>, String> {
    let path = CString::new(path).map_err(|e| e.to_string())?;
    // SAFETY: a NUL-terminated path; the fd is closed below.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY) };
    if fd < 0 {
        return Err(format!("open: {}", std::io::Error::last_os_error()));
    }
    let mut total = 0usize;
    loop {
        // SAFETY: reads into our own buffer.
        let n = unsafe { libc::read(fd, state.read_buf.as_mut_ptr().cast(), state.read_buf.len()) };
        if n <= 0 {
            break;
        }
        total += n as usize;
    }
    // SAFETY: our fd.
    unsafe { libc::close(fd) };
    Ok(Some(format!("ok read={total}")))
}

/// Hands `each` the next `pages` untouched pages of the mappings, one span per mapping
/// (start, pages), and counts them as touched.
fn take_untouched(
    state: &mut State,
    mut pages: usize,
    mut each: impl FnMut(*mut u8, usize),
) -> Result<(), String> {
    let mut skip = state.touched;
    for region in &state.regions {
        let in_region = region.len / PAGE;
        if skip >= in_region {
            skip -= in_region;
            continue;
        }
        let here = (in_region - skip).min(pages);
        // SAFETY: `skip` pages into a live mapping of at least `skip + here` pages.
        each(unsafe { region.addr.add(skip * PAGE) }, here);
        pages -= here;
        state.touched += here;
        skip = 0;
        if pages == 0 {
            break;
        }
    }
    if pages > 0 {
        return Err(format!("{pages} pages short: map more first"));
    }
    Ok(())
}

/// Threads, each filling an arena of its own; returns once all have, leaving them parked.
fn arenas(threads: usize, bytes: usize) {
    const CHUNK: usize = 64 * 1024;
    let filled = std::sync::Arc::new(std::sync::Barrier::new(threads + 1));
    for _ in 0..threads {
        let filled = filled.clone();
        std::thread::spawn(move || {
            let mut chunks: Vec<Vec<u8>> = (0..bytes / CHUNK).map(|_| vec![1u8; CHUNK]).collect();
            // Every other chunk freed: malloc keeps it, in this thread's arena.
            let mut index = 0;
            chunks.retain(|_| {
                index += 1;
                index % 2 == 0
            });
            filled.wait();
            loop {
                std::thread::park();
                std::hint::black_box(&chunks);
            }
        });
    }
    filled.wait();
}

/// A wasm memory's reservation, as wasmtime makes one: inaccessible, then its first `open`
/// bytes after a 32 MiB guard made read-write and touched. Kept until the process exits.
fn wasm_memory(open: usize) -> Result<(), String> {
    const GUARD: usize = 32 * MIB;
    let reserved = GUARD + (4 << 30) + GUARD;
    // SAFETY: a fresh inaccessible reservation, then one range of it opened and written.
    unsafe {
        let base = libc::mmap(
            ptr::null_mut(),
            reserved,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        );
        if base == libc::MAP_FAILED {
            return Err(format!("mmap: {}", std::io::Error::last_os_error()));
        }
        let memory = base.cast::<u8>().add(GUARD);
        if libc::mprotect(memory.cast(), open, libc::PROT_READ | libc::PROT_WRITE) != 0 {
            return Err(format!("mprotect: {}", std::io::Error::last_os_error()));
        }
        for page in 0..open / PAGE {
            ptr::write_volatile(memory.add(page * PAGE), 1);
        }
    }
    Ok(())
}

fn drain_and_exit(state: &mut State) -> ! {
    if let Some(held) = &state.held {
        let mut left = state.drain_bytes.min(held.len);
        let mut at = held.addr;
        while left > 0 {
            let chunk = left.min(64 * MIB);
            // SAFETY: unmaps the front of the held mapping, which nothing uses any more.
            unsafe {
                libc::munmap(at.cast(), chunk);
                at = at.add(chunk);
            }
            left -= chunk;
        }
    }
    std::process::exit(0)
}

fn map(len: usize) -> Result<*mut u8, String> {
    // SAFETY: a fresh anonymous mapping.
    let addr = unsafe {
        libc::mmap(
            ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        return Err(format!("mmap: {}", std::io::Error::last_os_error()));
    }
    Ok(addr.cast())
}

/// One line on stdout with a single write(2) from a fixed buffer.
fn reply(state: &mut State, text: &str) {
    let bytes = text.as_bytes();
    let n = bytes.len().min(state.out.len() - 1);
    state.out[..n].copy_from_slice(&bytes[..n]);
    state.out[n] = b'\n';
    // SAFETY: writes our own buffer to fd 1.
    unsafe { libc::write(1, state.out.as_ptr().cast(), n + 1) };
}
