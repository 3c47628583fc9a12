//! docs/cli.md: every subcommand and flag of skillprof and skillhost, made from their clap
//! definitions (as docs/columns.md is made from the field table), so the reference says what
//! `--help` says. Each binary's unit test keeps its section current
//! ([`crate::ground::generated_docs::Generated`]).

use std::fmt::Write as _;

use clap::{Arg, Command};

/// The reference of `command` and every subcommand under it: a heading, what it does, and a
/// table of its flags and arguments.
pub fn markdown(command: &Command) -> String {
    let mut text = String::new();
    write_command(&mut text, command, command.get_name());
    text
}

fn write_command(text: &mut String, command: &Command, path: &str) {
    let _ = writeln!(text, "## {path}\n");
    if let Some(about) = command.get_about() {
        let _ = writeln!(text, "{}\n", one_line(&about.to_string()));
    }
    let args: Vec<&Arg> = command
        .get_arguments()
        .filter(|arg| !arg.is_hide_set() && !["help", "version"].contains(&arg.get_id().as_str()))
        .collect();
    if !args.is_empty() {
        let _ = writeln!(text, "| argument | value | default | what it does |");
        let _ = writeln!(text, "|---|---|---|---|");
        for arg in args {
            let _ = writeln!(
                text,
                "| {} | {} | {} | {} |",
                name(arg),
                value(arg),
                default(arg),
                cell(&help(arg))
            );
        }
        text.push('\n');
    }
    for sub in command.get_subcommands().filter(|sub| !sub.is_hide_set()) {
        if sub.get_name() == "help" {
            continue;
        }
        write_command(text, sub, &format!("{path} {}", sub.get_name()));
    }
}

fn name(arg: &Arg) -> String {
    if arg.is_positional() {
        let value = arg
            .get_value_names()
            .and_then(|names| names.first())
            .map_or_else(
                || arg.get_id().to_string().to_uppercase(),
                ToString::to_string,
            );
        return format!("`{value}`");
    }
    let mut names = Vec::new();
    if let Some(short) = arg.get_short() {
        names.push(format!("`-{short}`"));
    }
    if let Some(long) = arg.get_long() {
        names.push(format!("`--{long}`"));
    }
    names.join(", ")
}

/// The value a flag takes: its choices where it has some, else its value name; empty for a
/// switch.
fn value(arg: &Arg) -> String {
    if !arg.get_action().takes_values() || arg.is_positional() {
        return String::new();
    }
    let choices: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|choice| !choice.is_hide_set())
        .map(|choice| choice.get_name().to_owned())
        .collect();
    if !choices.is_empty() {
        return cell(&choices.join(" \\| "));
    }
    arg.get_value_names()
        .map(|names| {
            let names: Vec<String> = names.iter().map(|name| format!("`{name}`")).collect();
            cell(&names.join(" "))
        })
        .unwrap_or_default()
}

/// Its default, or that it must be given.
fn default(arg: &Arg) -> String {
    if arg.is_required_set() {
        return "required".to_owned();
    }
    let defaults: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|value| format!("`{}`", value.to_string_lossy()))
        .collect();
    defaults.join(", ")
}

/// The long help where there is one (what `--help` prints), else the short.
fn help(arg: &Arg) -> String {
    arg.get_long_help()
        .or_else(|| arg.get_help())
        .map(ToString::to_string)
        .unwrap_or_default()
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A table cell: one line, its pipes escaped.
fn cell(text: &str) -> String {
    one_line(text).replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;
    use crate::ground::generated_docs::Generated;

    /// `SKILLPROF_BLESS=1 cargo test -p skillprof --lib cli_reference` rewrites it.
    #[test]
    fn the_cli_reference_documents_every_flag_of_skillprof() {
        let reference = Generated {
            file: "docs/cli.md",
            name: "skillprof",
            bless: "SKILLPROF_BLESS=1 cargo test -p skillprof --lib cli_reference",
        };
        reference
            .check(&markdown(&crate::commands::cli::Cli::command()))
            .unwrap();
    }

    #[test]
    fn a_flag_has_its_row_with_its_value_default_and_help() {
        let text = markdown(&crate::commands::cli::Cli::command());
        assert!(text.contains("## skillprof run\n"), "{text}");
        assert!(text.contains("## skillprof slo\n"), "{text}");
        let row = text
            .lines()
            .find(|line| line.starts_with("| `--step-s` |"))
            .expect("slo's --step-s");
        assert!(
            row.contains("| `S` | `5` |") && row.contains("warms up"),
            "{row}"
        );
        assert!(!text.contains("## skillprof help"), "{text}");
    }
}
