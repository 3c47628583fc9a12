//! `trim` on a host without a trim route (`skillprof run --trim-by ptrace`): one call of
//! glibc's `malloc_trim(0)` inside the host, made through ptrace the way a debugger's `call`
//! is. One thread is stopped, made to call the function, and put back as it was; the other
//! threads run on.
//!
//! The risk is a lock. `malloc_trim` takes each arena's lock in turn. A thread stopped while
//! it holds one would wait for itself, so the call is only made in a thread that is blocked in
//! a system call malloc never makes (`epoll_wait`, `poll`, `accept`, `nanosleep`, ...); its
//! registers at the stop say which. Other threads hold and release arena locks as usual, so
//! the call may wait for them, never the reverse. What remains: if skillprof is killed during
//! the call (milliseconds), the kernel detaches the thread mid-call and the host crashes on
//! the call's return. A call that does not return within [`CALL_TIMEOUT`] is abandoned: the
//! thread is put back, which is safe only if it holds no arena lock at that moment.

use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use object::{Object as _, ObjectSegment as _, ObjectSymbol as _};
use procfs::process::{MMapPath, Process};

use crate::record::host::Call;

/// x86_64 system calls a thread can block in while it holds none of malloc's locks: waiting
/// for I/O, a connection, a child or time. Not futex (a thread may wait there for an arena
/// lock) and none of the memory calls malloc makes while it holds one.
const SAFE_SYSCALLS: [(u64, &str); 14] = [
    (0, "read"),
    (7, "poll"),
    (23, "select"),
    (35, "nanosleep"),
    (43, "accept"),
    (61, "wait4"),
    (230, "clock_nanosleep"),
    (232, "epoll_wait"),
    (247, "waitid"),
    (270, "pselect6"),
    (271, "ppoll"),
    (281, "epoll_pwait"),
    (288, "accept4"),
    (441, "epoll_pwait2"),
];

/// The longest a call may take before it is abandoned.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Below the thread's stack pointer: past the red zone (128 bytes) its code may use.
const STACK_GAP: u64 = 512;

/// What one injected call did.
#[derive(Clone, Copy, Debug)]
pub struct Injected {
    pub call: Call,
    /// How long the thread was held: stopped, calling, and put back.
    pub held: Duration,
}

/// Calls `malloc_trim(0)` in one of `pid`'s threads that is blocked in a safe system call.
pub fn malloc_trim(pid: u32) -> Result<Injected> {
    let function = malloc_trim_address(pid)?;
    let mut refused = Vec::new();
    for thread in threads(pid)? {
        if !blocked_in(pid, thread).is_some_and(is_safe) {
            continue;
        }
        match call(thread, function)? {
            Ok(injected) => return Ok(injected),
            Err(why) => refused.push(format!("thread {thread}: {why}")),
        }
    }
    bail!(
        "no thread of process {pid} was blocked in a system call where malloc holds no lock \
         ({}), so malloc_trim was not called{}",
        SAFE_SYSCALLS.map(|(_, name)| name).join(", "),
        if refused.is_empty() {
            String::new()
        } else {
            format!(": {}", refused.join("; "))
        }
    )
}

fn is_safe(nr: u64) -> bool {
    SAFE_SYSCALLS.iter().any(|(safe, _)| *safe == nr)
}

fn threads(pid: u32) -> Result<Vec<u32>> {
    let tasks = Process::new(pid as i32)
        .and_then(|process| process.tasks())
        .with_context(|| format!("process {pid} is gone"))?;
    Ok(tasks.flatten().map(|task| task.tid as u32).collect())
}

/// The system call a thread is blocked in, from `/proc/PID/task/TID/syscall` (a first
/// look: the registers at the stop decide).
fn blocked_in(pid: u32, thread: u32) -> Option<u64> {
    let text = fs::read_to_string(format!("/proc/{pid}/task/{thread}/syscall")).ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// `malloc_trim`'s address in the host: the libc it maps, its load address, and the symbol.
fn malloc_trim_address(pid: u32) -> Result<u64> {
    let maps = Process::new(pid as i32)
        .and_then(|process| process.maps())
        .with_context(|| format!("reading process {pid}'s mappings"))?;
    let libc = maps
        .iter()
        .find(|map| {
            map.offset == 0
                && matches!(&map.pathname, MMapPath::Path(path)
                    if path.file_name().is_some_and(|name| name == "libc.so.6"))
        })
        .ok_or_else(|| {
            anyhow!("process {pid} maps no libc.so.6: trim by ptrace needs glibc's malloc_trim")
        })?;
    // map_files opens the very file mapped, whatever mount namespace the host is in.
    let file = PathBuf::from(format!(
        "/proc/{pid}/map_files/{:x}-{:x}",
        libc.address.0, libc.address.1
    ));
    let data = fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
    let elf = object::File::parse(&*data).context("the host's libc.so.6 is not an ELF file")?;
    let symbol = elf
        .dynamic_symbols()
        .find(|symbol| symbol.name() == Ok("malloc_trim"))
        .ok_or_else(|| anyhow!("the host's libc.so.6 exports no malloc_trim"))?;
    let lowest = elf
        .segments()
        .map(|segment| segment.address())
        .min()
        .unwrap_or(0);
    Ok(libc.address.0 - (lowest & !0xfff) + symbol.address())
}

/// Holds one thread under ptrace. Dropped, it puts the thread's registers back if a call
/// changed them (stopping it first if it still runs) and detaches, passing on a signal that
/// stopped it.
struct Held {
    thread: Pid,
    saved: Option<libc::user_regs_struct>,
    running: bool,
    /// A signal that stopped the thread before anything was done: delivered on detaching.
    pending: Option<Signal>,
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(saved) = self.saved {
            let stopped = !self.running
                || (ptrace::interrupt(self.thread).is_ok()
                    && wait_stop(self.thread, Instant::now() + CALL_TIMEOUT).is_ok());
            if stopped {
                let _ = ptrace::setregs(self.thread, saved);
            }
        }
        let _ = ptrace::detach(self.thread, self.pending);
    }
}

