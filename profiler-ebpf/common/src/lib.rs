#![no_std]
//! `#[repr(C)]` types shared by the BPF programs and skillprof userspace.
//!
//! Both sides read the same bytes, so every type here is `#[repr(C)]`, `Copy`, and made of
//! fixed-width integers only (no padding the two compilers could disagree on).

/// What the `sys_enter_mmap` program counts for the target process: the value type of the
/// `MMAP_TOTALS` per-CPU array. Userspace sums the per-CPU slots.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MmapTotals {
    /// `mmap(2)` calls entered.
    pub calls: u64,
    /// Sum of the requested lengths in bytes, as passed (before page rounding, and whether or
    /// not the call then succeeded).
    pub bytes: u64,
}

// SAFETY: `#[repr(C)]`, two u64s, no padding, every bit pattern is valid.
#[cfg(feature = "user")]
unsafe impl aya::Pod for MmapTotals {}
