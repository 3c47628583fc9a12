//! The time profile, checked against the kernel and against what the skills were asked to do:
//! each host thread's samples against its CPU time in schedstat, a skill asked to burn the CPU
//! found by name in its own function, a skill asked to sleep found waiting that long per
//! request, the pprof files read by `go tool pprof`, rates the kernel would refuse refused
//! before the run, and a kernel that refuses perf events leaving a run that says so. Root
//! only (BPF): without it these fail loudly, never skip.

use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::Command;

use skillprof::record::probes::{Phase, Probe};
use skillprof::record::time::{FrameKind, TimeProfile, TimeState};

mod common;
use common::cli::{
    cell, csv_rows, describe, host_pid, meta, run, run_ok, skillprof, start_long_run, write_cmds,
};
use common::prometheus::spin_every_cpu;
use common::require_root;

/// What these tests do that needs root.
const ROOT: &str = "the time profile tests load BPF programs on perf events and the scheduler";

/// The burn asked of the skill, per request, and the sleep.
const BURN_MS: u64 = 3000;
const SLEEP_MS: u64 = 300;
const SLEEPERS: u64 = 4;
/// A rate that gives a thread that burns 3 s about 1,500 samples: the check within 5% is
/// then the estimator's, not a handful of samples'.
const HZ: &str = "499";

fn profile(folder: &Path, entry: usize) -> TimeProfile {
    skillprof::views::output::profile::read(folder, entry)
        .unwrap()
        .unwrap_or_else(|| panic!("{} has no profile of entry {entry}", folder.display()))
}

#[test]
fn samples_match_the_kernels_cpu_time_and_name_the_hot_function_and_the_sleep() {
    require_root(ROOT);
    let _machine = common::machine();
    let dir = tempfile::tempdir().unwrap();
    let workload = write_cmds(
        dir.path(),
        "time.cmds",
        &format!(
            "add_rs\n\
             execute sample_rs1 {{\"burn_ms\": {BURN_MS}}}\n\
             execute sample_rs1 {{\"burn_ms\": {BURN_MS}}}\n\
             p_execute_all Sleep 0 {SLEEP_MS} {SLEEPERS}\n"
        ),
    );
    let (output, folder) = run_ok(&workload, &dir.path().join("runs"), &["--profile-hz", HZ]);
    let stdout = String::from_utf8_lossy(&output.stdout);

    // Truth: per thread, samples × period within 5% of the CPU time schedstat counted, for
    // every thread that ran a second or more (the threads that burned).
    let check = meta(&folder)
        .probes
        .unwrap()
        .profile_check
        .expect("meta.json has the profile's check against schedstat");
    let errors = check.errors(1_000_000_000);
    assert!(
        !errors.is_empty(),
        "no host thread ran a second of CPU: {:?}",
        check.threads
    );
    for (thread, error) in &errors {
        assert!(
            error.abs() <= 0.05,
            "thread {} ({}): {} samples × {} ns = {} ms, schedstat {} ms ({:+.1}%)",
            thread.tid,
            thread.name,
            thread.samples,
            check.period_ns,
            thread.sampled_ns(check.period_ns) / 1_000_000,
            thread.cpu_ns / 1_000_000,
            100.0 * error
        );
    }

    // The hot function: at least 90% of the call phase's samples of each burning entry have
    // it innermost, named with its skill.
    for entry in [1, 2] {
        let profile = profile(&folder, entry);
        let call: Vec<_> = profile
            .in_state(TimeState::OnCpu)
            .filter(|s| s.skill.as_deref() == Some("sample_rs1") && s.phase == Phase::Call)
            .collect();
        let samples: u64 = call.iter().map(|s| s.count).sum();
        let in_burn: u64 = call
            .iter()
            .filter(|s| {
                profile.frames_of(s).last().is_some_and(|f| {
                    f.kind == FrameKind::Wasm && f.name == "sample_rs1!sample_rs::burn"
                })
            })
            .map(|s| s.count)
            .sum();
        assert!(
            samples > 0 && in_burn as f64 >= 0.9 * samples as f64,
            "entry {entry}: {in_burn} of the call's {samples} samples in sample_rs1!sample_rs::burn"
        );
    }

    // The sleep: each request waited its sleep between polls, pending, within 5%.
    let skills = csv_rows(&folder.join("skills.csv"));
    let calls: Vec<_> = skills
        .iter()
        .filter(|row| cell::<u64>(row, "entry") == 3 && row["phase"] == "call")
        .collect();
    let runs: u64 = calls.iter().map(|row| cell::<u64>(row, "runs")).sum();
    let pending: f64 = calls.iter().map(|row| cell::<f64>(row, "pending_ms")).sum();
    assert_eq!(runs, SLEEPERS, "the sleeping entry's calls: {calls:?}");
    let per_request = pending / runs as f64;
    assert!(
        (per_request / SLEEP_MS as f64 - 1.0).abs() <= 0.05,
        "each request slept {SLEEP_MS} ms; pending per request: {per_request:.1} ms"
    );
    let sleeping = profile(&folder, 3);
    let slept: u64 = sleeping
        .in_state(TimeState::Sleeping)
        .filter(|s| s.skill.as_deref() == Some("sample_rs1") && s.phase == Phase::Call)
        .map(|s| s.ns)
        .sum();
    assert!(
        (slept as f64 / 1e6 / (SLEEPERS * SLEEP_MS) as f64 - 1.0).abs() <= 0.05,
        "the profile has sample_rs1's call asleep {} ms, for {SLEEPERS} requests of {SLEEP_MS} ms",
        slept / 1_000_000
    );

    // The pprof files read as such by the tool they are for, with the wasm function named.
    let pprof = folder.join("profile/1.cpu.pb.gz");
    common::pprof_top_lists(&pprof, &[], "sample_rs1!sample_rs::burn");
    // Every function under its own name, a compile's (entry 0) and a request's alike: pprof
    // once read `<regalloc2::…::Env<…>>::run` and `<…::EgraphPass>::run` as one `::run`.
    for entry in [0, 1] {
        let of_entry = profile(&folder, entry);
        let names: std::collections::BTreeSet<&str> = of_entry
            .in_state(TimeState::OnCpu)
            .flat_map(|stack| of_entry.frames_of(stack))
            .map(|frame| frame.name.as_str())
            .collect();
        let listed = common::pprof_top_names(&folder.join(format!("profile/{entry}.cpu.pb.gz")));
        let renamed: Vec<&String> = listed
            .iter()
            .filter(|name| !names.contains(name.as_str()))
            .collect();
        assert!(
            !listed.is_empty() && renamed.is_empty(),
            "go tool pprof -top lists entry {entry}'s functions under names the profile does \
             not have: {renamed:?}"
        );
        assert!(
            names.iter().any(|name| name.starts_with('<')),
            "entry {entry} has no function of the `<Type>::method` form to check"
        );
    }

    // And explain.md says it in words.
    let explain = std::fs::read_to_string(folder.join("explain.md")).unwrap();
    assert!(
        explain.contains("running the skills' wasm")
            && explain.contains("hottest sample_rs1!sample_rs::burn"),
        "explain.md does not say where the burn went:\n{explain}\n{stdout}"
    );
}

