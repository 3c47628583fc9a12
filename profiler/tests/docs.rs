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

/// A `skillprof` command the docs quote, with where: its words after `skillprof`.
struct Quoted {
    at: String,
    words: Vec<String>,
    /// Written with an elision (`...`, `…`) or optional parts (`[...]`): a sketch, whose
    /// required arguments may be left out.
    sketch: bool,
}

/// The commands after a `skillprof` word: in code blocks (continued lines joined) and in
/// code spans (a paragraph's lines joined, as a span may run over a line's end), up to the
/// end of the span, the line or a shell operator.
fn quoted_commands(file: &Path, text: &str) -> Vec<Quoted> {
    let mut pieces: Vec<(usize, String)> = Vec::new();
    let mut in_block = false;
    let mut carried = String::new();
    // The paragraph so far, and the line it began on.
    let mut paragraph = (0, String::new());
    let spans = |paragraph: &mut (usize, String), pieces: &mut Vec<(usize, String)>| {
        let (number, text) = std::mem::take(paragraph);
        for span in text.split('`').skip(1).step_by(2) {
            pieces.push((number, span.to_owned()));
        }
    };
    for (number, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            spans(&mut paragraph, &mut pieces);
            in_block = !in_block;
            continue;
        }
        if in_block {
            match line.strip_suffix('\\') {
                Some(head) => carried.push_str(head),
                None => pieces.push((number + 1, std::mem::take(&mut carried) + line)),
            }
        } else if line.trim().is_empty() {
            spans(&mut paragraph, &mut pieces);
        } else {
            if paragraph.1.is_empty() {
                paragraph.0 = number + 1;
            }
            paragraph.1.push_str(line);
            paragraph.1.push(' ');
        }
    }
    spans(&mut paragraph, &mut pieces);
    let mut found = Vec::new();
    for (number, piece) in pieces {
        for (at, _) in piece.match_indices("skillprof ") {
            // The command word only, as a shell line starts it, with or without a path in
            // front (target/release/skillprof, /usr/local/bin/skillprof): not skillprof-watch,
            // `skillprof:`, or an output table's column (wide spacing).
            let head = &piece[..at];
            let path = &head[head.rfind(char::is_whitespace).map_or(0, |space| space + 1)..];
            let head = match path.ends_with('/') {
                true => &head[..head.len() - path.len()],
                false => head,
            };
            let before = head.split_whitespace().next_back().unwrap_or("");
            let starts = head.is_empty() || head.ends_with(char::is_whitespace);
            let rest = &piece[at + "skillprof ".len()..];
            if !starts
                || !matches!(
                    before,
                    "" | "sudo" | "exec" | "$" | "#" | "&&" | ";" | "then" | "do"
                )
                || rest.starts_with(char::is_whitespace)
                || rest.is_empty()
            {
                continue;
            }
            let command = rest
                .split(['|', ';', '>', '<', ')', '#'])
                .next()
                .unwrap_or_default()
                .split("&&")
                .next()
                .unwrap_or_default()
                .trim()
                .to_owned();
            let sketch = ["...", "…", "["].iter().any(|mark| command.contains(mark));
            let words = shlex::split(&command)
                .unwrap_or_else(|| command.split_whitespace().map(str::to_owned).collect());
            found.push(Quoted {
                at: format!("{}:{number}", file.display()),
                words,
                sketch,
            });
        }
    }
    found
}

