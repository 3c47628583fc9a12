//! What holds a host's resident memory, from its `/proc/PID/smaps`: each mapping's `Rss`,
//! put in one of five parts by what the mapping is. Any wasmtime host is read the same way,
//! from the layout wasmtime and glibc give their mappings and from what glibc writes at the
//! start of each of its heaps:
//! - **heap**: the allocator's: the brk heap, malloc's thread arenas and its large chunks
//!   mapped on their own. A thread arena is a chain of heaps, each in a 64 MiB-aligned
//!   window: an open part (rw) at the window's start and an inaccessible rest. glibc writes a
//!   header (`heap_info`) at the window's start, which the host's memory (`/proc/PID/mem`)
//!   gives back: its arena, the heap before it, and how much of the window is open, which
//!   must be the open mapping's length. That evidence holds however many arenas there are;
//!   on a 16-core machine there can be 128, adjacent, and their layout alone (open parts
//!   beside inaccessible ones, gigabytes of them) is what a wasm memory's looks like. Where
//!   the memory cannot be read, the layout of a heap (an open part starting on a 64 MiB
//!   boundary, inaccessible up to the next) stands in, and the composition says so
//!   ([`Composition::arenas`] is `None`).
//! - **wasm**: linear memories. wasmtime reserves each one (4 GiB and guard regions) as one
//!   inaccessible anonymous region and opens the part in use; an open part next to an
//!   inaccessible region larger than anything malloc reserves ([`WASM_GUARD`], outside
//!   malloc's heap windows) is wasm memory. The copy-on-write images that initialise
//!   memories (`memfd:wasm-memory-image`) count here too.
//! - **code**: anonymous executable mappings (compiled code) and anonymous read-only ones
//!   (the read-only data wasmtime publishes beside it).
//! - **stacks**: the main stack, and anonymous read-write mappings right above a one-page
//!   inaccessible guard: thread stacks (glibc's layout) and wasmtime's fiber stacks.
//! - **files**: mappings of files: the binary, its libraries (and the vdso).
//!
//! Reading smaps walks every mapping under the host's mmap lock, so the runner reads it at
//! entry boundaries only, and reports how long it took.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Instant;

use procfs::FromRead;
use procfs::process::{MMPermissions, MMapPath, MemoryMap, MemoryMaps, StatM};

use crate::record::composition::{Composition, EntryComposition, Holder};

/// glibc's `HEAP_MAX_SIZE` on 64-bit: each heap of a thread arena is reserved as one window
/// of this size, aligned to it (so that a chunk finds its heap by masking its address).
const HEAP_WINDOW: u64 = 64 << 20;
/// An inaccessible region at least this large, outside malloc's heap windows, is a wasm
/// memory's reservation or guard: malloc never reserves more than one heap window at a time
/// (two while it aligns one), and thread stacks' guards are a page.
const WASM_GUARD: u64 = 2 * HEAP_WINDOW;
/// A stack's guard: one inaccessible page right below it (glibc's thread stacks and
/// wasmtime's fiber stacks both have one).
const GUARD: u64 = 4096;
const PAGE: u64 = 4096;
/// glibc's `heap_info` header lies at the start of its window; its arena (`ar_ptr`) follows
/// right after it in the first heap of an arena, so within this many bytes of the start.
const HEADER_SPAN: u64 = PAGE;

impl EntryComposition {
    /// Each part's growth over the entry, in KiB.
    pub fn growth(&self) -> [(Holder, i64); 5] {
        let (before, after) = (self.before.parts(), self.after.parts());
        std::array::from_fn(|i| (after[i].0, after[i].1 as i64 - before[i].1 as i64))
    }
}

/// The first words of glibc's `heap_info` (malloc/arena.c, the same order since glibc 2.26):
/// the heap's arena, the heap before it in the arena's chain, its size and how much of its
/// window is open (mprotected read-write).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeapHeader {
    pub arena: u64,
    pub prev: u64,
    pub size: u64,
    pub open: u64,
}

