//! A real skillhost in a temporary directory, serving the built sample skills.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;
use skillprof::producers::hostctl::{Client, HostProcess, SampleSkills, SkillsDir};
use skillprof::record::profile::{HostProfile, HostSpec, SkillWorld};
use tempfile::TempDir;

#[path = "../../../tests/common/tools_python.rs"]
mod tools_python;

/// The sample `name` as built for `world` by `cargo xtask build-skills`; a missing one fails
/// the test loudly.
pub fn skill_of(world: SkillWorld, name: &str) -> PathBuf {
    SampleSkills::beside_executable(world)
        .and_then(|samples| samples.path(name))
        .unwrap_or_else(|e| panic!("{e:#} (scripts/test.sh does)"))
}

pub struct TestHost {
    pub host: HostProcess,
    pub skills: SkillsDir,
    /// The world of the profile it was started with: `add` registers samples built for it.
    pub world: SkillWorld,
    /// Holds the skills directory and the host's log until the host is dropped.
    _dir: TempDir,
}

impl TestHost {
    /// Our skillhost with `flags`, scanning its skills directory every 50 ms.
    pub async fn start(flags: &[&str]) -> TestHost {
        TestHost::start_in("skillhost", flags).await
    }

    /// The same, spoken to in the dialect of host profile `profile` (the host must be told
    /// to speak it too, in `flags`).
    pub async fn start_in(profile: &str, flags: &[&str]) -> TestHost {
        let dir = tempfile::tempdir().unwrap();
        let profile = HostProfile::load(profile).unwrap();
        let world = profile.registry.world;
        let skills =
            SkillsDir::create(&dir.path().join("skills"), profile.registry.clone()).unwrap();
        let mut extra = vec!["--scan-interval-ms".to_string(), "50".to_string()];
        extra.extend(flags.iter().map(|s| s.to_string()));
        let spec = HostSpec::new(
            profile,
            None,
            &HostProfile::skillhost().start.args,
            &extra,
            &[],
        )
        .unwrap();
        let host = HostProcess::start(
            &spec,
            skills.path(),
            &dir.path().join("host.log"),
            &dir.path().join("workdir"),
            None,
            std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 0),
            Duration::from_secs(30),
        )
        .await
        .unwrap();
        TestHost {
            host,
            skills,
            world,
            _dir: dir,
        }
    }

    pub fn client(&self) -> &Client {
        &self.host.client
    }

    /// Registers `name` as a copy of the sample `artifact`, built for the host's world, and
    /// waits until it is listed.
    pub async fn add(&self, name: &str, artifact: &str) {
        self.skills
            .add(name, &skill_of(self.world, artifact))
            .unwrap();
        self.client()
            .wait_until_listed(&[name.to_owned()], Duration::from_secs(10))
            .await
            .unwrap();
    }

    /// The host's counters in their JSON view.
    pub async fn metrics(&self) -> Value {
        self.client().get_json("/metrics.json").await.unwrap()
    }

    /// `GET /metrics` as parsed by the Prometheus project's own Python client (the text
    /// format's parser, and the strict OpenMetrics one, which must agree): every sample as
    /// `{"name{label=value,...}": value}`, label names sorted.
    pub async fn prometheus_samples(&self) -> Value {
        let reply = self
            .client()
            .send(hyper::Method::GET, "/metrics", None)
            .await
            .unwrap();
        assert!(reply.is_ok(), "{}", reply.text());
        let content_type = reply.headers["content-type"].to_str().unwrap();
        assert!(
            content_type.starts_with("application/openmetrics-text"),
            "{content_type}"
        );
        parse_prometheus(&reply.text())
    }

    pub fn log(&self) -> String {
        self.host.log_tail()
    }
}

const PARSE: &str = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families as prometheus
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics
text = sys.stdin.read()
def samples(parse):
    out = {}
    for family in parse(text):
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}"] = s.value
    return out
text_view, strict_view = samples(prometheus), samples(openmetrics)
assert text_view == strict_view, (text_view, strict_view)
print(json.dumps(strict_view))
"#;

fn parse_prometheus(text: &str) -> Value {
    tools_python::run(PARSE, &[], text)
}
