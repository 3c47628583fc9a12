//! The Prometheus HTTP query API (`/api/v1/query`, `/api/v1/query_range`), which Prometheus,
//! Thanos, Mimir and VictoriaMetrics all serve: what `capacity --prometheus` reads the watch's
//! series through. Every failure says what answered, or that nothing did.

use std::collections::BTreeMap;

use anyhow::{Context as _, Result, bail};
use hyper::Method;
use serde::Deserialize;

use crate::producers::hostctl::client::Http;

/// One series of an answer: its labels and its points (Unix seconds, value).
#[derive(Debug, Clone, Default)]
pub struct Series {
    pub labels: BTreeMap<String, String>,
    pub points: Vec<(f64, f64)>,
}

impl Series {
    /// The value of `label`, or "" without it.
    pub fn label(&self, label: &str) -> &str {
        self.labels.get(label).map_or("", String::as_str)
    }

    /// The last point's value.
    pub fn last(&self) -> Option<f64> {
        self.points.last().map(|&(_, value)| value)
    }
}

pub struct Prometheus {
    http: Http,
    url: String,
}

/// Every answer's envelope.
#[derive(Deserialize)]
struct Status {
    status: String,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
struct Answer {
    #[serde(default)]
    data: Option<Data>,
}

#[derive(Deserialize)]
struct Data {
    result: Vec<Raw>,
}

#[derive(Deserialize)]
struct Raw {
    metric: BTreeMap<String, String>,
    #[serde(default)]
    value: Option<(f64, String)>,
    #[serde(default)]
    values: Vec<(f64, String)>,
}

impl Prometheus {
    /// A client for the server at `url` (`http://host:port`, with a path prefix if it has
    /// one); refuses anything but http.
    pub fn new(url: &str) -> Result<Prometheus> {
        if !url.starts_with("http://") {
            bail!(
                "--prometheus {url}: give its http:// address (capacity speaks plain HTTP to \
                 the query API; for one behind TLS, query a local Prometheus or a proxy)"
            );
        }
        Ok(Prometheus {
            http: Http::new(url),
            url: url.trim_end_matches('/').to_owned(),
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Whether the API answers at all, checked once before any work: a clear error for a
    /// server that does not answer, one that wants credentials, and anything that is not
    /// Prometheus' API.
    pub async fn check(&self) -> Result<()> {
        self.query("vector(1)", None).await.map(|_| ())
    }

    /// An instant query at `at` (Unix seconds; now without it).
    pub async fn query(&self, promql: &str, at: Option<f64>) -> Result<Vec<Series>> {
        let mut path = format!("/api/v1/query?query={}", encode(promql));
        if let Some(at) = at {
            path.push_str(&format!("&time={at:.3}"));
        }
        self.get(&path, promql).await
    }

    /// A range query from `start` to `end` every `step` seconds.
    pub async fn range(
        &self,
        promql: &str,
        start: f64,
        end: f64,
        step: f64,
    ) -> Result<Vec<Series>> {
        let path = format!(
            "/api/v1/query_range?query={}&start={start:.3}&end={end:.3}&step={step}",
            encode(promql)
        );
        self.get(&path, promql).await
    }

    /// The label sets of the series `matcher` selects that have samples between `start` and
    /// `end` (`/api/v1/series`).
    pub async fn series(
        &self,
        matcher: &str,
        start: f64,
        end: f64,
    ) -> Result<Vec<BTreeMap<String, String>>> {
        let path = format!(
            "/api/v1/series?match[]={}&start={start:.3}&end={end:.3}",
            encode(matcher)
        );
        let text = self.answer(&path, matcher).await?;
        #[derive(Deserialize)]
        struct Found {
            data: Vec<BTreeMap<String, String>>,
        }
        let found: Found = serde_json::from_str(&text)
            .with_context(|| format!("reading {}'s series for {matcher}", self.url))?;
        Ok(found.data)
    }

    async fn get(&self, path: &str, promql: &str) -> Result<Vec<Series>> {
        let text = self.answer(path, promql).await?;
        let answer: Answer = serde_json::from_str(&text).context("an answer without data")?;
        let data = answer.data.context("an answer without data")?;
        Ok(data
            .result
            .into_iter()
            .map(|raw| {
                let points = raw
                    .value
                    .into_iter()
                    .chain(raw.values)
                    .filter_map(|(at, value)| Some((at, value.parse::<f64>().ok()?)))
                    .filter(|(_, value)| value.is_finite())
                    .collect();
                Series {
                    labels: raw.metric,
                    points,
                }
            })
            .collect())
    }

    /// The body of a successful answer at `path`; errors say what answered, or that nothing
    /// did, and what refused `asked`.
    async fn answer(&self, path: &str, asked: &str) -> Result<String> {
        let reply = self
            .http
            .send(Method::GET, path, [], None)
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "Prometheus at {} does not answer ({:#}): is it running, and is this its \
                     address?",
                    self.url,
                    e
                )
            })?;
        let status = reply.status.as_u16();
        if status == 401 || status == 403 {
            bail!(
                "Prometheus at {} answered {} {}: it wants credentials, which capacity does \
                 not send; query one that answers without them (a local Prometheus, or a \
                 proxy that adds them)",
                self.url,
                status,
                reply.status.canonical_reason().unwrap_or("")
            );
        }
        let text = reply.text();
        let answer: Status = serde_json::from_str(&text).with_context(|| {
            format!(
                "{} answered {status} with something that is not Prometheus' query API: {}",
                self.url,
                text.chars().take(200).collect::<String>()
            )
        })?;
        if answer.status != "success" {
            bail!(
                "Prometheus at {} refused `{asked}`: {}",
                self.url,
                answer.error.unwrap_or_else(|| format!("status {status}"))
            );
        }
        Ok(text)
    }
}

/// A query as a URL's query string carries it.
fn encode(promql: &str) -> String {
    percent_encoding::utf8_percent_encode(promql, percent_encoding::NON_ALPHANUMERIC).to_string()
}
