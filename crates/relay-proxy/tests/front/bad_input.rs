//! §3.6: every bad input gets its status and a JSON error, and no complete request reaches
//! the provider.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, StatusCode};
use http_body_util::{BodyExt as _, Full, StreamBody};
use hyper::body::Frame;
use relay_testkit::StandIn;
use tokio::io::AsyncWriteExt;

use crate::support::{
    Relay, Setup, Tripwire, WAIT, h2c_client, http1_client, is_closed_within, non_loopback_ip,
    raw_exchange, read_response, read_to_length, stream_request,
};

fn post_head(host: &str, path: &str, extra: &str) -> String {
    format!("POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n{extra}\r\n")
}

#[tokio::test]
async fn a_content_length_over_the_limit_is_413_before_any_upstream_connection() {
    let tripwire = Tripwire::new().await;
    let mut setup = Setup::new(&tripwire.base_url());
    setup.config.daemon.max_request_body_bytes = 1024;
    let relay = setup.start().await;
    for path in ["/v1/messages", "/v1/responses", "/v1/chat/completions"] {
        let mut stream = relay.connect().await;
        let res = raw_exchange(
            &mut stream,
            post_head(&relay.host(), path, "Content-Length: 1025\r\n").as_bytes(),
        )
        .await;
        res.assert_error(413, "relay_payload_too_large");
        // The body is not read, so the connection closes after the answer, and says so.
        assert_eq!(res.header("connection"), Some("close"));
    }
    // At the limit it goes through (to the tripwire, which never answers: just check it
    // was reached, so the limit is not off by one).
    let mut stream = relay.connect().await;
    let mut request = post_head(&relay.host(), "/v1/messages", "Content-Length: 1024\r\n");
    request.push_str(&"x".repeat(1024));
    assert!(!tripwire.was_touched().await);
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut reached = false;
    for _ in 0..100 {
        if tripwire.was_touched().await {
            reached = true;
            break;
        }
    }
    assert!(reached, "a body at the limit was not forwarded");
}

#[tokio::test]
async fn a_chunked_body_crossing_the_limit_is_cut_upstream_and_answered_413() {
    let stand_in = StandIn::start().await.unwrap();
    let mut setup = Setup::new(&stand_in.base_url());
    setup.config.daemon.max_request_body_bytes = 1024;
    let relay = setup.start().await;
    let mut stream = relay.connect().await;
    stream
        .write_all(
            post_head(
                &relay.host(),
                "/v1/messages",
                "Transfer-Encoding: chunked\r\n",
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let chunk = format!("200\r\n{}\r\n", "a".repeat(0x200));
    for _ in 0..4 {
        stream.write_all(chunk.as_bytes()).await.unwrap();
    }
    // The client never gets to finish; Relay answers as soon as the limit is crossed.
    let res = read_response(&mut stream).await;
    res.assert_error(413, "relay_payload_too_large");
    assert_eq!(res.header("connection"), Some("close"));
    let recorded = stand_in.wait_for_requests(1, WAIT).await.unwrap();
    assert!(
        !recorded[0].body_complete,
        "the provider got a complete request"
    );
    assert!(recorded[0].body.len() <= 1024);

    // The same over HTTP/2, with a body of unknown length.
    stand_in.clear_requests();
    let frames = (0..4)
        .map(|_| Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from(vec![b'b'; 512]))));
    let body = StreamBody::new(futures_util::stream::iter(frames));
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<StreamBody<_>>();
    let req = relay
        .request(Method::POST, "/v1/chat/completions")
        .header("content-type", "application/json")
        .body(body)
        .unwrap();
    let res = client.request(req).await.unwrap();
    assert_eq!(res.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let recorded = stand_in.wait_for_requests(1, WAIT).await.unwrap();
    assert!(
        !recorded[0].body_complete,
        "the provider got a complete request"
    );
    assert!(recorded[0].body.len() <= 1024);
}

#[tokio::test]
async fn hook_bodies_over_one_mebibyte_are_413_and_non_objects_are_400() {
    let tripwire = Tripwire::new().await;
    let relay = Setup::new(&tripwire.base_url()).start().await;
    let limit = 1024 * 1024;
    // Content-Length over the limit.
    let mut stream = relay.connect().await;
    let res = raw_exchange(
        &mut stream,
        post_head(
            &relay.host(),
            "/hooks/claude-code",
            &format!("Content-Length: {}\r\n", limit + 1),
        )
        .as_bytes(),
    )
    .await;
    res.assert_error(413, "relay_payload_too_large");
    // A streamed body over the limit (a JSON object that is too long).
    let big = format!("{{\"pad\":\"{}\"}}", "p".repeat(limit));
    let answer = relay
        .send(
            relay
                .request(Method::POST, "/hooks/codex")
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(big)))
                .unwrap(),
        )
        .await;
    answer.assert_error(413, "relay_payload_too_large");
    // Exactly at the limit is fine.
    let mut at_limit = format!("{{\"pad\":\"{}", "p".repeat(limit));
    at_limit.truncate(limit - 2);
    at_limit.push_str("\"}");
    assert_eq!(at_limit.len(), limit);
    let answer = relay.post("/hooks/pi", &[], &at_limit).await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.body, "{}");
    for body in ["[1,2]", "\"text\"", "null", "3", "not json", "{\"a\":1", ""] {
        let answer = relay.post("/hooks/claude-code", &[], body).await;
        answer.assert_error(400, "relay_bad_request");
    }
    assert!(!tripwire.was_touched().await);
}

