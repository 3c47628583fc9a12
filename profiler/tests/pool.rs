//! `skillprof pool` for real: the configurations run in interleaved rounds, each a real
//! `skillprof run` of skillhost with the probes, and the answer is drawn from their figures;
//! and every kind of bad input is refused before anything runs. Root: the runs load the
//! probes (CI runs the suite as root; without root the experiment test fails loudly).

mod common;

use std::fs;
use std::path::PathBuf;
use std::process::Output;

use common::cli::{describe, skillprof, write_cmds};
use common::require_root;
use skillprof::record::pool::PoolExperiment;
use skillprof::record::traffic::GENERATOR_LATE;

/// A Rust skill (add_rs runs its first request, which compiles it), then forty requests that
/// each write 1 MiB of its memory, alone and four at once.
const WORKLOAD: &str = "add_rs\n20 execute_all Pool 1024 0\n5 p_execute_all Pool 1024 0 4\n";

/// `skillprof pool ARGS` on [`WORKLOAD`], its experiment in `DIR/experiment`: the folder that
/// holds both, the experiment's folder, and how it ended. Host flags, after a `--` in
/// `args`, go last.
fn pool(args: &[&str]) -> (tempfile::TempDir, PathBuf, Output) {
    pool_on(WORKLOAD, args)
}

/// [`pool`] on another workload.
fn pool_on(workload: &str, args: &[&str]) -> (tempfile::TempDir, PathBuf, Output) {
    let dir = tempfile::tempdir().unwrap();
    let cmds = write_cmds(dir.path(), "pool.cmds", workload);
    let folder = dir.path().join("experiment");
    let split = args
        .iter()
        .position(|arg| *arg == "--")
        .unwrap_or(args.len());
    let output = skillprof()
        .arg("pool")
        .args(&args[..split])
        .arg("--run-dir")
        .arg(&folder)
        .arg(&cmds)
        .args(&args[split..])
        .output()
        .unwrap();
    (dir, folder, output)
}

#[test]
fn every_configuration_runs_once_a_round_and_the_answer_names_its_flags() {
    require_root("skillprof pool runs skillprof run with its probes");
    let _machine = common::machine();
    let (_dir, folder, output) = pool(&[
        "--rounds",
        "2",
        "--seed",
        "7",
        "--knob",
        "decommit-batch=1,4",
    ]);
    assert!(output.status.success(), "{}", describe(&output));
    let experiment: PoolExperiment = skillprof::commands::pool::output::read(&folder).unwrap();
    let names: Vec<&str> = experiment.configs.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "on-demand",
            "pooling",
            "pooling (control)",
            "decommit-batch=4"
        ]
    );
    assert!(experiment.complete);
    // Interleaved: each round ran every configuration once, in an order of its own.
    for round in 1..=2 {
        let mut positions: Vec<usize> = experiment
            .configs
            .iter()
            .map(|config| {
                let runs: Vec<_> = config
                    .runs
                    .iter()
                    .filter(|run| run.round == round)
                    .collect();
                assert_eq!(runs.len(), 1, "{} in round {round}", config.name);
                runs[0].position
            })
            .collect();
        positions.sort();
        assert_eq!(positions, [0, 1, 2, 3]);
    }
    for config in &experiment.configs {
        for run in &config.runs {
            let figures = run
                .figures
                .as_ref()
                .unwrap_or_else(|| panic!("{:?}", run.failed));
            // add_rs's request, which compiled the skill, is left out: 20 + 5 × 4 remain.
            assert_eq!(figures.executions, 40, "{}", config.name);
            assert_eq!(figures.request_errors, 0);
            assert!(
                figures.host_cpu_ms > 0.0 && figures.rss_peak_kb.is_some(),
                "{}: {figures:?}",
                config.name
            );
            // The kernel's evidence of each allocator: on demand each instance maps its
            // memory and unmaps it; pooled, a freed slot is decommitted with madvise (or,
            // batched, process_madvise) and nothing is mapped per instance.
            let (mmap, madvise) = (figures.mmap_calls.unwrap(), figures.madvise_calls.unwrap());
            let batched = figures.process_madvise_calls.unwrap();
            match config.name.as_str() {
                "on-demand" => assert!(
                    mmap >= 40 && figures.munmap_calls.unwrap() >= 40,
                    "{figures:?}"
                ),
                "decommit-batch=4" => {
                    assert!(mmap < 40 && (batched > 0 || madvise >= 40), "{figures:?}")
                }
                _ => assert!(mmap < 40 && madvise >= 40 && batched == 0, "{figures:?}"),
            }
        }
        // What --check-config said the engine reserved: terabytes pooled, nothing on demand.
        let reserved = config.reserved_bytes.unwrap();
        match config.is_pooling() {
            true => assert!(reserved > 1 << 40, "{}: {reserved}", config.name),
            false => assert_eq!(reserved, 0),
        }
    }
    let report = fs::read_to_string(folder.join("pool.md")).unwrap();
    for part in [
        "## The answer",
        "`--allocator",
        "## When pooling pays",
        "The control (pooling at its defaults",
        "## Address space",
        "of them fit in 128 TiB",
    ] {
        assert!(report.contains(part), "{part}:\n{report}");
    }
    // Each run is a run folder of its own, as `skillprof run` leaves it.
    assert!(fs::read_dir(folder.join("runs")).unwrap().count() >= 8);
}

