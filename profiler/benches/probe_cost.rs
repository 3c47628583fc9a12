//! What the probes add per operation, measured as thread CPU time in this process:
//! - an unrelated syscall (getppid) while a session profiles another process: the tax every
//!   process on the machine pays while a run lasts;
//! - a matching mmap+munmap pair, and a page fault, while a session profiles this process.
//!
//! Each attach selection the kernel allows (the preferred mechanisms; the same with
//! `--self-cost`, BPF stats on; and the forced fallback, each plan's last mechanism) is one
//! condition, next to two conditions without probes: "off" is
//! the baseline of every round, "off again" the control that shows the detection floor.
//! Rounds run the conditions in a fresh random order; each figure is the median over rounds
//! of (condition − off) in that round, with a bootstrap 95% confidence interval. Sessions
//! run as `skillprof run` runs them: BPF stats off unless the condition says self-cost.
//! Figures only, no pass/fail.
//!
//!     cargo bench -p skillprof --bench probe_cost [-- --rounds N]
//!
//! Needs root (the probes).

use std::hint::black_box;
use std::process::{Child, Command};
use std::ptr;

use anyhow::{Context, Result, bail, ensure};
use skillprof::probes::{self, ProbeOptions, ProbeSession};
use skillprof::stats;

const GETPPID_CALLS: usize = 200_000;
const MMAP_PAIRS: usize = 20_000;
const FAULT_PAGES: usize = 16_384;
const PAGE: usize = 4096;
const RESAMPLES: usize = 5_000;

#[derive(Clone, Copy, PartialEq)]
enum Attach {
    Preferred,
    /// The preferred mechanisms with BPF stats on (`--self-cost`).
    SelfCost,
    Fallback,
}

#[derive(Clone, Copy, PartialEq)]
enum Target {
    /// A sleeping child: everything this process does is unrelated to it.
    Other,
    /// This process: its syscalls and faults match.
    Itself,
}

#[derive(Clone, Copy)]
struct Condition {
    label: &'static str,
    probes: Option<(Attach, Target)>,
}

const CONDITIONS: [Condition; 8] = [
    Condition {
        label: "off (baseline)",
        probes: None,
    },
    Condition {
        label: "off again (control)",
        probes: None,
    },
    Condition {
        label: "preferred, another process",
        probes: Some((Attach::Preferred, Target::Other)),
    },
    Condition {
        label: "preferred, this process",
        probes: Some((Attach::Preferred, Target::Itself)),
    },
    Condition {
        label: "self-cost, another process",
        probes: Some((Attach::SelfCost, Target::Other)),
    },
    Condition {
        label: "self-cost, this process",
        probes: Some((Attach::SelfCost, Target::Itself)),
    },
    Condition {
        label: "fallback, another process",
        probes: Some((Attach::Fallback, Target::Other)),
    },
    Condition {
        label: "fallback, this process",
        probes: Some((Attach::Fallback, Target::Itself)),
    },
];

/// Thread CPU ns per operation of each workload, in one condition of one round.
#[derive(Clone, Copy, Default)]
struct Costs {
    getppid: f64,
    mmap_munmap: f64,
    fault: f64,
}

fn main() -> Result<()> {
    let rounds = parse_rounds()?;
    if !probes::can_load_bpf()? {
        bail!("probe_cost loads BPF probes: run it as root");
    }
    // One fault per touched page, whatever the machine's THP mode.
    // SAFETY: a process-wide flag, no pointers.
    unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    let mut sleeper = Sleeper::start()?;
    let mut rng = fastrand::Rng::with_seed(0x5eed);
    // measured[condition][round]
    let mut measured = vec![Vec::with_capacity(rounds); CONDITIONS.len()];
    let mut mechanisms = vec![String::new(); CONDITIONS.len()];
    for round in 1..=rounds {
        let mut order: Vec<usize> = (0..CONDITIONS.len()).collect();
        rng.shuffle(&mut order);
        for &index in &order {
            let condition = CONDITIONS[index];
            let session = match condition.probes {
                None => None,
                Some((attach, target)) => {
                    let pid = match target {
                        Target::Other => sleeper.pid(),
                        Target::Itself => std::process::id(),
                    };
                    let options = ProbeOptions {
                        force_fallback: attach == Attach::Fallback,
                        self_cost: attach == Attach::SelfCost,
                        max_entries: 2,
                        ..ProbeOptions::default()
                    };
                    let session = ProbeSession::start(pid, &options)
                        .with_context(|| format!("attaching for {}", condition.label))?;
                    mechanisms[index] = attached(&session);
                    Some(session)
                }
            };
            measure(); // warm-up: caches, the allocator, the programs' first runs
            measured[index].push(measure());
            drop(session);
        }
        eprintln!("round {round}/{rounds} done");
    }
    sleeper.stop();
    report(rounds, &measured, &mechanisms);
    Ok(())
}

