//! The pooling allocator's knobs as skillhost exposes them, and the configurations a grid of
//! their values makes: on-demand, pooling at skillhost's defaults, the same again as the
//! control, then every combination of the grid's values.

use anyhow::{Result, bail, ensure};

use crate::ground::units::{bytes, parse_size};
use crate::record::pool::{ON_DEMAND, PoolConfig};
use crate::record::profile::PoolingSwitch;

/// What a knob's values are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A whole number.
    Count,
    /// Bytes: 0, or a size such as 64K, 1M, 4G.
    Bytes,
    /// on or off.
    Switch,
    /// One of the listed words.
    Choice(&'static [&'static str]),
}

#[derive(Debug)]
pub struct Knob {
    pub name: &'static str,
    /// skillhost's flag.
    flag: &'static str,
    kind: Kind,
    /// skillhost's default, as a value of this knob.
    pub default: &'static str,
    pub help: &'static str,
}

/// Every knob skillhost exposes, in the order a configuration's name lists them.
pub const KNOBS: &[Knob] = &[
    Knob {
        name: "decommit-batch",
        flag: "--pool-decommit-batch-size",
        kind: Kind::Count,
        default: "1",
        help: "freed slots given back together, in one process_madvise (wasmtime's decommit_batch_size)",
    },
    Knob {
        name: "warm-slots",
        flag: "--pool-max-unused-warm-slots",
        kind: Kind::Count,
        default: "100",
        help: "freed slots kept warm and reused first (max_unused_warm_slots)",
    },
    Knob {
        name: "keep-resident",
        flag: "--pool-keep-resident",
        kind: Kind::Bytes,
        default: "0",
        help: "bytes of each linear memory a freed slot keeps resident and zeroes in place (linear_memory_keep_resident)",
    },
    Knob {
        name: "table-keep-resident",
        flag: "--pool-table-keep-resident",
        kind: Kind::Bytes,
        default: "0",
        help: "the same for tables (table_keep_resident)",
    },
    Knob {
        name: "stack-keep-resident",
        flag: "--pool-stack-keep-resident",
        kind: Kind::Bytes,
        default: "0",
        help: "the same for async stacks (async_stack_keep_resident)",
    },
    Knob {
        name: "pagemap-scan",
        flag: "--pool-pagemap-scan",
        kind: Kind::Switch,
        default: "off",
        help: "find the dirty pages of a kept-resident memory with PAGEMAP_SCAN (Linux 6.7+) instead of zeroing all of it",
    },
    Knob {
        name: "cow",
        flag: "--memory-cow",
        kind: Kind::Switch,
        default: "on",
        help: "initialise linear memory from copy-on-write images (memory_init_cow)",
    },
    Knob {
        name: "mpk",
        flag: "--pool-memory-protection-keys",
        kind: Kind::Choice(&["no", "auto", "yes"]),
        default: "no",
        help: "memory protection keys: slots share guard regions, so the pool reserves less (yes fails where the CPU lacks them)",
    },
    Knob {
        name: "instances",
        flag: "--pool-instances",
        kind: Kind::Count,
        default: "1000",
        help: "component instances the pool holds: its slot count",
    },
    Knob {
        name: "memory-limit",
        flag: "--memory-limit-mib",
        kind: Kind::Bytes,
        default: "4G",
        help: "linear memory one instance may use: a slot's size (skillhost caps it at 4 GiB)",
    },
    Knob {
        name: "reservation",
        flag: "--memory-reservation",
        kind: Kind::Bytes,
        default: "4G",
        help: "address space reserved per linear memory (memory_reservation)",
    },
    Knob {
        name: "guard",
        flag: "--memory-guard-size",
        kind: Kind::Bytes,
        default: "32M",
        help: "guard region after each linear memory (memory_guard_size)",
    },
];

