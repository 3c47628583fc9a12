//! How to start a host other than the profile's default, on the command line of every
//! subcommand that starts one (`run`, `watch`).

use std::fs;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

use crate::ground::cpus::CpuList;
use crate::record::profile::{HostProfile, HostSpec};

#[derive(Args, Clone, Debug, Default)]
pub struct HostStartArgs {
    /// The host's binary [default: skillhost next to skillprof]. It must serve on 127.0.0.1
    /// and register `<name>.wasm` files from a skills directory.
    #[arg(long, value_name = "PATH")]
    pub host_bin: Option<PathBuf>,

    /// An argument for the host (repeatable), instead of the profile's. `{skills_dir}`,
    /// `{address}`, `{port}` and `{skill_file}` (a host of one component: the skills
    /// directory's one file) are replaced.
    #[arg(long = "host-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub host_args: Vec<String>,

    /// An environment variable for the host, KEY=VALUE (repeatable; placeholders as above),
    /// besides the profile's.
    #[arg(long = "host-env", value_name = "KEY=VALUE", value_parser = parse_key_value)]
    pub host_env: Vec<(String, String)>,

    /// The CPUs the started host may run on, a list like `1` or `2-3` (its affinity, set
    /// before it starts, which its threads inherit): with the load generator on others
    /// (`--load-cpus`), the host's CPU is the host's alone. Its available parallelism is
    /// then these CPUs, as on a machine that has only them.
    #[arg(long, value_name = "LIST")]
    pub host_cpus: Option<CpuList>,
}

impl HostStartArgs {
    /// The host `profile` describes, as these flags change it, with `flags` appended to its
    /// arguments and `env` to its environment.
    pub fn spec(
        &self,
        profile: HostProfile,
        flags: &[String],
        env: &[(String, String)],
    ) -> Result<HostSpec> {
        let bin = self
            .host_bin
            .as_ref()
            .map(|bin| {
                fs::canonicalize(bin).with_context(|| format!("--host-bin {}", bin.display()))
            })
            .transpose()?;
        let env = [&self.host_env[..], env].concat();
        let mut spec = HostSpec::new(profile, bin, &self.host_args, flags, &env)?;
        spec.cpus = self.host_cpus.clone();
        Ok(spec)
    }
}

fn parse_key_value(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("expected KEY=VALUE, got {text:?}"))
}
