//! Memory pressure: hold free memory in a band between the kernel's zone watermarks and see
//! what it does to the machine and to a workload.
//!
//! The bands (`bands`) are defined on free memory as user-space allocations can reach it
//! (`reach`), read afresh on every step. A balloon process (`balloon`) holds touched anonymous
//! memory, and a controller thread (`hold`) resizes it to keep free memory in a band, under
//! the safety rules (`safety`, `aim`). Guardian processes (`crate::producers::system`) undo every change to
//! the machine (sysctls, the swap file) on every exit path. The experiment (`experiment`) holds
//! the bands one by one; `skillprof pressure` (`crate::commands::pressure`) sets it up and reports it.
//!
//! The runner's view (`pressure BAND` in a cmds file, `skillprof run --pressure BAND`):
//! [`Balloon::hold`] starts the balloon and its controller and returns at once;
//! [`HeldBalloon::settle`] blocks until free memory is in the band (from async code, on a
//! blocking thread); per entry, [`HeldBalloon::reset_window`] at its start and
//! [`HeldBalloon::held`] at its end give the band actually held, a `record::Metrics` (the
//! `pressure_*` columns); [`HeldBalloon::retarget`] and `settle` move to another band;
//! [`HeldBalloon::release`] (`pressure off`, the end of the run) blocks until the memory is
//! back. When a safety rule stops the hold, the balloon is already empty and
//! [`HeldBalloon::aborted`] says why. Entries without a balloon write the same columns, empty
//! ([`BandHeld::write_cells`]).

pub mod aim;
mod bounds;
pub mod hold;
pub mod page_cache;
pub mod process;
pub mod safety;

pub use aim::Aim;
pub use hold::{HeldBalloon, HoldOptions, HoldSample, NotHeld, Settling};
pub use process::Balloon;
pub use safety::Safety;