fn parse_rounds() -> Result<usize> {
    let mut rounds = 15;
    // cargo bench passes `--bench`; skip what is not ours.
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--rounds" {
            rounds = args.next().context("--rounds N")?.parse()?;
        }
    }
    ensure!(rounds >= 3, "--rounds must be at least 3");
    Ok(rounds)
}

/// Which mechanism the syscall and fault probes attached with.
fn attached(session: &ProbeSession) -> String {
    session
        .statuses()
        .iter()
        .filter(|s| s.attached && matches!(s.probe.as_str(), "syscalls" | "page_faults"))
        .map(|s| format!("{} {}", s.probe, s.mechanism))
        .collect::<Vec<_>>()
        .join(", ")
}

fn thread_cpu_ns() -> f64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: fills a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    now.tv_sec as f64 * 1e9 + now.tv_nsec as f64
}

/// Thread CPU ns per operation of `operations` runs of `work`.
fn per_operation(operations: usize, work: impl FnOnce()) -> f64 {
    let start = thread_cpu_ns();
    work();
    (thread_cpu_ns() - start) / operations as f64
}

fn map(len: usize) -> *mut libc::c_void {
    // SAFETY: a fresh anonymous mapping; checked below.
    let addr = unsafe {
        libc::mmap(
            ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(addr, libc::MAP_FAILED, "mmap of {len} bytes failed");
    addr
}

fn measure() -> Costs {
    let getppid = per_operation(GETPPID_CALLS, || {
        for _ in 0..GETPPID_CALLS {
            // SAFETY: no arguments.
            black_box(unsafe { libc::getppid() });
        }
    });
    let mmap_munmap = per_operation(MMAP_PAIRS, || {
        for _ in 0..MMAP_PAIRS {
            let addr = map(PAGE);
            // SAFETY: the mapping just made.
            unsafe { libc::munmap(addr, PAGE) };
        }
    });
    let region = map(FAULT_PAGES * PAGE).cast::<u8>();
    let fault = per_operation(FAULT_PAGES, || {
        for page in 0..FAULT_PAGES {
            // SAFETY: inside the fresh mapping; the first write faults the page in.
            unsafe { ptr::write_volatile(region.add(page * PAGE), 1) };
        }
    });
    // SAFETY: the region mapped above.
    unsafe { libc::munmap(region.cast(), FAULT_PAGES * PAGE) };
    Costs {
        getppid,
        mmap_munmap,
        fault,
    }
}

fn report(rounds: usize, measured: &[Vec<Costs>], mechanisms: &[String]) {
    let baseline = &measured[0];
    let median_of = |values: &mut Vec<f64>| {
        values.sort_by(f64::total_cmp);
        stats::median(values)
    };
    let absolute = |pick: fn(&Costs) -> f64| median_of(&mut baseline.iter().map(pick).collect());
    println!(
        "probe cost: thread CPU ns added per operation, median over {rounds} interleaved rounds \
         [bootstrap 95% CI]; BPF stats off but in the self-cost rows, as runs have them"
    );
    println!(
        "without probes: getppid {:.0} ns, mmap+munmap {:.0} ns, fault {:.0} ns\n",
        absolute(|c| c.getppid),
        absolute(|c| c.mmap_munmap),
        absolute(|c| c.fault)
    );
    println!(
        "{:28} {:>24} {:>24} {:>24}  attached",
        "condition", "getppid", "mmap+munmap pair", "page fault"
    );
    for (index, condition) in CONDITIONS.iter().enumerate().skip(1) {
        let cell = |pick: fn(&Costs) -> f64| {
            let mut added: Vec<f64> = measured[index]
                .iter()
                .zip(baseline)
                .map(|(with, off)| pick(with) - pick(off))
                .collect();
            let (lo, hi) = stats::median_ci(&added, RESAMPLES, index as u64);
            format!("{:+.0} [{lo:+.0}, {hi:+.0}]", median_of(&mut added))
        };
        println!(
            "{:28} {:>24} {:>24} {:>24}  {}",
            condition.label,
            cell(|c| c.getppid),
            cell(|c| c.mmap_munmap),
            cell(|c| c.fault),
            if mechanisms[index].is_empty() {
                "-"
            } else {
                &mechanisms[index]
            }
        );
    }
    println!(
        "\n\"another process\": this process is not profiled, so its getppid is the tax an \
         unrelated process pays; \"this process\": its mmap+munmap and faults are counted."
    );
}

/// A child that sleeps until it is killed: a process the probes can target that does nothing.
struct Sleeper(Child);

impl Sleeper {
    fn start() -> Result<Self> {
        let child = Command::new("sleep")
            .arg("3600")
            .spawn()
            .context("starting `sleep`")?;
        Ok(Sleeper(child))
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }

    fn stop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        self.stop();
    }
}
