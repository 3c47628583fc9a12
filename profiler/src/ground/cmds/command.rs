//! The commands of the language, their arguments, and the checks that make a bad line fail
//! before anything runs rather than halfway through a long workload.

use super::CopyNames;
use super::in_flight::InFlightCap;
use super::lexer::python_int;
use crate::ground::band::Band;
use std::fmt::Display;
use std::path::{Path, PathBuf};

use crate::ground::component::{self, Exports};

/// The topic `execute_all` and `p_execute_all` send when the line names none: the sample
/// skill answers a greeting naming the topic, so this makes it say "Hello, World".
pub const DEFAULT_TOPIC: &str = "World";

/// One typed command. Omitted MEMORY_KB and WAIT_MS are 0, an omitted TIMES is 1.
/// NAME and TOPIC are the tokens as written: `execute_all 42` greets the topic "42".
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Register a component the user brings (a skillprof extension): under NAME (`add FILE
    /// NAME`), or `count` copies named after the file (`add FILE`: `weather1`; `p_add N
    /// FILE`: the next N), all at once, and wait until the host lists them. Without an input
    /// no request is sent: what a skill accepts is the user's to say, so its first `execute`
    /// compiles it. With one (`add FILE [NAME] JSON|@FILE`), each copy is executed once with
    /// it, at once, as `add_py` does: the entry then holds the compiled skills, which is what
    /// `capacity` reads. The file is read when the cmds file is checked: `exports` says its
    /// world.
    AddFile {
        file: PathBuf,
        name: Option<String>,
        count: u32,
        exports: Exports,
        /// Checked JSON text, as [`Command::Execute`] keeps it.
        input: Option<String>,
    },
    /// Register one more copy of the Python sample skill, wait until it is listed, execute it once.
    AddPy,
    /// Same for the Rust sample skill.
    AddRs,
    /// Register N Python copies at once, wait until all are listed, execute each once.
    PAddPy(u32),
    /// Same for N Rust copies.
    PAddRs(u32),
    /// Register one more copy at a time, each listed and executed once, until the host
    /// cannot hold another: its memory cgroup reaches its limit (the kernel starts
    /// reclaiming from it), an execution fails, or the host is killed; at most `max` copies.
    /// Needs `skillprof run --memory-max`.
    Fill { kind: SkillKind, max: u32 },
    /// List the registered skills.
    Skills,
    /// List the compiled-and-cached skills.
    CachedSkills,
    /// One request to one skill.
    ExecuteSkill {
        name: String,
        topic: String,
        memory_kb: u64,
        wait_ms: u64,
    },
    /// TIMES requests to one skill with any JSON input, all in flight at once (`p_execute
    /// TIMES NAME JSON`), or one (`execute NAME JSON`): a skillprof extension, for a skill of
    /// the user's own or a sample asked for what the 2024 arguments cannot say. `input` is
    /// the JSON as checked (written on the line, or read from `@FILE` beside the cmds file),
    /// written out again compactly.
    Execute {
        name: String,
        input: String,
        times: u32,
    },
    /// One request per listed skill, one after the other.
    ExecuteAll {
        topic: String,
        memory_kb: u64,
        wait_ms: u64,
    },
    /// TIMES requests per listed skill, all in flight at once.
    PExecuteAll {
        topic: String,
        memory_kb: u64,
        wait_ms: u64,
        times: u32,
    },
    /// TIMES requests to each named skill, each asking for its own MEMORY_KB, all in flight at
    /// once (a skillprof extension: skills with different working sets in one entry).
    PExecute {
        times: u32,
        /// Skill name and MEMORY_KB, in line order.
        skills: Vec<(String, u64)>,
    },
    /// Traffic to one skill for a while: at a rate on a schedule (`o_execute`, open loop,
    /// latency from each request's scheduled send) or from N senders that each wait for
    /// their answer (`c_execute`, closed loop, as `hey -c N`); a skillprof extension.
    Traffic(Traffic),
    /// Locust's master and `load.workers` workers, each in a network namespace of its own,
    /// hold `load.users` users on the listed skills for `load.duration_s` (`l_execute_all`),
    /// or send one skill traffic at a rate, each worker its share on its own schedule
    /// (`lo_execute`): a skillprof extension, load from several simulated client machines.
    LExecuteAll(Load),
    /// Evict a compiled skill from the host's cache; `None`: the first cached one in sorted order.
    DropCachedSkill(Option<String>),
    /// Unregister a skill; `None`: the first registered one in sorted order.
    DeleteSkill(Option<String>),
    /// Ask the host's allocator to give back the free memory it keeps (a skillprof
    /// extension): the entry's RSS drop is what it had kept. Through the host profile's trim
    /// route, or `skillprof run --trim-by ptrace`.
    Trim,
    /// Hold free memory in a watermark band from now on (a balloon beside the host), or stop
    /// holding (`None`, written `off`). See `skillprof pressure --help` for the bands.
    Pressure(Option<Band>),
    /// Send nothing for SECONDS while the host serves its own traffic (a skillprof
    /// extension): the entry is a window of a production host's life, measured as any other
    /// (`skillprof watch --record` writes runs of them).
    Watch(u32),
    /// Terminate the host and wait for it to exit: implicit at the end of every file.
    Stop,
}

