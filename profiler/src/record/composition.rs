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
