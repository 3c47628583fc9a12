//! Plots drawn from the files a run leaves on disk, never from live measurement: a report can
//! be redrawn from an old run folder.

pub mod watermarks;
