//! What the probes add per operation, measured as thread CPU time in this process:
//! - an unrelated syscall (getppid) while a session profiles another process: the tax every
//!   process on the machine pays while a run lasts;
//! - a matching mmap+munmap pair, and a page fault, while a session profiles this process;
//! - a mark (`ledger::mark`, the call a host makes around its work for a skill), while a
//!   session profiles this process: in the default mode the thread's own counters read into
//!   the ledger (a `getrusage`), in exact mode that and the marker's uprobe with its program;
//! - a context switch (a round trip over two pipes with a thread of this process, which
//!   blocks this thread once each way), with the time profile's switch programs by state and
//!   with stacks, for another process and for this one.
//!
//! Each attach selection the kernel allows (the host-only mode, which leaves out every program
//! that runs for other processes' syscalls and faults; the calls mode, `--probes calls`, with
//! the memory calls' programs and no fault program; exact mode, `--probes exact`, with
//! the preferred mechanisms; the same with `--self-cost`, BPF stats on; and the forced
//! fallback, each plan's last mechanism) is one condition, next to two conditions without probes: "off" is
//! the baseline of every round, "off again" the control that shows the detection floor.
//! One more condition turns on a syscall tracepoint with no program at all (a perf counter
//! on `syscalls:sys_{enter,exit}_acct`, a syscall nothing here makes): the kernel then takes
//! its syscall-tracing slow path for every syscall of every task, which is the floor under
//! any per-syscall tracepoint probe.
//! Rounds run the conditions in a fresh random order; each figure is the median over rounds
//! of (condition − off) in that round, with a bootstrap 95% confidence interval. Sessions
//! run as `skillprof run` runs them: BPF stats off unless the condition says self-cost.
//! Figures only, no pass/fail.
//!
//! The "this process" figures are saved as the machine's cost model (`--model FILE`, default
//! /var/lib/skillprof/probe-cost.json): runs without BPF stats multiply the events they count
//! by them.
//!
//!     cargo bench -p skillprof --bench probe_cost [-- --rounds N --model FILE]
//!
//! Needs root (the probes).

use std::fs;
use std::hint::black_box;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::ptr;

use anyhow::{Context, Result, bail, ensure};
use perf_event_open_sys::bindings::{PERF_FLAG_FD_CLOEXEC, PERF_TYPE_TRACEPOINT, perf_event_attr};
use skillprof::ground::machine::Machine;
use skillprof::ground::stats;
use skillprof::producers::probes::cost_model::{self, CostModel, EventCost};
use skillprof::producers::probes::time::{OffCpuMode, TimeOptions};
use skillprof::producers::probes::{self, ProbeOptions, ProbeSession};
use skillprof::record::probes::{Mechanism, Ns, Per, Probe, ProbeMode};
use skillprof_common::{PHASE_CALL, PHASE_FIRST, PHASE_IDLE, ledger};

mod common;

const GETPPID_CALLS: usize = 200_000;
const MMAP_PAIRS: usize = 20_000;
/// Pages faulted in per pass (16 MiB), and passes over them: a page fault's cost is mostly
/// zeroing the page, which varies with where the page comes from (64 MiB of fresh pages from
/// the buddy allocator, cold, spread the figure over ±150 ns between rounds).
const FAULT_PAGES: usize = 4096;
const FAULT_PASSES: usize = 4;
/// Marks per measurement, in pairs: a stretch of work for a skill, then idle, as a host's
/// threads mark each poll of a request.
const MARK_PAIRS: usize = 20_000;
/// Round trips over the pipes per measurement: each blocks this thread once.
const ROUND_TRIPS: usize = 5_000;
/// The skill the marks are for, registered once (its row's pages faulted in then).
static SKILL: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
const PAGE: usize = 4096;
const RESAMPLES: usize = 5_000;
/// Each condition measures its workloads this many times and keeps the median: a fault's
/// cost varies from one batch of pages to the next far more than the probes add to it.
const REPEATS: usize = 7;

