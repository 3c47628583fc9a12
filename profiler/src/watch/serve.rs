//! The scrape endpoint: `GET /metrics` answers a fresh snapshot's OpenMetrics text; any
//! other path is a 404 that names the right one. Each connection is served on a task of its
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

/// Longest a client may take over its TLS handshake before its connection is dropped.
const HANDSHAKE: Duration = Duration::from_secs(10);

/// Answers scrapes on `listener` until the task is dropped.
pub async fn serve(
    listener: TcpListener,
    scrape: Scrape,
    protection: Option<Protection>,
) -> Result<()> {
    loop {
        let (stream, _) = listener.accept().await.context("accepting a scrape")?;
        let scrape = scrape.clone();
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
                        connection(stream, scrape, auth).await;
                    }
                }
                None => connection(stream, scrape, auth).await,
            }
        });
    }
}

/// Serves one connection's requests.
async fn connection(
    stream: impl AsyncRead + AsyncWrite + Unpin + Send + 'static,
    scrape: Scrape,
    auth: Option<Arc<super::web_config::BasicAuth>>,
) {
    let service = service_fn(move |request: Request<hyper::body::Incoming>| {
        let (scrape, auth) = (scrape.clone(), auth.clone());
        async move {
            let allowed = auth.is_none_or(|auth| {
                let header = request
                    .headers()
                    .get(hyper::header::AUTHORIZATION)
                    .and_then(|value| value.to_str().ok());
                // bcrypt takes tens of ms of CPU on a first sight of a password.
                tokio::task::block_in_place(|| auth.allows(header))
            });
            Ok::<_, Infallible>(match allowed {
                true => answer(request.uri().path(), &*scrape).await,
                false => unauthorized(),
            })
        }
    });
    // A client that goes away mid-answer is its business, not the watch's.
    let _ = http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

fn reply(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(Full::new(Bytes::from(body)))
        .expect("a static status and header")
}

/// 401, and nothing of the host.
fn unauthorized() -> Response<Full<Bytes>> {
    let mut response = reply(
        StatusCode::UNAUTHORIZED,
        "text/plain",
        "Unauthorized\n".into(),
    );
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
            "skillprof watch serves /metrics\n".into(),
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
