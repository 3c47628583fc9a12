//! The skill worlds skillhost runs: `skillprof:skill` (a world-level `run`) in its own
//! dialect, and `pharia:skill@0.2` (`run` in the exported interface `skill-handler`) in the
//! 2024 dialect, which, like the 2024 host, refuses every other component. Everything else
//! in the host is the same for both: `invoke.rs` asks this module to instantiate and call.

use anyhow::{Context, Result, bail};
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Engine, Store};

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

/// A compiled skill, linked once for its world.
#[derive(Clone)]
pub enum SkillPre {
    Skillprof(skillprof_world::SkillPre<RequestState>),
    Pharia(pharia_world::SkillPre<RequestState>),
}

/// One instance, between instantiation and its call.
pub enum Instance {
    Skillprof(skillprof_world::Skill),
    Pharia(pharia_world::Skill),
}

/// The linkers of both worlds: WASI for both, and for `pharia:skill` its csi imports.
pub struct Linkers {
    skillprof: Linker<RequestState>,
    pharia: Linker<RequestState>,
}

impl Linkers {
    pub fn new(engine: &Engine) -> Result<Self> {
        let mut skillprof = Linker::new(engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut skillprof)?;
        let mut pharia = skillprof.clone();
        csi::add_to_linker::<_, HasSelf<RequestState>>(&mut pharia, |state| state)?;
        Ok(Linkers { skillprof, pharia })
    }

    /// Links `component` for the world `api` runs, or says why that world refuses it.
    pub fn link(&self, api: Api, engine: &Engine, component: &Component) -> Result<SkillPre> {
        match api {
            Api::Skillhost => Ok(SkillPre::Skillprof(skillprof_world::SkillPre::new(
                self.skillprof
                    .instantiate_pre(component)
                    .map_err(anyhow::Error::from)
                    .context("cannot be linked")?,
            )?)),
            Api::Pharia2024 | Api::Pharia2025 => {
                let exports: Vec<String> = component
                    .component_type()
                    .exports(engine)
                    .map(|(name, _)| name.to_owned())
                    .collect();
                if !exports.iter().any(|name| name.starts_with(PHARIA_HANDLER)) {
                    bail!(
                        "isn't using Pharia Skill: the component exports no {PHARIA_HANDLER}.x \
                         interface (it exports {}); build it against skills/wit/pharia",
                        exports.join(", ")
                    );
                }
                Ok(SkillPre::Pharia(pharia_world::SkillPre::new(
                    self.pharia
                        .instantiate_pre(component)
                        .map_err(anyhow::Error::from)
                        .context("cannot be linked")?,
                )?))
            }
        }
    }
}

impl SkillPre {
    pub fn engine(&self) -> &Engine {
        match self {
            SkillPre::Skillprof(pre) => pre.engine(),
            SkillPre::Pharia(pre) => pre.engine(),
        }
    }

    pub async fn instantiate(&self, store: &mut Store<RequestState>) -> wasmtime::Result<Instance> {
        Ok(match self {
            SkillPre::Skillprof(pre) => Instance::Skillprof(pre.instantiate_async(store).await?),
            SkillPre::Pharia(pre) => Instance::Pharia(pre.instantiate_async(store).await?),
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
        })
    }
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
