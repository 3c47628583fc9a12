//! The field table: every column an entry's record can write, with its unit and what it
//! means, declared once as a [`Column`] next to the field it reads. A record writes typed
//! [`Cell`]s into a [`Row`]; commands.csv, entries' JSON, OpenMetrics, the report's tables and
//! docs/columns.md are views of those cells, so no view parses a cell back into a number or
//! types a column's name or help again.

use std::borrow::Cow;
use std::fmt::{self, Write as _};

/// A record group's columns, each declared once with the value it writes, from which come
/// the group's `COLUMNS` (in row order) and the function that writes its cells:
///
/// ```ignore
/// fields! {
///     impl Metrics for Group: fn write(&self, row: &mut Row) -> row { let shared = ...; }
///     ID "name" Unit "help" = value;             // one cell
///     FAMILY "name_*" Unit "help" for cells;     // (name, value) pairs of a family
///     OTHER "other_*" Unit "help" => { ... };     // cells written by a block of its own
/// }
/// ```
///
/// `impl Group: fn ...` makes the function inherent (`write_cells(entry: Option<&Group>,
/// row: &mut Row)`, for groups a record may lack). A new figure is one line here.
macro_rules! fields {
    (@put $row:ident $id:ident = $value:expr) => {
        $row.put(&$id, $value);
    };
    (@put $row:ident $id:ident => $cells:expr) => {
        $cells;
    };
    (@put $row:ident $id:ident for $cells:expr) => {
        for (name, value) in $cells {
            $row.put_in(&$id, name, value);
        }
    };
    (@columns $group:ty; $($id:ident $name:literal $unit:ident $help:literal)*) => {
        $(pub static $id: $crate::record::Column =
            $crate::record::Column::new($name, $crate::record::Unit::$unit, $help);)*
        impl $group {
            /// Its columns, in row order.
            pub const COLUMNS: &'static [&'static $crate::record::Column] = &[$(&$id),*];
        }
    };
    (
        impl $trait:ident for $group:ty: fn $f:ident $params:tt -> $row:ident { $($prelude:tt)* }
        $($id:ident $name:literal $unit:ident $help:literal $op:tt $value:expr;)*
    ) => {
        $crate::record::field::fields!(@columns $group; $($id $name $unit $help)*);
        impl $trait for $group {
            fn $f $params {
                $($prelude)*
                $($crate::record::field::fields!(@put $row $id $op $value);)*
            }
        }
    };
    (
        impl $group:ty: $vis:vis fn $f:ident $params:tt -> $row:ident { $($prelude:tt)* }
        $($id:ident $name:literal $unit:ident $help:literal $op:tt $value:expr;)*
    ) => {
        $crate::record::field::fields!(@columns $group; $($id $name $unit $help)*);
        impl $group {
            $vis fn $f $params {
                $($prelude)*
                $($crate::record::field::fields!(@put $row $id $op $value);)*
            }
        }
    };
}
pub(crate) use fields;

/// What a column's numbers count, as its name's suffix says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// A count of things (calls, pages, requests, threads, mappings).
    Count,
    /// KiB (`_kb`).
    Kib,
    /// Bytes (`_bytes`).
    Bytes,
    /// Milliseconds (`_ms`).
    Ms,
    /// Microseconds (`_us`).
    Us,
    /// Seconds (`_s`).
    Seconds,
    /// Percent (`_pct`).
    Percent,
    /// A ratio: a share of 1, or an amount per request.
    Ratio,
    /// Text: a name, a band, a message, an exit status.
    Text,
}

impl Unit {
    /// The OpenMetrics unit of a series in this unit, where it has one.
    pub fn openmetrics(self) -> Option<&'static str> {
        match self {
            Unit::Kib => Some("kibibytes"),
            Unit::Bytes => Some("bytes"),
            Unit::Ms => Some("milliseconds"),
            Unit::Us => Some("microseconds"),
            Unit::Seconds => Some("seconds"),
            Unit::Percent => Some("percent"),
            Unit::Count | Unit::Ratio | Unit::Text => None,
        }
    }
}

/// A column, or a family of columns whose name has a `*` (one per zone, per syscall kind,
/// per vmstat counter): its name, unit and what it means. Declared columns borrow their
/// text; the probes' columns, made from their tables of kinds, own it.
#[derive(Debug, PartialEq, Eq)]
pub struct Column {
    pub name: Cow<'static, str>,
    pub unit: Unit,
    pub help: Cow<'static, str>,
}

impl Column {
    pub const fn new(name: &'static str, unit: Unit, help: &'static str) -> Column {
        Column {
            name: Cow::Borrowed(name),
            unit,
            help: Cow::Borrowed(help),
        }
    }

    /// Whether `name` is this column, or a member of this family (`*` stands for any text).
    pub fn names(&self, name: &str) -> bool {
        match self.name.split_once('*') {
            Some((prefix, suffix)) => {
                name.len() >= prefix.len() + suffix.len()
                    && name.starts_with(prefix)
                    && name.ends_with(suffix)
            }
            None => name == self.name,
        }
    }

    pub fn is_family(&self) -> bool {
        self.name.contains('*')
    }
}

/// A measured value, typed; `Absent` where nothing was measured (an empty cell, never 0).
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Absent,
    Int(i128),
    Float(f64),
    Text(String),
}

