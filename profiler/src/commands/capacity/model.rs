//! From runs' typed records to the ingredients of capacity (the idle host, the first and each
//! further skill, the memory per request in flight, the CPU per compiled skill) and from those
//! to a prediction for a machine. Every figure keeps its range and the entries it came from.
//!
//! The model, per skill kind: holding n skills costs idle + first + warm-up + (n - 1) ×
//! marginal (the warm-up from the second skill on), and loading one more needs its compile's
//! transient on top (the peak over what stays). A
//! machine of M bytes with headroom h has a budget of M × (1 - h); the most skills are the n
//! whose resident memory plus one transient fits it. The requests that fit beside them share
//! what is left of the budget once the transient is no longer needed; loading takes n × CPU
//! per skill over the cores.

use serde::Serialize;

use std::path::Path;

use crate::ground::cmds::{Command, Copies, CopyNames, SkillKind};
use crate::ground::stats::{median, nearest_rank, theil_sen, theil_sen_ci};
use crate::record::EntryRecord;

/// One run's records, as capacity reads them.
#[derive(Clone)]
pub struct RunRecords {
    pub name: String,
    pub records: Vec<EntryRecord>,
    /// The parallelism the host ran with: the cores `--cores` emulated, else the machine's;
    /// `None` where the run does not say.
    pub cores: Option<u32>,
}

/// What the memory figures count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    /// What the host's memory cgroup was charged (runs made with --memory-max): exactly what
    /// a limit limits.
    Memcg,
    /// The host's RSS: its file-backed pages (the binary, mapped files) are counted though
    /// page cache is charged only to the cgroup that first read it.
    Rss,
}

/// A measured or predicted quantity with its range and where it came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Figure {
    pub value: f64,
    pub low: f64,
    pub high: f64,
    /// `run#index: cmd` of every entry it came from.
    pub from: Vec<String>,
}

impl Figure {
    fn exact(value: f64, from: String) -> Figure {
        Figure {
            value,
            low: value,
            high: value,
            from: vec![from],
        }
    }

    /// The Theil-Sen slope of memory over skills (pairs within one entry), with the
    /// bootstrap 95% confidence interval from resampling each entry's points.
    fn slope_of(series: &[Vec<(f64, f64)>], from: Vec<String>) -> Option<Figure> {
        let value = theil_sen(series)?;
        // Pairs grow as the square of the points: fewer resamples for a long fill.
        let points: usize = series.iter().map(Vec::len).sum();
        let resamples = if points > 200 { 200 } else { 1000 };
        let (low, high) = theil_sen_ci(series, resamples, 1);
        Some(Figure {
            value,
            low,
            high,
            from,
        })
    }

    /// The median of `samples`, spread from the 10th to the 90th percentile (nearest rank;
    /// with few samples, the smallest and the largest).
    fn of(mut samples: Vec<f64>, from: Vec<String>) -> Option<Figure> {
        if samples.is_empty() {
            return None;
        }
        samples.sort_by(f64::total_cmp);
        Some(Figure {
            value: median(&samples),
            low: nearest_rank(&samples, 0.1),
            high: nearest_rank(&samples, 0.9),
            from,
        })
    }
}

/// The ingredients for one skill kind; memory in KB.
#[derive(Debug, Clone, Serialize)]
pub struct Ingredients {
    pub kind: Copies,
    pub basis: Basis,
    pub idle_kb: Figure,
    pub first_kb: Figure,
    /// The robust (Theil-Sen) slope of memory over every further skill added, with its
    /// bootstrap 95% confidence interval. malloc hands memory out in chunks (a new arena, a
    /// grown heap), so single steps swing both ways, and the first few further skills pay
    /// one-off arena growth: the median of pairwise slopes follows the steady state that an
    /// extrapolation to hundreds of skills needs, where a least-squares line follows the chunks.
    pub marginal_kb: Figure,
    /// The one-off growth the first further skills pay above the slope (malloc's arenas and
    /// heaps growing to their working size): the Theil-Sen intercept of the run's first series
    /// of further skills, over where it starts. A line through the first skill with the
    /// steady-state slope misses it and overpredicts by as many skills as it is worth.
    pub warmup_kb: Figure,
    /// Peak over what stays, while a further skill loads (compiling): the kernel's peak with a
    /// cgroup (v1), else the sampled RSS peak. The largest seen: the one a budget must leave
    /// room for when it is nearly full.
    pub transient_kb: Figure,
    /// The same while the first skill loads: the compile threads' arenas are new then and
    /// grow, so on a many-core machine it is several times a further skill's. It binds only
    /// the first skill.
    #[serde(default)]
    pub first_transient_kb: Option<Figure>,
    /// `None` when no entry had many requests in flight; [`Missing`] says what to add.
    pub per_request_kb: Option<Figure>,
    /// Host CPU time per skill added (compile, instantiate, one execution).
    pub cpu_per_skill_ms: Figure,
    /// The other limits: memory mappings, which vm.max_map_count caps per process, and
    /// address space (KB), which RLIMIT_AS caps where it is set and the 47-bit user address
    /// space (128 TiB) everywhere. `None` for runs from before they were counted.
    pub mappings: Option<ProcessLimit>,
    pub address_space: Option<ProcessLimit>,
    /// What holds the first skill's RSS; `None` for runs from before it was read.
    pub first_held: Option<FirstHeld>,
    /// The host's threads while it compiled; `None` for runs from before they were counted.
    pub compile_threads: Option<CompileThreads>,
}

