//! One request: a fresh store and instance from a skill's cached `InstancePre`, one call
//! of `run`, and a verdict that says exactly why a request failed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::{Store, Trap, UpdateDeadline, WasmBacktrace};

use crate::limits::MemoryLimiter;
use crate::marks::{PHASE_CALL, PHASE_INSTANTIATE, PHASE_RESET, PhaseCell, Work};
use crate::metrics::Metrics;
use crate::request::RequestState;
use crate::world::{SkillError, SkillPre};

/// A skill's JSON output and where the request's time went.
pub struct Answer {
    pub output: Vec<u8>,
    pub instantiate: Duration,
    pub call: Duration,
}

/// Why a request did not produce output; each maps to one HTTP status.
#[derive(Debug)]
pub enum Failure {
    /// The skill rejected its input (`error::invalid-input`).
    InvalidInput(String),
    /// The skill reported an error, trapped, or answered something that is not JSON.
    Skill(Fault, String),
    /// The request ran past its deadline.
    Deadline,
    /// The pooling allocator had no free slot.
    PoolExhausted(String),
}

/// What a skill did wrong: dialects answer each with their own status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Its own `error::internal`.
    Reported,
    /// A trap (the guest's panic, an out-of-bounds access, refused memory growth).
    Trapped,
    /// An answer that is not JSON.
    BadOutput,
}

pub struct Invocation<'a> {
    pub skill: &'a str,
    pub work: &'a Work,
    pub pre: &'a SkillPre,
    pub memory_limit: usize,
    pub deadline: Duration,
    pub metrics: &'a Arc<Metrics>,
}

impl Invocation<'_> {
    pub async fn run(&self, input: &[u8]) -> Result<Answer, Failure> {
        let engine = self.pre.engine();
        let state = RequestState::new(
            MemoryLimiter::new(self.memory_limit),
            self.metrics.instance_started(self.skill),
        );
        let mut store = Store::new(engine, state);
        store.limiter(RequestState::limiter);
        let verdict = self.serve(&mut store, input).await;
        // Dropping the store frees the instance: on demand its memories are unmapped, pooled
        // its slots are reset and given back, which is the allocator's cost per request too.
        self.work.begin(PHASE_RESET);
        drop(store);
        self.work.leave();
        verdict
    }

    async fn serve(
        &self,
        store: &mut Store<RequestState>,
        input: &[u8],
    ) -> Result<Answer, Failure> {
        let started = Instant::now();
        let deadline = self.deadline;
        // Guest code yields to the runtime at every epoch tick, so that a busy skill cannot
        // starve the others, and traps once its deadline has passed.
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(move |_| {
            if started.elapsed() >= deadline {
                Err(wasmtime::Error::from(Trap::Interrupt))
            } else {
                Ok(UpdateDeadline::Yield(1))
            }
        });

        // The timeout covers guests that wait in WASI (sleeping), which run no guest code
        // and so never see an epoch tick; dropping the future cancels the call.
        let mut instantiated = None;
        let phase = PhaseCell::new(PHASE_INSTANTIATE);
        let call = async {
            let skill = self.pre.instantiate(&mut *store).await?;
            instantiated = Some(started.elapsed());
            phase.enter(self.work, PHASE_CALL);
            skill.run(&mut *store, input).await
        };
        let call = self.work.track(&phase, call);
        let outcome = match tokio::time::timeout(deadline, call).await {
            Err(_elapsed) => return Err(Failure::Deadline),
            Ok(outcome) => outcome,
        };
        let (fault, problem) = match outcome {
            Ok(Ok(output)) => match serde_json::from_slice::<serde::de::IgnoredAny>(&output) {
                Ok(_) => {
                    let instantiate = instantiated.unwrap_or_default();
                    let call = started.elapsed().saturating_sub(instantiate);
                    return Ok(Answer {
                        output,
                        instantiate,
                        call,
                    });
                }
                Err(e) => (Fault::BadOutput, format!("answered with invalid JSON: {e}")),
            },
            Ok(Err(SkillError::InvalidInput(message))) => {
                return Err(Failure::InvalidInput(message));
            }
            Ok(Err(SkillError::Internal(message))) => (
                Fault::Reported,
                format!("reported an internal error: {message}"),
            ),
            Err(error) => match host_side(&error) {
                Some(failure) => return Err(failure),
                None => (Fault::Trapped, describe_trap(&error)),
            },
        };
        let skill = self.skill;
        // Guests turn refused memory growth into all kinds of errors; name the real cause.
        Err(Failure::Skill(
            fault,
            match store.data().refusal() {
                Some(refusal) => {
                    format!("skill '{skill}' {problem} (the host refused memory growth: {refusal})")
                }
                None => format!("skill '{skill}' {problem}"),
            },
        ))
    }
}

/// Failures that are the host's doing rather than the skill's.
fn host_side(error: &wasmtime::Error) -> Option<Failure> {
    if let Some(pool) = error.downcast_ref::<wasmtime::PoolConcurrencyLimitError>() {
        return Some(Failure::PoolExhausted(pool.to_string()));
    }
    if error.downcast_ref::<Trap>() == Some(&Trap::Interrupt) {
        return Some(Failure::Deadline);
    }
    None
}

/// The cause first (`wasm trap: ...`), then where it happened.
fn describe_trap(error: &wasmtime::Error) -> String {
    let mut text = format!("failed: {}", error.root_cause());
    if let Some(backtrace) = error.downcast_ref::<WasmBacktrace>() {
        text.push_str(&format!("\n{backtrace}"));
    }
    text
}
