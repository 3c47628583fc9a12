//! `skillprof pressure` for real: a quick experiment, one whose balloon is stopped while it
//! grows, then the same killed mid-band by SIGINT, SIGTERM and SIGKILL, and a workload under
//! pressure. Every run must leave the machine as it found it: the sysctl restored,
//! no swap file active or present, no page-cache file, the balloon's memory back, no helper
//! process left.
//!
//! These tests need root (they change a sysctl and enable swap) and fail without it, never
//! skip. They run one at a time: two experiments would fight over the same free memory.

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

mod common;
use common::cli::{alive, cell, csv_rows, eventually, meta, run_folder, run_ok, skillprof};
use common::require_root;
use skillprof::commands::pressure::meta::{PressureInfo, PressureStatus};
use skillprof::record::Status;

const SCALE_FACTOR: &str = "/proc/sys/vm/watermark_scale_factor";
const BOOST_FACTOR: &str = "/proc/sys/vm/watermark_boost_factor";
/// What the balloon's memory may still be missing from MemAvailable afterwards: other
/// processes come and go on a CI machine too.
const MEMORY_TOLERANCE_KB: u64 = 1 << 20;

/// What these tests do that needs root.
const ROOT: &str = "the pressure tests change vm.watermark_scale_factor and enable swap";

fn mem_available_kb() -> u64 {
    skillprof::producers::sample::meminfo::read(Path::new("/proc"))
        .unwrap()
        .memavailable_kb
}

/// The machine before an experiment.
struct Before {
    scale_factor: String,
    boost_factor: String,
    mem_available_kb: u64,
}

fn before() -> Before {
    drop_page_cache();
    assert!(
        !swaps().contains("skillprof.swap"),
        "a skillprof swap file is already active:\n{}",
        swaps()
    );
    Before {
        scale_factor: fs::read_to_string(SCALE_FACTOR).unwrap(),
        boost_factor: fs::read_to_string(BOOST_FACTOR).unwrap(),
        mem_available_kb: mem_available_kb(),
    }
}

/// The bands are free memory, and a machine whose memory is page cache (CI after a clean
/// build: 1 GiB free of 24) reaches promo with a 0.3 GiB balloon, too quickly to stop it
/// growing, and keeps DMA32 under its floor: kswapd stops once Normal is above its high
/// watermark, so nothing lifts DMA32 and the per-zone balloon, empty, cannot. These tests need
/// the balloon to take GiBs, so each starts with the clean page cache dropped (only cache is
/// lost). A machine full of cache is the experiment's to report (see `hold::step`).
///
/// Dropped cache leaves Normal's free pages scattered in pageblocks of other migrate types:
/// the iterations' allocations steal such blocks, the kernel boosts the watermarks for it and
/// wakes kswapd, which reclaims past the band's top. In 2 of 3 quick experiments after a drop
/// kswapd woke 4 and 14 times in high (77% of readings in band); compacting after the drop,
/// 0 wakes in 4 of 4, as with vm.watermark_boost_factor=0 and no compaction (3 of 3).
/// docs/findings/2026-11-29-pressure-after-a-cache-drop.md has the runs.
fn drop_page_cache() {
    rustix::fs::sync();
    fs::write("/proc/sys/vm/drop_caches", "1").expect("dropping the page cache needs root");
    fs::write("/proc/sys/vm/compact_memory", "1").expect("compacting memory needs root");
}

fn swaps() -> String {
    fs::read_to_string("/proc/swaps").unwrap()
}

