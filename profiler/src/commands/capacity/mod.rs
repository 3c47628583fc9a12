//! `skillprof capacity`: how many skills, and how many parallel requests beside them, a
//! machine holds, predicted from runs' records (`model`), written as capacity.json and a
//! section of explain.md in the first run's folder, and said on stdout.

pub mod dependence;
pub mod model;
pub mod production;
pub mod sweep;
pub mod traffic;

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::Serialize;

use crate::ground::cmds::{Copies, CopyNames, SkillKind};
use crate::ground::units::{bytes, count};
use crate::record::profile::PythonSample;
use crate::views::explain;
use crate::views::output::entries_jsonl;
use dependence::{Point, Source};
use model::{
    Basis, Bound, Figure, Ingredients, Machine, Missing, Prediction, ProcessLimit, RunRecords,
};

const LONG_ABOUT: &str = "\
Predict how many skills, and how many parallel requests beside them, a machine holds, from the \
records of runs (skillprof run's folders).

From the runs' entries it derives, per skill kind (Python, Rust): the idle host (before the first \
entry), the first skill's cost (the first entry must add one skill: add_py or add_rs), the \
marginal cost of each further skill (every later add, step by step: the Theil-Sen slope of memory \
over skills, with a bootstrap 95% interval), the one-off warm-up the first further skills pay \
above that slope (malloc's arenas growing: the slope's intercept over where the first run's \
further skills start), the transient while a skill loads (peak over what \
stays; the first skill's apart, since its compile threads' arenas are new and grow), the memory per request in flight (p_execute_all entries with 10 or more in flight: peak \
growth over requests), the host's CPU time per skill added, and the memory mappings (VMAs) the first skill, \
each further one and each request in flight add, against vm.max_map_count, and the address space \
(VmSize) they add, against RLIMIT_AS where the host ran under one and 128 TiB (47 bits) where not: \
the other limits. Mappings bind before memory for requests on an on-demand host (about 10,000 in \
flight here); address space binds where a container runtime sets RLIMIT_AS, since on demand \
each instance in flight reserves its memories' 4 GiB and a pool reserves all its slots at start.

It then predicts for the machine given: the most skills resident at once (each with room to load \
the next), the parallel requests that fit beside that many skills (or beside --skills N), and \
how long loading them takes with every core compiling. Every figure has a low/high range and the \
entries it came from. The model is for skills loaded one after the other, as add_py does: \
compiling many at once (p_add_py) keeps more in malloc's arenas.

Memory is what the host's memory cgroup was charged when the runs were made with --memory-max \
(exactly what a limit limits; the peaks are the kernel's own), and RSS otherwise. RSS is not \
what a limit counts: it misses memory the host holds without mapping it (wasmtime's memfd image \
of each skill's initial memory, 18 MiB for the pydantic skill), and counts a file mapped by many \
skills (--cache-dir artifacts) once per mapping.

What a compile leaves behind grows with the machine's cores (a compile's threads each get a \
malloc arena of their own), so runs answer for the parallelism they were made with: the cores \
`skillprof run --cores N` emulated, else the machine's. --cores N takes the runs made at N, or \
interpolates between the runs made at the counts around N (`skillprof sweep` makes them, and \
a sweep's folder can be given as a RUN), and says which ingredients scaled and by how much; a \
count outside the runs is refused, with the runs to make.

It writes capacity.json and a Capacity section of explain.md into the first run's folder (or \
--out DIR). A run that lacks the entries a figure needs is refused, with the lines to add.

Examples:
  skillprof capacity runs/A --memory 64G                  # A: a bench.cmds run
  skillprof capacity runs/A runs/B --memory 64G --cores 16 --headroom 10%
  skillprof capacity runs/A --memory 3G --headroom 0      # to compare with a --memory-max 3G fill
  skillprof capacity runs/A --memory 64G --skills 500     # the requests beside 500 skills
  skillprof capacity runs/sweep --memory 64G --cores 16   # from skillprof sweep's runs";