#[derive(Clone, Copy, PartialEq)]
enum Attach {
    /// The host-only mode: what `skillprof run --attach`, `slo` and `watch` attach, and a lab
    /// run where the kernel has no function probes for the memory calls.
    Default,
    /// The calls mode (`--probes calls`): the memory calls' programs, no fault program.
    Calls,
    /// Exact mode (`--trace-syscalls`), the preferred mechanisms.
    Preferred,
    /// The preferred mechanisms with BPF stats on (`--self-cost`).
    SelfCost,
    Fallback,
    /// The default mode with the time profile, its switch programs as given.
    Time(OffCpuMode),
}

#[derive(Clone, Copy, PartialEq)]
enum Target {
    /// A sleeping child: everything this process does is unrelated to it.
    Other,
    /// This process: its syscalls and faults match.
    Itself,
}

#[derive(Clone, Copy)]
enum Setup {
    Off,
    /// Syscall tracepoints on, no program: the kernel's own floor.
    SyscallTracing,
    Probes(Attach, Target),
}

#[derive(Clone, Copy)]
struct Condition {
    label: &'static str,
    setup: Setup,
}

const CONDITIONS: [Condition; 17] = [
    Condition {
        label: "off (baseline)",
        setup: Setup::Off,
    },
    Condition {
        label: "off again (control)",
        setup: Setup::Off,
    },
    Condition {
        label: "syscall tracepoint, no program",
        setup: Setup::SyscallTracing,
    },
    Condition {
        label: "host-only, another process",
        setup: Setup::Probes(Attach::Default, Target::Other),
    },
    Condition {
        label: "host-only, this process",
        setup: Setup::Probes(Attach::Default, Target::Itself),
    },
    Condition {
        label: "calls, another process",
        setup: Setup::Probes(Attach::Calls, Target::Other),
    },
    Condition {
        label: "calls, this process",
        setup: Setup::Probes(Attach::Calls, Target::Itself),
    },
    Condition {
        label: "exact, another process",
        setup: Setup::Probes(Attach::Preferred, Target::Other),
    },
    Condition {
        label: "exact, this process",
        setup: Setup::Probes(Attach::Preferred, Target::Itself),
    },
    Condition {
        label: "exact, self-cost, another process",
        setup: Setup::Probes(Attach::SelfCost, Target::Other),
    },
    Condition {
        label: "exact, self-cost, this process",
        setup: Setup::Probes(Attach::SelfCost, Target::Itself),
    },
    Condition {
        label: "exact, fallback, another process",
        setup: Setup::Probes(Attach::Fallback, Target::Other),
    },
    Condition {
        label: "exact, fallback, this process",
        setup: Setup::Probes(Attach::Fallback, Target::Itself),
    },
    Condition {
        label: "time, states, another process",
        setup: Setup::Probes(Attach::Time(OffCpuMode::States), Target::Other),
    },
    Condition {
        label: "time, states, this process",
        setup: Setup::Probes(Attach::Time(OffCpuMode::States), Target::Itself),
    },
    Condition {
        label: "time, stacks, another process",
        setup: Setup::Probes(Attach::Time(OffCpuMode::Stacks), Target::Other),
    },
    Condition {
        label: "time, stacks, this process",
        setup: Setup::Probes(Attach::Time(OffCpuMode::Stacks), Target::Itself),
    },
];

/// Thread CPU ns per operation of each workload, in one condition of one round.
#[derive(Clone, Copy, Default)]
struct Costs {
    getppid: f64,
    mmap_munmap: f64,
    fault: f64,
    mark: f64,
    switch: f64,
}

