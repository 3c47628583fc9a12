//! A real skillhost in a temporary directory, serving the built sample skills.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;
use skillprof::hostctl::{Client, HostProcess, HostProfile, HostSpec, SampleSkills, SkillsDir};
use tempfile::TempDir;

/// A component from `cargo xtask build-skills`; a missing one fails the test loudly.
pub fn skill(name: &str) -> PathBuf {
    SampleSkills::beside_executable()
        .and_then(|samples| samples.path(name))
        .unwrap_or_else(|e| panic!("{e:#} (scripts/test.sh does)"))
}

pub struct TestHost {
    pub host: HostProcess,
    pub skills: SkillsDir,
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
            std::net::Ipv4Addr::LOCALHOST,
            Duration::from_secs(30),
        )
        .await
        .unwrap();
        TestHost {
            host,
            skills,
            _dir: dir,
        }
    }

    pub fn client(&self) -> &Client {
        &self.host.client
    }

    /// Registers `name` as a copy of the sample `artifact` and waits until it is listed.
    pub async fn add(&self, name: &str, artifact: &str) {
        self.skills.add(name, &skill(artifact)).unwrap();
        self.client()
            .wait_until_listed(&[name.to_owned()], Duration::from_secs(10))
            .await
            .unwrap();
    }

    pub async fn metrics(&self) -> Value {
        self.client().get_json("/metrics").await.unwrap()
    }

    pub fn log(&self) -> String {
        self.host.log_tail()
    }
}
