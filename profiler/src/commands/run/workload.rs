//! What each cmds command does to a host, with the 2024 harness's semantics: name counters
//! per language, wait-until-listed after adding, one execute after each add, the first name
//! in sorted order when drop/delete get none. Request failures are counted, never dropped.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use serde_json::Value;
use tokio::task::JoinSet;

use crate::ground::cmds::{
    Command, CopyNames, DEFAULT_TOPIC, InFlightCap, Sends, SkillKind, Traffic, TrafficLoad,
};
use crate::ground::cpus::CpuList;
use crate::producers::hostctl::process::monotonic_ns;
use crate::producers::hostctl::{Client, Reply, SampleSkills, SkillsDir, sample_input, trim};
use crate::producers::traffic::generator::{self, StepPlan, Target, Targets};
use crate::record::Outcome;
use crate::record::host::TrimBy;
use crate::record::probes::RequestSpan;
use crate::record::profile::{PythonSample, RegistryRoutes, Route};
use crate::record::traffic::{Arrivals, Load};

impl Outcome {
    /// Counts one skill execution: its latency, the host's split of it, and its result.
    fn executed(&mut self, name: &str, (result, span): (Result<Reply>, RequestSpan)) {
        let took = Duration::from_nanos(span.end_ns - span.start_ns);
        self.latencies.push(took);
        self.spans.push(span);
        if let Ok(reply) = &result {
            let ms = |metric| {
                reply
                    .server_timing(metric)
                    .map(|ms| Duration::from_secs_f64(ms / 1e3))
            };
            if let (Some(instantiate), Some(call)) = (ms("instantiate"), ms("call")) {
                self.host_instantiate += instantiate;
                self.host_call += call;
                self.host_timed += 1;
            }
        }
        self.count(&format!("execute {name}"), result);
    }

    pub(super) fn fail(&mut self, message: String) {
        self.errors += 1;
        self.first_error.get_or_insert(message);
    }

    /// Counts one request and, unless it succeeded, its failure.
    fn count(&mut self, what: &str, result: Result<Reply>) -> Option<Reply> {
        self.requests += 1;
        match result {
            Ok(reply) if reply.is_ok() => Some(reply),
            Ok(reply) => {
                *self.statuses.entry(reply.status.as_u16()).or_default() += 1;
                self.fail(format!(
                    "{what}: {} {}",
                    reply.status.as_u16(),
                    reply.error_message()
                ));
                None
            }
            Err(error) => {
                self.fail(format!("{what}: {error:#}"));
                None
            }
        }
    }
}

/// Where `add` registers skills, and the sample components it copies there.
struct Registry {
    dir: SkillsDir,
    sample_py: PathBuf,
    sample_rs: PathBuf,
}

pub struct Workload {
    client: Client,
    routes: RegistryRoutes,
    /// `None` for an attached host whose plan writes no skill file (checked before the run).
    skills: Option<Registry>,
    /// The names of the copies added so far, per prefix (`sample_py`, a user's file's stem).
    added: CopyNames,
    /// The skills this run registered and has not deleted. Listings are read as these only,
    /// so that an attached host's own skills are never executed or deleted.
    ours: BTreeSet<String>,
    /// The host's process, which `trim --trim-by ptrace` reaches into.
    pid: u32,
    settings: Settings,
}

/// How the run's command line says the workload is driven.
#[derive(Clone)]
pub struct Settings {
    pub python: PythonSample,
    pub cap: InFlightCap,
    pub list_timeout: Duration,
    /// `--no-atomic-copy`: skill files are written in place, not renamed into place.
    pub in_place: bool,
    /// How `trim` reaches the host's allocator (a plan with `trim` only).
    pub trim_by: Option<TrimBy>,
    /// Where the load generator of traffic lines runs (`--load-cpus`).
    pub load_cpus: Option<CpuList>,
}

async fn timed_execute(client: &Client, name: &str, input: &Value) -> (Result<Reply>, RequestSpan) {
    let start_ns = monotonic_ns();
    let reply = client.execute(name, input).await;
    let span = RequestSpan {
        skill: name.to_owned(),
        start_ns,
        end_ns: monotonic_ns(),
    };
    (reply, span)
}

