//! The C allocator's own view of the host's heap, from glibc's `mallinfo2`: the bytes the
//! host (Cranelift above all) holds in use, and the bytes malloc keeps free after they were
//! let go. After a first Python compile most of the host's RSS is the second kind; `trim`
//! hands it back to the kernel (`malloc_trim(0)`).

use serde::Serialize;

#[derive(Clone, Copy, Debug, Serialize)]
pub struct Heap {
    /// Allocated and not freed: in the arenas' chunks and in chunks mmapped on their own.
    pub in_use_bytes: u64,
    /// Freed chunks malloc keeps in its arenas for reuse: resident where they were touched.
    pub free_bytes: u64,
}

/// `None` when glibc's malloc is not the allocator (jemalloc preloaded, say): its arenas are
/// then empty, and zeros would read as "nothing kept".
pub fn now() -> Option<Heap> {
    // SAFETY: mallinfo2 takes each arena's lock and only reads its counters.
    let info = unsafe { libc::mallinfo2() };
    if info.arena == 0 && info.hblkhd == 0 {
        return None;
    }
    Some(Heap {
        in_use_bytes: (info.uordblks + info.hblkhd) as u64,
        free_bytes: info.fordblks as u64,
    })
}

/// Gives every arena's free memory back to the kernel.
pub fn trim() {
    // SAFETY: malloc_trim takes each arena's lock; it is safe to call from any thread.
    unsafe { libc::malloc_trim(0) };
}
