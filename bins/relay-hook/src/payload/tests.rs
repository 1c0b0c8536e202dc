use super::*;

fn read(input: &[u8], limit: usize) -> Payload {
    let far = Instant::now() + std::time::Duration::from_secs(60);
    let arrived = read_within(io::Cursor::new(input.to_vec()), limit, |_| far).unwrap();
    assert!(!arrived.late);
    arrived.payload
}

/// Input that stays open is read until the deadline of the event it names, and no longer.
#[test]
fn an_input_left_open_is_read_until_its_events_deadline() {
    let (reader, mut writer) = std::io::pipe().unwrap();
    std::io::Write::write_all(&mut writer, br#"{"hook_event_name":"SessionEnd"}"#).unwrap();
    let started = Instant::now();
    let short = std::time::Duration::from_millis(200);
    let arrived = read_within(reader, MAX_PAYLOAD_BYTES, |event| {
        let timeout = if event == Some("SessionEnd") {
            short
        } else {
            short * 100
        };
        started + timeout
    })
    .unwrap();
    assert!(arrived.late);
    assert_eq!(arrived.payload.event.as_deref(), Some("SessionEnd"));
    assert!(started.elapsed() >= short);
    drop(writer);
}

#[test]
fn a_payload_is_kept_byte_for_byte() {
    let input = b"{ \"b\":1, \"hook_event_name\" : \"PreToolUse\",\n \"a\": [1,2] }\n";
    let payload = read(input, MAX_PAYLOAD_BYTES);
    assert_eq!(&payload.body[..], &input[..]);
    assert!(!payload.is_oversize);
    assert_eq!(payload.event.as_deref(), Some("PreToolUse"));
}

#[test]
fn empty_stdin_is_an_empty_object() {
    let payload = read(b"", MAX_PAYLOAD_BYTES);
    assert_eq!(&payload.body[..], b"{}");
    assert!(!payload.is_oversize);
    assert_eq!(payload.event, None);
}

#[test]
fn the_limit_is_inclusive_and_reading_stops_one_byte_past_it() {
    let exact = vec![b' '; 16];
    let payload = read(&exact, 16);
    assert!(!payload.is_oversize);
    assert_eq!(payload.body.len(), 16);

    let over = vec![b' '; 100];
    let payload = read(&over, 16);
    assert!(payload.is_oversize);
    assert_eq!(payload.body.len(), 17);
}

#[test]
fn an_oversize_payload_still_names_its_event() {
    let mut input = br#"{"hook_event_name":"PreToolUse","tool_input":{"content":""#.to_vec();
    input.extend(std::iter::repeat_n(b'x', 64));
    input.extend(br#""}}"#);
    let payload = read(&input, 48);
    assert!(payload.is_oversize);
    assert_eq!(payload.event.as_deref(), Some("PreToolUse"));
}

#[test]
fn only_a_top_level_string_names_the_event() {
    assert_eq!(
        event_name(br#"{"hook_event_name":"Stop"}"#).as_deref(),
        Some("Stop")
    );
    assert_eq!(
        event_name(br#"{"event":{"hook_event_name":"PreToolUse"},"x":1}"#),
        None
    );
    assert_eq!(event_name(br#"{"hook_event_name":["PreToolUse"]}"#), None);
    assert_eq!(
        event_name(br#"{"hook_event_name":{"a":"PreToolUse"}}"#),
        None
    );
    assert_eq!(event_name(br#"{"hook_event_name":null}"#), None);
    assert_eq!(event_name(br#"{"hook_event_name":7}"#), None);
    assert_eq!(event_name(br#"["hook_event_name","PreToolUse"]"#), None);
    assert_eq!(event_name(br#""PreToolUse""#), None);
    assert_eq!(event_name(b"not json"), None);
    assert_eq!(event_name(b""), None);
}

#[test]
fn escapes_are_decoded_and_the_last_key_wins() {
    assert_eq!(
        event_name(br#"{"hook\u005fevent_name":"Pre\u0054oolUse"}"#).as_deref(),
        Some("PreToolUse")
    );
    assert_eq!(
        event_name(br#"{"hook_event_name":"Stop","hook_event_name":"PreToolUse"}"#).as_deref(),
        Some("PreToolUse")
    );
}

#[test]
fn a_payload_broken_after_the_name_keeps_the_name() {
    assert_eq!(
        event_name(br#"{"hook_event_name":"tool_call","event":{"type":"#).as_deref(),
        Some("tool_call")
    );
    assert_eq!(
        event_name(br#"{"hook_event_name":"user_bash"} trailing"#).as_deref(),
        Some("user_bash")
    );
    assert_eq!(event_name(br#"{"event":{"type":"#), None);
}

#[test]
fn every_fixture_names_its_event() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut seen = 0;
    for agent in ["claude-code", "codex", "pi"] {
        for entry in std::fs::read_dir(dir.join(agent)).unwrap() {
            let path = entry.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            let expected: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            let expected = expected["hook_event_name"].as_str().unwrap().to_owned();
            assert_eq!(event_name(&bytes), Some(expected), "{}", path.display());
            seen += 1;
        }
    }
    assert!(seen >= 30, "only {seen} fixtures");
}