/// What `l_execute_all` asks of Locust: each user sends the input to one listed skill (users
/// spread over the skills in turn), again as soon as it is answered. What `lo_execute` asks:
/// one user per worker, sending its skill its share of the rate on a schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Load {
    pub topic: String,
    pub memory_kb: u64,
    pub wait_ms: u64,
    pub users: u32,
    pub workers: u32,
    pub duration_s: u32,
    /// `lo_execute`'s open loop; `None` for `l_execute_all`.
    pub schedule: Option<LoadSchedule>,
}

impl Load {
    /// The cmds command that asked for it.
    pub fn command(&self) -> &'static str {
        match self.schedule {
            Some(_) => "lo_execute",
            None => "l_execute_all",
        }
    }
}

/// An open loop from Locust's workers: `rps` in all to one skill, each of the workers
/// sending `rps / workers` on a schedule of its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadSchedule {
    pub skill: String,
    pub rps: u32,
    pub poisson: bool,
}

/// What an `o_execute`, `c_execute` or `o_mix` line sends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Traffic {
    pub to: Sends,
    pub load: TrafficLoad,
    /// The whole step; its first fifth warms up and is not measured.
    pub seconds: u32,
}

/// Where a traffic line's requests go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sends {
    /// The sample skills' input to one skill: `o_execute` and `c_execute`.
    Sample {
        skill: String,
        memory_kb: u64,
        wait_ms: u64,
    },
    /// A mix (`o_mix FILE`): each request to one of its skills with that skill's input, in
    /// proportion to the weights. Skills of weight 0 are left out; at least one is left.
    Mix {
        file: PathBuf,
        skills: Vec<MixSkill>,
    },
}

impl Sends {
    /// The skills it sends to.
    pub fn skills(&self) -> Vec<&str> {
        match self {
            Sends::Sample { skill, .. } => vec![skill],
            Sends::Mix { skills, .. } => skills.iter().map(|s| s.skill.as_str()).collect(),
        }
    }
}

/// One skill of a mix file: `{"skill": NAME, "input": JSON, "weight": N}`, and for `skillprof
/// slo --mix` the component it is (`"component": FILE`, beside the mix file).
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MixSkill {
    pub skill: String,
    #[serde(default)]
    pub component: Option<PathBuf>,
    pub input: serde_json::Value,
    pub weight: u32,
}

/// The skills of the mix file at `path` with a weight above 0, at least one; or why not.
pub fn read_mix(path: &Path) -> Result<Vec<MixSkill>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the mix {}: {e}", path.display()))?;
    let skills: Vec<MixSkill> = serde_json::from_str(&text).map_err(|e| {
        format!(
            "the mix {} is not a JSON array of {{\"skill\": NAME, \"input\": JSON, \
             \"weight\": N}} ({e})",
            path.display()
        )
    })?;
    let skills: Vec<MixSkill> = skills.into_iter().filter(|s| s.weight > 0).collect();
    if skills.is_empty() {
        return Err(format!(
            "the mix {} has no skill with a weight above 0: it would send nothing",
            path.display()
        ));
    }
    Ok(skills)
}