impl Knob {
    /// skillhost's flag for it.
    pub fn flag(&self) -> &'static str {
        self.flag
    }

    fn find(name: &str) -> Result<&'static Knob> {
        match KNOBS.iter().find(|knob| knob.name == name) {
            Some(knob) => Ok(knob),
            None => bail!(
                "no knob '{name}': the knobs are {}",
                KNOBS
                    .iter()
                    .map(|knob| knob.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    /// skillhost's flags for `value`, checked.
    fn flags(&self, value: &str) -> Result<Vec<String>> {
        let wrong = |what: &str| format!("--knob {}={value}: {what}", self.name);
        let flag = self.flag.to_owned();
        Ok(match self.kind {
            Kind::Count => {
                let n: u64 = value
                    .parse()
                    .map_err(|_| anyhow::anyhow!(wrong("expected a whole number")))?;
                vec![flag, n.to_string()]
            }
            Kind::Bytes => {
                let n = size(value).map_err(|error| anyhow::anyhow!(wrong(&error)))?;
                if self.flag == "--memory-limit-mib" {
                    ensure!(
                        n % (1 << 20) == 0 && n > 0,
                        wrong("a slot's size is whole MiB, at least 1M")
                    );
                    vec![flag, (n >> 20).to_string()]
                } else {
                    vec![flag, n.to_string()]
                }
            }
            Kind::Switch => match (value, self.flag) {
                ("on" | "off", "--memory-cow") => vec![flag, (value == "on").to_string()],
                ("on", _) => vec![flag],
                ("off", _) => vec![],
                _ => bail!(wrong("expected on or off")),
            },
            Kind::Choice(words) => {
                ensure!(
                    words.contains(&value),
                    wrong(&format!("expected one of {}", words.join(", ")))
                );
                vec![flag, value.to_owned()]
            }
        })
    }
}

/// Bytes from `0` or a size with its suffix.
fn size(text: &str) -> Result<u64, String> {
    if text == "0" {
        return Ok(0);
    }
    parse_size(text)
}

/// One `--knob NAME=V1,V2` as given.
#[derive(Clone, Debug)]
pub struct KnobValues {
    pub knob: &'static Knob,
    pub values: Vec<String>,
}

/// `NAME=V1,V2,...`, checked: a known knob, values of its kind, none twice.
pub fn parse_knob(text: &str) -> Result<KnobValues> {
    let Some((name, values)) = text.split_once('=') else {
        bail!("--knob {text}: expected NAME=VALUE[,VALUE...], e.g. keep-resident=0,1M");
    };
    let knob = Knob::find(name.trim())?;
    let values: Vec<String> = values.split(',').map(|v| v.trim().to_owned()).collect();
    for (i, value) in values.iter().enumerate() {
        ensure!(!value.is_empty(), "--knob {text}: an empty value");
        knob.flags(value)?;
        ensure!(
            !values[..i].contains(value),
            "--knob {text}: {value} is given twice"
        );
    }
    Ok(KnobValues { knob, values })
}

/// A host whose profile switches pooling on by its environment, with no knob: on demand,
/// pooling, and pooling again as the control.
pub fn switched(switch: &PoolingSwitch) -> Vec<PoolConfig> {
    let env: Vec<(String, String)> = switch.env.clone().into_iter().collect();
    vec![
        plain(ON_DEMAND, Vec::new(), Vec::new()),
        plain("pooling", Vec::new(), env.clone()),
        plain("pooling (control)", Vec::new(), env),
    ]
}

fn plain(name: &str, flags: Vec<String>, env: Vec<(String, String)>) -> PoolConfig {
    PoolConfig {
        name: name.to_owned(),
        knobs: Vec::new(),
        flags,
        env,
        reserved_bytes: None,
        runs: Vec::new(),
    }
}

/// Every configuration: on-demand, pooling, the control, then the grid's combinations
/// (those that are pooling at its defaults again left out).
pub fn configurations(grid: &[KnobValues]) -> Result<Vec<PoolConfig>> {
    for (i, knob) in grid.iter().enumerate() {
        ensure!(
            !grid[..i]
                .iter()
                .any(|other| other.knob.name == knob.knob.name),
            "--knob {} is given twice: list its values in one --knob",
            knob.knob.name
        );
    }
    let pooling = || vec!["--allocator".to_owned(), "pooling".to_owned()];
    let mut configs = vec![
        plain(
            ON_DEMAND,
            vec!["--allocator".into(), "on-demand".into()],
            Vec::new(),
        ),
        plain("pooling", pooling(), Vec::new()),
        plain("pooling (control)", pooling(), Vec::new()),
    ];
    // The grid's knobs in the table's order, so a name reads the same whatever the order
    // of the flags.
    let mut grid: Vec<&KnobValues> = grid.iter().collect();
    grid.sort_by_key(|k| KNOBS.iter().position(|knob| knob.name == k.knob.name));
    let combinations = grid.iter().map(|k| k.values.len()).product::<usize>();
    for index in 0..if grid.is_empty() { 0 } else { combinations } {
        let mut rest = index;
        let mut knobs = Vec::new();
        let mut flags = pooling();
        for knob in &grid {
            let value = &knob.values[rest % knob.values.len()];
            rest /= knob.values.len();
            if !is_default(knob.knob, value) {
                flags.extend(knob.knob.flags(value)?);
                knobs.push((knob.knob.name.to_owned(), value.clone()));
            }
        }
        if knobs.is_empty() {
            continue;
        }
        let name = knobs
            .iter()
            .map(|(name, value)| format!("{name}={value}"))
            .collect::<Vec<_>>()
            .join(" ");
        configs.push(PoolConfig {
            name,
            knobs,
            flags,
            env: Vec::new(),
            reserved_bytes: None,
            runs: Vec::new(),
        });
    }
    Ok(configs)
}

/// Whether `value` is the knob's default: `1M` and `1048576` alike.
fn is_default(knob: &Knob, value: &str) -> bool {
    match knob.kind {
        Kind::Bytes => size(value).ok() == size(knob.default).ok(),
        _ => value == knob.default,
    }
}

/// The knobs for `--help`, one line each.
pub fn help() -> String {
    KNOBS
        .iter()
        .map(|knob| {
            let default = match knob.kind {
                Kind::Bytes => {
                    size(knob.default).map_or(knob.default.to_owned(), |b| bytes(b as f64))
                }
                _ => knob.default.to_owned(),
            };
            format!(
                "  {} = {default} ({})\n      {}",
                knob.name, knob.flag, knob.help
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid(knobs: &[&str]) -> Result<Vec<PoolConfig>> {
        let grid: Vec<KnobValues> = knobs.iter().map(|k| parse_knob(k)).collect::<Result<_>>()?;
        configurations(&grid)
    }

    #[test]
    fn a_grid_is_every_combination_after_the_three_fixed_configurations() {
        let configs = grid(&["keep-resident=0,1M", "decommit-batch=1,8"]).unwrap();
        let names: Vec<&str> = configs.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "on-demand",
                "pooling",
                "pooling (control)",
                "decommit-batch=8",
                "keep-resident=1M",
                "decommit-batch=8 keep-resident=1M"
            ]
        );
        assert_eq!(
            configs[5].flags,
            [
                "--allocator",
                "pooling",
                "--pool-decommit-batch-size",
                "8",
                "--pool-keep-resident",
                "1048576"
            ]
        );
        assert!(!configs[0].is_pooling() && configs[1].is_pooling());
    }

    #[test]
    fn a_switched_host_runs_on_demand_then_pooled_by_its_environment() {
        let switch = PoolingSwitch {
            env: [("USE_POOLING_ALLOCATOR".to_owned(), "true".to_owned())].into(),
        };
        let configs = switched(&switch);
        let names: Vec<&str> = configs.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["on-demand", "pooling", "pooling (control)"]);
        assert!(!configs[0].is_pooling() && configs[0].setting().is_empty());
        assert!(configs[1].is_pooling());
        assert_eq!(configs[2].setting(), "USE_POOLING_ALLOCATOR=true");
    }

    #[test]
    fn bad_knobs_and_values_are_refused_with_what_is_expected() {
        let error = |knobs: &[&str]| grid(knobs).unwrap_err().to_string();
        assert!(
            error(&["keep-residnt=1M"])
                .starts_with("no knob 'keep-residnt': the knobs are decommit-batch")
        );
        assert!(error(&["keep-resident=1Q"]).contains("unknown size suffix"));
        assert!(error(&["decommit-batch=-1"]).contains("expected a whole number"));
        assert!(error(&["mpk=maybe"]).contains("expected one of no, auto, yes"));
        assert!(error(&["pagemap-scan=yes"]).contains("expected on or off"));
        assert!(error(&["warm-slots=1,1"]).contains("given twice"));
        assert!(error(&["warm-slots=1", "warm-slots=2"]).contains("list its values in one --knob"));
        assert!(error(&["memory-limit=1500K"]).contains("whole MiB"));
        assert!(error(&["instances"]).contains("expected NAME=VALUE"));
    }

    #[test]
    fn switches_and_sizes_become_skillhosts_flags() {
        let configs = grid(&["cow=off", "pagemap-scan=on", "memory-limit=64M", "guard=0"]).unwrap();
        assert_eq!(
            configs[3].flags,
            [
                "--allocator",
                "pooling",
                "--pool-pagemap-scan",
                "--memory-cow",
                "false",
                "--memory-limit-mib",
                "64",
                "--memory-guard-size",
                "0"
            ]
        );
        // A grid of defaults only adds nothing to the three fixed configurations.
        assert_eq!(
            grid(&["keep-resident=0", "reservation=4096M"])
                .unwrap()
                .len(),
            3
        );
    }
}
