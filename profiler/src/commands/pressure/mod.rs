//! `skillprof pressure`: sets the machine up (sysctl, swap file, CPUs), runs the experiment
//! (`pressure::experiment`), puts everything back, and leaves the run folder: pressure.csv,
//! pressure_samples.csv, free_vs_watermarks.svg and meta.json. The command is not a
//! measurement: it may write files and reports, which the measuring modules must not.

mod args;
pub mod experiment;
mod iterations;
pub mod kernel;
pub mod kswapd;
pub mod meta;
mod signals;
mod table;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use chrono::Local;

pub use args::PressureArgs;

use crate::commands::pressure::kswapd::Kswapd;
use crate::commands::report::watermarks;
use crate::ground::band::Band;
use crate::ground::machine::Machine;
use crate::ground::units;
use crate::producers::balloon::aim;
use crate::producers::balloon::hold::{HoldOptions, HoldSample};
use crate::producers::balloon::page_cache::{self, PageCache};
use crate::producers::balloon::process::Balloon;
use crate::producers::balloon::safety::Safety;
use crate::producers::probes::{ProbeOptions, ProbeSession};
use crate::producers::sample::PROC;
use crate::producers::sample::reach;
use crate::producers::system::swapfile::Swapfile;
use crate::producers::system::sysctl::{self, BOOST_FACTOR, SCALE_FACTOR, SysctlChange};
use crate::record::balloon::Basis;
use crate::record::{Metrics, Row};
use crate::views::output::commands_csv::CommandsCsv;
use crate::views::output::harness_log;
use crate::views::output::json_stdout::{self, JsonStdout};
use crate::views::output::pressure_csv::PressureCsv;
use experiment::{BandResult, Instruments, Outcome, Plan};
use meta::{
    BandSummary, PageCacheInfo, PressureInfo, PressureStatus, ProbesInfo, SwapInfo, SysctlSetting,
};
use procfs::page_size;

/// The largest default iteration block: wide bands (--scale-factor) would otherwise make one
/// iteration take most of a second.
const MAX_DEFAULT_BLOCK: u64 = 64 << 20;
/// How often the balloon's controller reads free memory.
const INTERVAL: Duration = Duration::from_millis(50);
/// The longest a run waits for stalls from before it to pass.
const CALM_TIMEOUT: Duration = Duration::from_secs(120);

/// meta.json and where it goes: saved whenever something a reader of a crashed run would
/// need changes (the helper processes, the end).
struct Meta {
    path: PathBuf,
    info: PressureInfo,
}

impl Meta {
    fn save(&self) -> Result<()> {
        crate::views::output::meta::write(&self.path, &self.info)
    }
}

pub fn run(args: PressureArgs) -> Result<ExitCode> {
    if !crate::producers::system::running_as_root() {
        bail!(
            "skillprof pressure needs root: it drives the machine to low memory, sets \
             {SCALE_FACTOR} and enables swap files. Run it as root, e.g. `sudo skillprof \
             pressure --quick`"
        );
    }
    let json = args.json.then(JsonStdout::claim).transpose()?;
    signals::install()?;
    if let Some(cpus) = &args.cpus {
        crate::ground::units::pin(cpus)?;
    }
    let stamp = harness_log::stamp(Local::now());
    let folder = args.out.join(format!("pressure-{stamp}"));
    fs::create_dir_all(&folder)
        .with_context(|| format!("creating the run folder {}", folder.display()))?;
    let info = PressureInfo {
        skillprof_version: env!("CARGO_PKG_VERSION").to_owned(),
        kind: meta::KIND.to_owned(),
        run: stamp,
        started: Local::now().to_rfc3339(),
        finished: None,
        status: PressureStatus::Running,
        reason: None,
        command: std::env::args().collect(),
        machine: Machine::read()?,
        bands_defined_on: match args.band_mode {
            Basis::PerZone => {
                "each zone that can serve user memory: its free pages above its lowmem \
                 reserve (protection against Movable) against its own watermarks; a band is \
                 held when every such zone is in it"
                    .to_owned()
            }
            Basis::Summed => {
                "free pages above each zone's lowmem reserve (protection against Movable), \
                 and those zones' watermarks, summed over the zones that can serve user memory"
                    .to_owned()
            }
        },
        levels: args
            .levels()
            .iter()
            .map(|band| band.name().to_owned())
            .collect(),
        iterations: args.iterations(),
        block_bytes: None,
        margin_percent: args.margin_percent,
        psi_full_max: args.psi_full_max,
        watermark_scale_factor: SysctlSetting {
            before: sysctl::read(SCALE_FACTOR)?,
            during: args.scale_factor,
        },
        watermark_boost_factor: sysctl::read(BOOST_FACTOR).ok().map(|before| SysctlSetting {
            before,
            during: args.boost_factor,
        }),
        min_free_kbytes: sysctl::read("vm.min_free_kbytes")?,
        swapfile: None,
        page_cache: None,
        cpus: args.cpus.clone(),
        probes: ProbesInfo::default(),
        balloon_pid: None,
        guardian_pids: Vec::new(),
        bands: Vec::new(),
    };
    let mut meta = Meta {
        path: folder.join(crate::views::output::meta::FILE),
        info,
    };
    meta.save()?;
    println!("skillprof pressure: writing {}", folder.display());

    let outcome = set_up_and_run(&args, &folder, &mut meta);
    let info = &mut meta.info;
    info.finished = Some(Local::now().to_rfc3339());
    let code = match &outcome {
        Ok(results) => {
            let (status, reason, code) = verdict(results);
            info.status = status;
            info.reason = reason;
            code
        }
        Err(error) => {
            info.status = PressureStatus::Failed;
            info.reason = Some(format!("{error:#}"));
            ExitCode::FAILURE
        }
    };
    meta.save()?;
    if let Some(json) = json {
        let bands = outcome.iter().flatten().map(|result| {
            let mut row = Row::default();
            result.write(&mut row);
            json_stdout::row_object(&row)
        });
        json.write(&serde_json::json!({
            "run_dir": folder,
            "meta": meta.info,
            "bands": bands.collect::<Vec<_>>(),
        }))?;
    }
    outcome?;
    Ok(code)
}