#[derive(clap::Args, Debug)]
#[command(about = "Predict how many skills and parallel requests a machine holds, from runs", long_about = LONG_ABOUT)]
pub struct CapacityArgs {
    /// Run folders, or folders of run folders (a sweep's); figures are pooled across the runs
    /// made at the same core count, the idle host and first skill from each run that starts
    /// with an add.
    #[arg(required_unless_present = "prometheus", value_name = "RUN")]
    pub runs: Vec<PathBuf>,

    /// The machine's memory (e.g. 64G, 3G, 512M), in binary units: 64G is 64 GiB. With
    /// --prometheus, instead of what the watch's series say (its cgroup's limit, else the
    /// machine's memory).
    #[arg(long, value_name = "SIZE", value_parser = crate::ground::units::parse_size, required_unless_present = "prometheus")]
    pub memory: Option<u64>,

    /// Answer from production instead of from runs: the address of the Prometheus that
    /// scrapes `skillprof watch` (or anything that serves its query API: Thanos, Mimir,
    /// VictoriaMetrics), e.g. http://127.0.0.1:9090. Per host (its `instance` label) and for
    /// the fleet: the skills that still fit, the rate within --target, the headroom now and
    /// the servers for --growth times the peak, each with its interval and its evidence.
    #[arg(long, value_name = "URL", conflicts_with_all = ["runs", "slo", "cores", "kind", "skills"])]
    pub prometheus: Option<String>,

    /// With --prometheus: how far back to read, up to now (30m, 12h, 7d).
    #[arg(long, value_name = "DURATION", default_value = "7d", value_parser = humantime::parse_duration, requires = "prometheus", conflicts_with = "runs")]
    pub since: std::time::Duration,

    /// With --prometheus: label matchers that pick one host, as PromQL writes them inside
    /// braces (instance="10.0.0.5:9477"); refused if they match several. Without it, every
    /// host in the window, and the fleet.
    #[arg(
        long,
        value_name = "MATCHERS",
        requires = "prometheus",
        conflicts_with = "runs"
    )]
    pub selector: Option<String>,

    /// With --prometheus: the latency target the rate must keep (p99<=250ms; quantiles p50,
    /// p90, p99, p99.9). Without it, the rate is the CPU's bound.
    #[arg(long, value_name = "pN<=TIME", value_parser = crate::commands::slo::target::parse, requires = "prometheus", conflicts_with = "runs")]
    pub target: Option<crate::record::slo::Target>,

    /// With --prometheus: the servers for this many times the observed peak.
    #[arg(long, value_name = "N", default_value_t = 2.0, value_parser = positive, requires = "prometheus", conflicts_with = "runs")]
    pub growth: f64,

    /// With --prometheus: seconds between the points read [default: the window / 500, at
    /// least 1 s]; rates are taken over four of them.
    #[arg(long, value_name = "S", requires = "prometheus", conflicts_with = "runs", value_parser = positive)]
    pub step: Option<f64>,

    /// Its cores: the parallelism the memory figures are taken at (measured there, or
    /// interpolated between the runs' counts around it), and the time loading the skills
    /// takes [default: the runs' count, if they share one; else this machine's].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub cores: Option<u32>,

    /// Memory kept free for everything else: a percentage (10%) or a share (0.1).
    #[arg(long, value_name = "SHARE", default_value = "10%", value_parser = parse_share)]
    pub headroom: f64,

    /// The skills the parallel requests run beside [default: the most that fit].
    #[arg(long, value_name = "N")]
    pub skills: Option<u32>,

    /// Which skills to predict for [default: every kind the runs can answer for].
    #[arg(long, value_enum, value_name = "KIND")]
    pub kind: Option<Kind>,

    /// Where capacity.json and explain.md go [default: the first run's folder].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,

    /// Print capacity.json's document on stdout instead of the Capacity section (which
    /// still goes to explain.md), for jq and scripts.
    #[arg(long)]
    pub json: bool,

    /// The rate the fleet must serve, requests per second: with --slo, the servers it needs
    /// within the experiments' latency target, at --cores per server.
    #[arg(long, value_name = "RPS", requires = "slo", value_parser = parse_rate)]
    pub rate: Option<f64>,

    /// A `skillprof slo` experiment folder (repeatable): each host configuration's peak rate
    /// within its target; per CPU count the best is a server's rate.
    #[arg(long, value_name = "DIR", requires = "rate")]
    pub slo: Vec<PathBuf>,

    /// The skills the fleet holds: with --rate, the servers for them by memory too, and the
    /// fleet the larger of the two counts.
    #[arg(long, value_name = "K", requires = "rate")]
    pub fleet_skills: Option<u64>,

    /// Join a rate and a memory measured on different skills: the fleet answer then says it
    /// assumed the rate's skill costs the memory of the runs' (refused without it, since a
    /// fleet joined from two skill sets answers for neither).
    #[arg(long, requires = "fleet_skills")]
    pub mixed_workloads: bool,
}