/// Everything skillprof changed is back, and nothing it started is left.
fn assert_machine_restored(before: &Before, folder: &Path, limit: Duration) {
    for (name, path, was) in [
        (
            "vm.watermark_scale_factor",
            SCALE_FACTOR,
            &before.scale_factor,
        ),
        (
            "vm.watermark_boost_factor",
            BOOST_FACTOR,
            &before.boost_factor,
        ),
    ] {
        eventually(limit, name, || {
            let now = fs::read_to_string(path).unwrap();
            (now != *was).then(|| format!("is {now:?}, was {was:?}"))
        });
    }
    let swap_file = folder.join("skillprof.swap");
    eventually(limit, "the swap file", || {
        let active = swaps();
        if active.contains("skillprof.swap") {
            Some(format!("still active:\n{active}"))
        } else if swap_file.exists() {
            Some(format!("{} is still there", swap_file.display()))
        } else {
            None
        }
    });
    let page_cache = folder.join("skillprof.page-cache");
    eventually(limit, "the page-cache file", || {
        page_cache
            .exists()
            .then(|| format!("{} is still there", page_cache.display()))
    });
    let helpers = helper_pids(folder);
    assert!(!helpers.is_empty(), "meta.json names no helper process");
    eventually(limit, "skillprof's helper processes", || {
        let left: Vec<_> = helpers.iter().filter(|&&pid| alive(pid.into())).collect();
        (!left.is_empty()).then(|| format!("still running: {left:?}"))
    });
    eventually(limit, "the balloon's memory", || {
        let now = mem_available_kb();
        (now + MEMORY_TOLERANCE_KB < before.mem_available_kb).then(|| {
            format!(
                "MemAvailable is {now} kB, {} kB before",
                before.mem_available_kb
            )
        })
    });
}

/// The processes skillprof forked for the run in `folder`: `skillprof pressure` names its one
/// balloon, `skillprof run` one per `pressure` hold; both their guardians.
fn helper_pids(folder: &Path) -> Vec<u32> {
    let is_experiment = folder
        .file_name()
        .is_some_and(|name| name.to_string_lossy().starts_with("pressure-"));
    if is_experiment {
        let meta = pressure_meta(folder);
        meta.guardian_pids
            .into_iter()
            .chain(meta.balloon_pid)
            .collect()
    } else {
        let meta = meta(folder);
        [meta.guardian_pids, meta.pressure_balloon_pids].concat()
    }
}

fn pressure_meta(folder: &Path) -> PressureInfo {
    skillprof::commands::pressure::meta::read(folder).unwrap()
}

/// The flags every experiment here uses: every change to the machine, so that every test
/// checks each comes back. The tests hold bands to check skillprof's hold and its restoring,
/// and the kernel's watermark boost moves every band by up to 150% of the high watermark
/// (docs/findings/2026-12-05-bands-moved-by-the-watermark-boost.md): on a machine whose free
/// memory lies in other migrate types' pageblocks (CI after a build), the balloon's own growth
/// set it off and a quick experiment held high for 86% of its readings; `--boost-factor 0`
/// keeps the bands where the configured watermarks put them.
const CHANGES: [&str; 8] = [
    "--scale-factor",
    "100",
    "--boost-factor",
    "0",
    "--swapfile",
    "256M",
    "--page-cache",
    "64M",
];

#[test]
fn refuses_to_run_without_root() {
    let out = tempfile::tempdir().unwrap();
    let output = skillprof()
        .args(["pressure", "--quick", "--out"])
        .arg(out.path())
        .uid(65534)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("needs root") && stderr.contains("sudo skillprof pressure"),
        "{stderr}"
    );
    assert_eq!(fs::read_dir(out.path()).unwrap().count(), 0);
}

/// Runs `skillprof pressure --quick` with the machine changes and `args`, one experiment at
/// a time, and checks that the machine was restored; the run folder lives as long as the
/// returned directory.
fn quick_experiment(args: &[&str]) -> (std::process::Output, PathBuf, tempfile::TempDir) {
    require_root(ROOT);
    let _machine = common::machine();
    let before = before();
    let out = tempfile::tempdir().unwrap();
    let output = skillprof()
        .args(["pressure", "--quick"])
        .args(args)
        .args(CHANGES)
        .arg("--out")
        .arg(out.path())
        .output()
        .unwrap();
    let folder = run_folder(out.path());
    assert_machine_restored(&before, &folder, Duration::from_secs(10));
    (output, folder, out)
}

