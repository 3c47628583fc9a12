//! `cargo xtask build-skills`: the sample skills as wasm components, once per world: in
//! build/skills/ for `skillprof:skill`, in build/skills/pharia-skill/ for the 2024 host's
//! `pharia:skill@0.2`, in build/skills/wasi-http/ for `wasi:http/proxy` (`wasmtime serve`;
//! the Rust skills only).

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Instant, SystemTime};

use anyhow::{Context, Result, bail};

const TARGET: &str = "wasm32-wasip2";
/// Members of the skills/ workspace; each builds to `<name>.wasm`.
const RUST_SKILLS: [&str; 3] = ["sample_rs", "hello", "trap"];
/// The name of the world in every WIT package below.
const WORLD: &str = "skill";

/// A world the sample skills are built for. One source per skill: only the binding layer
/// differs (the `skill_world` crate's feature, the Python binding module).
struct World {
    /// Cargo features that bind the Rust skills to it.
    rust_features: &'static [&'static str],
    /// Its own target directory, so that building one world never invalidates the others'.
    target_dir: &'static str,
    /// How the Python skills are bound to it (none: only the Rust skills are built for it).
    python: Option<PythonWorld>,
    /// Where its components go, repository-relative.
    out: &'static str,
}

struct PythonWorld {
    /// The world's WIT package, repository-relative.
    wit: &'static str,
    /// The module in skills/py_worlds that componentize-py builds, importing the skill's `app`.
    module: &'static str,
}

const WORLDS: [World; 3] = [
    World {
        rust_features: &[],
        target_dir: "build/skills-target",
        python: Some(PythonWorld {
            wit: "skills/wit/skillprof",
            module: "skillprof_skill",
        }),
        out: "build/skills",
    },
    World {
        rust_features: &["skill_world/pharia"],
        target_dir: "build/skills-target-pharia",
        python: Some(PythonWorld {
            wit: "skills/wit/pharia",
            module: "pharia_skill",
        }),
        out: "build/skills/pharia-skill",
    },
    // The peer host `wasmtime serve` runs wasi:http/proxy components. The Rust skills' binding
    // is the `wasip2` crate's; a Python one would need the wasi:http WIT packages vendored for
    // componentize-py, and the peer comparison needs only hello.
    World {
        rust_features: &["skill_world/wasi-http"],
        target_dir: "build/skills-target-wasi-http",
        python: None,
        out: "build/skills/wasi-http",
    },
];

/// A Python skill: componentized from module `app` on its Python path (repository-relative
/// folders) by one componentize-py.
struct PythonSkill {
    name: &'static str,
    python_path: &'static [&'static str],
    componentize: &'static str,
}

const PYTHON_SKILLS: [PythonSkill; 2] = [
    PythonSkill {
        name: "sample_py",
        python_path: &["skills/sample_py", "skills/py_shared", "skills/py_worlds"],
        componentize: "build/venv/bin/componentize-py",
    },
    // pydantic-core's WASI wheel is built for CPython 3.12, which componentize-py bundles
    // only up to 0.17; build/py312-site holds pydantic and that wheel (scripts/setup.sh).
    PythonSkill {
        name: "sample_py_pydantic",
        python_path: &[
            "skills/sample_py_pydantic",
            "skills/py_shared",
            "skills/py_worlds",
            "build/py312-site",
        ],
        componentize: "build/venv-py312/bin/componentize-py",
    },
];

struct Paths<'w> {
    root: PathBuf,
    world: &'w World,
    /// Where the host and the benchmarks look for this world's components.
    out: PathBuf,
}

pub fn build() -> Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("xtask has no parent directory")?
        .to_path_buf();
    check_target_installed(&root)?;
    for world in &WORLDS {
        let paths = Paths {
            out: root.join(world.out),
            root: root.clone(),
            world,
        };
        fs::create_dir_all(&paths.out)
            .with_context(|| format!("creating {}", paths.out.display()))?;
        build_rust(&paths)?;
        if let Some(python) = &world.python {
            PYTHON_SKILLS
                .iter()
                .try_for_each(|skill| build_python(&paths, python, skill))?;
        }
    }
    Ok(())
}