impl HeapHeader {
    fn from_bytes(bytes: &[u8; 32]) -> HeapHeader {
        let word = |i: usize| u64::from_ne_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap());
        HeapHeader {
            arena: word(0),
            prev: word(1),
            size: word(2),
            open: word(3),
        }
    }

    /// Whether this header describes a heap whose window starts at `window` and whose open
    /// mapping ends at `open_end`, and if so, which arena it belongs to (the window of the
    /// arena's first heap). Wasm memory or any other data at a 64 MiB boundary passes all of
    /// these only by a coincidence of five words.
    fn arena_of(&self, window: u64, open_end: u64) -> Option<u64> {
        let sizes = 0 < self.size
            && self.size <= self.open
            && self.open <= HEAP_WINDOW
            && self.open.is_multiple_of(PAGE);
        // The open part is the mapping, up to the window's end when the heap is full (then a
        // neighbour's open part may continue the same mapping).
        let mapped = window + self.open == open_end
            || self.open == HEAP_WINDOW && open_end >= window + HEAP_WINDOW;
        let offset = |address: u64| address % HEAP_WINDOW;
        let arena = if self.prev == 0 {
            // The arena's first heap: its malloc_state follows the header.
            (self.arena > window && self.arena < window + HEADER_SPAN).then_some(window)
        } else {
            let first = self.arena - offset(self.arena);
            (offset(self.prev) == 0
                && self.prev != window
                && offset(self.arena) < HEADER_SPAN
                && first != window)
                .then_some(first)
        };
        if sizes && mapped { arena } else { None }
    }
}

/// Reads a heap header at an address of the host's memory; `None` where it cannot be read.
pub trait HeaderReader {
    fn header(&self, address: u64) -> Option<HeapHeader>;
}

/// The host's memory through `/proc/PID/mem` (root, or the host's own user with ptrace
/// access).
struct ProcMem(File);

impl HeaderReader for ProcMem {
    fn header(&self, address: u64) -> Option<HeapHeader> {
        let mut bytes = [0u8; 32];
        self.0.read_exact_at(&mut bytes, address).ok()?;
        Some(HeapHeader::from_bytes(&bytes))
    }
}

/// A host's smaps and memory, opened once and read again at will. The kernel checks who may
/// read them when they are opened, so a watch that gives up its privileges afterwards
/// (`--user`) still reads them.
pub struct HostFiles {
    smaps: File,
    statm: Option<File>,
    memory: Option<ProcMem>,
}

impl HostFiles {
    /// `None` when the host is gone or its smaps cannot be opened.
    pub fn open(proc_root: &Path, pid: u32) -> Option<HostFiles> {
        let dir = proc_root.join(pid.to_string());
        Some(HostFiles {
            smaps: File::open(dir.join("smaps")).ok()?,
            statm: File::open(dir.join("statm")).ok(),
            memory: File::open(dir.join("mem")).ok().map(ProcMem),
        })
    }

    /// The composition now; `None` once the host is gone.
    pub fn read(&self) -> Option<Composition> {
        let started = Instant::now();
        (&self.smaps).seek(SeekFrom::Start(0)).ok()?;
        let maps = MemoryMaps::from_read(&self.smaps).ok()?;
        // A process that has exited reads as no mappings at all.
        if maps.0.is_empty() {
            return None;
        }
        let memory = self.memory.as_ref().map(|m| m as &dyn HeaderReader);
        let mut composition = Composition::of(&maps.0, memory);
        composition.statm_rss_kb = self.statm.as_ref().and_then(|mut statm| {
            statm.seek(SeekFrom::Start(0)).ok()?;
            let resident = StatM::from_read(statm).ok()?.resident;
            Some(resident * procfs::page_size() / 1024)
        });
        composition.read_us = started.elapsed().as_micros() as u64;
        Some(composition)
    }
}