/// Two rates to one Rust skill: the peak is the higher that stays within the target.
const RATES: &str = "add_rs\no_execute sample_rs1 50 2 constant 1024 0\n\
                     o_execute sample_rs1 100 2 constant 1024 0\n";

#[test]
fn for_the_peak_each_configuration_is_held_to_the_target_at_each_rate() {
    require_root("skillprof pool runs skillprof run with its probes");
    let _machine = common::machine();
    let (_dir, folder, _output, experiment) = common::generator::on_time(
        || {
            let (dir, folder, output) = pool_on(
                RATES,
                &[
                    "--rounds", "1", "--seed", "3", "--goal", "peak", "--p99-ms", "250",
                ],
            );
            assert!(output.status.success(), "{}", describe(&output));
            let experiment: PoolExperiment =
                skillprof::commands::pool::output::read(&folder).unwrap();
            (dir, folder, output, experiment)
        },
        |(_, _, _, experiment)| {
            experiment
                .configs
                .iter()
                .flat_map(|config| {
                    let rates = config.runs[0].figures.as_ref().map(|f| f.rates.as_slice());
                    rates.unwrap_or_default().iter().filter_map(move |step| {
                        step.unsustained
                            .as_ref()
                            .filter(|why| why.starts_with(GENERATOR_LATE))
                            .map(|why| format!("{} at {}/s: {why}", config.name, step.asked_rps))
                    })
                })
                .collect()
        },
    );
    for config in &experiment.configs {
        let figures = config.runs[0].figures.as_ref().unwrap();
        let asked: Vec<f64> = figures.rates.iter().map(|step| step.asked_rps).collect();
        assert_eq!(asked, [50.0, 100.0], "{}", config.name);
        // Every answer of both steps, warm-up and drain included, is a request the CPU
        // figures count: 2 s at 50/s and at 100/s.
        assert!(
            (290..=310).contains(&figures.executions),
            "{}: {}",
            config.name,
            figures.executions
        );
        // 100 requests a second of 1 MiB each are far within 250 ms on any allocator; the
        // peak is the higher rate unless its step was not sustained (a queue still growing).
        assert!(
            figures.rates.iter().all(|step| step.p99_ms < 250.0),
            "{figures:?}"
        );
        let sustained = figures.rates.iter().filter(|step| step.sustained);
        let highest = sustained.map(|step| step.asked_rps).fold(0.0, f64::max);
        assert!(highest >= 50.0, "{figures:?}");
        assert_eq!(figures.peak_rps, Some(highest), "{figures:?}");
        assert!(figures.p50_ms.unwrap() <= figures.p99_ms.unwrap());
    }
    let report = fs::read_to_string(folder.join("pool.md")).unwrap();
    for part in [
        "| peak within the target, req/s |",
        "For the most requests per second with p99 within 250 ms: nothing this experiment can \
         stand behind. With 1 round its control",
    ] {
        assert!(report.contains(part), "{part}:\n{report}");
    }
}

/// `skillprof pool ARGS`'s stderr; it must fail.
fn refused(args: &[&str]) -> String {
    refused_on(WORKLOAD, args)
}