fn main() -> Result<()> {
    let args = parse_args()?;
    let rounds = args.rounds;
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
    let mut mechanisms = vec![Vec::new(); CONDITIONS.len()];
    for round in 1..=rounds {
        let mut order: Vec<usize> = (0..CONDITIONS.len()).collect();
        rng.shuffle(&mut order);
        for &index in &order {
            let condition = CONDITIONS[index];
            let mut tracing = None;
            let session = match condition.setup {
                Setup::Off => None,
                Setup::SyscallTracing => {
                    tracing = Some(SyscallTracing::on(sleeper.pid())?);
                    None
                }
                Setup::Probes(attach, target) => {
                    let pid = match target {
                        Target::Other => sleeper.pid(),
                        Target::Itself => std::process::id(),
                    };
                    let options = ProbeOptions {
                        force_fallback: attach == Attach::Fallback,
                        self_cost: attach == Attach::SelfCost,
                        mode: match attach {
                            Attach::Default | Attach::Time(_) => ProbeMode::HostOnly,
                            Attach::Calls => ProbeMode::Calls,
                            _ => ProbeMode::Exact,
                        },
                        time: match attach {
                            Attach::Time(off_cpu) => Some(TimeOptions {
                                hz: probes::time::DEFAULT_HZ,
                                off_cpu,
                                timeline: false,
                            }),
                            _ => None,
                        },
                        max_entries: 2,
                        ..ProbeOptions::default()
                    };
                    let session = ProbeSession::start(pid, &options)
                        .with_context(|| format!("attaching for {}", condition.label))?;
                    mechanisms[index] = attached(&session);
                    Some(session)
                }
            };
            measure_once(); // warm-up: caches, the allocator, the programs' first runs
            measured[index].push(measure());
            drop(session);
            drop(tracing);
        }
        eprintln!("round {round}/{rounds} done");
    }
    sleeper.stop();
    report(rounds, &measured, &mechanisms);
    let model = cost_model(rounds, &measured, &mechanisms)?;
    model.save(&args.model)?;
    println!(
        "\ncost model saved to {} ({} figures): runs without --self-cost estimate their \
         probes' cost from it",
        args.model.display(),
        model.costs.len()
    );
    Ok(())
}

/// What each probe's program costs per event, measured; writes the cost model.
#[derive(clap::Parser)]
struct Args {
    /// Interleaved rounds (at least 3).
    #[arg(long, default_value_t = 15)]
    rounds: usize,
    /// Where the cost model is written.
    #[arg(long, default_value = cost_model::DEFAULT_PATH)]
    model: PathBuf,
}

fn parse_args() -> Result<Args> {
    let parsed: Args = common::flags();
    ensure!(parsed.rounds >= 3, "--rounds must be at least 3");
    Ok(parsed)
}

/// Which mechanism the probes the conditions are about attached with.
fn attached(session: &ProbeSession) -> Vec<(Probe, Mechanism)> {
    session
        .statuses()
        .iter()
        .filter(|s| {
            s.attached
                && matches!(
                    s.probe,
                    Probe::Syscalls
                        | Probe::PageFaults
                        | Probe::Markers
                        | Probe::CpuProfile
                        | Probe::OffCpu
                )
        })
        .map(|s| (s.probe, s.mechanism))
        .collect()
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
    let runs: Vec<Costs> = (0..REPEATS).map(|_| measure_once()).collect();
    let median = |pick: fn(&Costs) -> f64| median_of(runs.iter().map(pick));
    Costs {
        getppid: median(|c| c.getppid),
        mmap_munmap: median(|c| c.mmap_munmap),
        fault: median(|c| c.fault),
        mark: median(|c| c.mark),
        switch: median(|c| c.switch),
    }
}

fn measure_once() -> Costs {
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
    let mut fault = 0.0;
    // Pass 0 only warms: it takes fresh pages.
    for pass in 0..=FAULT_PASSES {
        let ns = per_operation(FAULT_PAGES, || {
            for page in 0..FAULT_PAGES {
                // SAFETY: inside the mapping, empty again: the first write faults the page in.
                unsafe { ptr::write_volatile(region.add(page * PAGE), 1) };
            }
        });
        if pass > 0 {
            fault += ns;
        }
        // SAFETY: the region mapped above. Its pages go back to the allocator, still in the
        // caches, so that every pass after the first faults in pages alike.
        unsafe { libc::madvise(region.cast(), FAULT_PAGES * PAGE, libc::MADV_DONTNEED) };
    }
    let fault = fault / FAULT_PASSES as f64;
    // SAFETY: the region mapped above.
    unsafe { libc::munmap(region.cast(), FAULT_PAGES * PAGE) };
    let skill = *SKILL.get_or_init(|| ledger::register("probe_cost"));
    let mark = per_operation(2 * MARK_PAIRS, || {
        for request in 0..MARK_PAIRS as u64 {
            ledger::mark(request, skill, PHASE_CALL | PHASE_FIRST);
            ledger::mark(request, skill, PHASE_IDLE);
        }
    });
    Costs {
        getppid,
        mmap_munmap,
        fault,
        mark,
        switch: switch(),
    }
}