/// The first skill's RSS growth by holder (the host's smaps at the first entry's two ends).
/// Most of a first compile's cost can be memory the allocator freed and kept: paid once, by
/// the host, and not again by each further skill.
#[derive(Debug, Clone, Serialize)]
pub struct FirstHeld {
    pub heap_kb: f64,
    pub code_kb: f64,
    /// wasm memories, mapped files and stacks.
    pub other_kb: f64,
    /// Of the heap's RSS at the entry's end, what the allocator does not have in use: freed
    /// and kept. `None` where the host does not say what it has in use (skillhost's
    /// /metrics does).
    pub kept_kb: Option<f64>,
    /// malloc's thread arenas once the first skill was loaded; `None` where they were not
    /// counted (the host's memory unreadable, or runs from before).
    pub arenas: Option<f64>,
}

/// Threads the host ran while compiling, as sampled: a compile's own threads (skillhost
/// starts one per CPU for each) come and go with it, and glibc gives each thread its own
/// arena, so what a compile leaves behind can grow with them.
#[derive(Debug, Clone, Serialize)]
pub struct CompileThreads {
    /// At the first entry's start.
    pub idle: u64,
    /// The most in any sample of an entry that added skills.
    pub peak: u64,
}

/// A count one process is limited in (mappings, address space), as the runs counted it: what
/// each skill and each request in flight adds, against the limit they ran under.
#[derive(Debug, Clone, Serialize)]
pub struct ProcessLimit {
    pub limit: u64,
    /// At the end of the run's first entry, which held `first_skills` skills.
    pub first: f64,
    pub first_skills: f64,
    pub per_skill: Figure,
    pub per_request: Option<Figure>,
}

/// What a run lacks for a figure, and the cmds line that would give it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Missing {
    pub figure: String,
    pub add: String,
}

/// Fewest requests in flight for an entry to say what one in flight costs: fewer, and the
/// host's noise (a malloc arena more or less) is most of the figure.
pub const MIN_IN_FLIGHT: usize = 10;

/// Each entry's command, as its record keeps it.
fn command(record: &EntryRecord) -> Option<Command> {
    record.measure.cmd.command().cloned()
}

/// Skills of `kind` one step of the entry loads, if it loads any.
fn adds(command: &Command, kind: &Copies) -> Option<u32> {
    match command {
        Command::Fill { kind: filled, .. } if *kind == Copies::Sample(*filled) => Some(1),
        _ => command
            .loads()
            .and_then(|(added, count)| (added == *kind).then_some(count)),
    }
}

/// What capacity can answer for from `runs`: both samples, and every component their adds
/// loaded, in the order the runs first load it.
pub fn kinds(runs: &[RunRecords]) -> Vec<Copies> {
    let mut kinds = vec![
        Copies::Sample(SkillKind::Python),
        Copies::Sample(SkillKind::Rust),
    ];
    for (loaded, _) in runs
        .iter()
        .flat_map(|run| &run.records)
        .filter_map(|record| command(record)?.loads())
    {
        if !kinds.contains(&loaded) {
            kinds.push(loaded);
        }
    }
    kinds
}

/// Whether the entry ran requests of `kind` at once: `p_execute_all` over the samples, or
/// `p_execute TIMES NAME` on a copy of the component.
fn concurrent(run: &RunRecords, record: &EntryRecord, kind: &Copies) -> bool {
    match (command(record), kind) {
        (Some(Command::PExecuteAll { .. }), Copies::Sample(_)) => true,
        (Some(Command::Execute { name, times, .. }), Copies::Component(file)) => {
            times > 1 && copy_of(run, &name, file)
        }
        _ => false,
    }
}

/// Whether `name` is a copy the run's adds made of `file`: named on its add, or after the
/// file (`weather3`).
fn copy_of(run: &RunRecords, name: &str, file: &Path) -> bool {
    CopyNames::is_copy(name, &CopyNames::stem(file))
        || run.records.iter().any(|record| {
            matches!(command(record), Some(Command::AddFile { file: added, name: Some(named), .. })
                if added == file && named == name)
        })
}

fn source(run: &RunRecords, record: &EntryRecord) -> String {
    format!(
        "{}#{}: {}",
        run.name, record.measure.index, record.measure.cmd
    )
}

/// How a run's memory is read: by its memory cgroup's charge, or by the host's RSS.
#[derive(Clone, Copy)]
struct Reading {
    basis: Basis,
}

impl Reading {
    /// The cgroup's charge where every adding entry has one (it counts page tables and kernel
    /// memory RSS misses), else RSS.
    fn of(adding: &[(&RunRecords, &EntryRecord, u32)]) -> Reading {
        let charged = adding.iter().all(|(_, record, _)| {
            record.memcg.is_some()
                && record
                    .measure
                    .outcome
                    .steps
                    .iter()
                    .all(|s| s.memcg_kb.is_some())
        });
        Reading {
            basis: if charged { Basis::Memcg } else { Basis::Rss },
        }
    }

    fn before_kb(self, record: &EntryRecord) -> f64 {
        match (self.basis, &record.memcg) {
            (Basis::Memcg, Some(memcg)) => memcg.before.usage_bytes as f64 / 1024.0,
            _ => record.measure.before.rss_kb as f64,
        }
    }

    /// An entry's peak: the kernel's own where the cgroup gives one (a sampled RSS peak can
    /// fall between samples, and RSS misses the page tables of every instance), else the
    /// sampled RSS peak.
    fn peak_kb(self, record: &EntryRecord) -> Option<f64> {
        match (self.basis, &record.memcg) {
            (Basis::Memcg, Some(memcg)) => Some(memcg.after.peak_bytes as f64 / 1024.0),
            _ => record.sampling.rss_peak_kb.map(|peak| peak as f64),
        }
    }

