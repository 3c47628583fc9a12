//! OpenMetrics text, one writer for every view in the format: the watch's scrape, `skillprof
//! slo`'s metrics file and `export --format openmetrics`. Families come out in the order
//! first seen, each with all its points together (OpenMetrics wants them so, and series of
//! one family can arrive apart); a family's name, unit and help come from the field table
//! where it has a column.

use std::borrow::Cow;
use std::fmt::Write as _;

use rustc_hash::FxHashMap;

use crate::record::field::{Column, Value};

/// Whether a series only grows (a counter), is a reading of now (a gauge), or counts
/// observations by bucket (a histogram).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

#[derive(Default)]
pub struct Families {
    order: Vec<String>,
    /// Each family's head and its points' lines, written as they come: a scrape of thousands
    /// of skills is hundreds of thousands of points, and a String or two each would be most
    /// of its time.
    by_name: FxHashMap<String, (String, String)>,
    points: usize,
    /// The name being looked up, reused.
    name: String,
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
        let suffix = match family.kind {
            Kind::Counter => "_total",
            _ => "",
        };
        self.line(group, column, family, suffix, labels, value, ms);
    }

    /// A histogram of `skillprof_<group>_<column>` with `labels`: `buckets` as each bucket's
    /// upper bound (`f64::INFINITY` last) and the observations in it (not cumulative), and
    /// the observations' sum.
    pub fn histogram(
        &mut self,
        group: &str,
        column: &'static Column,
        labels: &str,
        buckets: impl Iterator<Item = (f64, u64)>,
        sum: f64,
    ) {
        let family = Family {
            kind: Kind::Histogram,
            unit: column.unit.openmetrics(),
            help: &column.help,
        };
        let separator = if labels.is_empty() { "" } else { "," };
        // One buffer for every bucket's labels: a scrape writes tens of thousands of them.
        let mut with_le = String::new();
        let mut cumulative = 0;
        for (bound, count) in buckets {
            cumulative += count;
            with_le.clear();
            let _ = match bound.is_finite() {
                true => write!(with_le, "{labels}{separator}le=\"{bound}\""),
                false => write!(with_le, "{labels}{separator}le=\"+Inf\""),
            };
            let value = cumulative as f64;
            self.line(
                group,
                &column.name,
                &family,
                "_bucket",
                &with_le,
                value,
                None,
            );
        }
        for (suffix, value) in [("_count", cumulative as f64), ("_sum", sum)] {
            self.line(group, &column.name, &family, suffix, labels, value, None);
        }
    }

    /// One line of the family `skillprof_<group>_<column>`: its name with `suffix`.
    #[allow(clippy::too_many_arguments)]
    fn line(
        &mut self,
        group: &str,
        column: &str,
        family: &Family<'_>,
        suffix: &str,
        labels: &str,
        value: f64,
        ms: Option<i64>,
    ) {
        write_metric_name(&mut self.name, group, column);
        let name = self.name.as_str();
        if !self.by_name.contains_key(name) {
            self.order.push(name.to_owned());
            self.by_name
                .insert(name.to_owned(), (family.head(name), String::new()));
        }
        let (_, points) = self.by_name.get_mut(name).expect("inserted above");
        points.push_str(name);
        points.push_str(suffix);
        if !labels.is_empty() {
            points.push('{');
            points.push_str(labels);
            points.push('}');
        }
        points.push(' ');
        // Most points are whole numbers, which print faster as integers.
        if value.fract() == 0.0 && value.abs() < 1e15 {
            points.push_str(itoa::Buffer::new().format(value as i64));
        } else {
            let _ = write!(points, "{value}");
        }
        // OpenMetrics timestamps are seconds, here to the millisecond.
        if let Some(ms) = ms {
            let _ = write!(
                points,
                " {}.{:03}",
                ms.div_euclid(1000),
                ms.rem_euclid(1000)
            );
        }
        points.push('\n');
        self.points += 1;
    }

    pub fn points(&self) -> usize {
        self.points
    }

    pub fn text(&self) -> String {
        let length = self
            .by_name
            .values()
            .map(|(head, points)| head.len() + points.len())
            .sum::<usize>();
        let mut text = String::with_capacity(length + 6);
        for name in &self.order {
            let (head, points) = &self.by_name[name];
            text.push_str(head);
            text.push_str(points);
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
            Kind::Histogram => "histogram",
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

/// `skillprof_<group>_<column>` in `name`, with anything a metric name cannot hold made `_`.
fn write_metric_name(name: &mut String, group: &str, column: &str) {
    name.clear();
    name.push_str("skillprof_");
    name.push_str(group);
    name.push('_');
    // Byte by byte: a character of several bytes is several `_`, still a name.
    name.extend(column.bytes().map(|b| match b.is_ascii_alphanumeric() {
        true => char::from(b),
        false => '_',
    }));
}

/// Label values and help text escape backslash, double quote and newline.
pub fn escape(text: &str) -> Cow<'_, str> {
    if !text.contains(['\\', '"', '\n']) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(
        text.replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_labels_and_points_are_what_the_format_allows() {
        let metric_name = |group, column| {
            let mut name = String::new();
            write_metric_name(&mut name, group, column);
            name
        };
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
