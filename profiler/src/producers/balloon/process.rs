//! The balloon: a child process that holds anonymous memory, every page touched, and grows or
//! shrinks to the size skillprof asks for.
//!
//! A process of its own because the kernel frees a process's memory however it ends (SIGKILL
//! included), and because the OOM killer, should the experiment go too far, then takes the
//! balloon: it marks itself the preferred victim (oom_score_adj 1000), never the host or
//! skillprof. It also ends by itself when skillprof goes, as its command pipe closes.
//!
//! The memory is one reserved region: growing touches the next pages, shrinking hands the tail
//! back with MADV_DONTNEED. Huge pages are off for it, so the size moves page by page.
//!
//! On a machine with several zones, the tail is whatever zone the allocator took last, so the
//! balloon can also move one zone's free pages alone: it reads its own page frames from
//! /proc/self/pagemap (root sees them) and gives back pages of that zone only, punching holes
//! in the region, or takes from that zone only, growing until enough new pages are the zone's
//! and giving back the rest. The pagemap is also how it knows which pages it still holds: a
//! hole is neither present nor swapped.

use std::fs::File;
use std::io::{Read, Write};
use std::ops::Range;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;

use anyhow::{Context, Result, bail};

use crate::producers::system::fork::{self, Child, Helper, Session};
use crate::{ground::machine, ground::pidfd};

const BALLOON: Helper = Helper {
    name: "balloon process",
    comm: c"skp-balloon",
};

/// One process holding memory; see the module documentation.
pub struct Balloon {
    /// `None` once the child has been reaped (it died).
    child: Option<Child>,
    pid: u32,
    /// `None` once released: closing it ends the child.
    commands: Option<File>,
    /// Names this very process even after it is reaped and its pid reused.
    pidfd: Arc<OwnedFd>,
    replies: File,
    bytes: u64,
}

/// What the balloon is asked to do, in pages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Adjust {
    /// Hold this many pages: touch more at the tail, or give the tail back.
    To(u64),
    /// Give back up to `pages` of the pages it holds whose frames are in `pfns` (one zone's):
    /// that zone's free pages rise, and no other's. With `or_tail`, what the zone lacks is
    /// given from the tail.
    Give {
        pfns: Range<u64>,
        pages: u64,
        or_tail: bool,
    },
    /// Take `pages` from the zone spanning `pfns`: grow until that many new pages are the
    /// zone's, or `most` were touched, then give back the new pages that are not. The zones
    /// the allocator takes from before it falls back to this one get their pages back.
    Take {
        pfns: Range<u64>,
        pages: u64,
        most: u64,
    },
}

impl Adjust {
    /// The most pages the balloon touches for it.
    pub fn touches(&self, held_pages: u64) -> u64 {
        match self {
            Adjust::To(pages) => pages.saturating_sub(held_pages),
            Adjust::Give { .. } => 0,
            Adjust::Take { most, .. } => *most,
        }
    }

    /// The command's words on the pipe: the operation, then its arguments.
    fn words(&self) -> [u64; 5] {
        match self {
            Adjust::To(pages) => [0, *pages, 0, 0, 0],
            Adjust::Give {
                pfns,
                pages,
                or_tail,
            } => [1, pfns.start, pfns.end, *pages, u64::from(*or_tail)],
            Adjust::Take { pfns, pages, most } => [2, pfns.start, pfns.end, *pages, *most],
        }
    }
}

/// What the child needs, prepared before the fork.
struct Plan {
    commands: RawFd,
    replies: RawFd,
    capacity: usize,
    page: usize,
}

