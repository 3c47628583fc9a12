//! The HTTP API. Status codes: 400 for what the client got wrong (bad JSON, bad or unknown
//! name, input the skill rejects), 500 for what the skill got wrong (compile failure, trap,
//! error, non-JSON answer), 503 when the pool is full, 504 past the deadline. Names, error
//! bodies and what differs in the 2024 dialect come from `dialect.rs` (`--api`).

use skillprof_common::host_metrics as metric;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use wasmtime::Engine;

use crate::config::{Api, HostConfig};
use crate::dialect::Listing;
use crate::heap;

const SERVER_TIMING: header::HeaderName = header::HeaderName::from_static("server-timing");
use crate::invoke::{Failure, Fault, Invocation};
use crate::marks::{self, Work};
use crate::metrics::{AtScrape, Metrics, OPENMETRICS_TEXT};
use crate::names;
use crate::registry::{Registry, Slot};

pub struct App {
    pub config: HostConfig,
    pub engine: Engine,
    pub registry: Arc<Registry>,
    pub metrics: Arc<Metrics>,
    pub admission: Semaphore,
}

/// The dialect's skill API, and skillhost's own routes beside it in every dialect: metrics,
/// configuration, trim.
pub fn router(app: Arc<App>) -> Router {
    let api = match app.config.api {
        Api::Skillhost | Api::Pharia2024 => Router::new()
            .route("/execute_skill", post(execute_skill))
            .route("/skills", get(skills))
            .route("/skills/{name}", get(skill_status))
            .route("/cached_skills/{name}", delete(evict))
            .route("/healthcheck", get(|| async { "ok" })),
        Api::Pharia2025 => Router::new()
            .route("/v1/skills/{namespace}/{name}/run", post(run_skill))
            .route("/v1/skills", get(skills))
            .route("/cached_skills/{namespace}/{name}", delete(evict_2025))
            .route("/health", get(|| async { "ok" })),
    };
    api.route("/cached_skills", get(cached_skills))
        .route("/metrics", get(metrics))
        .route("/metrics.json", get(metrics_json))
        .route("/config", get(config))
        .route("/admin/trim", post(trim))
        .with_state(app)
}

#[derive(Deserialize)]
struct ExecuteRequest {
    skill: String,
    #[serde(default = "empty_object")]
    input: Value,
}

fn empty_object() -> Value {
    json!({})
}

