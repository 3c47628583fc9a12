//! A small HTTP/1 client for the skill host API. Connections are pooled and kept alive,
//! so the runner measures the host, not TCP handshakes.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{HeaderMap, Method, Request, StatusCode};
use hyper_util::client::legacy::Client as Pool;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::record::profile::{Dialect, Route};

/// A client that speaks one host's dialect (see [`Dialect`]): callers use skillprof's own
/// skill names, the client qualifies them, routes them and adds the headers the host wants.
#[derive(Clone)]
pub struct Client {
    http: Http,
    dialect: Arc<Dialect>,
}

/// Pooled, kept-alive HTTP/1 to one server: the host here, Locust's master in `load`.
#[derive(Clone)]
pub struct Http {
    base: String,
    pool: Pool<HttpConnector, Full<Bytes>>,
}

impl Http {
    /// A client for the server at `base` (e.g. `http://127.0.0.1:8081`).
    pub fn new(base: &str) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let pool = Pool::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        Http {
            base: base.trim_end_matches('/').to_owned(),
            pool,
        }
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// Sends one request with `headers` and a body of its content type; transport failures
    /// are errors, any HTTP status is a [`Reply`].
    pub async fn send<'a>(
        &self,
        method: Method,
        path: &str,
        headers: impl IntoIterator<Item = (&'a String, &'a String)>,
        body: Option<(&str, Vec<u8>)>,
    ) -> Result<Reply> {
        let uri = format!("{}{path}", self.base);
        let mut request = Request::builder().method(method.clone()).uri(&uri);
        for (name, value) in headers {
            request = request.header(name, value);
        }
        if let Some((content_type, _)) = &body {
            request = request.header(hyper::header::CONTENT_TYPE, *content_type);
        }
        let body = body.map(|(_, body)| body).unwrap_or_default();
        let request = request.body(Full::new(Bytes::from(body)))?;
        let response = self
            .pool
            .request(request)
            .await
            .with_context(|| format!("{method} {uri}"))?;
        let status = response.status();
        let headers = response.headers().clone();
        let body = response
            .into_body()
            .collect()
            .await
            .with_context(|| format!("reading the answer to {method} {uri}"))?
            .to_bytes();
        Ok(Reply {
            ok: status.is_success(),
            status,
            headers,
            body,
        })
    }
}

/// One answer of the host: its status, headers and body, whatever the status.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// Whether the status means success: any 2xx, or what the route says it answers.
    ok: bool,
}

impl Reply {
    pub fn is_ok(&self) -> bool {
        self.ok
    }

    /// The body as text, for messages.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json<T: DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_slice(&self.body).with_context(|| {
            format!(
                "the host answered {} with a body that is not the expected JSON: {}",
                self.status,
                self.text()
            )
        })
    }

    /// One metric's duration from the `Server-Timing` header (skillhost sends `instantiate`
    /// and `call`), in milliseconds.
    pub fn server_timing(&self, metric: &str) -> Option<f64> {
        let header = self.headers.get("server-timing")?.to_str().ok()?;
        header.split(',').find_map(|entry| {
            let mut parts = entry.trim().split(';');
            (parts.next()? == metric)
                .then(|| parts.find_map(|p| p.trim().strip_prefix("dur=")?.parse().ok()))?
        })
    }

    /// The body's `error` message if there is one (skillhost's `{"error": …}`, or a bare
    /// JSON string as the 2024 host answers), else the body.
    pub fn error_message(&self) -> String {
        match self.json::<Value>() {
            Ok(Value::String(message)) => message,
            Ok(value) => value
                .get("error")
                .and_then(Value::as_str)
                .map_or_else(|| self.text(), str::to_owned),
            Err(_) => self.text(),
        }
    }
}

impl Client {
    /// A client for the host at `base` (e.g. `http://127.0.0.1:8081`).
    pub fn new(base: &str, dialect: Dialect) -> Self {
        Client {
            http: Http::new(base),
            dialect: Arc::new(dialect),
        }
    }

    pub fn base(&self) -> &str {
        self.http.base()
    }

    /// The same host and dialect with a connection pool of its own: its connections are
    /// driven by the runtime that uses it (a load generator pinned to a CPU of its own).
    pub fn with_own_pool(&self) -> Client {
        Client {
            http: Http::new(self.base()),
            dialect: Arc::clone(&self.dialect),
        }
    }

    pub fn dialect(&self) -> &Dialect {
        &self.dialect
    }

