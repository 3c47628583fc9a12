//! What differs between the API dialects skillhost speaks (`--api`): how skills are named in
//! requests and listings, what an error body looks like, which status each failure gets,
//! and what a request must carry. The handlers in `api.rs` ask; they never match on the
//! dialect themselves (the routes each dialect serves are in `api::router`).

use axum::Json;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::config::Api;
use crate::invoke::Fault;

/// The Pharia hosts' one namespace here, watching the skills directory.
pub const NAMESPACE: &str = "dev";

/// Which of the two listings.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    Registered,
    Compiled,
}

impl Api {
    /// The registry's name for `requested`; `None` if it names no skill of ours (the 2024
    /// host reads a bare name as one of the empty `pharia-kernel-team` namespace).
    pub fn local_name(self, requested: &str) -> Option<&str> {
        match self {
            Api::Skillhost => Some(requested),
            Api::Pharia2024 | Api::Pharia2025 => requested
                .strip_prefix(NAMESPACE)
                .and_then(|rest| rest.strip_prefix('/')),
        }
    }

    /// A listing of registry names (sorted), as this dialect answers it. The 2024 host
    /// listed in no particular order, and the 2025 engine its compiled skills; here that
    /// order is a hash of each name, so that a client relying on sorted listings fails every
    /// time, not now and then. The 2025 engine sorts its registered skills.
    pub fn listing(self, mut names: Vec<String>, listing: Listing) -> Vec<String> {
        let unordered = match self {
            Api::Skillhost => return names,
            Api::Pharia2024 => true,
            Api::Pharia2025 => listing == Listing::Compiled,
        };
        if unordered {
            names.sort_by_cached_key(|name| Sha256::digest(name.as_bytes()));
        }
        names
            .into_iter()
            .map(|name| format!("{NAMESPACE}/{name}"))
            .collect()
    }

    /// Whether every request's lookup of its compiled skill goes through one actor, which
    /// compiles one skill at a time and answers no other request meanwhile: the 2024 host's
    /// skill store (its `act` awaits each fetch, compile included). The 2025 engine's loader
    /// compiles concurrently, as skillhost does.
    pub fn one_store_actor(self) -> bool {
        self == Api::Pharia2024
    }

    /// Whether an evicted skill's compiled code is freed at the cache's next lookup rather
    /// than at once: the 2025 engine's compiled-skill cache is moka's, which drops what it
    /// invalidated in its housekeeping, run by later cache operations. Measured on the real
    /// 0.15 binary: a drop gave back nothing, the next request for another skill 86 MB.
    pub fn frees_evicted_later(self) -> bool {
        self == Api::Pharia2025
    }

    pub fn error(self, status: StatusCode, message: impl Into<String>) -> Response {
        let message = message.into();
        match self {
            Api::Skillhost => (status, Json(json!({ "error": message }))).into_response(),
            Api::Pharia2024 => (status, Json(json!(message))).into_response(),
            Api::Pharia2025 => (status, message).into_response(),
        }
    }

    /// Input the skill rejected: the client's fault here and in 2025, a 500 in 2024.
    pub fn rejected_input(self) -> StatusCode {
        match self {
            Api::Skillhost | Api::Pharia2025 => StatusCode::BAD_REQUEST,
            Api::Pharia2024 => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// What the skill did wrong. The 2025 engine answers the skill's own error as the
    /// client's (400, "the skill you called responded with an error") and a trap as its
    /// runtime's (503).
    pub fn skill_failed(self, fault: Fault) -> StatusCode {
        match (self, fault) {
            (Api::Pharia2025, Fault::Reported) => StatusCode::BAD_REQUEST,
            (Api::Pharia2025, Fault::Trapped) => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// A component that does not compile or link: 503 from the 2025 engine ("Error
    /// loading skill"), 500 elsewhere.
    pub fn unloadable(self) -> StatusCode {
        match self {
            Api::Pharia2025 => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// Why an execute request may not run, if the dialect wants more than its body: the
    /// 2024 host required a bearer token (and never checked it).
    pub fn refused(self, headers: &HeaderMap) -> Option<Response> {
        if self != Api::Pharia2024 {
            return None;
        }
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| value.starts_with("Bearer "));
        (!bearer).then(|| {
            self.error(
                StatusCode::BAD_REQUEST,
                "Bearer token expected in the Authorization header",
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_2024_dialect_namespaces_names() {
        assert_eq!(
            Api::Pharia2024.local_name("dev/sample_py1"),
            Some("sample_py1")
        );
        assert_eq!(Api::Pharia2024.local_name("sample_py1"), None);
        assert_eq!(Api::Pharia2024.local_name("devx/a"), None);
        assert_eq!(Api::Skillhost.local_name("sample_py1"), Some("sample_py1"));
    }

    #[test]
    fn the_pharia_listings_are_namespaced_and_sorted_only_where_the_host_sorts() {
        let names: Vec<String> = (0..20).map(|i| format!("s{i:02}")).collect();
        let sorted = |listed: &Vec<String>| {
            let mut sorted = listed.clone();
            sorted.sort();
            *listed == sorted
        };
        for (api, listing, in_order) in [
            (Api::Pharia2024, Listing::Registered, false),
            (Api::Pharia2024, Listing::Compiled, false),
            (Api::Pharia2025, Listing::Registered, true),
            (Api::Pharia2025, Listing::Compiled, false),
        ] {
            let listed = api.listing(names.clone(), listing);
            assert!(listed.iter().all(|n| n.starts_with("dev/")));
            assert_eq!(sorted(&listed), in_order);
        }
        assert_eq!(
            Api::Skillhost.listing(names.clone(), Listing::Registered),
            names
        );
    }
}