    fn step_kb(self, step: &crate::record::Step) -> f64 {
        match self.basis {
            Basis::Memcg => step.memcg_kb.unwrap_or(0) as f64,
            Basis::Rss => step.rss_kb as f64,
        }
    }
}

/// What the further skills' steps give: each entry's series of (skills, memory), the
/// transients above the last step, and the CPU per skill.
#[derive(Default)]
struct FurtherSkills {
    marginal: Vec<Vec<(f64, f64)>>,
    marginal_from: Vec<String>,
    /// The first run's first series of further skills, the one that pays the warm-up.
    warming: Option<(usize, String)>,
    transient: (Vec<f64>, Vec<String>),
    first_transient: (Vec<f64>, Vec<String>),
    cpu: (Vec<f64>, Vec<String>),
}

impl FurtherSkills {
    fn of(
        adding: &[(&RunRecords, &EntryRecord, u32)],
        reading: Reading,
        is_first: &dyn Fn(&EntryRecord) -> bool,
        first_run: &RunRecords,
    ) -> FurtherSkills {
        let mut further = FurtherSkills::default();
        for (run, record, per_step) in adding {
            let steps = &record.measure.outcome.steps;
            // (skills added so far, memory) from the entry's start; the first skill of the
            // run and a fill's last step (the skill that did not fit) are not further skills
            // held.
            let mut series = vec![(0.0, reading.before_kb(record))];
            for (index, step) in steps.iter().enumerate() {
                let unheld = record
                    .measure
                    .outcome
                    .fill
                    .is_some_and(|fill| index as u32 >= fill.fitted);
                if is_first(record) && index == 0 {
                    series = vec![(0.0, reading.step_kb(step))];
                } else if !unheld {
                    let skills = series.len() as f64 * f64::from(*per_step);
                    series.push((skills, reading.step_kb(step)));
                }
            }
            if series.len() > 1 {
                if further.warming.is_none() && std::ptr::eq(*run, first_run) {
                    further.warming = Some((further.marginal.len(), source(run, record)));
                }
                further.marginal.push(series);
                further.marginal_from.push(source(run, record));
            }
            if let (Some(peak), Some(last)) = (reading.peak_kb(record), steps.last()) {
                let (values, from) = match is_first(record) {
                    true => &mut further.first_transient,
                    false => &mut further.transient,
                };
                values.push((peak - reading.step_kb(last)).max(0.0));
                from.push(source(run, record));
            }
            if let Some(cpu_ms) = record.measure.host_cpu_ms() {
                let skills = f64::from(*per_step) * steps.len() as f64;
                further.cpu.0.push(cpu_ms / skills);
                further.cpu.1.push(source(run, record));
            }
        }
        further
    }

    /// The first run's warm-up: how far its first series sits above the marginal slope.
    fn warmup_kb(&self, marginal_kb: &Figure) -> Figure {
        self.warming
            .as_ref()
            .and_then(|(index, from)| {
                let series = &self.marginal[*index];
                let start = series[0].1;
                let above: Vec<f64> = series
                    .iter()
                    .map(|(skills, kb)| kb - start - marginal_kb.value * skills)
                    .collect();
                Figure::of(above, vec![from.clone()])
            })
            .unwrap_or_else(|| Figure::exact(0.0, String::new()))
    }
}

/// The largest transient seen: the one a budget must leave room for.
fn largest((values, from): (Vec<f64>, Vec<String>)) -> Option<Figure> {
    Figure::of(values, from).map(|mut figure| {
        figure.value = figure.high;
        figure
    })
}

/// Memory per request in flight, from the concurrent entries with enough of them.
fn per_request_kb(runs: &[RunRecords], kind: &Copies, reading: Reading) -> Option<Figure> {
    let (mut per_request, mut from) = (Vec::new(), Vec::new());
    for run in runs {
        for record in &run.records {
            let in_flight = record.measure.outcome.latencies.len();
            if let (true, true, Some(peak)) = (
                concurrent(run, record, kind),
                in_flight >= MIN_IN_FLIGHT,
                reading.peak_kb(record),
            ) {
                per_request.push((peak - reading.before_kb(record)) / in_flight as f64);
                from.push(source(run, record));
            }
        }
    }
    Figure::of(per_request, from)
}

/// The first skill: the run's first entry adds one skill of this kind and nothing came
/// before it, and it got as far as one step (a host that died in it gives none). Every run
/// that starts so gives one reading of each; the first such run also gives the warm-up, the
/// mappings and the threads.
fn firsts<'a>(runs: &'a [RunRecords], kind: &Copies) -> Vec<(&'a RunRecords, &'a EntryRecord)> {
    runs.iter()
        .filter_map(|run| {
            let record = run.records.first()?;
            let added = adds(&command(record)?, kind) == Some(1);
            (added && !record.measure.outcome.steps.is_empty()).then_some((run, record))
        })
        .collect()
}

