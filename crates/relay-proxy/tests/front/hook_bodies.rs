//! Hook bodies cost the daemon nothing before the credential is decided, and little after:
//! the attack of a caller who opens many connections and sends each a large hook body
//! slowly (SPEC §3.5, §3.6).

use std::net::Ipv4Addr;

use relay_proxy::front::Mode;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::support::{RawResponse, Relay, Setup, Tripwire, WAIT, read_response};

const LIMIT: usize = 1024 * 1024;

/// Opens a connection and sends the head of a hook request declaring a body of `LIMIT - 1`
/// bytes, plus the first KiB of that body; the rest is never sent.
async fn start_slow_hook(relay: &Relay, extra: &str) -> TcpStream {
    let mut stream = relay.connect().await;
    let head = format!(
        "POST /hooks/claude-code HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n{extra}\r\n{{\"pad\":\"{}",
        relay.host(),
        LIMIT - 1,
        "p".repeat(1024),
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream
}

/// Many slow hook bodies at once, each answered while almost all of it is still unsent.
async fn assert_refused_before_the_body(relay: &Relay, extra: &str) {
    let mut streams = Vec::new();
    for _ in 0..50 {
        streams.push(start_slow_hook(relay, extra).await);
    }
    let answers = futures_util::future::join_all(streams.iter_mut().map(read_response)).await;
    for answer in &answers {
        answer.assert_error(401, "relay_unauthorized");
    }
}

#[tokio::test]
async fn a_remote_daemon_refuses_callers_without_a_credential_before_reading_their_hook_body() {
    let tripwire = Tripwire::new().await;
    let mut setup = Setup::new(&tripwire.base_url());
    // A non-loopback bind without anonymous pass-through; the listener itself stays on
    // loopback so the test can reach it.
    setup.bind = Ipv4Addr::UNSPECIFIED;
    let relay = setup.start().await;
    assert_refused_before_the_body(&relay, "").await;
    assert!(!tripwire.was_touched().await);
}

#[tokio::test]
async fn malformed_and_refused_credentials_are_answered_before_the_hook_body() {
    let tripwire = Tripwire::new().await;
    let relay = Setup::new(&tripwire.base_url()).start().await;
    assert_refused_before_the_body(&relay, "x-relay-client-token: not-a-token\r\n").await;
    let twice = format!(
        "x-relay-client-token: {}\r\nx-relay-client-token: {}\r\n",
        crate::support::token(),
        crate::support::token()
    );
    assert_refused_before_the_body(&relay, &twice).await;
    let mut strict = Setup::new(&tripwire.base_url());
    strict.mode = Mode::RequireWorker;
    let strict = strict.start().await;
    assert_refused_before_the_body(&strict, "").await;
    assert!(!tripwire.was_touched().await);
}

/// Sends a small whole hook body without a credential (a pass-through on loopback).
async fn small_hook(relay: &Relay) -> RawResponse {
    let mut stream = relay.connect().await;
    let body = r#"{"hook_event_name":"Stop"}"#;
    let request = format!(
        "POST /hooks/claude-code HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        relay.host(),
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    read_response(&mut stream).await
}

#[tokio::test]
async fn the_hook_bodies_buffered_at_once_stay_within_the_daemons_budget() {
    let tripwire = Tripwire::new().await;
    let mut setup = Setup::new(&tripwire.base_url());
    // Room for two bodies at the limit.
    setup.hook_buffer_bytes = Some(2 * LIMIT as u64);
    let relay = setup.start().await;
    // Two callers that may pass through (loopback, no credential) start large bodies and
    // stall; their bodies are read, so they hold the whole budget.
    let mut first = start_slow_hook(&relay, "").await;
    let _second = start_slow_hook(&relay, "").await;
    // A third body finds no room: 429 with Retry-After, once the two hold their share.
    let deadline = tokio::time::Instant::now() + WAIT;
    let refused = loop {
        let answer = small_hook(&relay).await;
        if answer.status == 429 || tokio::time::Instant::now() > deadline {
            break answer;
        }
    };
    refused.assert_error(429, "relay_too_many_requests");
    assert_eq!(refused.header("retry-after"), Some("1"));
    // The first caller finishes its body: its answer comes, its room is returned, and
    // the next small hook is taken again.
    let rest = format!("{}\"}}", "p".repeat(LIMIT - 1 - 1024 - 10));
    first.write_all(rest.as_bytes()).await.unwrap();
    let answer = read_response(&mut first).await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.body, br#"{"continue":true}"#);
    let answer = small_hook(&relay).await;
    assert_eq!(answer.status, 200);
    assert!(!tripwire.was_touched().await);
}

/// A caller who starts a hook body and stalls gives its room in the budget back when the
/// time for a request head has passed: 408, and the next body is taken.
#[tokio::test]
async fn a_stalled_hook_body_is_answered_408_and_gives_its_room_back() {
    let tripwire = Tripwire::new().await;
    let mut setup = Setup::new(&tripwire.base_url()).header_read_timeout(1.0);
    // Room for one body at the limit.
    setup.hook_buffer_bytes = Some(LIMIT as u64);
    let relay = setup.start().await;
    let started = tokio::time::Instant::now();
    let mut stalled = start_slow_hook(&relay, "").await;
    let answer = tokio::time::timeout(WAIT, read_response(&mut stalled))
        .await
        .expect("the stalled body was never answered");
    answer.assert_error(408, "relay_bad_request");
    assert_eq!(answer.header("connection"), Some("close"));
    let took = started.elapsed();
    assert!(took >= std::time::Duration::from_millis(900), "{took:?}");
    let answer = small_hook(&relay).await;
    assert_eq!(answer.status, 200);
    assert!(!tripwire.was_touched().await);
}
