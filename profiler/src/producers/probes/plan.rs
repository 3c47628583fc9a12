//! The attach plan: which probes exist and, for each, the mechanisms to try in order.
//!
//! Mechanisms differ by kernel: on the machines skillprof runs on (6.18), fentry loads fail
//! with EPERM and kprobes are not configured, while tracepoints and tp_btf work; on Debian's
//! 6.1 everything works. So a probe lists every mechanism that can observe its events, in the
//! order fentry/fexit, kprobe, tp_btf, classic tracepoint, and the first that attaches wins.
//! Why that order: fentry/fexit run from a BPF trampoline and see arguments and return values
//! (exit_mmap's duration, a fault's major bit); kprobes see the same at a higher cost; tp_btf
//! programs are called directly by the tracepoint with its C arguments (no record is built);
//! a classic tracepoint first builds the trace record, then runs the program.
//!
//! Every outcome is a [`ProbeStatus`], with every mechanism tried and why it failed or was
//! skipped: never a silent fallback.

use std::collections::HashSet;

use anyhow::{Context as _, Result, bail};
use aya::{
    Btf, Ebpf,
    programs::{BtfTracePoint, FEntry, FExit, KProbe, Program, TracePoint},
};

use super::{formats, tracefs};
use crate::record::probes::{Attempt, Mechanism, Outcome, Probe, ProbeMode, ProbeStatus, Tracefs};

impl Mechanism {
    pub const ALL: [Mechanism; 8] = [
        Self::Fentry,
        Self::Kprobe,
        Self::TpBtf,
        Self::Tracepoint,
        Self::PerfCounter,
        Self::PerfEvent,
        Self::Uprobe,
        Self::Ledger,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fentry => "fentry",
            Self::Kprobe => "kprobe",
            Self::TpBtf => "tp_btf",
            Self::Tracepoint => "tracepoint",
            Self::PerfCounter => "perf_counter",
            Self::PerfEvent => "perf_event",
            Self::Uprobe => "uprobe",
            Self::Ledger => "ledger",
        }
    }

    pub fn parse(text: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|m| m.as_str() == text || (text == "fexit" && *m == Self::Fentry))
            .with_context(|| {
                format!(
                    "unknown mechanism {text:?}; known: {}",
                    Self::ALL.map(Self::as_str).join(", ")
                )
            })
    }
}

impl std::fmt::Display for Mechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One program attached to one place.
#[derive(Debug)]
pub enum Hook {
    Tracepoint {
        program: &'static str,
        category: &'static str,
        name: &'static str,
    },
    TpBtf {
        program: &'static str,
        tracepoint: &'static str,
    },
    FEntry {
        program: &'static str,
        function: &'static str,
    },
    FExit {
        program: &'static str,
        function: &'static str,
    },
    /// A kprobe or a kretprobe (the program's section says which).
    KProbe {
        program: &'static str,
        function: &'static str,
    },
}

impl Hook {
    pub fn program(&self) -> &'static str {
        match *self {
            Self::Tracepoint { program, .. }
            | Self::TpBtf { program, .. }
            | Self::FEntry { program, .. }
            | Self::FExit { program, .. }
            | Self::KProbe { program, .. } => program,
        }
    }

    fn place(&self) -> String {
        match self {
            Self::Tracepoint { category, name, .. } => format!("{category}:{name}"),
            Self::TpBtf { tracepoint, .. } => format!("tp_btf/{tracepoint}"),
            Self::FEntry { function, .. } => format!("fentry/{function}"),
            Self::FExit { function, .. } => format!("fexit/{function}"),
            Self::KProbe { program, function } => {
                let kind = if program.starts_with("kretprobe") {
                    "kretprobe"
                } else {
                    "kprobe"
                };
                format!("{kind}/{function}")
            }
        }
    }
}

/// One way to attach a probe: a mechanism and every hook it needs (all or nothing).
#[derive(Debug)]
pub struct Attach {
    pub mechanism: Mechanism,
    pub hooks: &'static [Hook],
}

/// A kernel event group skillprof observes, with its attach plan.
#[derive(Debug)]
pub struct ProbePlan {
    pub probe: Probe,
    /// What it measures, for the table.
    pub what: &'static str,
    /// Mechanisms to try, best first. Never empty.
    pub plan: &'static [Attach],
}