impl Balloon {
    /// Starts an empty balloon. Its region reserves twice the machine's memory, for the holes
    /// that giving back one zone's pages punches.
    pub fn spawn() -> Result<Balloon> {
        let page = procfs::page_size();
        // Twice the machine's memory: holes punched by `Give` and `Take` leave the region
        // longer than what it holds. Reserving costs nothing until touched.
        let capacity = 2 * machine::memory_kb()?.0 * 1024 / page * page;
        let (commands_in, commands) = fork::pipe()?;
        let (replies, replies_out) = fork::pipe()?;
        let plan = Plan {
            commands: commands_in.as_raw_fd(),
            replies: replies_out.as_raw_fd(),
            capacity: capacity as usize,
            page: page as usize,
        };
        let child = fork::spawn(
            &BALLOON,
            &[plan.commands, plan.replies],
            Session::Same,
            serve,
            &plan,
        )?;
        drop((commands_in, replies_out));
        let pidfd = pidfd::open(child.pid()).context("watching the balloon process")?;
        let mut balloon = Balloon {
            pidfd: Arc::new(pidfd),
            pid: child.pid(),
            child: Some(child),
            commands: Some(commands.into()),
            replies: replies.into(),
            bytes: 0,
        };
        // The child answers once its region is reserved.
        balloon.reply().context("starting the balloon")?;
        Ok(balloon)
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// A way to end the balloon from another thread without asking it: SIGKILL needs no
    /// memory, and the kernel frees the balloon's as the process exits.
    pub fn killer(&self) -> Killer {
        Killer(Arc::clone(&self.pidfd))
    }

    /// Grows (touching every new page) or shrinks to `bytes`, rounded down to whole pages and
    /// capped at the region's reservation; returns the size reached. Blocks while pages are touched
    /// (~1.5 GB/s here).
    pub fn resize(&mut self, bytes: u64) -> Result<u64> {
        self.adjust(&Adjust::To(bytes / procfs::page_size()))
    }

    /// Carries `adjust` out; returns the bytes held after it.
    pub fn adjust(&mut self, adjust: &Adjust) -> Result<u64> {
        let commands = self.commands.as_mut().context("the balloon was released")?;
        let mut command = [0u8; COMMAND_BYTES];
        for (bytes, word) in command
            .as_chunks_mut::<8>()
            .0
            .iter_mut()
            .zip(adjust.words())
        {
            *bytes = word.to_ne_bytes();
        }
        let sent = commands.write_all(&command);
        // The write fails only when the child has already exited (a broken pipe); its reply
        // pipe has then ended too, and `reply` says how it ended, which is what the caller
        // needs to know (killed by the watchdog, by the OOM killer, ...).
        let reached = self.reply()?;
        sent.context("sending the balloon its new size")?;
        Ok(reached)
    }

    fn reply(&mut self) -> Result<u64> {
        let mut answer = [0u8; 8];
        match self.replies.read_exact(&mut answer) {
            Ok(()) => {
                self.bytes = u64::from_ne_bytes(answer);
                Ok(self.bytes)
            }
            // The child is gone (or reserving its region failed): say how it ended.
            Err(_) => {
                self.bytes = 0;
                let Some(child) = self.child.take() else {
                    bail!("the balloon process (pid {}) is gone", self.pid);
                };
                let exit = child.wait()?;
                bail!(
                    "the balloon process (pid {}) {exit}{}",
                    self.pid,
                    if matches!(exit, fork::Exit::Signal(libc::SIGKILL)) {
                        ": most likely the OOM killer, which the balloon volunteers for \
                         (see `dmesg`); free memory fell further than the safety margin allows"
                    } else {
                        ""
                    }
                )
            }
        }
    }

    /// Ends the child and waits until it has exited, so its memory is back with the kernel
    /// when this returns.
    pub fn release(mut self) -> Result<()> {
        self.end()
    }

    fn end(&mut self) -> Result<()> {
        self.commands = None;
        self.bytes = 0;
        let Some(child) = self.child.take() else {
            return Ok(());
        };
        match child.wait()? {
            fork::Exit::Code(0) => Ok(()),
            exit => bail!("the balloon process {exit} while releasing"),
        }
    }
}

/// A balloon dropped without `release` (an error, a panic) still goes, and is reaped.
impl Drop for Balloon {
    fn drop(&mut self) {
        let _ = self.end();
    }
}

/// See [`Balloon::killer`].
pub struct Killer(Arc<OwnedFd>);

impl Killer {
    /// SIGKILLs the balloon; a balloon already gone is not an error.
    pub fn kill(&self) {
        // SAFETY: a pidfd we own and a signal number; no pointer is passed.
        unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.0.as_raw_fd(),
                libc::SIGKILL,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            );
        }
    }
}

const COMMAND_BYTES: usize = 5 * 8;

/// /proc/self/pagemap's entry bits.
const PRESENT: u64 = 1 << 63;
const SWAPPED: u64 = 1 << 62;
const PFN: u64 = (1 << 55) - 1;
/// Pagemap entries read at once: 4 KiB on the child's stack.
const CHUNK: usize = 512;

/// The child's region: `extent` pages from `base` were touched, `holes` of them given back.
struct Region {
    base: *mut u8,
    page: usize,
    /// Pages reserved.
    capacity: usize,
    extent: usize,
    holes: usize,
    /// Every page below it is held: where the search for holes to refill starts.
    first_hole: usize,
    /// /proc/self/pagemap, or -1 when it cannot be opened (then nothing is a hole).
    pagemap: i32,
}

