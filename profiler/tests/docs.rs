//! The documentation a user reads: every relative link in the repository's Markdown resolves
//! (to a file, and to a heading where it names one), and the README stays a front door.
//! The column reference (docs/columns.md) is checked against the field table by the record's
//! own test.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The Markdown files a user reads: the README, docs/ and the READMEs of the top folders.
fn markdown_files() -> Vec<PathBuf> {
    let root = repo();
    let mut files = vec![root.join("README.md")];
    for folder in ["docs", "docs/findings"] {
        for entry in fs::read_dir(root.join(folder)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    for folder in ["cmds", "skills", "profiler/profiles"] {
        let readme = root.join(folder).join("README.md");
        if readme.is_file() {
            files.push(readme);
        }
    }
    files.sort();
    files
}

/// `[text](target)` link targets, outside code blocks and spans.
fn links(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut in_block = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if in_block {
            continue;
        }
        // Code spans may hold `](`; drop them first.
        let line: String = line.split('`').step_by(2).collect::<Vec<_>>().join("");
        let mut rest = line.as_str();
        while let Some(start) = rest.find("](") {
            let after = &rest[start + 2..];
            let Some(end) = after.find(')') else { break };
            found.push(after[..end].to_owned());
            rest = &after[end..];
        }
    }
    found
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    let mut in_block = false;
    text.lines()
        .filter(|line| {
            if line.trim_start().starts_with("```") {
                in_block = !in_block;
            }
            !in_block
        })
        .filter_map(|line| line.strip_prefix('#'))
        .map(|heading| anchor(heading.trim_start_matches('#')))
        .collect()
}

#[test]
fn every_relative_link_resolves() {
    let mut broken = Vec::new();
    for file in markdown_files() {
        let text = fs::read_to_string(&file).unwrap();
        for target in links(&text) {
            if target.starts_with("http://") || target.starts_with("https://") {
                continue;
            }
            let (path, fragment) = match target.split_once('#') {
                Some((path, fragment)) => (path, Some(fragment)),
                None => (target.as_str(), None),
            };
            let resolved = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(path)
            };
            if !resolved.exists() {
                broken.push(format!("{}: {target} (no such file)", file.display()));
                continue;
            }
            if let Some(fragment) = fragment
                && resolved.is_file()
                && !anchors(&fs::read_to_string(&resolved).unwrap()).contains(fragment)
            {
                broken.push(format!("{}: {target} (no such heading)", file.display()));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The README is the front door: the two commands, a run, the commands and a map, with the
/// guides behind it in docs/.
#[test]
fn the_readme_is_a_front_door() {
    let readme = fs::read_to_string(repo().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= 250,
        "README.md has {lines} lines: move the detail into docs/"
    );
    for command in ["scripts/main.sh", "scripts/test.sh"] {
        assert!(readme.contains(command), "README.md must give {command}");
    }
}
