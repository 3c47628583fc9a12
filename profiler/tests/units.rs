//! skillprof in production's places, in a Debian bookworm root (build/units-root, which
//! scripts/test.sh makes with debootstrap) run by systemd-nspawn: the shipped systemd units
//! booted under a real systemd, with the skillhost just built (`systemd-analyze verify`, in
//! tests/watch.rs, checks a unit's syntax; only booting it shows what a fresh system lacks,
//! as the skills directory skillhost refuses to start without); and the probes inside a
//! container's PID namespace.

mod common;
use common::prometheus;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The container's root: systemd and nothing else of a distribution's.
fn units_root() -> PathBuf {
    let root = skillprof::producers::hostctl::SampleSkills::build_path("units-root").unwrap();
    assert!(
        root.join("usr/lib/systemd/systemd").is_file(),
        "{} has no systemd: scripts/test.sh makes it (debootstrap --variant=minbase \
         --include=systemd,systemd-sysv,dbus bookworm)",
        root.display()
    );
    root
}

/// Boots the units in a throwaway overlay of the root (the root itself is never written),
/// with `script` (a file of tests/fixtures/boot) as the check unit's, which writes what it
/// saw into `check`, then powers the container off. `extra`: systemd-nspawn's further
/// arguments, before the kernel command line.
fn booting(check: &Path, units: &[&str], script: &str, extra: &[String]) -> Command {
    let repository = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let skillhost = Path::new(env!("CARGO_BIN_EXE_skillprof")).with_file_name("skillhost");
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/boot");
    fs::copy(fixtures.join(script), check.join("check.sh")).unwrap();
    fs::copy(fixtures.join("lib.sh"), check.join("lib.sh")).unwrap();
    fs::copy(
        fixtures.join("skillprof-boot-check.service"),
        check.join("skillprof-boot-check.service"),
    )
    .unwrap();
    // systemd-nspawn shares files with a running container through this folder, and refuses
    // to boot without it where systemd is not the machine's init (here).
    fs::create_dir_all("/run/systemd/nspawn/propagate").unwrap();
    let mut nspawn = Command::new("timeout");
    nspawn.args([
        "--kill-after=10",
        "120",
        "systemd-nspawn",
        "--quiet",
        "--boot",
    ]);
    nspawn.args(["--register=no", "--keep-unit", "--console=pipe"]);
    nspawn.args(["--volatile=overlay", "-D"]).arg(units_root());
    nspawn.arg(format!("--bind={}:/check", check.display()));
    nspawn.arg(format!(
        "--bind-ro={}:/usr/local/bin/skillhost",
        skillhost.display()
    ));
    for unit in units {
        nspawn.arg(format!(
            "--bind-ro={}:/etc/systemd/system/{unit}",
            repository.join("docs/systemd").join(unit).display()
        ));
    }
    nspawn.arg(format!(
        "--bind-ro={}:/etc/systemd/system/skillprof-boot-check.service",
        check.join("skillprof-boot-check.service").display()
    ));
    nspawn.args(extra);
    nspawn.arg("systemd.wants=skillprof-boot-check.service");
    for unit in units {
        nspawn.arg(format!("systemd.wants={unit}"));
    }
    nspawn
}

/// The check's result, once the container has ended, which it must have run to the end.
fn finished(check: &Path, output: &std::process::Output) -> String {
    let result = fs::read_to_string(check.join("result")).unwrap_or_default();
    assert!(
        output.status.success() && result.ends_with("done\n"),
        "the container did not run its check to the end ({}):\n{result}\n{}",
        output.status,
        common::cli::describe(output)
    );
    result
}

/// [`booting`] skillhost.service alone, on a network of the container's own (so that its
/// port is nobody else's), to the end.
fn boot(check: &Path, units: &[&str]) -> String {
    let extra = ["--private-network".to_owned()];
    let output = booting(check, units, "check.sh", &extra)
        .output()
        .expect("systemd-nspawn (systemd-container)");
    finished(check, &output)
}

/// The line of `result` that begins with `key: `, without it.
fn said<'a>(result: &'a str, key: &str) -> &'a str {
    result
        .lines()
        .find_map(|line| line.strip_prefix(key)?.strip_prefix(": "))
        .unwrap_or_else(|| panic!("no {key} in the check's result:\n{result}"))
}