impl Workload {
    /// Fails now, before anything runs, if a sample skill is missing.
    pub fn new(
        client: Client,
        skills: Option<(SkillsDir, &SampleSkills)>,
        pid: u32,
        settings: Settings,
    ) -> Result<Self> {
        let skills = skills
            .map(|(dir, samples)| -> Result<Registry> {
                Ok(Registry {
                    dir,
                    sample_py: samples.path(settings.python.component())?,
                    sample_rs: samples.path("sample_rs")?,
                })
            })
            .transpose()?;
        Ok(Workload {
            routes: client.dialect().routes.registry()?,
            client,
            skills,
            added: CopyNames::default(),
            ours: BTreeSet::new(),
            pid,
            settings,
        })
    }

    /// The directory the host registers skills from (a field's borrow, not all of `self`'s).
    fn skills(registry: &Option<Registry>) -> Result<&Registry> {
        registry
            .as_ref()
            .context("this host was attached without --skills-dir, and the plan writes skill files")
    }

    /// Runs one command once. `Err` only for what makes going on pointless (the skills
    /// directory cannot be written); failed requests are counted in `outcome`.
    pub async fn run(&mut self, command: &Command, outcome: &mut Outcome) -> Result<()> {
        match command {
            Command::AddFile {
                file,
                name,
                count,
                input,
                ..
            } => {
                let names = match name {
                    Some(name) => vec![name.clone()],
                    None => self.added.next(&CopyNames::stem(file), *count),
                };
                let input = input
                    .as_deref()
                    .map(serde_json::from_str::<Value>)
                    .transpose()
                    .context("the checked JSON")?;
                self.load(file, names, input, outcome).await
            }
            Command::AddPy => self.add(SkillKind::Python, 1, outcome).await,
            Command::AddRs => self.add(SkillKind::Rust, 1, outcome).await,
            Command::PAddPy(n) => self.add(SkillKind::Python, *n, outcome).await,
            Command::PAddRs(n) => self.add(SkillKind::Rust, *n, outcome).await,
            Command::Skills => {
                let route = &self.routes.skills;
                outcome.count(&route.to_string(), self.client.call(route).await);
                Ok(())
            }
            Command::CachedSkills => {
                let route = &self.routes.cached_skills;
                outcome.count(&route.to_string(), self.client.call(route).await);
                Ok(())
            }
            Command::ExecuteSkill {
                name,
                topic,
                memory_kb,
                wait_ms,
            } => {
                let input = sample_input(topic, *memory_kb, *wait_ms);
                outcome.executed(name, timed_execute(&self.client, name, &input).await);
                Ok(())
            }
            Command::Execute { name, input, times } => {
                let input: Value = serde_json::from_str(input).context("the checked JSON")?;
                match times {
                    1 => outcome.executed(name, timed_execute(&self.client, name, &input).await),
                    _ => {
                        let each = (0..*times).map(|_| (name.clone(), input.clone()));
                        self.execute_at_once(each, outcome).await;
                    }
                }
                Ok(())
            }
            Command::ExecuteAll {
                topic,
                memory_kb,
                wait_ms,
            } => {
                let input = sample_input(topic, *memory_kb, *wait_ms);
                for name in self.listed(outcome).await {
                    outcome.executed(&name, timed_execute(&self.client, &name, &input).await);
                }
                Ok(())
            }
            Command::PExecuteAll {
                topic,
                memory_kb,
                wait_ms,
                times,
            } => {
                let names = self.listed(outcome).await;
                match self.settings.cap.check(*times, names.len()) {
                    Ok(_) => {
                        let input = sample_input(topic, *memory_kb, *wait_ms);
                        let each = names
                            .iter()
                            .flat_map(|name| (0..*times).map(|_| (name.clone(), input.clone())));
                        self.execute_at_once(each, outcome).await;
                    }
                    Err(too_many) => outcome.fail(too_many.to_string()),
                }
                Ok(())
            }
            Command::PExecute { times, skills } => {
                let each = skills.iter().flat_map(|(name, memory_kb)| {
                    let input = sample_input(DEFAULT_TOPIC, *memory_kb, 0);
                    (0..*times).map(move |_| (name.clone(), input.clone()))
                });
                self.execute_at_once(each, outcome).await;
                Ok(())
            }
            Command::DropCachedSkill(name) => {
                match self
                    .named_or_first(name, &self.routes.cached_skills, outcome)
                    .await
                {
                    Some(name) => {
                        let reply = self.client.drop_cached(&name).await;
                        outcome.count(&format!("drop {name}"), reply);
                    }
                    None => outcome.fail("drop_cached_skill: no skill is cached".to_owned()),
                }
                Ok(())
            }
            Command::DeleteSkill(name) => {
                match self
                    .named_or_first(name, &self.routes.skills, outcome)
                    .await
                {
                    Some(name) => self.delete(&name, outcome).await?,
                    None => outcome.fail("delete_skill: no skill is registered".to_owned()),
                }
                Ok(())
            }
            Command::Trim => {
                let by = self
                    .settings
                    .trim_by
                    .expect("resolved before the run for a plan with trim");
                match trim::trim(&self.client, self.pid, by).await {
                    Ok(trimmed) => outcome.trim = Some(trimmed),
                    Err(error) => outcome.fail(format!("trim: {error:#}")),
                }
                Ok(())
            }
            Command::Traffic(traffic) => {
                let step = generator::run(&self.client, self.traffic_plan(traffic)).await;
                match step {
                    Ok(step) => {
                        outcome.requests += step.sent;
                        if step.errors.total() > 0 {
                            outcome.errors += step.errors.total();
                            outcome.first_error.get_or_insert(format!(
                                "{} of {} requests to {} failed ({} without an answer, {} \
                                 answered outside 2xx, {} unanswered when the step ended)",
                                step.errors.total(),
                                step.sent,
                                step.skill,
                                step.errors.transport,
                                step.errors.status,
                                step.errors.unanswered
                            ));
                        }
                        outcome.traffic = Some(step);
                    }
                    Err(error) => {
                        outcome.fail(format!("{}: {error:#}", traffic.to.skills().join(", ")))
                    }
                }
                Ok(())
            }
            Command::Watch(seconds) => {
                tokio::time::sleep(std::time::Duration::from_secs(u64::from(*seconds))).await;
                Ok(())
            }
            Command::Fill { .. } => unreachable!("the runner fills, watching the cgroup"),
            Command::LExecuteAll(_) => unreachable!("the runner holds Locust's swarm itself"),
            Command::Stop => unreachable!("the runner stops the host itself"),
            Command::Pressure(_) => unreachable!("the runner holds the pressure itself"),
        }
    }

