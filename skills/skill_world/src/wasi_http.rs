//! A skill as a `wasi:http/proxy` component: the request's body is the skill's input, the
//! response's body its answer; a failure is an error status with its message, as the skill
//! hosts answer one (400 for input the skill refuses, 500 for its own failure).

use std::io::{Read as _, Write as _};

use wasip2::http::types::{
    Fields, IncomingRequest, OutgoingBody, OutgoingResponse, ResponseOutparam,
};

use crate::Failure;

pub fn handle(
    request: IncomingRequest,
    response: ResponseOutparam,
    run: fn(Vec<u8>) -> Result<Vec<u8>, Failure>,
) {
    let (status, body) = match read_body(&request) {
        Ok(input) => match run(input) {
            Ok(answer) => (200, answer),
            Err(Failure::InvalidInput(message)) => (400, message.into_bytes()),
            Err(Failure::Internal(message)) => (500, message.into_bytes()),
        },
        Err(message) => (400, message.into_bytes()),
    };
    let headers = Fields::new();
    let outgoing = OutgoingResponse::new(headers);
    // Statuses above are all valid; set_status_code refuses only invalid ones.
    let _ = outgoing.set_status_code(status);
    let Ok(outgoing_body) = outgoing.body() else {
        return;
    };
    ResponseOutparam::set(response, Ok(outgoing));
    // A client that went away fails the writes; the request is over either way.
    if let Ok(mut stream) = outgoing_body.write() {
        let _ = stream.write_all(&body);
        let _ = stream.flush();
    }
    let _ = OutgoingBody::finish(outgoing_body, None);
}

fn read_body(request: &IncomingRequest) -> Result<Vec<u8>, String> {
    let body = request
        .consume()
        .map_err(|()| "the request's body was already taken".to_owned())?;
    let mut input = Vec::new();
    {
        let mut stream = body
            .stream()
            .map_err(|()| "the request's body has no stream".to_owned())?;
        stream
            .read_to_end(&mut input)
            .map_err(|e| format!("reading the request's body: {e}"))?;
    }
    Ok(input)
}