#[tokio::test]
async fn too_many_or_too_large_headers_are_431() {
    let stand_in = StandIn::start().await.unwrap();
    let relay = Setup::new(&stand_in.base_url()).start().await;
    // A JSON POST with `extra` header lines; it has three fields of its own.
    let request = |extra: &str| {
        let mut text = post_head(
            &relay.host(),
            "/v1/chat/completions",
            &format!("{extra}Content-Length: 2\r\n"),
        );
        text.push_str("{}");
        text
    };
    let fields = |n: usize| -> String { (0..n).map(|i| format!("x-h{i}: {i}\r\n")).collect() };
    // 100 header fields are accepted.
    let mut stream = relay.connect().await;
    let res = raw_exchange(&mut stream, request(&fields(97)).as_bytes()).await;
    assert_eq!(res.status, 200);
    stand_in.wait_for_requests(1, WAIT).await.unwrap();
    stand_in.clear_requests();
    // 101 are not.
    let mut stream = relay.connect().await;
    let res = raw_exchange(&mut stream, request(&fields(98)).as_bytes()).await;
    assert_eq!(res.status, 431);
    // A header block over 64 KiB.
    let mut stream = relay.connect().await;
    let big = format!("x-big: {}\r\n", "v".repeat(65 * 1024));
    let res = raw_exchange(&mut stream, request(&big).as_bytes()).await;
    assert_eq!(res.status, 431);
    assert!(is_closed_within(&mut stream, WAIT).await);
    // HTTP/2: a header list over 64 KiB is refused too.
    let answer = h2c_client()
        .request(
            relay
                .request(Method::POST, "/v1/chat/completions")
                .header("content-type", "application/json")
                .header("x-big", "v".repeat(65 * 1024))
                .body(Full::new(Bytes::from_static(b"{}")))
                .unwrap(),
        )
        .await;
    // hyper answers 431, or resets the stream (then there is no status to check).
    if let Ok(res) = answer {
        assert_eq!(res.status(), 431);
    }
    // HTTP/2: more than 100 header fields, each small, are refused as in HTTP/1.
    let mut many = relay
        .request(Method::POST, "/v1/chat/completions")
        .header("content-type", "application/json");
    for i in 0..101 {
        many = many.header(format!("x-h{i}"), "v");
    }
    let res = h2c_client()
        .request(many.body(Full::new(Bytes::from_static(b"{}"))).unwrap())
        .await
        .unwrap();
    assert_eq!(res.status(), 431);
    assert_eq!(stand_in.request_count(), 0);
}

/// A head over 64 KiB is 431 however its bytes arrive: also when it comes in one write on a
/// keep-alive connection whose large upload grew hyper's read buffer, so that one read can
/// bring the whole head.
#[tokio::test]
async fn a_head_over_64_kib_is_431_on_a_connection_with_a_grown_buffer() {
    let stand_in = StandIn::start().await.unwrap();
    let relay = Setup::new(&stand_in.base_url()).start().await;
    let mut stream = relay.connect().await;
    let body = format!("{{\"pad\":\"{}\"}}", "p".repeat(512 * 1024));
    let mut upload = post_head(
        &relay.host(),
        "/v1/chat/completions",
        &format!("Content-Length: {}\r\n", body.len()),
    );
    upload.push_str(&body);
    assert_eq!(
        raw_exchange(&mut stream, upload.as_bytes()).await.status,
        200
    );
    let big = format!("x-big: {}\r\nContent-Length: 2\r\n", "v".repeat(65 * 1024));
    let mut request = post_head(&relay.host(), "/v1/chat/completions", &big);
    request.push_str("{}");
    assert_eq!(
        raw_exchange(&mut stream, request.as_bytes()).await.status,
        431
    );
    assert_eq!(stand_in.request_count(), 1, "the large head was forwarded");
}

