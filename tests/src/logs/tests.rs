use std::time::Duration;

use super::*;

#[test]
fn only_complete_json_object_lines_are_events() {
    let raw = b"{\"event\":\"a\"}\nnot json\n[1,2]\n{\"event\":\"b\"}\n{\"event\":\"c\"";
    let open: Vec<_> = parse_events(raw, false)
        .iter()
        .map(|e| e["event"].clone())
        .collect();
    assert_eq!(open, ["a", "b"], "the unterminated line may still grow");
    let closed: Vec<_> = parse_events(raw, true)
        .iter()
        .map(|e| e["event"].clone())
        .collect();
    assert_eq!(closed, ["a", "b"], "a truncated object is not JSON");
    assert_eq!(parse_events(b"{\"event\":\"x\"}", true).len(), 1);
    assert!(parse_events(b"{\"event\":\"x\"}", false).is_empty());
}

#[test]
fn complete_lines_wait_for_their_line_end() {
    assert_eq!(complete_lines(b"a\nb\nc", false), ["a", "b"]);
    assert_eq!(complete_lines(b"a\nb\nc", true), ["a", "b", "c"]);
    assert_eq!(complete_lines(b"a\r\n", false), ["a"]);
    assert_eq!(complete_lines(b"\n", false), [""]);
    assert!(complete_lines(b"abc", false).is_empty());
    assert!(complete_lines(b"", true).is_empty());
}

#[test]
fn contains_finds_needles_across_lines() {
    assert!(contains(b"ab\ncd", b"b\nc"));
    assert!(contains(b"abc", b""));
    assert!(!contains(b"abc", b"abcd"));
}

#[tokio::test]
async fn waiting_sees_an_event_written_later() {
    let logs = Logs::new("test");
    let writer = logs.clone();
    let waiting = tokio::spawn(async move {
        logs.wait_for_event("daemon_listening", Duration::from_secs(5))
            .await
    });
    writer.push(b"{\"event\":\"other\"}\n{\"event\":\"daemon_");
    writer.push(b"listening\",\"socket_activated\":true}\n");
    let event = waiting.await.unwrap().unwrap();
    assert_eq!(event["socket_activated"], true);
}

#[tokio::test]
async fn waiting_fails_when_stderr_closes_without_the_event() {
    let logs = Logs::new("relayd");
    logs.push(b"relayd: something went wrong\n");
    logs.close();
    let error = logs
        .wait_for_event("daemon_listening", Duration::from_secs(5))
        .await
        .unwrap_err();
    let message = error.to_string();
    assert!(message.contains("daemon_listening"), "{message}");
    assert!(message.contains("something went wrong"), "{message}");
}

#[tokio::test]
async fn waiting_fails_at_the_deadline() {
    let logs = Logs::new("relayd");
    let error = logs
        .wait_for_event("daemon_stopped", Duration::from_millis(50))
        .await
        .unwrap_err();
    assert!(matches!(error, Error::LogEventTimedOut { .. }), "{error}");
}

#[test]
fn timestamps_are_read_as_utc_instants() {
    let at = |text: &str| {
        parse_utc_timestamp(text).map(|t| t.duration_since(SystemTime::UNIX_EPOCH).unwrap())
    };
    assert_eq!(at("1970-01-01T00:00:00Z"), Some(Duration::ZERO));
    // 2026-11-30T01:08:00Z is 1_796_000_880 s after the epoch (date -u -d … +%s).
    assert_eq!(
        at("2026-11-30T01:08:00.123456Z"),
        Some(Duration::new(1_796_000_880, 123_456_000))
    );
    assert_eq!(
        at("2024-02-29T23:59:59.5Z"),
        Some(Duration::new(1_709_251_199, 500_000_000))
    );
    assert_eq!(at("2026-11-30 01:08:00Z"), None);
    assert_eq!(at("2026-11-30T01:08:00+01:00"), None);
    assert_eq!(at("2026-13-30T01:08:00Z"), None);
    let event = serde_json::json!({"timestamp": "2026-11-30T01:08:00.5Z"});
    let later = serde_json::json!({"timestamp": "2026-11-30T01:08:02Z"});
    let gap = event_time(&later)
        .unwrap()
        .duration_since(event_time(&event).unwrap())
        .unwrap();
    assert_eq!(gap, Duration::from_millis(1500));
    assert_eq!(event_time(&serde_json::json!({})), None);
}