fn positive(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(number) if number > 0.0 && number.is_finite() => Ok(number),
        _ => Err(format!("expected a number above 0, got {text:?}")),
    }
}

fn parse_rate(text: &str) -> Result<f64, String> {
    positive(text).map_err(|_| format!("a rate is requests per second above 0, got {text:?}"))
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Python,
    Rust,
}

fn parse_share(text: &str) -> Result<f64, String> {
    let (number, scale) = match text.strip_suffix('%') {
        Some(number) => (number, 100.0),
        None => (text, 1.0),
    };
    let share = number
        .trim()
        .parse::<f64>()
        .map_err(|_| format!("expected a share such as 10% or 0.1, got {text:?}"))?
        / scale;
    if !(0.0..1.0).contains(&share) {
        return Err(format!(
            "the headroom must be at least 0 and below 100%, got {text:?}"
        ));
    }
    Ok(share)
}

/// capacity.json.
#[derive(Serialize)]
struct Capacity {
    runs: Vec<String>,
    machine: Machine,
    kinds: Vec<KindCapacity>,
    /// With --rate: the servers the rate needs, and the fleet with --fleet-skills.
    #[serde(skip_serializing_if = "Option::is_none")]
    traffic: Option<Fleet>,
}

/// The fleet for a rate (and a number of skills).
#[derive(Serialize)]
struct Fleet {
    /// What the rate and the memory were measured on.
    workload: FleetWorkload,
    rate: traffic::RateCapacity,
    /// With --fleet-skills, per kind: the servers memory needs for them, fewest to most.
    by_memory: Vec<(Copies, u64, (u64, u64))>,
}

/// The skills a fleet answer joins: the rate's, with its input, and the memory's.
#[derive(Serialize)]
struct FleetWorkload {
    /// The component the slo experiments sent to, and what they sent it.
    rate_skill: String,
    rate_input: serde_json::Value,
    /// Per kind the runs answered for, the component their adds registered.
    memory_skills: Vec<(Copies, String)>,
    /// The rate's skill is not the memory's, and --mixed-workloads joined them.
    mixed: bool,
}

#[derive(Serialize)]
struct KindCapacity {
    ingredients: Ingredients,
    /// Which runs' core count the ingredients were taken at.
    source: Source,
    predicted: Prediction,
    /// Figures the runs could not give, and the lines that would.
    missing: Vec<Missing>,
    /// The ingredients at each core count the runs were made at.
    dependence: Vec<Point>,
}

/// Why a kind cannot be predicted.
enum Refusal {
    Missing(Vec<Missing>),
    Cores(String),
}

