//! Which world a Rust sample skill is built for is this crate's business alone: a skill writes
//! `fn run(input: Vec<u8>) -> Result<Vec<u8>, Failure>` once and calls
//! `skill_world::export_skill!(run)`. Without features the component implements
//! `skillprof:skill` (a world-level `run`); with `pharia` it exports
//! `pharia:skill/skill-handler@0.2.0`, as the 2024 host requires; with `wasi-http` it is a
//! `wasi:http/proxy` component whose every request runs the skill on its body, as
//! `wasmtime serve` requires (`cargo xtask build-skills` builds all three).

#[cfg(not(any(feature = "pharia", feature = "wasi-http")))]
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

#[cfg(feature = "wasi-http")]
mod wasi_http;
#[cfg(feature = "wasi-http")]
#[doc(hidden)]
pub use {wasi_http::handle, wasip2};

/// Why a skill gave no answer. Both worlds have these two cases, under their own names.
#[derive(Debug)]
pub enum Failure {
    /// The request's input is not what the skill accepts.
    InvalidInput(String),
    /// The skill failed on its own account (an exhausted resource, a bug).
    Internal(String),
}

#[cfg(not(feature = "wasi-http"))]
impl From<Failure> for bindings::Error {
    fn from(failure: Failure) -> Self {
        match failure {
            Failure::InvalidInput(message) => bindings::Error::InvalidInput(message),
            Failure::Internal(message) => bindings::Error::Internal(message),
        }
    }
}

/// Exports `$run` as the skill's entry point in the world this crate was built for.
#[cfg(not(feature = "wasi-http"))]
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

/// Exports `$run` as the component's `wasi:http/incoming-handler`.
#[cfg(feature = "wasi-http")]
#[macro_export]
macro_rules! export_skill {
    ($run:path) => {
        struct Skill;

        impl $crate::wasip2::exports::http::incoming_handler::Guest for Skill {
            fn handle(
                request: $crate::wasip2::http::types::IncomingRequest,
                response: $crate::wasip2::http::types::ResponseOutparam,
            ) {
                $crate::handle(request, response, $run)
            }
        }

        $crate::wasip2::http::proxy::export!(Skill);
    };
}