/// This thread's CPU per round trip with a thread that echoes a byte from one pipe to the
/// other: this thread blocks in its read each time, so each is one switch out and one in.
fn switch() -> f64 {
    let pipe = || {
        let mut fds = [0; 2];
        // SAFETY: fills two descriptors, owned below.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
        // SAFETY: descriptors the pipe just opened, owned once each.
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
    };
    let ((there_read, there_write), (back_read, back_write)) = (pipe(), pipe());
    let byte = |fd: &OwnedFd, write: bool| {
        let mut one = [1u8];
        let fd = std::os::fd::AsRawFd::as_raw_fd(fd);
        // SAFETY: a one-byte buffer on the stack, a descriptor owned by the caller.
        let n = unsafe {
            match write {
                true => libc::write(fd, one.as_ptr().cast(), 1),
                false => libc::read(fd, one.as_mut_ptr().cast(), 1),
            }
        };
        assert_eq!(n, 1, "a byte over the pipe");
    };
    std::thread::scope(|scope| {
        scope.spawn(|| {
            for _ in 0..ROUND_TRIPS {
                byte(&there_read, false);
                byte(&back_write, true);
            }
        });
        per_operation(ROUND_TRIPS, || {
            for _ in 0..ROUND_TRIPS {
                byte(&there_write, true);
                byte(&back_read, false);
            }
        })
    })
}

/// What condition `index` added to one workload's cost per operation: the median over
/// rounds of (condition − off) in that round, and its bootstrap 95% interval.
fn added(measured: &[Vec<Costs>], index: usize, pick: fn(&Costs) -> f64) -> Ns {
    let added: Vec<f64> = measured[index]
        .iter()
        .zip(&measured[0])
        .map(|(with, off)| pick(with) - pick(off))
        .collect();
    let (lo, hi) = stats::median_ci(&added, RESAMPLES, index as u64);
    Ns {
        median: median_of(added),
        lo,
        hi,
    }
}

fn median_of(values: impl IntoIterator<Item = f64>) -> f64 {
    let mut values: Vec<f64> = values.into_iter().collect();
    values.sort_by(f64::total_cmp);
    stats::median(&values)
}

fn report(rounds: usize, measured: &[Vec<Costs>], mechanisms: &[Vec<(Probe, Mechanism)>]) {
    let absolute = |pick: fn(&Costs) -> f64| median_of(measured[0].iter().map(pick));
    println!(
        "probe cost: thread CPU ns added per operation, median over {rounds} interleaved rounds \
         [bootstrap 95% CI]; BPF stats off but in the self-cost rows, as runs have them"
    );
    println!(
        "without probes: getppid {:.0} ns, mmap+munmap {:.0} ns, fault {:.0} ns, mark {:.0} ns, \
         switch round trip {:.0} ns\n",
        absolute(|c| c.getppid),
        absolute(|c| c.mmap_munmap),
        absolute(|c| c.fault),
        absolute(|c| c.mark),
        absolute(|c| c.switch)
    );
    println!(
        "{:30} {:>24} {:>24} {:>24} {:>24} {:>24}  attached",
        "condition", "getppid", "mmap+munmap pair", "page fault", "mark", "switch round trip"
    );
    for (index, condition) in CONDITIONS.iter().enumerate().skip(1) {
        let cell = |pick: fn(&Costs) -> f64| {
            let ns = added(measured, index, pick);
            format!("{:+.0} [{:+.0}, {:+.0}]", ns.median, ns.lo, ns.hi)
        };
        let attached: Vec<String> = mechanisms[index]
            .iter()
            .map(|(probe, mechanism)| format!("{probe} {mechanism}"))
            .collect();
        println!(
            "{:30} {:>24} {:>24} {:>24} {:>24} {:>24}  {}",
            condition.label,
            cell(|c| c.getppid),
            cell(|c| c.mmap_munmap),
            cell(|c| c.fault),
            cell(|c| c.mark),
            cell(|c| c.switch),
            match condition.setup {
                Setup::SyscallTracing => "perf counter on syscalls:sys_{enter,exit}_acct".into(),
                _ if attached.is_empty() => "-".into(),
                _ => attached.join(", "),
            }
        );
    }
    println!(
        "\n\"another process\": this process is not profiled, so its getppid is the tax an \
         unrelated process pays; \"this process\": its mmap+munmap and faults are counted. \
         \"syscall tracepoint, no program\": the kernel's syscall-tracing path alone, the floor \
         under any per-syscall tracepoint. \"switch round trip\": this thread blocked once \
         and woken once; with the time profile's programs, for another process their filter \
         only, for this one their bookkeeping (and with stacks, the stack walks) as the thread \
         leaves its CPU."
    );
}