/// How a traffic line sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrafficLoad {
    Open { rps: u32, poisson: bool },
    Closed { concurrency: u32 },
}

/// The highest rate one `o_execute` may ask for: far above what one machine sends, a bound
/// on a typo.
pub const MAX_RPS: u32 = 1_000_000;

/// The most Locust workers one line may start: each is a Python process and a namespace.
pub const MAX_WORKERS: u32 = 32;
/// The longest a swarm may be held: an hour, a bound on a loop the run cannot leave early.
pub const MAX_DURATION_S: u32 = 3600;
/// The longest one `watch` line waits: a day (a run of windows takes more lines).
pub const MAX_WATCH_S: u32 = 86_400;

/// Which sample skill a command registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SkillKind {
    Python,
    Rust,
}

impl SkillKind {
    /// The prefix of its skills' names (`sample_py1`, ...), and so of the harness's commands.
    pub fn prefix(self) -> &'static str {
        match self {
            SkillKind::Python => "sample_py",
            SkillKind::Rust => "sample_rs",
        }
    }
}

/// What an add loads copies of: a sample skill, or the component file of a user's add with an
/// input (one without sends nothing, so it loads nothing yet). `capacity` answers per kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Copies {
    Sample(SkillKind),
    Component(PathBuf),
}

impl Copies {
    /// As the reports name it: "Python", "Rust", or the component file's name.
    pub fn label(&self) -> String {
        match self {
            Copies::Sample(SkillKind::Python) => "Python".to_owned(),
            Copies::Sample(SkillKind::Rust) => "Rust".to_owned(),
            Copies::Component(file) => file
                .file_name()
                .unwrap_or(file.as_os_str())
                .to_string_lossy()
                .into_owned(),
        }
    }

    /// The cmds line that loads one more copy, for a run that lacks one.
    pub fn add_line(&self) -> String {
        match self {
            Copies::Sample(kind) => format!("add_{}", kind.prefix().trim_start_matches("sample_")),
            Copies::Component(_) => format!("add {} JSON|@FILE", self.label()),
        }
    }
}

/// As `capacity.json` has always named the samples ("python", "rust"); a component by its path.
impl serde::Serialize for Copies {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Copies::Sample(kind) => kind.serialize(serializer),
            Copies::Component(file) => file.serialize(serializer),
        }
    }
}

/// The most skills one `fill_py` or `fill_rs` adds when the line names no MAX: a bound on a
/// loop that should end at the limit long before.
pub const FILL_MAX: u32 = 10_000;

impl Command {
    /// The sample skill it adds copies of, and how many at once: `add_py`, `p_add_rs N`, ...
    pub fn sample_copies(&self) -> Option<(SkillKind, u32)> {
        match *self {
            Command::AddPy => Some((SkillKind::Python, 1)),
            Command::AddRs => Some((SkillKind::Rust, 1)),
            Command::PAddPy(n) => Some((SkillKind::Python, n)),
            Command::PAddRs(n) => Some((SkillKind::Rust, n)),
            _ => None,
        }
    }

    /// What it loads copies of, compiled and executed once each, and how many at once: the
    /// samples' adds, and a component's add with an input.
    pub fn loads(&self) -> Option<(Copies, u32)> {
        match self {
            Command::AddFile {
                file,
                count,
                input: Some(_),
                ..
            } => Some((Copies::Component(file.clone()), *count)),
            _ => self
                .sample_copies()
                .map(|(kind, count)| (Copies::Sample(kind), count)),
        }
    }

    /// Whether it writes or removes files in the host's skills directory.
    pub fn writes_skills(&self) -> bool {
        matches!(
            self,
            Command::AddFile { .. }
                | Command::AddPy
                | Command::AddRs
                | Command::PAddPy(_)
                | Command::PAddRs(_)
                | Command::Fill { .. }
                | Command::DeleteSkill(_)
        )
    }

    /// Whether it executes skills (and so has latencies to measure).
    pub fn executes(&self) -> bool {
        matches!(
            self,
            Command::ExecuteSkill { .. }
                | Command::Execute { .. }
                | Command::ExecuteAll { .. }
                | Command::PExecuteAll { .. }
                | Command::PExecute { .. }
                | Command::Traffic(_)
                | Command::LExecuteAll(_)
                | Command::Fill { .. }
        )
    }

