//! The cmds hash: how a run log says which workload it ran, so that only runs of the same
//! workload are compared. It must equal the harness's value for the same file: SHA-1 (hex)
//! of Python's `str()` of the list of token lists, e.g. `[['add_py'], ['4', 'add_py']]`.

use sha1::{Digest, Sha1};

pub(super) fn cmds_hash<'a>(token_lists: impl IntoIterator<Item = &'a [&'a str]>) -> String {
    let lists: Vec<String> = token_lists
        .into_iter()
        .map(|tokens| python_list(tokens.iter().map(|token| python_repr(token))))
        .collect();
    format!("{:x}", Sha1::digest(python_list(lists).as_bytes()))
}

fn python_list(items: impl IntoIterator<Item = String>) -> String {
    format!("[{}]", items.into_iter().collect::<Vec<_>>().join(", "))
}

/// Python 3's `repr()` of a string, exact for ASCII: single quotes unless the string holds a
/// single quote and no double quote; backslash, the chosen quote, `\t` `\n` `\r` and other
/// control characters escaped.
///
/// Non-ASCII: Python keeps printable characters as they are and escapes the others. We keep
/// every non-ASCII character except the C1 controls (U+0080..U+009F), which we escape as Python
/// does; invisible format characters (U+200B, ...), private-use and unassigned code points would
/// be escaped by Python, so a token holding one would hash differently from the harness (whose
/// verdict on unassigned code points depended on its Python's Unicode version anyway).
fn python_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut repr = String::with_capacity(s.len() + 2);
    repr.push(quote);
    for c in s.chars() {
        match c {
            '\\' => repr.push_str("\\\\"),
            c if c == quote => {
                repr.push('\\');
                repr.push(c);
            }
            '\t' => repr.push_str("\\t"),
            '\n' => repr.push_str("\\n"),
            '\r' => repr.push_str("\\r"),
            c if c.is_control() => repr.push_str(&format!("\\x{:02x}", u32::from(c))),
            c => repr.push(c),
        }
    }
    repr.push(quote);
    repr
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repr_matches_python() {
        // Expected values printed by CPython 3.11.
        for (s, repr) in [
            ("add_py", "'add_py'"),
            ("it's", "\"it's\""),
            ("it's \"x\"", "'it\\'s \"x\"'"),
            ("say \"hi\"", "'say \"hi\"'"),
            ("back\\slash", "'back\\\\slash'"),
            ("\x00\x07\x1b\x7f", "'\\x00\\x07\\x1b\\x7f'"),
            ("tab\tnl\ncr\r", "'tab\\tnl\\ncr\\r'"),
            ("Zoë😀", "'Zoë😀'"),
            ("\u{80}\u{9f}", "'\\x80\\x9f'"),
        ] {
            assert_eq!(python_repr(s), repr, "{s:?}");
        }
    }

    #[test]
    fn hashes_the_python_str_of_the_token_lists() {
        // hashlib.sha1(str([['add_py'], ['4', 'add_py'], ['skills']]).encode()).hexdigest()
        let lists: [&[&str]; 3] = [&["add_py"], &["4", "add_py"], &["skills"]];
        assert_eq!(cmds_hash(lists), "1d2ddfa058d0d4adffa31f8f2d7fd9e4a72125a1");
    }
}