#[test]
fn a_quick_experiment_holds_each_band_and_restores_the_machine() {
    let (output, folder, _out) = quick_experiment(&["--compare-2024"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let meta = pressure_meta(&folder);
    assert_eq!(meta.status, PressureStatus::Complete);
    let boost = meta
        .watermark_boost_factor
        .expect("this kernel has a watermark boost");
    assert_eq!(boost.during, Some(0), "{boost:?}");

    let bands = csv_rows(&folder.join("pressure.csv"));
    let names: Vec<&str> = bands.iter().map(|row| row["band"].as_str()).collect();
    assert_eq!(names, ["baseline", "promo", "high"], "{stdout}");
    for row in &bands {
        let band = &row["band"];
        assert_eq!(row["outcome"], "held", "{band}: {}", row["reason"]);
        assert_eq!(cell::<f64>(row, "iterations"), 50.0);
        assert!(cell::<f64>(row, "iter_median_ms") > 0.0);
        // Each band's slowdown against baseline, with its bootstrap interval.
        if band == "baseline" {
            assert!(row["vs_baseline_pct"].is_empty(), "{row:?}");
        } else {
            let (lo, median, hi) = (
                cell::<f64>(row, "vs_baseline_lo_pct"),
                cell::<f64>(row, "vs_baseline_pct"),
                cell::<f64>(row, "vs_baseline_hi_pct"),
            );
            assert!(
                lo.is_finite() && median.is_finite() && lo <= hi,
                "{band}: {median} [{lo}, {hi}]"
            );
        }
        // Held within tolerance: nearly every reading in the band, none more than a band's
        // width outside it.
        assert!(
            cell::<f64>(row, "pressure_in_band_pct") >= 90.0,
            "{band}: {row:?}"
        );
        // The band is the one at the last reading: a watermark boost may have moved it a
        // little since the fewest and most free pages were read.
        let lower = cell::<f64>(row, "pressure_band_lower_kb");
        if row["pressure_band_upper_kb"].is_empty() {
            assert!(
                cell::<f64>(row, "pressure_min_free_kb") >= lower,
                "{band}: {row:?}"
            );
        } else {
            let upper = cell::<f64>(row, "pressure_band_upper_kb");
            let width = upper - lower;
            // --scale-factor 100 makes each band ~1% of memory wide, not 0.1%.
            assert!(
                width > 100.0 * 1024.0,
                "{band} is only {width} kB wide: {row:?}"
            );
            let tolerance = width / 2.0;
            assert!(
                cell::<f64>(row, "pressure_min_free_kb") >= lower - tolerance,
                "{band}: {row:?}"
            );
            assert!(
                cell::<f64>(row, "pressure_max_free_kb") < upper + tolerance,
                "{band}: {row:?}"
            );
        }
    }
    let samples = csv_rows(&folder.join("pressure_samples.csv"));
    assert!(samples.len() > 20, "{} readings", samples.len());
    assert!(
        samples
            .iter()
            .all(|s| cell::<f64>(s, "swaptotal_kb") >= 200.0 * 1024.0),
        "the swap file was not on during the experiment"
    );
    assert!(
        samples
            .iter()
            .any(|s| cell::<f64>(s, "balloon_kb") > 1024.0 * 1024.0)
    );
    let svg = fs::read_to_string(folder.join("free_vs_watermarks.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("promo [high, promo)"));
    assert!(stdout.contains("vs baseline [95% CI]"), "{stdout}");
    assert!(stdout.contains("reclaimed file/anon"), "{stdout}");
    let compared = stdout
        .lines()
        .skip_while(|line| !line.starts_with("Beside the 2024 watermark experiment"))
        .find(|line| line.starts_with("high"))
        .unwrap_or_else(|| panic!("no 2024 comparison: {stdout}"));
    assert!(
        compared.contains("548") && compared.contains('['),
        "{compared}"
    );
    let cache = pressure_meta(&folder).page_cache.unwrap();
    assert_eq!(cache.bytes, 64 << 20, "{cache:?}");
    assert!(cache.passes >= 1, "{cache:?}");
}

/// Per zone, growing at the tail drains the zones in the allocator's order, Normal to its low
/// watermark (the high band's lower edge) and then DMA32; the balloon gives Normal back pages
/// of its own (found through /proc/self/pagemap) to lift it into its band, so every zone is
/// held in high at once.
#[test]
fn per_zone_mode_holds_high_with_every_zone_in_its_own_band() {
    // Draining 20 GiB at the balloon's 256 MiB a reading takes about a minute here.
    let (output, folder, _out) = quick_experiment(&[
        "--band-mode",
        "per-zone",
        "--levels",
        "baseline,high",
        "--settle-timeout-s",
        "120",
        "--json",
    ]);
    // --json: stdout is one document, and the progress went to stderr.
    let progress = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{progress}");
    let document: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("stdout is one JSON document");
    assert_eq!(document["run_dir"], folder.to_str().unwrap());
    assert_eq!(document["meta"]["status"], "complete");
    assert!(progress.contains("balloon released"), "{progress}");
    let meta = pressure_meta(&folder);
    assert!(
        meta.bands_defined_on.contains("its own watermarks"),
        "{meta:?}"
    );
    let bands = csv_rows(&folder.join("pressure.csv"));
    assert_eq!(bands[0]["outcome"], "held", "baseline: {:?}", bands[0]);
    for (printed, row) in document["bands"].as_array().unwrap().iter().zip(&bands) {
        assert_eq!(printed["band"], row["band"].as_str());
        assert_eq!(
            printed["iterations"].as_f64(),
            row["iterations"].parse().ok()
        );
    }
    let high = &bands[1];
    assert_eq!(high["outcome"], "held", "{high:?}\n{progress}");
    assert_eq!(cell::<f64>(high, "iterations"), 50.0);
    assert!(
        cell::<f64>(high, "pressure_in_band_pct") >= 90.0,
        "{high:?}\n{progress}"
    );
    // Every zone that serves user memory, DMA32 and Normal here, was in high at its lowest:
    // the balloon gave Normal back its own pages while it drained DMA32 through it.
    let zone_bands: Vec<&str> = high
        .iter()
        .filter(|(column, _)| column.ends_with("_lowest_band") && column.contains("_zone_"))
        .map(|(_, band)| band.as_str())
        .filter(|band| !band.is_empty())
        .collect();
    assert!(zone_bands.len() >= 2, "DMA32 and Normal: {high:?}");
    assert!(zone_bands.iter().all(|band| *band == "high"), "{high:?}");
}

/// Starts an experiment that holds the promo band for `iterations`; its stdout lines arrive
/// on the receiver as they are printed.
fn spawn_promo(out: &Path, iterations: &str) -> (Child, mpsc::Receiver<String>) {
    let mut child = skillprof()
        .args(["pressure", "--levels", "promo", "--iterations", iterations])
        .args(CHANGES)
        .arg("--out")
        .arg(out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (lines, received) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let _ = lines.send(line.unwrap_or_default());
        }
    });
    (child, received)
}

/// Collects stdout lines into `seen` until one satisfies `wanted`; kills the experiment and
/// fails if none comes within `limit`.
fn wait_for_line(
    child: &mut Child,
    lines: &mpsc::Receiver<String>,
    seen: &mut Vec<String>,
    limit: Duration,
    wanted: impl Fn(&str) -> bool,
) {
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) if wanted(&line) => {
                seen.push(line);
                return;
            }
            Ok(line) => seen.push(line),
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "the line awaited did not come in time:\n{}",
                    seen.join("\n")
                );
            }
        }
    }
}