pub fn run(args: CapacityArgs) -> Result<()> {
    if let Some(url) = &args.prometheus {
        return production::run(&args, url);
    }
    let memory = args.memory.context("--memory is needed with runs")?;
    let mut runs = Vec::new();
    for folder in &args.runs {
        runs.extend(load_all(folder)?);
    }
    let workload = runs
        .iter()
        .find_map(|loaded| loaded.workload.clone())
        .unwrap_or_else(|| "FILE.cmds".to_owned());
    // Runs from before the choice used the pure-Python sample.
    let python = runs
        .iter()
        .find_map(|loaded| loaded.python)
        .unwrap_or(PythonSample::Pure);
    let runs: Vec<RunRecords> = runs.into_iter().map(|loaded| loaded.run).collect();
    let mut stated: Vec<u32> = runs.iter().filter_map(|run| run.cores).collect();
    stated.sort_unstable();
    stated.dedup();
    let cores = match (args.cores, stated.as_slice()) {
        (Some(cores), _) => cores,
        (None, [one]) => *one,
        (None, _) => {
            u32::try_from(crate::ground::machine::Machine::read()?.cores).unwrap_or(u32::MAX)
        }
    };
    let machine = Machine {
        memory_bytes: memory,
        cores,
        headroom: args.headroom,
    };
    let kinds: Vec<Copies> = match args.kind {
        Some(Kind::Python) => vec![Copies::Sample(SkillKind::Python)],
        Some(Kind::Rust) => vec![Copies::Sample(SkillKind::Rust)],
        None => model::kinds(&runs),
    };
    let mut answered = Vec::new();
    let mut refusals = Vec::new();
    for kind in kinds {
        match ingredients_at(&runs, &kind, cores, &workload) {
            Ok((found, dependence)) => {
                let predicted = model::predict(&found.ingredients, &machine, args.skills);
                answered.push(KindCapacity {
                    ingredients: found.ingredients,
                    source: found.source,
                    predicted,
                    missing: found.missing,
                    dependence,
                });
            }
            Err(refusal) => refusals.push((kind, refusal)),
        }
    }
    if answered.is_empty() || args.kind.is_some() && !refusals.is_empty() {
        let mut why = String::from("the runs cannot answer:");
        for (kind, refusal) in &refusals {
            match refusal {
                Refusal::Missing(missing) => {
                    for missing in missing {
                        let _ = write!(
                            why,
                            "\n  {} skills: the runs lack {} (add `{}`)",
                            kind.label(),
                            missing.figure,
                            missing.add
                        );
                    }
                }
                Refusal::Cores(reason) => {
                    let _ = write!(why, "\n  {} skills: {reason}", kind.label());
                }
            }
        }
        bail!(why);
    }
    let out = args.out.clone().unwrap_or_else(|| args.runs[0].clone());
    fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let traffic = args
        .rate
        .map(|rate| fleet(rate, cores, &args, python, &answered))
        .transpose()?;
    let capacity = Capacity {
        runs: runs.iter().map(|run| run.name.clone()).collect(),
        machine,
        kinds: answered,
        traffic,
    };
    let json = out.join("capacity.json");
    let document = serde_json::to_string_pretty(&capacity)? + "\n";
    fs::write(&json, &document).with_context(|| format!("writing {}", json.display()))?;
    let section = section(&capacity);
    explain::write_capacity(&out, &section)?;
    if args.json {
        print!("{document}");
    } else {
        print!("{section}");
    }
    eprintln!(
        "\nwritten: {} and its Capacity section in explain.md",
        json.display()
    );
    Ok(())
}