/// The time the host's threads waited for a CPU, as the switch programs count it (from the
/// kernel's sched_info at each switch in), against the kernel's own sum of it (schedstat's
/// run_delay, read per thread at the boundaries): requests burning while a busy loop runs on
/// every CPU queue for about half their time. The runtime's workers live the whole run, so
/// both sums cover the same threads.
#[test]
fn the_wait_for_a_cpu_is_the_kernels_own_count() {
    require_root(ROOT);
    let _machine = common::machine();
    let dir = tempfile::tempdir().unwrap();
    let workload = write_cmds(
        dir.path(),
        "queued.cmds",
        "add_rs\np_execute 4 sample_rs1 {\"burn_ms\": 400}\n",
    );
    let spinners = spin_every_cpu();
    let cpus = spinners.len();
    let (_, folder) = run_ok(&workload, &dir.path().join("runs"), &[]);
    drop(spinners);
    let entry = &common::cli::entries(&folder)[1];
    let run_delay_ms = entry.scheduling.as_ref().unwrap().run_delay_ms;
    let off = entry.time.as_ref().unwrap().off_cpu.as_ref().unwrap();
    let runnable_ms = off.runnable_ns as f64 / 1e6;
    assert!(
        run_delay_ms >= 200.0,
        "four 400 ms burns beside a busy loop on each of {cpus} CPUs waited only \
         {run_delay_ms:.0} ms for one (schedstat)"
    );
    assert!(
        (runnable_ms / run_delay_ms - 1.0).abs() <= 0.05,
        "the switch programs counted {runnable_ms:.1} ms runnable, schedstat's run_delay \
         {run_delay_ms:.1} ms"
    );
}

