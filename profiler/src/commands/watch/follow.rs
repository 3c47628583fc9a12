//! `watch --follow`: a watched host that exits is followed to the process that takes its
//! place, as a systemd unit's restart, a container's or a deploy's puts one there. The
//! successor is the process that listens on --host-url's port, runs the same executable (by
//! path) and sits in the same cgroups as the host did: what serves the address the watch was
//! given, and nothing else that happens to run the same binary.

use std::fs;
use std::path::PathBuf;

use anyhow::{Context, Result};
use procfs::net::TcpState;
use procfs::process::{FDTarget, Process};

/// What a host's successor must share with it.
#[derive(Debug, Clone)]
pub struct Identity {
    exe: PathBuf,
    /// /proc/PID/cgroup as the host had it.
    cgroups: String,
    port: u16,
}

impl Identity {
    /// Host `pid`'s, which serves `url`.
    pub fn of(pid: u32, url: &str) -> Result<Identity> {
        let process =
            Process::new(pid as i32).with_context(|| format!("--follow: process {pid}"))?;
        let exe = process
            .exe()
            .with_context(|| format!("--follow: the executable of {pid} (/proc/{pid}/exe)"))?;
        let cgroups = cgroups(pid).with_context(|| format!("--follow: /proc/{pid}/cgroup"))?;
        let uri: hyper::Uri = url
            .parse()
            .with_context(|| format!("--host-url {url}: not a URL"))?;
        let port = uri.port_u16().unwrap_or(match uri.scheme_str() {
            Some("https") => 443,
            _ => 80,
        });
        Ok(Identity { exe, cgroups, port })
    }

    /// In words, for the watch's stderr.
    pub fn describe(&self) -> String {
        let cgroup = self
            .cgroups
            .lines()
            .find_map(|line| line.strip_prefix("0::"))
            .or_else(|| self.cgroups.lines().next())
            .unwrap_or("?");
        format!(
            "{} in cgroup {cgroup} listening on port {}",
            self.exe.display(),
            self.port
        )
    }

    /// The process that serves in the host's place now, if one does.
    pub fn successor(&self) -> Option<u32> {
        procfs::process::all_processes()
            .ok()?
            .filter_map(Result::ok)
            .filter(|process| process.exe().is_ok_and(|exe| exe == self.exe))
            .filter(|process| cgroups(process.pid as u32).is_ok_and(|c| c == self.cgroups))
            .find(|process| self.listens(process))
            .map(|process| process.pid as u32)
    }

    /// Whether `process` holds the socket listening on the port, in its own network namespace
    /// (a container's is not the watch's).
    fn listens(&self, process: &Process) -> bool {
        let listening: Vec<u64> = [process.tcp(), process.tcp6()]
            .into_iter()
            .flatten()
            .flatten()
            .filter(|entry| {
                entry.state == TcpState::Listen && entry.local_address.port() == self.port
            })
            .map(|entry| entry.inode)
            .collect();
        !listening.is_empty()
            && process.fd().is_ok_and(|fds| {
                fds.flatten().any(
                    |fd| matches!(fd.target, FDTarget::Socket(inode) if listening.contains(&inode)),
                )
            })
    }
}

fn cgroups(pid: u32) -> std::io::Result<String> {
    fs::read_to_string(format!("/proc/{pid}/cgroup"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This test process listens on a port: it is its own successor, and with another port
    /// or executable nothing is.
    #[test]
    fn the_successor_is_the_process_listening_on_the_port_with_the_same_executable_and_cgroups() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let me = std::process::id();
        let identity = Identity::of(me, &format!("http://127.0.0.1:{port}")).unwrap();
        assert_eq!(identity.successor(), Some(me));
        let elsewhere = Identity {
            port: port.wrapping_add(1),
            ..identity.clone()
        };
        assert_eq!(elsewhere.successor(), None);
        let other_binary = Identity {
            exe: PathBuf::from("/usr/bin/true"),
            ..identity.clone()
        };
        assert_eq!(other_binary.successor(), None);
        assert!(
            identity
                .describe()
                .contains(&format!("listening on port {port}"))
        );
    }
}