/// The figures for `kind`, or what the runs lack for them.
pub fn ingredients(
    runs: &[RunRecords],
    kind: &Copies,
) -> Result<(Ingredients, Vec<Missing>), Vec<Missing>> {
    let (label, add) = (kind.label(), kind.add_line());
    let adding: Vec<(&RunRecords, &EntryRecord, u32)> = runs
        .iter()
        .flat_map(|run| run.records.iter().map(move |record| (run, record)))
        .filter_map(|(run, record)| {
            let per_step = adds(&command(record)?, kind)?;
            (!record.measure.outcome.steps.is_empty()).then_some((run, record, per_step))
        })
        .collect();
    let reading = Reading::of(&adding);
    let firsts = firsts(runs, kind);
    let mut missing = Vec::new();
    let Some(&(first_run, first_record)) = firsts.first() else {
        missing.push(Missing {
            figure: format!("the idle host and the first {label} skill"),
            add: format!("{add} as the run's first line"),
        });
        return Err(missing);
    };
    let is_first = |record: &EntryRecord| firsts.iter().any(|(_, f)| std::ptr::eq(*f, record));
    let first_sources: Vec<String> = firsts.iter().map(|(run, r)| source(run, r)).collect();
    let of_firsts = |figure: &dyn Fn(&EntryRecord) -> f64| {
        Figure::of(
            firsts.iter().map(|(_, record)| figure(record)).collect(),
            first_sources.clone(),
        )
        .expect("at least one first skill")
    };
    let idle_kb = of_firsts(&|record| reading.before_kb(record));
    let first_kb = of_firsts(&|record| {
        reading.step_kb(&record.measure.outcome.steps[0]) - reading.before_kb(record)
    });
    let further = FurtherSkills::of(&adding, reading, &is_first, first_run);
    let Some(marginal_kb) = Figure::slope_of(&further.marginal, further.marginal_from.clone())
    else {
        missing.push(Missing {
            figure: format!("the cost of each further {label} skill"),
            add: format!("4 {add} after the first"),
        });
        return Err(missing);
    };
    let warmup_kb = further.warmup_kb(&marginal_kb);
    let first_transient_kb = largest(further.first_transient);
    // Without a further skill's, the first one's stands in.
    let transient_kb = largest(further.transient)
        .or_else(|| first_transient_kb.clone())
        .unwrap_or_else(|| Figure::exact(0.0, String::new()));
    let (cpu, cpu_from) = further.cpu;
    let cpu_per_skill_ms =
        Figure::of(cpu, cpu_from).unwrap_or_else(|| Figure::exact(0.0, String::new()));
    let per_request_kb = per_request_kb(runs, kind, reading);
    if per_request_kb.is_none() {
        missing.push(Missing {
            figure: format!(
                "the memory per request in flight (an entry with {MIN_IN_FLIGHT} or more at once)"
            ),
            add: match kind {
                Copies::Sample(_) => "p_execute_all JohnDoe 42 9000 10".to_owned(),
                Copies::Component(file) => format!(
                    "p_execute {MIN_IN_FLIGHT} {}1 JSON|@FILE",
                    CopyNames::stem(file)
                ),
            },
        });
    }
    let compile_threads = adding
        .iter()
        .filter_map(|(_, record, _)| record.sampling.threads_peak)
        .max()
        .map(|peak| CompileThreads {
            idle: first_record.measure.before.threads,
            peak,
        });
    Ok((
        Ingredients {
            kind: kind.clone(),
            basis: reading.basis,
            idle_kb,
            first_kb,
            marginal_kb,
            warmup_kb,
            transient_kb,
            first_transient_kb,
            per_request_kb,
            cpu_per_skill_ms,
            mappings: first_record.sampling.maps_limit.and_then(|limit| {
                process_limit(runs, kind, first_run, first_record, limit, |record| {
                    record.sampling.handles.maps_peak
                })
            }),
            address_space: process_limit(
                runs,
                kind,
                first_run,
                first_record,
                first_record
                    .sampling
                    .handles
                    .as_limit_kb
                    .unwrap_or(USER_SPACE_KB)
                    .min(USER_SPACE_KB),
                |record| record.sampling.vms_peak_kb,
            ),
            first_held: first_held(firsts.iter().map(|(_, record)| *record)),
            compile_threads,
        },
        missing,
    ))
}

/// What holds the first skill, the median of each part over the runs that read it.
fn first_held<'a>(firsts: impl Iterator<Item = &'a EntryRecord>) -> Option<FirstHeld> {
    let read: Vec<(&EntryRecord, [f64; 5])> = firsts
        .filter_map(|record| {
            let growth = record.held?.growth().map(|(_, kb)| kb as f64);
            Some((record, growth))
        })
        .collect();
    if read.is_empty() {
        return None;
    }
    let median_of = |values: Vec<f64>| -> Option<f64> {
        let mut values = values;
        values.sort_by(f64::total_cmp);
        (!values.is_empty()).then(|| median(&values))
    };
    let part = |i: usize| median_of(read.iter().map(|(_, g)| g[i]).collect()).unwrap_or(0.0);
    // [heap, wasm, code, files, stacks], as Composition::parts orders them.
    Some(FirstHeld {
        heap_kb: part(0),
        code_kb: part(2),
        other_kb: part(1) + part(3) + part(4),
        kept_kb: median_of(
            read.iter()
                .filter_map(|(r, _)| r.heap_kept_kb().map(|(_, kept)| kept as f64))
                .collect(),
        ),
        arenas: median_of(
            read.iter()
                .filter_map(|(r, _)| r.held.and_then(|h| h.after.arenas).map(|a| a as f64))
                .collect(),
        ),
    })
}

impl ProcessLimit {
    /// Skills that fit the limit: the first entry's count, then each further skill's.
    fn skills(&self) -> Figure {
        let fit = |each: f64| {
            ((self.limit as f64 - self.first) / each.max(0.01)).floor() + self.first_skills
        };
        Figure {
            value: fit(self.per_skill.value),
            low: fit(self.per_skill.high),
            high: fit(self.per_skill.low),
            from: self.per_skill.from.clone(),
        }
    }

