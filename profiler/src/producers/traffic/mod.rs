//! Traffic at a rate: open-loop load sent on a schedule and measured from each request's
//! scheduled send, and the closed loop of `hey -c N` beside it (`o_execute`, `c_execute`,
//! `skillprof slo`). What a step measured is a [`crate::record::traffic::TrafficStep`].

pub mod generator;
pub mod schedule;
pub mod stall;
