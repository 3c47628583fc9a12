//! One `l_execute_all` or `lo_execute`: Locust's master in the root namespace, its workers
//! each in a worker namespace of the load network, all in the run's Locust cgroup. skillprof
//! drives the master through its web API: wait until every worker has connected, start the
//! swarm, stop it, read the merged figures.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use hyper::Method;
use serde::Deserialize;
use serde_json::json;
use tokio::process::{Child, Command};

use super::network::LoadNetwork;
use crate::ground::cmds::Load;
use crate::producers::hostctl::client::{Http, Reply};
use crate::producers::hostctl::process::free_port;
use crate::producers::hostctl::sample_input;
use crate::producers::sample::{self, process};
use crate::producers::system::cgroup::Cgroup;
use crate::record::locust::{LoadEntry, LoadRow, ScheduleKept};
use crate::record::profile::Dialect;

const LOCUSTFILE: &str = include_str!("locustfile.py");

/// How often a Locust worker reports its figures to the master (its `WORKER_REPORT_INTERVAL`):
/// after the stop, the last report may be this far behind.
const WORKER_REPORT: Duration = Duration::from_secs(3);
/// The master's web API caches `/stats/requests` this long.
const API_CACHE: Duration = Duration::from_secs(2);
/// Beyond a request's own wait, how long a stopping user may take to finish it.
const STOP_GRACE_S: u64 = 30;

/// How long a user may take to finish its request once stopped (Locust's `--stop-timeout`),
/// and so a request's timeout: the skill's own wait and the grace.
fn stop_timeout(load: &Load) -> Duration {
    Duration::from_secs(load.wait_ms / 1000 + STOP_GRACE_S)
}

/// Where Locust is and what the swarm needs of the run.
pub struct SwarmSetup<'a> {
    pub locust: &'a Path,
    pub network: &'a LoadNetwork,
    pub cgroup: &'a Cgroup,
    /// The run folder's `locust/`: the locustfile, each entry's plan and logs.
    pub folder: &'a Path,
    /// The host's base URL, on the network's host address.
    pub host: &'a str,
    pub dialect: &'a Dialect,
    pub connect_timeout: Duration,
}

/// A master and its connected workers, ready to swarm.
pub struct Swarm {
    master: Child,
    workers: Vec<Child>,
    api: Http,
    load: Load,
    held: Duration,
    /// The Locust folder, where `lo_execute`'s workers write what their schedules came to.
    folder: PathBuf,
    index: usize,
}

/// The start of the names of entry `index`'s schedule files: each worker writes
/// `NAME.PID.json`.
fn schedule_name(index: usize) -> String {
    format!("{index}.schedule")
}