    /// The command named `name` with the arguments `args`, or a message saying what it expects.
    pub(super) fn parse(
        name: &str,
        args: &[&str],
        cap: InFlightCap,
        dir: Option<&Path>,
    ) -> Result<Self, String> {
        let Some(signature) = SIGNATURES.iter().find(|signature| signature.name == name) else {
            let known: Vec<&str> = SIGNATURES.iter().map(|signature| signature.name).collect();
            return Err(format!(
                "unknown command {name:?}; the commands are {}",
                known.join(", ")
            ));
        };
        let args = Args::new(signature, args, cap, dir)?;
        (signature.build)(&args)
    }
}

struct Signature {
    name: &'static str,
    /// As the error messages show them: optional parameters in brackets.
    params: &'static str,
    build: fn(&Args) -> Result<Command, String>,
}

const fn takes(
    name: &'static str,
    params: &'static str,
    build: fn(&Args) -> Result<Command, String>,
) -> Signature {
    Signature {
        name,
        params,
        build,
    }
}

const SIGNATURES: &[Signature] = &[
    takes("add", "FILE [NAME] [JSON...]", |args| {
        let (file, exports) = args.component(0)?;
        let named = args
            .tokens
            .get(1)
            .filter(|token| !starts_input(token))
            .map(|name| args.skill_name(name.to_string()))
            .transpose()?;
        if named.is_none() {
            args.stem(&file)?;
        }
        let input = args.input_from(1 + usize::from(named.is_some()))?;
        Ok(Command::AddFile {
            file,
            name: named,
            count: 1,
            exports,
            input,
        })
    }),
    takes("p_add", "N FILE [JSON...]", |args| {
        let count = args.required_count(0)?;
        let (file, exports) = args.component(1)?;
        args.stem(&file)?;
        Ok(Command::AddFile {
            file,
            name: None,
            count,
            exports,
            input: args.input_from(2)?,
        })
    }),
    takes("add_py", "", |_| Ok(Command::AddPy)),
    takes("add_rs", "", |_| Ok(Command::AddRs)),
    takes("p_add_py", "N", |args| {
        Ok(Command::PAddPy(args.required_count(0)?))
    }),
    takes("p_add_rs", "N", |args| {
        Ok(Command::PAddRs(args.required_count(0)?))
    }),
    takes("fill_py", "[MAX]", |args| {
        Ok(Command::Fill {
            kind: SkillKind::Python,
            max: args.count(0)?.unwrap_or(FILL_MAX),
        })
    }),
    takes("fill_rs", "[MAX]", |args| {
        Ok(Command::Fill {
            kind: SkillKind::Rust,
            max: args.count(0)?.unwrap_or(FILL_MAX),
        })
    }),
    takes("skills", "", |_| Ok(Command::Skills)),
    takes("cached_skills", "", |_| Ok(Command::CachedSkills)),
    takes(
        "execute_skill",
        "NAME TOPIC [MEMORY_KB] [WAIT_MS]",
        |args| {
            Ok(Command::ExecuteSkill {
                name: args.required_text(0),
                topic: args.required_text(1),
                memory_kb: args.amount(2)?,
                wait_ms: args.amount(3)?,
            })
        },
    ),
    takes("execute", "NAME JSON...", |args| {
        Ok(Command::Execute {
            name: args.required_text(0),
            input: args.json(1)?,
            times: 1,
        })
    }),
    takes("execute_all", "[TOPIC] [MEMORY_KB] [WAIT_MS]", |args| {
        Ok(Command::ExecuteAll {
            topic: args.topic(0),
            memory_kb: args.amount(1)?,
            wait_ms: args.amount(2)?,
        })
    }),
    takes(
        "p_execute_all",
        "[TOPIC] [MEMORY_KB] [WAIT_MS] [TIMES]",
        |args| {
            let (topic, memory_kb, wait_ms) = (args.topic(0), args.amount(1)?, args.amount(2)?);
            let times = args.count(3)?.unwrap_or(1);
            if args.cap.check(times, 1).is_err() {
                let cap = args.cap;
                return Err(args.problem(format!(
                    "TIMES must be at most {cap} (--max-in-flight), got {times}"
                )));
            }
            Ok(Command::PExecuteAll {
                topic,
                memory_kb,
                wait_ms,
                times,
            })
        },
    ),
    takes(
        "p_execute",
        "TIMES NAME:MEMORY_KB [NAME:MEMORY_KB...]",
        |args| {
            let times = args.required_count(0)?;
            // The other form, `p_execute TIMES NAME JSON`: a name is never NAME:MEMORY_KB.
            if !args.tokens[1].contains(':') {
                if args.tokens.len() < 3 {
                    return Err(args.problem(format!(
                        "expected NAME:MEMORY_KB, or NAME then a JSON input (TIMES NAME \
                         JSON|@FILE), got {:?} alone",
                        args.tokens[1]
                    )));
                }
                if let Err(too_many) = args.cap.check(times, 1) {
                    return Err(args.problem(too_many));
                }
                return Ok(Command::Execute {
                    name: args.required_text(1),
                    input: args.json(2)?,
                    times,
                });
            }
            let skills = args.tokens[1..]
                .iter()
                .map(|token| {
                    let (name, kb) = token.split_once(':').ok_or_else(|| {
                        args.problem(format!("expected NAME:MEMORY_KB, got {token:?}"))
                    })?;
                    let kb = python_int(kb)
                        .and_then(|kb| u64::try_from(kb).ok())
                        .ok_or_else(|| {
                            args.problem(format!(
                                "MEMORY_KB must be a whole number, got {kb:?} in {token:?}"
                            ))
                        })?;
                    Ok((name.to_owned(), kb))
                })
                .collect::<Result<Vec<_>, String>>()?;
            if let Err(too_many) = args.cap.check(times, skills.len()) {
                return Err(args.problem(too_many));
            }
            Ok(Command::PExecute { times, skills })
        },
    ),
    takes(
        "o_execute",
        "NAME RATE SECONDS [ARRIVALS] [MEMORY_KB] [WAIT_MS]",
        |args| {
            let rps = args.rate(1)?;
            let poisson = args.arrivals(3)?;
            Ok(Command::Traffic(Traffic {
                to: Sends::Sample {
                    skill: args.required_text(0),
                    memory_kb: args.amount(4)?,
                    wait_ms: args.amount(5)?,
                },
                load: TrafficLoad::Open { rps, poisson },
                seconds: args.traffic_seconds(2)?,
            }))
        },
    ),
    takes("o_mix", "FILE RATE SECONDS [ARRIVALS]", |args| {
        let rps = args.rate(1)?;
        let poisson = args.arrivals(3)?;
        Ok(Command::Traffic(Traffic {
            to: args.mix(0)?,
            load: TrafficLoad::Open { rps, poisson },
            seconds: args.traffic_seconds(2)?,
        }))
    }),
    takes(
        "c_execute",
        "NAME CONCURRENCY SECONDS [MEMORY_KB] [WAIT_MS]",
        |args| {
            let concurrency = args.required_count(1)?;
            if args.cap.check(concurrency, 1).is_err() {
                let cap = args.cap;
                return Err(args.problem(format!(
                    "CONCURRENCY must be at most {cap} (--max-in-flight), got {concurrency}"
                )));
            }
            Ok(Command::Traffic(Traffic {
                to: Sends::Sample {
                    skill: args.required_text(0),
                    memory_kb: args.amount(3)?,
                    wait_ms: args.amount(4)?,
                },
                load: TrafficLoad::Closed { concurrency },
                seconds: args.traffic_seconds(2)?,
            }))
        },
    ),
    takes(
        "l_execute_all",
        "TOPIC MEMORY_KB WAIT_MS USERS WORKERS DURATION_S",
        |args| {
            let load = Load {
                topic: args.required_text(0),
                memory_kb: args.amount(1)?,
                wait_ms: args.amount(2)?,
                users: args.required_count(3)?,
                workers: args.required_count(4)?,
                duration_s: args.required_count(5)?,
                schedule: None,
            };
            let cap = args.cap;
            if cap.check(load.users, 1).is_err() {
                return Err(args.problem(format!(
                    "USERS must be at most {cap} (--max-in-flight), got {}",
                    load.users
                )));
            }
            if load.workers > MAX_WORKERS {
                return Err(args.problem(format!(
                    "WORKERS must be at most {MAX_WORKERS}, got {}",
                    load.workers
                )));
            }
            if load.users < load.workers {
                return Err(args.problem(format!(
                    "USERS must be at least WORKERS, so that every worker has a user: got {} \
                     users for {} workers",
                    load.users, load.workers
                )));
            }
            if load.duration_s > MAX_DURATION_S {
                return Err(args.problem(format!(
                    "DURATION_S must be at most {MAX_DURATION_S}, got {}",
                    load.duration_s
                )));
            }
            Ok(Command::LExecuteAll(load))
        },
    ),
    takes(
        "lo_execute",
        "NAME RATE SECONDS WORKERS [ARRIVALS] [MEMORY_KB] [WAIT_MS]",
        |args| {
            let rps = args.rate(1)?;
            let workers = args.required_count(3)?;
            if workers > MAX_WORKERS {
                return Err(args.problem(format!(
                    "WORKERS must be at most {MAX_WORKERS}, got {workers}"
                )));
            }
            if rps < workers {
                return Err(args.problem(format!(
                    "RATE must be at least WORKERS, so that every worker sends: got {rps}/s \
                     for {workers} workers"
                )));
            }
            let seconds = args.traffic_seconds(2)?;
            Ok(Command::LExecuteAll(Load {
                topic: DEFAULT_TOPIC.to_owned(),
                memory_kb: args.amount(5)?,
                wait_ms: args.amount(6)?,
                users: workers,
                workers,
                duration_s: seconds,
                schedule: Some(LoadSchedule {
                    skill: args.required_text(0),
                    rps,
                    poisson: args.arrivals(4)?,
                }),
            }))
        },
    ),
    takes("drop_cached_skill", "[NAME]", |args| {
        Ok(Command::DropCachedSkill(args.text(0)))
    }),
    takes("delete_skill", "[NAME]", |args| {
        Ok(Command::DeleteSkill(args.text(0)))
    }),
    takes("trim", "", |_| Ok(Command::Trim)),
    takes("pressure", "BAND", |args| {
        let band = args.required_text(0);
        if band == "off" {
            return Ok(Command::Pressure(None));
        }
        match crate::ground::band::parse(&band) {
            Ok(band) => Ok(Command::Pressure(Some(band))),
            // The one name that is a band but not one to hold: say why.
            Err(why) if band == "min" => Err(args.problem(why)),
            Err(_) => Err(args.problem(format!(
                "BAND must be baseline, promo, high, low or off, got {band:?}"
            ))),
        }
    }),
    takes("watch", "SECONDS", |args| {
        let seconds = args.required_count(0)?;
        if seconds > MAX_WATCH_S {
            return Err(args.problem(format!(
                "SECONDS must be at most {MAX_WATCH_S} (a day), got {seconds}"
            )));
        }
        Ok(Command::Watch(seconds))
    }),
    takes("stop", "", |_| Ok(Command::Stop)),
];