impl Region {
    /// Reserves `bytes` of address space, nothing touched yet; `None` if the kernel refuses.
    fn reserve(bytes: usize, page: usize) -> Option<Region> {
        // SAFETY: a fresh private anonymous mapping; NORESERVE because it is touched only as
        // far as asked, and a 48 GiB reservation must not count against overcommit.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return None;
        }
        // SAFETY: advice on our own mapping.
        unsafe { libc::madvise(base, bytes, libc::MADV_NOHUGEPAGE) };
        Some(Region {
            base: base.cast(),
            page,
            capacity: bytes / page,
            extent: 0,
            holes: 0,
            first_hole: 0,
            // SAFETY: a static, NUL-terminated path.
            pagemap: unsafe { libc::open(c"/proc/self/pagemap".as_ptr(), libc::O_RDONLY) },
        })
    }

    fn held(&self) -> usize {
        self.extent - self.holes
    }

    /// Writes to page `index` (below the capacity), so that the kernel really allocates it.
    fn write_page(&self, index: usize) {
        debug_assert!(index < self.capacity);
        // SAFETY: within the mapping, which is readable and writable.
        unsafe { self.base.add(index * self.page).write_volatile(1) };
    }

    fn touch(&mut self, to: usize) {
        let to = to.min(self.capacity);
        for index in self.extent..to {
            self.write_page(index);
        }
        self.extent = self.extent.max(to);
    }

    fn release(&self, first: usize, count: usize) {
        release(self.base, self.page, first, count);
    }

    /// The pagemap entries of pages [first, first + out.len()), or `false`.
    fn entries(&self, first: usize, out: &mut [u64]) -> bool {
        if self.pagemap < 0 {
            return false;
        }
        let address = self.base as usize + first * self.page;
        let offset = (address / self.page * 8) as libc::off_t;
        let want = out.len() * 8;
        // SAFETY: `out` is valid for `want` bytes.
        let read = unsafe { libc::pread(self.pagemap, out.as_mut_ptr().cast(), want, offset) };
        read == want as isize
    }

    /// Visits the entries of pages [from, to), last first, while `visit` says to go on. An
    /// unreadable pagemap reads as every page held and present at frame 0.
    fn scan_back(&self, from: usize, to: usize, mut visit: impl FnMut(usize, u64) -> bool) {
        let mut buffer = [0u64; CHUNK];
        let mut end = to;
        while end > from {
            let start = end.saturating_sub(CHUNK).max(from);
            let entries = &mut buffer[..end - start];
            if !self.entries(start, entries) {
                entries.fill(PRESENT);
            }
            for (offset, entry) in entries.iter().enumerate().rev() {
                if !visit(start + offset, *entry) {
                    return;
                }
            }
            end = start;
        }
    }

    /// Touches `count` more pages: holes first, then the tail. Refilling holes bounds the
    /// region: a controller that gives one zone's pages back and grows again every reading
    /// would otherwise push the tail through the whole reservation within minutes.
    fn grow(&mut self, count: usize) {
        let mut left = count;
        let mut buffer = [0u64; CHUNK];
        let mut start = self.first_hole;
        while left > 0 && self.holes > 0 && start < self.extent {
            let end = (start + CHUNK).min(self.extent);
            let entries = &mut buffer[..end - start];
            if !self.entries(start, entries) {
                break;
            }
            for (offset, entry) in entries.iter().enumerate() {
                if left == 0 || self.holes == 0 {
                    break;
                }
                if entry & (PRESENT | SWAPPED) == 0 {
                    self.write_page(start + offset);
                    (left, self.holes) = (left - 1, self.holes - 1);
                }
                self.first_hole = start + offset + 1;
            }
            start = end;
        }
        if self.holes == 0 {
            self.first_hole = self.extent;
        }
        self.touch(self.extent + left);
    }

    /// Holds `target` pages.
    fn resize(&mut self, target: usize) {
        let held = self.held();
        if target > held {
            self.grow(target - held);
            return;
        }
        // Cut the tail back to where `held - target` held pages lie behind the cut.
        let (mut released, mut cut) = (0, self.extent);
        let need = held - target;
        self.scan_back(0, self.extent, |index, entry| {
            if released == need {
                return false;
            }
            cut = index;
            released += usize::from(entry & (PRESENT | SWAPPED) != 0);
            true
        });
        self.release(cut, self.extent - cut);
        self.holes -= (self.extent - cut) - released;
        self.extent = cut;
        self.first_hole = self.first_hole.min(cut);
    }

    /// Gives back up to `count` present pages whose frames are in `pfns` (`inside`), or are
    /// not (`!inside`), among pages [from, to); returns how many.
    fn give(
        &mut self,
        from: usize,
        to: usize,
        pfns: &Range<u64>,
        inside: bool,
        count: usize,
    ) -> usize {
        let (base, page) = (self.base, self.page);
        // Consecutive pages go back in one call; the scan runs downwards, so a run grows at
        // its front. Released as the scan goes, since the child may not allocate a list.
        let (mut given, mut run) = (0, None::<(usize, usize)>);
        self.scan_back(from, to, |index, entry| {
            if given == count {
                return false;
            }
            if entry & PRESENT != 0 && pfns.contains(&(entry & PFN)) == inside {
                given += 1;
                run = match run {
                    Some((first, length)) if first == index + 1 => Some((index, length + 1)),
                    other => {
                        if let Some((first, length)) = other {
                            release(base, page, first, length);
                        }
                        Some((index, 1))
                    }
                };
            }
            true
        });
        if let Some((first, length)) = run {
            release(base, page, first, length);
            // The scan ran downwards: the last run released is the lowest.
            self.first_hole = self.first_hole.min(first);
        }
        self.holes += given;
        given
    }

    /// Grows until `count` new pages are in `pfns`, or `most` were touched, then gives back
    /// the new pages that are not.
    fn take(&mut self, pfns: &Range<u64>, count: usize, most: usize) {
        let start = self.extent;
        let mut taken = 0;
        let mut buffer = [0u64; CHUNK];
        while taken < count && self.extent - start < most && self.extent < self.capacity {
            let first = self.extent;
            let chunk = CHUNK.min(most - (first - start)).min(count - taken);
            self.touch(first + chunk);
            let entries = &mut buffer[..self.extent - first];
            if !self.entries(first, entries) {
                break;
            }
            taken += entries
                .iter()
                .filter(|entry| **entry & PRESENT != 0 && pfns.contains(&(**entry & PFN)))
                .count();
        }
        self.give(start, self.extent, pfns, false, usize::MAX);
    }
}

