//! The smallest useful skill: it does no work, so a throughput test measures the host's cost
//! per request and nothing else.

wit_bindgen::generate!({ world: "skill", path: "../wit" });

use serde::Deserialize;

#[derive(Deserialize)]
struct Input {
    topic: Option<String>,
}

struct Hello;

impl Guest for Hello {
    fn run(input: Vec<u8>) -> Result<Vec<u8>, Error> {
        let input: Input =
            serde_json::from_slice(&input).map_err(|e| Error::InvalidInput(e.to_string()))?;
        let topic = input.topic.as_deref().unwrap_or("world");
        let reply = serde_json::json!({ "greeting": format!("Hello, {topic}!") });
        Ok(reply.to_string().into_bytes())
    }
}

export!(Hello);