    /// Requests in flight that fit what `held` skills leave of the limit.
    fn requests(&self, held: f64) -> Option<Figure> {
        let per_request = self.per_request.as_ref()?;
        let fit = |per_skill: f64, each: f64| {
            let held = self.first + (held - self.first_skills) * per_skill;
            ((self.limit as f64 - held).max(0.0) / each.max(0.01)).floor()
        };
        Some(Figure {
            value: fit(self.per_skill.value, per_request.value),
            low: fit(self.per_skill.high, per_request.high),
            high: fit(self.per_skill.low, per_request.low),
            from: from(&[per_request, &self.per_skill]),
        })
    }
}

/// The entries the figures came from, each once.
fn from(figures: &[&Figure]) -> Vec<String> {
    let mut from: Vec<String> = figures.iter().flat_map(|f| f.from.clone()).collect();
    from.retain(|source| !source.is_empty());
    from.sort();
    from.dedup();
    from
}

/// The user address space of an x86-64 process with 4-level page tables (47 bits), KB.
pub const USER_SPACE_KB: u64 = 1 << 37;

/// A per-process count by skill, from each later add entry's peak against the first's, and
/// per request in flight, from each concurrent entry's peak against the entry before it.
fn process_limit(
    runs: &[RunRecords],
    kind: &Copies,
    first_run: &RunRecords,
    first_record: &EntryRecord,
    limit: u64,
    peak_of: impl Fn(&EntryRecord) -> Option<u64>,
) -> Option<ProcessLimit> {
    let first = peak_of(first_record)? as f64;
    let (mut per_skill, mut per_skill_from) = (Vec::new(), Vec::new());
    let first_skills = first_record.measure.outcome.steps.len() as f64;
    let mut skills = first_skills;
    for record in &first_run.records[1..] {
        let Some(command) = command(record) else {
            continue;
        };
        if let (Some(per_step), Some(peak)) = (adds(&command, kind), peak_of(record)) {
            skills += f64::from(per_step) * record.measure.outcome.steps.len() as f64;
            per_skill.push((peak as f64 - first) / (skills - first_skills));
            per_skill_from.push(source(first_run, record));
        }
    }
    let (mut per_request, mut per_request_from) = (Vec::new(), Vec::new());
    for run in runs {
        for pair in run.records.windows(2) {
            let (before, record) = (&pair[0], &pair[1]);
            let in_flight = record.measure.outcome.latencies.len();
            if let (true, true, Some(peak), Some(base)) = (
                concurrent(run, record, kind),
                in_flight >= MIN_IN_FLIGHT,
                peak_of(record),
                peak_of(before),
            ) {
                per_request.push(peak.saturating_sub(base) as f64 / in_flight as f64);
                per_request_from.push(source(run, record));
            }
        }
    }
    Some(ProcessLimit {
        limit,
        first,
        first_skills,
        per_skill: Figure::of(per_skill, per_skill_from)?,
        per_request: Figure::of(per_request, per_request_from),
    })
}

/// The machine a prediction is for.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Machine {
    pub memory_bytes: u64,
    pub cores: u32,
    /// Share of memory kept free, 0..1.
    pub headroom: f64,
}

