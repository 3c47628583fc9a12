//! The cmds language: a workload file, validated whole into a [`Plan`] before anything runs.
//!
//! The language and its hash come from the 2024 benchmark harness, and old files must mean
//! what they meant there; `cmds/README.md` describes it. This module knows nothing of hosts
//! or probes: it says what to do, the runner does it.

mod command;
mod hash;
mod in_flight;
mod lexer;

pub use command::{
    Command, Copies, DEFAULT_TOPIC, FILL_MAX, Load, LoadSchedule, MAX_RPS, MAX_WATCH_S, MixSkill,
    Sends, SkillKind, Traffic, TrafficLoad, read_input, read_mix,
};
pub use in_flight::{InFlightCap, TooManyInFlight};

use anyhow::Context;
use std::collections::{BTreeMap, BTreeSet};
use std::{fmt, fs, path::Path};

/// A valid cmds file: what to run, in order, always ending with [`Command::Stop`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub entries: Vec<Entry>,
    /// The cmds hash the harness logged for this file (see `cmds/README.md`).
    pub hash: String,
}

impl Plan {
    /// The first skill a mix sends to that no earlier line registers, with the entry: on a
    /// host the run starts, every request to it would fail. Copies are named as the runner
    /// names them ([`CopyNames`]); after a `fill_py`/`fill_rs`, any copy of that sample may
    /// be there.
    pub fn unregistered_mix_skill(&self) -> Option<(&Entry, &str)> {
        let mut names = CopyNames::default();
        let mut registered = BTreeSet::new();
        let mut filled = Vec::new();
        for entry in &self.entries {
            let copies = |count: u32| count.saturating_mul(entry.repeat);
            if let Some((kind, count)) = entry.command.sample_copies() {
                registered.extend(names.next(kind.prefix(), copies(count)));
                continue;
            }
            match &entry.command {
                Command::AddFile {
                    name: Some(name), ..
                } => {
                    registered.insert(name.clone());
                }
                Command::AddFile {
                    file,
                    name: None,
                    count,
                    ..
                } => registered.extend(names.next(&CopyNames::stem(file), copies(*count))),
                Command::Fill { kind, .. } => filled.push(kind.prefix()),
                Command::Traffic(Traffic {
                    to: Sends::Mix { skills, .. },
                    ..
                }) => {
                    let missing = skills.iter().map(|s| s.skill.as_str()).find(|skill| {
                        !registered.contains(*skill)
                            && !filled.iter().any(|prefix| skill.starts_with(prefix))
                    });
                    if let Some(skill) = missing {
                        return Some((entry, skill));
                    }
                }
                _ => {}
            }
        }
        None
    }
}

/// The names copies of a skill get: a prefix and a number counted per prefix from 1
/// (`sample_py1`, `weather2`), so that a run's runner and a check of its plan name them alike.
#[derive(Debug, Default)]
pub struct CopyNames(BTreeMap<String, u32>);

impl CopyNames {
    /// The next `count` names after `prefix`.
    pub fn next(&mut self, prefix: &str, count: u32) -> Vec<String> {
        let counter = self.0.entry(prefix.to_owned()).or_default();
        (0..count)
            .map(|_| {
                *counter += 1;
                format!("{prefix}{counter}")
            })
            .collect()
    }

    /// Whether `name` is one of the names [`CopyNames::next`] gives after `prefix`.
    pub fn is_copy(name: &str, prefix: &str) -> bool {
        name.strip_prefix(prefix)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    }

    /// The prefix of a component file's copies: its stem (`weather.wasm`: `weather`).
    pub fn stem(file: &Path) -> String {
        file.file_stem()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned()
    }
}

/// One line of the file: measured and logged as one unit, however often it repeats.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// 1-based; `None` for the implicit `stop` at the end of the file.
    pub line: Option<usize>,
    /// The line's tokens joined by single spaces, as the harness logged it: `4 add_py`.
    pub name: String,
    /// How often to run the command: the line's leading integer, else 1.
    pub repeat: u32,
    pub command: Command,
}

/// Every problem of a cmds file, one `file:line: message` per line.
#[derive(Debug, PartialEq, Eq)]
pub struct InvalidCmds {
    pub file: String,
    pub errors: Vec<LineError>,
}

#[derive(Debug, PartialEq, Eq)]
pub struct LineError {
    pub line: usize,
    pub message: String,
}

impl fmt::Display for InvalidCmds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, LineError { line, message }) in self.errors.iter().enumerate() {
            let separator = if index == 0 { "" } else { "\n" };
            write!(f, "{separator}{}:{line}: {message}", self.file)?;
        }
        Ok(())
    }
}

impl std::error::Error for InvalidCmds {}

