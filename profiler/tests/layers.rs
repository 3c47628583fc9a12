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
