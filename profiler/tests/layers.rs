//! The code's shape, checked against its tree: what architecture.md says of the layers holds
//! in the source, and fails here when it stops holding.

use std::fs;
use std::path::{Path, PathBuf};

/// Every Rust file under `dir`.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(sources(&path));
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
    files
}

/// A record type has one name: `crate::record::…`. A producer that re-exported it gave every
/// view a second path to the same type, and a view that imported it through the producer
/// depended on a module it never used.
#[test]
fn record_types_are_reached_by_one_path() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let record = src.join("record");
    let second_names: Vec<String> = sources(&src)
        .into_iter()
        .filter(|file| !file.starts_with(&record))
        .flat_map(|file| {
            let text = fs::read_to_string(&file).unwrap();
            text.lines()
                .enumerate()
                .filter(|(_, line)| line.trim_start().starts_with("pub use crate::record"))
                .map(|(at, line)| format!("{}:{}: {line}", file.display(), at + 1))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(second_names.is_empty(), "{second_names:#?}");
}

/// The layers as docs/architecture.md draws them (its `layers` block), top first: each a
/// name and the top-level modules of profiler/src in it.
fn layers() -> Vec<(String, Vec<String>)> {
    let doc = fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/architecture.md"
    ))
    .unwrap();
    let block = doc
        .split("```layers\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("docs/architecture.md has a ```layers block");
    block
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let (name, modules) = line.split_once(' ').unwrap();
            let modules = modules.split('·').map(|m| m.trim().to_owned()).collect();
            (name.to_owned(), modules)
        })
        .collect()
}

/// The top-level module a file of profiler/src belongs to (`record` for record/probes/mod.rs,
/// `units` for units.rs); `None` for the crate's roots.
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let first = file.strip_prefix(src).ok()?.components().next()?;
    let name = first
        .as_os_str()
        .to_str()?
        .trim_end_matches(".rs")
        .to_owned();
    (!["lib", "main", "bin"].contains(&name.as_str())).then_some(name)
}

/// Each module imports its own layer and the layers below it: a record never reaches for a
/// producer, a producer never for a view. Checked on every `crate::` path outside comments,
/// and the drawing is checked against the tree: every module is in exactly one layer, and
/// every module the drawing names exists.
#[test]
fn no_module_imports_a_layer_above_its_own() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let layers = layers();
    let rank = |module: &str| {
        layers
            .iter()
            .position(|(_, modules)| modules.iter().any(|m| m == module))
    };
    let files = sources(&src);
    let tree: std::collections::BTreeSet<String> = files
        .iter()
        .filter_map(|file| module_of(&src, file))
        .collect();
    let drawn: Vec<&String> = layers.iter().flat_map(|(_, modules)| modules).collect();
    let unplaced: Vec<&String> = tree.iter().filter(|m| rank(m).is_none()).collect();
    assert!(
        unplaced.is_empty(),
        "modules in no layer of architecture.md: {unplaced:?}"
    );
    let absent: Vec<&&String> = drawn.iter().filter(|m| !tree.contains(**m)).collect();
    assert!(
        absent.is_empty(),
        "architecture.md names modules the tree lacks: {absent:?}"
    );
    let mut climbs = Vec::new();
    for file in &files {
        let Some(module) = module_of(&src, file) else {
            continue;
        };
        let own = rank(&module).unwrap();
        let text = fs::read_to_string(file).unwrap();
        for (at, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for used in line.split("crate::").skip(1) {
                let name: String = used
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                if let Some(theirs) = rank(&name)
                    && theirs < own
                {
                    climbs.push(format!(
                        "{}:{}: {module} ({}) uses {name} ({})",
                        file.display(),
                        at + 1,
                        layers[own].0,
                        layers[theirs].0
                    ));
                }
            }
        }
    }
    assert!(climbs.is_empty(), "{climbs:#?}");
}
