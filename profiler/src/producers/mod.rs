//! What measures, drives or changes the machine, and fills the records: the sampler, the
//! probes, the host's control, Locust and traffic, the balloon, and the machine changes
//! with their guardians.

pub mod balloon;
pub mod hostctl;
pub mod locust;
pub mod probes;
pub mod sample;
pub mod system;
pub mod traffic;