    /// What a traffic line sends, and from which CPUs.
    fn traffic_plan(&self, traffic: &Traffic) -> StepPlan {
        let targets = match &traffic.to {
            Sends::Sample {
                skill,
                memory_kb,
                wait_ms,
            } => Targets::one(skill, sample_input(DEFAULT_TOPIC, *memory_kb, *wait_ms)),
            Sends::Mix { skills, .. } => {
                let targets = skills
                    .iter()
                    .map(|skill| Target {
                        skill: skill.skill.clone(),
                        input: skill.input.clone(),
                        weight: skill.weight,
                    })
                    .collect();
                Targets::mix(targets).expect("a checked mix has a skill of weight above 0")
            }
        };
        StepPlan {
            targets,
            load: match traffic.load {
                TrafficLoad::Open { rps, poisson } => Load::Open {
                    rps,
                    arrivals: match poisson {
                        true => Arrivals::Poisson,
                        false => Arrivals::Constant,
                    },
                },
                TrafficLoad::Closed { concurrency } => Load::Closed { concurrency },
            },
            length: Duration::from_secs(u64::from(traffic.seconds)),
            cpus: self.settings.load_cpus.as_ref().map(|cpus| cpus.0.clone()),
        }
    }

    /// Registers `count` new copies, waits until the host lists them all, then executes
    /// each once (all at once when several were added), so the entry includes compiling.
    /// Copied in place, the files are listed half-written and finished before executing.
    pub async fn add(&mut self, kind: SkillKind, count: u32, outcome: &mut Outcome) -> Result<()> {
        let source = match kind {
            SkillKind::Python => Self::skills(&self.skills)?.sample_py.clone(),
            SkillKind::Rust => Self::skills(&self.skills)?.sample_rs.clone(),
        };
        let names = self.added.next(kind.prefix(), count);
        let input = sample_input(DEFAULT_TOPIC, 0, 0);
        self.load(&source, names, Some(input), outcome).await
    }

    /// Registers `source` under `names`; with an input, then executes each once with it, all
    /// at once, so that the entry holds the compiled copies.
    async fn load(
        &mut self,
        source: &Path,
        names: Vec<String>,
        input: Option<Value>,
        outcome: &mut Outcome,
    ) -> Result<()> {
        let registered = self.register(source, names, outcome).await?;
        if let (Some(names), Some(input)) = (registered, input) {
            let each = names.into_iter().map(|name| (name, input.clone()));
            self.execute_at_once(each, outcome).await;
        }
        Ok(())
    }

