//! Hook payloads (SPEC §3.5, §7.1): the daemon's event-name extraction (`hook_event` in
//! relay-proxy's front) and relay-hook's payload reader, compiled from the binary's own
//! `payload.rs`.

use serde::de::IgnoredAny;
use serde_json::Value;

use crate::relay_hook_payload::{event_name, read_payload};

/// The daemon's reading of a hook body: a JSON object or nothing (`None`, answered 400), and
/// within it the top-level `hook_event_name` when it is a plain string. Every JSON object is
/// read, nothing else is, and the name it reads is the document's.
pub fn hook_event(data: &[u8]) {
    let answer = relay_proxy::front::fuzz_hook_event(data);
    let document = serde_json::from_slice::<Value>(data);
    // Every JSON object is a hook payload; what is read as one is at least JSON syntax (lone
    // surrogate escapes and bytes that are not UTF-8 may be refused, huge numbers need not be).
    if let Ok(Value::Object(_)) = &document {
        assert!(
            answer.is_some(),
            "a json object was refused as a hook payload"
        );
    }
    if answer.is_some() {
        let object = data
            .iter()
            .find(|b| !b.is_ascii_whitespace())
            .is_some_and(|b| *b == b'{');
        assert!(
            object && serde_json::from_slice::<IgnoredAny>(data).is_ok(),
            "a body that is not a json object was read as a hook payload"
        );
    }
    if let (Some(Some(name)), Ok(document)) = (answer, &document) {
        assert_eq!(
            document.get("hook_event_name").and_then(Value::as_str),
            Some(name),
            "the event name is not the document's"
        );
    }
}

/// relay-hook's payload: the bytes posted are the bytes read (up to the limit and one more),
/// an oversize payload is flagged, and the event name is the document's top-level
/// `hook_event_name` string (the last one when it repeats) whenever the payload is JSON.
pub fn hook_payload(data: &[u8]) {
    let name = event_name(data);
    if let Ok(Value::Object(document)) = serde_json::from_slice::<Value>(data) {
        assert_eq!(
            name.as_deref(),
            document.get("hook_event_name").and_then(Value::as_str),
            "the event name is not the document's"
        );
    }
    for limit in [0, 1, data.len() / 2, data.len(), 1024 * 1024] {
        let payload = match read_payload(data, limit) {
            Ok(payload) => payload,
            Err(error) => panic!("reading from memory failed: {error}"),
        };
        if data.is_empty() {
            assert_eq!(&payload.body[..], b"{}");
            assert!(!payload.is_oversize);
            continue;
        }
        let kept = data.len().min(limit.saturating_add(1));
        assert_eq!(
            &payload.body[..],
            &data[..kept],
            "the body is not the bytes read"
        );
        assert_eq!(payload.is_oversize, data.len() > limit);
        assert_eq!(payload.event, event_name(&data[..kept]));
    }
}