impl ProbePlan {
    fn mechanisms(&self) -> Vec<Mechanism> {
        self.plan.iter().map(|how| how.mechanism).collect()
    }
}

impl ProbeStatus {
    /// A probe left out of the host-only mode: every mechanism of its plan skipped, and why.
    pub fn exact_mode_only(probe: &ProbePlan) -> Self {
        let modes = match ProbeMode::Calls.runs(probe.probe) {
            true => "calls and exact modes only (--probes calls)",
            false => "exact mode only (--probes exact)",
        };
        let why = format!(
            "{modes}: its programs run for every process on the machine, not only the host"
        );
        Self::left_out(probe.probe, &probe.mechanisms(), Outcome::ExactOnly, &why)
    }

    /// A probe that measures what the run did not ask for, and the flag that asks.
    pub fn left_unasked(probe: &ProbePlan, flag: &str) -> Self {
        let why = format!("not asked for ({flag})");
        Self::left_out(probe.probe, &probe.mechanisms(), Outcome::NotAsked, &why)
    }

    /// A probe the host-only mode leaves out, and `why`, for each of its `mechanisms`.
    pub fn left_to_exact_mode(probe: Probe, mechanisms: &[Mechanism], why: &str) -> Self {
        Self::left_out(probe, mechanisms, Outcome::ExactOnly, why)
    }

    fn left_out(probe: Probe, mechanisms: &[Mechanism], outcome: Outcome, why: &str) -> Self {
        ProbeStatus {
            probe,
            mechanism: mechanisms[0],
            attached: false,
            detail: why.to_owned(),
            attempts: mechanisms
                .iter()
                .map(|&mechanism| Attempt {
                    mechanism,
                    outcome: outcome.clone(),
                    detail: why.to_owned(),
                })
                .collect(),
            programs: Vec::new(),
        }
    }

    /// The status of a probe outside the BPF plan, with one mechanism (the major-fault perf
    /// counter, the host's markers): where it attached, or why not, and its BPF programs.
    pub fn single(
        probe: Probe,
        mechanism: Mechanism,
        result: &Result<String, String>,
        programs: &[&str],
    ) -> Self {
        let (attached, detail) = match result {
            Ok(place) => (true, place.clone()),
            Err(why) => (false, why.clone()),
        };
        ProbeStatus {
            probe,
            mechanism,
            attached,
            detail: detail.clone(),
            attempts: vec![Attempt {
                mechanism,
                outcome: if attached {
                    Outcome::Attached
                } else {
                    Outcome::Failed
                },
                detail,
            }],
            programs: programs.iter().map(|p| (*p).to_owned()).collect(),
        }
    }
}

/// Which mechanisms a run may use.
#[derive(Clone, Debug, Default)]
pub enum Allowed {
    /// Every mechanism, best first.
    #[default]
    All,
    /// Only each plan's last mechanism (the most portable: classic tracepoints, or for
    /// syscalls the raw ones, which every kernel with tp_btf has).
    FallbackOnly,
    /// Only these.
    Only(Vec<Mechanism>),
}

impl Allowed {
    fn allows(&self, plan: &[Attach], index: usize) -> bool {
        match self {
            Self::All => true,
            Self::FallbackOnly => index + 1 == plan.len(),
            Self::Only(mechanisms) => mechanisms.contains(&plan[index].mechanism),
        }
    }
}

// ---- the probes ------------------------------------------------------------------------------

macro_rules! tp {
    ($program:literal, $category:literal, $name:literal) => {
        Hook::Tracepoint {
            program: $program,
            category: $category,
            name: $name,
        }
    };
}
macro_rules! btf {
    ($program:literal, $tracepoint:literal) => {
        Hook::TpBtf {
            program: $program,
            tracepoint: $tracepoint,
        }
    };
}
macro_rules! fentry {
    ($program:literal, $function:literal) => {
        Hook::FEntry {
            program: $program,
            function: $function,
        }
    };
}
macro_rules! fexit {
    ($program:literal, $function:literal) => {
        Hook::FExit {
            program: $program,
            function: $function,
        }
    };
}
macro_rules! kprobe {
    ($program:literal, $function:literal) => {
        Hook::KProbe {
            program: $program,
            function: $function,
        }
    };
}

