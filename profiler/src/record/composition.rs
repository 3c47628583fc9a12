//! What holds the host's resident memory, by holder, at an entry's two boundaries.

use serde::{Deserialize, Serialize};

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
    /// malloc's thread arenas (besides the main one, the brk heap), counted from glibc's heap
    /// headers. `None` where the host's memory could not be read (its heaps were then told by
    /// their layout alone), and in records from before arenas were counted.
    #[serde(default)]
    pub arenas: Option<u64>,
}

/// The host's memory by holder at an entry's two boundaries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryComposition {
    pub before: Composition,
    pub after: Composition,
}

use super::field::{Column, Row, Unit};

static HEAP: Column = Column::new(
    "held_heap_kb",
    Unit::Kib,
    "what holds the host's resident memory at the end of the entry, from /proc/PID/smaps (the held_* parts sum to the smaps total; docs/memory.md says how each is recognised; empty once the host is gone): the allocator's, the brk heap, malloc's arenas (told by glibc's heap headers, however many there are) and its large chunks",
);
static WASM: Column = Column::new(
    "held_wasm_kb",
    Unit::Kib,
    "wasm linear memories: the open parts of wasmtime's reservations, and their copy-on-write images",
);
static CODE: Column = Column::new(
    "held_code_kb",
    Unit::Kib,
    "compiled code: anonymous executable mappings and the read-only data beside them",
);
static FILES: Column = Column::new(
    "held_files_kb",
    Unit::Kib,
    "mapped files: the binary and its libraries",
);
static STACKS: Column = Column::new("held_stacks_kb", Unit::Kib, "thread and fiber stacks");
static MAPPINGS: Column = Column::new(
    "held_mappings",
    Unit::Count,
    "the host's mappings (VMAs) at the end of the entry",
);
static ARENAS: Column = Column::new(
    "held_arenas",
    Unit::Count,
    "malloc's thread arenas, from the headers glibc writes at the start of each heap; empty where the host's memory could not be read and the heaps were told by their layout alone",
);
static READ_MS: Column = Column::new(
    "held_read_ms",
    Unit::Ms,
    "what reading and classifying smaps cost the profiler",
);

impl EntryComposition {
    pub const COLUMNS: [&'static Column; 8] = [
        &HEAP, &WASM, &CODE, &FILES, &STACKS, &MAPPINGS, &ARENAS, &READ_MS,
    ];

    /// The `held_*` cells: each part at the entry's end, and what reading smaps cost there.
    /// Absent without a reading (the host gone, as after stop).
    pub fn write_cells(entry: Option<&EntryComposition>, row: &mut Row) {
        let after = entry.map(|e| e.after);
        for (column, (_, kb)) in [&HEAP, &WASM, &CODE, &FILES, &STACKS]
            .into_iter()
            .zip(after.unwrap_or_default().parts())
        {
            row.put(column, after.map(|_| kb));
        }
        row.put(&MAPPINGS, after.map(|a| a.mappings))
            .put(&ARENAS, after.and_then(|a| a.arenas))
            .put(&READ_MS, after.map(|a| a.read_us as f64 / 1e3));
    }
}
