//! A time profile as a pprof file (`profile.proto` of github.com/google/pprof, gzipped):
//! what `go tool pprof`, Grafana Pyroscope and Parca read. The on-CPU view has the sample
//! types `samples`/count and `cpu`/nanoseconds, the off-CPU view `waits`/count and
//! `off_cpu`/nanoseconds; each sample carries the labels `skill`, `phase` and, off a CPU,
//! `wait`. Frames are functions (a wasm function, a native one, the kernel's), one location
//! each, so pprof's views aggregate by function.

use std::collections::HashMap;
use std::io::Write as _;

use anyhow::{Context as _, Result};
use flate2::{Compression, write::GzEncoder};
use prost::Message;

use super::profile::View;
use crate::record::time::{TimeProfile, TimeStack, TimeState};

/// The messages of profile.proto that skillprof writes, field numbers as the schema has
/// them (fields it never sets are left out; a reader takes them as zero).
mod proto {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Profile {
        #[prost(message, repeated, tag = "1")]
        pub sample_type: Vec<ValueType>,
        #[prost(message, repeated, tag = "2")]
        pub sample: Vec<Sample>,
        #[prost(message, repeated, tag = "4")]
        pub location: Vec<Location>,
        #[prost(message, repeated, tag = "5")]
        pub function: Vec<Function>,
        #[prost(string, repeated, tag = "6")]
        pub string_table: Vec<String>,
        #[prost(int64, tag = "9")]
        pub time_nanos: i64,
        #[prost(int64, tag = "10")]
        pub duration_nanos: i64,
        #[prost(message, optional, tag = "11")]
        pub period_type: Option<ValueType>,
        #[prost(int64, tag = "12")]
        pub period: i64,
        #[prost(int64, repeated, tag = "13")]
        pub comment: Vec<i64>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ValueType {
        #[prost(int64, tag = "1")]
        pub r#type: i64,
        #[prost(int64, tag = "2")]
        pub unit: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        #[prost(uint64, repeated, tag = "1")]
        pub location_id: Vec<u64>,
        #[prost(int64, repeated, tag = "2")]
        pub value: Vec<i64>,
        #[prost(message, repeated, tag = "3")]
        pub label: Vec<Label>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Label {
        #[prost(int64, tag = "1")]
        pub key: i64,
        #[prost(int64, tag = "2")]
        pub str: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Location {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(message, repeated, tag = "4")]
        pub line: Vec<Line>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Line {
        #[prost(uint64, tag = "1")]
        pub function_id: u64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Function {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(int64, tag = "2")]
        pub name: i64,
        #[prost(int64, tag = "3")]
        pub system_name: i64,
        #[prost(int64, tag = "4")]
        pub filename: i64,
    }
}

/// The string table: index 0 is the empty string, as the schema requires.
#[derive(Default)]
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Strings {
        let mut strings = Strings::default();
        strings.of("");
        strings
    }

    fn of(&mut self, text: &str) -> i64 {
        if let Some(&i) = self.index.get(text) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(text.to_owned());
        self.index.insert(text.to_owned(), i);
        i
    }
}

/// When and over how long the profile was taken, for the file's header.
#[derive(Clone, Copy, Debug)]
pub struct Span {
    /// Its start, ns since the Unix epoch.
    pub start_unix_ns: i64,
    pub duration_ns: i64,
}

impl Span {
    /// A span of `took` that ends now.
    pub fn ended_now(took: std::time::Duration) -> Span {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Span {
            start_unix_ns: now.saturating_sub(took).as_nanos() as i64,
            duration_ns: took.as_nanos() as i64,
        }
    }
}

/// One view of `profile` (the stacks `keep` keeps), gzipped pprof bytes. `comment` goes
/// into the file's comments (`go tool pprof -comments`).
pub fn encode(
    profile: &TimeProfile,
    view: View,
    span: Span,
    comment: &str,
    keep: impl Fn(&TimeStack) -> bool,
) -> Result<Vec<u8>> {
    let mut strings = Strings::new();
    let (count, value) = match view {
        View::OnCpu => ("samples", "cpu"),
        View::OffCpu => ("waits", "off_cpu"),
    };
    let sample_type = vec![
        proto::ValueType {
            r#type: strings.of(count),
            unit: strings.of("count"),
        },
        proto::ValueType {
            r#type: strings.of(value),
            unit: strings.of("nanoseconds"),
        },
    ];
    // One function and one location per frame, with the same id (frame index + 1).
    let function = profile
        .frames
        .iter()
        .enumerate()
        .map(|(i, frame)| {
            // No system name: pprof's symbolizer demangles a function whose name is its
            // system name, and where that fails on a name that looks like C++ it strips the
            // name's `<…>`, so `<regalloc2::…::Env<…>>::run` and
            // `<cranelift_codegen::egraph::EgraphPass>::run` both read `::run`. A name beside
            // a different system name counts as demangled already, and is kept.
            proto::Function {
                id: i as u64 + 1,
                name: strings.of(&frame.name),
                system_name: strings.of(""),
                filename: strings.of(kind_name(frame.kind)),
            }
        })
        .collect();
    let location = (1..=profile.frames.len() as u64)
        .map(|id| proto::Location {
            id,
            line: vec![proto::Line { function_id: id }],
        })
        .collect();
    let keys = [strings.of("skill"), strings.of("phase"), strings.of("wait")];
    let mut sample = Vec::new();
    for stack in profile
        .stacks
        .iter()
        .filter(|s| (s.state == TimeState::OnCpu) == (view == View::OnCpu) && keep(s))
    {
        let mut label = vec![
            proto::Label {
                key: keys[0],
                str: strings.of(stack.skill.as_deref().unwrap_or("host")),
            },
            proto::Label {
                key: keys[1],
                str: strings.of(stack.phase.as_str()),
            },
        ];
        if view == View::OffCpu {
            label.push(proto::Label {
                key: keys[2],
                str: strings.of(stack.wait.map_or(stack.state.as_str(), |w| w.as_str())),
            });
        }
        sample.push(proto::Sample {
            // Innermost first, as pprof lists a sample's locations.
            location_id: stack
                .frames
                .iter()
                .rev()
                .map(|&i| u64::from(i) + 1)
                .collect(),
            value: vec![stack.count as i64, stack.ns as i64],
            label,
        });
    }
    let comment = vec![strings.of(comment)];
    let period_type = Some(proto::ValueType {
        r#type: strings.of(value),
        unit: strings.of("nanoseconds"),
    });
    let encoded = proto::Profile {
        sample_type,
        sample,
        location,
        function,
        string_table: strings.table,
        time_nanos: span.start_unix_ns,
        duration_nanos: span.duration_ns,
        period_type,
        period: profile.period_ns as i64,
        comment,
    }
    .encode_to_vec();
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    gz.write_all(&encoded)
        .context("compressing a pprof profile")?;
    gz.finish().context("compressing a pprof profile")
}

/// The file name pprof shows for a frame's function: which kind of code it is.
fn kind_name(kind: crate::record::time::FrameKind) -> &'static str {
    use crate::record::time::FrameKind;
    match kind {
        FrameKind::Wasm => "[wasm]",
        FrameKind::Native => "[native]",
        FrameKind::Kernel => "[kernel]",
        FrameKind::Unnamed => "[unnamed]",
    }
}
