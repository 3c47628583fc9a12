//! A skill that fails on purpose, one way per `mode`, so each of the host's failure paths can
//! be tested: `{"mode": "trap" | "loop" | "error" | "invalid"}`, `trap` when absent.

use serde::Deserialize;
use skill_world::Failure;

#[derive(Deserialize, Default)]
#[serde(rename_all = "lowercase")]
enum Mode {
    /// A panic, which under `panic = "abort"` prints its message to stderr and then executes
    /// `unreachable`: the same trap a real bug in a skill produces.
    #[default]
    Trap,
    /// CPU-bound and never yields to the host: only an epoch deadline can end it.
    Loop,
    /// WIT `error::internal`, which the host maps to HTTP 500.
    Error,
    /// WIT `error::invalid-input`, which the host maps to HTTP 400.
    Invalid,
}

#[derive(Deserialize)]
struct Input {
    #[serde(default)]
    mode: Mode,
}

fn run(input: Vec<u8>) -> Result<Vec<u8>, Failure> {
    let input: Input =
        serde_json::from_slice(&input).map_err(|e| Failure::InvalidInput(e.to_string()))?;
    match input.mode {
        Mode::Trap => panic!("trap skill: trapping on purpose"),
        Mode::Loop => {
            // Real work in the loop body, so no optimiser can turn it into something the
            // host's epoch check would not see as a loop.
            let mut spins: u64 = 0;
            loop {
                spins = std::hint::black_box(spins.wrapping_add(1));
            }
        }
        Mode::Error => Err(Failure::Internal(
            "trap skill: internal error on purpose".into(),
        )),
        Mode::Invalid => Err(Failure::InvalidInput(
            "trap skill: invalid input on purpose".into(),
        )),
    }
}

skill_world::export_skill!(run);
