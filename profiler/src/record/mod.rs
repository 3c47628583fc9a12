//! The result record: one per entry ([`EntryRecord`]) and one per run ([`RunInfo`]), the
//! contract between measuring and reporting, and the ground floor: it imports no module
//! above it. Producers (the runner, the sampler, the probes, a balloon, the host starter,
//! Locust) fill its plain data in; every view (commands.csv, entries.jsonl, JSON,
//! OpenMetrics, the report, explain) reads it. Each group of figures declares its columns
//! next to its fields ([`field::Column`]: name, unit, help) and writes typed cells into a
//! [`Row`]; [`columns`] is the table of all of them, from which docs/columns.md is made
//! (`output::columns_markdown`).

pub mod balloon;
pub mod composition;
mod entry;
pub mod event;
pub mod field;
#[cfg(test)]
pub(crate) mod fixture;
pub mod host;
pub mod locust;
pub mod memcg;
pub mod pool;
pub mod probes;
pub mod process;
pub mod profile;
mod run;
pub mod sampling;
pub mod slo;
pub mod time;
pub mod traffic;

pub use entry::{
    EntryCmd, EntryMeasure, EntryRecord, Fill, FillStop, INDEX as INDEX_COLUMN, Latency, Outcome,
    Step,
};
pub use field::{Cell, Column, Row, Unit, Value};
pub use run::{
    CgroupInfo, CmdsInfo, HostInfo, LoadInfo, ProbesInfo, RunInfo, Status, SysctlDuring,
};

/// Anything measured per entry writes its cells through this.
pub trait Metrics {
    fn write(&self, row: &mut Row);
}

/// Every column of commands.csv, in row order: the field table every view reads.
pub fn columns() -> Vec<&'static Column> {
    entry::GROUPS
        .iter()
        .flat_map(|group| (group.columns)())
        .collect()
}

/// The column `name` is, or is a member of.
pub fn documentation(name: &str) -> Option<&'static Column> {
    columns().into_iter().find(|column| column.names(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every cell a record writes belongs to a documented column, in the table's order, and
    /// every fixed column is written: the table and the rows cannot drift apart.
    #[test]
    fn every_cell_has_its_column_in_order() {
        let record = fixture::probed(fixture::record("add_py", 10.0), |_| {});
        let row = record.row();
        let columns = columns();
        let mut position = 0;
        for cell in row.cells() {
            let found = columns[position..]
                .iter()
                .position(|column| std::ptr::eq(*column, cell.column))
                .unwrap_or_else(|| panic!("{} is out of the table's order", cell.name));
            position += found;
            assert!(
                cell.column.names(&cell.name),
                "{} is not {}",
                cell.name,
                cell.column.name
            );
        }
        for column in columns.iter().filter(|column| !column.is_family()) {
            assert!(
                row.cells()
                    .iter()
                    .any(|cell| std::ptr::eq(cell.column, *column)),
                "{} is documented but never written",
                column.name
            );
        }
        let mut names: Vec<&str> = columns.iter().map(|column| &*column.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), columns.len(), "a column is documented twice");
    }

    #[test]
    fn columns_are_looked_up_by_name() {
        assert!(documentation("took_ms").is_some());
        assert!(documentation("nonsense").is_none());
    }
}
