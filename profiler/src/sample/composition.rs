//! What holds a host's resident memory, from its `/proc/PID/smaps`: each mapping's `Rss`,
//! put in one of five parts by what the mapping is. Any wasmtime host is read the same way,
//! from the layout wasmtime and glibc give their mappings:
//! - **wasm**: linear memories. wasmtime reserves each one (4 GiB and guard regions) as one
//!   inaccessible anonymous region and opens the part in use; a run of adjacent anonymous
//!   mappings of at least [`RESERVATION`] with an inaccessible one among them is such a
//!   reservation, and its accessible parts are wasm memory. The copy-on-write images that
//!   initialise memories (`memfd:wasm-memory-image`) count here too.
//! - **code**: anonymous executable mappings (compiled code) and anonymous read-only ones
//!   (the read-only data wasmtime publishes beside it).
//! - **stacks**: the main stack, and anonymous read-write mappings right above a one-page
//!   inaccessible guard: thread stacks (glibc's layout) and wasmtime's fiber stacks.
//! - **files**: mappings of files: the binary, its libraries (and the vdso).
//! - **heap**: the rest, the allocator's: the brk heap, malloc's arenas (64 MiB reservations)
//!   and its large chunks mapped on their own.
//!
//! Reading smaps walks every mapping under the host's mmap lock, so the runner reads it at
//! entry boundaries only, and reports how long it took.

use std::path::Path;
use std::time::Instant;

use procfs::process::{MMPermissions, MMapPath, MemoryMap, Process};
use serde::{Deserialize, Serialize};

use crate::record::Row;

/// A run of adjacent anonymous mappings at least this large, with an inaccessible part, is a
/// wasm memory's reservation; glibc's arenas reserve 64 MiB.
const RESERVATION: u64 = 1 << 30;
/// A stack's guard: one inaccessible page right below it (glibc's thread stacks and
/// wasmtime's fiber stacks both have one).
const GUARD: u64 = 4096;
/// glibc aligns each malloc arena to its 64 MiB reservation. An arena's open part can sit
/// right above the one-page remainder of a full arena below it, like a stack above its guard;
/// a stack is never aligned so.
const ARENA_ALIGN: u64 = 64 << 20;

/// The host's resident memory by holder, in KiB; the parts sum to `rss_kb`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Composition {
    pub heap_kb: u64,
    pub wasm_kb: u64,
    pub code_kb: u64,
    pub files_kb: u64,
    pub stacks_kb: u64,
    /// The sum of every mapping's Rss.
    pub rss_kb: u64,
    pub mappings: u64,
    /// How long reading and classifying smaps took, in microseconds: the profiler's cost.
    pub read_us: u64,
}

/// The host's memory by holder at an entry's two boundaries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryComposition {
    pub before: Composition,
    pub after: Composition,
}

impl EntryComposition {
    /// The `held_*` cells: each part at the entry's end, and what reading smaps cost there.
    /// Empty without a reading (the host gone, as after stop).
    pub fn write_cells(entry: Option<&EntryComposition>, row: &mut Row) {
        let after = entry.map(|e| e.after);
        for (part, kb) in after.unwrap_or_default().parts() {
            row.int_or_empty(format!("held_{part}_kb"), after.map(|_| kb));
        }
        row.int_or_empty("held_mappings", after.map(|a| a.mappings))
            .float_or_empty("held_read_ms", after.map(|a| a.read_us as f64 / 1e3));
    }

