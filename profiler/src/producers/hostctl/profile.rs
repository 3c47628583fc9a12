//! Host profiles: how to start a host and how to speak its dialect of the skill API. Four
//! ship (profiler/profiles/); `--host-profile FILE` reads a user's TOML of the same shape. A profile is data: the client and the process starter read it, nothing else
//! branches on which host it is.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::{Context, Result, bail};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde::{Deserialize, Serialize};

use crate::ground::component::Exports;
use crate::record::profile::{
    Dialect, ExecuteBody, HostProfile, Listing, Registry, RegistryRoutes, Route, Routes, SkillWorld,
};

/// The profiles that ship, by name.
const BUILT_IN: [(&str, &str); 4] = [
    (
        "skillhost",
        include_str!("../../../profiles/skillhost.toml"),
    ),
    (
        "pharia-kernel-2024",
        include_str!("../../../profiles/pharia-kernel-2024.toml"),
    ),
    (
        "pharia-engine-2025",
        include_str!("../../../profiles/pharia-engine-2025.toml"),
    ),
    (
        "wasmtime-serve",
        include_str!("../../../profiles/wasmtime-serve.toml"),
    ),
];

impl Registry {
    /// Why a host registering skills this way refuses a component with these exports, after
    /// its name (`weather.wasm is ...`), or `None` when it serves it.
    pub fn refuses(&self, exports: &Exports, profile: &str) -> Option<String> {
        let worlds: Vec<SkillWorld> = std::iter::once(self.world)
            .chain(self.also_serves.iter().copied())
            .collect();
        let world = SkillWorld::of(exports);
        (!worlds.iter().any(|served| Some(*served) == world)).then(|| {
            let served: Vec<String> = worlds.iter().map(ToString::to_string).collect();
            format!(
                "is {}, and the host profile {profile} serves {} components (a world-level \
                 `run` for skillprof:skill, the skill-handler interface for pharia:skill@0.2, \
                 incoming-handler for wasi:http/proxy)",
                SkillWorld::describe(exports),
                served.join(" and ")
            )
        })
    }
}

impl SkillWorld {
    /// The world a component was built for, read from its exports; `None` for one of no world
    /// a profile names.
    pub fn of(exports: &Exports) -> Option<SkillWorld> {
        let exported = |prefix: &str| exports.0.iter().any(|name| name.starts_with(prefix));
        if exported("wasi:http/incoming-handler@0.2") {
            Some(SkillWorld::WasiHttp)
        } else if exported("pharia:skill/skill-handler@0.2") {
            Some(SkillWorld::Pharia)
        } else if exports.0.iter().any(|name| name == "run") {
            Some(SkillWorld::Skillprof)
        } else {
            None
        }
    }

    /// What a component with these exports is, in words: "a pharia:skill@0.2 component",
    /// or of no world, with what it exports.
    pub fn describe(exports: &Exports) -> String {
        match SkillWorld::of(exports) {
            Some(world) => format!("a {world} component"),
            None if exports.0.is_empty() => {
                "a component of no skill world (it exports nothing)".to_owned()
            }
            None => format!(
                "a component of no skill world (it exports {})",
                exports.0.join(", ")
            ),
        }
    }

    /// The folder under the sample-skills directory that holds this world's components.
    pub fn samples_folder(self) -> &'static str {
        match self {
            SkillWorld::Skillprof => "",
            SkillWorld::Pharia => "pharia-skill",
            SkillWorld::WasiHttp => "wasi-http",
        }
    }
}

impl fmt::Display for SkillWorld {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SkillWorld::Skillprof => "skillprof:skill",
            SkillWorld::Pharia => "pharia:skill@0.2",
            SkillWorld::WasiHttp => "wasi:http/proxy",
        })
    }
}

impl Registry {
    pub fn file_of(&self, name: &str) -> String {
        self.file.replace("{name}", name)
    }
}

/// Everything but what RFC 3986 leaves unreserved.
const NAME_ENCODE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