/// A transfer coding besides `chunked` (hyper undoes the chunking and would leave the rest
/// undone) is 501, the connection closed, nothing forwarded.
#[tokio::test]
async fn a_transfer_coding_other_than_chunked_is_501() {
    let stand_in = StandIn::start().await.unwrap();
    let relay = Setup::new(&stand_in.base_url()).start().await;
    for framing in [
        "Transfer-Encoding: gzip, chunked\r\n",
        "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n",
        "Transfer-Encoding: chunked, chunked\r\n",
    ] {
        let mut stream = relay.connect().await;
        let mut request = post_head(&relay.host(), "/v1/chat/completions", framing);
        request.push_str("2\r\n{}\r\n0\r\n\r\n");
        let res = raw_exchange(&mut stream, request.as_bytes()).await;
        res.assert_error(501, "relay_not_implemented");
        assert_eq!(res.header("connection"), Some("close"), "{framing:?}");
        assert!(is_closed_within(&mut stream, WAIT).await, "{framing:?}");
    }
    assert_eq!(stand_in.request_count(), 0, "something was forwarded");
}

/// Two `Host` lines are 400 in either order: another reader could take the other one.
#[tokio::test]
async fn two_host_lines_are_400() {
    let stand_in = StandIn::start().await.unwrap();
    let relay = Setup::new(&stand_in.base_url()).start().await;
    let host = relay.host();
    for hosts in [
        format!("Host: {host}\r\nHost: evil.example\r\n"),
        format!("Host: evil.example\r\nHost: {host}\r\n"),
        format!("Host: {host}\r\nHost: {host}\r\n"),
    ] {
        let mut stream = relay.connect().await;
        let request = format!("GET /healthz HTTP/1.1\r\n{hosts}\r\n");
        let res = raw_exchange(&mut stream, request.as_bytes()).await;
        res.assert_error(400, "relay_bad_request");
    }
}

/// Content-Length with Transfer-Encoding (both orders) and differing Content-Lengths: 400,
/// the connection closed, nothing forwarded, and a request smuggled behind it never runs.
#[tokio::test]
async fn ambiguous_framing_is_400_and_closes_the_connection() {
    let stand_in = StandIn::start().await.unwrap();
    let relay = Setup::new(&stand_in.base_url()).start().await;
    let smuggled = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{{}}",
        relay.host()
    );
    let cases = [
        ("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", true),
        ("Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", true),
        ("Content-Length: 5\r\nContent-Length: 6\r\n", false),
        ("Content-Length: 5, 6\r\n", false),
    ];
    for (framing, relay_answers) in cases {
        let mut stream = relay.connect().await;
        let body = if framing.contains("chunked") {
            format!("0\r\n\r\n{smuggled}")
        } else {
            format!("{{}}   {smuggled}")
        };
        let mut request = post_head(&relay.host(), "/v1/chat/completions", framing);
        request.push_str(&body);
        let res = raw_exchange(&mut stream, request.as_bytes()).await;
        assert_eq!(res.status, 400, "{framing:?}");
        if relay_answers {
            res.assert_error(400, "relay_bad_request");
            assert_eq!(res.header("connection"), Some("close"));
        }
        assert!(
            is_closed_within(&mut stream, WAIT).await,
            "{framing:?}: the connection stayed open"
        );
    }
    assert_eq!(stand_in.request_count(), 0, "something was forwarded");
}

#[tokio::test]
async fn a_slow_request_head_is_cut_at_the_header_read_timeout() {
    let stand_in = StandIn::start().await.unwrap();
    let relay = Setup::new(&stand_in.base_url())
        .header_read_timeout(0.3)
        .start()
        .await;
    // Half a head, then silence.
    let mut stream = relay.connect().await;
    let started = Instant::now();
    stream
        .write_all(format!("POST /v1/messages HTTP/1.1\r\nHost: {}\r\n", relay.host()).as_bytes())
        .await
        .unwrap();
    assert!(is_closed_within(&mut stream, Duration::from_secs(3)).await);
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(250), "closed after {took:?}");
    // A byte every 50 ms does not keep a head alive: the timeout counts from its start.
    let mut stream = relay.connect().await;
    let started = Instant::now();
    stream
        .write_all(b"POST /v1/messages HTTP/1.1\r\n")
        .await
        .unwrap();
    let mut closed = false;
    while started.elapsed() < Duration::from_secs(3) {
        if stream.write_all(b"x").await.is_err() {
            closed = true;
            break;
        }
        if is_closed_within(&mut stream, Duration::from_millis(50)).await {
            closed = true;
            break;
        }
    }
    assert!(closed, "a trickled head kept the connection open");
    assert!(started.elapsed() < Duration::from_secs(2));
    // A connection that never sends a byte is cut at the same timeout, not kept until the
    // keep-alive idle time.
    let mut stream = relay.connect().await;
    let started = Instant::now();
    assert!(is_closed_within(&mut stream, Duration::from_secs(3)).await);
    assert!(started.elapsed() >= Duration::from_millis(250));
    assert_eq!(stand_in.request_count(), 0);
}