impl Swarm {
    /// Starts the master and `load.workers` workers for entry `index`, sending `skills` the
    /// load's input, and waits until every worker has connected.
    pub async fn start(
        setup: &SwarmSetup<'_>,
        index: usize,
        load: &Load,
        skills: &[String],
    ) -> Result<Swarm> {
        if skills.is_empty() {
            bail!("no skill of this run is listed: nothing to send load to");
        }
        if load.workers > setup.network.workers() {
            bail!(
                "{} workers wanted, the load network has {}",
                load.workers,
                setup.network.workers()
            );
        }
        fs::create_dir_all(setup.folder)
            .with_context(|| format!("creating {}", setup.folder.display()))?;
        let locustfile = setup.folder.join("locustfile.py");
        fs::write(&locustfile, LOCUSTFILE)
            .with_context(|| format!("writing {}", locustfile.display()))?;
        let plan = setup.folder.join(format!("{index}.plan.json"));
        let input = sample_input(&load.topic, load.memory_kb, load.wait_ms);
        let route = &setup.dialect.routes.execute;
        let timeout_s = stop_timeout(load).as_secs();
        let requests: Vec<_> = skills
            .iter()
            .map(|skill| {
                let mut headers = setup.dialect.headers.clone();
                headers.insert("Content-Type".into(), "application/json".into());
                json!({
                    "skill": skill,
                    "method": route.method.as_str(),
                    "path": setup.dialect.path(route, skill),
                    "success": route.success,
                    "headers": headers,
                    "body": setup.dialect.execute_body(skill, &input),
                })
            })
            .collect();
        let mut plan_json = json!({ "timeout_s": timeout_s, "requests": requests });
        if let Some(schedule) = &load.schedule {
            plan_json["schedule"] = json!({
                "rps": f64::from(schedule.rps) / f64::from(load.workers),
                "poisson": schedule.poisson,
                "seconds": load.duration_s,
                "out": setup.folder.join(schedule_name(index)),
            });
        }
        fs::write(&plan, serde_json::to_vec_pretty(&plan_json)?)
            .with_context(|| format!("writing {}", plan.display()))?;

        let address = setup.network.info().host_address;
        let master_port = free_port(address)?;
        let web_port = free_port(Ipv4Addr::LOCALHOST)?;
        let stop_timeout = timeout_s.to_string();
        let locust = Locust {
            bin: setup.locust,
            locustfile: &locustfile,
            plan: &plan,
            cgroup: setup.cgroup.procs()?,
            stop_timeout: &stop_timeout,
        };
        let master = locust.spawn(
            &[
                "--master",
                "--master-bind-host",
                &address.to_string(),
                "--master-bind-port",
                &master_port.to_string(),
                "--web-host",
                "127.0.0.1",
                "--web-port",
                &web_port.to_string(),
                "--host",
                setup.host,
            ],
            None,
            &setup.folder.join(format!("{index}.master.log")),
        )?;
        let mut workers = Vec::new();
        for n in 1..=load.workers {
            let namespace = setup.network.worker_namespace(n);
            workers.push(locust.spawn(
                &[
                    "--worker",
                    "--master-host",
                    &address.to_string(),
                    "--master-port",
                    &master_port.to_string(),
                ],
                Some(&namespace),
                &setup.folder.join(format!("{index}.worker{n}.log")),
            )?);
        }
        let mut swarm = Swarm {
            master,
            workers,
            api: Http::new(&format!("http://127.0.0.1:{web_port}")),
            load: load.clone(),
            held: Duration::ZERO,
            folder: setup.folder.to_owned(),
            index,
        };
        swarm
            .wait_for_workers(setup.connect_timeout, setup.folder, index)
            .await?;
        Ok(swarm)
    }