/// The machine's cost model: per mechanism, what a counted syscall (half an mmap+munmap
/// pair), a counted fault and a mark of the profiled process added, as runs have the probes
/// (stats off). The first condition that measured a mechanism gives its figure.
fn cost_model(
    rounds: usize,
    measured: &[Vec<Costs>],
    mechanisms: &[Vec<(Probe, Mechanism)>],
) -> Result<CostModel> {
    let machine = Machine::read()?;
    let mut costs: Vec<EventCost> = Vec::new();
    for (index, condition) in CONDITIONS.iter().enumerate() {
        let Setup::Probes(Attach::Default | Attach::Preferred | Attach::Fallback, Target::Itself) =
            condition.setup
        else {
            continue;
        };
        for (probe, mechanism) in &mechanisms[index] {
            let (per, ns) = match probe {
                Probe::Syscalls => {
                    let pair = added(measured, index, |c| c.mmap_munmap);
                    let half = |ns: f64| ns / 2.0;
                    (
                        Per::Syscall,
                        Ns {
                            median: half(pair.median),
                            lo: half(pair.lo),
                            hi: half(pair.hi),
                        },
                    )
                }
                Probe::Markers => (Per::Mark, added(measured, index, |c| c.mark)),
                _ => (Per::Fault, added(measured, index, |c| c.fault)),
            };
            if !costs
                .iter()
                .any(|c| c.probe == *probe && c.mechanism == *mechanism)
            {
                costs.push(EventCost {
                    probe: *probe,
                    mechanism: *mechanism,
                    per,
                    ns,
                });
            }
        }
    }
    Ok(CostModel {
        kernel_release: machine.kernel_release,
        cpu: machine.brand,
        measured_at: chrono::Local::now().format("%Y-%m-%d %H:%M").to_string(),
        rounds,
        costs,
    })
}

/// Syscall tracepoints enabled with no BPF program: perf counters on the enter and exit
/// tracepoints of `acct`, bound to a process that never calls it. Registering any syscall
/// tracepoint makes every task take the syscall-tracing path. The counters close with their
/// descriptors, so the kernel turns the path off again however this process ends.
struct SyscallTracing {
    _counters: Vec<OwnedFd>,
}

impl SyscallTracing {
    fn on(pid: u32) -> Result<Self> {
        probes::ensure_tracefs().map_err(anyhow::Error::msg)?;
        let mut fds = Vec::new();
        for event in ["sys_enter_acct", "sys_exit_acct"] {
            let path = format!("/sys/kernel/tracing/events/syscalls/{event}/id");
            let id: u64 = fs::read_to_string(&path)
                .with_context(|| format!("reading {path}"))?
                .trim()
                .parse()?;
            let mut attr = perf_event_attr {
                type_: PERF_TYPE_TRACEPOINT,
                size: size_of::<perf_event_attr>() as u32,
                config: id,
                ..Default::default()
            };
            // SAFETY: a valid attr; the returned descriptor is owned below.
            let fd = unsafe {
                perf_event_open_sys::perf_event_open(
                    &mut attr,
                    pid as i32,
                    -1,
                    -1,
                    PERF_FLAG_FD_CLOEXEC as u64,
                )
            };
            ensure!(
                fd >= 0,
                "perf_event_open on syscalls:{event}: {}",
                std::io::Error::last_os_error()
            );
            // SAFETY: a fresh descriptor nothing else owns.
            fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        Ok(SyscallTracing { _counters: fds })
    }
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