/// What is wrong with a quoted command, against the command line's own definition: a
/// subcommand or flag that does not exist, or, in a command written out whole, a required
/// argument left out. Values are not parsed: the docs write placeholders (RUN, DIR, R).
fn wrong(cli: &clap::Command, quoted: &Quoted) -> Option<String> {
    let mut words = quoted.words.iter().map(String::as_str).peekable();
    let first = words.next()?;
    if first.starts_with('-') {
        return (!matches!(first, "--help" | "-h" | "--version" | "-V"))
            .then(|| format!("skillprof has no option {first}"));
    }
    // A placeholder for any subcommand (SUBCOMMAND, <cmd>).
    if first.chars().all(|c| c.is_ascii_uppercase()) || first.starts_with('<') {
        return None;
    }
    let Some(mut command) = cli.find_subcommand(first) else {
        return Some(format!("skillprof has no subcommand {first}"));
    };
    let mut path = format!("skillprof {first}");
    let mut positionals = 0;
    let mut given: BTreeSet<String> = BTreeSet::new();
    let mut options = 0;
    while let Some(word) = words.next() {
        if word == "--" {
            break;
        }
        // An option as written (`--name`, `--name=value`, `-x`, `-xvalue`): how it is shown,
        // whether it asks for help, whether its value is in the same word, and its argument.
        let option = if let Some(long) = word.strip_prefix("--") {
            let (name, inline) = long
                .split_once('=')
                .map_or((long, false), |(n, _)| (n, true));
            let arg = command
                .get_arguments()
                .find(|arg| arg.get_long() == Some(name));
            Some((format!("--{name}"), name == "help", inline, arg))
        } else if let Some(short) = word.strip_prefix('-').filter(|s| !s.is_empty()) {
            let letter = short.chars().next().unwrap();
            let arg = command
                .get_arguments()
                .find(|arg| arg.get_short() == Some(letter));
            Some((format!("-{letter}"), letter == 'h', short.len() > 1, arg))
        } else {
            None
        };
        if let Some((shown, help, inline, arg)) = option {
            if help {
                return None;
            }
            let Some(arg) = arg else {
                return Some(format!("{path} has no option {shown}"));
            };
            given.insert(arg.get_id().to_string());
            options += 1;
            let value = match inline {
                true => word.split_once('=').map(|(_, value)| value),
                false if arg.get_action().takes_values() => words.next(),
                false => None,
            };
            if let Some(problem) = value.and_then(|value| not_a_choice(arg, value)) {
                return Some(format!("{path} {shown}: {problem}"));
            }
        } else if positionals == 0
            && let Some(nested) = command.find_subcommand(word)
        {
            path = format!("{path} {word}");
            command = nested;
        } else {
            positionals += 1;
        }
    }
    // `skillprof run` names the subcommand and `skillprof run --trim-by ptrace` one of its
    // options; a sketch leaves parts out on purpose. Anything more is a command to copy.
    if quoted.sketch || (positionals == 0 && options < 2) {
        return None;
    }
    let mut positional_index = 0;
    for arg in command.get_arguments() {
        let required = arg.is_required_set();
        if arg.is_positional() {
            positional_index += 1;
            if required && positionals < positional_index {
                return Some(format!(
                    "{path} leaves out its required {}",
                    arg.get_value_names()
                        .and_then(|names| names.first())
                        .map_or(arg.get_id().to_string(), ToString::to_string)
                ));
            }
        } else if required && !given.contains(arg.get_id().as_str()) {
            return Some(format!(
                "{path} leaves out its required --{}",
                arg.get_long().unwrap_or_default()
            ));
        }
    }
    None
}

/// What is wrong with `value` for `arg`, one of a fixed set of choices: a value none of them
/// is. Placeholders (MODE, <mode>, $VAR, {port}) and lists are not judged.
fn not_a_choice(arg: &clap::Arg, value: &str) -> Option<String> {
    let choices = arg.get_possible_values();
    let placeholder = value.chars().all(|c| c.is_ascii_uppercase() || c == '_')
        || value.contains(['<', '$', '{', ','])
        || value.contains("...");
    if choices.is_empty()
        || placeholder
        || choices.iter().any(|choice| choice.matches(value, false))
    {
        return None;
    }
    let names: Vec<&str> = choices.iter().map(|choice| choice.get_name()).collect();
    Some(format!("{value} is none of {}", names.join(", ")))
}

