//! What a file a user brings is, read before anything runs: a WebAssembly component and the
//! names it exports (which say the world it was built for), or why it is not one. Nothing is
//! compiled or validated here: the host does that, and says so per request.

use std::fmt;
use std::path::Path;

use wasmparser::{Encoding, Parser, Payload};

/// A component file's top-level exports, in file order: `run` for a `skillprof:skill`,
/// `pharia:skill/skill-handler@0.2.x` for a `pharia:skill@0.2`, and
/// `wasi:http/incoming-handler@0.2.x` for a wasi:http handler.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exports(pub Vec<String>);

/// Why a file is not a component a host can be given.
#[derive(Debug, PartialEq, Eq)]
pub enum NotAComponent {
    /// It does not begin with WebAssembly's magic bytes.
    NotWasm,
    /// A core module: hosts run components.
    CoreModule,
    /// It begins like a component and then does not parse.
    Malformed(String),
}

impl fmt::Display for NotAComponent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotAComponent::NotWasm => f.write_str(
                "is not WebAssembly (it does not begin with \\0asm); a skill is a component \
                 file, as cargo component, componentize-py or wasm-tools component new build",
            ),
            NotAComponent::CoreModule => f.write_str(
                "is a core WebAssembly module, not a component; wrap it with `wasm-tools \
                 component new`, or build it for wasm32-wasip2",
            ),
            NotAComponent::Malformed(why) => write!(f, "is not a well-formed component: {why}"),
        }
    }
}

/// The exports of the component in `bytes`.
pub fn exports(bytes: &[u8]) -> Result<Exports, NotAComponent> {
    if !bytes.starts_with(b"\0asm") {
        return Err(NotAComponent::NotWasm);
    }
    let mut exports = Vec::new();
    // Nested modules and components begin with a version and end with an end of their own;
    // only the outermost component's exports are the world's.
    let mut depth = 0_usize;
    for payload in Parser::new(0).parse_all(bytes) {
        match payload.map_err(|e| NotAComponent::Malformed(e.to_string()))? {
            Payload::Version {
                encoding: Encoding::Module,
                ..
            } if depth == 0 => return Err(NotAComponent::CoreModule),
            Payload::Version { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentExportSection(section) if depth == 1 => {
                for export in section {
                    let export = export.map_err(|e| NotAComponent::Malformed(e.to_string()))?;
                    exports.push(export.name.full_name().into_owned());
                }
            }
            _ => {}
        }
    }
    Ok(Exports(exports))
}

/// The exports of the component file at `path`, or a sentence naming the file and what is
/// wrong with it.
pub fn read(path: &Path) -> Result<Exports, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    exports(&bytes).map_err(|why| format!("{} {why}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(path: &str) -> Vec<u8> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../build/skills");
        std::fs::read(root.join(path)).unwrap_or_else(|e| {
            panic!("{path}: {e}; the sample skills are built by `cargo xtask build-skills`")
        })
    }

    #[test]
    fn each_worlds_sample_exports_what_names_its_world() {
        assert_eq!(exports(&sample("sample_rs.wasm")).unwrap().0, ["run"]);
        let pharia = exports(&sample("pharia-skill/sample_rs.wasm")).unwrap().0;
        assert!(
            pharia
                .iter()
                .any(|e| e.starts_with("pharia:skill/skill-handler@0.2")),
            "{pharia:?}"
        );
        let http = exports(&sample("wasi-http/sample_rs.wasm")).unwrap().0;
        assert!(
            http.iter()
                .any(|e| e.starts_with("wasi:http/incoming-handler@0.2")),
            "{http:?}"
        );
    }

    #[test]
    fn what_is_not_a_component_says_what_it_is() {
        assert_eq!(exports(b"#!/bin/sh\n"), Err(NotAComponent::NotWasm));
        // The smallest core module: magic and version 1.
        assert_eq!(exports(b"\0asm\x01\0\0\0"), Err(NotAComponent::CoreModule));
        let mut cut = sample("sample_rs.wasm");
        cut.truncate(cut.len() / 2);
        assert!(matches!(exports(&cut), Err(NotAComponent::Malformed(_))));
    }
}