/// The servers `rate` needs at `cores` per server, from the slo experiments of `--slo`, and
/// with `--fleet-skills`, the servers memory needs for them per kind: refused where the two
/// were measured on different skills, unless `--mixed-workloads` joins them.
fn fleet(
    rate: f64,
    cores: u32,
    args: &CapacityArgs,
    python: PythonSample,
    kinds: &[KindCapacity],
) -> Result<Fleet> {
    let reports = args
        .slo
        .iter()
        .map(|folder| {
            let report = crate::commands::slo::read(folder)?;
            Ok((folder.display().to_string(), report))
        })
        .collect::<Result<Vec<_>>>()?;
    let (_, first) = &reports[0];
    if let Some((folder, other)) = reports
        .iter()
        .find(|(_, r)| r.skill != first.skill || r.input != first.input)
    {
        bail!(
            "{folder} sent {} {}, and {} sent {} {}: one fleet's rate comes from one skill and \
             input",
            other.skill,
            other.input,
            args.slo[0].display(),
            first.skill,
            first.input
        );
    }
    let memory_skills: Vec<(Copies, String)> = kinds
        .iter()
        .map(|kind| {
            let component = match &kind.predicted.kind {
                Copies::Sample(SkillKind::Rust) => "sample_rs".to_owned(),
                Copies::Sample(SkillKind::Python) => python.component().to_owned(),
                // As slo names a --component's skill.
                Copies::Component(file) => CopyNames::stem(file),
            };
            (kind.predicted.kind.clone(), component)
        })
        .collect();
    let mixed = args.fleet_skills.is_some()
        && memory_skills
            .iter()
            .any(|(_, component)| *component != first.skill);
    if mixed && !args.mixed_workloads {
        let memory: Vec<&str> = memory_skills.iter().map(|(_, c)| c.as_str()).collect();
        bail!(
            "the rate was measured on {} (input {}) and the memory on {}: a fleet joined from \
             two skill sets answers for neither. Measure both on the same skill (the slo's \
             --skill, the run's adds), or give --mixed-workloads to join them, assuming each \
             of the fleet's skills costs the memory of the runs' and serves at {}'s rate",
            first.skill,
            first.input,
            memory.join(" and "),
            first.skill
        );
    }
    let skills = args.fleet_skills;
    let workload = FleetWorkload {
        rate_skill: first.skill.clone(),
        rate_input: first.input.clone(),
        memory_skills,
        mixed,
    };
    let (points, target) = traffic::points(&reports)?;
    let best = points.iter().max_by_key(|p| p.peak_rps).cloned();
    let latency = best.and_then(|point| traffic::peak_latency_ms(&reports, &point));
    let by_memory = match skills {
        None => Vec::new(),
        Some(skills) => kinds
            .iter()
            .map(|kind| {
                let fit = &kind.predicted.skills;
                let servers = |per: f64| (skills as f64 / per.max(1.0)).ceil() as u64;
                (
                    kind.predicted.kind.clone(),
                    servers(fit.value),
                    (servers(fit.high), servers(fit.low)),
                )
            })
            .collect(),
    };
    Ok(Fleet {
        workload,
        rate: traffic::answer(rate, cores, points, target, latency),
        by_memory,
    })
}

/// The ingredients for `cores`: from the runs made at that parallelism, or between the
/// counts around it; runs that do not say theirs (from before `--cores`) answer as they are.
fn ingredients_at(
    runs: &[RunRecords],
    kind: &Copies,
    cores: u32,
    workload: &str,
) -> Result<(dependence::Found, Vec<Point>), Refusal> {
    if runs.iter().all(|run| run.cores.is_none()) {
        let (ingredients, missing) = model::ingredients(runs, kind).map_err(Refusal::Missing)?;
        let found = dependence::Found {
            ingredients,
            source: Source::Unstated,
            missing,
        };
        return Ok((found, Vec::new()));
    }
    let (points, lacking) = dependence::points(runs, kind);
    if points.is_empty() {
        let missing = lacking
            .into_iter()
            .flat_map(|(_, missing)| missing)
            .collect();
        return Err(Refusal::Missing(missing));
    }
    let found = dependence::at(&points, cores, workload).map_err(Refusal::Cores)?;
    Ok((found, points))
}

/// What capacity reads of a run's meta.json.
#[derive(serde::Deserialize)]
struct Meta {
    #[serde(default)]
    cores: Option<crate::record::host::Cores>,
    machine: MetaMachine,
    cmds: MetaCmds,
    #[serde(default)]
    python_sample: Option<PythonSample>,
}

/// One run folder as capacity reads it.
struct Loaded {
    run: RunRecords,
    /// The cmds file it ran, as its meta.json names it.
    workload: Option<String>,
    /// The component its `add_py` registered, where it says.
    python: Option<PythonSample>,
}

#[derive(serde::Deserialize)]
struct MetaMachine {
    cores: u32,
}

#[derive(serde::Deserialize)]
struct MetaCmds {
    file: String,
}

