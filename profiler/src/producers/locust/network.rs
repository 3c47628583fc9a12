//! The simulated client machines: one network namespace per Locust worker, each joined by a
//! veth pair to a bridge, and the bridge to the host's side by one more veth pair.
//!
//! ```text
//!  root namespace                 skp-PID-lan                 skp-PID-wN
//!  host, master ── skpPID ═══ uplink ── br0 ── wN ═══ eth0  (worker N, 10.213.X.(10+N))
//!  10.213.X.1/24
//! ```
//!
//! Addresses exist only on these links, there is no default route and no NAT: nothing in a
//! worker's namespace reaches beyond the bridge. The bridge lives in a namespace of its own,
//! so that removing the namespaces removes every link with them (a veth pair dies with
//! either end's namespace): the guardian has only files to unmount, and processes to kill
//! are the Locust cgroup's.

use std::fs;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::producers::system::guardian::{Guardian, Restore};

use crate::record::locust::NetworkInfo;

/// Where `ip netns` keeps a namespace: a bind mount of its nsfs file.
const NETNS_DIR: &str = "/run/netns";
/// The private range the run's /24 is taken from.
const PREFIX: [u8; 2] = [10, 213];

pub struct LoadNetwork {
    info: NetworkInfo,
    guardian: Guardian,
}

impl LoadNetwork {
    /// Makes the bridge and `workers` worker namespaces, named after skillprof's pid.
    pub fn create(workers: u32) -> Result<LoadNetwork> {
        let pid = std::process::id();
        let subnet = free_subnet(pid)?;
        let address = |host: u8| Ipv4Addr::new(PREFIX[0], PREFIX[1], subnet, host);
        let lan = format!("skp-{pid}-lan");
        let worker_names: Vec<String> = (1..=workers).map(|n| format!("skp-{pid}-w{n}")).collect();
        let mut namespaces = vec![lan.clone()];
        namespaces.extend(worker_names.iter().cloned());
        let files: Vec<PathBuf> = namespaces.iter().map(|ns| netns_file(ns)).collect();
        // Guarded before anything is made: a guardian undoes nothing it finds missing.
        let guardian = Guardian::protect(
            Restore::netns(&files)?,
            &format!("the load network namespaces {}..", namespaces[0]),
        )?;
        let info = NetworkInfo {
            host_address: address(1),
            link: format!("skp{pid}"),
            namespaces,
        };
        let link = info.link.as_str();
        ip(&["netns", "add", &lan])?;
        ip(&[
            "link", "add", link, "type", "veth", "peer", "name", "uplink", "netns", &lan,
        ])?;
        ip(&["-n", &lan, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &lan, "link", "set", "br0", "up"])?;
        ip(&[
            "-n", &lan, "link", "set", "dev", "uplink", "master", "br0", "up",
        ])?;
        let host = format!("{}/24", info.host_address);
        ip(&["addr", "add", &host, "dev", link])?;
        ip(&["link", "set", link, "up"])?;
        for (n, ns) in worker_names.iter().enumerate() {
            let end = format!("w{}", n + 1);
            let worker = format!("{}/24", address(10 + n as u8));
            ip(&["netns", "add", ns])?;
            ip(&[
                "-n", &lan, "link", "add", &end, "type", "veth", "peer", "name", "eth0", "netns",
                ns,
            ])?;
            ip(&["-n", &lan, "link", "set", &end, "master", "br0", "up"])?;
            ip(&["-n", ns, "addr", "add", &worker, "dev", "eth0"])?;
            ip(&["-n", ns, "link", "set", "eth0", "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        Ok(LoadNetwork { info, guardian })
    }

    pub fn info(&self) -> &NetworkInfo {
        &self.info
    }

    pub fn guardian_pid(&self) -> Option<u32> {
        self.guardian.pid()
    }

    /// Worker `n`'s (from 1) namespace file, to `setns` into.
    pub fn worker_namespace(&self, n: u32) -> PathBuf {
        netns_file(&self.info.namespaces[n as usize])
    }

    /// How many workers it has room for.
    pub fn workers(&self) -> u32 {
        (self.info.namespaces.len() - 1) as u32
    }

    /// Removes every namespace (and with them the links) and waits until it is done.
    pub fn remove(self) -> Result<()> {
        self.guardian.restore()
    }
}

fn netns_file(name: &str) -> PathBuf {
    Path::new(NETNS_DIR).join(name)
}

fn ip(args: &[&str]) -> Result<()> {
    let output = Command::new("ip")
        .args(args)
        .output()
        .context("running ip (iproute2): the load network needs it")?;
    if !output.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(())
}

/// A /24 of 10.213.0.0/16 that no route of this machine covers, starting from one chosen by
/// `pid` so that concurrent runs rarely try the same one.
fn free_subnet(pid: u32) -> Result<u8> {
    let routes = fs::read_to_string("/proc/net/route").context("reading /proc/net/route")?;
    let taken: Vec<(u32, u32)> = routes
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let hex = |i: usize| u32::from_str_radix(fields.get(i)?, 16).ok();
            // The kernel prints the address's bytes in memory order, as a host-order word.
            let address = |i: usize| Some(u32::from(Ipv4Addr::from(hex(i)?.to_ne_bytes())));
            Some((address(1)?, address(7)?))
        })
        .filter(|&(_, mask)| mask != 0)
        .collect();
    (0..=255u32)
        .map(|step| ((pid + step) % 256) as u8)
        .find(|&subnet| {
            let ours = u32::from(Ipv4Addr::new(PREFIX[0], PREFIX[1], subnet, 0));
            let overlaps = |&(dest, mask): &(u32, u32)| {
                ours & mask == dest & mask || dest & 0xffff_ff00 == ours
            };
            !taken.iter().any(overlaps)
        })
        .context("no free /24 in 10.213.0.0/16 for the load network")
}
