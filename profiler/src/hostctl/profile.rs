//! Host profiles: how to start a host and how to speak its dialect of the skill API. Two
//! ship (`skillhost`, `pharia-kernel-2024`); `--host-profile FILE` reads a user's TOML of the
//! same shape. A profile is data: the client and the process starter read it, nothing else
//! branches on which host it is.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::{Context, Result, bail};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde::{Deserialize, Serialize};

pub use crate::record::profile::{
    Dialect, HostProfile, Registry, Route, Routes, SkillWorld, Start,
};

/// The profiles that ship, by name.
const BUILT_IN: [(&str, &str); 2] = [
    ("skillhost", include_str!("../../profiles/skillhost.toml")),
    (
        "pharia-kernel-2024",
        include_str!("../../profiles/pharia-kernel-2024.toml"),
    ),
];

impl SkillWorld {
    /// The folder under the sample-skills directory that holds this world's components.
    pub fn samples_folder(self) -> &'static str {
        match self {
            SkillWorld::Skillprof => "",
            SkillWorld::Pharia => "pharia-skill",
        }
    }
}

impl fmt::Display for SkillWorld {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SkillWorld::Skillprof => "skillprof:skill",
            SkillWorld::Pharia => "pharia:skill@0.2",
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
            return toml::from_str(text)
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
        toml::from_str(&text).with_context(|| format!("{} is not a host profile", path.display()))
    }

    pub fn skillhost() -> HostProfile {
        HostProfile::load("skillhost").expect("the built-in profiles parse (a unit test checks)")
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

    /// The JSON body that executes skill `name` (our name) with `input`.
    pub fn execute_body(&self, name: &str, input: &serde_json::Value) -> String {
        serde_json::json!({ "skill": self.qualify(name), "input": input }).to_string()
    }

    /// Our names of the skills a listing holds: those of our namespace, sorted.
    pub fn local_names(&self, listed: Vec<String>) -> Vec<String> {
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

    /// The drop route's path for skill `name`.
    pub fn drop_path(&self, name: &str) -> String {
        let encoded = utf8_percent_encode(&self.qualify(name), NAME_ENCODE).to_string();
        self.routes.drop_cached.path.replace("{name}", &encoded)
    }
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.method, self.path)
    }
}

impl FromStr for Route {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let (method, path) = text
            .split_once(' ')
            .ok_or_else(|| format!("route {text:?}: expected \"METHOD /path\""))?;
        if !path.starts_with('/') {
            return Err(format!("route {text:?}: the path must start with /"));
        }
        Ok(Route {
            method: method
                .parse()
                .map_err(|_| format!("route {text:?}: {method} is not an HTTP method"))?,
            path: path.to_owned(),
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
            dialect.drop_path("sample_py1"),
            "/cached_skills/dev%2Fsample_py1"
        );
        assert_eq!(
            dialect.local_names(vec!["dev/b".into(), "other/x".into(), "dev/a".into()]),
            ["a", "b"]
        );
        assert!(dialect.headers["Authorization"].starts_with("Bearer "));
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
        assert_eq!(dialect.drop_path("hello"), "/cached_skills/hello");
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
