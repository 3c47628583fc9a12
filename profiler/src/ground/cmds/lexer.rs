//! Reading a cmds file the way the harness's Python did, so that old files split into the
//! same tokens and hash to the same value.

/// One line that holds a command: not blank and not a `#` comment.
#[derive(Debug)]
pub(super) struct Line<'a> {
    /// 1-based, counted over every line of the file, so errors point at the editor's line.
    pub number: usize,
    pub tokens: Vec<&'a str>,
}

/// The command lines of a cmds file.
///
/// Python's text mode ends lines at `\n`, `\r\n` and a lone `\r`; its `strip()` and `split()`
/// count more characters as whitespace than Rust does (`\x1c`..`\x1f`), which matters for
/// the hash. A leading UTF-8 byte order mark is dropped: editors add it silently, and the
/// harness would have read it as part of the first command.
pub(super) fn command_lines(text: &str) -> Vec<Line<'_>> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    text.split('\n')
        .flat_map(|line| line.strip_suffix('\r').unwrap_or(line).split('\r'))
        .enumerate()
        .filter_map(|(index, line)| {
            let tokens: Vec<&str> = line
                .split(is_python_whitespace)
                .filter(|token| !token.is_empty())
                .collect();
            let is_command = tokens.first().is_some_and(|first| !first.starts_with('#'));
            is_command.then_some(Line {
                number: index + 1,
                tokens,
            })
        })
        .collect()
}

fn is_python_whitespace(c: char) -> bool {
    c.is_whitespace() || ('\x1c'..='\x1f').contains(&c)
}

/// The value of `token` if Python's `int()` accepts it: an optional sign, then ASCII digits
/// with single underscores between them (`1_000`). Values too large for `i128` saturate,
/// which every range check then rejects. (Python also accepts non-ASCII decimal digits
/// such as `٤`; no cmds file uses them, so here they are not integers.)
pub(super) fn python_int(token: &str) -> Option<i128> {
    let digits = token.strip_prefix(['+', '-']).unwrap_or(token);
    let well_formed = !digits.is_empty()
        && !digits.starts_with('_')
        && !digits.ends_with('_')
        && !digits.contains("__");
    if !well_formed {
        return None;
    }
    let mut value: i128 = 0;
    for c in digits.chars().filter(|&c| c != '_') {
        value = value
            .saturating_mul(10)
            .saturating_add(i128::from(c.to_digit(10)?));
    }
    Some(if token.starts_with('-') {
        -value
    } else {
        value
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<(usize, Vec<&str>)> {
        command_lines(text)
            .into_iter()
            .map(|line| (line.number, line.tokens))
            .collect()
    }

    #[test]
    fn skips_blank_and_comment_lines_but_counts_them() {
        let text = "# a comment\n\n  add_py  \n\t# indented comment\n4   add_py\n";
        assert_eq!(lines(text), [(3, vec!["add_py"]), (5, vec!["4", "add_py"])]);
    }

    #[test]
    fn ends_lines_like_python_text_mode() {
        assert_eq!(
            lines("skills\r\ncached_skills\rstop"),
            [
                (1, vec!["skills"]),
                (2, vec!["cached_skills"]),
                (3, vec!["stop"])
            ]
        );
    }

    #[test]
    fn splits_on_python_whitespace() {
        assert_eq!(
            lines("execute_all\x1fBob\u{a0}20\u{3000}10"),
            [(1, vec!["execute_all", "Bob", "20", "10"])]
        );
    }

    #[test]
    fn drops_a_byte_order_mark() {
        assert_eq!(lines("\u{feff}add_py"), [(1, vec!["add_py"])]);
    }

    #[test]
    fn reads_integers_like_python_int() {
        for (token, value) in [
            ("0", 0),
            ("42", 42),
            ("0042", 42),
            ("+7", 7),
            ("-3", -3),
            ("1_000", 1000),
        ] {
            assert_eq!(python_int(token), Some(value), "{token}");
        }
        for token in [
            "", "-", "1.5", "1e3", "abc", "_1", "1_", "1__0", "+-1", "٤", "0x10",
        ] {
            assert_eq!(python_int(token), None, "{token}");
        }
        assert_eq!(python_int(&"9".repeat(60)), Some(i128::MAX));
    }
}
