//! File formats: each knows how to read or write its format, nothing of how the numbers in
//! it were measured.

pub mod compare;
pub mod harness_log;