/// Stalls left from before the run, an earlier pressure run's among them (PSI's avg10 takes
/// tens of seconds to decay), would abort the first band at once, baseline included. So
/// nothing is changed until `full` avg10 is down to half the limit; past `timeout`, the run
/// is refused: something else on the machine is short of memory, and a balloon would only
/// worsen it. Returns how long it waited.
fn wait_until_calm(
    mut full_avg10: impl FnMut() -> Result<Option<f64>>,
    limit: f64,
    timeout: Duration,
    pause: Duration,
) -> Result<Duration> {
    let (calm, started) = (limit / 2.0, Instant::now());
    let mut said = false;
    while let Some(full) = full_avg10()? {
        if full <= calm || signals::received().is_some() {
            if said {
                println!(
                    "memory stalls down to {full:.1}% after {} s",
                    started.elapsed().as_secs()
                );
            }
            break;
        }
        if started.elapsed() >= timeout {
            bail!(
                "memory stalls did not pass: PSI full avg10 is still {full:.1}% after {} s, over \
                 half the {limit}% limit (--psi-full-max). Something else on the machine is short \
                 of memory; a balloon would only make it worse",
                timeout.as_secs()
            );
        }
        if !said {
            println!(
                "memory stalls from before the run: PSI full avg10 {full:.1}%, over half the \
                 {limit}% limit; waiting up to {} s for them to pass before changing anything",
                timeout.as_secs()
            );
            said = true;
        }
        std::thread::sleep(pause);
    }
    Ok(started.elapsed())
}

/// The run's status, reason and exit code from its bands.
fn verdict(results: &[BandResult]) -> (PressureStatus, Option<String>, ExitCode) {
    let first_not_held = results.iter().find(|r| r.outcome != Outcome::Held);
    match first_not_held.map(|r| (r, &r.outcome)) {
        None => match signals::received() {
            // A signal before the first band, or between two.
            Some(signal) => (
                PressureStatus::Interrupted,
                Some(format!("skillprof received {}", signal.name())),
                ExitCode::from(signal.exit_code()),
            ),
            None => (PressureStatus::Complete, None, ExitCode::SUCCESS),
        },
        Some((result, Outcome::Interrupted(signal))) => (
            PressureStatus::Interrupted,
            Some(format!("{}: {}", result.band, result.outcome.reason())),
            ExitCode::from(signal.exit_code()),
        ),
        Some((result, outcome)) => (
            if matches!(outcome, Outcome::Aborted(_)) {
                PressureStatus::Aborted
            } else {
                PressureStatus::NotReached
            },
            Some(format!("{}: {}", result.band, outcome.reason())),
            ExitCode::FAILURE,
        ),
    }
}

