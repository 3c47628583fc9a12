//! A skillhost started by hand, as a team's host under systemd would be, for the tests that
//! attach to a host skillprof did not start.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A skillhost started by hand, as a team's host under systemd would be: its own skill in
/// its own skills directory, a port of its own.
pub struct OutsideHost {
    pub child: Child,
    pub port: u16,
    pub skills: PathBuf,
    /// How it was started, to start it again.
    bin: PathBuf,
    args: Vec<String>,
}

/// What a host started by hand needs: a skills directory under `dir` holding the sample
/// `component` as skill `name`, and a free port.
pub fn skills_and_port(dir: &Path, component: &str, name: &str) -> (PathBuf, u16) {
    let skills = dir.join("their-skills");
    fs::create_dir_all(&skills).unwrap();
    fs::copy(
        super::sample_component(component),
        skills.join(format!("{name}.wasm")),
    )
    .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    (skills, port)
}

impl OutsideHost {
    pub fn start(dir: &Path) -> OutsideHost {
        Self::start_with(dir, &[])
    }

    /// With skillhost flags of its own (`args`).
    pub fn start_with(dir: &Path, args: &[&str]) -> OutsideHost {
        let bin = Path::new(env!("CARGO_BIN_EXE_skillprof")).with_file_name("skillhost");
        Self::start_from(&bin, dir, args)
    }

    /// The skillhost binary `bin` (a copy stripped of its symbols, say).
    pub fn start_from(bin: &Path, dir: &Path, args: &[&str]) -> OutsideHost {
        let (skills, port) = skills_and_port(dir, "hello", "their_own");
        let args = args.iter().map(|arg| arg.to_string()).collect();
        Self::spawn(bin.to_owned(), args, skills, port)
    }

    /// The host killed (SIGKILL) and started again as it was, on the same port, as systemd
    /// restarts a crashed unit: a new process in the same cgroup.
    pub fn restarted(mut self) -> OutsideHost {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        let (bin, args, skills) = (self.bin.clone(), self.args.clone(), self.skills.clone());
        Self::spawn(bin, args, skills, self.port)
    }

    fn spawn(bin: PathBuf, args: Vec<String>, skills: PathBuf, port: u16) -> OutsideHost {
        let child = Command::new(&bin)
            .args(["--skills-dir", skills.to_str().unwrap()])
            .args(["--port", &port.to_string(), "--scan-interval-ms", "50"])
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let host = OutsideHost {
            child,
            port,
            skills,
            bin,
            args,
        };
        let started = Instant::now();
        while !host.runtime().block_on(host.client().healthy()) {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "skillhost did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        host
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn client(&self) -> skillprof::producers::hostctl::Client {
        skillprof::producers::hostctl::Client::new(
            &self.url(),
            skillprof::record::profile::HostProfile::skillhost().dialect,
        )
    }

    pub fn runtime(&self) -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    pub fn get(&self, path: &str) -> serde_json::Value {
        self.runtime()
            .block_on(self.client().get_json(path))
            .unwrap()
    }
}

impl Drop for OutsideHost {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
