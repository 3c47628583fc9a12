//! A set of CPUs as the kernel writes one (`0-1,3`) and a flag names it (`--host-cpus 1`):
//! plain data, which a record keeps and `system::affinity` pins a thread to.

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