fn held_promo(line: &str) -> bool {
    line.starts_with("promo: held after")
}

/// Starts an experiment that holds the promo band for far longer than the test waits, and
/// returns once it is iterating in it.
fn start_holding_promo(out: &Path) -> (Child, mpsc::Receiver<String>) {
    let (mut child, lines) = spawn_promo(out, "100000000");
    wait_for_line(
        &mut child,
        &lines,
        &mut Vec::new(),
        Duration::from_secs(180),
        held_promo,
    );
    // Mid-band: iterating, with the balloon full.
    std::thread::sleep(Duration::from_secs(1));
    (child, lines)
}

/// The balloon process `parent` forked.
fn balloon_of(parent: u32) -> i32 {
    procfs::process::all_processes()
        .unwrap()
        .filter_map(|process| process.ok()?.stat().ok())
        .find(|stat| stat.ppid == parent as i32 && stat.comm == "skp-balloon")
        .unwrap_or_else(|| panic!("skillprof {parent} has no skp-balloon child"))
        .pid
}

/// A balloon that cannot touch its pages for a while, with free memory far above the high
/// watermark, is the machine being slow, not out of memory: the watchdog waits and says so,
/// and the band is held. (A hypervisor backing guest memory on first touch stalled a CI run's
/// balloon so, with 6 GiB free, and the watchdog used to kill it.)
#[test]
fn a_balloon_stalled_with_memory_free_is_waited_for() {
    require_root(ROOT);
    let _machine = common::machine();
    let before = before();
    let out = tempfile::tempdir().unwrap();
    let (mut child, lines) = spawn_promo(out.path(), "100");
    let mut seen = Vec::new();
    let growing = |line: &str| line.contains(" s  balloon ");
    wait_for_line(
        &mut child,
        &lines,
        &mut seen,
        Duration::from_secs(60),
        growing,
    );
    let balloon = balloon_of(child.id());
    // SAFETY: signals the experiment's own balloon. Stopped for longer than a 256 MiB grow's
    // limit (3 s), far shorter than the watchdog's patience above the high watermark.
    assert_eq!(unsafe { libc::kill(balloon, libc::SIGSTOP) }, 0);
    std::thread::sleep(Duration::from_secs(6));
    assert_eq!(unsafe { libc::kill(balloon, libc::SIGCONT) }, 0);
    wait_for_line(
        &mut child,
        &lines,
        &mut seen,
        Duration::from_secs(180),
        held_promo,
    );
    let status = child.wait().unwrap();
    seen.extend(lines.iter());
    let stdout = seen.join("\n");
    assert!(status.success(), "{status:?}\n{stdout}");
    assert!(
        stdout.contains("past its limit, with free memory above the high watermark"),
        "{stdout}"
    );
    let folder = run_folder(out.path());
    assert_machine_restored(&before, &folder, Duration::from_secs(10));
    let bands = csv_rows(&folder.join("pressure.csv"));
    assert_eq!(bands[0]["outcome"], "held", "{stdout}");
    assert_eq!(cell::<f64>(&bands[0], "iterations"), 100.0);
}