/// Changes the machine (each change under a guardian), runs the experiment, and puts the
/// machine back, reporting the first failure.
fn set_up_and_run(args: &PressureArgs, folder: &Path, meta: &mut Meta) -> Result<Vec<BandResult>> {
    let psi_full =
        || Ok(crate::producers::sample::psi::read(Path::new(PROC))?.map(|psi| psi.full_avg10));
    wait_until_calm(
        psi_full,
        args.psi_full_max,
        CALM_TIMEOUT,
        Duration::from_secs(1),
    )?;
    let mut sysctls = Vec::new();
    for setting in sysctl::watermark_settings(args.scale_factor, args.boost_factor) {
        let Some(value) = setting.value else { continue };
        let change = SysctlChange::set(setting.sysctl, &value.to_string())?;
        println!(
            "{}: {} -> {value} for the experiment",
            setting.sysctl,
            change.original()
        );
        meta.info.guardian_pids.push(change.guardian_pid());
        meta.save()?;
        sysctls.push(change);
    }
    let swap = match args.swapfile {
        Some(bytes) => {
            let path = folder.join("skillprof.swap");
            println!(
                "swap file: writing {} MiB to {}",
                bytes >> 20,
                path.display()
            );
            let swap = Swapfile::enable(&path, bytes)?;
            meta.info.guardian_pids.push(swap.guardian_pid());
            meta.info.swapfile = Some(SwapInfo { path, bytes });
            meta.save()?;
            Some(swap)
        }
        None => None,
    };
    let cache = match args.page_cache {
        Some(bytes) => {
            let path = folder.join("skillprof.page-cache");
            println!(
                "page cache: writing {} MiB to {} and reading it every {} s",
                bytes >> 20,
                path.display(),
                page_cache::REREAD.as_secs()
            );
            let cache = PageCache::create(&path, bytes)?;
            meta.info.guardian_pids.extend(cache.guardian_pid());
            meta.info.page_cache = Some(PageCacheInfo {
                path,
                bytes,
                passes: 0,
            });
            meta.save()?;
            Some(cache)
        }
        None => None,
    };
    let results = run_experiment(args, folder, meta);
    let mut restored = Vec::new();
    if let Some(cache) = cache {
        let path = cache.path().to_path_buf();
        restored.push(cache.remove().map(|passes| {
            if let Some(info) = &mut meta.info.page_cache {
                info.passes = passes;
            }
            println!(
                "page-cache file {} deleted ({passes} passes read)",
                path.display()
            )
        }));
    }
    for change in sysctls {
        let (name, before) = (change.name(), change.original().to_owned());
        restored.push(
            change
                .restore()
                .map(|()| println!("{name} restored to {before}")),
        );
    }
    if let Some(swap) = swap {
        let path = swap.path().to_path_buf();
        restored.push(
            swap.disable()
                .map(|()| println!("swap file {} turned off and deleted", path.display())),
        );
    }
    let results = results?;
    restored.into_iter().collect::<Result<()>>()?;
    Ok(results)
}

fn run_experiment(args: &PressureArgs, folder: &Path, meta: &mut Meta) -> Result<Vec<BandResult>> {
    let info = &mut meta.info;
    let safety = Safety {
        margin_percent: args.margin_percent,
        psi_full_max: args.psi_full_max,
    };
    let levels = args.levels();
    let block_bytes = choose_block(args, &safety, &levels)?;
    info.block_bytes = Some(block_bytes);
    let probes = if args.no_probes {
        None
    } else {
        start_probes(levels.len(), &mut info.probes)
    };
    let kswapd = Kswapd::find()?;

    let started = Instant::now();
    let (samples, readings) = mpsc::channel();
    let samples_path = folder.join("pressure_samples.csv");
    let writer = write_samples(
        PressureCsv::create(&samples_path, started, page_size())?,
        readings,
    );
    let held = Balloon::hold(
        levels[0],
        HoldOptions {
            safety,
            basis: args.band_mode,
            interval: INTERVAL,
            samples: Some(samples),
        },
    )?;
    info.balloon_pid = Some(held.balloon_pid());
    meta.save()?;
    let info = &mut meta.info;

    let plan = Plan {
        levels,
        iterations: args.iterations(),
        block_bytes,
        settle_timeout: Duration::from_secs(args.settle_timeout_s()),
    };
    let mut csv = CommandsCsv::create(&folder.join("pressure.csv"))?;
    let mut results = Vec::new();
    let instruments = Instruments {
        probes: probes.as_ref(),
        kswapd: &kswapd,
    };
    let ran = experiment::run(&plan, &held, &instruments, &mut |result| {
        let mut row = Row::default();
        result.write(&mut row);
        csv.write(&row)?;
        println!("{}", summary_line(result));
        info.bands.push(BandSummary {
            band: result.band.name().to_owned(),
            outcome: result.outcome.name().to_owned(),
            reason: result.outcome.reason(),
        });
        results.push(result.clone());
        Ok(())
    });
    // The memory goes back before anything else is reported.
    let released = held.release();
    println!("balloon released");
    let written = writer
        .join()
        .unwrap_or_else(|_| bail!("the pressure_samples.csv writer panicked"));
    ran?;
    released?;
    written?;
    print!("\n{}", table::render_results(&results));
    if args.compare_2024 {
        print!("\n{}", table::compare_2024(&results));
    }
    let svg = folder.join("free_vs_watermarks.svg");
    watermarks::plot(&samples_path, &svg)?;
    println!("\nplot: {}", svg.display());
    Ok(results)
}

