//! What the integration tests share: driving the built skillprof binary.

#![allow(dead_code)] // each test file uses its own subset

pub mod cli;
pub mod tools_python;