/// An input as a cmds line or `skillprof slo --input` gives it: JSON, or `@FILE` holding JSON,
/// the file found by `locate`. The error says what was wrong, for the caller to prefix.
pub fn read_input(
    given: &str,
    locate: impl FnOnce(&str) -> Result<PathBuf, String>,
) -> Result<serde_json::Value, String> {
    let (text, from) = match given.strip_prefix('@') {
        Some(file) => {
            let path = locate(file)?;
            let text = std::fs::read_to_string(&path)
                .map_err(|e| format!("cannot read the input {}: {e}", path.display()))?;
            (text, format!(" in {}", path.display()))
        }
        None => (given.to_owned(), String::new()),
    };
    serde_json::from_str(&text)
        .map_err(|e| format!("the input is not JSON ({e}){from}: {}", text.trim()))
}

/// Whether an add's token is its input rather than a NAME: a name is letters, digits, `_`
/// and `-`, so JSON's object, array and string, and `@FILE`, cannot be one.
fn starts_input(token: &str) -> bool {
    token.starts_with(['@', '{', '[', '"'])
}

/// The arguments of one line, already known to be as many as its command takes.
struct Args<'a> {
    signature: &'a Signature,
    tokens: &'a [&'a str],
    cap: InFlightCap,
    /// The folder of the cmds file, where an `@FILE` input is read; `None` for text that
    /// came from no file.
    dir: Option<&'a Path>,
}