pub const PROBES: &[ProbePlan] = &[
    // A call is counted at its exit (its arguments are in the saved user registers), so the
    // entry hooks are exit_group's, for the stop's timeline, and getrusage's, where the host's
    // ledger marks (the skill the thread's calls count for from then on); the latency probe
    // adds the others, with the same mechanism, when the run asks for it.
    ProbePlan {
        probe: Probe::Syscalls,
        what: "mmap, munmap, mremap, mprotect, madvise, brk (calls, bytes, errors), counted at their exit, by skill from the host's marks (getrusage), and exit_group",
        plan: &[
            Attach {
                mechanism: Mechanism::Fentry,
                hooks: &[
                    fexit!("fexit_sys_mmap", "__x64_sys_mmap"),
                    fexit!("fexit_sys_munmap", "__x64_sys_munmap"),
                    fexit!("fexit_sys_mremap", "__x64_sys_mremap"),
                    fexit!("fexit_sys_mprotect", "__x64_sys_mprotect"),
                    fexit!("fexit_sys_madvise", "__x64_sys_madvise"),
                    fexit!("fexit_sys_brk", "__x64_sys_brk"),
                    fentry!("fentry_sys_exit_group", "__x64_sys_exit_group"),
                    fentry!("fentry_sys_getrusage", "__x64_sys_getrusage"),
                ],
            },
            Attach {
                mechanism: Mechanism::Kprobe,
                hooks: &[
                    kprobe!("kretprobe_sys_exit", "__x64_sys_mmap"),
                    kprobe!("kretprobe_sys_exit", "__x64_sys_munmap"),
                    kprobe!("kretprobe_sys_exit", "__x64_sys_mremap"),
                    kprobe!("kretprobe_sys_exit", "__x64_sys_mprotect"),
                    kprobe!("kretprobe_sys_exit", "__x64_sys_madvise"),
                    kprobe!("kretprobe_sys_exit", "__x64_sys_brk"),
                    kprobe!("kprobe_sys_enter", "__x64_sys_exit_group"),
                    kprobe!("kprobe_sys_enter", "__x64_sys_getrusage"),
                ],
            },
            Attach {
                mechanism: Mechanism::Tracepoint,
                hooks: &[
                    tp!("tp_sys_exit", "syscalls", "sys_exit_mmap"),
                    tp!("tp_sys_exit", "syscalls", "sys_exit_munmap"),
                    tp!("tp_sys_exit", "syscalls", "sys_exit_mremap"),
                    tp!("tp_sys_exit", "syscalls", "sys_exit_mprotect"),
                    tp!("tp_sys_exit", "syscalls", "sys_exit_madvise"),
                    tp!("tp_sys_exit", "syscalls", "sys_exit_brk"),
                    tp!("tp_sys_enter", "syscalls", "sys_enter_exit_group"),
                    tp!("tp_sys_enter", "syscalls", "sys_enter_getrusage"),
                ],
            },
            // Last: the raw syscall tracepoints run a program for every syscall of every process
            // on the machine (the program returns after one compare for all but the host), which
            // probe_cost measures at about +330 ns per unrelated syscall. The classic per-syscall
            // tracepoints above run only for the syscalls they name and cost an unrelated
            // syscall about +90 ns (the kernel checks which syscall is traced), so they come
            // first wherever function probes cannot attach.
            Attach {
                mechanism: Mechanism::TpBtf,
                hooks: &[
                    btf!("btf_sys_enter", "sys_enter"),
                    btf!("btf_sys_exit", "sys_exit"),
                ],
            },
        ],
    },
    // Attached only with --syscall-latency, by the mechanism the syscalls probe attached with
    // (tp_btf's sys_enter program is already on every call: it times them itself).
    ProbePlan {
        probe: Probe::SyscallLatency,
        what: "the time of each counted call, enter to exit: a program at each call's entry and two clock reads",
        plan: &[
            Attach {
                mechanism: Mechanism::Fentry,
                hooks: &[
                    fentry!("fentry_sys_mmap", "__x64_sys_mmap"),
                    fentry!("fentry_sys_munmap", "__x64_sys_munmap"),
                    fentry!("fentry_sys_mremap", "__x64_sys_mremap"),
                    fentry!("fentry_sys_mprotect", "__x64_sys_mprotect"),
                    fentry!("fentry_sys_madvise", "__x64_sys_madvise"),
                    fentry!("fentry_sys_brk", "__x64_sys_brk"),
                ],
            },
            Attach {
                mechanism: Mechanism::Kprobe,
                hooks: &[
                    kprobe!("kprobe_sys_enter", "__x64_sys_mmap"),
                    kprobe!("kprobe_sys_enter", "__x64_sys_munmap"),
                    kprobe!("kprobe_sys_enter", "__x64_sys_mremap"),
                    kprobe!("kprobe_sys_enter", "__x64_sys_mprotect"),
                    kprobe!("kprobe_sys_enter", "__x64_sys_madvise"),
                    kprobe!("kprobe_sys_enter", "__x64_sys_brk"),
                ],
            },
            Attach {
                mechanism: Mechanism::Tracepoint,
                hooks: &[
                    tp!("tp_sys_enter", "syscalls", "sys_enter_mmap"),
                    tp!("tp_sys_enter", "syscalls", "sys_enter_munmap"),
                    tp!("tp_sys_enter", "syscalls", "sys_enter_mremap"),
                    tp!("tp_sys_enter", "syscalls", "sys_enter_mprotect"),
                    tp!("tp_sys_enter", "syscalls", "sys_enter_madvise"),
                    tp!("tp_sys_enter", "syscalls", "sys_enter_brk"),
                ],
            },
            Attach {
                mechanism: Mechanism::TpBtf,
                hooks: &[],
            },
        ],
    },
    ProbePlan {
        probe: Probe::PageFaults,
        what: "page faults of the host: user mode (count, writes; majors with fexit) and kernel mode on its user addresses",
        plan: &[
            Attach {
                mechanism: Mechanism::Fentry,
                hooks: &[fexit!("fexit_handle_mm_fault", "handle_mm_fault")],
            },
            Attach {
                mechanism: Mechanism::TpBtf,
                hooks: &[
                    btf!("btf_page_fault_user", "page_fault_user"),
                    btf!("btf_page_fault_kernel", "page_fault_kernel"),
                ],
            },
            Attach {
                mechanism: Mechanism::Tracepoint,
                hooks: &[
                    tp!("tp_page_fault_user", "exceptions", "page_fault_user"),
                    tp!("tp_page_fault_kernel", "exceptions", "page_fault_kernel"),
                ],
            },
        ],
    },
    ProbePlan {
        probe: Probe::Kswapd,
        what: "kswapd wakeups, who woke it, sleeps, time awake (system-wide)",
        plan: &[
            Attach {
                mechanism: Mechanism::TpBtf,
                hooks: &[
                    btf!("btf_kswapd_wake", "mm_vmscan_kswapd_wake"),
                    btf!("btf_kswapd_sleep", "mm_vmscan_kswapd_sleep"),
                    btf!("btf_wakeup_kswapd", "mm_vmscan_wakeup_kswapd"),
                ],
            },
            Attach {
                mechanism: Mechanism::Tracepoint,
                hooks: &[
                    tp!("tp_kswapd_wake", "vmscan", "mm_vmscan_kswapd_wake"),
                    tp!("tp_kswapd_sleep", "vmscan", "mm_vmscan_kswapd_sleep"),
                    tp!("tp_wakeup_kswapd", "vmscan", "mm_vmscan_wakeup_kswapd"),
                ],
            },
        ],
    },
    ProbePlan {
        probe: Probe::DirectReclaim,
        what: "direct reclaim: count, latency, pages (host; others counted apart)",
        plan: &[
            Attach {
                mechanism: Mechanism::TpBtf,
                hooks: &[
                    btf!("btf_direct_reclaim_begin", "mm_vmscan_direct_reclaim_begin"),
                    btf!("btf_direct_reclaim_end", "mm_vmscan_direct_reclaim_end"),
                ],
            },
            Attach {
                mechanism: Mechanism::Tracepoint,
                hooks: &[
                    tp!(
                        "tp_direct_reclaim_begin",
                        "vmscan",
                        "mm_vmscan_direct_reclaim_begin"
                    ),
                    tp!(
                        "tp_direct_reclaim_end",
                        "vmscan",
                        "mm_vmscan_direct_reclaim_end"
                    ),
                ],
            },
        ],
    },
    ProbePlan {
        probe: Probe::MemcgReclaim,
        what: "memcg limit reclaim: count, latency, pages (host; others counted apart)",
        plan: &[
            Attach {
                mechanism: Mechanism::TpBtf,
                hooks: &[
                    btf!("btf_memcg_reclaim_begin", "mm_vmscan_memcg_reclaim_begin"),
                    btf!("btf_memcg_reclaim_end", "mm_vmscan_memcg_reclaim_end"),
                ],
            },
            Attach {
                mechanism: Mechanism::Tracepoint,
                hooks: &[
                    tp!(
                        "tp_memcg_reclaim_begin",
                        "vmscan",
                        "mm_vmscan_memcg_reclaim_begin"
                    ),
                    tp!(
                        "tp_memcg_reclaim_end",
                        "vmscan",
                        "mm_vmscan_memcg_reclaim_end"
                    ),
                ],
            },
        ],
    },
    ProbePlan {
        probe: Probe::LruShrink,
        what: "LRU list shrinking: calls, pages scanned/reclaimed by kswapd/direct/memcg/other",
        plan: &[
            Attach {
                mechanism: Mechanism::TpBtf,
                hooks: &[
                    btf!("btf_lru_shrink_inactive", "mm_vmscan_lru_shrink_inactive"),
                    btf!("btf_lru_shrink_active", "mm_vmscan_lru_shrink_active"),
                ],
            },
            Attach {
                mechanism: Mechanism::Tracepoint,
                hooks: &[
                    tp!(
                        "tp_lru_shrink_inactive",
                        "vmscan",
                        "mm_vmscan_lru_shrink_inactive"
                    ),
                    tp!(
                        "tp_lru_shrink_active",
                        "vmscan",
                        "mm_vmscan_lru_shrink_active"
                    ),
                ],
            },
        ],
    },
    ProbePlan {
        probe: Probe::ShrinkNode,
        what: "shrink_node calls and time by kswapd/direct/memcg/other (function probes only; lru_shrink covers pages)",
        plan: &[
            Attach {
                mechanism: Mechanism::Fentry,
                hooks: &[
                    fentry!("fentry_shrink_node", "shrink_node"),
                    fexit!("fexit_shrink_node", "shrink_node"),
                ],
            },
            Attach {
                mechanism: Mechanism::Kprobe,
                hooks: &[
                    kprobe!("kprobe_shrink_node", "shrink_node"),
                    kprobe!("kretprobe_shrink_node", "shrink_node"),
                ],
            },
        ],
    },
    ProbePlan {
        probe: Probe::ShrinkSlab,
        what: "slab shrinkers: calls, objects freed, time",
        plan: &[
            Attach {
                mechanism: Mechanism::TpBtf,
                hooks: &[
                    btf!("btf_shrink_slab_start", "mm_shrink_slab_start"),
                    btf!("btf_shrink_slab_end", "mm_shrink_slab_end"),
                ],
            },
            Attach {
                mechanism: Mechanism::Tracepoint,
                hooks: &[
                    tp!("tp_shrink_slab_start", "vmscan", "mm_shrink_slab_start"),
                    tp!("tp_shrink_slab_end", "vmscan", "mm_shrink_slab_end"),
                ],
            },
        ],
    },
    ProbePlan {
        probe: Probe::Throttle,
        what: "reclaim throttling: count, time delayed",
        plan: &[
            Attach {
                mechanism: Mechanism::TpBtf,
                hooks: &[btf!("btf_throttled", "mm_vmscan_throttled")],
            },
            Attach {
                mechanism: Mechanism::Tracepoint,
                hooks: &[tp!("tp_throttled", "vmscan", "mm_vmscan_throttled")],
            },
        ],
    },
    ProbePlan {
        probe: Probe::Exit,
        what: "shutdown instants: termination signal delivered, thread exits, parent notified",
        plan: &[
            Attach {
                mechanism: Mechanism::TpBtf,
                hooks: &[
                    btf!("btf_signal_deliver", "signal_deliver"),
                    btf!("btf_sched_process_exit", "sched_process_exit"),
                    btf!("btf_signal_generate", "signal_generate"),
                ],
            },
            Attach {
                mechanism: Mechanism::Tracepoint,
                hooks: &[
                    tp!("tp_signal_deliver", "signal", "signal_deliver"),
                    tp!("tp_sched_process_exit", "sched", "sched_process_exit"),
                    tp!("tp_signal_generate", "signal", "signal_generate"),
                ],
            },
        ],
    },
    // tp_btf would get (mm, member) only: the counter value is computed by the trace event
    // itself, so this one is a classic tracepoint on every kernel.
    ProbePlan {
        probe: Probe::RssStat,
        what: "the host mm's RSS counters at teardown: its bounds and the pages freed",
        plan: &[Attach {
            mechanism: Mechanism::Tracepoint,
            hooks: &[tp!("tp_rss_stat", "kmem", "rss_stat")],
        }],
    },
    ProbePlan {
        probe: Probe::ExitMmap,
        what: "the address-space teardown, timed exactly (function probes only; rss_stat bounds it otherwise)",
        plan: &[
            Attach {
                mechanism: Mechanism::Fentry,
                hooks: &[
                    fentry!("fentry_exit_mmap", "exit_mmap"),
                    fexit!("fexit_exit_mmap", "exit_mmap"),
                ],
            },
            Attach {
                mechanism: Mechanism::Kprobe,
                hooks: &[
                    kprobe!("kprobe_exit_mmap", "exit_mmap"),
                    kprobe!("kretprobe_exit_mmap", "exit_mmap"),
                ],
            },
        ],
    },
];

