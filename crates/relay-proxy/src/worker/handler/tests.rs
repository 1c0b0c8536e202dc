use super::*;
use crate::upstream::UpstreamError;

#[test]
fn hook_answers_are_the_agents_allow_answers() {
    assert_eq!(allow_answer(Agent::ClaudeCode), br#"{"continue":true}"#);
    assert_eq!(allow_answer(Agent::Codex), b"{}");
    assert_eq!(allow_answer(Agent::Pi), b"{}");
}

#[test]
fn every_503_carries_retry_after() {
    let res = unavailable();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(res.headers()[header::RETRY_AFTER], "1");
    assert_eq!(res.headers()[header::CACHE_CONTROL], "no-store");
}

#[test]
fn provider_failures_map_to_the_answers_of_section_3_7() {
    let io = || Box::new(std::io::Error::other("x")) as Box<dyn std::error::Error + Send + Sync>;
    for (failure, status) in [
        (UpstreamError::ConnectTimeout, 504),
        (UpstreamError::ResponseHeadTimeout, 504),
        (UpstreamError::Unreachable(io()), 502),
        (UpstreamError::Failed(io()), 502),
        (UpstreamError::BodyTooLarge { limit: 5 }, 413),
    ] {
        assert_eq!(
            upstream_error(&failure).status().as_u16(),
            status,
            "{failure}"
        );
    }
}

#[test]
fn declared_length_reads_only_a_number() {
    let mut headers = HeaderMap::new();
    assert_eq!(content_length(&headers), None);
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static(" 42 "));
    assert_eq!(content_length(&headers), Some(42));
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("4x"));
    assert_eq!(content_length(&headers), None);
}

#[test]
fn default_limits_are_the_daemons_defaults() {
    let limits = WorkerLimits::default();
    assert_eq!(limits.max_request_body_bytes, 32 * 1024 * 1024);
    assert_eq!(limits.max_hook_body_bytes, 1024 * 1024);
    assert_eq!(limits.stream_idle, Duration::from_secs(600));
}