    /// Each part's growth over the entry, in KiB.
    pub fn growth(&self) -> [(&'static str, i64); 5] {
        let (before, after) = (self.before.parts(), self.after.parts());
        std::array::from_fn(|i| (after[i].0, after[i].1 as i64 - before[i].1 as i64))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    Heap,
    Wasm,
    Code,
    Files,
    Stacks,
}

impl Composition {
    /// `None` when the host is gone or its smaps cannot be read.
    pub fn read(proc_root: &Path, pid: u32) -> Option<Composition> {
        let started = Instant::now();
        let process = Process::new_with_root(proc_root.join(pid.to_string())).ok()?;
        let maps = process.smaps().ok()?;
        let mut composition = Composition::of(&maps.0);
        composition.read_us = started.elapsed().as_micros() as u64;
        Some(composition)
    }

    fn of(maps: &[MemoryMap]) -> Composition {
        let parts = classify(maps);
        let mut composition = Composition {
            mappings: maps.len() as u64,
            ..Composition::default()
        };
        for (map, part) in maps.iter().zip(parts) {
            let kb = map.extension.map.get("Rss").copied().unwrap_or(0) / 1024;
            composition.rss_kb += kb;
            *match part {
                Part::Heap => &mut composition.heap_kb,
                Part::Wasm => &mut composition.wasm_kb,
                Part::Code => &mut composition.code_kb,
                Part::Files => &mut composition.files_kb,
                Part::Stacks => &mut composition.stacks_kb,
            } += kb;
        }
        composition
    }

    /// The parts with their names, as columns and explain.md name them.
    pub fn parts(&self) -> [(&'static str, u64); 5] {
        [
            ("heap", self.heap_kb),
            ("wasm", self.wasm_kb),
            ("code", self.code_kb),
            ("files", self.files_kb),
            ("stacks", self.stacks_kb),
        ]
    }
}

fn is_wasm_image(map: &MemoryMap) -> bool {
    matches!(&map.pathname, MMapPath::Path(path)
        if path.to_string_lossy().contains("memfd:wasm-memory-image"))
}

/// Mappings a reservation is made of: anonymous ones, and the images mapped into it.
fn in_reservation(map: &MemoryMap) -> bool {
    matches!(map.pathname, MMapPath::Anonymous) || is_wasm_image(map)
}

fn inaccessible(map: &MemoryMap) -> bool {
    !map.perms
        .intersects(MMPermissions::READ | MMPermissions::WRITE | MMPermissions::EXECUTE)
}

fn size(map: &MemoryMap) -> u64 {
    map.address.1 - map.address.0
}

/// Each mapping's part; `maps` in address order, as smaps lists them.
fn classify(maps: &[MemoryMap]) -> Vec<Part> {
    let mut parts = vec![Part::Heap; maps.len()];
    // Runs of adjacent reservation mappings: the wasm memories' and the arenas' layouts.
    let mut start = 0;
    while start < maps.len() {
        let mut end = start + 1;
        if in_reservation(&maps[start]) {
            while end < maps.len()
                && in_reservation(&maps[end])
                && maps[end].address.0 == maps[end - 1].address.1
            {
                end += 1;
            }
        }
        let run = &maps[start..end];
        let reserved: u64 = run.iter().map(size).sum();
        let wasm = reserved >= RESERVATION && run.iter().any(inaccessible);
        for (i, map) in run.iter().enumerate() {
            parts[start + i] = part_of(map, wasm, i.checked_sub(1).map(|j| &run[j]));
        }
        start = end;
    }
    parts
}

fn part_of(map: &MemoryMap, in_wasm_reservation: bool, below: Option<&MemoryMap>) -> Part {
    match &map.pathname {
        MMapPath::Stack | MMapPath::TStack(_) => Part::Stacks,
        MMapPath::Heap => Part::Heap,
        _ if is_wasm_image(map) => Part::Wasm,
        MMapPath::Anonymous if in_wasm_reservation => Part::Wasm,
        MMapPath::Anonymous if map.perms.contains(MMPermissions::EXECUTE) => Part::Code,
        MMapPath::Anonymous
            if map.perms.contains(MMPermissions::READ)
                && !map.perms.contains(MMPermissions::WRITE) =>
        {
            Part::Code
        }
        MMapPath::Anonymous
            if !map.address.0.is_multiple_of(ARENA_ALIGN)
                && below.is_some_and(|guard| inaccessible(guard) && size(guard) == GUARD) =>
        {
            Part::Stacks
        }
        MMapPath::Anonymous | MMapPath::Other(_) => Part::Heap,
        MMapPath::Path(_)
        | MMapPath::Vdso
        | MMapPath::Vvar
        | MMapPath::Vsyscall
        | MMapPath::Vsys(_)
        | MMapPath::Rollup => Part::Files,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: u64 = 4096;

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

    #[test]
    fn each_layout_finds_its_part_and_the_parts_sum_to_rss() {
        let mib = 1 << 20;
        let gib = 1 << 30;
        let maps = [
            map(0x1000_0000, 2 * mib, "r-xp", "/usr/bin/skillhost", 2 * mib),
            map(0x2000_0000, 10 * mib, "rw-p", "[heap]", 10 * mib),
            // A wasm memory: guard, 1 MiB open, the rest of 4 GiB reserved, with its image.
            map(0x1_0000_0000, 32 * mib, "---p", "", 0),
            map(0x1_0200_0000, mib, "rw-p", "", mib),
            map(
                0x1_0210_0000,
                mib,
                "r--p",
                "/memfd:wasm-memory-image (deleted)",
                8 * PAGE,
            ),
            map(0x1_0220_0000, 4 * gib, "---p", "", 0),
            // A malloc arena: 64 MiB reserved, 30 MiB open.
            map(0x2_0000_0000, 30 * mib, "rw-p", "", 30 * mib),
            map(0x2_01e0_0000, 34 * mib, "---p", "", 0),
            // Compiled code and its read-only data.
            map(0x3_0000_0000, 4 * mib, "r-xp", "", 4 * mib),
            map(0x3_0040_0000, mib, "r--p", "", mib),
            // A full arena's last page, and the next arena right above it.
            map(0x3_03ff_f000, PAGE, "---p", "", 0),
            map(0x3_0400_0000, mib, "rw-p", "", mib),
            // A thread's stack above its guard page.
            map(0x4_0000_0000, PAGE, "---p", "", 0),
            map(0x4_0000_1000, 2 * mib, "rw-p", "", 64 * PAGE),
            map(0x7fff_0000_0000, 132 * PAGE, "rw-p", "[stack]", 20 * PAGE),
        ];
        let c = Composition::of(&maps);
        let kib = |bytes: u64| bytes / 1024;
        assert_eq!(c.files_kb, kib(2 * mib));
        assert_eq!(c.heap_kb, kib(10 * mib + 30 * mib + mib));
        assert_eq!(c.wasm_kb, kib(mib + 8 * PAGE));
        assert_eq!(c.code_kb, kib(5 * mib));
        assert_eq!(c.stacks_kb, kib(84 * PAGE));
        assert_eq!(c.parts().iter().map(|(_, kb)| kb).sum::<u64>(), c.rss_kb);
        assert_eq!(c.mappings, 15);
    }

    #[test]
    fn reads_this_process_and_the_parts_sum_to_its_rss() {
        let c = Composition::read(Path::new("/proc"), std::process::id()).unwrap();
        assert!(c.rss_kb > 0 && c.files_kb > 0 && c.stacks_kb > 0, "{c:?}");
        assert_eq!(c.parts().iter().map(|(_, kb)| kb).sum::<u64>(), c.rss_kb);
    }
}
