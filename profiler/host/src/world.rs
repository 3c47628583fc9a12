//! The skill worlds skillhost runs: `skillprof:skill` (a world-level `run`) and
//! `wasi:http/proxy` (an exported `incoming-handler`, whose request's body is the input and
//! whose response's body the output) in its own dialect, and `pharia:skill@0.2` (`run` in
//! the exported interface `skill-handler`) in the 2024 dialect, which, like the 2024 host,
//! refuses every other component. Everything else in the host is the same for all three:
//! `invoke.rs` asks this module to instantiate and call.

use std::sync::Arc;

use anyhow::{Context, Result, bail};
use http_body_util::{BodyExt, Full};
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Engine, Store};
use wasmtime_wasi_http::WasiHttpView;
use wasmtime_wasi_http::p2::bindings::http::types::Scheme;
use wasmtime_wasi_http::p2::bindings::{Proxy, ProxyPre};

use crate::config::Api;
use crate::request::RequestState;

mod skillprof_world {
    wasmtime::component::bindgen!({
        path: "../../skills/wit/skillprof",
        world: "skill",
        exports: { default: async },
    });
}

mod pharia_world {
    wasmtime::component::bindgen!({
        path: "../../skills/wit/pharia",
        world: "skill",
        // The csi functions fail with a trap, so they must be able to return an error.
        imports: { default: trappable },
        exports: { default: async },
    });
}

use pharia_world::pharia::skill::csi;

/// What a skill's `run` reported, the same two cases in both worlds.
pub enum SkillError {
    InvalidInput(String),
    Internal(String),
}

/// The interface the 2024 host looked for; 0.1 components it also ran are refused here.
const PHARIA_HANDLER: &str = "pharia:skill/skill-handler@0.2";
/// The interface a wasi:http proxy exports (`wasmtime serve`'s components).
const HTTP_HANDLER: &str = "wasi:http/incoming-handler@0.2";

/// A compiled skill, linked once for its world.
#[derive(Clone)]
pub enum SkillPre {
    Skillprof(skillprof_world::SkillPre<RequestState>),
    Pharia(pharia_world::SkillPre<RequestState>),
    /// A proxy, and the path each execute's request goes to.
    Http(ProxyPre<RequestState>, Arc<str>),
}

/// One instance, between instantiation and its call.
pub enum Instance {
    Skillprof(skillprof_world::Skill),
    Pharia(pharia_world::Skill),
    Http(Proxy, Arc<str>),
}

/// The linkers of the worlds: WASI for all, for `pharia:skill` its csi imports, for
/// `wasi:http/proxy` wasi:http's.
pub struct Linkers {
    skillprof: Linker<RequestState>,
    pharia: Linker<RequestState>,
    http: Linker<RequestState>,
    /// Where a proxy's requests go (`--http-path`).
    http_path: Arc<str>,
}

impl Linkers {
    pub fn new(engine: &Engine, http_path: &str) -> Result<Self> {
        let mut skillprof = Linker::new(engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut skillprof)?;
        crate::clock::add_to_linker(&mut skillprof)?;
        let mut pharia = skillprof.clone();
        csi::add_to_linker::<_, HasSelf<RequestState>>(&mut pharia, |state| state)?;
        let mut http = skillprof.clone();
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut http)?;
        Ok(Linkers {
            skillprof,
            pharia,
            http,
            http_path: http_path.into(),
        })
    }

    /// Links `component` for the world `api` runs, or says why that world refuses it.
    pub fn link(&self, api: Api, engine: &Engine, component: &Component) -> Result<SkillPre> {
        let exports: Vec<String> = component
            .component_type()
            .exports(engine)
            .map(|(name, _)| name.to_owned())
            .collect();
        let link = |linker: &Linker<RequestState>| {
            linker
                .instantiate_pre(component)
                .map_err(anyhow::Error::from)
                .context("cannot be linked")
        };
        match api {
            Api::Skillhost if exports.iter().any(|name| name.starts_with(HTTP_HANDLER)) => Ok(
                SkillPre::Http(ProxyPre::new(link(&self.http)?)?, self.http_path.clone()),
            ),
            Api::Skillhost => Ok(SkillPre::Skillprof(skillprof_world::SkillPre::new(link(
                &self.skillprof,
            )?)?)),
            Api::Pharia2024 | Api::Pharia2025 => {
                if !exports.iter().any(|name| name.starts_with(PHARIA_HANDLER)) {
                    bail!(
                        "isn't using Pharia Skill: the component exports no {PHARIA_HANDLER}.x \
                         interface (it exports {}); build it against skills/wit/pharia",
                        exports.join(", ")
                    );
                }
                Ok(SkillPre::Pharia(pharia_world::SkillPre::new(link(
                    &self.pharia,
                )?)?))
            }
        }
    }
}

