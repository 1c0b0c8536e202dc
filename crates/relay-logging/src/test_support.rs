//! Helpers shared by the unit tests: run code under a capturing subscriber.

use serde_json::Value;

use crate::{LogCapture, LogConfig, LogFormat, subscriber};

/// Runs `body` under a subscriber with `level` and `format`, returns what it wrote.
pub(crate) fn capture(level: &str, format: LogFormat, body: impl FnOnce()) -> String {
    let capture = LogCapture::new();
    let config = LogConfig {
        level: level.to_owned(),
        format,
    };
    let dispatch = subscriber(&config, capture.clone()).unwrap();
    tracing::dispatcher::with_default(&dispatch, body);
    capture.contents()
}

/// Runs `body` under a JSON-lines subscriber at `trace` and parses every line, checking that
/// each one is a single JSON object.
pub(crate) fn capture_json(body: impl FnOnce()) -> Vec<serde_json::Map<String, Value>> {
    let output = capture("trace", LogFormat::Jsonl, body);
    assert!(output.is_empty() || output.ends_with('\n'), "{output:?}");
    output
        .lines()
        .map(|line| match serde_json::from_str::<Value>(line) {
            Ok(Value::Object(object)) => object,
            other => panic!("not one JSON object per line: {line:?} -> {other:?}"),
        })
        .collect()
}
