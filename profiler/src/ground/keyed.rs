//! Lines of the form `key value [unit]`: the shape of /proc/meminfo (`MemFree:  123 kB`)
//! and /proc/vmstat (`pgfault 123`). One parser for both, so their quirks are handled once.

use anyhow::{Context, Result};

/// Each line's key (a trailing `:` dropped) and value, in file order. `file` names the
/// source in errors.
pub(crate) fn pairs<'a>(
    text: &'a str,
    file: &'a str,
) -> impl Iterator<Item = Result<(&'a str, u64)>> + 'a {
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(move |line| {
            let mut words = line.split_whitespace();
            let key = words.next().map(|key| key.trim_end_matches(':'));
            let value = words.next().and_then(|value| value.parse().ok());
            key.zip(value).with_context(|| {
                format!(
                    "{file}: expected `key value`, found {line:?}; has the kernel's format changed?"
                )
            })
        })
}

/// The value of `key`, if a well-formed line has it (cgroup files such as memory.events and
/// memory.oom_control have the same shape).
pub(crate) fn value(text: &str, key: &str) -> Option<u64> {
    pairs(text, "")
        .find_map(|pair| pair.ok().filter(|(name, _)| *name == key))
        .map(|(_, value)| value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_lose_their_colon_and_units_are_ignored() {
        let text = "MemFree:        21893936 kB\nHugePages_Total:       0\n\npgfault 58782828\n";
        let pairs: Vec<_> = pairs(text, "test").collect::<Result<_>>().unwrap();
        assert_eq!(
            pairs,
            [
                ("MemFree", 21893936),
                ("HugePages_Total", 0),
                ("pgfault", 58782828)
            ]
        );
    }

    #[test]
    fn a_line_without_a_number_is_an_error_naming_the_file_and_line() {
        let error = pairs("pgfault lots\n", "/proc/vmstat")
            .collect::<Result<Vec<_>>>()
            .unwrap_err()
            .to_string();
        assert!(error.contains("/proc/vmstat"), "{error}");
        assert!(error.contains("pgfault lots"), "{error}");
    }
}