impl Value {
    /// The number, for views that plot or export numbers.
    pub fn number(&self) -> Option<f64> {
        match self {
            Value::Int(value) => Some(*value as f64),
            Value::Float(value) => Some(*value),
            Value::Absent | Value::Text(_) => None,
        }
    }

    pub fn is_absent(&self) -> bool {
        matches!(self, Value::Absent)
    }

    /// The number as commands.csv writes it (three decimals for a float), for views that
    /// must agree with the CSV to the digit.
    pub fn number_as_written(&self) -> Option<f64> {
        match self {
            Value::Float(_) => self.to_string().parse().ok(),
            _ => self.number(),
        }
    }
}

/// As commands.csv writes it: integers as they are, three decimals for milliseconds
/// measured in microseconds, text as it is, an absent value empty.
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Absent => Ok(()),
            Value::Int(value) => write!(f, "{value}"),
            Value::Float(value) => write!(f, "{value:.3}"),
            Value::Text(text) => f.write_str(text),
        }
    }
}

macro_rules! int_values {
    ($($t:ty),*) => {$(
        impl From<$t> for Value {
            fn from(value: $t) -> Value {
                Value::Int(value as i128)
            }
        }
    )*};
}
int_values!(u8, u32, u64, usize, i64);

impl From<f64> for Value {
    fn from(value: f64) -> Value {
        Value::Float(value)
    }
}

impl From<&str> for Value {
    fn from(text: &str) -> Value {
        Value::Text(text.to_owned())
    }
}

impl From<String> for Value {
    fn from(text: String) -> Value {
        Value::Text(text)
    }
}

impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(value: Option<T>) -> Value {
        value.map_or(Value::Absent, Into::into)
    }
}

/// One cell of a row: its column's name (a family member's own), the column, its value.
#[derive(Clone, Debug, PartialEq)]
pub struct Cell {
    pub name: Cow<'static, str>,
    pub column: &'static Column,
    pub value: Value,
}

/// An entry's cells in column order.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Row {
    cells: Vec<Cell>,
}

impl Row {
    /// The cell of `column`.
    pub fn put(&mut self, column: &'static Column, value: impl Into<Value>) -> &mut Self {
        debug_assert!(!column.is_family(), "{} is a family", column.name);
        self.cells.push(Cell {
            name: column.name.clone(),
            column,
            value: value.into(),
        });
        self
    }

    /// The cell `name` of the family `column`.
    pub fn put_in(
        &mut self,
        column: &'static Column,
        name: impl Into<Cow<'static, str>>,
        value: impl Into<Value>,
    ) -> &mut Self {
        let name = name.into();
        debug_assert!(column.names(&name), "{name} is not in {}", column.name);
        self.cells.push(Cell {
            name,
            column,
            value: value.into(),
        });
        self
    }

    /// No cells, its room kept for the next row's.
    pub fn clear(&mut self) {
        self.cells.clear();
    }

    pub fn cells(&self) -> &[Cell] {
        &self.cells
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.cells.iter().map(|cell| cell.name.as_ref())
    }

    /// Each cell as commands.csv writes it.
    pub fn values(&self) -> impl Iterator<Item = String> + '_ {
        self.cells.iter().map(|cell| cell.value.to_string())
    }

    /// The cell `name` as commands.csv writes it.
    pub fn csv(&self, name: &str) -> Option<String> {
        self.get(name).map(ToString::to_string)
    }

    pub fn get(&self, name: &str) -> Option<&Value> {
        self.cells
            .iter()
            .find(|cell| cell.name == name)
            .map(|cell| &cell.value)
    }
}

/// The reference of `columns` as a Markdown table (docs/columns.md).
pub fn markdown(columns: &[&'static Column]) -> String {
    let mut table = String::from("| column | unit | meaning |\n|---|---|---|\n");
    for column in columns {
        let unit = match column.unit {
            Unit::Count => "count",
            Unit::Kib => "KiB",
            Unit::Bytes => "bytes",
            Unit::Ms => "ms",
            Unit::Us => "µs",
            Unit::Seconds => "s",
            Unit::Percent => "%",
            Unit::Ratio => "ratio",
            Unit::Text => "text",
        };
        let _ = writeln!(
            table,
            "| `{}` | {unit} | {} |",
            column.name,
            column.help.replace('|', "\\|")
        );
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    static A: Column = Column::new("a_kb", Unit::Kib, "a");
    static B: Column = Column::new("b_ms", Unit::Ms, "b");
    static C: Column = Column::new("c", Unit::Text, "c");
    static D: Column = Column::new("d", Unit::Count, "d");
    static ZONE: Column = Column::new("zone_*", Unit::Count, "per zone");

    #[test]
    fn rows_keep_order_types_and_the_csv_format() {
        let mut row = Row::default();
        row.put(&A, -5i64)
            .put(&B, 1.23456)
            .put(&C, "x")
            .put(&D, None::<u64>)
            .put_in(&ZONE, "zone_0_Normal", 7u64);
        assert_eq!(
            row.names().collect::<Vec<_>>(),
            ["a_kb", "b_ms", "c", "d", "zone_0_Normal"]
        );
        assert_eq!(
            row.values().collect::<Vec<_>>(),
            ["-5", "1.235", "x", "", "7"]
        );
        assert_eq!(row.get("b_ms"), Some(&Value::Float(1.23456)));
        assert_eq!(row.cells()[4].column, &ZONE);
        assert!(ZONE.names("zone_1_DMA32") && !A.names("a"));
    }
}
