//! relay-mcp's JSON-RPC core (SPEC §6): `Server::handle_line`, compiled from the binary's own
//! `jsonrpc.rs`.

use serde_json::Value;

use crate::relay_mcp_jsonrpc::{Reply, Server};

/// One stdin line, answered with `initialize` at once and deferred. An answer is one JSON-RPC
/// 2.0 object on one line with exactly one of `result` and `error`, and its id is the request's
/// or null; only a deferring server defers, and only `initialize`.
pub fn mcp_line(data: &[u8]) {
    let request = serde_json::from_slice::<Value>(data).ok();
    for defer in [false, true] {
        let mut server = Server::new();
        server.set_defer_initialize(defer);
        match server.handle_line(data) {
            Reply::None => {}
            Reply::Some(line) => check_answer(&line, request.as_ref()),
            Reply::Defer(_) => {
                assert!(defer, "a server that answers at once deferred");
                let method = request
                    .as_ref()
                    .and_then(|r| r.get("method"))
                    .and_then(Value::as_str);
                assert_eq!(method, Some("initialize"), "only initialize is deferred");
            }
        }
    }
}

fn check_answer(line: &[u8], request: Option<&Value>) {
    assert_eq!(line.last(), Some(&b'\n'), "an answer ends its line");
    assert_eq!(
        line.iter().filter(|b| **b == b'\n').count(),
        1,
        "an answer is one line"
    );
    let answer = match serde_json::from_slice::<Value>(line) {
        Ok(Value::Object(answer)) => answer,
        Ok(other) => panic!("an answer is not an object: {other}"),
        Err(error) => panic!("an answer is not json: {error}"),
    };
    assert_eq!(answer.get("jsonrpc"), Some(&Value::from("2.0")));
    assert!(
        answer.contains_key("result") != answer.contains_key("error"),
        "an answer has exactly one of result and error"
    );
    let id = answer.get("id").unwrap_or(&Value::Null);
    let request_id = request.and_then(|r| r.get("id"));
    assert!(
        id.is_null() || Some(id) == request_id,
        "the answer's id {id} is neither null nor the request's {request_id:?}"
    );
    if answer.contains_key("result") {
        assert_eq!(Some(id), request_id, "a result answers the request's id");
    }
}
