//! OpenMetrics text, one writer for every view in the format: the watch's scrape, `skillprof
//! slo`'s metrics file and `export --format openmetrics`. Families come out in the order
//! first seen, each with all its points together (OpenMetrics wants them so, and series of
//! one family can arrive apart); a family's name, unit and help come from the field table
//! where it has a column.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::record::field::{Column, Value};

/// Whether a series only grows (a counter) or is a reading of now (a gauge).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
}

#[derive(Default)]
pub struct Families {
    order: Vec<String>,
    by_name: BTreeMap<String, (String, Vec<String>)>,
}

impl Families {
    /// A point of the series `column` of `group` (a family member's own name), which `meta`
    /// documents; an absent or textual value is no point.
    pub fn add(
        &mut self,
        group: &str,
        column: &str,
        meta: &'static Column,
        kind: Kind,
        labels: &str,
        value: &Value,
    ) {
        if let Some(number) = value.number() {
            let family = Family {
                kind,
                unit: meta.unit.openmetrics(),
                help: &meta.help,
            };
            self.point(group, column, &family, labels, number, None);
        }
    }

    /// A series named after its own column (not a family member's).
    pub fn column(
        &mut self,
        group: &str,
        column: &'static Column,
        kind: Kind,
        labels: &str,
        value: &Value,
    ) {
        self.add(group, &column.name, column, kind, labels, value);
    }

    /// A point of `skillprof_<group>_<column>`, at `ms` (Unix milliseconds) when given.
    pub fn point(
        &mut self,
        group: &str,
        column: &str,
        family: &Family<'_>,
        labels: &str,
        value: f64,
        ms: Option<i64>,
    ) {
        let name = metric_name(group, column);
        let (_, points) = self.by_name.entry(name.clone()).or_insert_with(|| {
            self.order.push(name.clone());
            (family.head(&name), Vec::new())
        });
        let sample = match family.kind {
            Kind::Counter => format!("{name}_total"),
            Kind::Gauge => name,
        };
        let labels = match labels.is_empty() {
            true => String::new(),
            false => format!("{{{labels}}}"),
        };
        // OpenMetrics timestamps are seconds, here to the millisecond.
        let at = ms.map_or(String::new(), |ms| {
            format!(" {}.{:03}", ms.div_euclid(1000), ms.rem_euclid(1000))
        });
        points.push(format!("{sample}{labels} {value}{at}"));
    }

    pub fn points(&self) -> usize {
        self.by_name.values().map(|(_, points)| points.len()).sum()
    }

    pub fn text(&self) -> String {
        let mut text = String::new();
        for name in &self.order {
            let (head, points) = &self.by_name[name];
            text.push_str(head);
            for point in points {
                text.push_str(point);
                text.push('\n');
            }
        }
        text.push_str("# EOF\n");
        text
    }
}

/// What a family is: its type, its unit (OpenMetrics' name for it) and its help.
pub struct Family<'a> {
    pub kind: Kind,
    pub unit: Option<&'static str>,
    pub help: &'a str,
}

impl Family<'_> {
    fn head(&self, name: &str) -> String {
        let mut head = String::new();
        let kind = match self.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        };
        let _ = writeln!(head, "# TYPE {name} {kind}");
        if let Some(unit) = self.unit {
            // OpenMetrics: a family with a unit carries it as its name's suffix too.
            if name.ends_with(&format!("_{unit}")) {
                let _ = writeln!(head, "# UNIT {name} {unit}");
            }
        }
        let _ = writeln!(head, "# HELP {name} {}", escape(self.help));
        head
    }
}

/// `skillprof_<group>_<column>`, with anything a metric name cannot hold made `_`.
pub fn metric_name(group: &str, column: &str) -> String {
    let column: String = column
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("skillprof_{group}_{column}")
}

/// Label values and help text escape backslash, double quote and newline.
pub fn escape(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_labels_and_points_are_what_the_format_allows() {
        assert_eq!(
            metric_name("entry", "zone_0_DMA32_min_free_pages"),
            "skillprof_entry_zone_0_DMA32_min_free_pages"
        );
        assert_eq!(metric_name("sample", "a-b.c"), "skillprof_sample_a_b_c");
        assert_eq!(escape("say \"hi\"\\\n"), "say \\\"hi\\\"\\\\\\n");
        let mut families = Families::default();
        let gauge = Family {
            kind: Kind::Gauge,
            unit: None,
            help: "m",
        };
        families.point("x", "m", &gauge, "run=\"r\"", 1.5, Some(1_795_000_000_250));
        assert_eq!(
            families.text(),
            "# TYPE skillprof_x_m gauge\n# HELP skillprof_x_m m\n\
             skillprof_x_m{run=\"r\"} 1.5 1795000000.250\n# EOF\n"
        );
    }
}