impl Machine {
    pub fn budget_kb(&self) -> f64 {
        self.memory_bytes as f64 / 1024.0 * (1.0 - self.headroom)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Prediction {
    pub kind: Copies,
    /// Skills resident at once.
    pub skills: Figure,
    /// The skills the requests run beside: the most that fit, or as asked.
    pub skills_held: f64,
    /// Requests in flight at once beside `skills_held` skills.
    pub requests: Option<Figure>,
    /// Loading that many skills with every core compiling.
    pub load_s: Figure,
    /// What bounds `skills` and `requests`: memory, vm.max_map_count or address space.
    pub skills_bound: Bound,
    pub requests_bound: Bound,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    Memory,
    MaxMapCount,
    AddressSpace,
}

/// The lowest of the figures, range by range, and which bound it was (by value).
fn lower(memory: Figure, others: [(Option<Figure>, Bound); 2]) -> (Figure, Bound) {
    others
        .into_iter()
        .filter_map(|(figure, bound)| Some((figure?, bound)))
        .fold(
            (memory, Bound::Memory),
            |(least, bound), (other, its)| match other.value < least.value {
                true => (
                    Figure {
                        value: other.value,
                        low: other.low.min(least.low),
                        high: other.high.min(least.high),
                        from: other.from,
                    },
                    its,
                ),
                false => (least, bound),
            },
        )
}

/// The line further skills follow, at one reading of its range: KB per skill, and the one-off
/// warm-up above it.
#[derive(Clone, Copy)]
struct Further {
    marginal: f64,
    warmup: f64,
}

/// Skills that fit `budget` when each further one costs as `further` says (KB).
fn skills_fitting(ingredients: &Ingredients, budget: f64, further: Further) -> f64 {
    let held = ingredients.idle_kb.value + ingredients.first_kb.value;
    let first_transient = ingredients
        .first_transient_kb
        .as_ref()
        .map_or(ingredients.transient_kb.value, |figure| figure.value);
    if budget < held + first_transient {
        return 0.0;
    }
    let left = budget - held - ingredients.transient_kb.value - further.warmup;
    if left < further.marginal {
        return 1.0;
    }
    (left / further.marginal.max(1.0)).floor() + 1.0
}

fn resident(ingredients: &Ingredients, skills: f64, further: Further) -> f64 {
    if skills < 1.0 {
        return ingredients.idle_kb.value;
    }
    let warmup = if skills >= 2.0 { further.warmup } else { 0.0 };
    ingredients.idle_kb.value
        + ingredients.first_kb.value
        + warmup
        + (skills - 1.0) * further.marginal
}

/// `skills`: how many the requests run beside (`None`: the most that fit).
pub fn predict(
    ingredients: &Ingredients,
    machine: &Machine,
    skills_held: Option<u32>,
) -> Prediction {
    let budget = machine.budget_kb();
    let (marginal, warmup) = (&ingredients.marginal_kb, &ingredients.warmup_kb);
    // The dearer a skill, the fewer fit: the value, then the cheap end, then the dear end.
    let further = Further {
        marginal: marginal.value,
        warmup: warmup.value,
    };
    let (cheap, dear) = (
        Further {
            marginal: marginal.low,
            warmup: warmup.low,
        },
        Further {
            marginal: marginal.high,
            warmup: warmup.high,
        },
    );
    let by_memory = Figure {
        value: skills_fitting(ingredients, budget, further),
        low: skills_fitting(ingredients, budget, dear),
        high: skills_fitting(ingredients, budget, cheap),
        from: from(&[
            &ingredients.idle_kb,
            &ingredients.first_kb,
            marginal,
            warmup,
            &ingredients.transient_kb,
        ]),
    };
    let maps = ingredients.mappings.as_ref();
    let space = ingredients.address_space.as_ref();
    let (skills, skills_bound) = lower(
        by_memory,
        [
            (maps.map(ProcessLimit::skills), Bound::MaxMapCount),
            (space.map(ProcessLimit::skills), Bound::AddressSpace),
        ],
    );
    // Beside the skills held (by default the most that fit): what their resident memory
    // leaves of the budget, the transient included, since nothing compiles once they are
    // loaded; and what their mappings leave of the limit.
    let held = skills_held.map_or(skills.value, f64::from);
    let requests = ingredients.per_request_kb.as_ref().map(|per_request| {
        let fit = |further: Further, each: f64| {
            let left = budget - resident(ingredients, held, further);
            (left.max(0.0) / each.max(1.0)).floor()
        };
        Figure {
            value: fit(further, per_request.value),
            low: fit(dear, per_request.high),
            high: fit(cheap, per_request.low),
            from: from(&[per_request, marginal, warmup]),
        }
    });
    let (requests, requests_bound) = match requests {
        Some(requests) => {
            let (requests, bound) = lower(
                requests,
                [
                    (maps.and_then(|m| m.requests(held)), Bound::MaxMapCount),
                    (space.and_then(|s| s.requests(held)), Bound::AddressSpace),
                ],
            );
            (Some(requests), bound)
        }
        None => (None, Bound::Memory),
    };
    let cores = f64::from(machine.cores.max(1));
    let cpu = &ingredients.cpu_per_skill_ms;
    let load = |skills: f64, cpu_ms: f64| skills * cpu_ms / 1e3 / cores;
    let load_s = Figure {
        value: load(skills.value, cpu.value),
        low: load(skills.low, cpu.low),
        high: load(skills.high, cpu.high),
        from: from(&[cpu]),
    };
    Prediction {
        kind: ingredients.kind.clone(),
        skills,
        skills_held: held,
        requests,
        load_s,
        skills_bound,
        requests_bound,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::record::Step;
    use crate::record::fixture::record;

    fn entry(index: usize, cmd: &str, before_kb: u64, steps: &[u64], peak_kb: u64) -> EntryRecord {
        let mut record = record(cmd, 1000.0);
        record.measure.index = index;
        record.measure.before.rss_kb = before_kb;
        record.measure.before.cpu_ticks = 0;
        let mut after = record.measure.before;
        after.rss_kb = *steps.last().unwrap_or(&before_kb);
        after.cpu_ticks = 100 * steps.len() as u64;
        record.measure.after = Some(after);
        record.measure.outcome.steps = steps
            .iter()
            .map(|&rss_kb| Step {
                rss_kb,
                memcg_kb: None,
            })
            .collect();
        record.sampling.rss_peak_kb = Some(peak_kb);
        record
    }

    /// 10,000 KB, four cores, no headroom.
    fn small_machine() -> Machine {
        Machine {
            memory_bytes: 10_000 * 1024,
            cores: 4,
            headroom: 0.0,
        }
    }

    fn bench_like() -> RunRecords {
        let mut requests = entry(
            2,
            "p_execute_all JohnDoe 42 9000 10",
            1_500,
            &[1_520],
            2_500,
        );
        requests.measure.outcome.latencies = vec![Duration::from_secs(9); 50];
        RunRecords {
            name: "a".to_owned(),
            cores: None,
            records: vec![
                entry(0, "add_py", 100, &[1_100], 1_300),
                entry(1, "4 add_py", 1_100, &[1_200, 1_310, 1_400, 1_500], 1_700),
                requests,
            ],
        }
    }

    #[test]
    fn derives_each_ingredient_from_its_entries() {
        let (found, missing) =
            ingredients(&[bench_like()], &Copies::Sample(SkillKind::Python)).unwrap();
        assert!(missing.is_empty());
        assert_eq!(found.basis, Basis::Rss);
        assert_eq!(found.idle_kb.value, 100.0);
        assert_eq!(found.first_kb.value, 1_000.0);
        // Steps of 100, 110, 90 and 100 KB.
        assert_eq!(found.marginal_kb.value, 100.0);
        let (low, high) = (found.marginal_kb.low, found.marginal_kb.high);
        assert!(
            (90.0..100.0).contains(&low) && (100.0..=110.0).contains(&high),
            "[{low}, {high}]"
        );
        assert_eq!(found.marginal_kb.from, ["a#1: 4 add_py"]);
        // The largest peak over what stayed: 200 KB while the first compiled, and while the
        // last further one did.
        assert_eq!(found.first_transient_kb.unwrap().value, 200.0);
        assert_eq!(found.transient_kb.value, 200.0);
        assert_eq!(found.transient_kb.from, ["a#1: 4 add_py"]);
        // 1,000 KB over 50 in flight.
        assert_eq!(found.per_request_kb.unwrap().value, 20.0);
        // 1 s of CPU for one skill, 4 s for four (10 ms ticks).
        assert_eq!(found.cpu_per_skill_ms.value, 1_000.0);
    }

    /// A user's component: its adds with an input load it as add_py loads the sample, and
    /// `p_execute` on one of its copies gives the memory per request; the samples, which the
    /// run never added, say what they lack.
    #[test]
    fn a_users_component_loaded_by_its_adds_has_its_own_ingredients() {
        use crate::ground::component::Exports;
        use crate::record::EntryCmd;
        let weather = Copies::Component("weather.wasm".into());
        let input = Some(r#"{"topic":"rain"}"#.to_owned());
        let add = |count: u32| Command::AddFile {
            file: "weather.wasm".into(),
            name: None,
            count,
            exports: Exports(vec!["run".to_owned()]),
            input: input.clone(),
        };
        let named = |mut record: EntryRecord, command: Command| {
            record.measure.cmd = EntryCmd::new(record.measure.cmd.as_str().to_owned(), command);
            record
        };
        let mut requests = named(
            entry(2, "p_execute 50 weather3 {}", 1_500, &[1_520], 2_500),
            Command::Execute {
                name: "weather3".to_owned(),
                input: "{}".to_owned(),
                times: 50,
            },
        );
        requests.measure.outcome.latencies = vec![Duration::from_secs(1); 50];
        let run = RunRecords {
            name: "own".to_owned(),
            cores: None,
            records: vec![
                named(
                    entry(0, "add weather.wasm {}", 100, &[1_100], 1_300),
                    add(1),
                ),
                named(
                    entry(
                        1,
                        "4 add weather.wasm {}",
                        1_100,
                        &[1_200, 1_310, 1_400, 1_500],
                        1_700,
                    ),
                    add(1),
                ),
                requests,
            ],
        };
        let (found, missing) = ingredients(std::slice::from_ref(&run), &weather).unwrap();
        assert!(missing.is_empty(), "{missing:?}");
        assert_eq!(found.kind.label(), "weather.wasm");
        assert_eq!(
            (found.idle_kb.value, found.first_kb.value),
            (100.0, 1_000.0)
        );
        assert_eq!(found.marginal_kb.value, 100.0);
        assert_eq!(found.per_request_kb.unwrap().value, 20.0);
        assert_eq!(
            serde_json::to_value(&found.kind).unwrap(),
            serde_json::json!("weather.wasm")
        );
        let lacks = ingredients(&[run], &Copies::Sample(SkillKind::Python)).unwrap_err();
        assert_eq!(lacks[0].add, "add_py as the run's first line");

        // An add without an input loads nothing.
        let mut bare = add(1);
        if let Command::AddFile { input, .. } = &mut bare {
            *input = None;
        }
        assert_eq!(bare.loads(), None);
        assert_eq!(add(3).loads(), Some((weather.clone(), 3)));
    }

    /// The first skill's growth by holder, and what the allocator kept; the host's threads
    /// at its most while skills were added.
    #[test]
    fn splits_the_first_skill_by_holder_and_counts_the_compile_threads() {
        use crate::record::composition::Composition;
        use crate::record::composition::EntryComposition;
        use crate::record::host::HostCounters;
        let mut run = bench_like();
        let first = &mut run.records[0];
        let part = |heap_kb, code_kb, files_kb| Composition {
            heap_kb,
            code_kb,
            files_kb,
            ..Composition::default()
        };
        first.held = Some(EntryComposition {
            before: part(50, 0, 50),
            after: part(800, 150, 60),
        });
        first.host = Some(HostCounters {
            heap_in_use_bytes: Some(100 * 1024),
            ..HostCounters::default()
        });
        first.measure.before.threads = 4;
        first.sampling.threads_peak = Some(7);
        run.records[1].sampling.threads_peak = Some(9);
        let (found, _) = ingredients(&[run], &Copies::Sample(SkillKind::Python)).unwrap();
        let held = found.first_held.unwrap();
        assert_eq!(
            (held.heap_kb, held.code_kb, held.other_kb, held.kept_kb),
            (750.0, 150.0, 10.0, Some(700.0))
        );
        let threads = found.compile_threads.unwrap();
        assert_eq!((threads.idle, threads.peak), (4, 9));
    }

    #[test]
    fn predicts_skills_requests_and_load_time_with_ranges() {
        let (found, _) = ingredients(&[bench_like()], &Copies::Sample(SkillKind::Python)).unwrap();
        // 10,000 KB of budget: idle 100 + first 1,000 + transient 200 leave 8,700 for 87 more.
        let machine = small_machine();
        let predicted = predict(&found, &machine, None);
        assert_eq!(predicted.skills.value, 88.0);
        // 8,700 / 110 = 79.1 and 8,700 / 90 = 96.7 at the extremes of the marginal's range.
        assert!((80.0..88.0).contains(&predicted.skills.low));
        assert!((89.0..=97.0).contains(&predicted.skills.high));
        // 88 skills hold 100 + 1,000 + 87 × 100 = 9,800 KB: 200 KB left, 10 requests of 20.
        assert_eq!(predicted.requests.unwrap().value, 10.0);
        assert_eq!(predicted.load_s.value, 88.0 * 1.0 / 4.0);
        // Beside 10 skills: 10,000 - 100 - 1,000 - 9 × 100 = 8,000 KB, 400 requests.
        let beside_ten = predict(&found, &machine, Some(10));
        assert_eq!(beside_ten.requests.unwrap().value, 400.0);
        assert_eq!(beside_ten.requests_bound, Bound::Memory);
    }

    #[test]
    fn the_warmup_of_the_first_further_skills_is_paid_once_beside_the_slope() {
        let mut run = bench_like();
        // 300 KB for the second skill (an arena grows), then 100 KB each.
        run.records[1] = entry(
            1,
            "8 add_py",
            1_100,
            &[1_400, 1_500, 1_600, 1_700, 1_800, 1_900, 2_000, 2_100],
            2_200,
        );
        let (found, _) = ingredients(&[run], &Copies::Sample(SkillKind::Python)).unwrap();
        assert_eq!(found.marginal_kb.value, 100.0);
        assert_eq!(found.warmup_kb.value, 200.0);
        assert_eq!(found.warmup_kb.from, ["a#1: 8 add_py"]);
        // 10,000 - 100 - 1,000 - 100 (a further skill's transient) - 200 leave 8,600 for 86
        // more; the line through the first skill alone would say 89 in all.
        let predicted = predict(&found, &small_machine(), None);
        assert_eq!(predicted.skills.value, 87.0);
        // Beside 10 skills: 10,000 - 100 - 1,000 - 200 - 9 × 100 = 7,800 KB, 390 requests.
        let beside_ten = predict(&found, &small_machine(), Some(10));
        assert_eq!(beside_ten.requests.unwrap().value, 390.0);
    }

    #[test]
    fn mappings_bound_what_memory_would_allow() {
        let mut run = bench_like();
        // 100 mappings with the first skill, 3 more per skill, 7 per request in flight, under
        // a limit of 400: 101 skills by mappings, 88 by memory; beside 10 skills, the 50 in
        // flight of the run are 7 each: (400 - 127) / 7 = 39 requests, not memory's 400.
        for (record, maps) in run.records.iter_mut().zip([100, 112, 462]) {
            record.sampling.handles.maps_peak = Some(maps);
            record.sampling.maps_limit = Some(400);
        }
        let (found, _) = ingredients(&[run], &Copies::Sample(SkillKind::Python)).unwrap();
        let maps = found.mappings.as_ref().unwrap();
        assert_eq!(
            (maps.first, maps.first_skills, maps.per_skill.value),
            (100.0, 1.0, 3.0)
        );
        assert_eq!(maps.per_request.as_ref().unwrap().value, 7.0);
        let machine = small_machine();
        let predicted = predict(&found, &machine, None);
        assert_eq!(
            (predicted.skills.value, predicted.skills_bound),
            (88.0, Bound::Memory)
        );
        let beside_ten = predict(&found, &machine, Some(10));
        assert_eq!(beside_ten.requests.unwrap().value, 39.0);
        assert_eq!(beside_ten.requests_bound, Bound::MaxMapCount);
    }

    #[test]
    fn address_space_binds_requests_under_rlimit_as() {
        let mut run = bench_like();
        // On demand under `ulimit -v 64G`: 2 GiB with the first skill, 16 MiB more per
        // skill, and each of the 50 requests in flight reserving 4 GiB of linear memory and
        // its guard. Beside 10 skills: (64 - 2 - 9 × 1/64) GiB / (4 GiB + 32 MiB) = 15.
        let gib = 1u64 << 20;
        for (record, vms) in run.records.iter_mut().zip([
            2 * gib,
            2 * gib + gib / 16,
            2 * gib + 50 * (4 * gib + gib / 32),
        ]) {
            record.sampling.vms_peak_kb = Some(vms);
            record.sampling.handles.as_limit_kb = Some(64 * gib);
        }
        let (found, _) = ingredients(&[run.clone()], &Copies::Sample(SkillKind::Python)).unwrap();
        let space = found.address_space.as_ref().unwrap();
        assert_eq!(space.limit, 64 * gib);
        assert_eq!(space.per_skill.value, (gib / 64) as f64);
        let beside_ten = predict(&found, &small_machine(), Some(10));
        assert_eq!(beside_ten.requests.unwrap().value, 15.0);
        assert_eq!(beside_ten.requests_bound, Bound::AddressSpace);
        // Without the limit, 128 TiB: memory binds again.
        for record in &mut run.records {
            record.sampling.handles.as_limit_kb = None;
        }
        let (found, _) = ingredients(&[run], &Copies::Sample(SkillKind::Python)).unwrap();
        assert_eq!(found.address_space.as_ref().unwrap().limit, USER_SPACE_KB);
        let beside_ten = predict(&found, &small_machine(), Some(10));
        assert_eq!(beside_ten.requests_bound, Bound::Memory);
    }

    #[test]
    fn says_which_entries_a_run_lacks() {
        let mut run = bench_like();
        run.records.truncate(1);
        let missing = ingredients(&[run], &Copies::Sample(SkillKind::Python)).unwrap_err();
        assert_eq!(missing[0].add, "4 add_py after the first");
        let missing = ingredients(&[bench_like()], &Copies::Sample(SkillKind::Rust)).unwrap_err();
        assert_eq!(missing[0].add, "add_rs as the run's first line");
        // A first add the host died in has no step to measure the first skill by.
        let mut run = bench_like();
        run.records[0].measure.outcome.steps.clear();
        let missing = ingredients(&[run], &Copies::Sample(SkillKind::Python)).unwrap_err();
        assert_eq!(missing[0].add, "add_py as the run's first line");
        let mut run = bench_like();
        run.records.pop();
        let (_, missing) = ingredients(&[run], &Copies::Sample(SkillKind::Python)).unwrap();
        assert!(missing[0].add.starts_with("p_execute_all"), "{missing:?}");
    }
}