fn build_rust(paths: &Paths) -> Result<()> {
    let started = Instant::now();
    let target_dir = paths.root.join(paths.world.target_dir);
    // The cargo that runs xtask, so the skills build with the toolchain the repo pins.
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let status = Command::new(cargo)
        .args([
            "build",
            "--release",
            "--quiet",
            "--target",
            TARGET,
            "--target-dir",
        ])
        .arg(&target_dir)
        .args(
            paths
                .world
                .rust_features
                .iter()
                .flat_map(|feature| ["--features", feature]),
        )
        .current_dir(paths.root.join("skills"))
        .status()
        .context("running cargo")?;
    if !status.success() {
        bail!("building the Rust skills failed ({status}); cargo's errors are above");
    }
    let elapsed = started.elapsed();
    for name in RUST_SKILLS {
        let built = target_dir
            .join(TARGET)
            .join("release")
            .join(format!("{name}.wasm"));
        let artifact = paths.out.join(format!("{name}.wasm"));
        // Copy only what changed, so an unchanged skill keeps its mtime and the host's
        // compilation cache is not invalidated for nothing.
        let fresh = match (modified(&built), modified(&artifact)) {
            (Ok(built), Ok(copied)) => built <= copied,
            _ => false,
        };
        if !fresh {
            fs::copy(&built, &artifact).with_context(|| {
                format!("copying {} to {}", built.display(), artifact.display())
            })?;
        }
        let how = if fresh {
            "up to date".into()
        } else {
            format!("cargo {elapsed:.1?}")
        };
        report(paths, &artifact, how)?;
    }
    Ok(())
}

/// Fails early with the fix, instead of letting cargo fail with "can't find crate for `core`".
fn check_target_installed(root: &Path) -> Result<()> {
    let output = Command::new("rustc")
        .args(["--print", "target-libdir", "--target", TARGET])
        .current_dir(root)
        .output()
        .context("running rustc: is a Rust toolchain installed? run scripts/setup.sh")?;
    let libdir = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() || !Path::new(libdir.trim()).is_dir() {
        bail!(
            "the {TARGET} target is not installed for this repository's toolchain: \
             run `rustup target add {TARGET}` in {} (or scripts/setup.sh)",
            root.display()
        );
    }
    Ok(())
}

/// componentize-py takes 15-30 s and has no cache of its own, so it runs only when a file on
/// the skill's Python path or the world's WIT changed since the last component was written.
fn build_python(paths: &Paths, world: &PythonWorld, skill: &PythonSkill) -> Result<()> {
    let wit = paths.root.join(world.wit);
    let python_path: Vec<PathBuf> = skill
        .python_path
        .iter()
        .map(|p| paths.root.join(p))
        .collect();
    let artifact = paths.out.join(format!("{}.wasm", skill.name));
    let mut sources = newest(&wit)?;
    for dir in &python_path {
        sources = sources.max(newest(dir).with_context(|| {
            format!(
                "{} needs {}: run scripts/setup.sh",
                skill.name,
                dir.display()
            )
        })?);
    }
    if let Ok(built) = modified(&artifact)
        && sources < built
    {
        return report(paths, &artifact, "up to date".into());
    }
    let componentize = paths.root.join(skill.componentize);
    if !componentize.is_file() {
        bail!("{} not found: run scripts/setup.sh", componentize.display());
    }
    let started = Instant::now();
    // Written aside and renamed, so an interrupted build never leaves a truncated component
    // that looks newer than its sources.
    let partial = artifact.with_extension("wasm.partial");
    let mut command = Command::new(&componentize);
    command
        .arg("--quiet")
        .arg("--wit-path")
        .arg(&wit)
        .args(["--world", WORLD, "componentize"]);
    for dir in &python_path {
        command.arg("--python-path").arg(dir);
    }
    let status = command
        .arg(world.module)
        .arg("--output")
        .arg(&partial)
        .status()
        .with_context(|| format!("running {}", componentize.display()))?;
    if !status.success() {
        bail!(
            "componentize-py failed for {} ({status}); its errors are above",
            skill.name
        );
    }
    fs::rename(&partial, &artifact)
        .with_context(|| format!("moving {} into place", partial.display()))?;
    report(
        paths,
        &artifact,
        format!("componentize-py {:.1?}", started.elapsed()),
    )
}

/// The newest modification time of any file under `dir`. Python's bytecode caches are
/// by-products of the build itself, not sources.
fn newest(dir: &Path) -> Result<SystemTime> {
    let mut latest = SystemTime::UNIX_EPOCH;
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        let time = if path.is_dir() {
            if path.ends_with("__pycache__") {
                continue;
            }
            newest(&path)?
        } else {
            modified(&path)?
        };
        latest = latest.max(time);
    }
    Ok(latest)
}

fn modified(path: &Path) -> Result<SystemTime> {
    fs::metadata(path)
        .and_then(|m| m.modified())
        .with_context(|| format!("reading the mtime of {}", path.display()))
}

fn report(paths: &Paths, artifact: &Path, how: String) -> Result<()> {
    let bytes = fs::metadata(artifact)
        .with_context(|| format!("reading {}", artifact.display()))?
        .len();
    let size = if bytes >= 1 << 20 {
        format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
    } else {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    };
    let shown = artifact.strip_prefix(&paths.root).unwrap_or(artifact);
    println!("{:<50} {size:>10}  ({how})", shown.display());
    Ok(())
}
