//! The smallest whole host docs/own-host.md describes: a wasmtime host of `skillprof:skill`
//! components that marks its work, so that skillprof counts it per skill and phase. It
//! compiles every `<name>.wasm` of a directory when it starts and serves, on loopback:
//!
//! - `GET /health`: 200;
//! - `POST /skills/{name}/run`: the skill's answer to the body (JSON in, JSON out), 400 for
//!   input the skill rejects, 500 for its errors and traps, 404 for no such skill.
//!
//! `marked-host.toml` beside this file is its skillprof profile. Run it as:
//!
//!     cargo build --release -p skillprof-marks --example marked_host
//!     target/release/examples/marked_host DIR PORT
//!     sudo skillprof watch --attach PID --host-url http://127.0.0.1:PORT \
//!         --host-profile profiler/marks/examples/marked-host.toml

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use axum::body::Bytes;
use axum::extract::{Path as Route, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use skillprof_marks::{
    PHASE_CALL, PHASE_COMPILE, PHASE_INSTANTIATE, PHASE_RESET, PhaseCell, SkillTag, Work,
};
use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Config, Engine, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

mod world {
    wasmtime::component::bindgen!({
        path: "../../skills/wit/skillprof",
        world: "skill",
        exports: { default: async },
    });
}

/// A skill compiled and linked, and its tag in the marks.
struct Skill {
    pre: world::SkillPre<Request>,
    tag: SkillTag,
}

type Skills = Arc<BTreeMap<String, Skill>>;

/// One request's store: WASI with nothing of the host's but stderr.
struct Request {
    wasi: WasiCtx,
    table: ResourceTable,
}

impl WasiView for Request {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(dir), Some(port)) = (args.next(), args.next()) else {
        anyhow::bail!("usage: marked_host DIR PORT");
    };
    // The ledger exists from the start, so a profiler attaching before the first mark finds
    // the host marks its work.
    skillprof_marks::ready();
    let skills = Arc::new(compile_all(Path::new(&dir))?);
    let app = axum::Router::new()
        .route("/health", get(|| async { StatusCode::OK }))
        .route("/skills/{name}/run", post(run))
        .with_state(skills);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port.parse::<u16>()?)).await?;
    axum::serve(listener, app).await?;
    Ok(())
}

/// Every `<name>.wasm` of `dir`, compiled and linked, each compile marked as its skill's.
fn compile_all(dir: &Path) -> Result<BTreeMap<String, Skill>> {
    let mut config = Config::new();
    config.wasm_component_model(true);
    let engine = Engine::new(&config)?;
    let mut linker = Linker::new(&engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    let mut skills = BTreeMap::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        let Some(name) = path
            .file_name()
            .and_then(|name| name.to_str()?.strip_suffix(".wasm"))
            .map(str::to_owned)
        else {
            continue;
        };
        let tag = SkillTag::new(&name);
        // This thread compiles for the skill until it leaves: its faults, CPU and time are
        // the skill's compile phase.
        let work = Work::new(&tag);
        work.begin(PHASE_COMPILE);
        let compiled = Component::from_file(&engine, &path);
        work.leave();
        let pre = world::SkillPre::new(linker.instantiate_pre(&compiled?)?)?;
        skills.insert(name, Skill { pre, tag });
    }
    Ok(skills)
}

async fn run(
    State(skills): State<Skills>,
    Route(name): Route<String>,
    input: Bytes,
) -> (StatusCode, String) {
    let Some(skill) = skills.get(&name) else {
        return (StatusCode::NOT_FOUND, format!("no skill {name}\n"));
    };
    let mut store = Store::new(
        skill.pre.engine(),
        Request {
            wasi: WasiCtx::builder().inherit_stderr().build(),
            table: ResourceTable::new(),
        },
    );
    // The request's future moves between the runtime's threads: `track` marks each poll
    // with the phase it is in, instantiating first, then calling.
    let work = Work::new(&skill.tag);
    // Counts the request as answered, with its latency, when this function returns.
    let _answering = work.answering();
    let phase = PhaseCell::new(PHASE_INSTANTIATE);
    let call = async {
        let instance = skill.pre.instantiate_async(&mut store).await?;
        phase.enter(&work, PHASE_CALL);
        instance.call_run(&mut store, &input).await
    };
    let outcome = work.track(&phase, call).await;
    // Dropping the store frees the instance's memories: the reset phase.
    work.begin(PHASE_RESET);
    drop(store);
    work.leave();
    match outcome {
        Ok(Ok(output)) => (
            StatusCode::OK,
            String::from_utf8_lossy(&output).into_owned(),
        ),
        Ok(Err(world::skillprof::skill::types::Error::InvalidInput(why))) => {
            skillprof_marks::failed(&skill.tag, skillprof_marks::FAILED_INPUT);
            (StatusCode::BAD_REQUEST, why)
        }
        Ok(Err(world::skillprof::skill::types::Error::Internal(why))) => {
            skillprof_marks::failed(&skill.tag, skillprof_marks::FAILED_ERROR);
            (StatusCode::INTERNAL_SERVER_ERROR, why)
        }
        Err(trap) => {
            skillprof_marks::failed(&skill.tag, skillprof_marks::FAILED_TRAP);
            (StatusCode::INTERNAL_SERVER_ERROR, format!("{trap:#}"))
        }
    }
}