/// A run folder, or each run folder inside a folder of them (a sweep's), in name order; with
/// the workload each ran.
fn load_all(folder: &Path) -> Result<Vec<Loaded>> {
    if folder.join(entries_jsonl::FILE).is_file() {
        return Ok(vec![load(folder)?]);
    }
    let mut inner: Vec<PathBuf> = fs::read_dir(folder)
        .map(|entries| {
            entries
                .filter_map(|entry| Some(entry.ok()?.path()))
                .filter(|path| path.join(entries_jsonl::FILE).is_file())
                .collect()
        })
        .unwrap_or_default();
    if inner.is_empty() {
        bail!(
            "{} is not a run folder with {} (skillprof run leaves one per run), nor a folder \
             of them (skillprof sweep leaves one)",
            folder.display(),
            entries_jsonl::FILE
        );
    }
    inner.sort();
    inner.iter().map(|path| load(path)).collect()
}

fn load(folder: &Path) -> Result<Loaded> {
    let path = folder.join(entries_jsonl::FILE);
    let mut records = entries_jsonl::read(&path).with_context(|| {
        format!(
            "{} is not a run folder with {} (skillprof run leaves one per run)",
            folder.display(),
            entries_jsonl::FILE
        )
    })?;
    let name = folder
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_else(|| folder.display().to_string());
    // The parallelism the host ran with: what --cores emulated, else the machine's.
    let meta: Option<Meta> = fs::read_to_string(folder.join(crate::views::output::meta::FILE))
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok());
    let cores = meta
        .as_ref()
        .map(|meta| meta.cores.map_or(meta.machine.cores, |cores| cores.cores));
    let python = meta.as_ref().and_then(|meta| meta.python_sample);
    let workload = meta.map(|meta| meta.cmds.file);
    // A user's add names its component beside the cmds file, where the records are read.
    if let Some(dir) = workload
        .as_deref()
        .and_then(|file| Path::new(file).parent())
    {
        for record in &mut records {
            record.measure.cmd.read_beside(dir);
        }
    }
    Ok(Loaded {
        run: RunRecords {
            name,
            records,
            cores,
        },
        workload,
        python,
    })
}

fn kb(kb: f64) -> String {
    bytes(kb * 1024.0)
}

fn range(figure: &Figure, say: impl Fn(f64) -> String) -> String {
    if figure.low == figure.high {
        return say(figure.value);
    }
    format!(
        "{} [{}-{}]",
        say(figure.value),
        say(figure.low),
        say(figure.high)
    )
}

/// A per-process limit's ingredients in words: what the first skills held (`first`), what
/// each further skill and each request in flight add (`each`), and the limit (`against`).
fn limit_words(
    name: &str,
    limit: &ProcessLimit,
    first: impl Fn(f64) -> String,
    each: impl Fn(f64) -> String + Copy,
    against: impl FnOnce() -> String,
) -> String {
    format!(
        "; {name}: {} with the first {} skill(s), {} per further skill{}, against {}",
        first(limit.first),
        count(limit.first_skills),
        range(&limit.per_skill, each),
        match &limit.per_request {
            Some(per_request) => format!(", {} per request in flight", range(per_request, each)),
            None => String::new(),
        },
        against()
    )
}