/// Every `skillprof` command the README and docs quote names a subcommand and flags that
/// exist, and one written out whole gives every required argument: a newcomer copies them.
#[test]
fn every_command_the_docs_quote_exists_as_written() {
    use clap::CommandFactory;
    let cli = skillprof::commands::cli::Cli::command();
    let mut problems = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        let text = fs::read_to_string(&file).unwrap();
        let shown = file.strip_prefix(repo()).unwrap_or(&file).to_path_buf();
        for quoted in quoted_commands(&shown, &text) {
            checked += 1;
            if let Some(problem) = wrong(&cli, &quoted) {
                problems.push(format!(
                    "{}: `skillprof {}`: {problem}",
                    quoted.at,
                    quoted.words.join(" ")
                ));
            }
        }
    }
    assert!(
        checked > 100,
        "only {checked} commands found: the reader is broken"
    );
    assert!(
        problems.is_empty(),
        "{} of {checked}:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// `script` with each command substitution, `$(...)`, as one placeholder word: its `)` would
/// end the command the docs' reader takes.
fn without_substitutions(script: &str) -> String {
    let mut out = String::new();
    let mut rest = script;
    while let Some(start) = rest.find("$(") {
        out.push_str(&rest[..start]);
        out.push_str("VALUE");
        let end = rest[start..].find(')').expect("a substitution's end");
        rest = &rest[start + end + 1..];
    }
    out + rest
}

/// The commands the shipped unit files start (`ExecStart=`, continued lines joined, through
/// `/bin/sh -c` where they are wrapped in one), judged as the docs' are.
#[test]
fn every_command_the_unit_files_start_exists_as_written() {
    use clap::CommandFactory;
    let cli = skillprof::commands::cli::Cli::command();
    let folder = repo().join("docs/systemd");
    let mut checked = 0;
    for entry in fs::read_dir(&folder).unwrap() {
        let path = entry.unwrap().path();
        let text = fs::read_to_string(&path).unwrap().replace("\\\n", " ");
        let shown = path.strip_prefix(repo()).unwrap().to_path_buf();
        for line in text.lines() {
            let Some(command) = line.strip_prefix("ExecStart=") else {
                continue;
            };
            // A shell wrapper's script is read as the docs' code blocks are.
            let words = shlex::split(command).unwrap();
            let script = match words.as_slice() {
                [shell, flag, script, ..] if shell.ends_with("/sh") && flag == "-c" => {
                    script.clone()
                }
                _ => command.to_owned(),
            };
            let block = format!("```\n{}\n```\n", without_substitutions(&script));
            for quoted in quoted_commands(&shown, &block) {
                checked += 1;
                assert_eq!(
                    wrong(&cli, &quoted),
                    None,
                    "{}: {:?}",
                    shown.display(),
                    quoted.words
                );
            }
        }
    }
    assert!(
        checked >= 1,
        "no skillprof command in {}: the reader is broken",
        folder.display()
    );
}

/// The reader itself: what it takes for a command, and what it calls wrong.
#[test]
fn a_quoted_command_is_read_as_a_shell_would_and_judged_by_the_cli() {
    use clap::CommandFactory;
    let cli = skillprof::commands::cli::Cli::command();
    let text = "Run `sudo skillprof run cmds/smoke.cmds --no-probes | tee log`, then\n\
                ```\nskillprof capacity RUN \\\n  --memory 64G\n```\n\
                `skillprof slo --skill rust --component x.wasm`, `skillprof explain RUN`, \
                `skillprof run cmds/x.cmds --no-such-flag`, `skillprof run ... --interval-ms 5`\n\
                `sudo target/release/skillprof run cmds/x.cmds --probes all`, \
                `skillprof run cmds/x.cmds --probes=calls --probes MODE`\n\
                `/var/lib/skillprof` and `skillprof-watch.service` are no commands, \
                nor is `ls /var/lib/skillprof /tmp`.";
    let quoted = quoted_commands(Path::new("t.md"), text);
    let said: Vec<(String, Option<String>)> = quoted
        .iter()
        .map(|q| (q.words.join(" "), wrong(&cli, q)))
        .collect();
    assert_eq!(
        said,
        [
            ("run cmds/smoke.cmds --no-probes".to_owned(), None),
            ("capacity RUN --memory 64G".to_owned(), None),
            (
                "slo --skill rust --component x.wasm".to_owned(),
                Some("skillprof slo leaves out its required --target".to_owned())
            ),
            (
                "explain RUN".to_owned(),
                Some("skillprof has no subcommand explain".to_owned())
            ),
            (
                "run cmds/x.cmds --no-such-flag".to_owned(),
                Some("skillprof run has no option --no-such-flag".to_owned())
            ),
            ("run ... --interval-ms 5".to_owned(), None),
            (
                "run cmds/x.cmds --probes all".to_owned(),
                Some("skillprof run --probes: all is none of exact, calls, host-only".to_owned())
            ),
            (
                "run cmds/x.cmds --probes=calls --probes MODE".to_owned(),
                None
            ),
        ]
    );
}