/// Gives pages [first, first + count) of the region at `base` back to the kernel.
fn release(base: *mut u8, page: usize, first: usize, count: usize) {
    if count > 0 {
        // SAFETY: pages of the balloon's own mapping; they go back to the kernel now.
        unsafe {
            libc::madvise(
                base.add(first * page).cast(),
                count * page,
                libc::MADV_DONTNEED,
            );
        }
    }
}

/// The child: reserve the region, then carry out commands until the command pipe closes.
fn serve(plan: &Plan) -> i32 {
    volunteer_for_the_oom_killer();
    let Some(mut region) = Region::reserve(plan.capacity, plan.page) else {
        return 2;
    };
    loop {
        let held = (region.held() * plan.page) as u64;
        if !fork::write_all(plan.replies, &held.to_ne_bytes()) {
            return 0;
        }
        let mut command = [0u8; COMMAND_BYTES];
        if !fork::read_exact(plan.commands, &mut command) {
            return 0;
        }
        let mut words = [0u64; 5];
        for (word, bytes) in words.iter_mut().zip(command.as_chunks::<8>().0) {
            *word = u64::from_ne_bytes(*bytes);
        }
        let [operation, a, b, c, d] = words;
        let size = |pages: u64| usize::try_from(pages).unwrap_or(usize::MAX);
        match operation {
            0 => region.resize(size(a).min(region.capacity)),
            1 => {
                let given = region.give(0, region.extent, &(a..b), true, size(c));
                if d != 0 {
                    region.resize(region.held().saturating_sub(size(c) - given));
                }
            }
            _ => region.take(&(a..b), size(c), size(d)),
        }
    }
}