impl HostProfile {
    /// A built-in profile by name, or a TOML file.
    pub fn load(name_or_file: &str) -> Result<HostProfile> {
        if let Some((_, text)) = BUILT_IN.iter().find(|(name, _)| *name == name_or_file) {
            return Self::parse(text)
                .with_context(|| format!("the built-in host profile {name_or_file}"));
        }
        let path = Path::new(name_or_file);
        if !path.is_file() {
            let names: Vec<&str> = BUILT_IN.iter().map(|(name, _)| *name).collect();
            bail!(
                "--host-profile {name_or_file}: neither a built-in profile ({}) nor a file",
                names.join(", ")
            );
        }
        let text =
            fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("{} is not a host profile", path.display()))
    }

    /// A profile from its TOML: unknown keys are refused by the parser (which names the line),
    /// routes whose placeholders do not fit their use by [`HostProfile::check`].
    pub fn parse(text: &str) -> Result<HostProfile> {
        let profile: HostProfile = toml::from_str(text)?;
        profile.check().map_err(|(route, why)| {
            let line = text
                .lines()
                .position(|line| {
                    line.trim_start()
                        .strip_prefix(route)
                        .is_some_and(|rest| rest.trim_start().starts_with('='))
                })
                .map_or_else(String::new, |index| format!("line {}: ", index + 1));
            anyhow::anyhow!("{line}route {route}: {why}")
        })?;
        Ok(profile)
    }

    /// Each route's placeholders against what it is for: `Err((route, why))`.
    fn check(&self) -> Result<(), (&'static str, String)> {
        let dialect = &self.dialect;
        let routes = &dialect.routes;
        let registry = [
            ("skills", &routes.skills),
            ("cached_skills", &routes.cached_skills),
            ("drop_cached", &routes.drop_cached),
        ];
        if let Some((missing, _)) = registry.iter().find(|(_, route)| route.is_none())
            && let Some((given, _)) = registry.iter().find(|(_, route)| route.is_some())
        {
            return Err((
                given,
                format!(
                    "without {missing}: a host that registers skills has skills, \
                     cached_skills and drop_cached, one serving a single component none"
                ),
            ));
        }
        let mut about_no_skill = vec![("health", &routes.health)];
        about_no_skill.extend(
            registry[..2]
                .iter()
                .filter_map(|(name, route)| route.as_ref().map(|route| (*name, route))),
        );
        if let Some(trim) = &routes.trim {
            about_no_skill.push(("trim", trim));
        }
        for (name, route) in about_no_skill {
            if let Some(placeholder) = route.placeholders().first() {
                return Err((
                    name,
                    format!("{{{placeholder}}} in a route about no one skill"),
                ));
            }
        }
        let mut about_one_skill = vec![("execute", &routes.execute)];
        if let Some(drop_cached) = &routes.drop_cached {
            about_one_skill.push(("drop_cached", drop_cached));
        }
        for (name, route) in about_one_skill {
            let placeholders = route.placeholders();
            for placeholder in &placeholders {
                if !PLACEHOLDERS.contains(placeholder) {
                    return Err((
                        name,
                        format!(
                            "unknown placeholder {{{placeholder}}} (a path knows {})",
                            PLACEHOLDERS.map(|p| format!("{{{p}}}")).join(", ")
                        ),
                    ));
                }
            }
            let has = |p: &str| placeholders.contains(&p);
            if has("namespace") && dialect.namespace.is_none() {
                return Err((
                    name,
                    "{namespace} in a dialect without one: set [dialect] namespace".into(),
                ));
            }
            if has("namespace") && !has("name") {
                return Err((name, "{namespace} without {name}: no skill is named".into()));
            }
            let names_skill = has("name") || has("skill");
            // A host of one component (no registry routes) runs it whatever the path.
            let needs_skill = name == "drop_cached"
                || (dialect.execute_body == ExecuteBody::Input && routes.skills.is_some());
            if needs_skill && !names_skill {
                return Err((
                    name,
                    format!(
                        "{} names no skill: add {{name}} (and {{namespace}}) or {{skill}} to \
                         its path",
                        route.path
                    ),
                ));
            }
            if name == "execute" && dialect.execute_body == ExecuteBody::Envelope && names_skill {
                return Err((
                    name,
                    "the skill is in the path: set [dialect] execute_body = \"input\"".into(),
                ));
            }
        }
        Ok(())
    }

    pub fn skillhost() -> HostProfile {
        HostProfile::load("skillhost").expect("the built-in profiles parse (a unit test checks)")
    }
}

impl Routes {
    /// The routes that register, list and drop skills; an error for a host that serves the
    /// one component it was started with.
    pub fn registry(&self) -> Result<RegistryRoutes> {
        match (&self.skills, &self.cached_skills, &self.drop_cached) {
            (Some(skills), Some(cached_skills), Some(drop_cached)) => Ok(RegistryRoutes {
                skills: skills.clone(),
                cached_skills: cached_skills.clone(),
                drop_cached: drop_cached.clone(),
            }),
            _ => bail!(
                "the host profile has no skills, cached_skills or drop_cached route: its host \
                 serves the one component it was started with, and registers no skills while \
                 it runs"
            ),
        }
    }
}