/// Reads and validates the cmds file at `path`; errors name it as given. Its `@FILE` inputs
/// are read from its folder.
pub fn read(path: &Path, cap: InFlightCap) -> anyhow::Result<Plan> {
    let text = fs::read_to_string(path)
        .with_context(|| format!("cannot read the cmds file {}", path.display()))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    Ok(parse_in(&path.display().to_string(), dir, &text, cap)?)
}

/// Validates the whole of `text` and reports every bad line, so that one edit fixes them all.
/// `file` names the file in the errors. An `@FILE` input must be an absolute path: the text
/// has no folder of its own.
pub fn parse(file: &str, text: &str, cap: InFlightCap) -> Result<Plan, InvalidCmds> {
    validate(file, None, text, cap)
}

/// [`parse`] for text that reads its `@FILE` inputs and component files from `dir`, as a cmds
/// file in `dir` does.
pub fn parse_in(file: &str, dir: &Path, text: &str, cap: InFlightCap) -> Result<Plan, InvalidCmds> {
    validate(file, Some(dir), text, cap)
}

fn validate(
    file: &str,
    dir: Option<&Path>,
    text: &str,
    cap: InFlightCap,
) -> Result<Plan, InvalidCmds> {
    let lines = lexer::command_lines(text);
    let mut entries = Vec::with_capacity(lines.len() + 1);
    let mut errors = Vec::new();
    for (index, line) in lines.iter().enumerate() {
        let checked = entry(line, cap, dir).and_then(|entry| match lines.get(index + 1) {
            // Old files may end with an explicit stop; anything after one would never run.
            Some(next) if entry.command == Command::Stop => Err(stop_followed_by(next.number)),
            _ => Ok(entry),
        });
        match checked {
            Ok(entry) => entries.push(entry),
            Err(message) => errors.push(LineError {
                line: line.number,
                message,
            }),
        }
    }
    if !errors.is_empty() {
        return Err(InvalidCmds {
            file: file.to_string(),
            errors,
        });
    }
    if entries
        .last()
        .is_none_or(|last| last.command != Command::Stop)
    {
        entries.push(Entry {
            line: None,
            name: "stop".to_string(),
            repeat: 1,
            command: Command::Stop,
        });
    }
    let hash = hash::cmds_hash(lines.iter().map(|line| line.tokens.as_slice()));
    Ok(Plan { entries, hash })
}

fn entry(line: &lexer::Line<'_>, cap: InFlightCap, dir: Option<&Path>) -> Result<Entry, String> {
    let tokens = line.tokens.as_slice();
    let first = tokens[0];
    let (count, rest) = match lexer::python_int(first) {
        Some(count) => (Some(count), &tokens[1..]),
        None if first.parse::<f64>().is_ok() => {
            return Err(format!("a repeat count must be an integer, got {first:?}"));
        }
        None => (None, tokens),
    };
    let [name, args @ ..] = rest else {
        return Err(format!(
            "the repeat count {first} must be followed by a command, as in `{first} execute_all`"
        ));
    };
    let repeat = count.map(|count| repeat_count(count, first)).transpose()?;
    let command = Command::parse(name, args, cap, dir)?;
    match command {
        Command::Stop if repeat.is_some() => {
            return Err("stop takes no repeat count: it ends the workload".to_string());
        }
        Command::LExecuteAll(_) if repeat.is_some() => {
            return Err(
                "l_execute_all takes no repeat count: its DURATION_S says how long it runs"
                    .to_string(),
            );
        }
        Command::Pressure(_) if repeat.is_some() => {
            return Err(
                "pressure takes no repeat count: it holds a band until the next pressure line"
                    .to_string(),
            );
        }
        _ => {}
    }
    Ok(Entry {
        line: Some(line.number),
        name: tokens.join(" "),
        repeat: repeat.unwrap_or(1),
        command,
    })
}

fn stop_followed_by(next_line: usize) -> String {
    format!(
        "stop ends the workload, but line {next_line} follows it; delete the stop \
         (it is implicit at the end of every file) or the lines after it"
    )
}