/// Attaches probes, mounting tracefs the first time a classic tracepoint needs it.
#[derive(Default)]
pub struct Attacher {
    tracefs: Option<Result<Tracefs, String>>,
    btf: Option<Result<Btf, String>>,
    /// Programs loaded into the kernel so far (a program can serve several hooks).
    loaded: HashSet<&'static str>,
}

impl Attacher {
    /// What was done about tracefs, if any probe needed it.
    pub fn tracefs(&self) -> Option<Tracefs> {
        self.tracefs.clone().and_then(Result::ok)
    }

    pub fn attach(&mut self, ebpf: &mut Ebpf, probe: &ProbePlan, allowed: &Allowed) -> ProbeStatus {
        let mut attempts = Vec::new();
        let mut attached: Option<(Mechanism, String, Vec<String>)> = None;
        for (index, how) in probe.plan.iter().enumerate() {
            if attached.is_some() {
                attempts.push(Attempt {
                    mechanism: how.mechanism,
                    outcome: Outcome::Skipped,
                    detail: "a better mechanism attached".into(),
                });
                continue;
            }
            if !allowed.allows(probe.plan, index) {
                attempts.push(Attempt {
                    mechanism: how.mechanism,
                    outcome: Outcome::Skipped,
                    detail: "excluded by the mechanism selection (--mechanism/--force-fallback)"
                        .into(),
                });
                continue;
            }
            match self.try_attach(ebpf, how) {
                Ok(places) => {
                    let mut programs: Vec<String> =
                        how.hooks.iter().map(|h| h.program().to_string()).collect();
                    programs.dedup();
                    let detail = match places.is_empty() {
                        true => "by the programs of the syscalls probe, which see every call's \
                                 entry already"
                            .to_owned(),
                        false => summarize(&places),
                    };
                    attempts.push(Attempt {
                        mechanism: how.mechanism,
                        outcome: Outcome::Attached,
                        detail: places.join(", "),
                    });
                    attached = Some((how.mechanism, detail, programs));
                }
                Err(why) => {
                    self.unload(ebpf, how);
                    attempts.push(Attempt {
                        mechanism: how.mechanism,
                        outcome: Outcome::Failed,
                        detail: format!("{why:#}"),
                    });
                }
            }
        }
        let failures = attempts
            .iter()
            .filter(|a| a.outcome == Outcome::Failed)
            .map(|a| format!("{} failed: {}", a.mechanism, a.detail));
        match attached {
            Some((mechanism, place, programs)) => ProbeStatus {
                probe: probe.probe,
                mechanism,
                attached: true,
                detail: std::iter::once(place)
                    .chain(failures)
                    .collect::<Vec<_>>()
                    .join("; "),
                attempts,
                programs,
            },
            None => {
                let tried = attempts
                    .iter()
                    .rev()
                    .find(|a| a.outcome == Outcome::Failed)
                    .map_or(
                        probe.plan.last().expect("plans are never empty").mechanism,
                        |a| a.mechanism,
                    );
                let mut detail: Vec<String> = failures.collect();
                if detail.is_empty() {
                    detail.push("every mechanism of its plan was excluded".into());
                }
                ProbeStatus {
                    probe: probe.probe,
                    mechanism: tried,
                    attached: false,
                    detail: detail.join("; "),
                    attempts,
                    programs: Vec::new(),
                }
            }
        }
    }

