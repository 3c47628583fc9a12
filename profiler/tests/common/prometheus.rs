//! A real Prometheus server (Debian's, which scripts/test.sh installs) for the tests that
//! have one scrape skillprof, and the loopback HTTP its API answers on.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use hyper::Method;
use serde_json::Value;
use skillprof::producers::hostctl::client::Http;

/// A free loopback port (bound and let go: a race only with other tests, which pick theirs
/// the same way).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A process killed and reaped when the test ends, however it ends.
pub struct Reaped(pub Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A busy loop on every CPU of the machine, each killed and reaped when the test ends: the
/// host's threads then wait for a CPU about half their time.
pub fn spin_every_cpu() -> Vec<Reaped> {
    let cpus = std::thread::available_parallelism().unwrap().get();
    (0..cpus)
        .map(|_| {
            Reaped(
                std::process::Command::new("sh")
                    .args(["-c", "while :; do :; done"])
                    .spawn()
                    .unwrap(),
            )
        })
        .collect()
}

/// A runtime for a test's blocking call into an async client.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// GET `path` on loopback `port`: its status and body; `None` if nothing answers.
pub fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let http = Http::new(&format!("http://127.0.0.1:{port}"));
    let reply = runtime()
        .block_on(http.send(Method::GET, path, [], None))
        .ok()?;
    Some((reply.status.as_u16(), reply.text()))
}

/// A real Prometheus server with `config`, on a port of its own.
pub fn start_prometheus_with(dir: &Path, config: &str) -> (Reaped, u16) {
    let port = free_port();
    let path = dir.join("prometheus.yml");
    fs::write(&path, config).unwrap();
    let child = Command::new("prometheus")
        .arg(format!("--config.file={}", path.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("tsdb").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(fs::File::create(dir.join("prometheus.err")).unwrap())
        .spawn()
        .expect("Debian's prometheus (scripts/test.sh installs it)");
    (Reaped(child), port)
}

/// The list `data.KEY` of Prometheus' API answer at `path`; empty while it does not answer.
fn api_list(port: u16, path: &str, key: &str) -> Vec<Value> {
    let Some((200, body)) = get(port, path) else {
        return Vec::new();
    };
    let mut answer: Value = serde_json::from_str(&body).unwrap();
    match answer["data"][key].take() {
        Value::Array(list) => list,
        _ => Vec::new(),
    }
}

/// Prometheus' answer to an instant query: each series' labels and value.
pub fn query(port: u16, promql: &str) -> Vec<(Value, f64)> {
    let encoded = percent_encoding::utf8_percent_encode(promql, percent_encoding::NON_ALPHANUMERIC);
    api_list(port, &format!("/api/v1/query?query={encoded}"), "result")
        .iter()
        .map(|series| {
            let value = series["value"][1].as_str().unwrap().parse().unwrap();
            (series["metric"].clone(), value)
        })
        .collect()
}

/// Prometheus' view of each of its targets: job, health and last error.
pub fn targets(port: u16) -> Vec<(String, String, String)> {
    api_list(port, "/api/v1/targets", "activeTargets")
        .iter()
        .map(|target| {
            let text = |value: &Value| value.as_str().unwrap_or_default().to_owned();
            (
                text(&target["labels"]["job"]),
                text(&target["health"]),
                text(&target["lastError"]),
            )
        })
        .collect()
}

/// `skillprof watch ARGS` of the skillprof executable `bin`, serving on a port of its own, its
/// stderr in `dir`, once it serves.
pub fn spawn_watch_of(bin: &Path, dir: &Path, args: &[&str]) -> (Reaped, u16, PathBuf) {
    let port = free_port();
    let stderr = dir.join(format!("watch-{port}.err"));
    let child = Command::new(bin)
        .arg("watch")
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(args)
        .stdout(Stdio::null())
        .stderr(fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    let watch = Reaped(child);
    super::cli::eventually(
        Duration::from_secs(30),
        "the watch to serve /metrics",
        || match scrape(port) {
            Some(_) => None,
            None => Some(fs::read_to_string(&stderr).unwrap_or_default()),
        },
    );
    (watch, port, stderr)
}

/// The watch's exposition on `port`, if it serves one.
pub fn scrape(port: u16) -> Option<String> {
    get(port, "/metrics").and_then(|(status, text)| (status == 200).then_some(text))
}