/// An idle keep-alive connection is closed after `keepalive_idle_secs` (not at the shorter
/// header timeout), and a long stream in flight is never cut by it.
///
/// Each "long enough" is told by relayd's own timers: a connection it cut at one of them was
/// opened after the connection under test went idle (or its stream began), so that one has
/// been idle (or streaming) longer. The test times nothing it could lose a race against.
#[tokio::test]
async fn keepalive_idle_closes_idle_connections_but_not_long_streams() {
    let stand_in = StandIn::start().await.unwrap();
    let request = |relay: &Relay| {
        format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Content-Length: 2\r\n\r\n{{}}",
            relay.host()
        )
    };

    // Idle past the header timeout: still open, and it serves a second request. The keep-alive
    // time is long here so that nothing but the header timeout could close it meanwhile.
    let relay = Setup::new(&stand_in.base_url())
        .header_read_timeout(0.2)
        .keepalive_idle(30.0)
        .start()
        .await;
    let mut stream = relay.connect().await;
    let served = raw_exchange(&mut stream, request(&relay).as_bytes()).await;
    assert_eq!(served.status, 200);
    // A connection that sends nothing is cut at the header timeout.
    let mut gate = relay.connect().await;
    assert!(is_closed_within(&mut gate, WAIT).await);
    let served = raw_exchange(&mut stream, request(&relay).as_bytes()).await;
    assert_eq!(served.status, 200);

    let relay = Setup::new(&stand_in.base_url())
        .header_read_timeout(0.2)
        .keepalive_idle(0.6)
        .start()
        .await;
    // Idle past the keep-alive time: closed, and not before it. relayd's idle time began
    // after `sent`, once it had answered.
    let mut stream = relay.connect().await;
    let sent = Instant::now();
    let served = raw_exchange(&mut stream, request(&relay).as_bytes()).await;
    assert_eq!(served.status, 200);
    assert!(is_closed_within(&mut stream, Duration::from_secs(3)).await);
    assert!(sent.elapsed() >= Duration::from_millis(500));

    // A stream that the provider holds, silent, for longer than the idle time. A connection
    // that went idle after the stream began is closed first.
    let hold = stand_in.hold_answers();
    let res = http1_client()
        .request(stream_request(&relay, "/v1/messages"))
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let mut body = res.into_body();
    let mut received = Vec::new();
    read_to_length(&mut body, &mut received, 1).await;
    let mut gate = relay.connect().await;
    let served = raw_exchange(&mut gate, request(&relay).as_bytes()).await;
    assert_eq!(served.status, 200);
    assert!(is_closed_within(&mut gate, WAIT).await);
    drop(hold);
    let rest = tokio::time::timeout(WAIT, body.collect()).await.unwrap();
    received.extend_from_slice(&rest.expect("the stream was cut").to_bytes());
    assert_eq!(received, relay_testkit::ANTHROPIC_MESSAGES_SSE);
}

#[tokio::test]
async fn a_foreign_host_is_421() {
    let tripwire = Tripwire::new().await;
    let relay = Setup::new(&tripwire.base_url()).start().await;
    let port = relay.addr.port();
    for host in [
        "evil.example".to_owned(),
        format!("evil.example:{port}"),
        format!("localhost:{}", port.wrapping_add(1)),
        format!("127.0.0.1:{}", port.wrapping_add(1)),
        "127.0.0.1".to_owned(),
        format!("127.0.0.2:{port}"),
        format!("[::1]:{port}"),
        format!("localhost.:{port}"),
        format!("127.0.0.1:+{port}"),
        format!("127.0.0.1: {port}"),
    ] {
        let mut stream = relay.connect().await;
        let res = raw_exchange(
            &mut stream,
            format!(
                "POST /v1/messages HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
                 Content-Length: 2\r\n\r\n{{}}"
            )
            .as_bytes(),
        )
        .await;
        res.assert_error(421, "relay_misdirected_request");
    }
    // The loopback names with the listening port are fine (the status route answers).
    for host in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("LOCALHOST:{port}"),
    ] {
        let mut stream = relay.connect().await;
        let res = raw_exchange(
            &mut stream,
            format!("GET /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes(),
        )
        .await;
        assert_eq!(res.status, 200, "{host}");
    }
    // No Host at all (HTTP/1.0) is refused too.
    let mut stream = relay.connect().await;
    let res = raw_exchange(&mut stream, b"GET /healthz HTTP/1.0\r\n\r\n").await;
    res.assert_error(421, "relay_misdirected_request");
    // An absolute-form target names the host too: a good one does not cover a foreign
    // `Host`, a foreign one is not covered by a good `Host`, and only http(s) is served.
    let good = relay.host();
    for (target, host) in [
        (
            format!("http://{good}/v1/messages"),
            "evil.example".to_owned(),
        ),
        ("http://evil.example/v1/messages".to_owned(), good.clone()),
        (format!("ftp://{good}/v1/messages"), good.clone()),
    ] {
        let mut stream = relay.connect().await;
        let res = raw_exchange(
            &mut stream,
            format!(
                "POST {target} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
                 Content-Length: 2\r\n\r\n{{}}"
            )
            .as_bytes(),
        )
        .await;
        res.assert_error(421, "relay_misdirected_request");
    }
    assert!(!tripwire.was_touched().await);
}

