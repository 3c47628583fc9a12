//! `skillprof-man DIR`: skillprof's shell completions and man pages, made from its clap
//! definitions so that they say what `--help` says. `cargo xtask man` runs it for build/share.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Command, CommandFactory};
use clap_complete::Shell;
use skillprof::commands::cli::Cli;

/// Writes `DIR/completions/` (bash, zsh, fish) and `DIR/man/` (a page for skillprof and one per
/// subcommand); returns the files written.
fn write(mut command: Command, dir: &Path) -> Result<Vec<PathBuf>> {
    let completions = dir.join("completions");
    let man = dir.join("man");
    for folder in [&completions, &man] {
        fs::create_dir_all(folder).with_context(|| format!("creating {}", folder.display()))?;
    }
    // Man pages first, from a command not yet built: building it (as the completions do)
    // adds a `help` subcommand, which would get a page of its own per subcommand.
    clap_mangen::generate_to(command.clone().disable_help_subcommand(true), &man)
        .with_context(|| format!("writing the man pages to {}", man.display()))?;
    let mut written = Vec::new();
    for page in fs::read_dir(&man)? {
        written.push(page?.path());
    }
    let name = command.get_name().to_owned();
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let path = clap_complete::generate_to(shell, &mut command, &name, &completions)
            .with_context(|| format!("writing the {shell} completions"))?;
        written.push(path);
    }
    Ok(written)
}

fn main() -> Result<()> {
    let dir = std::env::args_os()
        .nth(1)
        .context("usage: skillprof-man DIR (cargo xtask man writes build/share)")?;
    for path in write(Cli::command(), Path::new(&dir))? {
        println!("{}", path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A page per subcommand and none for `help`; the pages and the completions carry the
    /// flags `--help` shows.
    #[test]
    fn writes_a_page_per_subcommand_and_completions_for_three_shells() {
        let dir = tempfile::tempdir().unwrap();
        let written = write(Cli::command(), dir.path()).unwrap();
        let name = |path: &PathBuf| path.file_name().unwrap().to_string_lossy().into_owned();
        let mut names: Vec<String> = written.iter().map(name).collect();
        names.sort();
        let subcommands = Cli::command().get_subcommands().count();
        assert_eq!(names.len(), 1 + subcommands + 3, "{names:?}");
        assert!(names.iter().all(|name| !name.contains("help")), "{names:?}");
        let run_page = fs::read_to_string(dir.path().join("man/skillprof-run.1")).unwrap();
        assert!(run_page.contains("run\\-dir"), "{run_page}");
        let bash = fs::read_to_string(dir.path().join("completions/skillprof.bash")).unwrap();
        assert!(bash.contains("--run-dir") && bash.contains("--band-mode"));
    }
}