/// A Python request that waits for nothing still polls with a zero timeout (`time.sleep(0)`):
/// a yield, which tokio wakes only once its worker has run the other ready requests. That
/// time is queued for a thread, not pending on the skill's own waits: ten requests at once on
/// this 2-core machine read 4.5 ms pending each (of 6 ms between polls) before the host said
/// which of its waits were yields.
#[test]
fn a_request_that_waits_for_nothing_is_queued_not_pending() {
    require_root(ROOT);
    let _machine = common::machine();
    let dir = tempfile::tempdir().unwrap();
    let workload = write_cmds(
        dir.path(),
        "yields.cmds",
        "add_py\n20 p_execute_all Busy 0 0 10\n",
    );
    let (output, folder) = run_ok(&workload, &dir.path().join("runs"), &[]);
    let rows = csv_rows(&folder.join("skills.csv"));
    let call = rows
        .iter()
        .find(|row| row["entry"] == "1" && row["phase"] == "call")
        .unwrap_or_else(|| panic!("no call row of entry 1: {rows:?}\n{}", describe(&output)));
    let runs: f64 = cell(call, "runs");
    let (pending, queued): (f64, f64) = (cell(call, "pending_ms"), cell(call, "queued_ms"));
    assert_eq!(runs, 200.0, "{call:?}");
    assert!(
        pending / runs <= 0.5 && queued > pending,
        "requests asked to wait 0 ms were pending {:.2} ms each, queued {:.2} ms: {call:?}",
        pending / runs,
        queued / runs
    );
}

#[test]
fn a_rate_the_kernel_would_refuse_is_refused_before_the_run() {
    require_root(ROOT);
    let dir = tempfile::tempdir().unwrap();
    let workload = write_cmds(dir.path(), "one.cmds", "add_rs\n");
    let max: u64 = std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    for (hz, says) in [
        ("0".to_owned(), "--profile-hz 0 samples nothing".to_owned()),
        (
            (max + 1).to_string(),
            format!("is above this kernel's limit of {max} samples a second"),
        ),
    ] {
        let out = dir.path().join(format!("runs-{hz}"));
        let output = run(&workload, &out, &["--profile-hz", &hz]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            !output.status.success() && stderr.contains(&says),
            "--profile-hz {hz}:\n{}",
            describe(&output)
        );
        assert!(
            !out.exists() || std::fs::read_dir(&out).unwrap().next().is_none(),
            "--profile-hz {hz} left a run folder: the refusal came after the run began"
        );
    }
}

