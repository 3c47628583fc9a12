//! Quantities in and out: sizes (`512M`, `2G`, `1GiB`) and CPU lists (`1`, `0-1,3`) on the
//! command line, and numbers as people read them, in tables (thousands separators) and in
//! sentences.

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

/// `1234567` as `1,234,567`, as Python's `{:,}` writes it (the harness's tables).
pub fn thousands(value: i128) -> String {
    let digits = value.unsigned_abs().to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    if value < 0 {
        out.push('-');
    }
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// A number as it reads in a sentence: three significant digits at most.
pub fn number(value: f64) -> String {
    match value.abs() {
        v if v >= 100.0 => format!("{value:.0}"),
        v if v >= 10.0 => format!("{value:.1}"),
        _ => format!("{value:.2}"),
    }
}

/// A measured count, rounded, with thousands separators.
pub fn count(value: f64) -> String {
    thousands(value.round() as i128)
}

/// Bytes in binary units, three significant figures: `812 MiB`, `1.10 GiB`, `4.0 KiB`.
pub fn bytes(value: f64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut scaled = value.abs();
    let mut unit = 0;
    while scaled >= 1024.0 && unit + 1 < UNITS.len() {
        scaled /= 1024.0;
        unit += 1;
    }
    let sign = if value < 0.0 { "-" } else { "" };
    let digits = match scaled {
        s if unit == 0 || s >= 100.0 => format!("{s:.0}"),
        s if s >= 10.0 => format!("{s:.1}"),
        s => format!("{s:.2}"),
    };
    format!("{sign}{digits} {}", UNITS[unit])
}

/// A signed size: `+812 MiB`, `-1.47 GiB`, `±0`.
pub fn change(value: f64) -> String {
    match value {
        v if v > 0.0 => format!("+{}", bytes(v)),
        v if v < 0.0 => bytes(v),
        _ => "±0".to_owned(),
    }
}

/// Pages of this machine as MiB with one decimal, for tables whose header names the unit:
/// `812.3`.
pub fn pages_in_mib(pages: u64) -> String {
    format!(
        "{:.1}",
        (pages * procfs::page_size()) as f64 / f64::from(1 << 20)
    )
}

/// Pages of this machine as MiB, for messages: `812.3 MiB`.
pub fn pages(pages: u64) -> String {
    format!("{} MiB", pages_in_mib(pages))
}

/// Kilobytes as whole MiB, for a line that changes several times a second: `812 MiB`.
pub fn whole_mib(kb: u64) -> String {
    format!("{:.0} MiB", kb as f64 / 1024.0)
}

/// Milliseconds with sense: `1,220 ms`, `38 ms`, `0.7 ms`.
pub fn ms(value: f64) -> String {
    if value >= 100.0 {
        format!("{} ms", count(value))
    } else if value >= 10.0 {
        format!("{value:.0} ms")
    } else {
        format!("{value:.1} ms")
    }
}

/// Large counts shortened: `5.6 M`, `206,411`.
pub fn many(value: f64) -> String {
    if value >= 10e6 {
        format!("{:.0} M", value / 1e6)
    } else if value >= 1e6 {
        format!("{:.1} M", value / 1e6)
    } else {
        count(value)
    }
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

#[cfg(test)]
mod words {
    use super::*;

    #[test]
    fn groups_thousands_like_python() {
        for (value, expected) in [
            (0, "0"),
            (999, "999"),
            (1000, "1,000"),
            (-1537472, "-1,537,472"),
            (123456, "123,456"),
            (-100, "-100"),
        ] {
            assert_eq!(thousands(value), expected);
        }
    }

    #[test]
    fn reads_like_prose() {
        assert_eq!(count(206411.0), "206,411");
        assert_eq!(count(-1537472.0), "-1,537,472");
        assert_eq!(bytes(812.0 * 1024.0 * 1024.0), "812 MiB");
        assert_eq!(bytes(1.1 * 1024.0 * 1024.0 * 1024.0), "1.10 GiB");
        assert_eq!(bytes(4096.0), "4.00 KiB");
        assert_eq!(change(-2048.0), "-2.00 KiB");
        assert_eq!(change(0.0), "±0");
        assert_eq!(ms(1220.4), "1,220 ms");
        assert_eq!(ms(38.2), "38 ms");
        assert_eq!(ms(0.71), "0.7 ms");
        assert_eq!(many(5_600_000.0), "5.6 M");
        assert_eq!(many(206_411.0), "206,411");
    }
}
