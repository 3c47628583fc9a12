//! `skillprof run` command line.

use std::path::PathBuf;

use clap::Args;

use crate::ground::band::Band;
use crate::ground::cpus::{self, CpuList};
use crate::producers::hostctl::HostStartArgs;
use crate::producers::probes::{MechanismArgs, time::TimeArgs};
use crate::record::host::TrimBy;
use crate::record::probes::ProbeMode;
use crate::record::profile::PythonSample;

const LONG_ABOUT: &str = "\
Run a cmds workload against a skill host and measure every entry.

skillprof starts the host (our skillhost by default) with a fresh skills directory inside the \
run folder, waits until it answers, then runs the file's entries in order with the 2024 \
harness's semantics, ending with `stop` (SIGTERM, then wait until the host is reaped). Per \
entry it records wall time, the host's RSS and VMS before and after, peak RSS, page faults, \
threads and request errors, and from BPF probes on the host (root needed; --no-probes \
runs without): its mmap/munmap/madvise/mprotect/brk calls and bytes, page faults, direct \
and memcg reclaim, and system-wide kswapd, LRU and slab shrinking, all attributed to the \
entry that caused them, plus a breakdown of the stop into signal, drain, exit, \
address-space teardown and reap; and the host's CPU time against the machine's busy and \
stolen CPU, for entries that are slow for want of a CPU.

Under pressure (--pressure BAND, or `pressure BAND|off` lines in the file) a balloon holds the \
machine's free memory in a watermark band while the entries run, and every entry records the \
band really held; a safety rule that stops the balloon is said in the rows, explain.md and at \
the end. --scale-factor widens the bands for the run, and --boost-factor 0 keeps the kernel \
from moving them on a fragmented machine. They need root, and all are undone on \
every exit path (see skillprof pressure --help).

With a host that marks its work (skillhost calls skillhost_mark around every request's polls \
and every compile), a uprobe follows the marks and every fault and syscall is also counted \
for the skill and phase (compile, instantiate, call, reset) it was caused by: skills.csv, and a \
sentence in explain.md naming the skills that dominate an entry. A host without markers is \
profiled by entry, and the run says so at its head. --stacks adds which code: the host's user \
stacks at every fault and address-space syscall, as a flamegraph per entry.

Under a limit (--memory-max SIZE) the host runs in a memory cgroup of its own; `fill_py` and \
`fill_rs` add skills until it holds no more, and say how many fitted and why they stopped \
(see skillprof capacity --help for the prediction to compare with).

A `trim` line asks the host's allocator to give back the free memory it keeps, and the \
entry's RSS drop is what it had kept: through the host profile's trim route (skillhost's POST \
/admin/trim), or --trim-by ptrace, glibc's malloc_trim(0) called inside any glibc host.

`l_execute_all` and `lo_execute` lines drive Locust (from scripts/setup.sh): a master and \
workers, each worker in a network namespace the run makes (veth pairs and a bridge, no route \
out), the host listening on the bridge's address. The swarm is the entry; Locust's merged \
requests, failures and percentiles per skill are read back beside the host's own served count \
(lo_execute's latencies count from each scheduled send). Root is needed, \
and everything made is removed on every exit path (see cmds/README.md).

The run folder runs/YYMMDD_HHMMSS.mmm/ receives:
  YYMMDD_HHMMSS.mmm_run.log  the harness's log format (skillprof compare reads it)
  commands.csv               one row per entry, every metric, units in the column names
  samples.csv                a time series: host RSS, faults, PSI, free memory per zone vs watermarks
  meta.json                  machine, kernel, host binary and configuration, workload, which probe
                             attached by which mechanism, the profiler's own cost; how the run ended
  explain.md                 one paragraph per entry: where its memory and time went, from the evidence
  host.log                   the host's own output
  skills.csv                 with a host that has markers: per entry, skill and phase, summing to the entry
  stacks/N.folded, N.svg     with --stacks: entry N's faults and syscalls by user stack, and a flamegraph
  events.csv                 with --events: every kernel event, timestamped
  load.csv, locust/          with l_execute_all, lo_execute: Locust's figures per skill; its plans and logs