/// HTTP/2's header list limit is 64 KiB inclusive, as HTTP/1's head limit is: a list of
/// exactly 65,536 bytes by RFC 9113's measure (each field's name, value and 32) is taken,
/// one byte more is not.
#[tokio::test]
async fn an_http2_header_list_of_exactly_64_kib_is_taken() {
    let tripwire = Tripwire::new().await;
    let relay = Setup::new(&tripwire.base_url()).start().await;
    let (mut h2, connection) = h2::client::handshake(relay.connect().await).await.unwrap();
    tokio::spawn(connection);
    let host = relay.host();
    let fields = [
        (":method", "GET"),
        (":scheme", "http"),
        (":authority", host.as_str()),
        (":path", "/healthz"),
        ("x-big", ""),
    ];
    let without_value: usize = fields.iter().map(|(n, v)| n.len() + v.len() + 32).sum();
    for (size, taken) in [(65_536, true), (65_537, false)] {
        let req = http::Request::get(relay.url("/healthz"))
            .header("x-big", "v".repeat(size - without_value))
            .body(())
            .unwrap();
        let (res, _) = h2.send_request(req, true).unwrap();
        let res = tokio::time::timeout(WAIT, res).await.unwrap();
        match res {
            Ok(res) if taken => assert_eq!(res.status(), 200, "{size}"),
            // hyper answers 431, or resets the stream.
            Ok(res) => assert_eq!(res.status(), 431, "{size}"),
            Err(error) => assert!(!taken && error.is_reset(), "{size}: {error}"),
        }
    }
    assert!(!tripwire.was_touched().await);
}

/// HTTP/2 names the host in `:authority`; a `host` header beside it must name one served
/// here too, or a client could pass a foreign one past the check.
#[tokio::test]
async fn an_http2_host_header_that_names_a_foreign_host_is_421() {
    let tripwire = Tripwire::new().await;
    let relay = Setup::new(&tripwire.base_url()).start().await;
    let (mut h2, connection) = h2::client::handshake(relay.connect().await).await.unwrap();
    tokio::spawn(connection);
    for (host, status) in [("evil.example".to_owned(), 421), (relay.host(), 200)] {
        let req = http::Request::get(relay.url("/healthz"))
            .header("host", host)
            .body(())
            .unwrap();
        let (res, _) = h2.send_request(req, true).unwrap();
        let res = tokio::time::timeout(WAIT, res).await.unwrap().unwrap();
        assert_eq!(res.status(), status);
    }
    assert!(!tripwire.was_touched().await);
}

/// From a peer that is not loopback, only the advertised host is accepted.
#[tokio::test]
async fn loopback_names_are_refused_from_a_non_loopback_peer() {
    let Some(ip) = non_loopback_ip() else {
        // No such address on this machine; front/tests.rs covers the rule directly.
        return;
    };
    let tripwire = Tripwire::new().await;
    let mut setup = Setup::new(&tripwire.base_url());
    setup.bind = ip;
    setup.listen = ip;
    setup.allow_anonymous_pass_through = true;
    setup.advertised_host = Some("relay.test".into());
    let relay = setup.start().await;
    let port = relay.addr.port();
    for (host, status) in [
        (format!("127.0.0.1:{port}"), 421),
        (format!("localhost:{port}"), 421),
        (format!("{ip}:{port}"), 421),
        (format!("relay.test:{port}"), 200),
        (format!("RELAY.test:{port}"), 200),
        ("relay.test".to_owned(), 421),
    ] {
        let mut stream = relay.connect().await;
        assert!(!stream.peer_addr().unwrap().ip().is_loopback());
        let res = raw_exchange(
            &mut stream,
            format!("GET /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes(),
        )
        .await;
        assert_eq!(res.status, status, "{host}");
        if status == 421 {
            res.assert_error(421, "relay_misdirected_request");
        }
    }
    assert!(!tripwire.was_touched().await);
}

#[tokio::test]
async fn an_origin_header_is_403_unless_allowed() {
    let stand_in = StandIn::start().await.unwrap();
    let mut setup = Setup::new(&stand_in.base_url());
    setup.config.daemon.allowed_origins = vec!["https://console.example:8443".into()];
    let relay = setup.start().await;
    for origin in [
        "https://evil.example",
        "null",
        "http://127.0.0.1:3000",
        "https://console.example",
    ] {
        for path in ["/v1/messages", "/hooks/claude-code", "/healthz"] {
            let answer = if path == "/healthz" {
                relay.get(path, &[("origin", origin)]).await
            } else {
                relay.post(path, &[("origin", origin)], "{}").await
            };
            answer.assert_error(403, "relay_cross_origin");
        }
    }
    assert_eq!(stand_in.request_count(), 0);
    for origin in [
        "https://console.example:8443",
        "HTTPS://CONSOLE.example:8443/",
    ] {
        let answer = relay
            .post("/v1/messages", &[("origin", origin)], "{}")
            .await;
        assert_eq!(answer.status, 200, "{origin}");
    }
    assert_eq!(stand_in.request_count(), 2);
}

#[tokio::test]
async fn a_post_that_is_not_json_is_415() {
    let tripwire = Tripwire::new().await;
    let relay = Setup::new(&tripwire.base_url()).start().await;
    for content_type in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        Some("application/jsonx"),
        Some("text/plain; charset=application/json"),
        None,
    ] {
        for path in [
            "/v1/messages",
            "/v1/responses",
            "/v1/chat/completions",
            "/hooks/pi",
        ] {
            let mut req = relay.request(Method::POST, path);
            if let Some(value) = content_type {
                req = req.header("content-type", value);
            }
            let answer = relay
                .send(req.body(Full::new(Bytes::from_static(b"{}"))).unwrap())
                .await;
            answer.assert_error(415, "relay_unsupported_media_type");
        }
    }
    assert!(!tripwire.was_touched().await);
}