fn repeat_count(count: i128, token: &str) -> Result<u32, String> {
    if count < 1 {
        return Err(format!("a repeat count must be at least 1, got {token}"));
    }
    u32::try_from(count).map_err(|_| format!("the repeat count {token} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traffic_lines_read_their_rate_arrivals_and_bounds() {
        let cap = InFlightCap::DEFAULT;
        let open =
            Command::parse("o_execute", &["hello", "2000", "10", "poisson"], cap, None).unwrap();
        assert_eq!(
            open,
            Command::Traffic(command::Traffic {
                to: Sends::Sample {
                    skill: "hello".into(),
                    memory_kb: 0,
                    wait_ms: 0,
                },
                load: TrafficLoad::Open {
                    rps: 2000,
                    poisson: true
                },
                seconds: 10,
            })
        );
        let closed =
            Command::parse("c_execute", &["hello", "150", "20", "100"], cap, None).unwrap();
        assert!(matches!(
            closed,
            Command::Traffic(command::Traffic {
                load: TrafficLoad::Closed { concurrency: 150 },
                to: Sends::Sample { memory_kb: 100, .. },
                ..
            })
        ));
        let refused = |args: &[&str]| Command::parse("o_execute", args, cap, None).unwrap_err();
        assert!(refused(&["hello", "0", "5"]).contains("RATE must be at least 1"));
        assert!(refused(&["hello", "10", "5", "bursty"]).contains("constant or poisson"));
        assert!(refused(&["hello", "10", "99999"]).contains("SECONDS must be at most"));
        assert!(refused(&["hello", "2000000", "5"]).contains("RATE must be at most"));
        let from_locust = Command::parse(
            "lo_execute",
            &["hello", "3000", "10", "3", "poisson"],
            cap,
            None,
        )
        .unwrap();
        assert_eq!(
            from_locust,
            Command::LExecuteAll(command::Load {
                topic: DEFAULT_TOPIC.into(),
                memory_kb: 0,
                wait_ms: 0,
                users: 3,
                workers: 3,
                duration_s: 10,
                schedule: Some(LoadSchedule {
                    skill: "hello".into(),
                    rps: 3000,
                    poisson: true,
                }),
            })
        );
        let refused = |args: &[&str]| Command::parse("lo_execute", args, cap, None).unwrap_err();
        assert!(refused(&["hello", "2", "5", "3"]).contains("RATE must be at least WORKERS"));
        assert!(refused(&["hello", "100", "5", "99"]).contains("WORKERS must be at most"));
        assert!(refused(&["hello", "100", "5", "2", "bursty"]).contains("constant or poisson"));
        assert!(refused(&["hello", "100", "5"]).contains("WORKERS"));
    }
    use crate::ground::band::Band;
    use crate::ground::component::Exports;
    use Command::*;

    fn plan(text: &str) -> Plan {
        parse("test.cmds", text, InFlightCap::DEFAULT)
            .unwrap_or_else(|invalid| panic!("{text:?} is valid, but:\n{invalid}"))
    }

    fn errors(text: &str) -> String {
        parse("test.cmds", text, InFlightCap::DEFAULT)
            .expect_err(text)
            .to_string()
    }

    fn entry(line: usize, name: &str, repeat: u32, command: Command) -> Entry {
        Entry {
            line: Some(line),
            name: name.to_string(),
            repeat,
            command,
        }
    }

    fn implicit_stop() -> Entry {
        Entry {
            line: None,
            name: "stop".to_string(),
            repeat: 1,
            command: Stop,
        }
    }

    fn text(s: &str) -> String {
        s.to_string()
    }

    #[test]
    fn parses_good_lines() {
        let cases = [
            ("add_py", entry(1, "add_py", 1, AddPy)),
            ("watch 60", entry(1, "watch 60", 1, Watch(60))),
            (
                "execute sample_rs1 {\"burn_ms\":  300, \"topic\": \"a  b\"}",
                entry(
                    1,
                    "execute sample_rs1 {\"burn_ms\": 300, \"topic\": \"a b\"}",
                    1,
                    Execute {
                        name: "sample_rs1".into(),
                        input: r#"{"burn_ms":300,"topic":"a b"}"#.into(),
                        times: 1,
                    },
                ),
            ),
            ("4 add_rs", entry(1, "4 add_rs", 4, AddRs)),
            ("+2   skills", entry(1, "+2 skills", 2, Skills)),
            (
                "1_000 cached_skills",
                entry(1, "1_000 cached_skills", 1000, CachedSkills),
            ),
            ("p_add_py 10", entry(1, "p_add_py 10", 1, PAddPy(10))),
            ("p_add_rs 3", entry(1, "p_add_rs 3", 1, PAddRs(3))),
            (
                "fill_rs",
                entry(
                    1,
                    "fill_rs",
                    1,
                    Fill {
                        kind: SkillKind::Rust,
                        max: FILL_MAX,
                    },
                ),
            ),
            (
                "fill_py 40",
                entry(
                    1,
                    "fill_py 40",
                    1,
                    Fill {
                        kind: SkillKind::Python,
                        max: 40,
                    },
                ),
            ),
            (
                "execute_skill sample_py1 Alice",
                entry(
                    1,
                    "execute_skill sample_py1 Alice",
                    1,
                    ExecuteSkill {
                        name: text("sample_py1"),
                        topic: text("Alice"),
                        memory_kb: 0,
                        wait_ms: 0,
                    },
                ),
            ),
            (
                "execute_skill sample_py1 Alice 100 20",
                entry(
                    1,
                    "execute_skill sample_py1 Alice 100 20",
                    1,
                    ExecuteSkill {
                        name: text("sample_py1"),
                        topic: text("Alice"),
                        memory_kb: 100,
                        wait_ms: 20,
                    },
                ),
            ),
            (
                "execute_all",
                entry(
                    1,
                    "execute_all",
                    1,
                    ExecuteAll {
                        topic: text(DEFAULT_TOPIC),
                        memory_kb: 0,
                        wait_ms: 0,
                    },
                ),
            ),
            (
                "10 execute_all 42 7",
                entry(
                    1,
                    "10 execute_all 42 7",
                    10,
                    ExecuteAll {
                        topic: text("42"),
                        memory_kb: 7,
                        wait_ms: 0,
                    },
                ),
            ),
            (
                "p_execute_all",
                entry(
                    1,
                    "p_execute_all",
                    1,
                    PExecuteAll {
                        topic: text(DEFAULT_TOPIC),
                        memory_kb: 0,
                        wait_ms: 0,
                        times: 1,
                    },
                ),
            ),
            (
                "p_execute_all Max 1000 100 15",
                entry(
                    1,
                    "p_execute_all Max 1000 100 15",
                    1,
                    PExecuteAll {
                        topic: text("Max"),
                        memory_kb: 1000,
                        wait_ms: 100,
                        times: 15,
                    },
                ),
            ),
            (
                "p_execute 3 sample_rs1:8192 sample_rs2:0",
                entry(
                    1,
                    "p_execute 3 sample_rs1:8192 sample_rs2:0",
                    1,
                    PExecute {
                        times: 3,
                        skills: vec![(text("sample_rs1"), 8192), (text("sample_rs2"), 0)],
                    },
                ),
            ),
            (
                "l_execute_all Bob 512 9000 2000 4 30",
                entry(
                    1,
                    "l_execute_all Bob 512 9000 2000 4 30",
                    1,
                    LExecuteAll(command::Load {
                        topic: text("Bob"),
                        memory_kb: 512,
                        wait_ms: 9000,
                        users: 2000,
                        workers: 4,
                        duration_s: 30,
                        schedule: None,
                    }),
                ),
            ),
            (
                "10 drop_cached_skill",
                entry(1, "10 drop_cached_skill", 10, DropCachedSkill(None)),
            ),
            (
                "drop_cached_skill sample_rs2",
                entry(
                    1,
                    "drop_cached_skill sample_rs2",
                    1,
                    DropCachedSkill(Some(text("sample_rs2"))),
                ),
            ),
            (
                "delete_skill",
                entry(1, "delete_skill", 1, DeleteSkill(None)),
            ),
            (
                "delete_skill sample_py3",
                entry(
                    1,
                    "delete_skill sample_py3",
                    1,
                    DeleteSkill(Some(text("sample_py3"))),
                ),
            ),
            (
                "pressure low",
                entry(1, "pressure low", 1, Pressure(Some(Band::Low))),
            ),
            (
                "pressure baseline",
                entry(1, "pressure baseline", 1, Pressure(Some(Band::Baseline))),
            ),
            ("pressure off", entry(1, "pressure off", 1, Pressure(None))),
        ];
        for (line, expected) in cases {
            assert_eq!(plan(line).entries, [expected, implicit_stop()], "{line:?}");
        }
    }

    #[test]
    fn keeps_source_lines_and_ends_with_an_implicit_stop() {
        let plan = plan("# setup\n\nadd_py\n\n  # twice\n2 skills\n");
        assert_eq!(
            plan.entries,
            [
                entry(3, "add_py", 1, AddPy),
                entry(6, "2 skills", 2, Skills),
                implicit_stop()
            ]
        );
        assert_eq!(
            parse("empty.cmds", "# nothing\n", InFlightCap::DEFAULT)
                .unwrap()
                .entries,
            [implicit_stop()]
        );
    }

    #[test]
    fn an_explicit_stop_is_the_implicit_one_when_it_comes_last() {
        assert_eq!(
            plan("skills\nstop\n# done\n").entries,
            [entry(1, "skills", 1, Skills), entry(2, "stop", 1, Stop)]
        );
        assert_eq!(
            errors("stop\n\nskills\nstop"),
            "test.cmds:1: stop ends the workload, but line 3 follows it; delete the stop (it is implicit at the end of \
             every file) or the lines after it"
        );
    }

    #[test]
    fn refuses_bad_lines_saying_what_is_expected() {
        let cases = [
            (
                "frobnicate",
                "unknown command \"frobnicate\"; the commands are add, p_add, add_py, add_rs, p_add_py, p_add_rs, fill_py, fill_rs, skills, cached_skills, execute_skill, execute, execute_all, p_execute_all, p_execute, o_execute, o_mix, c_execute, l_execute_all, lo_execute, drop_cached_skill, delete_skill, trim, pressure, watch, stop",
            ),
            (
                "execute_skill sample_py1 Alice abc",
                "execute_skill takes NAME TOPIC [MEMORY_KB] [WAIT_MS]; MEMORY_KB must be an integer, got \"abc\"",
            ),
            (
                "execute_skill sample_py1 Alice 1.5",
                "execute_skill takes NAME TOPIC [MEMORY_KB] [WAIT_MS]; MEMORY_KB must be an integer, got \"1.5\"",
            ),
            (
                "execute_skill sample_py1 Alice 0 1e3",
                "execute_skill takes NAME TOPIC [MEMORY_KB] [WAIT_MS]; WAIT_MS must be an integer, got \"1e3\"",
            ),
            (
                "execute_skill sample_py1",
                "execute_skill takes NAME TOPIC [MEMORY_KB] [WAIT_MS]; got 1 argument",
            ),
            (
                "execute_skill a b 0 0 0",
                "execute_skill takes NAME TOPIC [MEMORY_KB] [WAIT_MS]; got 5 arguments",
            ),
            (
                "execute_skill a b 0 99999999999999999999999",
                "execute_skill takes NAME TOPIC [MEMORY_KB] [WAIT_MS]; WAIT_MS is too large, got 99999999999999999999999",
            ),
            (
                "execute_all Bob -5",
                "execute_all takes [TOPIC] [MEMORY_KB] [WAIT_MS]; MEMORY_KB must be at least 0, got -5",
            ),
            ("p_add_py", "p_add_py takes N; got 0 arguments"),
            (
                "p_add_py 0",
                "p_add_py takes N; N must be at least 1, got 0",
            ),
            (
                "p_add_rs -2",
                "p_add_rs takes N; N must be at least 1, got -2",
            ),
            (
                "p_add_rs ten",
                "p_add_rs takes N; N must be an integer, got \"ten\"",
            ),
            (
                "p_execute_all Max 0 0 0",
                "p_execute_all takes [TOPIC] [MEMORY_KB] [WAIT_MS] [TIMES]; TIMES must be at least 1, got 0",
            ),
            (
                "p_execute_all Max 0 0 10001",
                "p_execute_all takes [TOPIC] [MEMORY_KB] [WAIT_MS] [TIMES]; TIMES must be at most 10000 (--max-in-flight), got 10001",
            ),
            (
                "p_execute 3",
                "p_execute takes TIMES NAME:MEMORY_KB [NAME:MEMORY_KB...]; got 1 argument",
            ),
            (
                "p_execute 3 sample_rs1",
                "p_execute takes TIMES NAME:MEMORY_KB [NAME:MEMORY_KB...]; expected NAME:MEMORY_KB, or NAME then a JSON input (TIMES NAME JSON|@FILE), got \"sample_rs1\" alone",
            ),
            (
                "p_execute 3 sample_rs1:1.5",
                "p_execute takes TIMES NAME:MEMORY_KB [NAME:MEMORY_KB...]; MEMORY_KB must be a whole number, got \"1.5\" in \"sample_rs1:1.5\"",
            ),
            (
                "p_execute 6000 a:0 b:0",
                "p_execute takes TIMES NAME:MEMORY_KB [NAME:MEMORY_KB...]; the line would put 6000 × 2 skills = 12000 requests in flight, more than --max-in-flight 10000; lower TIMES or raise --max-in-flight",
            ),
            ("skills all", "skills takes no arguments; got 1 argument"),
            (
                "skills # list them",
                "skills takes no arguments; got 3 arguments (a # comment must be on a line of its own)",
            ),
            ("0 add_py", "a repeat count must be at least 1, got 0"),
            ("-1 add_py", "a repeat count must be at least 1, got -1"),
            (
                "1.5 add_py",
                "a repeat count must be an integer, got \"1.5\"",
            ),
            (
                "99999999999 add_py",
                "the repeat count 99999999999 is too large",
            ),
            (
                "4",
                "the repeat count 4 must be followed by a command, as in `4 execute_all`",
            ),
            (
                "4 5 add_py",
                "unknown command \"5\"; the commands are add, p_add, add_py, add_rs, p_add_py, p_add_rs, fill_py, fill_rs, skills, cached_skills, execute_skill, execute, execute_all, p_execute_all, p_execute, o_execute, o_mix, c_execute, l_execute_all, lo_execute, drop_cached_skill, delete_skill, trim, pressure, watch, stop",
            ),
            ("2 stop", "stop takes no repeat count: it ends the workload"),
            ("pressure", "pressure takes BAND; got 0 arguments"),
            (
                "pressure extreme",
                "pressure takes BAND; BAND must be baseline, promo, high, low or off, got \"extreme\"",
            ),
            (
                "pressure min",
                "pressure takes BAND; the min band [0, min) is where only the kernel may allocate; the lowest band skillprof holds is low [min, low)",
            ),
            (
                "2 pressure low",
                "pressure takes no repeat count: it holds a band until the next pressure line",
            ),
            ("stop now", "stop takes no arguments; got 1 argument"),
            (
                "l_execute_all World 0 100 0 2 15",
                "l_execute_all takes TOPIC MEMORY_KB WAIT_MS USERS WORKERS DURATION_S; USERS must be at least 1, got 0",
            ),
            (
                "l_execute_all World 0 100 20001 2 15",
                "l_execute_all takes TOPIC MEMORY_KB WAIT_MS USERS WORKERS DURATION_S; USERS must be at most 10000 (--max-in-flight), got 20001",
            ),
            (
                "l_execute_all World 0 100 20 0 15",
                "l_execute_all takes TOPIC MEMORY_KB WAIT_MS USERS WORKERS DURATION_S; WORKERS must be at least 1, got 0",
            ),
            (
                "l_execute_all World 0 100 200 33 15",
                "l_execute_all takes TOPIC MEMORY_KB WAIT_MS USERS WORKERS DURATION_S; WORKERS must be at most 32, got 33",
            ),
            (
                "l_execute_all World 0 100 3 4 15",
                "l_execute_all takes TOPIC MEMORY_KB WAIT_MS USERS WORKERS DURATION_S; USERS must be at least WORKERS, so that every worker has a user: got 3 users for 4 workers",
            ),
            (
                "l_execute_all World 0 100 20 2 0",
                "l_execute_all takes TOPIC MEMORY_KB WAIT_MS USERS WORKERS DURATION_S; DURATION_S must be at least 1, got 0",
            ),
            (
                "l_execute_all World 0 100 20 2 3601",
                "l_execute_all takes TOPIC MEMORY_KB WAIT_MS USERS WORKERS DURATION_S; DURATION_S must be at most 3600, got 3601",
            ),
            (
                "l_execute_all World 0 100 20 2",
                "l_execute_all takes TOPIC MEMORY_KB WAIT_MS USERS WORKERS DURATION_S; got 5 arguments",
            ),
            (
                "2 l_execute_all World 0 100 20 2 15",
                "l_execute_all takes no repeat count: its DURATION_S says how long it runs",
            ),
            (
                "watch 86401",
                "watch takes SECONDS; SECONDS must be at most 86400 (a day), got 86401",
            ),
            ("watch", "watch takes SECONDS; got 0 arguments"),
            (
                "execute sample_rs1",
                "execute takes NAME JSON...; got 1 argument",
            ),
            (
                "execute sample_rs1 {\"burn_ms\": 5",
                "execute takes NAME JSON...; the input is not JSON (EOF while parsing an object at line 1 column 13): {\"burn_ms\": 5",
            ),
            (
                "execute sample_rs1 @input.json",
                "execute takes NAME JSON...; @input.json is read beside the cmds file, and this text came from none: give an absolute path",
            ),
            (
                "execute sample_rs1 @/nonexistent/input.json",
                "execute takes NAME JSON...; cannot read the input /nonexistent/input.json: No such file or directory (os error 2)",
            ),
            (
                "p_execute 10001 sample_rs1 {}",
                "p_execute takes TIMES NAME:MEMORY_KB [NAME:MEMORY_KB...]; the line would put 10001 × 1 skills = 10001 requests in flight, more than --max-in-flight 10000; lower TIMES or raise --max-in-flight",
            ),
        ];
        for (line, message) in cases {
            assert_eq!(errors(line), format!("test.cmds:1: {message}"), "{line:?}");
        }
    }

    #[test]
    fn a_json_input_is_read_from_the_line_or_from_a_file_beside_the_cmds_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("one_chunk.json"),
            "{\n  \"memory\": 65536,\n  \"chunk_kb\":  65536\n}\n",
        )
        .unwrap();
        let cmds = dir.path().join("twin.cmds");
        std::fs::write(
            &cmds,
            "p_execute 10 sample_py1 @one_chunk.json\np_execute 3 sample_rs1 {\"memory\": 8}\n",
        )
        .unwrap();
        let plan = read(&cmds, InFlightCap::DEFAULT).unwrap();
        let commands: Vec<_> = plan.entries.iter().map(|e| &e.command).collect();
        assert_eq!(
            commands,
            [
                &Execute {
                    name: "sample_py1".into(),
                    input: r#"{"chunk_kb":65536,"memory":65536}"#.into(),
                    times: 10,
                },
                &Execute {
                    name: "sample_rs1".into(),
                    input: r#"{"memory":8}"#.into(),
                    times: 3,
                },
                &Stop,
            ]
        );
        // The entry is named by the line as written, the file's name and not its text.
        assert_eq!(
            plan.entries[0].name,
            "p_execute 10 sample_py1 @one_chunk.json"
        );
        std::fs::write(dir.path().join("one_chunk.json"), "{\"memory\": ").unwrap();
        let refused = read(&cmds, InFlightCap::DEFAULT).unwrap_err().to_string();
        assert!(
            refused.contains("twin.cmds:1: p_execute takes")
                && refused.contains(
                    "the input is not JSON (EOF while parsing a value at line 1 column 11) in "
                )
                && refused.contains("one_chunk.json: {\"memory\":"),
            "{refused}"
        );
    }

    /// `text` as the cmds file `path`, read back.
    fn written_and_read(path: &Path, text: &str) -> Result<Plan, String> {
        std::fs::write(path, text).unwrap();
        read(path, InFlightCap::DEFAULT).map_err(|e| e.to_string())
    }

    #[test]
    fn a_users_component_is_read_when_the_file_is_checked() {
        let dir = tempfile::tempdir().unwrap();
        let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("../build/skills/sample_rs.wasm");
        for name in ["weather.wasm", "my.skill.wasm"] {
            std::fs::copy(&built, dir.path().join(name)).unwrap();
        }
        std::fs::write(dir.path().join("core.wasm"), b"\0asm\x01\0\0\0").unwrap();
        let read_back = |text: &str| written_and_read(&dir.path().join("own.cmds"), text);
        std::fs::write(dir.path().join("rain.json"), r#"{"topic": "rain"}"#).unwrap();
        let plan = read_back(
            "add weather.wasm\np_add 3 weather.wasm\nadd my.skill.wasm sky\n\
             add weather.wasm {\"topic\": \"sun\"}\nadd my.skill.wasm fog @rain.json\n\
             p_add 2 weather.wasm \"snow\"\n",
        )
        .unwrap();
        let run = Exports(vec!["run".to_owned()]);
        let added = |file: &str, name: Option<&str>, count: u32, input: Option<&str>| AddFile {
            file: dir.path().join(file),
            name: name.map(str::to_owned),
            count,
            exports: run.clone(),
            input: input.map(str::to_owned),
        };
        assert_eq!(
            plan.entries[..6]
                .iter()
                .map(|e| e.command.clone())
                .collect::<Vec<_>>(),
            [
                added("weather.wasm", None, 1, None),
                added("weather.wasm", None, 3, None),
                added("my.skill.wasm", Some("sky"), 1, None),
                added("weather.wasm", None, 1, Some(r#"{"topic":"sun"}"#)),
                added("my.skill.wasm", Some("fog"), 1, Some(r#"{"topic":"rain"}"#)),
                added("weather.wasm", None, 2, Some(r#""snow""#)),
            ]
        );
        for (text, says) in [
            (
                "add my.skill.wasm\n",
                "add takes FILE [NAME] [JSON...]; copies are named after the file, and \"my.skill\" is not a skill's name (ASCII letters, digits, _ and -): rename the file, or give NAME (add FILE NAME)",
            ),
            (
                "add core.wasm\n",
                "is a core WebAssembly module, not a component; wrap it with `wasm-tools component new`, or build it for wasm32-wasip2",
            ),
            (
                "p_add 0 weather.wasm\n",
                "p_add takes N FILE [JSON...]; N must be at least 1, got 0",
            ),
            (
                "add weather.wasm sky 42\n",
                "add takes FILE [NAME] [JSON...]; \"42\" is not an input: an input is JSON (an object, an array or a string) or @FILE",
            ),
            (
                "add weather.wasm {\"topic\":\n",
                "add takes FILE [NAME] [JSON...]; the input is not JSON",
            ),
        ] {
            let refused = read_back(text).unwrap_err();
            assert!(refused.contains(says), "{text}: {refused}");
        }
    }

    #[test]
    fn a_mix_is_read_when_the_file_is_checked_and_names_skills_the_plan_adds() {
        let dir = tempfile::tempdir().unwrap();
        let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("../build/skills/sample_rs.wasm");
        std::fs::copy(&built, dir.path().join("weather.wasm")).unwrap();
        let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
        write(
            "mix.json",
            r#"[{"skill": "weather1", "input": {"topic":  "rain"}, "weight": 3},
                {"skill": "sample_rs2", "input": {}, "weight": 1},
                {"skill": "nowhere", "input": {}, "weight": 0}]"#,
        );
        write(
            "zero.json",
            r#"[{"skill": "weather1", "input": {}, "weight": 0}]"#,
        );
        write(
            "owned.json",
            r#"[{"skill": "weather1", "component": "weather.wasm", "input": {}, "weight": 1}]"#,
        );
        write(
            "typo.json",
            r#"[{"skill": "weather1", "inptu": {}, "weight": 1}]"#,
        );
        let read_back = |text: &str| written_and_read(&dir.path().join("mix.cmds"), text);
        let plan =
            read_back("add weather.wasm\np_add_rs 2\no_mix mix.json 200 5 poisson\n").unwrap();
        let Traffic(traffic) = &plan.entries[2].command else {
            panic!("{plan:?}")
        };
        // Weight 0 leaves a skill out; inputs are kept as checked JSON.
        assert_eq!(
            traffic.to,
            Sends::Mix {
                file: dir.path().join("mix.json"),
                skills: vec![
                    MixSkill {
                        skill: "weather1".into(),
                        component: None,
                        input: serde_json::json!({"topic": "rain"}),
                        weight: 3
                    },
                    MixSkill {
                        skill: "sample_rs2".into(),
                        component: None,
                        input: serde_json::json!({}),
                        weight: 1
                    },
                ],
            }
        );
        assert_eq!(
            traffic.load,
            TrafficLoad::Open {
                rps: 200,
                poisson: true
            }
        );
        assert!(plan.unregistered_mix_skill().is_none());
        // One sample fewer, and the mix names a skill nothing added.
        let plan = read_back("add weather.wasm\nadd_rs\no_mix mix.json 200 5\n").unwrap();
        let (entry, skill) = plan.unregistered_mix_skill().unwrap();
        assert_eq!((entry.line, skill), (Some(3), "sample_rs2"));
        for (text, says) in [
            (
                "o_mix zero.json 10 5\n",
                "has no skill with a weight above 0: it would send nothing",
            ),
            ("o_mix typo.json 10 5\n", "unknown field `inptu`"),
            (
                "o_mix owned.json 10 5\n",
                "gives weather1 a \"component\": o_mix sends to skills the run added",
            ),
            (
                "o_mix none.json 10 5\n",
                "o_mix takes FILE RATE SECONDS [ARRIVALS]; cannot read the mix",
            ),
        ] {
            let refused = read_back(text).unwrap_err();
            assert!(refused.contains(says), "{text}: {refused}");
        }
    }

    #[test]
    fn reports_every_bad_line_of_the_file() {
        let text =
            "add_py\np_add_py\n\n# fine\nexecute_skill sample_py1 Alice abc\nskills\n0 add_py\n";
        let invalid = parse("bench.cmds", text, InFlightCap::DEFAULT).unwrap_err();
        assert_eq!(
            invalid
                .errors
                .iter()
                .map(|error| error.line)
                .collect::<Vec<_>>(),
            [2, 5, 7]
        );
        assert_eq!(
            invalid.to_string(),
            "bench.cmds:2: p_add_py takes N; got 0 arguments\n\
             bench.cmds:5: execute_skill takes NAME TOPIC [MEMORY_KB] [WAIT_MS]; MEMORY_KB must be an integer, got \"abc\"\n\
             bench.cmds:7: a repeat count must be at least 1, got 0"
        );
    }

    #[test]
    fn the_in_flight_cap_is_a_parameter() {
        let line = "p_execute_all Max 0 0 20000";
        assert!(parse("x.cmds", line, InFlightCap::DEFAULT).is_err());
        assert!(parse("x.cmds", line, InFlightCap::new(20_000)).is_ok());
    }

    #[test]
    fn reference_workloads_hash_like_the_harness() {
        let workloads = [
            (
                include_str!("../../../../cmds/bench.cmds"),
                "3c6d21c18c26d4130b6f57d617d2131cedd58d1d",
            ),
            (
                include_str!("../../../../cmds/stress.cmds"),
                "fe671f5712f7fca8f7e5ac64be07a72186df2be6",
            ),
            (
                include_str!("../../../../cmds/p_execute_all.cmds"),
                "c43cb5d37cabddd93e11c576235223e0bd695992",
            ),
            (
                include_str!("../../../../cmds/saturate.cmds"),
                "3adee1afcc53ea464359a82e89ee18235204e802",
            ),
            (
                include_str!("../../../../cmds/mem_chunks_2.cmds"),
                "b15aad654f80726c6b991d0293a7f058de07372e",
            ),
        ];
        for (text, hash) in workloads {
            assert_eq!(plan(text).hash, hash, "{text}");
        }
    }

    #[test]
    fn the_smoke_workload_uses_every_command_but_the_slow_python_ones() {
        let plan = plan(include_str!("../../../../cmds/smoke.cmds"));
        let used: std::collections::HashSet<_> = plan
            .entries
            .iter()
            .map(|entry| std::mem::discriminant(&entry.command))
            .collect();
        let none = || String::new();
        let expected = [
            AddRs,
            PAddRs(1),
            Skills,
            CachedSkills,
            ExecuteSkill {
                name: none(),
                topic: none(),
                memory_kb: 0,
                wait_ms: 0,
            },
            ExecuteAll {
                topic: none(),
                memory_kb: 0,
                wait_ms: 0,
            },
            PExecuteAll {
                topic: none(),
                memory_kb: 0,
                wait_ms: 0,
                times: 1,
            },
            Execute {
                name: none(),
                input: none(),
                times: 1,
            },
            DropCachedSkill(None),
            DeleteSkill(None),
            Stop,
        ];
        for command in expected {
            assert!(
                used.contains(&std::mem::discriminant(&command)),
                "smoke.cmds does not use {command:?}"
            );
        }
        assert!(
            plan.entries
                .iter()
                .all(|entry| !matches!(entry.command, AddPy | PAddPy(_)))
        );
    }
}
