//! What differs between the API dialects skillhost speaks (`--api`): how skills are named in
//! requests and listings, what an error body looks like, which status input a skill rejects
//! gets, and what a request must carry. The handlers in `api.rs` ask; they never match on
//! the dialect themselves.

use axum::Json;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::config::Api;

/// The 2024 host's one namespace here, watching the skills directory.
const NAMESPACE: &str = "dev";

impl Api {
    /// The registry's name for `requested`; `None` if it names no skill of ours (the 2024
    /// host reads a bare name as one of the empty `pharia-kernel-team` namespace).
    pub fn local_name(self, requested: &str) -> Option<&str> {
        match self {
            Api::Skillhost => Some(requested),
            Api::Pharia2024 => requested
                .strip_prefix(NAMESPACE)
                .and_then(|rest| rest.strip_prefix('/')),
        }
    }

    /// A listing of registry names (sorted), as this dialect answers it. The 2024 host
    /// listed in no particular order; here the order is a hash of each name, so that a
    /// client relying on sorted listings fails every time, not now and then.
    pub fn listing(self, mut names: Vec<String>) -> Vec<String> {
        match self {
            Api::Skillhost => names,
            Api::Pharia2024 => {
                names.sort_by_cached_key(|name| Sha256::digest(name.as_bytes()));
                names
                    .into_iter()
                    .map(|name| format!("{NAMESPACE}/{name}"))
                    .collect()
            }
        }
    }

    pub fn error(self, status: StatusCode, message: impl Into<String>) -> Response {
        let message = message.into();
        match self {
            Api::Skillhost => (status, Json(json!({ "error": message }))).into_response(),
            Api::Pharia2024 => (status, Json(json!(message))).into_response(),
        }
    }

    /// Input the skill rejected: the client's fault here, a 500 in 2024.
    pub fn rejected_input(self) -> StatusCode {
        match self {
            Api::Skillhost => StatusCode::BAD_REQUEST,
            Api::Pharia2024 => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// Why an execute request may not run, if the dialect wants more than its body: the
    /// 2024 host required a bearer token (and never checked it).
    pub fn refused(self, headers: &HeaderMap) -> Option<Response> {
        if self == Api::Skillhost {
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
    fn the_2024_listing_is_namespaced_and_not_sorted() {
        let names: Vec<String> = (0..20).map(|i| format!("s{i:02}")).collect();
        let listed = Api::Pharia2024.listing(names.clone());
        assert!(listed.iter().all(|n| n.starts_with("dev/")));
        let mut sorted = listed.clone();
        sorted.sort();
        assert_ne!(listed, sorted);
        assert_eq!(Api::Skillhost.listing(names.clone()), names);
    }
}