fn stop_mid_band(signal: libc::c_int) -> (ExitStatus, PathBuf, Before, tempfile::TempDir) {
    require_root(ROOT);
    let before = before();
    let out = tempfile::tempdir().unwrap();
    let (mut child, _lines) = start_holding_promo(out.path());
    // SAFETY: signals our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "skillprof did not exit after signal {signal}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let folder = run_folder(out.path());
    (status, folder, before, out)
}

fn assert_interrupted(signal: libc::c_int, name: &str) {
    let _machine = common::machine();
    let (status, folder, before, _out) = stop_mid_band(signal);
    assert_eq!(status.code(), Some(128 + signal), "{status:?}");
    assert_machine_restored(&before, &folder, Duration::from_secs(10));
    let meta = pressure_meta(&folder);
    assert_eq!(meta.status, PressureStatus::Interrupted);
    let reason = meta.reason.unwrap_or_default();
    assert!(reason.contains(name), "{reason}");
    let bands = csv_rows(&folder.join("pressure.csv"));
    assert_eq!(bands.len(), 1);
    assert_eq!(bands[0]["outcome"], "interrupted");
    assert!(cell::<f64>(&bands[0], "iterations") > 0.0);
}

#[test]
fn sigint_mid_band_restores_the_machine() {
    assert_interrupted(libc::SIGINT, "SIGINT");
}

#[test]
fn sigterm_mid_band_restores_the_machine() {
    assert_interrupted(libc::SIGTERM, "SIGTERM");
}

/// No handler survives SIGKILL: the guardians restore the sysctl, turn the swap file off and
/// delete it and the page-cache file, and the balloon ends as its pipe closes.
#[test]
fn after_sigkill_mid_band_the_guardians_remove_swap_and_page_cache_and_restore_the_machine() {
    let _machine = common::machine();
    let (status, folder, before, _out) = stop_mid_band(libc::SIGKILL);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
    assert_machine_restored(&before, &folder, Duration::from_secs(60));
    assert_eq!(
        pressure_meta(&folder).status,
        PressureStatus::Running,
        "nobody was left to finish meta.json"
    );
}

