//! The host process from one read of /proc/PID/statm and stat: memory, faults and threads; and its
//! true peak RSS, the kernel's high-water mark, which a write to clear_refs resets.

use std::{
    fmt, fs, io,
    path::{Path, PathBuf},
};

use crate::record::process::ProcessStat;
use crate::record::sampling::Handles;

#[derive(Debug)]
pub enum ProcessError {
    /// The process has exited: it is a zombie or already reaped. Expected once the host
    /// stops, so callers match on it.
    Gone {
        pid: u32,
    },
    Unreadable {
        path: PathBuf,
        source: io::Error,
    },
    Malformed {
        line: String,
        why: &'static str,
    },
}

impl fmt::Display for ProcessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Gone { pid } => write!(f, "process {pid} has exited"),
            Self::Unreadable { path, source } => write!(
                f,
                "cannot read {} ({source}); run skillprof as root or as the host's user",
                path.display()
            ),
            Self::Malformed { line, why } => write!(
                f,
                "unexpected /proc/PID/stat or statm line ({why}): {line:?}; has the kernel's format changed?"
            ),
        }
    }
}

impl std::error::Error for ProcessError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Unreadable { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// The process's counts that walk a /proc list, and the limits they meet; each `None` if it
/// cannot be read (gone, or not ours to read).
pub fn handles(proc_root: &Path, pid: u32) -> Handles {
    let dir = proc_root.join(pid.to_string());
    // Memory mappings (VMAs), one line each of /proc/PID/maps.
    let lines = |file: &str| -> Option<u64> {
        let text = fs::read(dir.join(file)).ok()?;
        Some(text.iter().filter(|&&byte| byte == b'\n').count() as u64)
    };
    let process = procfs::process::Process::new_with_root(dir.clone()).ok();
    let limits = process.as_ref().and_then(|process| process.limits().ok());
    let soft = |limit: &procfs::process::Limit| match limit.soft_limit {
        procfs::process::LimitValue::Value(limit) => Some(limit),
        procfs::process::LimitValue::Unlimited => None,
    };
    let fds_limit = limits
        .as_ref()
        .and_then(|limits| soft(&limits.max_open_files));
    let as_limit_kb = limits
        .as_ref()
        .and_then(|limits| soft(&limits.max_address_space))
        .map(|bytes| bytes / 1024);
    Handles {
        maps_peak: lines("maps"),
        // One stat of /proc/PID/fd on Linux 6.2 and later, a walk of it before.
        fds_peak: process
            .and_then(|process| process.fd_count().ok())
            .map(|n| n as u64),
        fds_limit,
        as_limit_kb,
    }
}

/// Resets the process's RSS high-water mark (VmHWM) to its current RSS: `5` to
/// /proc/PID/clear_refs (proc(5), since Linux 4.0). Needs the right to ptrace it: root, or
/// its own user.
pub fn reset_peak(proc_root: &Path, pid: u32) -> io::Result<()> {
    fs::write(proc_root.join(pid.to_string()).join("clear_refs"), "5")
}

/// The process's RSS high-water mark since it started or since [`reset_peak`], in KB:
/// VmHWM of /proc/PID/status, which the kernel keeps as the most RSS the process held,
/// between any two samples too. `None` once the process is gone.
pub fn peak_rss_kb(proc_root: &Path, pid: u32) -> Option<u64> {
    procfs::process::Process::new_with_root(proc_root.join(pid.to_string()))
        .ok()?
        .status()
        .ok()?
        .vmhwm
}

/// The process at an entry's boundary: what [`read`] reads, and the counts too dear to read at
/// every sample (each walks the process's threads). A new per-entry reading of the host
/// process is one more field of [`ProcessStat`], read here.
pub fn at_boundary(proc_root: &Path, pid: u32) -> Result<ProcessStat, ProcessError> {
    let mut stat = read(proc_root, pid)?;
    stat.switches = switches(proc_root, pid);
    stat.cpu_ns = cpu_ns(pid);
    Ok(stat)
}

/// The process's CPU time so far, in ns: its CPU-time clock sums every thread's scheduler
/// runtime, the dead ones' included, as /proc/PID/stat does before it rounds to ticks.
fn cpu_ns(pid: u32) -> Option<u64> {
    use nix::time::{clock_getcpuclockid, clock_gettime};
    let clock = clock_getcpuclockid(nix::unistd::Pid::from_raw(pid as i32)).ok()?;
    let now = clock_gettime(clock).ok()?;
    Some(now.tv_sec() as u64 * 1_000_000_000 + now.tv_nsec() as u64)
}

/// `(voluntary, involuntary)` context switches summed over the process's threads: each
/// thread's /proc/PID/task/TID/status counts its own, and /proc/PID/status only the main
/// thread's. A thread that exits during the walk is left out.
fn switches(proc_root: &Path, pid: u32) -> Option<(u64, u64)> {
    let process = procfs::process::Process::new_with_root(proc_root.join(pid.to_string())).ok()?;
    let mut sum = (0, 0);
    for status in process
        .tasks()
        .ok()?
        .flatten()
        .filter_map(|task| task.status().ok())
    {
        sum.0 += status.voluntary_ctxt_switches?;
        sum.1 += status.nonvoluntary_ctxt_switches?;
    }
    Some(sum)
}

/// The process from its /proc/PID/statm (memory) and /proc/PID/stat (the rest), cheap enough
/// for every sample. Its RSS is statm's: since Linux 6.2 the kernel keeps a process's RSS as
/// per-CPU counters, and stat reads only their shared part, which lags each CPU's unsynced
/// changes by up to 31 pages per CPU and memory type (under 1 MiB on this 2-core machine,
/// about 95 MiB on 64 cores). statm and status sum every CPU's part on this machine's 6.18;
/// on 6.2 to 6.15 they may not, and only smaps_rollup, too dear for every sample, is exact
/// (docs/findings/2026-11-29-rss-from-stat-lags.md). statm is read first: a
/// host that exits between the two then reads as a zombie in stat, never as an RSS of 0.
pub fn read(proc_root: &Path, pid: u32) -> Result<ProcessStat, ProcessError> {
    let dir = proc_root.join(pid.to_string());
    let statm = read_to_string(dir.join("statm"), pid)?;
    let stat = read_to_string(dir.join("stat"), pid)?;
    parse(&stat, &statm, procfs::page_size())
}

fn read_to_string(path: PathBuf, pid: u32) -> Result<String, ProcessError> {
    match fs::read_to_string(&path) {
        Ok(text) => Ok(text),
        // ESRCH: the process exited between open and read.
        Err(source)
            if source.kind() == io::ErrorKind::NotFound
                || source.raw_os_error() == Some(libc::ESRCH) =>
        {
            Err(ProcessError::Gone { pid })
        }
        Err(source) => Err(ProcessError::Unreadable { path, source }),
    }
}

/// Parses one /proc/PID/stat line and the statm line read just before it. A zombie counts
/// as gone: its memory is already freed and reads 0, which is not a measurement of a running
/// host.
fn parse(stat: &str, statm: &str, page_size_bytes: u64) -> Result<ProcessStat, ProcessError> {
    let malformed = |line: &str, why| ProcessError::Malformed {
        line: line.trim_end().to_string(),
        why,
    };
    // The command name sits in parentheses and may itself hold spaces and parentheses;
    // only numbers and the state letter follow it, so the last `)` ends it.
    let (head, tail) = stat
        .rsplit_once(')')
        .ok_or_else(|| malformed(stat, "no `)` after the command name"))?;
    let pid = head
        .split_whitespace()
        .next()
        .and_then(|pid| pid.parse().ok())
        .ok_or_else(|| malformed(stat, "no pid"))?;
    let fields: Vec<&str> = tail.split_whitespace().collect();
    // Fields are numbered as in proc_pid_stat(5): the state is field 3.
    let field = |number: usize| -> Result<u64, ProcessError> {
        fields
            .get(number - 3)
            .and_then(|value| value.parse().ok())
            .ok_or_else(|| malformed(stat, "a numeric field is missing"))
    };
    if matches!(fields.first(), Some(&("Z" | "X"))) {
        return Err(ProcessError::Gone { pid });
    }
    // proc_pid_statm(5): size and resident come first, in pages.
    let mut pages = statm.split_whitespace().map(|value| value.parse::<u64>());
    let (Some(Ok(size)), Some(Ok(resident))) = (pages.next(), pages.next()) else {
        return Err(malformed(statm, "no size and resident pages in statm"));
    };
    Ok(ProcessStat {
        minflt: field(10)?,
        majflt: field(12)?,
        threads: field(20)?,
        cpu_ticks: field(14)? + field(15)?,
        cpu_ns: None,
        vms_kb: size * page_size_bytes / 1024,
        rss_kb: resident * page_size_bytes / 1024,
        switches: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: u64 = 4096;

    /// Captured from python3 holding a 30 MB bytearray and three sleeping threads, its
    /// name set to `py (a) b)`; /proc/PID/status said VmSize 267296 kB, Threads 4. Its statm
    /// line is written to agree.
    #[test]
    fn reads_a_process_whose_name_has_spaces_and_parentheses() {
        let stat = parse(
            include_str!("testdata/stat_threads"),
            "66824 10811 1536 1 0 8500 0\n",
            PAGE,
        )
        .unwrap();
        assert_eq!(
            stat,
            ProcessStat {
                rss_kb: 10811 * 4,
                vms_kb: 267296,
                minflt: 10257,
                majflt: 0,
                threads: 4,
                cpu_ticks: 8 + 2,
                cpu_ns: None,
                switches: None,
            }
        );
    }

    #[test]
    fn a_name_that_looks_like_fields_does_not_shift_them() {
        // bash renamed to `we ird) 1 (x`.
        let stat = parse(
            include_str!("testdata/stat_comm_with_parens"),
            "1090 780 600 200 0 100 0\n",
            PAGE,
        )
        .unwrap();
        assert_eq!((stat.minflt, stat.threads), (180, 1));
        assert_eq!(stat.vms_kb, 4464640 / 1024);
        assert_eq!(stat.rss_kb, 780 * 4);
    }

    #[test]
    fn a_zombie_is_gone() {
        let error = parse(
            include_str!("testdata/stat_zombie"),
            "0 0 0 0 0 0 0\n",
            PAGE,
        )
        .unwrap_err();
        assert!(matches!(error, ProcessError::Gone { pid: 6351 }), "{error}");
    }

    #[test]
    fn a_statm_without_its_pages_is_malformed() {
        let error = parse(include_str!("testdata/stat_threads"), "\n", PAGE).unwrap_err();
        assert!(matches!(error, ProcessError::Malformed { .. }), "{error}");
    }

    /// The RSS read is the kernel's exact sum, as smaps_rollup walks it: a process that faulted
    /// a few hundred pages and sleeps holds them, yet /proc/PID/stat (which skips the per-CPU
    /// parts) reads it up to 31 pages short per memory type.
    #[test]
    fn a_sleeping_processs_rss_is_the_sum_of_its_pages() {
        let mut sleeper = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = sleeper.id();
        let proc_root = Path::new(super::super::PROC);
        let state = || fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let started = std::time::Instant::now();
        while !state().contains(") S ") && started.elapsed().as_secs() < 10 {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let rollup = procfs::process::Process::new(pid as i32)
            .unwrap()
            .smaps_rollup()
            .unwrap();
        let summed = rollup.memory_map_rollup.0[0].extension.map["Rss"] / 1024;
        let read = read(proc_root, pid).unwrap().rss_kb;
        sleeper.kill().unwrap();
        sleeper.wait().unwrap();
        assert_eq!(
            read, summed,
            "read {read} KB, smaps_rollup sums {summed} KB"
        );
    }

    #[test]
    fn a_missing_process_is_gone() {
        let root = tempfile::tempdir().unwrap();
        let error = read(root.path(), 4242).unwrap_err();
        assert!(matches!(error, ProcessError::Gone { pid: 4242 }), "{error}");
    }

    #[test]
    fn a_truncated_line_is_malformed() {
        let error = parse("12 (x) S 1 2 3", "1 1 0 0 0 0 0", PAGE).unwrap_err();
        assert!(matches!(error, ProcessError::Malformed { .. }), "{error}");
    }

    #[test]
    fn the_peak_is_vmhwm_and_a_reset_brings_it_down_to_now() {
        assert_eq!(peak_rss_kb(Path::new("/nonexistent"), 4242), None);

        // This process: touch 256 MiB, free it, and the peak remembers it until reset. The
        // other tests of this binary run in it at the same time and move its RSS by tens of
        // MiB (the kernel symbols' test parses kallsyms): the block is far larger.
        let proc_root = Path::new(super::super::PROC);
        let me = std::process::id();
        let block = vec![1u8; 256 << 20];
        std::hint::black_box(&block);
        drop(block);
        let peak = peak_rss_kb(proc_root, me).unwrap();
        let now = read(proc_root, me).unwrap().rss_kb;
        assert!(peak >= now + 192 * 1024, "peak {peak} KB, now {now} KB");
        reset_peak(proc_root, me).unwrap();
        let reset = peak_rss_kb(proc_root, me).unwrap();
        assert!(
            reset + 128 * 1024 < peak,
            "after the reset {reset} KB, before {peak} KB"
        );
    }

    #[test]
    fn context_switches_are_summed_over_the_threads() {
        let proc_root = Path::new("/proc");
        let pid = std::process::id();
        let voluntary_of = |status: &str| -> u64 {
            let text = std::fs::read_to_string(status).unwrap();
            let line = text
                .lines()
                .find(|line| line.starts_with("voluntary_ctxt_switches:"))
                .unwrap();
            line.split_whitespace().nth(1).unwrap().parse().unwrap()
        };
        // A thread that sleeps gives up its CPU: voluntary switches of a thread that is not
        // the main one, which /proc/PID/status alone would miss.
        let (slept, asleep) = std::sync::mpsc::channel::<i32>();
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let sleeper = std::thread::spawn(move || {
            for _ in 0..5 {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            slept.send(nix::unistd::gettid().as_raw()).unwrap();
            wait.recv().unwrap();
        });
        let tid = asleep.recv().unwrap();
        // Both threads live until `during` is read, so the sum holds their counts at least.
        // (Not a difference from an earlier sum: the harness's other tests end threads
        // meanwhile, and an ended thread's switches leave /proc/PID/task.)
        let sleepers = voluntary_of(&format!("/proc/{pid}/task/{tid}/status"));
        let leaders = voluntary_of(&format!("/proc/{pid}/status"));
        let during = at_boundary(proc_root, pid).unwrap();
        go.send(()).unwrap();
        sleeper.join().unwrap();
        let (voluntary, _) = during.switches.unwrap();
        assert!(sleepers >= 5, "{sleepers}");
        assert!(
            voluntary >= sleepers + leaders,
            "{during:?}: the sleeper alone had {sleepers}, the leader {leaders}"
        );
    }

    #[test]
    fn reads_this_process() {
        let stat = read(Path::new(super::super::PROC), std::process::id()).unwrap();
        assert!(stat.rss_kb > 0 && stat.vms_kb >= stat.rss_kb && stat.threads >= 1);
    }
}