Every file is flushed after each entry. Ctrl-C or SIGTERM stop the host, finish the files, mark \
the run incomplete in meta.json with the entries not run, and exit non-zero.

The whole cmds file is validated before anything starts; every bad line is reported as \
file:line: message.

Examples:
  sudo skillprof run cmds/bench.cmds
  sudo skillprof run cmds/bench.cmds -- --allocator pooling     # flags after -- go to skillhost
  sudo skillprof run cmds/bench.cmds --pressure high            # free memory held in [low, high)
  sudo skillprof run cmds/fill_py.cmds --memory-max 3G          # how many Python skills fit in 3 GiB
  sudo skillprof run cmds/bench.cmds --stacks                   # which code took the faults
  sudo skillprof run cmds/bench.cmds --cores 16                 # as on a 16-core server
  sudo skillprof run cmds/distributed.cmds                      # Locust from 4 namespaces
  sudo skillprof run cmds/smoke.cmds --host-bin ./other-host --host-arg=--dir={skills_dir} --host-arg=--port={port}";

#[derive(Args, Debug, Clone)]
#[command(about = "Run a cmds workload against a skill host and measure every entry", long_about = LONG_ABOUT)]
pub struct RunArgs {
    /// The workload: a cmds file (see cmds/README.md).
    #[arg(value_name = "FILE.cmds")]
    pub cmds: PathBuf,

    /// Folder under which the run folder is created.
    #[arg(long, default_value = "runs", value_name = "DIR")]
    pub out: PathBuf,

    /// The run folder itself, instead of a new time-stamped one under --out: created if
    /// missing, refused unless empty, so that no earlier run is mixed in or overwritten.
    #[arg(long, value_name = "DIR", conflicts_with = "out")]
    pub run_dir: Option<PathBuf>,

    /// When the run ends, print one JSON document on stdout: the run folder, meta.json's
    /// record and every entry's record (entries.jsonl's), with the figures commands.csv
    /// shows. The summary table and explain.md's text then go to stderr, with the progress.
    #[arg(long)]
    pub json: bool,

    /// How to start the host and speak its dialect of the skill API: a built-in profile
    /// (`skillhost`, `pharia-kernel-2024`, `pharia-engine-2025`; `wasmtime-serve` serves
    /// `skillprof slo` only) or a TOML file of the same shape (docs/profiles.md). It sets the host's arguments, environment, working-directory
    /// files, skill names (namespaces), routes and headers.
    #[arg(long, value_name = "NAME|FILE", default_value = "skillhost")]
    pub host_profile: String,