impl Composition {
    /// `None` when the host is gone or its smaps cannot be read.
    pub fn read(proc_root: &Path, pid: u32) -> Option<Composition> {
        HostFiles::open(proc_root, pid)?.read()
    }

    /// `memory`: the host's memory, for malloc's heap headers; `None` when it cannot be read.
    pub fn of(maps: &[MemoryMap], memory: Option<&dyn HeaderReader>) -> Composition {
        let (parts, arenas) = classify(maps, memory);
        let mut composition = Composition {
            mappings: maps.len() as u64,
            arenas,
            ..Composition::default()
        };
        for (map, part) in maps.iter().zip(parts) {
            let kb = map.extension.map.get("Rss").copied().unwrap_or(0) / 1024;
            composition.rss_kb += kb;
            *composition.kb_mut(part) += kb;
        }
        composition
    }
}

fn is_wasm_image(map: &MemoryMap) -> bool {
    matches!(&map.pathname, MMapPath::Path(path)
        if path.to_string_lossy().contains("memfd:wasm-memory-image"))
}

fn anonymous(map: &MemoryMap) -> bool {
    matches!(map.pathname, MMapPath::Anonymous)
}

fn inaccessible(map: &MemoryMap) -> bool {
    !map.perms
        .intersects(MMPermissions::READ | MMPermissions::WRITE | MMPermissions::EXECUTE)
}

fn read_write(map: &MemoryMap) -> bool {
    map.perms
        .contains(MMPermissions::READ | MMPermissions::WRITE)
        && !map.perms.contains(MMPermissions::EXECUTE)
}

fn size(map: &MemoryMap) -> u64 {
    map.address.1 - map.address.0
}

/// Adjacent: `upper` starts where `lower` ends.
fn adjacent(lower: &MemoryMap, upper: &MemoryMap) -> bool {
    lower.address.1 == upper.address.0
}

/// malloc's heaps among `maps`: the index of each open mapping that holds one, and the heap
/// windows. With `memory`, a heap is a window whose header says so and matches the mapping;
/// without, an open mapping that starts a window and is inaccessible up to its end.
struct Heaps {
    mappings: BTreeSet<usize>,
    windows: Vec<u64>,
    /// Distinct arenas; `None` where a header could not be read.
    arenas: Option<BTreeSet<u64>>,
}

fn find_heaps(maps: &[MemoryMap], memory: Option<&dyn HeaderReader>) -> Heaps {
    let mut heaps = Heaps {
        mappings: BTreeSet::new(),
        windows: Vec::new(),
        arenas: memory.map(|_| BTreeSet::new()),
    };
    for (index, map) in maps.iter().enumerate() {
        if !anonymous(map) || !read_write(map) {
            continue;
        }
        let (start, end) = map.address;
        let mut window = start.next_multiple_of(HEAP_WINDOW);
        while window < end {
            let header = memory.and_then(|memory| memory.header(window));
            let heap = match header {
                Some(header) => header.arena_of(window, end).map(Some),
                None => {
                    // Unreadable: the layout is all the evidence there is.
                    heaps.arenas = None;
                    heap_by_layout(maps, index, window).then_some(None)
                }
            };
            if let Some(arena) = heap {
                heaps.mappings.insert(index);
                heaps.windows.push(window);
                if let (Some(arenas), Some(arena)) = (&mut heaps.arenas, arena) {
                    arenas.insert(arena);
                }
            }
            window += HEAP_WINDOW;
        }
    }
    heaps
}

/// A heap as its layout shows it: the open mapping starts the window and ends inside it,
/// inaccessible from there to the window's end (or it fills the window). An inaccessible
/// rest that goes on past the window by a wasm guard's size is a wasm memory's instead (one
/// whose pre-guard ends on a window boundary): the layout cannot tell a heap directly below
/// a reservation, so such a heap counts as wasm here; the headers tell them apart.
fn heap_by_layout(maps: &[MemoryMap], index: usize, window: u64) -> bool {
    let map = &maps[index];
    let window_end = window + HEAP_WINDOW;
    if map.address.0 != window || map.address.1 > window_end {
        return false;
    }
    map.address.1 == window_end
        || maps.get(index + 1).is_some_and(|rest| {
            adjacent(map, rest)
                && inaccessible(rest)
                && rest.address.1 >= window_end
                && rest.address.1 - window_end < WASM_GUARD
        })
}

