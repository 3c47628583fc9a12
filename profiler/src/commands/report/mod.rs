//! Plots drawn from the files a run leaves on disk, never from live measurement: a report can
//! be redrawn from an old run folder.

pub mod watermarks;

// `skillprof report` and `skillprof export`: report.html, plots, the Perfetto trace,
// OpenMetrics and typed events.
pub mod answers;
pub mod cli;
pub mod events_by_kind;
pub mod html;
pub mod openmetrics;
pub mod perfetto;
pub mod plots;
pub mod png;
pub mod read;