/// `{"skill": NAME, "input": {...}}`: skillhost's and the 2024 host's execute.
async fn execute_skill(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> Response {
    counted(&app, async {
        if let Some(refusal) = app.config.api.refused(&headers) {
            return refusal;
        }
        match serde_json::from_slice::<ExecuteRequest>(&body) {
            Ok(request) => execute(&app, &request.skill, &request.input).await,
            Err(e) => app.config.api.error(
                StatusCode::BAD_REQUEST,
                format!(
                    r#"invalid request body ({e}); expected {{"skill": NAME, "input": {{...}}}}"#
                ),
            ),
        }
    })
    .await
}

/// `POST /v1/skills/{namespace}/{name}/run` with the input as the body: the 2025 engine's.
async fn run_skill(
    State(app): State<Arc<App>>,
    Path((namespace, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    counted(&app, async {
        let api = app.config.api;
        let json = headers
            .get(header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| value.starts_with("application/json"));
        if !json {
            return api.error(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "Expected request with `Content-Type: application/json`",
            );
        }
        match serde_json::from_slice::<Value>(&body) {
            Ok(input) => execute(&app, &format!("{namespace}/{name}"), &input).await,
            Err(e) => api.error(
                StatusCode::BAD_REQUEST,
                format!("Failed to parse the request body as JSON: {e}"),
            ),
        }
    })
    .await
}

/// One execute request, counted in the host's request metrics by its status.
async fn counted(app: &App, answer: impl Future<Output = Response>) -> Response {
    let _in_flight = app.metrics.request_started();
    let arrived = std::time::Instant::now();
    let response = answer.await;
    app.metrics
        .request_finished(response.status().as_u16(), arrived.elapsed());
    response
}

/// Executes the skill `requested` (as the dialect names it) with `input`.
async fn execute(app: &App, requested: &str, input: &Value) -> Response {
    let api = app.config.api;
    let slot = match registered(app, requested) {
        Ok(slot) => slot,
        Err(lookup) => return lookup.into_response(app, StatusCode::BAD_REQUEST),
    };
    let Ok(_admitted) = app.admission.acquire().await else {
        return api.error(StatusCode::SERVICE_UNAVAILABLE, "the host is shutting down");
    };
    let work = Work::new(&slot.tag);
    let _answering = work.answering();
    let compiled = match app.registry.compiled(&slot, &work).await {
        Ok(compiled) => compiled,
        Err(reason) => {
            marks::failed(&slot.tag, marks::FAILED_UNLOADABLE);
            return api.error(api.unloadable(), format!("skill '{}' {reason}", slot.name));
        }
    };
    let input = serde_json::to_vec(input).expect("a JSON value serialises");
    let invocation = Invocation {
        skill: &slot.name,
        work: &work,
        pre: &compiled.pre,
        memory_limit: app.config.engine.memory_limit_bytes(),
        deadline: app.config.deadline(),
        metrics: &app.metrics,
    };
    let failure = match invocation.run(&input).await {
        Ok(answer) => {
            // Server-Timing lets clients split latency without trusting their own clocks.
            let timing = format!(
                "instantiate;dur={:.3}, call;dur={:.3}",
                answer.instantiate.as_secs_f64() * 1e3,
                answer.call.as_secs_f64() * 1e3
            );
            let headers = [
                (header::CONTENT_TYPE, "application/json".to_owned()),
                (SERVER_TIMING, timing),
            ];
            return (headers, answer.output).into_response();
        }
        Err(failure) => failure,
    };
    marks::failed(
        &slot.tag,
        match &failure {
            Failure::InvalidInput(_) => marks::FAILED_INPUT,
            Failure::Skill(Fault::Reported, _) => marks::FAILED_ERROR,
            Failure::Skill(Fault::Trapped, _) => marks::FAILED_TRAP,
            Failure::Skill(Fault::BadOutput, _) => marks::FAILED_OUTPUT,
            Failure::Deadline => marks::FAILED_DEADLINE,
            Failure::PoolExhausted(_) => marks::FAILED_NO_SLOT,
        },
    );
    match failure {
        Failure::InvalidInput(message) => api.error(
            api.rejected_input(),
            format!("skill '{}' rejected its input: {message}", slot.name),
        ),
        Failure::Skill(fault, message) => api.error(api.skill_failed(fault), message),
        Failure::Deadline => api.error(
            StatusCode::GATEWAY_TIMEOUT,
            format!(
                "skill '{}' passed its deadline of {} ms and was stopped; raise --deadline-ms",
                slot.name, app.config.deadline_ms
            ),
        ),
        Failure::PoolExhausted(message) => api.error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "no free pool slot for '{}': {message}; raise --pool-instances",
                slot.name
            ),
        ),
    }
}

/// Why a name does not address a skill.
enum Lookup {
    Invalid(String),
    Unknown(String),
}

impl Lookup {
    /// Executing an unknown skill is a bad request; addressing one by path is a 404.
    fn into_response(self, app: &App, unknown: StatusCode) -> Response {
        match self {
            Lookup::Invalid(why) => app.config.api.error(StatusCode::BAD_REQUEST, why),
            Lookup::Unknown(name) => app.config.api.error(
                unknown,
                format!("unknown skill '{name}'; GET /skills lists the registered ones"),
            ),
        }
    }
}

/// The skill `requested` names, in the API's dialect.
fn registered(app: &App, requested: &str) -> Result<Arc<Slot>, Lookup> {
    let unknown = || Lookup::Unknown(requested.to_owned());
    let name = app.config.api.local_name(requested).ok_or_else(unknown)?;
    names::validate(name).map_err(Lookup::Invalid)?;
    app.registry.get(name).ok_or_else(unknown)
}

async fn skills(State(app): State<Arc<App>>) -> Json<Vec<String>> {
    Json(
        app.config
            .api
            .listing(app.registry.names(), Listing::Registered),
    )
}

async fn cached_skills(State(app): State<Arc<App>>) -> Json<Vec<String>> {
    Json(
        app.config
            .api
            .listing(app.registry.cached_names(), Listing::Compiled),
    )
}

async fn skill_status(State(app): State<Arc<App>>, Path(name): Path<String>) -> Response {
    match registered(&app, &name) {
        Ok(slot) => Json(slot.status()).into_response(),
        Err(lookup) => lookup.into_response(&app, StatusCode::NOT_FOUND),
    }
}

async fn evict(State(app): State<Arc<App>>, Path(name): Path<String>) -> Response {
    let found = registered(&app, &name);
    match (app.config.api, found) {
        (Api::Skillhost, Ok(slot)) => {
            let evicted = app.registry.evict(&slot);
            Json(json!({ "skill": slot.name, "evicted": evicted })).into_response()
        }
        (Api::Skillhost, Err(lookup)) => lookup.into_response(&app, StatusCode::NOT_FOUND),
        // 2024: a message, 200 whether or not there was a compiled copy to drop.
        (_, found) => {
            let evicted = found.is_ok_and(|slot| app.registry.evict(&slot));
            let message = if evicted {
                format!("Skill {name} was removed from cache")
            } else {
                format!("Skill {name} was not in cache")
            };
            Json(json!(message)).into_response()
        }
    }
}

/// `DELETE /cached_skills/{namespace}/{name}`, the 2025 engine's: 200 with a message
/// whether or not there was a compiled copy to drop.
async fn evict_2025(
    State(app): State<Arc<App>>,
    Path((namespace, name)): Path<(String, String)>,
) -> Response {
    let evicted = registered(&app, &format!("{namespace}/{name}"))
        .is_ok_and(|slot| app.registry.evict(&slot));
    Json(json!(if evicted {
        "Skill removed from cache"
    } else {
        "Skill was not present in cache"
    }))
    .into_response()
}

/// The effective configuration, defaults included, so a profile records what really ran.
async fn config(State(app): State<Arc<App>>) -> Json<HostConfig> {
    Json(app.config.clone())
}

/// What only the registry and the engine know, read for a scrape.
fn at_scrape(app: &App) -> AtScrape {
    let pool = app.engine.pooling_allocator_metrics().map(|pool| {
        vec![
            ("component_instances", pool.component_instances()),
            ("core_instances", pool.core_instances()),
            ("memories", pool.memories() as u64),
            ("tables", pool.tables() as u64),
            ("stacks", pool.stacks() as u64),
            (
                metric::UNUSED_WARM_MEMORIES,
                pool.unused_warm_memories() as u64,
            ),
            (
                metric::UNUSED_MEMORY_BYTES_RESIDENT,
                pool.unused_memory_bytes_resident() as u64,
            ),
            ("unused_warm_tables", pool.unused_warm_tables() as u64),
            (
                metric::UNUSED_TABLE_BYTES_RESIDENT,
                pool.unused_table_bytes_resident() as u64,
            ),
        ]
    });
    AtScrape {
        registered_skills: app.registry.names().len() as u64,
        compiled_skills: app.registry.cached_names().len() as u64,
        failed_skills: app.registry.count_failed() as u64,
        max_concurrent_requests: app.config.effective_concurrency() as u64,
        pool: pool.unwrap_or_default(),
        heap: crate::heap::now(),
    }
}

async fn metrics(State(app): State<Arc<App>>) -> Response {
    let text = app.metrics.text(&at_scrape(&app));
    ([(header::CONTENT_TYPE, OPENMETRICS_TEXT)], text).into_response()
}

/// Hands the allocator's free memory back to the kernel now (what `--trim-after-compile` does
/// after each compile), answering the allocator's figures before and after. An admin route:
/// the host listens on loopback unless told otherwise.
async fn trim() -> Response {
    let trimmed = tokio::task::spawn_blocking(|| {
        let before = heap::now();
        heap::trim();
        json!({ "before": before, "after": heap::now() })
    })
    .await;
    match trimmed {
        Ok(figures) => Json(figures).into_response(),
        Err(panic) => (StatusCode::INTERNAL_SERVER_ERROR, panic.to_string()).into_response(),
    }
}

async fn metrics_json(State(app): State<Arc<App>>) -> Json<Value> {
    let mut report = app.metrics.json(&at_scrape(&app));
    report["allocator"] = json!(app.config.engine.allocator);
    Json(report)
}
