//! The scrape endpoint: `GET /metrics` answers a fresh snapshot's OpenMetrics text, and
//! `GET /debug/pprof/profile?seconds=N` the host's CPU profile over the next N seconds (what
//! Parca and Pyroscope scrape); any other path is a 404 that names the right ones. Each connection is served on a task of its
//! own: Prometheus keeps its connection open between scrapes, and another client (a second
//! Prometheus, a person with curl, one that never finishes its TLS handshake) must not wait
//! for it. With `--web-config`, the connection is TLS and every request must authenticate.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;

use super::web_config::Protection;

/// Renders one scrape.
pub type Scrape = Arc<dyn Fn() -> Result<String> + Send + Sync>;

/// The pprof bytes of the host's CPU over the next `seconds`.
pub type Profile = Arc<
    dyn Fn(u64) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Vec<u8>>> + Send>>
        + Send
        + Sync,
>;

/// The longest profile window asked for (Go's net/http/pprof's default is 30 s).
const MAX_PROFILE_S: u64 = 60;

/// Longest a client may take over its TLS handshake before its connection is dropped.
const HANDSHAKE: Duration = Duration::from_secs(10);

/// Answers scrapes on `listener` until the task is dropped.
pub async fn serve(
    listener: TcpListener,
    scrape: Scrape,
    profile: Profile,
    protection: Option<Protection>,
) -> Result<()> {
    loop {
        let (stream, _) = listener.accept().await.context("accepting a scrape")?;
        let (scrape, profile) = (scrape.clone(), profile.clone());
        let protection = protection.clone();
        tokio::spawn(async move {
            let auth = protection.as_ref().and_then(|p| p.auth.clone());
            match protection.and_then(|p| p.tls) {
                Some(tls) => {
                    // A client without the certificate the configuration requires, or that
                    // speaks no TLS, ends here: it gets no HTTP answer at all.
                    if let Ok(Ok(stream)) =
                        tokio::time::timeout(HANDSHAKE, tls.accept(stream)).await
                    {
                        connection(stream, scrape, profile, auth).await;
                    }
                }
                None => connection(stream, scrape, profile, auth).await,
            }
        });
    }
}

/// Serves one connection's requests.
async fn connection(
    stream: impl AsyncRead + AsyncWrite + Unpin + Send + 'static,
    scrape: Scrape,
    profile: Profile,
    auth: Option<Arc<super::web_config::BasicAuth>>,
) {
    let service = service_fn(move |request: Request<hyper::body::Incoming>| {
        let (scrape, profile, auth) = (scrape.clone(), profile.clone(), auth.clone());
        async move {
            let allowed = auth.is_none_or(|auth| {
                let header = request
                    .headers()
                    .get(hyper::header::AUTHORIZATION)
                    .and_then(|value| value.to_str().ok());
                // bcrypt takes tens of ms of CPU on a first sight of a password.
                tokio::task::block_in_place(|| auth.allows(header))
            });
            Ok::<_, Infallible>(match (allowed, request.uri().path()) {
                (false, _) => unauthorized(),
                (true, PROFILE_PATH) => profiled(request.uri().query(), &profile).await,
                (true, path) => answer(path, &*scrape).await,
            })
        }
    });
    // A client that goes away mid-answer is its business, not the watch's.
    let _ = http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

const PROFILE_PATH: &str = "/debug/pprof/profile";

fn reply(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(Full::new(body.into()))
        .expect("a static status and header")
}

/// `/debug/pprof/profile?seconds=N`: the profile over the next N seconds (30 without it),
/// or why not.
async fn profiled(query: Option<&str>, profile: &Profile) -> Response<Full<Bytes>> {
    let asked = query
        .unwrap_or_default()
        .split('&')
        .find_map(|pair| pair.strip_prefix("seconds="));
    let seconds = match asked.map(str::parse::<u64>) {
        None => 30,
        Some(Ok(seconds)) if (1..=MAX_PROFILE_S).contains(&seconds) => seconds,
        _ => {
            return reply(
                StatusCode::BAD_REQUEST,
                "text/plain",
                format!("seconds must be a whole number from 1 to {MAX_PROFILE_S}\n"),
            );
        }
    };
    match profile(seconds).await {
        Ok(bytes) => reply(StatusCode::OK, "application/octet-stream", bytes),
        Err(error) => reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            "text/plain",
            format!("skillprof watch could not profile the host: {error:#}\n"),
        ),
    }
}

/// 401, and nothing of the host.
fn unauthorized() -> Response<Full<Bytes>> {
    let mut response = reply(StatusCode::UNAUTHORIZED, "text/plain", "Unauthorized\n");
    response.headers_mut().insert(
        hyper::header::WWW_AUTHENTICATE,
        hyper::header::HeaderValue::from_static("Basic realm=\"skillprof watch\""),
    );
    response
}

async fn answer(
    path: &str,
    scrape: &(dyn Fn() -> Result<String> + Send + Sync),
) -> Response<Full<Bytes>> {
    if path != "/metrics" {
        return reply(
            StatusCode::NOT_FOUND,
            "text/plain",
            "skillprof watch serves /metrics and /debug/pprof/profile?seconds=N\n",
        );
    }
    // Reading the probes' maps and /proc blocks, briefly; this task has the thread to itself.
    match tokio::task::block_in_place(scrape) {
        Ok(text) => reply(StatusCode::OK, super::exposition::CONTENT_TYPE, text),
        Err(error) => reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            "text/plain",
            format!("skillprof watch could not read the host: {error:#}\n"),
        ),
    }
}