    /// Writes `source` into the skills directory under each name and waits until the host
    /// lists them all: the names, or `None` when it did not (counted in `outcome`).
    async fn register(
        &mut self,
        source: &Path,
        names: Vec<String>,
        outcome: &mut Outcome,
    ) -> Result<Option<Vec<String>>> {
        let skills = &Self::skills(&self.skills)?.dir;
        let mut half_copied = Vec::new();
        for name in &names {
            if self.settings.in_place {
                half_copied.push(skills.begin_in_place(name, source)?);
            } else {
                skills.add(name, source)?;
            }
            self.ours.insert(name.clone());
        }
        let started = Instant::now();
        let listed = self
            .client
            .wait_until_listed(&names, self.settings.list_timeout)
            .await;
        outcome.listing += started.elapsed();
        for copy in half_copied {
            copy.finish()?;
        }
        match listed {
            Ok(_) => Ok(Some(names)),
            Err(error) => {
                outcome.fail(format!("{error:#}"));
                Ok(None)
            }
        }
    }

    /// Sends all requests (skill name, input) at once and waits for every answer.
    async fn execute_at_once(
        &self,
        requests_of: impl Iterator<Item = (String, Value)>,
        outcome: &mut Outcome,
    ) {
        let mut requests = JoinSet::new();
        for (name, input) in requests_of {
            let client = self.client.clone();
            requests.spawn(async move {
                let executed = timed_execute(&client, &name, &input).await;
                (name, executed)
            });
        }
        while let Some(joined) = requests.join_next().await {
            match joined {
                Ok((name, executed)) => outcome.executed(&name, executed),
                Err(panic) => outcome.fail(format!("a request task failed: {panic}")),
            }
        }
    }

    /// This run's skills the host lists now, sorted: where `l_execute_all` sends its load.
    pub async fn ours_listed(&self) -> Result<Vec<String>> {
        let mut names = self.client.skills().await?;
        names.retain(|name| self.ours.contains(name));
        Ok(names)
    }

    async fn listed(&self, outcome: &mut Outcome) -> Vec<String> {
        self.list(&self.routes.skills, outcome).await
    }

    /// `name`, or else the first of the listing at `route` in sorted order.
    async fn named_or_first(
        &self,
        name: &Option<String>,
        route: &Route,
        outcome: &mut Outcome,
    ) -> Option<String> {
        match name {
            Some(name) => Some(name.clone()),
            None => self.list(route, outcome).await.into_iter().next(),
        }
    }

    /// The skills of this run a listing holds, by our names, sorted.
    async fn list(&self, route: &Route, outcome: &mut Outcome) -> Vec<String> {
        let reply = self.client.call(route).await;
        let Some(reply) = outcome.count(&route.to_string(), reply) else {
            return Vec::new();
        };
        match reply
            .json()
            .and_then(|answer| self.client.dialect().listed(answer))
        {
            Ok(mut names) => {
                names.retain(|name| self.ours.contains(name));
                names
            }
            Err(error) => {
                outcome.fail(format!("{route}: {error:#}"));
                Vec::new()
            }
        }
    }

    /// Unregisters `name` by removing its file and waits, untimed, until the host no longer
    /// lists it.
    /// Only a skill of this run: an attached host's own are not ours to delete.
    async fn delete(&mut self, name: &str, outcome: &mut Outcome) -> Result<()> {
        if !self.ours.remove(name) {
            outcome.fail(format!(
                "delete_skill: {name} was not registered by this run, so it is left alone"
            ));
            return Ok(());
        }
        if !Self::skills(&self.skills)?.dir.remove(name)? {
            outcome.fail(format!(
                "delete_skill: {name} is not in the skills directory"
            ));
            return Ok(());
        }
        // The 2024 harness returned here, and timed only the removal. The wait is kept, so
        // the next entry sees the host without the skill, but is left out of `took`.
        let started = Instant::now();
        let unlisted = self
            .client
            .wait_until_unlisted(name, self.settings.list_timeout)
            .await;
        outcome.listing += started.elapsed();
        outcome.untimed += started.elapsed();
        if let Err(error) = unlisted {
            outcome.fail(format!("delete_skill: {error:#}"));
        }
        Ok(())
    }
}