/// The section in words: the answer first, then what it rests on.
fn section(capacity: &Capacity) -> String {
    let machine = &capacity.machine;
    let mut text = format!(
        "{}\n\nFor a machine of {} with {} cores and {:.0}% headroom ({} for the host), \
         from {}:\n\n",
        explain::CAPACITY_HEADING,
        bytes(machine.memory_bytes as f64),
        machine.cores,
        machine.headroom * 100.0,
        kb(machine.budget_kb()),
        capacity.runs.join(", ")
    );
    for kind in &capacity.kinds {
        let (found, predicted) = (&kind.ingredients, &kind.predicted);
        let name = found.kind.label();
        let basis = match found.basis {
            Basis::Memcg => "memory as its cgroup was charged",
            Basis::Rss => "memory as RSS",
        };
        let bound = |bound: Bound| match bound {
            Bound::Memory => "",
            Bound::MaxMapCount => " (vm.max_map_count binds, not memory)",
            Bound::AddressSpace => " (address space binds, not memory)",
        };
        let requests = match &predicted.requests {
            Some(requests) if predicted.skills_held == predicted.skills.value => format!(
                ", and beside them {} parallel requests{}",
                range(requests, count),
                bound(predicted.requests_bound)
            ),
            Some(requests) => format!(
                "; beside {} of them, {} parallel requests{}",
                count(predicted.skills_held),
                range(requests, count),
                bound(predicted.requests_bound)
            ),
            None => String::new(),
        };
        let _ = write!(
            text,
            "- **{name} skills: {} resident**{}{requests}; loading them takes {} with every \
             core compiling. From the runs ({basis}): the idle host {}, the first skill {}, each further \
             skill {} (from {}) after a one-off {} while the first ones load, {} transient while \
             one loads{}",
            range(&predicted.skills, count),
            bound(predicted.skills_bound),
            range(&predicted.load_s, |s| format!("{} s", count(s))),
            kb(found.idle_kb.value),
            first_skill(found),
            range(&found.marginal_kb, kb),
            found.marginal_kb.from.join(", "),
            range(&found.warmup_kb, kb),
            kb(found.transient_kb.value),
            match &found.first_transient_kb {
                Some(first) => format!(" ({} while the first did)", kb(first.value)),
                None => String::new(),
            },
        );
        if let Some(per_request) = &found.per_request_kb {
            let _ = write!(
                text,
                ", {} per request in flight (from {})",
                range(per_request, kb),
                per_request.from.join(", ")
            );
        }
        let _ = write!(
            text,
            ", {} of host CPU per skill added",
            range(&found.cpu_per_skill_ms, |ms| format!("{} ms", count(ms)))
        );
        if let Some(arenas) = found.first_held.as_ref().and_then(|held| held.arenas) {
            let _ = write!(text, "; {} malloc arenas after the first", count(arenas));
        }
        if let Some(threads) = &found.compile_threads {
            let _ = write!(
                text,
                "; up to {} host threads while compiling, {} idle",
                threads.peak, threads.idle
            );
        }
        if let Some(maps) = &found.mappings {
            let tenths = |n: f64| format!("{n:.1}");
            text += &limit_words("mappings", maps, count, tenths, || {
                format!("vm.max_map_count {}", count(maps.limit as f64))
            });
        }
        if let Some(space) = &found.address_space {
            let kb = |kb: f64| bytes(kb * 1024.0);
            text += &limit_words("address space", space, kb, kb, || match space.limit {
                model::USER_SPACE_KB => "the 128 TiB of a 47-bit address space".to_owned(),
                limit => format!("RLIMIT_AS {}", kb(limit as f64)),
            });
        }
        text.push('.');
        for missing in &kind.missing {
            let _ = write!(
                text,
                " Not predicted: {} (add `{}` to a run).",
                missing.figure, missing.add
            );
        }
        let _ = write!(
            text,
            " {}",
            match kind.source {
                Source::Measured { cores } if kind.dependence.len() > 1 =>
                    format!("The ingredients are those of the runs made at {cores} cores."),
                Source::Measured { cores } =>
                    format!("The runs were made with the parallelism of {cores} cores."),
                Source::Interpolated { below, above } => format!(
                    "The ingredients are interpolated between the runs made at {below} and \
                     {above} cores."
                ),
                Source::Unstated => "The runs do not say which parallelism they had (they \
                    are from before --cores): what a compile leaves behind grows with the cores."
                    .to_owned(),
            }
        );
        text.push('\n');
        if kind.dependence.len() > 1 {
            if let Some(scaled) = dependence::scaled(&kind.dependence) {
                let _ = write!(text, "\n{scaled}\n");
            }
            let _ = write!(text, "\n{}", dependence::table(&kind.dependence));
        }
    }
    if let Some(fleet) = &capacity.traffic {
        text.push_str(&fleet_words(fleet, &capacity.kinds));
    }
    text
}