/// Stops `thread`, and calls `function(0)` in it if its registers show it blocked in a safe
/// system call. `Ok(Err(why))`: the thread was left alone, as it was.
fn call(thread: u32, function: u64) -> Result<Result<Injected, String>> {
    let started = Instant::now();
    let tid = Pid::from_raw(thread as i32);
    if let Err(error) = ptrace::seize(tid, ptrace::Options::empty()) {
        return Ok(Err(format!("ptrace could not seize it: {error}")));
    }
    let mut held = Held {
        thread: tid,
        saved: None,
        running: true,
        pending: None,
    };
    ptrace::interrupt(tid).context("PTRACE_INTERRUPT")?;
    let first = wait_stop(tid, Instant::now() + CALL_TIMEOUT)?;
    held.running = false;
    if let Some(signal) = first {
        // A signal came first: it goes on to the thread, which is left alone.
        held.pending = Some(signal);
        return Ok(Err(format!("{signal} arrived as it was stopped")));
    }
    let saved = ptrace::getregs(tid).context("PTRACE_GETREGS")?;
    if !is_safe(saved.orig_rax) {
        return Ok(Err(format!(
            "it had left its system call when stopped (orig_rax {})",
            saved.orig_rax as i64
        )));
    }
    let mut regs = saved;
    regs.rsp = ((saved.rsp - STACK_GAP) & !0xf) - 8;
    // The call returns to address 0 and faults there: the sign that it is done.
    ptrace::write(tid, regs.rsp as ptrace::AddressType, 0).context("writing a return address")?;
    regs.rip = function;
    regs.rdi = 0;
    regs.rax = 0;
    // Not in a system call: resuming must not restart the one it was stopped in.
    regs.orig_rax = u64::MAX;
    held.saved = Some(saved);
    ptrace::setregs(tid, regs).context("PTRACE_SETREGS")?;
    let deadline = Instant::now() + CALL_TIMEOUT;
    let mut deliver = None;
    loop {
        ptrace::cont(tid, deliver).context("PTRACE_CONT")?;
        held.running = true;
        let stopped = wait_stop(tid, deadline)?;
        held.running = false;
        match stopped {
            Some(Signal::SIGSEGV) => break,
            // The host's own signals reach it during the call, as during any other code.
            other => deliver = other,
        }
    }
    let done = ptrace::getregs(tid).context("PTRACE_GETREGS after the call")?;
    if done.rip != 0 {
        bail!(
            "malloc_trim faulted at {:#x} in thread {thread} instead of returning; the thread \
             was put back",
            done.rip
        );
    }
    // Put back as it was, the fault never delivered; the interrupted system call restarts
    // (or answers EINTR) as it would have after any signal.
    ptrace::setregs(tid, saved).context("putting the registers back")?;
    held.saved = None;
    drop(held);
    Ok(Ok(Injected {
        call: Call {
            thread,
            returned: done.rax,
        },
        held: started.elapsed(),
    }))
}

/// Waits for the thread's next stop, with the signal that stopped it (`None` for
/// PTRACE_INTERRUPT's stop and group stops).
fn wait_stop(thread: Pid, deadline: Instant) -> Result<Option<Signal>> {
    loop {
        match waitpid(thread, Some(WaitPidFlag::__WALL | WaitPidFlag::WNOHANG))
            .context("waitpid on the held thread")?
        {
            WaitStatus::StillAlive => {
                if Instant::now() > deadline {
                    bail!(
                        "thread {thread} did not stop within {} s; it was put back",
                        CALL_TIMEOUT.as_secs()
                    );
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            WaitStatus::PtraceEvent(..) => return Ok(None),
            WaitStatus::Stopped(_, signal) => return Ok(Some(signal)),
            other => bail!("thread {thread} ended while held: {other:?}"),
        }
    }
}