/// How much of `map` lies outside every heap window.
fn outside_heaps(map: &MemoryMap, windows: &[u64]) -> u64 {
    let (start, end) = map.address;
    let inside: u64 = windows
        .iter()
        .map(|&window| {
            let (low, high) = (start.max(window), end.min(window + HEAP_WINDOW));
            high.saturating_sub(low)
        })
        .sum();
    size(map).saturating_sub(inside)
}

/// Each mapping's part (`maps` in address order, as smaps lists them), and the arenas found.
fn classify(maps: &[MemoryMap], memory: Option<&dyn HeaderReader>) -> (Vec<Holder>, Option<u64>) {
    let heaps = find_heaps(maps, memory);
    // Inaccessible regions too large for malloc: a wasm memory's reservation or guards.
    let wasm_guard: Vec<bool> = maps
        .iter()
        .map(|map| {
            anonymous(map) && inaccessible(map) && outside_heaps(map, &heaps.windows) >= WASM_GUARD
        })
        .collect();
    // Open parts of a reservation: runs of adjacent accessible anonymous mappings (and
    // memory images) with such a region right below or right above the run.
    let open_in_reservation =
        |map: &MemoryMap| (anonymous(map) && !inaccessible(map)) || is_wasm_image(map);
    let mut in_wasm = vec![false; maps.len()];
    let mut start = 0;
    while start < maps.len() {
        if !open_in_reservation(&maps[start]) || heaps.mappings.contains(&start) {
            start += 1;
            continue;
        }
        let mut end = start + 1;
        while end < maps.len()
            && open_in_reservation(&maps[end])
            && !heaps.mappings.contains(&end)
            && adjacent(&maps[end - 1], &maps[end])
        {
            end += 1;
        }
        let below = start
            .checked_sub(1)
            .is_some_and(|i| wasm_guard[i] && adjacent(&maps[i], &maps[start]));
        let above = end < maps.len() && wasm_guard[end] && adjacent(&maps[end - 1], &maps[end]);
        if below || above {
            in_wasm[start..end].fill(true);
        }
        start = end;
    }
    let parts = maps
        .iter()
        .enumerate()
        .map(|(i, map)| {
            let below = i
                .checked_sub(1)
                .map(|j| &maps[j])
                .filter(|b| adjacent(b, map));
            part_of(map, heaps.mappings.contains(&i), in_wasm[i], below)
        })
        .collect();
    (parts, heaps.arenas.map(|arenas| arenas.len() as u64))
}