    /// Profile a host that is already running, process PID, instead of starting one: under
    /// systemd, in a container, by hand. Needs --host-url, and --skills-dir for a workload
    /// that registers or removes skills (`watch` windows need none: nothing is written where
    /// the host reads); --host-profile gives its dialect. Checked before anything runs: the
    /// process must be running, the URL must answer, and a skill written to --skills-dir must
    /// appear in the host's listing.
    /// The host is left running: `stop` is recorded as not run, unless --stop-attached.
    /// Listings are read as this run's skills only, so execute_all and delete_skill never
    /// touch the host's own.
    #[arg(
        long,
        value_name = "PID",
        requires = "host_url",
        conflicts_with_all = ["host_bin", "host_args", "host_env", "host_flags"]
    )]
    pub attach: Option<u32>,

    /// With --attach: the address the host serves on, e.g. http://127.0.0.1:8081.
    #[arg(long, value_name = "URL", requires = "attach")]
    pub host_url: Option<String>,

    /// With --attach: the directory whose `<name>.wasm` files the host registers.
    #[arg(long, value_name = "DIR", requires = "attach")]
    pub skills_dir: Option<PathBuf>,

    /// With --attach: send the host SIGTERM at `stop`, as for a host skillprof started (its
    /// exit status stays unknown: only its parent can reap it).
    #[arg(long, requires = "attach")]
    pub stop_attached: bool,

    /// Run the host as it would run on an N-core machine: N compile threads
    /// (RAYON_NUM_THREADS), N async workers (TOKIO_WORKER_THREADS), glibc's arena limit of
    /// an N-core machine, 8 × N (MALLOC_ARENA_MAX), and jemalloc's 4 × N arenas
    /// (MALLOC_CONF=narenas), for skillhost and any host built on wasmtime's parallel
    /// compilation, tokio and glibc or jemalloc. What a compile leaves in malloc's
    /// arenas grows with them, so memory answers for a 16-core server need --cores 16.
    /// meta.json and explain.md say what was emulated and what cannot be (memory bandwidth,
    /// parallel wall time). Not with --attach: a running host's threads and arenas are made.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub cores: Option<u32>,

    #[command(flatten)]
    pub host: HostStartArgs,

    /// Where the sample skill components are [default: build/skills of this checkout]. The
    /// components of the world the host profile names are taken: those for `pharia:skill`
    /// from the folder's pharia-skill/.
    #[arg(long, value_name = "DIR")]
    pub samples: Option<PathBuf>,

    /// The Python skill `add_py` registers (as sample_py1, sample_py2, ...): `pydantic`, the
    /// 2024 study's kind of skill, with pydantic's native core; or `pure`, the same work in
    /// pure Python.
    #[arg(long, value_enum, value_name = "KIND", default_value = "pydantic")]
    pub python_sample: PythonSample,

    /// Sampling interval of samples.csv and of peak RSS, in milliseconds.
    #[arg(long, default_value_t = 100, value_name = "MS")]
    pub interval_ms: u64,

    /// Most requests one p_execute_all may have in flight (TIMES × skills).
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    pub max_in_flight: u64,

    /// How long to wait for the host to answer its health check, in seconds.
    #[arg(long, default_value_t = 60, value_name = "S")]
    pub ready_timeout_s: u64,

    /// How long to wait for the host to list or unlist a skill, in seconds.
    #[arg(long, default_value_t = 60, value_name = "S")]
    pub list_timeout_s: u64,

    /// Write skill files in place instead of under a temporary name renamed into place, as
    /// the 2024 harness copied them: to reproduce what a host does with a file it sees
    /// half-written. Every time, not by chance: the first half is written, the host is left to
    /// list it, then the rest is written and the skill executed. explain.md names a skill a
    /// host compiles again because of it.
    #[arg(long)]
    pub no_atomic_copy: bool,

    /// How `trim` lines ask the host's allocator to give its free memory back: `route`, the
    /// host profile's trim route (skillhost's POST /admin/trim); `ptrace`, glibc's
    /// malloc_trim(0) called inside any glibc host through ptrace (root): one thread blocked
    /// in epoll_wait or the like is stopped, made to call it, and put back, a few
    /// milliseconds, while the others run on. docs/memory.md says what it risks [default: route,
    /// if the profile has one].
    #[arg(long, value_enum, value_name = "HOW")]
    pub trim_by: Option<TrimBy>,

    /// How long the host may take to exit after SIGTERM before it is SIGKILLed, in seconds.
    #[arg(long, default_value_t = 120, value_name = "S")]
    pub stop_timeout_s: u64,

    /// Run without BPF probes (no root needed): procfs and the sampler only. Every probe
    /// column of commands.csv stays empty, never zero, and meta.json says probes were off.
    #[arg(long)]
    pub no_probes: bool,

    /// Which probes run. `calls`: every memory call (mmap, munmap, mremap, mprotect, madvise,
    /// brk) of the host, by kind, entry and skill, from programs on those syscalls, which
    /// every process on the machine passes through; faults are the kernel's own counts.
    /// `exact`: also every page fault, split into reads and writes, user and kernel mode,
    /// from a program on every fault of the machine (on a fault-heavy host as much again as
    /// the rest: docs/defaults.md). `host-only`: no program on any syscall or fault path, so
    /// only the host pays; faults per entry are the kernel's own counts and per skill the
    /// host's ledger's. Default: host-only with --attach (a production host); for a host
    /// skillprof starts, calls where the kernel attaches function probes (fexit, kprobes) to
    /// the memory calls, else host-only, since a syscall tracepoint sends every syscall of
    /// every process down the kernel's slow path (the run's head says which and why).
    /// --stacks and --events need exact, --syscall-latency calls.
    #[arg(long, value_enum, value_name = "MODE", conflicts_with = "no_probes")]
    pub probes: Option<ProbeMode>,

    /// The same as --probes exact (the flag of earlier versions).
    #[arg(long, hide = true, conflicts_with_all = ["no_probes", "probes"])]
    pub trace_syscalls: bool,

    /// In exact mode, also time each memory call from its entry to its exit
    /// (`*_lat_us`, `*_lat_max_us`): a program at every call's entry too, and two clock reads
    /// per call. Without it those columns stay empty.
    #[arg(long, conflicts_with = "no_probes")]
    pub syscall_latency: bool,

    /// Leave the host's markers unread: no per-skill rows (skills.csv), entries only, and no
    /// lease on the host's ledger, so its marks record nothing. While skillprof reads the
    /// ledger, each mark costs the host one getrusage (no probe, no program): the one cost
    /// the default mode puts on the host's ordinary work (`cargo bench --bench overhead`).
    #[arg(long, conflicts_with = "no_probes")]
    pub no_markers: bool,

    /// Also stream every kernel event to events.csv (time, entry, thread, kind, fields),
    /// and report events lost when the ring buffer was full. Needs exact mode.
    #[arg(long, conflicts_with = "no_probes")]
    pub events: bool,

    /// Also walk the host's user stack at every page fault and address-space syscall, and
    /// write per entry stacks/ENTRY.folded and a flamegraph stacks/ENTRY.svg: which code took
    /// the faults, by skill (a wasm function, by its name in wasmtime's perf map, which
    /// skillhost then writes; or wasmtime itself: instantiation, memory growth,
    /// compilation). The kernel walks frame pointers: skillhost is built with them. Needs
    /// exact mode.
    #[arg(long, conflicts_with = "no_probes")]
    pub stacks: bool,

    #[command(flatten)]
    pub mechanisms: MechanismArgs,

    #[command(flatten)]
    pub time: TimeArgs,

    /// Hold free memory in a watermark band (baseline, promo, high or low) for the whole run,
    /// with a balloon that shrinks as the host grows; `pressure BAND|off` in the cmds file
    /// moves between bands. Every entry records the band actually held (pressure_* columns).
    /// See `skillprof pressure --help` for the bands and the safety rules.
    #[arg(long, value_name = "BAND", value_parser = crate::ground::band::parse)]
    pub pressure: Option<Band>,

    /// Set vm.watermark_scale_factor to N (1-3000) for the run, restored afterwards (by a
    /// guardian process, however the run ends). 200 makes each band 2% of memory wide instead
    /// of 0.1%, so a balloon can absorb a host's allocation bursts inside the band.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=3000))]
    pub scale_factor: Option<u32>,

    /// Set vm.watermark_boost_factor to N for the run, restored afterwards (by a guardian
    /// process, however the run ends). When an allocation has to take part of a pageblock of
    /// another migrate type (free memory is fragmented, as after a build), the kernel raises
    /// every watermark by up to N/10000 of the high watermark (15000 by default) until kswapd
    /// has reclaimed up to it, and every band moves up with it. 0 turns boosting off, so that
    /// a band stays where the configured watermarks put it; explain.md says when a boost
    /// moved a band.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32))]
    pub boost_factor: Option<u32>,

    /// Run the host in a memory cgroup of its own with this hard limit (e.g. 3G, 512M;
    /// needs root): the machine a capacity prediction is checked against, and what
    /// `fill_py`/`fill_rs` fill. Every entry records what the cgroup was charged, its limit
    /// hits and OOM kills (memcg_* columns); a host the OOM killer takes ends the run,
    /// marked as such, with every file written. The cgroup is removed on every exit path, by
    /// a guardian process after a SIGKILL.
    #[arg(long, value_name = "SIZE", value_parser = crate::ground::units::parse_size, conflicts_with = "attach")]
    pub memory_max: Option<u64>,

    /// Set vm.max_map_count to N for the run, restored afterwards (by a guardian process,
    /// however the run ends; needs root). Each live instance of an on-demand host holds
    /// several mappings, so the default 65,530 caps the requests in flight near 10,000;
    /// explain.md says when a run met it (maps_peak against the limit, ENOMEM from mmap and
    /// mprotect).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1024..))]
    pub max_map_count: Option<u64>,

    /// Set vm.overcommit_memory to MODE for the run (0 heuristic, 1 always, 2 strict),
    /// restored afterwards by a guardian process however the run ends (needs root). Under 2
    /// every writable private mapping counts against CommitLimit: a pooling host's table
    /// pool, committed up front, may not fit, and its start fails with wasmtime's error.
    #[arg(long, value_name = "MODE", value_parser = clap::value_parser!(u64).range(0..=2))]
    pub overcommit_memory: Option<u64>,

    /// How long to wait for free memory to reach a band, in seconds.
    #[arg(long, default_value_t = 120, value_name = "S")]
    pub pressure_timeout_s: u64,

    /// The CPUs skillprof's load generator runs on for `o_execute` and `c_execute` lines, a
    /// list like `0` (with the host on others, `--host-cpus`, the host's CPU is the host's
    /// alone) [default: wherever the kernel puts it, sharing the host's CPUs, which each
    /// traffic entry then says].
    #[arg(long, value_name = "LIST")]
    pub load_cpus: Option<CpuList>,

    /// Locust for `l_execute_all` and `lo_execute` lines: its `locust` executable (default: build/venv-locust,
    /// where scripts/setup.sh installs the pinned version).
    #[arg(long, value_name = "PATH")]
    pub locust: Option<PathBuf>,

    /// How long an `l_execute_all` or `lo_execute` waits for every Locust worker to connect to the master;
    /// past it the entry fails with the reason and the run goes on [default: 60].
    #[arg(long, value_name = "S")]
    pub locust_timeout_s: Option<u64>,

    /// Flags for skillhost (or appended to --host-bin's arguments), after `--`.
    #[arg(last = true, value_name = "HOST_FLAGS")]
    pub host_flags: Vec<String>,
}