/// The iteration block: as asked, or a share of the narrowest band (see `aim`); refused if it
/// would take free memory out of a band.
fn choose_block(args: &PressureArgs, safety: &Safety, levels: &[Band]) -> Result<u64> {
    let reach = reach::read(Path::new(PROC))?;
    let marks = reach.watermarks;
    let held = aim::held_watermarks(args.band_mode, &reach);
    let page = page_size();
    let block_bytes = match args.block_size {
        Some(bytes) => bytes.div_ceil(page) * page,
        None => {
            let pages = aim::default_block_pages(&held, safety)?;
            (pages * page).clamp(page, MAX_DEFAULT_BLOCK)
        }
    };
    for &band in levels {
        aim::check_block(block_bytes / page, band, &held, safety)?;
    }
    println!(
        "bands now (MiB of free memory, summed as user memory reaches it): min {}, low {}, \
         high {}, promo {}; iterations of {} KiB",
        units::pages(marks.min),
        units::pages(marks.low),
        units::pages(marks.high),
        marks.promo.map_or("-".to_string(), units::pages),
        block_bytes >> 10
    );
    Ok(block_bytes)
}

/// The probes on this process, two entries per band (its settling, its iterations); without
/// them the kernel figures come from /proc, and the run says so.
fn start_probes(bands: usize, info: &mut ProbesInfo) -> Option<ProbeSession> {
    // The balloon is skillprof's own process, and the experiment times its every fault:
    // exact mode, as an experiment on this machine rather than a production host.
    let options = ProbeOptions {
        max_entries: 2 * bands as u32,
        mode: crate::record::probes::ProbeMode::Exact,
        ..ProbeOptions::default()
    };
    match ProbeSession::start(std::process::id(), &options) {
        Ok(session) => {
            info.loaded = true;
            info.statuses = session.statuses().to_vec();
            Some(session)
        }
        Err(error) => {
            println!("probes: not loaded ({error:#}); kernel figures come from /proc only");
            info.error = Some(format!("{error:#}"));
            None
        }
    }
}

/// Writes the controller's readings as they come, until the controller ends.
fn write_samples(
    mut csv: PressureCsv,
    readings: mpsc::Receiver<HoldSample>,
) -> JoinHandle<Result<()>> {
    std::thread::spawn(move || {
        for reading in readings {
            csv.write(&reading)?;
        }
        Ok(())
    })
}

fn summary_line(result: &BandResult) -> String {
    let held = &result.held;
    let times = result.times.map_or("no iterations".to_string(), |t| {
        format!(
            "{} iterations: median {:.3} ms, p99 {:.3} ms",
            t.count, t.median_ms, t.p99_ms
        )
    });
    let free = if held.reads == 0 {
        String::new()
    } else {
        format!(
            "; free held {}..{} in [{}, {}) ({:.0}% of readings)",
            units::pages(held.min_free_pages),
            units::pages(held.max_free_pages),
            units::pages(held.bounds.lower),
            held.bounds.upper.map_or("inf".to_string(), units::pages),
            held.in_band_percent()
        )
    };
    let reason = match &result.outcome {
        Outcome::Held => String::new(),
        outcome => format!(" ({})", outcome.reason()),
    };
    format!(
        "{}: {}{reason}; {times}{free}",
        result.band,
        result.outcome.name()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_waits_for_earlier_stalls_to_pass_and_refuses_if_they_do_not() {
        let mut readings = [30.0, 21.0, 12.0, 9.5, 40.0].into_iter();
        let waited = wait_until_calm(
            || Ok(readings.next()),
            20.0,
            Duration::from_secs(60),
            Duration::ZERO,
        );
        assert!(waited.is_ok());
        assert_eq!(
            readings.next(),
            Some(40.0),
            "it went on past a calm reading"
        );

        let stalled = wait_until_calm(|| Ok(Some(25.0)), 20.0, Duration::ZERO, Duration::ZERO)
            .unwrap_err()
            .to_string();
        assert!(
            stalled.starts_with("memory stalls did not pass: PSI full avg10 is still 25.0%"),
            "{stalled}"
        );
        // Without PSI there is nothing to wait for.
        assert!(wait_until_calm(|| Ok(None), 20.0, Duration::ZERO, Duration::ZERO).is_ok());
    }
}
