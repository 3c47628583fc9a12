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
    /// The kernel's RSS counter (statm), read right after smaps: a host still freeing what
    /// the entry left reads lower here than at the entry's end, and the parts lie between.
    /// `None` in records from before it was read.
    #[serde(default)]
    pub statm_rss_kb: Option<u64>,
}

/// What holds a part of the host's resident memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holder {
    /// The allocator's: the brk heap, malloc's arenas and its large chunks.
    Heap,
    /// wasm linear memories and their copy-on-write images.
    Wasm,
    /// Compiled code and the read-only data beside it.
    Code,
    /// Mapped files: the binary and its libraries.
    Files,
    /// Thread and fiber stacks.
    Stacks,
}

impl Holder {
    pub const ALL: [Holder; 5] = [
        Holder::Heap,
        Holder::Wasm,
        Holder::Code,
        Holder::Files,
        Holder::Stacks,
    ];

    /// As its `held_<name>_kb` column names it.
    pub fn name(self) -> &'static str {
        match self {
            Holder::Heap => "heap",
            Holder::Wasm => "wasm",
            Holder::Code => "code",
            Holder::Files => "files",
            Holder::Stacks => "stacks",
        }
    }

    /// As a sentence names it.
    pub fn words(self) -> &'static str {
        match self {
            Holder::Wasm => "wasm memory",
            Holder::Code => "compiled code",
            other => other.name(),
        }
    }
}

impl Composition {
    /// What `holder` holds, in KiB.
    pub fn kb(&self, holder: Holder) -> u64 {
        match holder {
            Holder::Heap => self.heap_kb,
            Holder::Wasm => self.wasm_kb,
            Holder::Code => self.code_kb,
            Holder::Files => self.files_kb,
            Holder::Stacks => self.stacks_kb,
        }
    }

    pub fn kb_mut(&mut self, holder: Holder) -> &mut u64 {
        match holder {
            Holder::Heap => &mut self.heap_kb,
            Holder::Wasm => &mut self.wasm_kb,
            Holder::Code => &mut self.code_kb,
            Holder::Files => &mut self.files_kb,
            Holder::Stacks => &mut self.stacks_kb,
        }
    }

    /// Each holder's part, in column order; they sum to `rss_kb`.
    pub fn parts(&self) -> [(Holder, u64); 5] {
        Holder::ALL.map(|holder| (holder, self.kb(holder)))
    }
}

/// The host's memory by holder at an entry's two boundaries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryComposition {
    pub before: Composition,
    pub after: Composition,
}

use super::field::{Row, fields};

fields! {
    impl EntryComposition: pub fn write_cells(entry: Option<&EntryComposition>, row: &mut Row) -> row {
        let after = entry.map(|e| e.after);
    }
    HEAP "held_heap_kb" Kib "what holds the host's resident memory at the end of the entry, from /proc/PID/smaps (the held_* parts sum to the smaps total; docs/memory.md says how each is recognised; empty once the host is gone): the allocator's, the brk heap, malloc's arenas (told by glibc's heap headers, however many there are) and its large chunks" = after.map(|a| a.heap_kb);
    WASM "held_wasm_kb" Kib "wasm linear memories: the open parts of wasmtime's reservations, and their copy-on-write images" = after.map(|a| a.wasm_kb);
    CODE "held_code_kb" Kib "compiled code: anonymous executable mappings and the read-only data beside them" = after.map(|a| a.code_kb);
    FILES "held_files_kb" Kib "mapped files: the binary and its libraries" = after.map(|a| a.files_kb);
    STACKS "held_stacks_kb" Kib "thread and fiber stacks" = after.map(|a| a.stacks_kb);
    MAPPINGS "held_mappings" Count "the host's mappings (VMAs) at the end of the entry" = after.map(|a| a.mappings);
    ARENAS "held_arenas" Count "malloc's thread arenas, from the headers glibc writes at the start of each heap; empty where the host's memory could not be read and the heaps were told by their layout alone" = after.and_then(|a| a.arenas);
    STATM "held_statm_rss_kb" Kib "the host's RSS as the kernel counts it (statm), read right after smaps: a host still freeing what the entry left reads lower here than in rss_after_kb, read before smaps, and the held_* parts lie between the two" = after.and_then(|a| a.statm_rss_kb);
    READ_MS "held_read_ms" Ms "what reading and classifying smaps cost the profiler" = after.map(|a| a.read_us as f64 / 1e3);
}
