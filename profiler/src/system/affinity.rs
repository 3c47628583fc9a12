//! Which CPUs a thread or a host may run on: a list as the kernel writes one (`0-1,3`), and
//! the calling thread pinned to it (sched_setaffinity, inherited by the threads and the
//! process it then starts). A host and a load generator on CPUs of their own measure the
//! host alone.

use anyhow::{Result, bail};

/// A set of CPUs, as a flag names it (`--host-cpus 1`, `--load-cpus 0`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CpuList(pub Vec<usize>);

impl std::str::FromStr for CpuList {
    type Err = String;

    fn from_str(text: &str) -> Result<CpuList, String> {
        parse_list(text).map(CpuList)
    }
}

impl std::fmt::Display for CpuList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&format_list(&self.0))
    }
}

/// `0`, `1-3`, `0,2-3`: the CPUs listed, sorted, each once. Refuses an empty list, a CPU
/// beyond what sched_setaffinity can name, and a CPU this machine does not have.
pub fn parse_list(text: &str) -> Result<Vec<usize>, String> {
    let online = std::thread::available_parallelism().map_or(usize::MAX, |n| n.get());
    let mut cpus = Vec::new();
    for part in text.split(',').map(str::trim) {
        let (first, last) = match part.split_once('-') {
            Some((first, last)) => (first, last),
            None => (part, part),
        };
        let number = |token: &str| {
            token
                .trim()
                .parse::<usize>()
                .map_err(|_| format!("a CPU list is numbers and ranges like 0,2-3; got {text:?}"))
        };
        let (first, last) = (number(first)?, number(last)?);
        if first > last {
            return Err(format!("the range {part} runs backwards"));
        }
        cpus.extend(first..=last);
    }
    cpus.sort_unstable();
    cpus.dedup();
    if let Some(&highest) = cpus.last()
        && (highest >= libc::CPU_SETSIZE as usize || highest >= online)
    {
        return Err(format!(
            "CPU {highest} is not on this machine ({online} CPUs here: 0-{})",
            online - 1
        ));
    }
    Ok(cpus)
}

/// The list as `parse_list` reads it: `0,2,3`.
pub fn format_list(cpus: &[usize]) -> String {
    cpus.iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Pins the calling thread (and what it starts from now on) to `cpus`. Async-signal-safe:
/// a child may call it between fork and exec.
pub fn pin_current_thread(cpus: &[usize]) -> std::io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is the empty set; every CPU was checked to be below
    // CPU_SETSIZE when the list was parsed.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &cpu in cpus {
            libc::CPU_SET(cpu, &mut set);
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Refuses two CPU sets that share a CPU, naming both flags.
pub fn disjoint(a: (&str, &[usize]), b: (&str, &[usize])) -> Result<()> {
    if let Some(shared) = a.1.iter().find(|cpu| b.1.contains(cpu)) {
        bail!(
            "{} and {} share CPU {shared}: give each CPUs of its own, so that the host's CPU \
             is the host's",
            a.0,
            b.0
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_kernels_list_syntax() {
        assert_eq!(parse_list("0").unwrap(), vec![0]);
        assert_eq!(parse_list("1,0,0-1").unwrap(), vec![0, 1]);
        assert!(parse_list("").is_err());
        assert!(parse_list("1-0").unwrap_err().contains("backwards"));
        assert!(
            parse_list("4096")
                .unwrap_err()
                .contains("not on this machine")
        );
        assert!(parse_list("one").is_err());
        assert_eq!(format_list(&[0, 2, 3]), "0,2,3");
        assert!(disjoint(("--host-cpus", &[1]), ("--load-cpus", &[0])).is_ok());
        assert!(disjoint(("--host-cpus", &[0, 1]), ("--load-cpus", &[1])).is_err());
    }
}
