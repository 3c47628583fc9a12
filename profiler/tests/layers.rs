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

/// The lines of docs/architecture.md's fenced block ```` ```name ````, which the tests below
/// hold against the tree.
fn architecture_block(name: &str) -> String {
    let doc = fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/architecture.md"
    ))
    .unwrap();
    doc.split(&format!("```{name}\n"))
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .unwrap_or_else(|| panic!("docs/architecture.md has a ```{name} block"))
        .to_owned()
}

/// The layers as docs/architecture.md draws them (its `layers` block), top first: each a
/// folder of profiler/src and the modules in it.
fn layers() -> Vec<(String, Vec<String>)> {
    architecture_block("layers")
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let (name, modules) = line.split_once(' ').unwrap();
            let modules = modules.split('·').map(|m| m.trim().to_owned()).collect();
            (name.trim_end_matches('/').to_owned(), modules)
        })
        .collect()
}

/// The layer and module a file of profiler/src belongs to (`record`, `probes` for
/// record/probes/mod.rs; `ground`, `units` for ground/units.rs); `None` for the crate's roots
/// and a layer's own mod.rs.
fn place_of(src: &Path, file: &Path) -> Option<(String, String)> {
    let mut parts = file.strip_prefix(src).ok()?.components();
    let layer = parts.next()?.as_os_str().to_str()?.to_owned();
    let module = parts.next()?.as_os_str().to_str()?.trim_end_matches(".rs");
    (module != "mod" && layer != "bin").then(|| (layer, module.to_owned()))
}

/// The folders are the layers, and each imports its own layer and the layers below it: a
/// record never reaches for a producer, a producer never for a view. Checked on every
/// `crate::` path outside comments, and the drawing is checked against the tree: every module
/// is in the layer the drawing puts it in, and every module the drawing names exists.
#[test]
fn no_module_imports_a_layer_above_its_own() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let layers = layers();
    let rank = |layer: &str| layers.iter().position(|(name, _)| name == layer);
    let files = sources(&src);
    let tree: std::collections::BTreeSet<(String, String)> = files
        .iter()
        .filter_map(|file| place_of(&src, file))
        .collect();
    let drawn: std::collections::BTreeSet<(String, String)> = layers
        .iter()
        .flat_map(|(layer, modules)| modules.iter().map(|m| (layer.clone(), m.clone())))
        .collect();
    let undrawn: Vec<_> = tree.difference(&drawn).collect();
    assert!(
        undrawn.is_empty(),
        "modules architecture.md does not draw where they are: {undrawn:?}"
    );
    let absent: Vec<_> = drawn.difference(&tree).collect();
    assert!(
        absent.is_empty(),
        "architecture.md draws modules the tree lacks: {absent:?}"
    );
    let mut climbs = Vec::new();
    for file in &files {
        let Some((layer, module)) = place_of(&src, file) else {
            continue;
        };
        let own = rank(&layer).unwrap();
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
                        "{}:{}: {layer}::{module} uses {name}",
                        file.display(),
                        at + 1,
                    ));
                }
            }
        }
    }
    assert!(climbs.is_empty(), "{climbs:#?}");
}

/// The run-folder files as docs/architecture.md lists them (its `files` block): each name and
/// the file of profiler/src that owns it.
fn owners() -> Vec<(String, String)> {
    architecture_block("files")
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            Some((words.next()?.to_owned(), words.next()?.to_owned()))
        })
        .collect()
}

/// A run-folder file is named, as a string of its own (a folder: joined to a path), only by
/// its owner: everything else asks the owner, so a file has one writer and one place to find
/// it. Tests are left out: they name the files they check.
#[test]
fn each_run_folder_file_is_named_by_its_owner_alone() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let owners = owners();
    assert!(owners.len() >= 10, "{owners:?}");
    // Each file's code, up to its tests, read once for every name.
    let code: Vec<(PathBuf, String)> = sources(&src)
        .into_iter()
        .map(|file| {
            let text = fs::read_to_string(&file).unwrap();
            let code = text
                .split("#[cfg(test)]")
                .next()
                .unwrap_or_default()
                .to_owned();
            (file, code)
        })
        .collect();
    let mut strays = Vec::new();
    for (name, owner) in &owners {
        let owner = src.join(owner);
        assert!(
            owner.is_file(),
            "{} owns {name}, but is not there",
            owner.display()
        );
        // A folder's name is a common word ("stacks", "profile"): only joining a path to it
        // names the folder.
        let literal = match name.contains('.') {
            true => format!("\"{name}\""),
            false => format!("join(\"{name}\")"),
        };
        let named = format!("\"{name}\"");
        assert!(
            fs::read_to_string(&owner).unwrap().contains(&named),
            "{} owns {name}, but does not name it",
            owner.display()
        );
        for (file, code) in code.iter().filter(|(file, _)| *file != owner) {
            for (at, line) in code.lines().enumerate() {
                if !line.trim_start().starts_with("//") && line.contains(&literal) {
                    strays.push(format!("{}:{}: {}", file.display(), at + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        strays.is_empty(),
        "run-folder files named outside their owners: {strays:#?}"
    );
}