/// `pressure BAND` in a cmds file: the entries after it run with free memory held in the
/// band and say so in their `pressure_*` columns; `pressure off` gives the memory back, and
/// nothing is left once the run ends: no balloon, and `--scale-factor` restored.
#[test]
fn a_workload_runs_under_pressure_and_gives_the_memory_back() {
    require_root(ROOT);
    let _machine = common::machine();
    let before = before();
    let dir = tempfile::tempdir().unwrap();
    let cmds_file = dir.path().join("pressure.cmds");
    // The compile runs before the band: what a compile takes and frees moves free memory by
    // as much as the band is wide on some machines (one suite run read 898 MB right after
    // add_rs, above promo, while the balloon grew back; CI's run of 2026-12-05 had an entry
    // next to add_rs below 80% in the band), so an entry beside it said more about the
    // compile than about the hold. Each request waits half a second in the skill and takes
    // 1 MB: an entry of 2 ms would have three readings, the first from before it.
    fs::write(
        &cmds_file,
        "add_rs\npressure promo\nexecute_skill sample_rs1 Squeeze 1000 500\n\
         execute_skill sample_rs1 Squeeze 1000 500\npressure off\nskills\n",
    )
    .unwrap();
    let (output, folder) = run_ok(
        &cmds_file,
        &dir.path().join("runs"),
        &["--scale-factor", "100", "--boost-factor", "0"],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        fs::read_to_string(SCALE_FACTOR).unwrap(),
        before.scale_factor
    );
    assert_eq!(
        fs::read_to_string(BOOST_FACTOR).unwrap(),
        before.boost_factor
    );

    let rows = csv_rows(&folder.join("commands.csv"));
    let cmds: Vec<&str> = rows.iter().map(|row| row["cmd"].as_str()).collect();
    assert_eq!(
        cmds,
        [
            "add_rs",
            "pressure promo",
            "execute_skill sample_rs1 Squeeze 1000 500",
            "execute_skill sample_rs1 Squeeze 1000 500",
            "pressure off",
            "skills",
            "stop"
        ]
    );
    assert_eq!(rows[0]["pressure_band"], "", "{:?}", rows[0]);
    for row in &rows[2..4] {
        assert_eq!(row["pressure_band"], "promo", "{row:?}");
        // The row first: a failure's excerpt keeps the start of its message.
        assert!(
            cell::<f64>(row, "pressure_in_band_pct") >= 80.0,
            "{row:?}\n{stderr}"
        );
        assert!(cell::<f64>(row, "pressure_balloon_kb") > 0.0, "{row:?}");
        assert_eq!(row["pressure_aborted"], "", "{row:?}");
        // The sampler sees the same memory the balloon holds in the band.
        assert!(
            ["promo", "high"].contains(&row["zones_lowest_band"].as_str()),
            "{row:?}"
        );
    }
    for row in &rows[5..] {
        assert_eq!(row["pressure_band"], "", "{row:?}");
        assert_eq!(row["pressure_balloon_kb"], "", "{row:?}");
    }

    let explain = fs::read_to_string(folder.join("explain.md")).unwrap();
    assert!(
        explain.contains("under pressure: a balloon aimed at the promo band"),
        "{explain}"
    );
    let meta = meta(&folder);
    assert_eq!(meta.status, Status::Complete);
    assert_eq!(meta.pressure_balloon_pids.len(), 1, "{meta:?}");
    // One guardian a sysctl: the scale factor's and the boost factor's.
    assert_eq!(meta.guardian_pids.len(), 2, "{meta:?}");
    let scale_factor = meta.scale_factor.unwrap();
    assert_eq!(scale_factor.during, 100);
    assert_eq!(scale_factor.before, before.scale_factor.trim());
    let boost_factor = meta.boost_factor.unwrap();
    assert_eq!(boost_factor.during, 0);
    assert_eq!(boost_factor.before, before.boost_factor.trim());
    assert_machine_restored(&before, &folder, Duration::from_secs(10));
}