/// What a route's path may name: see [`Routes`].
const PLACEHOLDERS: [&str; 3] = ["namespace", "name", "skill"];

impl Route {
    /// The `{…}` placeholders of its path, in order.
    fn placeholders(&self) -> Vec<&str> {
        self.path
            .split('{')
            .skip(1)
            .filter_map(|rest| rest.split_once('}').map(|(name, _)| name))
            .collect()
    }

    /// Whether `status` answers it successfully.
    pub fn succeeded(&self, status: u16) -> bool {
        if self.success.is_empty() {
            (200..300).contains(&status)
        } else {
            self.success.contains(&status)
        }
    }
}

impl Dialect {
    /// The host's name for skill `name`.
    pub fn qualify(&self, name: &str) -> String {
        match &self.namespace {
            Some(namespace) => format!("{namespace}/{name}"),
            None => name.to_owned(),
        }
    }

    /// `route`'s path for skill `name` (our name): its placeholders filled in.
    pub fn path(&self, route: &Route, name: &str) -> String {
        let encode = |text: &str| utf8_percent_encode(text, NAME_ENCODE).to_string();
        route
            .path
            .replace("{skill}", &encode(&self.qualify(name)))
            .replace(
                "{namespace}",
                &encode(self.namespace.as_deref().unwrap_or_default()),
            )
            .replace("{name}", &encode(name))
    }

    /// The body that executes skill `name` (our name) with `input`.
    pub fn execute_body(&self, name: &str, input: &serde_json::Value) -> String {
        match self.execute_body {
            ExecuteBody::Envelope => {
                serde_json::json!({ "skill": self.qualify(name), "input": input }).to_string()
            }
            ExecuteBody::Input => input.to_string(),
        }
    }

    /// Our names of the skills a listing's JSON answer holds: those of our namespace,
    /// sorted.
    pub fn listed(&self, answer: serde_json::Value) -> Result<Vec<String>> {
        let items = match answer {
            serde_json::Value::Array(items) => items,
            other => bail!("a listing is a JSON list, not {other}"),
        };
        let listed = items
            .into_iter()
            .map(|item| {
                let name = match &self.listing {
                    Listing::Names => item.as_str(),
                    Listing::Objects(field) => item.get(field).and_then(|v| v.as_str()),
                };
                name.map(str::to_owned)
                    .with_context(|| match &self.listing {
                        Listing::Names => format!("a listing holds {item}, not a name"),
                        Listing::Objects(field) => {
                            format!("a listing holds {item}, which has no string field {field:?}")
                        }
                    })
            })
            .collect::<Result<Vec<String>>>()?;
        Ok(self.local_names(listed))
    }

    /// Our names of `listed`: those of our namespace, sorted.
    fn local_names(&self, listed: Vec<String>) -> Vec<String> {
        let mut names: Vec<String> = match &self.namespace {
            Some(namespace) => {
                let prefix = format!("{namespace}/");
                listed
                    .iter()
                    .filter_map(|n| n.strip_prefix(&prefix).map(str::to_owned))
                    .collect()
            }
            None => listed,
        };
        names.sort();
        names
    }
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.method, self.path)?;
        if !self.success.is_empty() {
            let statuses: Vec<String> = self.success.iter().map(u16::to_string).collect();
            write!(f, " -> {}", statuses.join(", "))?;
        }
        Ok(())
    }
}

impl FromStr for Route {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let (route, statuses) = match text.split_once("->") {
            Some((route, statuses)) => (route.trim(), Some(statuses)),
            None => (text.trim(), None),
        };
        let (method, path) = route
            .split_once(' ')
            .ok_or_else(|| format!("route {text:?}: expected \"METHOD /path\""))?;
        if !path.starts_with('/') {
            return Err(format!("route {text:?}: the path must start with /"));
        }
        let success = match statuses {
            None => Vec::new(),
            Some(statuses) => statuses
                .split(',')
                .map(|status| {
                    status
                        .trim()
                        .parse::<u16>()
                        .ok()
                        .filter(|status| (100..600).contains(status))
                        .ok_or_else(|| {
                            format!("route {text:?}: {:?} is not an HTTP status", status.trim())
                        })
                })
                .collect::<Result<_, _>>()?,
        };
        Ok(Route {
            method: method
                .parse()
                .map_err(|_| format!("route {text:?}: {method} is not an HTTP method"))?,
            path: path.to_owned(),
            success,
        })
    }
}

