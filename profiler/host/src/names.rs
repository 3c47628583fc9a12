//! Skill names become file names, so only a conservative alphabet is accepted: no path
//! separators, no dots (so no `..` and no hidden files), nothing a shell would mangle.

pub const MAX_LEN: usize = 64;

pub fn validate(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_LEN {
        return Err(format!(
            "skill names are 1 to {MAX_LEN} characters long, got {}",
            name.len()
        ));
    }
    match name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
    {
        Some(c) => Err(format!(
            "invalid skill name {name:?}: {c:?} is not allowed (use letters, digits, '_' and '-')"
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::{MAX_LEN, validate};

    #[test]
    fn accepts_harness_names() {
        for name in ["sample_py1", "sample_rs10", "hello", "a-b", "X"] {
            assert_eq!(validate(name), Ok(()), "{name}");
        }
    }

    #[test]
    fn refuses_paths_and_oddities() {
        let long = "a".repeat(MAX_LEN + 1);
        for name in [
            "",
            "../etc/passwd",
            "a/b",
            "a.wasm",
            "..",
            ".hidden",
            "a b",
            "a\\b",
            "é",
            &long,
        ] {
            assert!(validate(name).is_err(), "{name:?} should be refused");
        }
    }
}
