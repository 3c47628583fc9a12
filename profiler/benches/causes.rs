//! Explanations scored against causes injected into real steps of `skillprof slo`: one
//! experiment per skill and rate, six fixed-rate steps, each with a known cause or none:
//!
//! 1. none;
//! 2. the host stopped (SIGSTOP, then SIGCONT) for --short-ms, mid-step;
//! 3. the same for --long-ms;
//! 4. a busy loop pinned to the host's CPU for the whole step (a CPU competitor);
//! 5. none;
//! 6. the host moved into a CPU cgroup of the bench's whose quota is half the CPU it used in
//!    step 2 (at least 1 ms a 100 ms period), for the whole step. Last: a host held to half
//!    the CPU it needs falls behind, and what it still owes spills into the step after.
//!
//! A stall scores when the step's explanation names it first and its length is within 20% of
//! the injected one; a competitor when the explanation begins with the host's wait for a CPU
//! and names the busy loop, by its pid, first among what used the CPUs; a quota when it begins
//! "throttled" and the quota it gives is within 20% of the one set, where the cgroup's
//! cpu.stat counted it holding the host back in a twentieth of its periods or more (else as a
//! clean step); a clean step when no cause is named (the explanation begins "not CPU-bound").
//! Prints a row per step and the score.
//!
//!     cargo bench -p skillprof --bench causes [-- --skills hello,rust,python,wstd,cpy,js --rates 10,30,100]
//!
//! About 40 s an experiment on a 2-core machine (the Python sample's compile included). Needs
//! root (slo's probes) and a release build of skillprof and skillhost.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Parser;
use skillprof::producers::sample::cpu_quota;
use skillprof::record::sampling::CpuQuota;

mod common;
use common::{flags, skillprof_binary};

#[derive(Parser)]
struct Options {
    /// slo's sample skills (`--skill`: hello, rust, python) and the public components
    /// scripts/build-public-skills.sh builds (wstd: wstd's Rust http_server example; cpy:
    /// componentize-py's http example; js: our JavaScript echo, componentized by
    /// componentize-js).
    #[arg(long, value_delimiter = ',', default_value = "hello,rust,python")]
    skills: Vec<String>,
    /// The rates, requests a second: one experiment each.
    #[arg(long, value_delimiter = ',', default_value = "10,30,100")]
    rates: Vec<u32>,
    /// The short stall, ms.
    #[arg(long, default_value_t = 300)]
    short_ms: u64,
    /// The long stall, ms.
    #[arg(long, default_value_t = 1500)]
    long_ms: u64,
    /// Keep each experiment's folder (SKILL-RATE) under this one, to read its steps.
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Seconds of each step (its first fifth warms up); a stall begins this far into it.
const STEP_S: u64 = 5;
const STALL_AT: Duration = Duration::from_millis(2200);

#[derive(Clone, Copy, Debug)]
enum Cause {
    None,
    Stall(u64),
    /// A busy loop, with its pid once the step has ended.
    Competitor(Option<u32>),
    /// A CPU quota, with what its cgroup counted once the step has ended.
    Quota(Option<CpuQuota>),
}

impl Cause {
    fn name(self) -> String {
        match self {
            Cause::None => "none".into(),
            Cause::Stall(ms) => format!("stall {ms} ms"),
            Cause::Competitor(_) => "CPU competitor".into(),
            Cause::Quota(Some(quota)) => format!(
                "quota {:.3} CPU, {}/{} held",
                quota.quota_cpus.unwrap_or(0.0),
                quota.throttled_periods,
                quota.periods
            ),
            Cause::Quota(None) => "quota".into(),
        }
    }

