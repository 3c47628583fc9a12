//! What the records say: files, tables and words made from the typed records alone.

pub mod explain;
pub mod output;