/// The fleet for a rate, in words: a server's rate at the asked cores and how it was found,
/// the servers the rate needs, the servers the skills need, the larger, and Little's law.
fn fleet_words(fleet: &Fleet, kinds: &[KindCapacity]) -> String {
    let rate = &fleet.rate;
    let (low, high) = rate.per_server_rps;
    let measured: Vec<String> = rate
        .points
        .iter()
        .map(|p| {
            format!(
                "{}/s on {} CPU(s) ({})",
                count(f64::from(p.peak_rps)),
                p.cpus,
                p.config
            )
        })
        .collect();
    let per_server = match rate.basis {
        traffic::RateBasis::Measured => {
            format!("{}/s, measured at {} cores", count(low), rate.cores)
        }
        traffic::RateBasis::Usl { sigma, kappa, .. } => format!(
            "{}/s by the Universal Scalability Law fitted to {} core counts (contention σ = \
             {sigma:.4}, coherency κ = {kappa:.5})",
            count(low),
            rate.points.len()
        ),
        traffic::RateBasis::Bounded => format!(
            "between {}/s and {}/s: measured at {} core count(s) only, so this is a bound, not \
             a measurement: at least the best rate measured, at most linear in the cores from \
             the best rate per CPU (six or more core counts, from a bigger machine, give a \
             Universal Scalability Law fit)",
            count(low),
            count(high),
            rate.points.len()
        ),
    };
    let servers = match rate.servers {
        (fewest, most) if fewest == most => count(fewest as f64),
        (fewest, most) => format!("{} to {}", count(fewest as f64), count(most as f64)),
    };
    let workload = &fleet.workload;
    let mut text = format!(
        "\n### Traffic: {}/s of {} within {}\n\nThe rate's workload: {} with the input `{}`. \
         A server's peak within the target: {}. At {} cores a server serves {per_server}. \
         {}/s needs **{servers} server(s)** by rate.",
        count(rate.rate_rps),
        workload.rate_skill,
        rate.target,
        workload.rate_skill,
        workload.rate_input,
        measured.join(", "),
        rate.cores,
        count(rate.rate_rps),
    );
    if workload.mixed {
        let memory: Vec<&str> = workload
            .memory_skills
            .iter()
            .map(|(_, c)| c.as_str())
            .collect();
        let _ = write!(
            text,
            " **Mixed workloads (--mixed-workloads):** the memory is {}'s, the rate {}'s; the \
             fleet assumes each of its skills costs the one and serves at the other.",
            memory.join(" and "),
            workload.rate_skill
        );
    }
    for (kind, servers, (fewest, most)) in &fleet.by_memory {
        let component = workload
            .memory_skills
            .iter()
            .find(|(k, _)| k == kind)
            .map_or("", |(_, c)| c.as_str());
        let name = format!("{}, {component}", kind.label());
        let by_rate = rate.servers.1;
        let _ = write!(
            text,
            " The skills of the fleet ({name}) need {} server(s) by memory ({} to {}): the \
             fleet needs **{}**, {} bounding it.",
            count(*servers as f64),
            count(*fewest as f64),
            count(*most as f64),
            count((*servers).max(by_rate) as f64),
            if *servers >= by_rate {
                "memory"
            } else {
                "the rate"
            }
        );
    }
    if let Some(in_flight) = rate.in_flight_per_server {
        let _ = write!(
            text,
            " Little's law: at {}/s and its median latency, a server holds about {in_flight:.1} \
             requests in flight",
            count(high)
        );
        let beside = kinds
            .iter()
            .filter_map(|kind| Some((&kind.predicted.kind, kind.predicted.requests.as_ref()?)))
            .map(|(kind, requests)| {
                format!("{} beside {} skills", count(requests.value), kind.label())
            })
            .collect::<Vec<_>>();
        match beside.is_empty() {
            true => text.push('.'),
            false => {
                let _ = write!(
                    text,
                    ", against the parallel requests its memory holds ({}).",
                    beside.join(", ")
                );
            }
        }
    }
    text.push('\n');
    text
}

/// The first skill's cost, and what holds it where the run read that.
fn first_skill(found: &Ingredients) -> String {
    let first = kb(found.first_kb.value);
    let Some(held) = &found.first_held else {
        return first;
    };
    let kept = match held.kept_kb {
        Some(kept) => format!(
            "; of the heap, {} is memory the allocator freed and kept",
            kb(kept)
        ),
        None => String::new(),
    };
    format!(
        "{first} (its RSS: heap +{}, compiled code +{}, other +{}{kept})",
        kb(held.heap_kb),
        kb(held.code_kb),
        kb(held.other_kb)
    )
}