impl SkillPre {
    pub fn engine(&self) -> &Engine {
        match self {
            SkillPre::Skillprof(pre) => pre.engine(),
            SkillPre::Pharia(pre) => pre.engine(),
            SkillPre::Http(pre, _) => pre.engine(),
        }
    }

    pub async fn instantiate(&self, store: &mut Store<RequestState>) -> wasmtime::Result<Instance> {
        Ok(match self {
            SkillPre::Skillprof(pre) => Instance::Skillprof(pre.instantiate_async(store).await?),
            SkillPre::Pharia(pre) => Instance::Pharia(pre.instantiate_async(store).await?),
            SkillPre::Http(pre, path) => {
                Instance::Http(pre.instantiate_async(store).await?, path.clone())
            }
        })
    }
}

impl Instance {
    pub async fn run(
        &self,
        store: &mut Store<RequestState>,
        input: &[u8],
    ) -> wasmtime::Result<Result<Vec<u8>, SkillError>> {
        use pharia_world::exports::pharia::skill::skill_handler::Error as PhariaError;
        use skillprof_world::skillprof::skill::types::Error as SkillprofError;
        Ok(match self {
            Instance::Skillprof(skill) => {
                skill.call_run(store, input).await?.map_err(|e| match e {
                    SkillprofError::InvalidInput(m) => SkillError::InvalidInput(m),
                    SkillprofError::Internal(m) => SkillError::Internal(m),
                })
            }
            Instance::Pharia(skill) => skill
                .pharia_skill_skill_handler()
                .call_run(store, input)
                .await?
                .map_err(|e| match e {
                    PhariaError::InvalidInput(m) => SkillError::InvalidInput(m),
                    PhariaError::Internal(m) => SkillError::Internal(m),
                }),
            Instance::Http(proxy, path) => handle(proxy, store, path, input).await?,
        })
    }
}

/// One request to a proxy: `POST path` with the input as its JSON body. Its answer's body is
/// the output (JSON as it is, anything else as a JSON string); a 4xx is input the component
/// rejects, any other status outside 2xx its error.
async fn handle(
    proxy: &Proxy,
    store: &mut Store<RequestState>,
    path: &str,
    input: &[u8],
) -> wasmtime::Result<Result<Vec<u8>, SkillError>> {
    let request = hyper::Request::post(path)
        .header(hyper::header::HOST, "skillhost")
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(
            Full::new(axum::body::Bytes::copy_from_slice(input))
                .map_err(|never| -> wasmtime_wasi_http::Error { match never {} }),
        )?;
    let (sender, receiver) = tokio::sync::oneshot::channel();
    let request = store
        .data_mut()
        .http()
        .new_incoming_request(Scheme::Http, request)?;
    let response = store.data_mut().http().new_response_outparam(sender)?;
    // The component streams its body while `handle` runs: both are driven at once, or a body
    // larger than the stream's buffer would wait for a reader that waits for `handle`.
    let call = proxy
        .wasi_http_incoming_handler()
        .call_handle(&mut *store, request, response);
    let answer = async {
        let response = match receiver.await {
            Ok(Ok(response)) => response,
            Ok(Err(code)) => return Err(format!("answered the error {code:?}")),
            Err(_) => return Err("never set a response".to_owned()),
        };
        let status = response.status();
        match response.into_body().collect().await {
            Ok(body) => Ok((status, body.to_bytes())),
            Err(e) => Err(format!("answered {status} with a body that failed: {e:?}")),
        }
    };
    let (called, answer) = tokio::join!(call, answer);
    called?;
    let (status, body) = match answer {
        Ok(answer) => answer,
        Err(problem) => return Ok(Err(SkillError::Internal(problem))),
    };
    let text = String::from_utf8_lossy(&body).trim().to_owned();
    if status.is_success() {
        return Ok(Ok(
            match serde_json::from_slice::<serde::de::IgnoredAny>(&body) {
                Ok(_) => body.to_vec(),
                Err(_) => serde_json::to_vec(&text)?,
            },
        ));
    }
    let said = format!("answered {status}: {text}");
    Ok(Err(match status.is_client_error() {
        true => SkillError::InvalidInput(said),
        false => SkillError::Internal(said),
    }))
}

/// skillhost has no inference backend. No sample skill calls csi; one that does traps here,
/// with this reason in its 500.
impl csi::Host for RequestState {
    fn complete(
        &mut self,
        model: String,
        _prompt: String,
        _params: csi::CompletionParams,
    ) -> wasmtime::Result<csi::Completion> {
        Err(wasmtime::Error::msg(format!(
            "csi complete({model}) called, but skillhost has no inference backend"
        )))
    }
}
