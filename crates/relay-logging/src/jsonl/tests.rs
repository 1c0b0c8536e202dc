use std::fmt;

use serde_json::{Value, json};

use crate::{
    LogFormat,
    test_support::{capture, capture_json},
};

/// Checks `2026-11-30T01:08:00.123456Z`: RFC 3339, UTC, at least millisecond precision.
fn assert_rfc3339_utc_millis(timestamp: &str) {
    let bytes = timestamp.as_bytes();
    let digits = |range: std::ops::Range<usize>| bytes[range].iter().all(u8::is_ascii_digit);
    assert!(timestamp.len() >= 24, "{timestamp}");
    assert!(digits(0..4) && digits(5..7) && digits(8..10), "{timestamp}");
    assert!(
        digits(11..13) && digits(14..16) && digits(17..19),
        "{timestamp}"
    );
    assert_eq!(
        [
            bytes[4], bytes[7], bytes[10], bytes[13], bytes[16], bytes[19]
        ],
        *b"--T::.",
        "{timestamp}"
    );
    assert!(timestamp.ends_with('Z'), "{timestamp}");
    let fraction = &timestamp[20..timestamp.len() - 1];
    assert!(
        fraction.len() >= 3 && fraction.bytes().all(|b| b.is_ascii_digit()),
        "{timestamp}"
    );
    let year: u32 = timestamp[0..4].parse().unwrap();
    assert!(year >= 2025, "{timestamp}");
}

#[test]
fn a_plain_event_is_one_flat_object_with_the_fixed_keys() {
    let lines = capture_json(|| {
        tracing::warn!(
            target: "relay::proxy",
            peer = "127.0.0.1",
            attempts = 3u64,
            delta = -2i64,
            closed = true,
            ratio = 0.5,
            "connection closed"
        );
    });
    assert_eq!(lines.len(), 1);
    let line = &lines[0];
    assert_rfc3339_utc_millis(line["timestamp"].as_str().unwrap());
    assert_eq!(line["level"], "warn");
    assert_eq!(line["target"], "relay::proxy");
    assert_eq!(line["message"], "connection closed");
    assert_eq!(line["peer"], "127.0.0.1");
    assert_eq!(line["attempts"], 3);
    assert_eq!(line["delta"], -2);
    assert_eq!(line["closed"], true);
    assert_eq!(line["ratio"], 0.5);
    assert!(
        !line.contains_key("event"),
        "only lifecycle events carry `event`"
    );
    assert!(!line.contains_key("fields"));
    assert_eq!(line.len(), 9, "{line:?}");
}

#[test]
fn keys_come_in_a_fixed_order() {
    let output = capture("info", LogFormat::Jsonl, || {
        tracing::info!(
            zebra = 1u64,
            event = "worker_ready",
            alpha = 2u64,
            "worker is ready"
        );
    });
    let order = [
        "\"timestamp\"",
        "\"level\"",
        "\"target\"",
        "\"event\"",
        "\"message\"",
        "\"zebra\"",
        "\"alpha\"",
    ];
    let positions: Vec<usize> = order.iter().map(|key| output.find(key).unwrap()).collect();
    assert!(
        positions.windows(2).all(|pair| pair[0] < pair[1]),
        "{output}"
    );
    assert!(output.starts_with("{\"timestamp\":"), "{output}");
}

#[test]
fn levels_are_lowercase() {
    let lines = capture_json(|| {
        tracing::error!("e");
        tracing::warn!("w");
        tracing::info!("i");
        tracing::debug!("d");
        tracing::trace!("t");
    });
    let levels: Vec<&Value> = lines.iter().map(|line| &line["level"]).collect();
    assert_eq!(
        levels,
        [
            &json!("error"),
            &json!("warn"),
            &json!("info"),
            &json!("debug"),
            &json!("trace")
        ]
    );
}

#[test]
fn fields_named_like_fixed_keys_are_renamed_not_duplicated() {
    let output = capture("info", LogFormat::Jsonl, || {
        tracing::info!(level = "custom", timestamp = 7u64, "collision");
    });
    assert_eq!(output.matches("\"level\"").count(), 1, "{output}");
    assert_eq!(output.matches("\"timestamp\"").count(), 1, "{output}");
    let line: serde_json::Map<String, Value> = serde_json::from_str(output.trim_end()).unwrap();
    assert_eq!(line["level"], "info");
    assert_eq!(line["field_level"], "custom");
    assert_eq!(line["field_timestamp"], 7);
}

#[test]
fn line_breaks_in_values_stay_inside_one_line() {
    let output = capture("info", LogFormat::Jsonl, || {
        tracing::info!(
            detail = "first\nsecond\r\n{\"forged\":true}",
            "multi-line value"
        );
    });
    assert_eq!(output.lines().count(), 1, "{output}");
    let line: serde_json::Map<String, Value> = serde_json::from_str(output.trim_end()).unwrap();
    assert_eq!(line["detail"], "first\nsecond\r\n{\"forged\":true}");
    assert!(!line.contains_key("forged"));
}

#[derive(Debug)]
struct Failure;

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("disk full")
    }
}

impl std::error::Error for Failure {}

#[test]
fn display_debug_and_error_values_are_strings() {
    let lines = capture_json(|| {
        let error: &(dyn std::error::Error + 'static) = &Failure;
        tracing::info!(shown = %"display", debugged = ?("a", 1), error, "values");
    });
    let line = &lines[0];
    assert_eq!(line["shown"], "display");
    assert_eq!(line["debugged"], "(\"a\", 1)");
    assert_eq!(line["error"], "disk full");
}

#[test]
fn spans_are_not_written() {
    let lines = capture_json(|| {
        let span = tracing::info_span!("connection", span_field = "hidden");
        span.in_scope(|| tracing::info!(inner = 1u64, "inside a span"));
    });
    assert_eq!(lines.len(), 1);
    let line = &lines[0];
    assert_eq!(line["inner"], 1);
    for key in ["span", "spans", "span_field", "fields"] {
        assert!(!line.contains_key(key), "{key} in {line:?}");
    }
}

#[test]
fn an_event_without_message_has_an_empty_message() {
    let lines = capture_json(|| tracing::info!(count = 1u64));
    assert_eq!(lines[0]["message"], "");
}