fn part_of(map: &MemoryMap, heap: bool, in_wasm: bool, below: Option<&MemoryMap>) -> Holder {
    match &map.pathname {
        MMapPath::Stack | MMapPath::TStack(_) => Holder::Stacks,
        MMapPath::Heap => Holder::Heap,
        _ if is_wasm_image(map) => Holder::Wasm,
        MMapPath::Anonymous if map.perms.contains(MMPermissions::EXECUTE) => Holder::Code,
        MMapPath::Anonymous
            if map.perms.contains(MMPermissions::READ)
                && !map.perms.contains(MMPermissions::WRITE) =>
        {
            Holder::Code
        }
        MMapPath::Anonymous if heap => Holder::Heap,
        MMapPath::Anonymous
            if below.is_some_and(|guard| inaccessible(guard) && size(guard) == GUARD) =>
        {
            Holder::Stacks
        }
        MMapPath::Anonymous if in_wasm => Holder::Wasm,
        MMapPath::Anonymous | MMapPath::Other(_) => Holder::Heap,
        MMapPath::Path(_)
        | MMapPath::Vdso
        | MMapPath::Vvar
        | MMapPath::Vsyscall
        | MMapPath::Vsys(_)
        | MMapPath::Rollup => Holder::Files,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    fn map(start: u64, len: u64, perms: &str, path: &str, rss: u64) -> MemoryMap {
        let mut extension = procfs::process::MMapExtension::default();
        extension.map.insert("Rss".into(), rss);
        MemoryMap {
            address: (start, start + len),
            perms: perms.parse().unwrap(),
            offset: 0,
            dev: (0, 0),
            inode: 0,
            pathname: MMapPath::from(path).unwrap(),
            extension,
        }
    }

    /// A host's memory holding the given headers; any other address reads as zeros.
    struct Headers(HashMap<u64, HeapHeader>);

    impl HeaderReader for Headers {
        fn header(&self, address: u64) -> Option<HeapHeader> {
            Some(self.0.get(&address).copied().unwrap_or(HeapHeader {
                arena: 0,
                prev: 0,
                size: 0,
                open: 0,
            }))
        }
    }

    /// glibc's first heap of an arena at `window`, `open` bytes of it open.
    fn first_heap(window: u64, open: u64) -> (u64, HeapHeader) {
        let header = HeapHeader {
            arena: window + 48,
            prev: 0,
            size: open,
            open,
        };
        (window, header)
    }

    fn kib(bytes: u64) -> u64 {
        bytes / 1024
    }

    fn every_layout() -> Vec<MemoryMap> {
        vec![
            map(0x1000_0000, 2 * MIB, "r-xp", "/usr/bin/skillhost", 2 * MIB),
            map(0x2000_0000, 10 * MIB, "rw-p", "[heap]", 10 * MIB),
            // A wasm memory: guard, 1 MiB open, the rest of 4 GiB reserved, with its image.
            map(0x1_0000_0000, 32 * MIB, "---p", "", 0),
            map(0x1_0200_0000, MIB, "rw-p", "", MIB),
            map(
                0x1_0210_0000,
                MIB,
                "r--p",
                "/memfd:wasm-memory-image (deleted)",
                8 * PAGE,
            ),
            map(0x1_0220_0000, 4 * GIB, "---p", "", 0),
            // A malloc arena: 64 MiB reserved, 30 MiB open.
            map(0x2_0000_0000, 30 * MIB, "rw-p", "", 30 * MIB),
            map(0x2_01e0_0000, 34 * MIB, "---p", "", 0),
            // Compiled code and its read-only data.
            map(0x3_0000_0000, 4 * MIB, "r-xp", "", 4 * MIB),
            map(0x3_0040_0000, MIB, "r--p", "", MIB),
            // A full arena's last page, and the next arena right above it.
            map(0x3_03ff_f000, PAGE, "---p", "", 0),
            map(0x3_0400_0000, MIB, "rw-p", "", MIB),
            map(0x3_0410_0000, 63 * MIB, "---p", "", 0),
            // A thread's stack above its guard page.
            map(0x4_0000_0000, PAGE, "---p", "", 0),
            map(0x4_0000_1000, 2 * MIB, "rw-p", "", 64 * PAGE),
            map(0x7fff_0000_0000, 132 * PAGE, "rw-p", "[stack]", 20 * PAGE),
        ]
    }

    #[test]
    fn each_layout_finds_its_part_and_the_parts_sum_to_rss() {
        let maps = every_layout();
        let headers = Headers(HashMap::from([
            first_heap(0x2_0000_0000, 30 * MIB),
            first_heap(0x3_0400_0000, MIB),
        ]));
        let read = Composition::of(&maps, Some(&headers));
        let by_layout = Composition::of(&maps, None);
        for c in [read, by_layout] {
            assert_eq!(c.files_kb, kib(2 * MIB));
            assert_eq!(c.heap_kb, kib(10 * MIB + 30 * MIB + MIB));
            assert_eq!(c.wasm_kb, kib(MIB + 8 * PAGE));
            assert_eq!(c.code_kb, kib(5 * MIB));
            assert_eq!(c.stacks_kb, kib(84 * PAGE));
            assert_eq!(c.parts().iter().map(|(_, kb)| kb).sum::<u64>(), c.rss_kb);
            assert_eq!(c.mappings, 16);
        }
        assert_eq!(read.arenas, Some(2));
        assert_eq!(by_layout.arenas, None);
    }

    /// A 16-core machine's arenas: 128 heaps of 64 MiB, adjacent, open parts beside
    /// inaccessible ones, 8 GiB of them: a wasm memory's layout, many times over. None of it
    /// is wasm memory; the wasm memory beside them still is.
    #[test]
    fn many_adjacent_arenas_are_heap_and_not_a_wasm_reservation() {
        let base = 0x10_0000_0000;
        let mut maps = Vec::new();
        let mut headers = HashMap::new();
        for i in 0..128 {
            let window = base + i * HEAP_WINDOW;
            let open = (1 + i % 60) * MIB;
            maps.push(map(window, open, "rw-p", "", open));
            maps.push(map(window + open, HEAP_WINDOW - open, "---p", "", 0));
            // Every other arena has a second heap, chained to its first.
            let header = if i % 2 == 1 {
                HeapHeader {
                    arena: window - HEAP_WINDOW + 48,
                    prev: window - HEAP_WINDOW,
                    size: open,
                    open,
                }
            } else {
                first_heap(window, open).1
            };
            headers.insert(window, header);
        }
        let heap_rss: u64 = maps.iter().map(|m| m.extension.map["Rss"]).sum();
        // A wasm memory right below the arenas: its reservation's top joins the first heap.
        let wasm = base - 4 * GIB - 64 * MIB;
        maps.insert(0, map(wasm, 32 * MIB, "---p", "", 0));
        maps.insert(1, map(wasm + 32 * MIB, 3 * MIB, "rw-p", "", 3 * MIB));
        maps.insert(
            2,
            map(wasm + 35 * MIB, base - wasm - 35 * MIB, "---p", "", 0),
        );
        let read = Composition::of(&maps, Some(&Headers(headers)));
        assert_eq!(read.heap_kb, kib(heap_rss));
        assert_eq!(read.wasm_kb, kib(3 * MIB));
        assert_eq!(read.arenas, Some(64));
        // Without the headers, the layout of each heap says the same.
        let by_layout = Composition::of(&maps, None);
        assert_eq!(
            (by_layout.heap_kb, by_layout.wasm_kb),
            (read.heap_kb, read.wasm_kb)
        );
    }

    /// Data in a wasm memory that happens to start a 64 MiB window is not taken for a heap:
    /// its words do not describe the mapping they are in.
    #[test]
    fn a_wasm_memory_on_a_heap_boundary_stays_wasm() {
        let window = 0x20_0000_0000;
        let maps = [
            map(window - 2 * GIB, 2 * GIB, "---p", "", 0),
            map(window, 8 * MIB, "rw-p", "", 8 * MIB),
            map(window + 8 * MIB, 2 * GIB, "---p", "", 0),
        ];
        let garbage = HeapHeader {
            arena: 7,
            prev: 0,
            size: 8 * MIB,
            open: 8 * MIB,
        };
        let c = Composition::of(&maps, Some(&Headers(HashMap::from([(window, garbage)]))));
        assert_eq!((c.wasm_kb, c.heap_kb, c.arenas), (kib(8 * MIB), 0, Some(0)));
    }

    #[test]
    fn reads_this_process_and_the_parts_sum_to_its_rss() {
        let c = Composition::read(Path::new("/proc"), std::process::id()).unwrap();
        assert!(c.rss_kb > 0 && c.files_kb > 0 && c.stacks_kb > 0, "{c:?}");
        assert_eq!(c.parts().iter().map(|(_, kb)| kb).sum::<u64>(), c.rss_kb);
        assert!(c.arenas.is_some(), "a process reads its own memory");
    }
}