/// Raising one's own oom_score_adj needs no privilege (lowering it would need
/// CAP_SYS_RESOURCE, which skillprof does not have).
fn volunteer_for_the_oom_killer() {
    let value = b"1000";
    // SAFETY: open/write/close of a proc file with static, NUL-terminated names.
    unsafe {
        let fd = libc::open(c"/proc/self/oom_score_adj".as_ptr(), libc::O_WRONLY);
        if fd >= 0 {
            fork::write_all(fd, value);
            libc::close(fd);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rss_kb(pid: u32) -> u64 {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap()
            .lines()
            .find_map(|line| line.strip_prefix("RssAnon:"))
            .and_then(|kb| kb.split_whitespace().next()?.parse().ok())
            .unwrap()
    }

    #[test]
    fn grows_shrinks_and_dies_by_its_killer() {
        let mut balloon = Balloon::spawn().unwrap();
        // What the child shares with the test process since the fork.
        let inherited = rss_kb(balloon.pid());
        assert_eq!(balloon.resize(8 << 20).unwrap(), 8 << 20);
        assert_eq!(balloon.resize((4 << 20) + 100).unwrap(), 4 << 20);
        let held = rss_kb(balloon.pid()) - inherited;
        assert!(
            (4096..5120).contains(&held),
            "{held} kB held for a 4 MiB balloon"
        );
        balloon.killer().kill();
        // Wait for the exit, so the command is sent into a broken pipe: the order a watchdog
        // kill usually takes, and the one that must still say how the balloon ended.
        let mut exited = libc::pollfd {
            fd: balloon.pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd on a pidfd we own.
        assert_eq!(unsafe { libc::poll(&mut exited, 1, 10_000) }, 1);
        let error = balloon.resize(1 << 20).unwrap_err().to_string();
        assert!(error.contains("killed by signal 9"), "{error}");
        balloon.release().unwrap();
    }

    /// Growing refills the holes that giving pages back punched before it extends the tail,
    /// so a balloon that gives and grows every reading keeps within its reservation. Frames
    /// read as 0 without root, and 0..u64::MAX holds every frame either way.
    #[test]
    fn growing_refills_holes_before_the_tail() {
        let page = procfs::page_size() as usize;
        let mut region = Region::reserve(4096 * page, page).unwrap();
        region.resize(1000);
        for _ in 0..10 {
            assert_eq!(
                region.give(0, region.extent, &(0..u64::MAX), true, 300),
                300
            );
            region.resize(1000);
        }
        assert_eq!(
            (region.extent, region.holes, region.held()),
            (1000, 0, 1000)
        );
        assert_eq!(region.give(0, 500, &(0..u64::MAX), true, 100), 100);
        region.resize(1200);
        assert_eq!(
            (region.extent, region.holes, region.held()),
            (1200, 0, 1200)
        );
        // Holes above the cut go with the tail; the ones below are refilled.
        assert_eq!(region.give(0, 1200, &(0..u64::MAX), true, 400), 400);
        region.resize(600);
        region.resize(900);
        assert_eq!((region.holes, region.held()), (0, 900));
        assert!(region.extent <= 1200, "{} pages touched", region.extent);
    }

    /// Root reads its page frames; the largest zone here is Normal, where the allocator takes
    /// first.
    #[test]
    fn gives_and_takes_one_zones_pages_and_counts_its_holes() {
        assert!(
            crate::producers::system::running_as_root(),
            "the balloon reads its page frames from /proc/self/pagemap, which needs root: run \
             the tests as root (sudo scripts/test.sh)"
        );
        let zones =
            crate::producers::sample::zoneinfo::read(std::path::Path::new("/proc")).unwrap();
        let normal = zones
            .iter()
            .filter(|zone| zone.populated())
            .max_by_key(|zone| zone.managed_pages)
            .unwrap()
            .pfns();
        let page = procfs::page_size();
        let mut balloon = Balloon::spawn().unwrap();
        let inherited = rss_kb(balloon.pid());
        assert_eq!(balloon.resize(2048 * page).unwrap(), 2048 * page);
        // Frames in no zone: nothing to give, and with `or_tail` the tail gives instead.
        let nowhere = |pages, or_tail| Adjust::Give {
            pfns: 0..0,
            pages,
            or_tail,
        };
        assert_eq!(balloon.adjust(&nowhere(100, false)).unwrap(), 2048 * page);
        assert_eq!(balloon.adjust(&nowhere(48, true)).unwrap(), 2000 * page);
        // Everything is somewhere: 100 holes punched, and cutting the tail counts them.
        let everywhere = Adjust::Give {
            pfns: 0..u64::MAX,
            pages: 100,
            or_tail: false,
        };
        assert_eq!(balloon.adjust(&everywhere).unwrap(), 1900 * page);
        assert_eq!(balloon.resize(1000 * page).unwrap(), 1000 * page);
        let take = |pfns, most| Adjust::Take {
            pfns,
            pages: 256,
            most,
        };
        assert_eq!(balloon.adjust(&take(normal, 4096)).unwrap(), 1256 * page);
        // A zone it never gets: it touches `most` pages and gives every one back.
        assert_eq!(balloon.adjust(&take(0..0, 300)).unwrap(), 1256 * page);
        // What it says it holds is what the kernel counts.
        let held = rss_kb(balloon.pid()) - inherited;
        assert!(
            (1256 * page / 1024..1256 * page / 1024 + 256).contains(&held),
            "{held} kB held for 1,256 pages"
        );
        assert_eq!(balloon.resize(0).unwrap(), 0);
        balloon.release().unwrap();
    }
}