/// On a fresh system, skillhost.service comes up with an empty skills directory, as its own
/// dynamic user, answers, is enabled by its [Install] section, restarts into a new process
/// when told, and leaves no process behind when stopped.
#[test]
fn skillhost_service_boots_on_a_fresh_system_restarts_and_stops_clean() {
    common::require_root("systemd-nspawn boots a container");
    let check = tempfile::tempdir().unwrap();
    let result = boot(check.path(), &["skillhost.service"]);
    assert_eq!(said(&result, "enable"), "enabled", "{result}");
    assert_eq!(said(&result, "health"), "HTTP/1.0 200 OK", "{result}");
    assert_eq!(said(&result, "active"), "active", "{result}");
    // A unit in a restart loop is active between two deaths: the count shows it.
    assert_eq!(said(&result, "restarts"), "0", "{result}");
    assert_eq!(said(&result, "skills dir"), "directory", "{result}");
    // DynamicUser= allocates from 61184-65519; root would be 0.
    let uid: u32 = said(&result, "uid").parse().expect("a uid");
    assert!((61184..=65519).contains(&uid), "{result}");
    assert_eq!(said(&result, "health after restart"), "HTTP/1.0 200 OK");
    assert_eq!(said(&result, "restarted"), "a new process", "{result}");
    assert_eq!(
        said(&result, "after stop"),
        "inactive, main pid 0",
        "{result}"
    );
    assert_eq!(said(&result, "left"), "none", "{result}");
    assert!(
        said(&result, "journal").contains("drained in"),
        "SIGTERM drains the host: {result}"
    );
}

/// A container where skillprof may probe (every capability, `bpf` and `perf_event_open` let
/// through its seccomp filter, tracefs bound in), running `command` with `binds` (paths
/// bound read-write at the same place) for at most `seconds`.
fn probing_container(seconds: u32, binds: &[&Path], command: &[&std::ffi::OsStr]) -> Command {
    fs::create_dir_all("/run/systemd/nspawn/propagate").unwrap();
    let mut nspawn = Command::new("timeout");
    nspawn
        .args(["--kill-after=10", &seconds.to_string(), "systemd-nspawn"])
        .args(["--quiet", "--register=no", "--keep-unit", "--console=pipe"])
        .args(["--volatile=overlay", "--capability=all"])
        .args([
            "--system-call-filter=bpf perf_event_open",
            "--bind=/sys/kernel/tracing",
        ]);
    for bind in binds {
        nspawn.arg(format!("--bind={}", bind.display()));
    }
    nspawn.arg("-D").arg(units_root()).args(command);
    nspawn
}