/// Two `Content-Type` lines leave the body's media type to whoever reads them: Relay could
/// judge it JSON by one while the provider reads it by the other.
#[tokio::test]
async fn a_post_with_two_content_types_is_415() {
    let tripwire = Tripwire::new().await;
    let relay = Setup::new(&tripwire.base_url()).start().await;
    for [first, second] in [
        ["application/json", "text/plain"],
        ["text/plain", "application/json"],
        ["application/json", "application/json"],
    ] {
        for path in ["/v1/messages", "/v1/chat/completions", "/hooks/pi"] {
            let req = relay
                .request(Method::POST, path)
                .header("content-type", first)
                .header("content-type", second)
                .body(Full::new(Bytes::from_static(b"{}")))
                .unwrap();
            let answer = relay.send(req).await;
            answer.assert_error(415, "relay_unsupported_media_type");
        }
    }
    assert!(!tripwire.was_touched().await);
}

#[tokio::test]
async fn websocket_wrong_methods_and_unknown_paths_are_refused_with_json() {
    let tripwire = Tripwire::new().await;
    let relay = Setup::new(&tripwire.base_url()).start().await;
    for path in [
        "/v1/responses",
        "/responses",
        "/backend-api/codex/responses",
    ] {
        let mut stream = relay.connect().await;
        let res = raw_exchange(
            &mut stream,
            format!(
                "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
                 Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
                relay.host()
            )
            .as_bytes(),
        )
        .await;
        res.assert_error(426, "relay_upgrade_required");
        // A 426 names the protocol to use, here plain HTTP/1.1.
        assert_eq!(res.header("upgrade"), Some("HTTP/1.1"), "{path}");
        assert_eq!(res.header("connection"), Some("upgrade"), "{path}");
        let answer = relay.get(path, &[]).await;
        answer.assert_error(405, "relay_method_not_allowed");
        assert_eq!(answer.header("allow"), Some("POST"));
    }
    // A 405 says what the path takes.
    for (method, path, allow) in [
        (Method::GET, "/v1/messages", "POST"),
        (Method::POST, "/v1/models", "GET"),
        (Method::GET, "/hooks/codex", "POST"),
        (Method::POST, "/healthz", "GET, HEAD"),
        (Method::DELETE, "/metrics", "GET, HEAD"),
    ] {
        let answer = relay
            .send(
                relay
                    .request(method.clone(), path)
                    .body(Full::new(Bytes::new()))
                    .unwrap(),
            )
            .await;
        assert_eq!(answer.header("allow"), Some(allow), "{method} {path}");
    }
    // The status routes answer HEAD as GET, without a body: on the same connection the
    // next answer starts right where the HEAD answer's head ends.
    for path in ["/healthz", "/metrics", "/_relay/v1/workers"] {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut stream = relay.connect().await;
        let host = relay.host();
        stream
            .write_all(
                format!(
                    "HEAD {path} HTTP/1.1\r\nHost: {host}\r\n\r\nGET /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n"
                )
                .as_bytes(),
            )
            .await
            .unwrap();
        let mut seen = Vec::new();
        let head_end = loop {
            if let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n")
                && seen.len() >= end + 4 + 12
            {
                break end + 4;
            }
            let mut chunk = [0u8; 4096];
            let n = tokio::time::timeout(WAIT, stream.read(&mut chunk))
                .await
                .unwrap()
                .unwrap();
            assert!(n > 0, "HEAD {path}: closed after {seen:?}");
            seen.extend_from_slice(&chunk[..n]);
        };
        assert!(seen.starts_with(b"HTTP/1.1 200"), "HEAD {path}: {seen:?}");
        assert!(
            seen[head_end..].starts_with(b"HTTP/1.1 200"),
            "HEAD {path}: a body followed the head: {:?}",
            String::from_utf8_lossy(&seen)
        );
    }
    for (method, path, status, kind) in [
        (Method::GET, "/v1/messages", 405, "relay_method_not_allowed"),
        (Method::POST, "/v1/models", 405, "relay_method_not_allowed"),
        (
            Method::PUT,
            "/v1/chat/completions",
            405,
            "relay_method_not_allowed",
        ),
        (Method::GET, "/hooks/codex", 405, "relay_method_not_allowed"),
        (Method::POST, "/healthz", 405, "relay_method_not_allowed"),
        (Method::GET, "/v2/messages", 404, "relay_not_found"),
        (Method::GET, "/", 404, "relay_not_found"),
        (Method::POST, "/v1/messages/", 404, "relay_not_found"),
        (
            Method::GET,
            "/_relay/control/v1/mcp",
            404,
            "relay_not_found",
        ),
    ] {
        let answer = relay
            .send(
                relay
                    .request(method.clone(), path)
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from_static(b"{}")))
                    .unwrap(),
            )
            .await;
        answer.assert_error(status, kind);
    }
    assert!(!tripwire.was_touched().await);
}