    /// One request to a route of the dialect that names no skill, without a body.
    pub async fn call(&self, route: &Route) -> Result<Reply> {
        self.on_route(route, &route.path, None).await
    }

    /// One request on `route` to `path` (the route's, placeholders filled in); the reply is
    /// a success if its status is one the route answers on success.
    async fn on_route(&self, route: &Route, path: &str, body: Option<Vec<u8>>) -> Result<Reply> {
        let mut reply = self.send(route.method.clone(), path, body).await?;
        reply.ok = route.succeeded(reply.status.as_u16());
        Ok(reply)
    }

    /// Sends one request outside the dialect's routes (skillhost's `/metrics`, a test's
    /// malformed request) with the dialect's headers and a JSON body, if any; any 2xx is a
    /// success.
    pub async fn send(&self, method: Method, path: &str, body: Option<Vec<u8>>) -> Result<Reply> {
        let body = body.map(|body| ("application/json", body));
        self.http
            .send(method, path, &self.dialect.headers, body)
            .await
    }

    /// GET of a path outside the dialect's routes.
    pub async fn get(&self, path: &str) -> Result<Reply> {
        self.send(Method::GET, path, None).await
    }

    /// GET of a JSON document that must succeed.
    pub async fn get_json<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        let reply = self.get(path).await?;
        if !reply.is_ok() {
            bail!("GET {path}: {} {}", reply.status, reply.error_message());
        }
        reply.json()
    }

    /// Registered skills of our namespace, sorted, by our names.
    pub async fn skills(&self) -> Result<Vec<String>> {
        self.listing(&self.dialect.routes.registry()?.skills).await
    }

    /// Compiled skills, as [`Client::skills`].
    pub async fn cached_skills(&self) -> Result<Vec<String>> {
        self.listing(&self.dialect.routes.registry()?.cached_skills)
            .await
    }

    async fn listing(&self, route: &Route) -> Result<Vec<String>> {
        let reply = self.call(route).await?;
        if !reply.is_ok() {
            bail!("{route}: {} {}", reply.status, reply.error_message());
        }
        self.dialect
            .listed(reply.json()?)
            .with_context(|| format!("{route}"))
    }

    /// Executes skill `skill` (our name) once.
    pub async fn execute(&self, skill: &str, input: &Value) -> Result<Reply> {
        let route = &self.dialect.routes.execute;
        self.on_route(
            route,
            &self.dialect.path(route, skill),
            Some(self.dialect.execute_body(skill, input).into_bytes()),
        )
        .await
    }

    /// Drops skill `skill`'s compiled copy.
    pub async fn drop_cached(&self, skill: &str) -> Result<Reply> {
        let route = &self.dialect.routes.registry()?.drop_cached;
        self.on_route(route, &self.dialect.path(route, skill), None)
            .await
    }

    /// Polls `GET /skills` until every one of `names` is listed, as the harness did after
    /// adding skills: hosts notice new files only at their next scan. A host of one component
    /// (no listing) serves it from its start: nothing to wait for.
    pub async fn wait_until_listed(&self, names: &[String], timeout: Duration) -> Result<()> {
        if self.dialect.routes.skills.is_none() {
            return Ok(());
        }
        self.wait_for_listing(timeout, |listed| {
            let missing: Vec<&String> = names.iter().filter(|n| !listed.contains(n)).collect();
            (!missing.is_empty()).then(|| format!("the host did not list {missing:?}"))
        })
        .await
    }

    /// Polls `GET /skills` until `name` is no longer listed.
    pub async fn wait_until_unlisted(&self, name: &str, timeout: Duration) -> Result<()> {
        self.wait_for_listing(timeout, |listed| {
            listed
                .iter()
                .any(|s| s == name)
                .then(|| format!("the host still lists {name}"))
        })
        .await
    }

    /// Polls until `pending` (given the listed skills) returns `None`, or fails with its
    /// last answer after `timeout`.
    async fn wait_for_listing(
        &self,
        timeout: Duration,
        pending: impl Fn(&[String]) -> Option<String>,
    ) -> Result<()> {
        let started = std::time::Instant::now();
        loop {
            let Some(why) = pending(&self.skills().await?) else {
                return Ok(());
            };
            if started.elapsed() > timeout {
                bail!(
                    "{why} {} s after the skills directory changed",
                    timeout.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Whether the host answers its health check now.
    pub async fn healthy(&self) -> bool {
        matches!(self.call(&self.dialect.routes.health).await, Ok(reply) if reply.is_ok())
    }
}