impl RunArgs {
    /// Refuses a load generator on the host's CPUs.
    pub fn check_cpus(&self) -> anyhow::Result<()> {
        match (&self.host.host_cpus, &self.load_cpus) {
            (Some(host), Some(load)) => {
                cpus::disjoint(("--host-cpus", &host.0), ("--load-cpus", &load.0))
            }
            _ => Ok(()),
        }
    }

    /// The probe mode that runs: asked for, or by situation (host-only for a host skillprof
    /// attaches to), or the one a flag needs; `None` for a host skillprof starts with no
    /// flag that decides, whose mode the kernel decides (`probes::lab_default`). `Err` when a
    /// flag needs more than the mode asked for.
    pub fn probe_mode(&self) -> anyhow::Result<Option<ProbeMode>> {
        let asked = match self.trace_syscalls {
            true => Some(ProbeMode::Exact),
            false => self.probes,
        };
        let needs = [
            (
                self.stacks,
                ProbeMode::Exact,
                "--stacks walks the stack at each fault and memory call",
            ),
            (
                self.events,
                ProbeMode::Exact,
                "--events streams each fault and memory call",
            ),
            (
                self.syscall_latency,
                ProbeMode::Calls,
                "--syscall-latency times each memory call",
            ),
        ];
        // How many of the programs on every process's paths a mode runs.
        let depth = |mode: ProbeMode| match mode {
            ProbeMode::HostOnly => 0,
            ProbeMode::Calls => 1,
            ProbeMode::Exact => 2,
        };
        let needed = needs
            .iter()
            .filter(|(on, ..)| *on)
            .map(|&(_, mode, why)| (mode, why))
            .max_by_key(|(mode, _)| depth(*mode));
        if let (Some(asked), Some((needed, why))) = (asked, needed)
            && depth(asked) < depth(needed)
        {
            anyhow::bail!(
                "{why}: it needs --probes {}, not {}",
                needed.as_str(),
                asked.as_str()
            );
        }
        // A started host's default is calls or host-only, by the kernel: what any flag needs
        // (at least calls) decides it.
        let by_situation = self.attach.map(|_| ProbeMode::HostOnly);
        Ok(match (asked, needed) {
            (Some(mode), _) => Some(mode),
            (None, Some((needed, _)))
                if by_situation.is_none_or(|mode| depth(needed) > depth(mode)) =>
            {
                Some(needed)
            }
            (None, _) => by_situation,
        })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    /// The mode the flags decide, `None` where the kernel does.
    fn decided(flags: &[&str]) -> anyhow::Result<Option<ProbeMode>> {
        let argv = ["skillprof", "w.cmds"].iter().chain(flags);
        Cli::try_parse_from(argv)?.run.probe_mode()
    }

    fn mode(flags: &[&str]) -> anyhow::Result<ProbeMode> {
        Ok(decided(flags)?.expect("a mode the flags decide"))
    }

    fn by_kernel(flags: &[&str]) -> bool {
        decided(flags).unwrap().is_none()
    }

    const ATTACH: [&str; 4] = ["--attach", "1", "--host-url", "http://127.0.0.1:1"];

    #[test]
    fn a_started_hosts_mode_is_the_kernels_an_attached_one_only_pays_itself() {
        assert!(by_kernel(&[]));
        assert!(by_kernel(&["--no-markers"]));
        assert_eq!(mode(&ATTACH).unwrap(), ProbeMode::HostOnly);
        assert_eq!(mode(&["--syscall-latency"]).unwrap(), ProbeMode::Calls);
        let chosen = [&ATTACH[..], &["--probes", "exact"]].concat();
        assert_eq!(mode(&chosen).unwrap(), ProbeMode::Exact);
        assert_eq!(
            mode(&["--probes", "host-only"]).unwrap(),
            ProbeMode::HostOnly
        );
        // The flag of earlier versions still works.
        let old = [&ATTACH[..], &["--trace-syscalls"]].concat();
        assert_eq!(mode(&old).unwrap(), ProbeMode::Exact);
        // What needs exact mode asks for it on an attached host.
        let stacks = [&ATTACH[..], &["--stacks"]].concat();
        assert_eq!(mode(&stacks).unwrap(), ProbeMode::Exact);
        assert_eq!(mode(&["--events"]).unwrap(), ProbeMode::Exact);
        let latency = [&ATTACH[..], &["--syscall-latency"]].concat();
        assert_eq!(mode(&latency).unwrap(), ProbeMode::Calls);
        assert_eq!(
            mode(&["--syscall-latency", "--probes", "exact"]).unwrap(),
            ProbeMode::Exact
        );
    }

    #[test]
    fn what_needs_a_deeper_mode_is_refused_with_a_shallower_one() {
        for (flag, asked, needed) in [
            ("--stacks", "host-only", "exact"),
            ("--events", "calls", "exact"),
            ("--syscall-latency", "host-only", "calls"),
        ] {
            let error = mode(&["--probes", asked, flag]).unwrap_err().to_string();
            assert!(
                error.contains(flag) && error.contains(&format!("--probes {needed}, not {asked}")),
                "{error}"
            );
        }
        assert!(mode(&["--probes", "exact", "--trace-syscalls"]).is_err());
        assert!(mode(&["--probes", "sometimes"]).is_err());
    }
}