/// An HTTP/2 client that resets its stream with `NO_ERROR` part-way through a body of
/// unknown length has not sent a complete request, and the provider must not get one: hyper
/// ends such a body as if it were whole, so the reset must be told from END_STREAM.
#[tokio::test]
async fn an_http2_body_cut_off_by_a_reset_never_reaches_the_provider_whole() {
    let (relay, provider) = relay_before_a_raw_provider().await;
    let (_answer, mut upload) = http2_upload(&relay, &[]).await;
    upload
        .send_data(Bytes::from_static(b"{\"model\":\"truncated-"), false)
        .unwrap();

    // The provider gets the head and the first bytes; then the client resets the stream.
    let (mut upstream, _) = tokio::time::timeout(WAIT, provider.accept())
        .await
        .unwrap()
        .unwrap();
    let mut received = Vec::new();
    while !received.windows(10).any(|w| w == b"truncated-") {
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout(
            WAIT,
            tokio::io::AsyncReadExt::read(&mut upstream, &mut chunk),
        )
        .await
        .unwrap()
        .unwrap();
        assert_ne!(n, 0, "the request ended early: {received:?}");
        received.extend_from_slice(&chunk[..n]);
    }
    upload.send_reset(h2::Reason::NO_ERROR);

    // The provider's connection ends without the terminating chunk.
    let mut rest = Vec::new();
    tokio::time::timeout(
        WAIT,
        tokio::io::AsyncReadExt::read_to_end(&mut upstream, &mut rest),
    )
    .await
    .unwrap()
    .ok();
    received.extend_from_slice(&rest);
    let text = String::from_utf8_lossy(&received);
    assert!(text.contains("transfer-encoding: chunked"), "{text}");
    assert!(
        !text.ends_with("0\r\n\r\n"),
        "the provider got a complete request: {text}"
    );
}

/// An HTTP/2 request refused before its body was read (here for its `Origin`) still has
/// its body read to its end after the answer, as HTTP/1's lingering close does: a client
/// that sends its whole body before it reads the answer (Python's httpcore, curl) gets
/// window for all of it, where a reset of the stream would leave it waiting for window
/// that never comes.
#[tokio::test]
async fn an_http2_body_refused_early_is_still_read_to_its_end() {
    let tripwire = Tripwire::new().await;
    let relay = Setup::new(&tripwire.base_url()).start().await;
    let (answer, mut upload) = http2_upload(&relay, &[("origin", "https://evil.example")]).await;
    let answer = tokio::time::timeout(WAIT, answer).await.unwrap().unwrap();
    assert_eq!(answer.status(), StatusCode::FORBIDDEN);

    send_as_the_window_allows(&mut upload).await;
    assert!(!tripwire.was_touched().await);
}

/// The same when the provider answers before it has the whole body: the client's upload is
/// read to its end after the answer, so it sees the provider's answer.
#[tokio::test]
async fn an_http2_body_a_provider_answered_early_is_still_read_to_its_end() {
    let (relay, provider) = relay_before_a_raw_provider().await;
    tokio::spawn(relay_testkit::duplex::answer_then_close(
        provider,
        b"HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}",
    ));
    let (answer, mut upload) = http2_upload(&relay, &[]).await;
    upload.send_data(Bytes::from_static(b"{"), false).unwrap();
    let answer = tokio::time::timeout(WAIT, answer).await.unwrap().unwrap();
    assert_eq!(answer.status(), StatusCode::UNAUTHORIZED);

    send_as_the_window_allows(&mut upload).await;
}