/// A seccomp filter that makes perf_event_open fail with EACCES, as a kernel or a container
/// that refuses perf events does, and lets every other call through.
fn refuse_perf_events(command: &mut Command) {
    // SAFETY: runs in the child between fork and exec: only async-signal-safe calls (prctl).
    unsafe {
        command.pre_exec(|| {
            const NR_PERF_EVENT_OPEN: u32 = 298;
            const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
            let errno = libc::SECCOMP_RET_ERRNO | libc::EACCES as u32;
            let mut filter = [
                // The architecture (offset 4), then the syscall number (offset 0).
                libc::sock_filter {
                    code: 0x20,
                    jt: 0,
                    jf: 0,
                    k: 4,
                },
                libc::sock_filter {
                    code: 0x15,
                    jt: 1,
                    jf: 0,
                    k: AUDIT_ARCH_X86_64,
                },
                libc::sock_filter {
                    code: 0x06,
                    jt: 0,
                    jf: 0,
                    k: libc::SECCOMP_RET_ALLOW,
                },
                libc::sock_filter {
                    code: 0x20,
                    jt: 0,
                    jf: 0,
                    k: 0,
                },
                libc::sock_filter {
                    code: 0x15,
                    jt: 0,
                    jf: 1,
                    k: NR_PERF_EVENT_OPEN,
                },
                libc::sock_filter {
                    code: 0x06,
                    jt: 0,
                    jf: 0,
                    k: errno,
                },
                libc::sock_filter {
                    code: 0x06,
                    jt: 0,
                    jf: 0,
                    k: libc::SECCOMP_RET_ALLOW,
                },
            ];
            let program = libc::sock_fprog {
                len: filter.len() as u16,
                filter: filter.as_mut_ptr(),
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::SECCOMP_MODE_FILTER,
                    &program as *const libc::sock_fprog,
                ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

#[test]
fn a_kernel_that_refuses_perf_events_leaves_a_run_that_says_what_was_not_profiled() {
    require_root(ROOT);
    let dir = tempfile::tempdir().unwrap();
    let workload = write_cmds(
        dir.path(),
        "refused.cmds",
        "add_rs\nexecute sample_rs1 {\"burn_ms\": 200}\n",
    );
    let out = dir.path().join("runs");
    let mut command = skillprof();
    command
        .arg("run")
        .arg(&workload)
        .arg("--out")
        .arg(&out)
        // The major-fault counter of exact mode is a perf event too: the host-only mode
        // leaves it out, so the profile clock is the only thing refused.
        .args(["--probes", "host-only"]);
    refuse_perf_events(&mut command);
    let output = command.output().unwrap();
    assert!(output.status.success(), "{}", describe(&output));
    let folder = common::cli::run_folder(&out);
    let statuses = meta(&folder).probes.unwrap().statuses;
    let clock = statuses
        .iter()
        .find(|s| s.probe == Probe::CpuProfile)
        .expect("the profile clock has a status");
    assert!(
        !clock.attached && clock.detail.contains("Permission denied"),
        "{clock:?}"
    );
    // The switches are not perf events: time off a CPU is still measured.
    assert!(
        statuses
            .iter()
            .any(|s| s.probe == Probe::OffCpu && s.attached),
        "{statuses:?}"
    );
    let explain = std::fs::read_to_string(folder.join("explain.md")).unwrap();
    assert!(
        explain.contains("CPU profile: not sampled"),
        "explain.md does not say the CPU was not sampled:\n{explain}"
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("cpu_profile") && stdout.contains("Permission denied"),
        "the run's probe table does not show the refusal:\n{stdout}"
    );
    // Not sampled is empty, never 0.
    let commands = csv_rows(&folder.join("commands.csv"));
    assert_eq!(commands[1]["cpu_samples"], "", "{:?}", commands[1]);
}

/// The same command twice, the second time with its skills evicted from the host's cache:
/// the second costs a compile more, and explain.md says that is where its extra CPU went.
#[test]
fn a_command_that_cost_more_than_its_twin_says_where_the_extra_went() {
    require_root(ROOT);
    let _machine = common::machine();
    let dir = tempfile::tempdir().unwrap();
    let workload = write_cmds(
        dir.path(),
        "twins.cmds",
        "p_add_rs 4\n\
         p_execute_all Twin 16384 0 5\n\
         drop_cached_skill sample_rs1\n\
         drop_cached_skill sample_rs2\n\
         drop_cached_skill sample_rs3\n\
         drop_cached_skill sample_rs4\n\
         p_execute_all Twin 16384 0 5\n",
    );
    let (_, folder) = run_ok(&workload, &dir.path().join("runs"), &[]);
    let explain = std::fs::read_to_string(folder.join("explain.md")).unwrap();
    let second = explain
        .lines()
        .filter(|line| line.starts_with("p_execute_all Twin"))
        .nth(1)
        .expect("two bursts in explain.md");
    for said in [
        "the same command in entry 1 took",
        "the second one's extra",
        "compiling +",
    ] {
        assert!(second.contains(said), "{said:?} not in: {second}");
    }
}

/// The host stopped (SIGSTOP) for a second in the middle of a traffic entry: its threads'
/// time off a CPU says stopped, not waiting for a CPU (a stopped task leaves the run queue
/// with neither of the sleep states, and was read as preempted), and explain.md says the host
/// was stopped and where the tail came from.
#[test]
fn a_host_stopped_mid_entry_is_said_stopped_not_waiting_for_a_cpu() {
    require_root(ROOT);
    let _machine = common::machine();
    let dir = tempfile::tempdir().unwrap();
    let workload = write_cmds(
        dir.path(),
        "stopped.cmds",
        "add_rs\no_execute sample_rs1 30 4 constant 1024 0\n",
    );
    let (child, folder) = start_long_run(dir.path(), &workload, &[]);
    let host = host_pid(&folder);
    std::thread::sleep(std::time::Duration::from_millis(1000));
    // SAFETY: signals to the run's own host, which it started.
    unsafe { libc::kill(host, libc::SIGSTOP) };
    std::thread::sleep(std::time::Duration::from_millis(1000));
    unsafe { libc::kill(host, libc::SIGCONT) };
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{}", describe(&output));
    let rows = csv_rows(&folder.join("commands.csv"));
    let traffic = &rows[1];
    let [stopped, cpu] =
        ["offcpu_wait_stopped_ms", "offcpu_wait_cpu_ms"].map(|column| cell::<f64>(traffic, column));
    // Every thread of the host is held for the second; each is counted.
    assert!(stopped >= 900.0, "stopped {stopped} ms: {traffic:?}");
    assert!(
        cpu < stopped / 4.0,
        "waiting for a CPU {cpu} ms, stopped {stopped} ms"
    );
    let explain = std::fs::read_to_string(folder.join("explain.md")).unwrap();
    let said = explain
        .lines()
        .find(|line| line.starts_with("o_execute"))
        .unwrap();
    for words in [
        "the host was stopped by a signal (SIGSTOP, SIGTSTP) or a debugger",
        "the tail came from one stall",
    ] {
        assert!(said.contains(words), "{words:?} not in: {said}");
    }
}