/// [`refused`] on another workload.
fn refused_on(workload: &str, args: &[&str]) -> String {
    let (_dir, folder, output) = pool_on(workload, args);
    assert!(!output.status.success(), "{}", describe(&output));
    // Nothing ran: no run folder was made.
    assert!(!folder.join("runs").exists(), "{}", describe(&output));
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn bad_input_is_refused_before_anything_runs() {
    let unknown = refused(&["--knob", "keep-residnt=1M"]);
    assert!(
        unknown.contains("no knob 'keep-residnt': the knobs are decommit-batch"),
        "{unknown}"
    );
    let bad_value = refused(&["--knob", "keep-resident=1Q"]);
    assert!(bad_value.contains("unknown size suffix"), "{bad_value}");
    // 4 × 4 × 5 grid values: 80 configurations.
    let big = refused(&[
        "--knob",
        "decommit-batch=1,2,4,8",
        "--knob",
        "warm-slots=0,10,100,1000",
        "--knob",
        "keep-resident=0,64K,1M,4M,16M",
    ]);
    assert!(
        big.contains("more than 64 configurations need --yes"),
        "{big}"
    );
    let allocator = refused(&["--", "--allocator", "pooling"]);
    assert!(
        allocator.contains("--allocator after --: the experiment sets the allocator"),
        "{allocator}"
    );
    let knob = refused(&["--", "--pool-keep-resident=4096"]);
    assert!(knob.contains("--pool-keep-resident after --"), "{knob}");
    let misplaced = refused(&["--goal", "memory", "--memory", "512M"]);
    assert!(
        misplaced.contains("--memory bounds the configurations --goal cpu or peak may choose"),
        "{misplaced}"
    );
    let misplaced = refused(&["--p99-ms", "20"]);
    assert!(
        misplaced.contains("--p99-ms bounds the configurations --goal memory"),
        "{misplaced}"
    );
    let untargeted = refused_on(RATES, &["--goal", "peak"]);
    assert!(
        untargeted.contains("--goal peak needs the latency target its rates are held to"),
        "{untargeted}"
    );
    let rateless = refused(&["--goal", "peak", "--p99-ms", "20"]);
    assert!(
        rateless.contains("the workload has no rate to try: give it o_execute lines"),
        "{rateless}"
    );
    // The engine switches pooling on by its environment, with no knob.
    let knob = refused(&[
        "--host-profile",
        "pharia-engine-2025",
        "--knob",
        "keep-resident=4M",
    ]);
    assert!(
        knob.contains("host profile pharia-engine-2025 has no pooling knob")
            && knob.contains("USE_POOLING_ALLOCATOR=true"),
        "{knob}"
    );
    let profile = refused(&["--host-profile", "wasmtime-serve"]);
    assert!(
        profile.contains("its profile says nothing of a pooling allocator"),
        "{profile}"
    );
}

#[test]
fn a_configuration_the_host_refuses_stops_the_experiment_with_the_hosts_reason() {
    require_root("skillprof pool checks the probes before it asks skillhost");
    // Not while another test runs under strict overcommit: the refusal would be another.
    let _machine = common::machine();
    // A 4 GiB slot cannot fit a 64 KiB reservation: wasmtime says so.
    let refusal = refused(&["--knob", "reservation=64K"]);
    assert!(
        refusal.contains("configuration 'reservation=64K'")
            && refusal.contains("exceeds the configured memory reservation"),
        "{refusal}"
    );
    // More slots than one process's 47-bit address space holds: the reservation fails.
    let too_many = refused(&["--knob", "instances=40000"]);
    assert!(
        too_many.contains("failed to create memory pool mapping")
            && too_many.contains("Cannot allocate memory"),
        "{too_many}"
    );
}

/// A figure of /proc/meminfo, in bytes.
fn meminfo(key: &str) -> u64 {
    let text = fs::read_to_string("/proc/meminfo").unwrap();
    let line = text
        .lines()
        .find(|line| line.starts_with(&format!("{key}:")))
        .unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        * 1024
}

#[test]
fn under_strict_overcommit_the_pooled_host_fails_to_start_the_rest_run_and_the_mode_is_restored() {
    require_root("skillprof pool sets vm.overcommit_memory through its runs");
    let _machine = common::machine();
    // The pool's tables are committed when the engine starts (a writable mapping, unlike
    // the memories' PROT_NONE reservation). Sized at three quarters of RAM, the heuristic
    // mode (0) lets the host make them; strict mode (2) counts them against CommitLimit
    // (swap + half of RAM) and refuses.
    let tables = meminfo("MemTotal") * 3 / 4;
    let (limit, committed) = (meminfo("CommitLimit"), meminfo("Committed_AS"));
    assert!(
        tables > limit.saturating_sub(committed)
            && tables < meminfo("MemTotal") + meminfo("SwapTotal"),
        "this machine cannot show strict overcommit refusing what the heuristic allows: \
         tables {tables}, CommitLimit {limit}, committed {committed}"
    );
    // skillhost's pool: 1,000 instances × 16 tables, 8 bytes an element.
    let elements = (tables / (1000 * 16 * 8)).to_string();
    let (folder, _dir) = pooled_runs_fail(
        "vm/overcommit_memory",
        &[
            "--run-arg=--overcommit-memory=2",
            "--",
            "--pool-table-elements",
            &elements,
        ],
        &["Cannot allocate memory"],
    );
    let report = fs::read_to_string(folder.join("pool.md")).unwrap();
    assert!(
        report.contains("## Runs that failed") && report.contains("Cannot allocate memory"),
        "{report}"
    );
}

/// One round of `skillprof pool ARGS` (which set the sysctl `/proc/sys/SYSCTL` through its
/// runs): every pooled run failed with one of `why` in its reason, on-demand ran, the
/// experiment says it is not complete in its exit code and pool.json, and the sysctl is as it
/// was.
fn pooled_runs_fail(sysctl: &str, args: &[&str], why: &[&str]) -> (PathBuf, tempfile::TempDir) {
    let path = format!("/proc/sys/{sysctl}");
    let before = fs::read_to_string(&path).unwrap();
    let (dir, folder, output) = pool(&[&["--rounds", "1"], args].concat());
    assert_eq!(fs::read_to_string(&path).unwrap(), before);
    assert!(!output.status.success(), "{}", describe(&output));
    let experiment: PoolExperiment = skillprof::commands::pool::output::read(&folder).unwrap();
    assert!(!experiment.complete);
    for config in &experiment.configs {
        let run = &config.runs[0];
        match config.is_pooling() {
            true => {
                let failed = run
                    .failed
                    .as_deref()
                    .unwrap_or_else(|| panic!("{} ran", config.name));
                assert!(
                    why.iter().any(|why| failed.contains(why)),
                    "{}: {failed}",
                    config.name
                );
            }
            false => assert!(run.figures.is_some(), "{:?}", run.failed),
        }
    }
    (folder, dir)
}

/// skillhost's `--check-config` under RLIMIT_AS of `limit` bytes (`ulimit -v`, as some
/// container runtimes set it), with `flags`.
fn check_under_address_limit(limit: u64, flags: &[&str]) -> std::process::Output {
    let skillhost =
        std::path::Path::new(env!("CARGO_BIN_EXE_skillprof")).with_file_name("skillhost");
    let mut command = std::process::Command::new(skillhost);
    command
        .args(["--skills-dir", "/nonexistent", "--check-config"])
        .args(flags);
    common::under_address_limit(&mut command, limit);
    command.output().unwrap()
}

#[test]
fn under_ulimit_v_the_default_pool_cannot_reserve_its_slots_and_a_pool_sized_to_fit_can() {
    const LIMIT: u64 = 64 << 30;
    let default = check_under_address_limit(LIMIT, &["--allocator", "pooling"]);
    assert!(!default.status.success(), "{}", describe(&default));
    let error = String::from_utf8_lossy(&default.stderr);
    assert!(
        error.contains("failed to create memory pool mapping: mmap failed to reserve")
            && error.contains("Cannot allocate memory"),
        "{error}"
    );
    // 10 instances × 4 memories × (1 GiB + 32 MiB): 41 GiB, inside the 64.
    let sized = check_under_address_limit(
        LIMIT,
        &[
            "--allocator",
            "pooling",
            "--pool-instances",
            "10",
            "--memory-limit-mib",
            "1024",
            "--memory-reservation",
            "1073741824",
        ],
    );
    assert!(sized.status.success(), "{}", describe(&sized));
    // On demand reserves nothing up front.
    assert!(check_under_address_limit(LIMIT, &[]).status.success());
}

#[test]
fn under_a_low_vm_max_map_count_the_pooled_host_cannot_guard_its_stacks_and_the_limit_comes_back() {
    require_root("skillprof pool sets vm.max_map_count through its runs");
    let _machine = common::machine();
    // skillhost's pool guards each of its 1,000 stacks with a page of its own, each a
    // mapping: about 2,100 of them before the first request. The limit is 1,024, half of
    // that, so the kernel refuses a guard page's mprotect in the middle of the pool's setup.
    // At 2,048 (until 2026-12-05) the limit was crossed near the setup's end, where threads
    // were starting too, and whichever mapping came first was refused: malloc's thread arena,
    // a new thread's signal stack, or (in CI, 2026-12-05) the epoch thread's own stack, which
    // pthread_create reports as EAGAIN. A tokio worker that starts late can still meet the
    // limit first, so its two ways of failing are accepted. The on-demand host held 75
    // mappings at most under the same workload.
    pooled_runs_fail(
        "vm/max_map_count",
        &["--run-arg=--max-map-count=1024"],
        &[
            "failed to protect stack guard page",
            "memory allocation of",
            "failed to set up alternative stack guard page",
        ],
    );
}