/// A provider that sends both `Content-Length` and `Transfer-Encoding: chunked` framed its
/// body by the encoding, which overrides the length (RFC 9112). relayd drops the encoding
/// as hop-by-hop; forwarded alone, the length would cut the body short and the client
/// would take the cut body for the whole one.
#[tokio::test]
async fn a_provider_answer_with_length_and_chunks_reaches_the_client_whole() {
    let (relay, provider) = relay_before_a_raw_provider().await;
    let body = r#"{"id":"msg_1","type":"message","content":"all of it"}"#;
    let answer = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 10\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
        body.len()
    );
    tokio::spawn(async move {
        relay_testkit::duplex::answer_then_close(provider, answer.as_bytes()).await
    });
    let answer = relay
        .post("/v1/messages", &[("x-api-key", "sk-test")], "{}")
        .await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.body, body.as_bytes());
    assert_ne!(
        answer.headers.get("content-length").map(|v| v.as_bytes()),
        Some(&b"10"[..])
    );
}

/// An HTTP/1.0 provider's answer reaches an HTTP/1.1 client as relayd's own HTTP/1.1
/// message, chunked with its terminating chunk: in the provider's version it would end by
/// the connection closing, which a client cannot tell from an answer cut short.
#[tokio::test]
async fn an_http_1_0_providers_answer_reaches_an_http_1_1_client_as_http_1_1() {
    let (relay, provider) = relay_before_a_raw_provider().await;
    let body = r#"{"id":"msg_1","type":"message","content":"all of it"}"#;
    let answer = format!("HTTP/1.0 200 OK\r\ncontent-type: application/json\r\n\r\n{body}");
    tokio::spawn(async move {
        relay_testkit::duplex::answer_then_close(provider, answer.as_bytes()).await
    });
    let mut stream = relay.connect().await;
    let request = format!(
        "POST /v1/messages HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         x-api-key: sk-test\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}",
        relay.host()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut received = Vec::new();
    tokio::time::timeout(
        WAIT,
        tokio::io::AsyncReadExt::read_to_end(&mut stream, &mut received),
    )
    .await
    .expect("the answer ended")
    .expect("the answer ended cleanly");
    let text = String::from_utf8_lossy(&received);
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(
        text.to_ascii_lowercase()
            .contains("\r\ntransfer-encoding: chunked\r\n"),
        "{text}"
    );
    assert!(text.contains(body), "{text}");
    assert!(text.ends_with("\r\n0\r\n\r\n"), "{text}");
}

/// relayd in front of a provider that is only a listening socket, for the test to answer.
async fn relay_before_a_raw_provider() -> (Relay, tokio::net::TcpListener) {
    let provider = tokio::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
        .await
        .unwrap();
    let relay = Setup::new(&format!("http://{}", provider.local_addr().unwrap()))
        .start()
        .await;
    (relay, provider)
}

/// Starts a JSON `POST /v1/chat/completions` with `headers` on a new HTTP/2 connection to
/// `relay`, leaving its body to the caller.
async fn http2_upload(
    relay: &Relay,
    headers: &[(&str, &str)],
) -> (h2::client::ResponseFuture, h2::SendStream<Bytes>) {
    let (mut client, connection) = h2::client::handshake(relay.connect().await).await.unwrap();
    tokio::spawn(connection);
    let mut req = http::Request::builder()
        .method(Method::POST)
        .uri(relay.url("/v1/chat/completions"))
        .header("content-type", "application/json");
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    client.send_request(req.body(()).unwrap(), false).unwrap()
}

/// Sends 256 KiB, four times the stream window, on `upload` as the window allows, the last
/// chunk with END_STREAM; panics when no window comes or the stream ends first.
async fn send_as_the_window_allows(upload: &mut h2::SendStream<Bytes>) {
    let chunk = Bytes::from(vec![b' '; 16 * 1024]);
    for n in 1..=16 {
        upload.reserve_capacity(chunk.len());
        let mut granted = 0;
        while granted < chunk.len() {
            let capacity =
                tokio::time::timeout(WAIT, std::future::poll_fn(|cx| upload.poll_capacity(cx)))
                    .await
                    .unwrap_or_else(|_| panic!("no window for chunk {n}"));
            granted += capacity
                .unwrap_or_else(|| panic!("the stream closed before chunk {n}"))
                .unwrap_or_else(|e| panic!("the stream failed before chunk {n}: {e}"));
        }
        upload.send_data(chunk.clone(), n == 16).unwrap();
    }
}
