//! The cmds command `trim`: the host's allocator is asked to give the free memory it keeps
//! back to the kernel, and the entry's RSS drop is what it had kept. Through the profile's
//! trim route (skillhost's `POST /admin/trim`), or, for any glibc host, through ptrace
//! (`ptrace_trim`).

use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use super::ptrace_trim;
use super::{Client, HostProfile};

use crate::record::host::{TrimBy, Trimmed};

/// How `trim` reaches the host's allocator.
impl TrimBy {
    /// As the `trim_by` column and meta.json spell it.
    pub fn name(self) -> &'static str {
        match self {
            TrimBy::Route => "route",
            TrimBy::Ptrace => "ptrace",
        }
    }
}

impl Trimmed {
    pub fn by(&self) -> TrimBy {
        match self.call {
            Some(_) => TrimBy::Ptrace,
            None => TrimBy::Route,
        }
    }
}

/// How `trim` lines reach this host: `--trim-by`, or else the profile's route if it has one.
/// Refused before the run when neither works.
pub fn resolve(asked: Option<TrimBy>, profile: &HostProfile, line: usize) -> Result<TrimBy> {
    let has_route = profile.dialect.routes.trim.is_some();
    match asked {
        Some(TrimBy::Route) | None if has_route => Ok(TrimBy::Route),
        Some(TrimBy::Ptrace) => {
            if !crate::producers::system::running_as_root() {
                bail!(
                    "line {line}: trim --trim-by ptrace stops a host thread to call malloc_trim \
                     in it, which needs root: run as root (e.g. `sudo skillprof run ...`)"
                );
            }
            Ok(TrimBy::Ptrace)
        }
        _ => bail!(
            "line {line}: trim: the host profile {} has no trim route; give --trim-by ptrace to \
             call glibc's malloc_trim(0) inside the host through ptrace (root; see docs/memory.md \
             for what it risks)",
            profile.name
        ),
    }
}

/// Asks the allocator of host `pid` to trim, the way `by` says.
pub async fn trim(client: &Client, pid: u32, by: TrimBy) -> Result<Trimmed> {
    match by {
        TrimBy::Route => {
            let started = Instant::now();
            let route = client
                .dialect()
                .routes
                .trim
                .clone()
                .expect("resolve refuses a route the profile lacks");
            let reply = client.call(&route).await?;
            if !reply.is_ok() {
                bail!(
                    "{route}: {} {}",
                    reply.status.as_u16(),
                    reply.error_message()
                );
            }
            Ok(Trimmed {
                call: None,
                held_us: micros(started.elapsed()),
            })
        }
        TrimBy::Ptrace => {
            let injected =
                tokio::task::spawn_blocking(move || ptrace_trim::malloc_trim(pid)).await??;
            Ok(Trimmed {
                call: Some(injected.call),
                held_us: micros(injected.held),
            })
        }
    }
}

fn micros(took: Duration) -> u64 {
    took.as_micros() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trim_takes_the_profiles_route_and_without_one_needs_ptrace() {
        let skillhost = HostProfile::skillhost();
        let pharia = HostProfile::load("pharia-kernel-2024").unwrap();
        assert_eq!(resolve(None, &skillhost, 2).unwrap(), TrimBy::Route);
        for asked in [None, Some(TrimBy::Route)] {
            let refused = resolve(asked, &pharia, 7).unwrap_err().to_string();
            assert!(
                refused.starts_with(
                    "line 7: trim: the host profile pharia-kernel-2024 has no trim route"
                ) && refused.contains("--trim-by ptrace"),
                "{refused}"
            );
        }
    }
}
