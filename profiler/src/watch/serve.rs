//! The scrape endpoint: `GET /metrics` answers a fresh snapshot's OpenMetrics text; any
//! other path is a 404 that names the right one. Each connection is served on a task of its
//! own: Prometheus keeps its connection open between scrapes, and another client (a second
//! Prometheus, a person with curl) must not wait for it to close.

use std::convert::Infallible;
use std::sync::Arc;

use anyhow::{Context, Result};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// Answers scrapes on `listener` until the task is dropped; `scrape` renders one.
pub async fn serve(
    listener: TcpListener,
    scrape: Arc<dyn Fn() -> Result<String> + Send + Sync>,
) -> Result<()> {
    loop {
        let (stream, _) = listener.accept().await.context("accepting a scrape")?;
        let scrape = scrape.clone();
        let service = service_fn(move |request: Request<hyper::body::Incoming>| {
            let scrape = scrape.clone();
            async move { Ok::<_, Infallible>(answer(request.uri().path(), &*scrape).await) }
        });
        tokio::spawn(async move {
            // A client that goes away mid-answer is its business, not the watch's.
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn answer(
    path: &str,
    scrape: &(dyn Fn() -> Result<String> + Send + Sync),
) -> Response<Full<Bytes>> {
    let reply = |status, content_type: &str, body: String| {
        Response::builder()
            .status(status)
            .header("content-type", content_type)
            .body(Full::new(Bytes::from(body)))
            .expect("a static status and header")
    };
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
