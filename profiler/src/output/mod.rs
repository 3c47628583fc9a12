//! File formats: each knows how to read or write its format, nothing of how the numbers in
//! it were measured.

pub mod commands_csv;
pub mod compare;
pub mod entries_jsonl;
pub mod entry_rows_csv;
pub mod harness_log;
pub mod json_stdout;
pub mod meta;
pub mod pressure_csv;
pub mod run_json;
pub mod samples_csv;
pub mod stacks;