    /// Whether `said` (a step's explanation) names this cause first, at its size.
    fn scores(self, said: &str) -> bool {
        match self {
            Cause::None => said.starts_with("not CPU-bound"),
            Cause::Stall(ms) => {
                said.starts_with("stalled:")
                    && stall_ms(said).is_some_and(|seen| (seen / ms as f64 - 1.0).abs() <= 0.2)
            }
            Cause::Competitor(pid) => {
                said.starts_with("waiting for a CPU")
                    && pid.is_some_and(|pid| {
                        said.contains(&format!("while these used the CPUs: sh (pid {pid},"))
                    })
            }
            Cause::Quota(Some(quota)) if quota.held_back() => {
                let cpus = quota.quota_cpus.unwrap_or(0.0);
                said.starts_with("throttled")
                    && quota_cpus(said).is_some_and(|seen| (seen / cpus - 1.0).abs() <= 0.2)
            }
            Cause::Quota(_) => Cause::None.scores(said),
        }
    }
}

/// The pause as the explanation says it: how long the host ran nothing where the time
/// profile saw that ("ran nothing for its first 1,510 ms"), else the stall's whole length
/// ("..., 1,010 ms long").
fn stall_ms(said: &str) -> Option<f64> {
    let said = &said[..said.find("; besides the stall")?];
    let length = match said.split_once("ran nothing for its first ") {
        Some((_, quiet)) => quiet.split(" (").next()?,
        None => said[..said.find(" long (")?].rsplit_once(", ")?.1,
    };
    let (number, unit) = length.split_once(' ')?;
    let value: f64 = number.replace(',', "").parse().ok()?;
    Some(match unit {
        "s" => value * 1e3,
        _ => value,
    })
}

/// The quota as the explanation says it: "...'s CPU quota (0.045 of a CPU)".
fn quota_cpus(said: &str) -> Option<f64> {
    let quota = said.split_once("CPU quota (")?.1;
    quota.split(' ').next()?.parse().ok()
}

const STEPS: [fn(&Options) -> Cause; 6] = [
    |_| Cause::None,
    |o| Cause::Stall(o.short_ms),
    |o| Cause::Stall(o.long_ms),
    |_| Cause::Competitor(None),
    |_| Cause::None,
    |_| Cause::Quota(None),
];

fn main() -> Result<()> {
    let options: Options = flags();
    let skillprof = skillprof_binary()?;
    let dir = tempfile::tempdir()?;
    let under = options.out.clone().unwrap_or_else(|| dir.path().to_owned());
    println!(
        "causes injected into slo steps ({STEP_S} s each, 1 CPU for the host) on this {}-CPU \
         machine",
        thread::available_parallelism()?.get()
    );
    println!("skill   rate  step  injected         scored  explanation (its first 110 characters)");
    let (mut scored, mut cells) = (0, 0);
    for skill in &options.skills {
        for &rate in &options.rates {
            let folder = under.join(format!("{skill}-{rate}"));
            let said = experiment(&skillprof, &options, skill, rate, &folder)
                .with_context(|| format!("{skill} at {rate}/s"))?;
            for (index, (cause, said)) in said.iter().enumerate() {
                let ok = cause.scores(said);
                scored += usize::from(ok);
                cells += 1;
                println!(
                    "{skill:<7} {rate:>4}  {:>4}  {:<16} {:<6}  {}",
                    index + 1,
                    cause.name(),
                    if ok { "yes" } else { "MISS" },
                    said.chars().take(110).collect::<String>()
                );
            }
        }
    }
    println!(
        "scored {scored} of {cells} cells ({:.0}%)",
        100.0 * scored as f64 / cells.max(1) as f64
    );
    Ok(())
}

/// One experiment: each step's injected cause and its explanation.
fn experiment(
    skillprof: &Path,
    options: &Options,
    skill: &str,
    rate: u32,
    folder: &Path,
) -> Result<Vec<(Cause, String)>> {
    let rates = vec![rate.to_string(); STEPS.len()].join(",");
    let mut slo = Command::new(skillprof);
    slo.args(["slo", "--target", "p99<=50ms", "--cpus", "1"])
        .args(["--rps", &rates, "--step-s", &STEP_S.to_string()])
        .arg("--run-dir")
        .arg(folder);
    match public_component(skill) {
        Some((file, input, path)) => {
            let wasm = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../build/public")
                .join(file);
            anyhow::ensure!(
                wasm.exists(),
                "{} is not built: scripts/build-public-skills.sh builds it",
                wasm.display()
            );
            slo.arg("--component").arg(wasm).args(["--input", input]);
            if let Some(path) = path {
                slo.args(["--", "--http-path", path]);
            }
        }
        None => {
            slo.args(["--skill", skill])
                .args(["--memory-kb", if skill == "hello" { "0" } else { "1024" }]);
        }
    }
    let mut slo = slo.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
    let (lines, seen) = mpsc::channel();
    for pipe in [
        Box::new(slo.stdout.take().context("stdout")?) as Box<dyn std::io::Read + Send>,
        Box::new(slo.stderr.take().context("stderr")?),
    ] {
        let lines = lines.clone();
        thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let _ = lines.send(line);
            }
        });
    }
    drop(lines);
    let mut host: Option<(u32, String)> = None;
    let mut said: Vec<(Cause, String)> = Vec::new();
    let mut log = Vec::new();
    let mut competitor: Option<Child> = None;
    let mut quota: Option<Quota> = None;
    // The host's CPU time at the end of each step (clock ticks), for the quota's size.
    let mut cpu_at: Vec<u64> = Vec::new();
    let wait = Duration::from_secs(120);
    while said.len() < STEPS.len() {
        let Ok(line) = seen.recv_timeout(wait) else {
            let _ = slo.kill();
            bail!("slo stopped before its steps ended:\n{}", log.join("\n"));
        };
        log.push(line.clone());
        if let Some(rest) = line.split(" host pid ").nth(1) {
            let mut words = rest.split_whitespace();
            let pid = words.next().context("pid")?.parse()?;
            let cpus = words
                .nth(2)
                .context("CPU")?
                .trim_end_matches(',')
                .to_owned();
            host = Some((pid, cpus));
            continue;
        }
        let Some(explanation) = explanation(&line, rate) else {
            continue;
        };
        let competed = match competitor.take() {
            Some(mut busy) => {
                busy.kill()?;
                busy.wait()?;
                Some(busy.id())
            }
            None => None,
        };
        let (pid, cpus) = host.clone().context("slo never said the host's pid")?;
        cpu_at.push(host_cpu_ticks(pid)?);
        let cause = match (quota.take(), competed) {
            (Some(quota), _) => Cause::Quota(Some(quota.end()?)),
            (None, Some(busy)) => Cause::Competitor(Some(busy)),
            (None, None) => STEPS[said.len()](options),
        };
        said.push((cause, explanation));
        // The next step begins now: inject its cause.
        let Some(next) = STEPS.get(said.len()) else {
            break;
        };
        match next(options) {
            Cause::None => {}
            Cause::Stall(ms) => {
                thread::sleep(STALL_AT);
                signal(pid, "STOP")?;
                thread::sleep(Duration::from_millis(ms));
                signal(pid, "CONT")?;
            }
            Cause::Competitor(_) => {
                competitor = Some(
                    Command::new("taskset")
                        .args(["-c", &cpus, "sh", "-c", "while :; do :; done"])
                        .spawn()?,
                )
            }
            Cause::Quota(_) => {
                // Half of what the host used in the second step (a stall delays requests but
                // leaves their work the same), a step being about STEP_S long.
                let ticks = (cpu_at[1] - cpu_at[0]) as f64 / procfs::ticks_per_second() as f64;
                let share = ticks / STEP_S as f64;
                let quota_us = ((share * 0.5 * PERIOD_US as f64) as u64).max(1000);
                quota = Some(Quota::start(pid, quota_us)?);
            }
        }
    }
    slo.wait()?;
    Ok(said)
}

