use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;

use super::{backoff, encode_json_lines, parse_url, resolve_headers};
use crate::error::SinkError;

#[test]
fn backoff_doubles_up_to_the_cap() {
    let ms = Duration::from_millis;
    let waits: Vec<_> = (1..=8).map(|n| backoff(n, ms(100), ms(2_000))).collect();
    assert_eq!(
        waits,
        [100, 200, 400, 800, 1600, 2000, 2000, 2000]
            .map(ms)
            .to_vec()
    );
    assert_eq!(backoff(u32::MAX, ms(100), ms(2_000)), ms(2_000));
    assert_eq!(backoff(0, ms(100), ms(2_000)), ms(100));
}

#[test]
fn header_env_values_come_from_the_environment_and_stay_secret() -> Result<(), SinkError> {
    let headers = BTreeMap::from([("x-team".to_owned(), "infra".to_owned())]);
    let env = BTreeMap::from([("authorization".to_owned(), "COLLECTOR_TOKEN".to_owned())]);
    let map = resolve_headers(&headers, &env, |var| {
        (var == "COLLECTOR_TOKEN").then(|| "Bearer s3cret".to_owned())
    })?;
    assert_eq!(map.get("x-team").map(|v| v.as_bytes()), Some(&b"infra"[..]));
    let auth = map.get("authorization");
    assert_eq!(auth.map(|v| v.as_bytes()), Some(&b"Bearer s3cret"[..]));
    assert!(auth.is_some_and(http::HeaderValue::is_sensitive));
    assert!(!format!("{map:?}").contains("s3cret"));

    let missing = resolve_headers(&headers, &env, |_| None);
    assert!(matches!(
        missing,
        Err(SinkError::HeaderEnvMissing { ref var, .. }) if var == "COLLECTOR_TOKEN"
    ));
    // A value that is not valid in a header is refused without being shown.
    let bad = resolve_headers(&headers, &env, |_| Some("s3cret\nx".to_owned()));
    let message = bad.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        message.contains("authorization") && !message.contains("s3cret"),
        "{message}"
    );
    Ok(())
}

#[test]
fn only_http_and_https_urls_with_a_host() {
    assert!(parse_url("http://127.0.0.1:4318/v1/traces").is_ok());
    assert!(parse_url("https://collector.example/ingest").is_ok());
    for bad in ["ftp://x/", "collector:80", "not a url", "file:///tmp/x"] {
        assert!(parse_url(bad).is_err(), "{bad}");
    }
    // The diagnostic never repeats the URL, whose query or user part may hold a key. A user
    // part is refused: it would not be sent, and the pool's debug lines show it.
    for bad in [
        "ftp://collector/ingest?api_key=s3cret-key",
        "https://collector/in gest?api_key=s3cret-key",
        "https://user:s3cret-key@collector/ingest",
        "http://s3cret-key@127.0.0.1:4318/v1/traces",
    ] {
        let error = parse_url(bad).unwrap_err().to_string();
        assert!(!error.contains("s3cret"), "{error}");
    }
}

#[test]
fn a_batch_is_json_lines_each_ending_in_one_newline() {
    let body = encode_json_lines(&[
        Bytes::from_static(b"{\"a\":1}"),
        Bytes::from_static(b"{\"b\":2}\n"),
    ]);
    assert_eq!(&body[..], b"{\"a\":1}\n{\"b\":2}\n");
}