    async fn wait_for_workers(
        &mut self,
        timeout: Duration,
        folder: &Path,
        index: usize,
    ) -> Result<()> {
        let started = Instant::now();
        let mut connected = 0;
        loop {
            if let Some(status) = self.master.try_wait()? {
                bail!(
                    "Locust's master exited ({status}) before its workers connected; see {}",
                    folder.join(format!("{index}.master.log")).display()
                );
            }
            if let Ok(stats) = self.stats().await {
                connected = stats.workers.iter().filter(|w| w.state == "ready").count();
                if connected == self.workers.len() {
                    return Ok(());
                }
            }
            if started.elapsed() > timeout {
                bail!(
                    "only {connected} of {} Locust workers connected to the master within {} s \
                     (--locust-timeout-s); their logs are {}",
                    self.workers.len(),
                    timeout.as_secs(),
                    folder.join(format!("{index}.worker*.log")).display()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Starts the swarm (every user at once), holds it for the load's duration, and stops it:
    /// users finish the request they are in. The entry is what happens in here.
    pub async fn hold(&mut self) -> Result<()> {
        let users = self.load.users.to_string();
        let started = Instant::now();
        let reply = self
            .post(
                "/swarm",
                &[
                    ("user_count", users.as_str()),
                    ("spawn_rate", users.as_str()),
                ],
            )
            .await?;
        let answer: ApiAnswer = reply.json()?;
        if !answer.success {
            bail!("Locust refused to start the swarm: {}", answer.message);
        }
        tokio::time::sleep(Duration::from_secs(self.load.duration_s.into())).await;
        if self.load.schedule.is_some() {
            // Each worker's user ends its schedule, waits for its answers and writes what it
            // sent; stopped before that, it would write nothing.
            let deadline = Instant::now() + stop_timeout(&self.load);
            while self.schedules_written()?.len() < self.workers.len() && Instant::now() < deadline
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        self.post("/stop", &[]).await?;
        // The master's /stop returns once it has told the workers; the users are stopped
        // when no worker reports one running.
        let deadline = Instant::now() + stop_timeout(&self.load);
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let stats = self.stats().await?;
            if stats.user_count == 0 && stats.state == "stopped" || Instant::now() > deadline {
                break;
            }
        }
        self.held = started.elapsed();
        Ok(())
    }

    /// Reads the merged figures once the workers' last reports are in, then ends every Locust
    /// process. `host_served`: the host's own count over the entry.
    pub async fn finish(mut self, host_served: Option<u64>) -> Result<LoadEntry> {
        tokio::time::sleep(WORKER_REPORT + Duration::from_millis(500)).await;
        // Stable across two reads past the cache: every report is merged.
        let mut last = self.stats().await?;
        for _ in 0..5 {
            tokio::time::sleep(API_CACHE + Duration::from_millis(200)).await;
            let now = self.stats().await?;
            let same = now.total().map(|t| t.num_requests) == last.total().map(|t| t.num_requests);
            last = now;
            if same {
                break;
            }
        }
        let locust_cpu_s = self.cpu_seconds();
        self.end().await;
        let schedule = self.schedule_kept()?;
        let row = |stat: &ApiStat| LoadRow {
            name: stat.name.clone(),
            requests: stat.num_requests,
            failures: stat.num_failures,
            avg_ms: stat.avg_response_time,
            p50_ms: stat.percentile("0.5"),
            p90_ms: stat.percentile("0.9"),
            p99_ms: stat.percentile("0.99"),
            max_ms: stat.max_response_time,
        };
        let total = last
            .total()
            .map(row)
            .context("Locust's stats have no Aggregated row")?;
        let skills = last
            .stats
            .iter()
            .filter(|s| s.name != TOTAL)
            .map(row)
            .collect();
        let mut errors: BTreeMap<String, u64> = BTreeMap::new();
        for error in &last.errors {
            *errors
                .entry(format!("{}: {}", error.name, error.error))
                .or_default() += error.occurrences;
        }
        Ok(LoadEntry {
            users: self.load.users,
            workers: self.load.workers,
            held_s: self.held.as_secs_f64(),
            total,
            skills,
            errors: errors.into_iter().collect(),
            host_served,
            locust_cpu_s,
            schedule,
        })
    }

    /// The files `lo_execute`'s workers wrote at their schedules' end.
    fn schedules_written(&self) -> Result<Vec<PathBuf>> {
        let prefix = format!("{}.", schedule_name(self.index));
        let mut written = Vec::new();
        for entry in fs::read_dir(&self.folder)
            .with_context(|| format!("reading {}", self.folder.display()))?
        {
            let path = entry?.path();
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            if name.starts_with(&prefix) && name.ends_with(".json") {
                written.push(path);
            }
        }
        Ok(written)
    }

    /// What the workers' schedules came to, summed; an error unless every worker wrote.
    fn schedule_kept(&self) -> Result<Option<ScheduleKept>> {
        let Some(schedule) = &self.load.schedule else {
            return Ok(None);
        };
        #[derive(Deserialize)]
        struct Written {
            sent: u64,
            late_sends: u64,
            send_lag_p99_ms: f64,
            unanswered: u64,
        }
        let files = self.schedules_written()?;
        if files.len() != self.workers.len() {
            bail!(
                "{} of {} Locust workers wrote what their schedules sent ({}.*.json): the \
                 others were stopped before their schedule's end; see their logs",
                files.len(),
                self.workers.len(),
                self.folder.join(schedule_name(self.index)).display()
            );
        }
        let mut kept = ScheduleKept {
            asked_rps: schedule.rps,
            poisson: schedule.poisson,
            seconds: self.load.duration_s,
            sent: 0,
            late_sends: 0,
            send_lag_p99_ms: 0.0,
            unanswered: 0,
        };
        for file in files {
            let text = fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
            let written: Written = serde_json::from_slice(&text)
                .with_context(|| format!("{} is not a worker's schedule", file.display()))?;
            kept.sent += written.sent;
            kept.late_sends += written.late_sends;
            kept.send_lag_p99_ms = kept.send_lag_p99_ms.max(written.send_lag_p99_ms);
            kept.unanswered += written.unanswered;
        }
        Ok(Some(kept))
    }

    /// CPU time of the master and the workers so far.
    fn cpu_seconds(&self) -> f64 {
        let ticks: u64 = std::iter::once(&self.master)
            .chain(&self.workers)
            .filter_map(Child::id)
            .filter_map(|pid| process::read(Path::new(sample::PROC), pid).ok())
            .map(|stat| stat.cpu_ticks)
            .sum();
        crate::record::process::ticks_to_seconds(ticks)
    }

    /// Ends every Locust process of the swarm and reaps it.
    async fn end(&mut self) {
        for child in std::iter::once(&mut self.master).chain(&mut self.workers) {
            let _ = child.kill().await;
        }
    }

    async fn stats(&self) -> Result<ApiStats> {
        let reply = self
            .api
            .send(Method::GET, "/stats/requests", [], None)
            .await?;
        if !reply.is_ok() {
            bail!("Locust's /stats/requests: {}", reply.status);
        }
        reply.json()
    }

    async fn post(&self, path: &str, form: &[(&str, &str)]) -> Result<Reply> {
        let body: String = form
            .iter()
            .map(|(key, value)| format!("{key}={value}"))
            .collect::<Vec<_>>()
            .join("&");
        let reply = self
            .api
            .send(
                Method::POST,
                path,
                [],
                Some(("application/x-www-form-urlencoded", body.into_bytes())),
            )
            .await?;
        if !reply.is_ok() {
            bail!("Locust's {path}: {} {}", reply.status, reply.text());
        }
        Ok(reply)
    }
}

/// Locust's name for the row of all requests.
const TOTAL: &str = "Aggregated";

#[derive(Deserialize)]
struct ApiAnswer {
    success: bool,
    #[serde(default)]
    message: String,
}

#[derive(Deserialize)]
struct ApiStats {
    stats: Vec<ApiStat>,
    #[serde(default)]
    errors: Vec<ApiError>,
    #[serde(default)]
    workers: Vec<ApiWorker>,
    state: String,
    user_count: u64,
}

impl ApiStats {
    fn total(&self) -> Option<&ApiStat> {
        self.stats.iter().find(|s| s.name == TOTAL)
    }
}

#[derive(Deserialize)]
struct ApiStat {
    name: String,
    num_requests: u64,
    num_failures: u64,
    avg_response_time: f64,
    max_response_time: f64,
    /// `response_time_percentile_0.5` and the like: the locustfile sets which.
    #[serde(flatten)]
    rest: BTreeMap<String, serde_json::Value>,
}

impl ApiStat {
    fn percentile(&self, which: &str) -> f64 {
        self.rest
            .get(&format!("response_time_percentile_{which}"))
            .and_then(serde_json::Value::as_f64)
            .unwrap_or(0.0)
    }
}

#[derive(Deserialize)]
struct ApiError {
    name: String,
    error: String,
    occurrences: u64,
}

#[derive(Deserialize)]
struct ApiWorker {
    state: String,
}

/// How every Locust process of a swarm is started.
struct Locust<'a> {
    bin: &'a Path,
    locustfile: &'a Path,
    plan: &'a Path,
    /// The run's Locust cgroup's `cgroup.procs`, open for writing.
    cgroup: File,
    stop_timeout: &'a str,
}

impl Locust<'_> {
    /// One Locust process with `args`, inside the cgroup and, for a worker, inside
    /// `namespace`; its output goes to `log`.
    fn spawn(&self, args: &[&str], namespace: Option<&PathBuf>, log: &Path) -> Result<Child> {
        let output = File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let netns = namespace
            .map(|path| File::open(path).with_context(|| format!("opening {}", path.display())))
            .transpose()?;
        let mut command = Command::new(self.bin);
        command
            .arg("-f")
            .arg(self.locustfile)
            .args(args)
            .args(["--stop-timeout", self.stop_timeout, "--loglevel", "WARNING"])
            .env("SKILLPROF_LOAD_PLAN", self.plan)
            .stdin(Stdio::null())
            .stdout(output.try_clone()?)
            .stderr(output)
            .kill_on_drop(true);
        let procs = self.cgroup.as_raw_fd();
        let netns = netns.as_ref().map(AsRawFd::as_raw_fd);
        // SAFETY: between fork and exec the child makes only two system calls on descriptors
        // the parent keeps open: it joins the cgroup ("0" moves the writer itself), then the
        // network namespace.
        unsafe {
            command.pre_exec(move || {
                if libc::write(procs, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
                if let Some(fd) = netns
                    && libc::setns(fd, libc::CLONE_NEWNET) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        command
            .spawn()
            .with_context(|| format!("starting {}", self.bin.display()))
    }
}
