//! Load beyond one client: `l_execute_all` (closed loop) and `lo_execute` (open loop) drive
//! Locust's master and workers, the workers in network namespaces of the run's making that
//! stand in for separate client machines.
//! Locust is the engine (its master merges the workers' histograms); skillprof starts it,
//! holds the swarm for the entry's window, reads the figures back and removes everything it
//! made on every way it ends.

pub mod network;

pub mod swarm;

pub use network::LoadNetwork;
pub use swarm::{Swarm, SwarmSetup};