/// Inside a container (its own PID namespace, every capability, `bpf` and `perf_event_open`
/// let through its seccomp filter, tracefs bound in), `skillprof probes` counts the 16 mmap
/// calls it makes itself: the programs read each task's ids as skillprof's namespace numbers
/// them. Before, they compared the kernel's ids with the container's, and counted none.
#[test]
fn inside_a_pid_namespace_the_probes_count_skillprofs_own_calls() {
    common::require_root("systemd-nspawn runs a container, and the probes load BPF");
    let skillprof = Path::new(env!("CARGO_BIN_EXE_skillprof"));
    let output = probing_container(
        60,
        &[skillprof.parent().unwrap()],
        &[skillprof.as_os_str(), "probes".as_ref()],
    )
    .output()
    .expect("systemd-nspawn (systemd-container)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        common::cli::describe(&output)
    );
    // In its own namespace skillprof is PID 1; more calls than its own 16 may fall in the
    // second (its threads' own mmaps), fewer may not.
    let line = stdout
        .lines()
        .find(|line| line.starts_with("mmap calls by pid 1 (skillprof itself, which made 16"))
        .unwrap_or_else(|| panic!("no self-check line: {}", common::cli::describe(&output)));
    let counted: u64 = line
        .split(" in 1 s: ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|number| number.parse().ok())
        .unwrap_or_else(|| panic!("no count in {line:?}"));
    assert!(counted >= 16, "{line}");
}

/// Inside a PID namespace, `skillprof run` times its host off the CPU: the scheduler's
/// tracepoints carry the kernel's ids, which the programs learn for the host from its first
/// switch out. Before, every switch out was counted and no interval ever ended: 0 ms asleep.
/// Twenty requests that each sleep 20 ms keep the host's threads asleep most of 400 ms.
#[test]
fn inside_a_pid_namespace_a_run_times_its_host_off_the_cpu() {
    common::require_root("systemd-nspawn runs a container, and the probes load BPF");
    let _machine = common::machine();
    let dir = tempfile::tempdir().unwrap();
    let cmds = common::cli::write_cmds(
        dir.path(),
        "sleeping.cmds",
        "add_rs\n20 execute_skill sample_rs1 Alice 100 20\n",
    );
    // The built binaries, the sample skills and the BPF object sit where the build put them;
    // bound at the same paths, skillprof finds them inside as outside.
    let repository = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap();
    let skillprof = Path::new(env!("CARGO_BIN_EXE_skillprof"));
    let out = dir.path().join("runs");
    let output = probing_container(
        150,
        &[&repository, skillprof.parent().unwrap(), dir.path()],
        &[
            skillprof.as_os_str(),
            "run".as_ref(),
            cmds.as_os_str(),
            "--out".as_ref(),
            out.as_os_str(),
        ],
    )
    .output()
    .expect("systemd-nspawn (systemd-container)");
    assert!(
        output.status.success(),
        "{}",
        common::cli::describe(&output)
    );
    let folder = common::cli::run_folder(&out);
    let rows = common::cli::csv_rows(&folder.join("commands.csv"));
    let sleeping = rows
        .iter()
        .find(|row| common::cli::cell::<String>(row, "cmd").starts_with("20 execute_skill"))
        .map(|row| common::cli::cell::<f64>(row, "offcpu_sleeping_ms"))
        .unwrap();
    assert!(
        sleeping >= 300.0,
        "asleep {sleeping} ms of the 20 requests' 400"
    );
}

/// From the machine's own namespaces, `skillprof run --attach` profiles a host that runs in
/// a container: the host's binary is read through /proc/PID/exe (its path is the
/// container's), and each request is attributed to its skill through the host's ledger.
#[test]
fn attached_from_outside_a_host_in_a_container_is_profiled_per_skill() {
    common::require_root("systemd-nspawn runs a container, and the probes load BPF");
    let _machine = common::machine();
    fs::create_dir_all("/run/systemd/nspawn/propagate").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (skills, port) = common::outside_host::skills_and_port(dir.path(), "sample_rs", "weather");
    let skillhost = Path::new(env!("CARGO_BIN_EXE_skillprof")).with_file_name("skillhost");
    let mut container = Command::new("systemd-nspawn")
        .args(["--quiet", "--register=no", "--keep-unit", "--console=pipe"])
        .args(["--volatile=overlay", "-D"])
        .arg(units_root())
        .arg(format!("--bind-ro={}:/skills", skills.display()))
        .arg(format!(
            "--bind-ro={}:/usr/local/bin/skillhost",
            skillhost.display()
        ))
        .args([
            "/usr/local/bin/skillhost",
            "--skills-dir",
            "/skills",
            "--port",
        ])
        .arg(port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("systemd-nspawn (systemd-container)");
    let pid = container_host(container.id());
    let cmds = common::cli::write_cmds(
        dir.path(),
        "attach.cmds",
        "p_execute 20 weather {\"topic\": \"rain\", \"memory\": 256}\n",
    );
    let output = common::cli::run(
        &cmds,
        &dir.path().join("runs"),
        &[
            "--attach",
            &pid.to_string(),
            "--host-url",
            &format!("http://127.0.0.1:{port}"),
        ],
    );
    // SIGTERM to systemd-nspawn stops the container and its host.
    let _ = Command::new("kill")
        .arg(container.id().to_string())
        .status();
    let _ = container.wait();
    assert!(
        output.status.success(),
        "{}",
        common::cli::describe(&output)
    );
    let folder = common::cli::run_folder(&dir.path().join("runs"));
    let skills_csv = fs::read_to_string(folder.join("skills.csv")).unwrap();
    let mut rows = csv::Reader::from_reader(skills_csv.as_bytes());
    let header = rows.headers().unwrap().clone();
    let column = |name: &str| header.iter().position(|h| h == name).unwrap();
    let (skill, phase, runs) = (column("skill"), column("phase"), column("runs"));
    let calls: Vec<String> = rows
        .records()
        .map(Result::unwrap)
        .filter(|row| &row[skill] == "weather" && &row[phase] == "call")
        .map(|row| row[runs].to_owned())
        .collect();
    assert_eq!(calls, ["20"], "{skills_csv}");
}

/// The kernel's PID of the host the container started as its PID 1, once it answers.
fn container_host(nspawn: u32) -> u32 {
    for _ in 0..100 {
        for entry in fs::read_dir("/proc").unwrap().flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            let ns_pid = status.lines().find_map(|line| line.strip_prefix("NSpid:"));
            if status.lines().next() == Some("Name:\tskillhost")
                && descends_from(pid, nspawn)
                && ns_pid.is_some_and(|ids| ids.split_whitespace().nth(1) == Some("1"))
            {
                // Listed once the skill is: the host has read its directory.
                std::thread::sleep(std::time::Duration::from_secs(2));
                return pid;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("no skillhost started by systemd-nspawn {nspawn} within 10 s");
}

/// Whether `ancestor` is `pid`'s parent, or its parent's, and so on.
fn descends_from(pid: u32, ancestor: u32) -> bool {
    let mut current = pid;
    while current > 1 {
        let status = fs::read_to_string(format!("/proc/{current}/status")).unwrap_or_default();
        let Some(parent) = status
            .lines()
            .find_map(|line| line.strip_prefix("PPid:"))
            .and_then(|parent| parent.trim().parse().ok())
        else {
            return false;
        };
        if parent == ancestor {
            return true;
        }
        current = parent;
    }
    false
}

/// skillprof-watch.service booted beside skillhost.service, with its web configuration,
/// certificate and key loaded as credentials: it attaches as its dynamic user holding exactly
/// its five capabilities, serves over TLS with basic auth (a real Prometheus on the machine
/// scrapes it, and a wrong password gets 401), follows `systemctl restart skillhost` to the new process, and leaves
/// nothing behind when both stop.
#[test]
fn the_watch_unit_boots_serves_over_tls_and_follows_a_restarted_host() {
    common::require_root("systemd-nspawn boots a container, and the watch loads BPF");
    let _machine = common::machine();
    let check = tempfile::tempdir().unwrap();
    let etc = tempfile::tempdir().unwrap();
    common::tls::certificates(etc.path());
    let password = "boot-s3cret";
    let hash = bcrypt::hash(password, 6).unwrap();
    fs::write(
        etc.path().join("web.yml"),
        format!(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n\
             basic_auth_users:\n  prometheus: {hash}\n"
        ),
    )
    .unwrap();
    // The watch unit serves on 0.0.0.0:9477 and the host on 8081, as shipped: the container
    // shares the machine's network, so that the machine scrapes it.
    let extra = [
        "--capability=all".to_owned(),
        "--system-call-filter=bpf perf_event_open".to_owned(),
        "--bind=/sys/kernel/tracing".to_owned(),
        format!("--bind-ro={}:/etc/skillprof", etc.path().display()),
        format!(
            "--bind-ro={}:/usr/local/bin/skillprof",
            env!("CARGO_BIN_EXE_skillprof")
        ),
    ];
    let container = booting(
        check.path(),
        &["skillhost.service", "skillprof-watch.service"],
        "watch-check.sh",
        &extra,
    )
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .expect("systemd-nspawn (systemd-container)");
    let ready = (0..300).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(200));
        fs::read_to_string(check.path().join("result")).is_ok_and(|r| r.contains("ready\n"))
    });
    // A real Prometheus on the machine scrapes the watch in the container, with the right
    // password and a wrong one.
    let job = |name: &str, password: &str| {
        format!(
            "  - job_name: {name}\n    scheme: https\n    tls_config:\n      ca_file: {}\n    \
             basic_auth:\n      username: prometheus\n      password: {password}\n    \
             static_configs:\n      - targets: ['127.0.0.1:9477']\n",
            etc.path().join("ca.crt").display()
        )
    };
    let (_prometheus, prometheus) = prometheus::start_prometheus_with(
        check.path(),
        &format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n{}{}",
            job("right", password),
            job("wrong", "guess")
        ),
    );
    let scraped = ready
        && (0..300).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(200));
            let seen = prometheus::targets(prometheus);
            seen.len() == 2 && seen.iter().all(|(_, health, _)| health != "unknown")
        });
    let seen = prometheus::targets(prometheus);
    let stored = prometheus::query(
        prometheus,
        r#"count({__name__=~"skillprof_.+",job="right"})"#,
    );
    fs::write(check.path().join("scraped"), "").unwrap();
    let output = container.wait_with_output().unwrap();
    let result = finished(check.path(), &output);
    assert!(ready, "the watch never served: {result}");
    assert!(
        scraped,
        "Prometheus never scraped the watch: {seen:?} {result}"
    );
    let target = |job: &str| seen.iter().find(|(name, _, _)| name == job).unwrap();
    assert_eq!(target("right").1, "up", "{seen:?}");
    assert!(target("wrong").2.contains("401"), "{seen:?}");
    assert!(
        stored.first().is_some_and(|(_, count)| *count > 0.0),
        "Prometheus stored no skillprof series: {stored:?}"
    );
    assert_eq!(said(&result, "watch"), "active", "{result}");
    assert_eq!(said(&result, "restarts"), "0", "{result}");
    let uid: u32 = said(&result, "uid").parse().expect("a uid");
    assert!((61184..=65519).contains(&uid), "{result}");
    // CAP_DAC_READ_SEARCH (2), CAP_SYS_PTRACE (19), CAP_PERFMON (38), CAP_BPF (39) and
    // CAP_CHECKPOINT_RESTORE (40), and no other.
    assert_eq!(said(&result, "caps"), "000001c000080004", "{result}");
    let after = said(&result, "host after");
    assert!(
        said(&result, "followed").starts_with(&format!("following the host: {after} took "))
            && said(&result, "host before") != after,
        "{result}"
    );
    assert_eq!(
        said(&result, "watch after"),
        "active, the same process",
        "{result}"
    );
    assert_eq!(said(&result, "left"), "none", "{result}");
}