impl<'a> Args<'a> {
    fn new(
        signature: &'a Signature,
        tokens: &'a [&'a str],
        cap: InFlightCap,
        dir: Option<&'a Path>,
    ) -> Result<Self, String> {
        let args = Self {
            signature,
            tokens,
            cap,
            dir,
        };
        let params = signature.params.split_whitespace();
        let required = params
            .clone()
            .filter(|param| !param.starts_with('['))
            .count();
        // A last parameter written `X...` or `[X...]` takes any number of further arguments.
        let most = if signature.params.ends_with("...]") || signature.params.ends_with("...") {
            usize::MAX
        } else {
            params.count()
        };
        if (required..=most).contains(&tokens.len()) {
            return Ok(args);
        }
        let plural = if tokens.len() == 1 { "" } else { "s" };
        let hint = if tokens.iter().any(|token| token.starts_with('#')) {
            " (a # comment must be on a line of its own)"
        } else {
            ""
        };
        Err(args.problem(format!("got {} argument{plural}{hint}", tokens.len())))
    }

    /// `message` prefixed with what the command takes.
    fn problem(&self, message: impl Display) -> String {
        let Signature { name, params, .. } = self.signature;
        let params = if params.is_empty() {
            "no arguments"
        } else {
            params
        };
        format!("{name} takes {params}; {message}")
    }

    fn param(&self, index: usize) -> &str {
        let param = self
            .signature
            .params
            .split_whitespace()
            .nth(index)
            .expect("a builder reads only declared parameters");
        param.trim_matches(['[', ']'])
    }

    fn text(&self, index: usize) -> Option<String> {
        self.tokens.get(index).map(|token| token.to_string())
    }

    fn required_text(&self, index: usize) -> String {
        self.text(index).expect("the argument count was checked")
    }

    fn topic(&self, index: usize) -> String {
        self.text(index)
            .unwrap_or_else(|| DEFAULT_TOPIC.to_string())
    }

    /// MEMORY_KB or WAIT_MS: a whole number, 0 when omitted.
    fn amount(&self, index: usize) -> Result<u64, String> {
        Ok(self.integer(index, 0)?.unwrap_or(0))
    }

    /// N or TIMES: at least 1.
    fn count(&self, index: usize) -> Result<Option<u32>, String> {
        self.integer(index, 1)
    }

    fn required_count(&self, index: usize) -> Result<u32, String> {
        Ok(self.count(index)?.expect("the argument count was checked"))
    }

    /// A traffic step's RATE: at least 1, at most [`MAX_RPS`].
    fn rate(&self, index: usize) -> Result<u32, String> {
        let rps = self.required_count(index)?;
        if rps > MAX_RPS {
            return Err(self.problem(format!(
                "RATE must be at most {MAX_RPS} requests per second, got {rps}"
            )));
        }
        Ok(rps)
    }

    /// A traffic step's ARRIVALS: `constant` (the default) or `poisson` (true).
    fn arrivals(&self, index: usize) -> Result<bool, String> {
        match self.text(index).as_deref() {
            None | Some("constant") => Ok(false),
            Some("poisson") => Ok(true),
            Some(other) => Err(self.problem(format!(
                "ARRIVALS must be constant or poisson, got {other:?}"
            ))),
        }
    }

    /// A traffic step's SECONDS: at least 1, at most [`MAX_DURATION_S`].
    fn traffic_seconds(&self, index: usize) -> Result<u32, String> {
        let seconds = self.required_count(index)?;
        if seconds > MAX_DURATION_S {
            return Err(self.problem(format!(
                "SECONDS must be at most {MAX_DURATION_S}, got {seconds}"
            )));
        }
        Ok(seconds)
    }

    /// The file a line names, from the cmds file's folder unless absolute. `written`: as the
    /// line wrote it, for the error.
    fn path(&self, file: &str, written: &str) -> Result<PathBuf, String> {
        self.beside(file, written).map_err(|why| self.problem(why))
    }

    /// [`Args::path`], its error not yet said as a problem of this line.
    fn beside(&self, file: &str, written: &str) -> Result<PathBuf, String> {
        let file = Path::new(file);
        match self.dir {
            _ if file.is_absolute() => Ok(file.to_path_buf()),
            Some(dir) => Ok(dir.join(file)),
            None => Err(format!(
                "{written} is read beside the cmds file, and this text came from none: give an \
                 absolute path"
            )),
        }
    }

    /// The component file at `index` and its exports, read now so that a missing file or one
    /// that is not a component fails before anything runs.
    fn component(&self, index: usize) -> Result<(PathBuf, Exports), String> {
        let file = self.path(self.tokens[index], self.tokens[index])?;
        let exports = component::read(&file).map_err(|why| self.problem(why))?;
        Ok((file, exports))
    }

    /// A skill's name as a host registers it (`<name>.wasm` in its folder, a path segment in
    /// its routes): ASCII letters, digits, `_` and `-`.
    fn skill_name(&self, name: String) -> Result<String, String> {
        let fits = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        match fits {
            true => Ok(name),
            false => Err(self.problem(format!(
                "NAME {name:?} must be ASCII letters, digits, _ and -, as a skill file's name is"
            ))),
        }
    }

    /// The name copies of `file` are numbered after: its stem, which must itself be a name.
    fn stem(&self, file: &Path) -> Result<String, String> {
        let stem = CopyNames::stem(file);
        self.skill_name(stem.clone()).map_err(|_| {
            self.problem(format!(
                "copies are named after the file, and {stem:?} is not a skill's name (ASCII \
                 letters, digits, _ and -): rename the file, or give NAME (add FILE NAME)"
            ))
        })
    }

    /// The mix file at `index`, read now: a JSON array of `{"skill", "input", "weight"}`,
    /// with a weight above 0 somewhere.
    fn mix(&self, index: usize) -> Result<Sends, String> {
        let file = self.path(self.tokens[index], self.tokens[index])?;
        let skills = read_mix(&file).map_err(|why| self.problem(why))?;
        if let Some(skill) = skills.iter().find(|s| s.component.is_some()) {
            return Err(self.problem(format!(
                "the mix {} gives {} a \"component\": o_mix sends to skills the run added \
                 (add FILE NAME), and a component in the mix is `skillprof slo --mix`'s",
                file.display(),
                skill.skill
            )));
        }
        Ok(Sends::Mix { file, skills })
    }

    /// A JSON input from `index` on: the rest of the line, or `@FILE` alone, read now so that
    /// a missing file or bad JSON fails before anything runs. The lexer split the line at
    /// whitespace, which JSON ignores between its tokens (a run of spaces inside a string
    /// becomes one); a file keeps its text as written.
    /// An add's optional input from `index` on: none when the line ends before it, else
    /// JSON|@FILE, which must start as an input does (see [`starts_input`]).
    fn input_from(&self, index: usize) -> Result<Option<String>, String> {
        match self.tokens.get(index) {
            None => Ok(None),
            Some(token) if starts_input(token) => self.json(index).map(Some),
            Some(token) => Err(self.problem(format!(
                "{token:?} is not an input: an input is JSON (an object, an array or a string) \
                 or @FILE"
            ))),
        }
    }

    fn json(&self, index: usize) -> Result<String, String> {
        let given = self.tokens[index..].join(" ");
        let input = read_input(&given, |file| self.beside(file, &given))
            .map_err(|why| self.problem(why))?;
        Ok(input.to_string())
    }

    /// The integer at `index`, if given. The harness typed `1.5` as a float and `1e3` too;
    /// both are refused here like any other non-integer.
    fn integer<T: TryFrom<i128>>(&self, index: usize, min: i128) -> Result<Option<T>, String> {
        let Some(token) = self.tokens.get(index) else {
            return Ok(None);
        };
        let param = self.param(index);
        let value = python_int(token)
            .ok_or_else(|| self.problem(format!("{param} must be an integer, got {token:?}")))?;
        if value < min {
            return Err(self.problem(format!("{param} must be at least {min}, got {token}")));
        }
        T::try_from(value)
            .map(Some)
            .map_err(|_| self.problem(format!("{param} is too large, got {token}")))
    }
}
