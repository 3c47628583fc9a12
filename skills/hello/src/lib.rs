//! The smallest useful skill: it does no work, so a throughput test measures the host's cost
//! per request and nothing else.

use serde::Deserialize;
use skill_world::Failure;

#[derive(Deserialize)]
struct Input {
    topic: Option<String>,
}

fn run(input: Vec<u8>) -> Result<Vec<u8>, Failure> {
    let input: Input =
        serde_json::from_slice(&input).map_err(|e| Failure::InvalidInput(e.to_string()))?;
    let topic = input.topic.as_deref().unwrap_or("world");
    let reply = serde_json::json!({ "greeting": format!("Hello, {topic}!") });
    Ok(reply.to_string().into_bytes())
}

skill_world::export_skill!(run);