impl Serialize for Route {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Route {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// The host's stdout and stderr in a run folder: the host it starts writes there.
pub fn log(run_folder: &Path) -> PathBuf {
    run_folder.join("host.log")
}

/// Where a profile's files go: `<run folder>/host-workdir`.
pub fn workdir(run_folder: &Path) -> PathBuf {
    run_folder.join("host-workdir")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_profiles_parse() {
        for (name, _) in BUILT_IN {
            assert_eq!(HostProfile::load(name).unwrap().name, name);
        }
    }

    #[test]
    fn the_2024_dialect_namespaces_names_and_encodes_the_drop_route() {
        let dialect = HostProfile::load("pharia-kernel-2024").unwrap().dialect;
        assert_eq!(dialect.qualify("sample_py1"), "dev/sample_py1");
        assert_eq!(
            dialect.path(
                &dialect.routes.registry().unwrap().drop_cached,
                "sample_py1"
            ),
            "/cached_skills/dev%2Fsample_py1"
        );
        assert_eq!(
            dialect
                .listed(serde_json::json!(["dev/b", "other/x", "dev/a"]))
                .unwrap(),
            ["a", "b"]
        );
        assert_eq!(
            dialect.execute_body("a", &serde_json::json!({"x": 1})),
            r#"{"input":{"x":1},"skill":"dev/a"}"#
        );
        assert!(dialect.headers["Authorization"].starts_with("Bearer "));
    }

    #[test]
    fn the_2025_dialect_names_the_skill_in_the_path_and_posts_the_input_alone() {
        let dialect = HostProfile::load("pharia-engine-2025").unwrap().dialect;
        let routes = &dialect.routes;
        assert_eq!(
            dialect.path(&routes.execute, "sample py"),
            "/v1/skills/dev/sample%20py/run"
        );
        assert_eq!(
            dialect.path(&routes.registry().unwrap().drop_cached, "hello"),
            "/cached_skills/dev/hello"
        );
        assert_eq!(
            dialect.execute_body("hello", &serde_json::json!({"x": 1})),
            r#"{"x":1}"#
        );
        assert!(routes.execute.succeeded(200));
        assert!(!routes.execute.succeeded(201));
        assert!(routes.health.succeeded(204));
        assert_eq!(
            routes.execute.to_string(),
            "POST /v1/skills/{namespace}/{name}/run -> 200"
        );
    }

    #[test]
    fn a_listing_of_objects_names_skills_by_its_field() {
        let dialect: Dialect = toml::from_str(
            r#"
            namespace = "dev"
            listing = { objects = "id" }
            [routes]
            health = "GET /h"
            execute = "POST /x"
            skills = "GET /s"
            cached_skills = "GET /c"
            drop_cached = "DELETE /c/{skill}"
            "#,
        )
        .unwrap();
        let answer = serde_json::json!([{"id": "dev/b", "n": 1}, {"id": "dev/a"}]);
        assert_eq!(dialect.listed(answer).unwrap(), ["a", "b"]);
        let wrong = dialect.listed(serde_json::json!([{"name": "dev/a"}]));
        assert!(format!("{:#}", wrong.unwrap_err()).contains("no string field \"id\""));
    }

    #[test]
    fn a_host_of_one_component_has_no_registry_routes_and_a_half_registry_is_refused() {
        let serve = HostProfile::load("wasmtime-serve").unwrap();
        assert_eq!(serve.registry.world, SkillWorld::WasiHttp);
        let refused = format!("{:#}", serve.dialect.routes.registry().unwrap_err());
        assert!(refused.contains("serves the one component"), "{refused}");
        let text = with_line(r#"cached_skills = "GET /cached_skills""#, "");
        let err = format!("{:#}", HostProfile::parse(&text).unwrap_err());
        assert!(err.contains("without cached_skills"), "{err}");
    }

    /// A profile of the 2025 engine with one line replaced.
    fn with_line(from: &str, to: &str) -> String {
        let text = BUILT_IN[2].1;
        assert!(text.contains(from), "{from}");
        text.replace(from, to)
    }

    #[test]
    fn a_route_without_its_parameters_or_with_unknown_ones_is_refused_with_its_line() {
        for (from, to, says) in [
            (
                r#"execute = "POST /v1/skills/{namespace}/{name}/run -> 200""#,
                r#"execute = "POST /v1/skills/run""#,
                "names no skill",
            ),
            (
                r#"execute = "POST /v1/skills/{namespace}/{name}/run -> 200""#,
                r#"execute = "POST /v1/skills/{namespace}/run""#,
                "{namespace} without {name}",
            ),
            (
                r#"drop_cached = "DELETE /cached_skills/{namespace}/{name} -> 200""#,
                r#"drop_cached = "DELETE /cached_skills/{namespace}/{skil}""#,
                "unknown placeholder {skil}",
            ),
            (
                r#"skills = "GET /v1/skills""#,
                r#"skills = "GET /v1/skills/{name}""#,
                "about no one skill",
            ),
            (r#"namespace = "dev""#, "", "set [dialect] namespace"),
            (r#"execute_body = "input""#, "", "execute_body = \"input\""),
        ] {
            let text = with_line(from, to);
            let err = format!("{:#}", HostProfile::parse(&text).unwrap_err());
            assert!(err.contains(says), "{to:?}: {err}");
            assert!(err.starts_with("line "), "{to:?}: {err}");
            let line: usize = err["line ".len()..]
                .split(':')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            let route = err
                .split("route ")
                .nth(1)
                .unwrap()
                .split(':')
                .next()
                .unwrap();
            assert!(
                text.lines()
                    .nth(line - 1)
                    .unwrap()
                    .trim_start()
                    .starts_with(route),
                "line {line} is not {route}'s: {err}"
            );
        }
    }

    #[test]
    fn an_unknown_key_or_status_is_refused_with_its_line() {
        let text = with_line(
            r#"execute_body = "input""#,
            "execute_body = \"input\"\nbody = 1",
        );
        let err = format!("{:#}", HostProfile::parse(&text).unwrap_err());
        assert!(
            err.contains("unknown field `body`") && err.contains("line "),
            "{err}"
        );
        let text = with_line("/run -> 200", "/run -> 2000");
        let err = format!("{:#}", HostProfile::parse(&text).unwrap_err());
        assert!(err.contains("\"2000\" is not an HTTP status"), "{err}");
    }

    #[test]
    fn a_skill_is_a_file_named_after_it() {
        for (name, _) in BUILT_IN {
            let registry = HostProfile::load(name).unwrap().registry;
            assert_eq!(registry.file_of("sample_py1"), "sample_py1.wasm");
        }
    }

    #[test]
    fn each_profile_names_its_hosts_skill_world_and_a_users_defaults_to_skillhosts() {
        let world = |name| HostProfile::load(name).unwrap().registry.world;
        assert_eq!(world("skillhost"), SkillWorld::Skillprof);
        assert_eq!(world("pharia-kernel-2024"), SkillWorld::Pharia);
        let skillhost = HostProfile::load("skillhost").unwrap().registry;
        assert_eq!(skillhost.also_serves, [SkillWorld::WasiHttp]);
        let exports = |names: &[&str]| Exports(names.iter().map(|n| (*n).to_owned()).collect());
        assert_eq!(
            skillhost.refuses(&exports(&["wasi:http/incoming-handler@0.2.6"]), "skillhost"),
            None
        );
        let refused =
            skillhost.refuses(&exports(&["pharia:skill/skill-handler@0.2.1"]), "skillhost");
        assert!(
            refused
                .unwrap()
                .contains("serves skillprof:skill and wasi:http/proxy components")
        );
        let theirs: Registry = toml::from_str(r#"file = "{name}.wasm""#).unwrap();
        assert_eq!(theirs.world, SkillWorld::Skillprof);
        let unknown = toml::from_str::<Registry>("file = \"x\"\nworld = \"wasi:http\"");
        assert!(
            unknown
                .unwrap_err()
                .to_string()
                .contains("pharia:skill@0.2")
        );
    }

    #[test]
    fn skillhosts_dialect_is_bare_names() {
        let dialect = HostProfile::skillhost().dialect;
        assert_eq!(dialect.qualify("hello"), "hello");
        assert_eq!(
            dialect.path(&dialect.routes.registry().unwrap().drop_cached, "hello"),
            "/cached_skills/hello"
        );
        assert!(dialect.headers.is_empty());
    }

    #[test]
    fn a_bad_route_or_file_is_a_clear_error() {
        assert!(
            "/skills"
                .parse::<Route>()
                .unwrap_err()
                .contains("METHOD /path"),
        );
        let err = HostProfile::load("/no/such/profile.toml").unwrap_err();
        assert!(
            format!("{err}").contains("neither a built-in profile"),
            "{err}"
        );
    }
}