    /// Loads and attaches every hook of one mechanism; returns where each attached.
    fn try_attach(&mut self, ebpf: &mut Ebpf, how: &Attach) -> Result<Vec<String>> {
        let mut places = Vec::new();
        for hook in how.hooks {
            self.attach_hook(ebpf, hook).with_context(|| hook.place())?;
            places.push(hook.place());
        }
        Ok(places)
    }

    fn attach_hook(&mut self, ebpf: &mut Ebpf, hook: &Hook) -> Result<()> {
        let name = hook.program();
        let first = self.loaded.insert(name);
        match *hook {
            Hook::Tracepoint { category, name, .. } => {
                self.tracefs
                    .get_or_insert_with(tracefs::ensure_mounted)
                    .clone()
                    .map_err(anyhow::Error::msg)?;
                formats::check(category, name)?;
                let program: &mut TracePoint = program(ebpf, hook)?.try_into()?;
                if first {
                    program.load().context("loading")?;
                }
                program.attach(category, name).context("attaching")?;
            }
            Hook::TpBtf { tracepoint, .. } => {
                let btf = self.btf()?;
                let program: &mut BtfTracePoint = program(ebpf, hook)?.try_into()?;
                program.load(tracepoint, btf).context("loading")?;
                program.attach().context("attaching")?;
            }
            Hook::FEntry { function, .. } => {
                let btf = self.btf()?;
                let program: &mut FEntry = program(ebpf, hook)?.try_into()?;
                program.load(function, btf).context("loading")?;
                program.attach().context("attaching")?;
            }
            Hook::FExit { function, .. } => {
                let btf = self.btf()?;
                let program: &mut FExit = program(ebpf, hook)?.try_into()?;
                program.load(function, btf).context("loading")?;
                program.attach().context("attaching")?;
            }
            Hook::KProbe { function, .. } => {
                if !std::path::Path::new("/sys/kernel/tracing/kprobe_events").exists()
                    && !std::path::Path::new("/sys/bus/event_source/devices/kprobe").exists()
                {
                    bail!("this kernel has no kprobes (CONFIG_KPROBES is not set)");
                }
                let program: &mut KProbe = program(ebpf, hook)?.try_into()?;
                if first {
                    program.load().context("loading")?;
                }
                program.attach(function, 0).context("attaching")?;
            }
        }
        Ok(())
    }

