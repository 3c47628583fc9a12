//! Command-line values: sizes (`512M`, `2G`, `1GiB`) and CPU lists (`1`, `0-1,3`).

/// Bytes from a number with an optional binary suffix K, M, G or T (also KiB, MB...; all
/// powers of 1024).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let digits = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let suffix = &text[digits.len()..];
    let shift = match suffix
        .to_ascii_uppercase()
        .trim_end_matches('B')
        .trim_end_matches('I')
    {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => return Err(format!("unknown size suffix in {text:?}: use K, M, G or T")),
    };
    let number: u64 = digits
        .parse()
        .map_err(|_| format!("expected a size such as 512M or 2G, got {text:?}"))?;
    number
        .checked_mul(1 << shift)
        .filter(|&bytes| bytes > 0)
        .ok_or_else(|| format!("{text:?} is not a usable size"))
}

/// CPU numbers from `0-1,3`.
pub fn parse_cpus(text: &str) -> Result<Vec<usize>, String> {
    let mut cpus = Vec::new();
    for part in text.split(',') {
        let number = |n: &str| {
            n.trim()
                .parse::<usize>()
                .map_err(|_| format!("expected CPUs such as 1 or 0-1,3, got {text:?}"))
        };
        match part.split_once('-') {
            Some((first, last)) => {
                let (first, last) = (number(first)?, number(last)?);
                if first > last {
                    return Err(format!("{part:?} runs backwards"));
                }
                cpus.extend(first..=last);
            }
            None => cpus.push(number(part)?),
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// Pins this process (and every thread and child it starts afterwards) to `cpus`.
pub fn pin(cpus: &[usize]) -> anyhow::Result<()> {
    // SAFETY: a zeroed cpu_set_t is empty; CPU_SET stays within it for numbers below
    // CPU_SETSIZE, which the check ensures.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &cpu in cpus {
            anyhow::ensure!(
                cpu < libc::CPU_SETSIZE as usize,
                "CPU {cpu} is beyond what the kernel's affinity mask can name"
            );
            libc::CPU_SET(cpu, &mut set);
        }
        if libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) != 0 {
            let error = std::io::Error::last_os_error();
            anyhow::bail!("pinning to CPUs {cpus:?}: {error} (is every CPU online?)");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_suffixes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("64mb"), Ok(64 << 20));
        assert!(parse_size("1.5G").is_err());
        assert!(parse_size("2X").unwrap_err().contains("suffix"));
        assert!(parse_size("0").is_err());
    }

    #[test]
    fn cpu_lists_take_ranges() {
        assert_eq!(parse_cpus("1"), Ok(vec![1]));
        assert_eq!(parse_cpus("0-2,1,5"), Ok(vec![0, 1, 2, 5]));
        assert!(parse_cpus("3-1").is_err());
        assert!(parse_cpus("a").is_err());
    }
}