/// The host's CPU time since it started, clock ticks (/proc/PID/stat's utime + stime).
fn host_cpu_ticks(pid: u32) -> Result<u64> {
    let stat = procfs::process::Process::new(pid as i32)?.stat()?;
    Ok(stat.utime + stat.stime)
}

const PERIOD_US: u64 = 100_000;

/// The host held in a CPU cgroup of the bench's, with a quota, until [`Quota::end`] (or drop)
/// moves it back where it was and removes the cgroup.
struct Quota {
    pid: u32,
    quota_us: u64,
    dir: PathBuf,
    home: PathBuf,
}

impl Quota {
    fn start(pid: u32, quota_us: u64) -> Result<Quota> {
        let home = cpu_quota::cgroup_of(Path::new("/proc"), Path::new(cpu_quota::CGROUP), pid)
            .context("the host's CPU cgroup")?;
        let dir = home
            .root
            .join(format!("skillprof-causes-{}", std::process::id()));
        std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let quota = Quota {
            pid,
            quota_us,
            dir,
            home: home.dir,
        };
        match home.v2 {
            true => std::fs::write(quota.dir.join("cpu.max"), format!("{quota_us} {PERIOD_US}"))?,
            false => {
                std::fs::write(quota.dir.join("cpu.cfs_period_us"), PERIOD_US.to_string())?;
                std::fs::write(quota.dir.join("cpu.cfs_quota_us"), quota_us.to_string())?;
            }
        }
        std::fs::write(quota.dir.join("cgroup.procs"), pid.to_string())?;
        Ok(quota)
    }

    /// Moves the host back; the quota set, and what the cgroup counted since the bench
    /// made it.
    fn end(self) -> Result<CpuQuota> {
        let counted = cpu_quota::read(Path::new("/proc"), Path::new(cpu_quota::CGROUP), self.pid)
            .context("the quota's cpu.stat")?;
        Ok(CpuQuota {
            quota_cpus: Some(self.quota_us as f64 / PERIOD_US as f64),
            ..counted.since(&Default::default())
        })
    }
}

impl Drop for Quota {
    fn drop(&mut self) {
        let _ = std::fs::write(self.home.join("cgroup.procs"), self.pid.to_string());
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// The explanation of a step's line (`... table 30/s: p99 ..., met (EXPLANATION)`).
fn explanation(line: &str, rate: u32) -> Option<String> {
    let rest = line.split(&format!(" table {rate}/s: ")).nth(1)?;
    let open = rest.find(" (")?;
    Some(rest[open + 2..].trim_end_matches(')').to_owned())
}

/// A public component's file under build/public, its input, and the path its handler
/// answers where not `/`; `None` for slo's own samples.
fn public_component(skill: &str) -> Option<(&'static str, &'static str, Option<&'static str>)> {
    match skill {
        "wstd" => Some(("wstd_http_server.wasm", "\"hello\"", None)),
        "cpy" => Some(("cpy_http_echo.wasm", r#"{"topic": "rain"}"#, Some("/echo"))),
        "js" => Some(("js_http_echo.wasm", r#"{"topic": "rain"}"#, Some("/echo"))),
        _ => None,
    }
}

fn signal(pid: u32, which: &str) -> Result<()> {
    let status = Command::new("kill")
        .args([&format!("-{which}"), &pid.to_string()])
        .status()?;
    anyhow::ensure!(status.success(), "kill -{which} {pid}: {status}");
    Ok(())
}