    /// Unloads (and so detaches) the programs of a mechanism that did not fully attach.
    fn unload(&mut self, ebpf: &mut Ebpf, how: &Attach) {
        for hook in how.hooks {
            let name = hook.program();
            if !self.loaded.remove(name) {
                continue;
            }
            if let Some(program) = ebpf.program_mut(name) {
                let _ = match program {
                    Program::TracePoint(p) => p.unload(),
                    Program::BtfTracePoint(p) => p.unload(),
                    Program::FEntry(p) => p.unload(),
                    Program::FExit(p) => p.unload(),
                    Program::KProbe(p) => p.unload(),
                    _ => Ok(()),
                };
            }
        }
    }

    fn btf(&mut self) -> Result<&Btf> {
        let btf = self.btf.get_or_insert_with(|| {
            Btf::from_sys_fs()
                .map_err(|e| format!("reading the kernel's BTF (/sys/kernel/btf/vmlinux): {e}"))
        });
        btf.as_ref().map_err(|e| anyhow::anyhow!("{e}"))
    }
}

fn program<'a>(ebpf: &'a mut Ebpf, hook: &Hook) -> Result<&'a mut Program> {
    let name = hook.program();
    ebpf.program_mut(name)
        .with_context(|| format!("program {name} is not in the BPF object"))
}

/// "syscalls:sys_enter_mmap, syscalls:sys_enter_munmap, ..." shortened to the first and a count.
fn summarize(places: &[String]) -> String {
    match places {
        [] => String::new(),
        [one] => one.clone(),
        [first, second] => format!("{first}, {second}"),
        [first, rest @ ..] => format!("{first} and {} more", rest.len()),
    }
}
