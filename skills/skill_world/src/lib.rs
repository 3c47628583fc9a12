//! Which world a Rust sample skill is built for is this crate's business alone: a skill writes
//! `fn run(input: Vec<u8>) -> Result<Vec<u8>, Failure>` once and calls
//! `skill_world::export_skill!(run)`. Without features the component implements
//! `skillprof:skill` (a world-level `run`); with `pharia` it exports
//! `pharia:skill/skill-handler@0.2.0`, as the 2024 host requires (`cargo xtask build-skills`
//! builds both).

#[cfg(not(feature = "pharia"))]
#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        world: "skill",
        path: "../wit/skillprof",
        pub_export_macro: true,
        export_macro_name: "export_bindings",
        default_bindings_module: "skill_world::bindings",
    });
}

#[cfg(feature = "pharia")]
#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        world: "skill",
        path: "../wit/pharia",
        pub_export_macro: true,
        export_macro_name: "export_bindings",
        default_bindings_module: "skill_world::bindings",
    });
    pub use self::exports::pharia::skill::skill_handler::{Error, Guest};
}

/// Why a skill gave no answer. Both worlds have these two cases, under their own names.
#[derive(Debug)]
pub enum Failure {
    /// The request's input is not what the skill accepts.
    InvalidInput(String),
    /// The skill failed on its own account (an exhausted resource, a bug).
    Internal(String),
}

impl From<Failure> for bindings::Error {
    fn from(failure: Failure) -> Self {
        match failure {
            Failure::InvalidInput(message) => bindings::Error::InvalidInput(message),
            Failure::Internal(message) => bindings::Error::Internal(message),
        }
    }
}

/// Exports `$run` as the skill's entry point in the world this crate was built for.
#[macro_export]
macro_rules! export_skill {
    ($run:path) => {
        struct Skill;

        impl $crate::bindings::Guest for Skill {
            fn run(input: Vec<u8>) -> Result<Vec<u8>, $crate::bindings::Error> {
                $run(input).map_err(Into::into)
            }
        }

        $crate::bindings::export_bindings!(Skill);
    };
}
