//! §3.3: streams pass chunk by chunk and byte for byte, paced as the provider paced them; a
//! client that leaves cancels the provider request; a provider that breaks makes the
//! client's response fail instead of ending cleanly.

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http::{HeaderValue, Method, StatusCode, Version};
use http_body_util::{BodyExt, Full};
use relay_testkit::{
    ANTHROPIC_MESSAGES_SSE, Behaviour, CannedResponse, OPENAI_CHAT_SSE, OPENAI_RESPONSES_SSE,
    StandIn,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{
    Relay, Setup, TestClient, WAIT, h2c_client, http1_client, read_to_length, stream_request,
};

const STREAMS: [(&str, &[u8]); 3] = [
    ("/v1/messages?beta=true", ANTHROPIC_MESSAGES_SSE),
    ("/v1/responses", OPENAI_RESPONSES_SSE),
    ("/v1/chat/completions", OPENAI_CHAT_SSE),
];

/// The body frames as they arrived, with their arrival times, and how the body ended.
struct Received {
    frames: Vec<(Instant, Bytes)>,
    error: Option<String>,
}

impl Received {
    fn bytes(&self) -> Bytes {
        let mut all = BytesMut::new();
        for (_, frame) in &self.frames {
            all.extend_from_slice(frame);
        }
        all.freeze()
    }
}

async fn receive(
    client: &TestClient,
    req: http::Request<Full<Bytes>>,
) -> (http::Response<()>, Received) {
    let res = client.request(req).await.unwrap();
    let (parts, mut body) = res.into_parts();
    let mut frames = Vec::new();
    let error = loop {
        match body.frame().await {
            None => break None,
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    frames.push((Instant::now(), data));
                }
            }
            Some(Err(e)) => break Some(e.to_string()),
        }
    };
    (
        http::Response::from_parts(parts, ()),
        Received { frames, error },
    )
}

#[tokio::test]
async fn fixture_streams_arrive_byte_exact_whole_and_in_one_byte_chunks() {
    let stand_in = StandIn::start().await.unwrap();
    let relay = Setup::new(&stand_in.base_url()).start().await;
    for chunk_size in [None, Some(1)] {
        stand_in.set_behaviour(Behaviour {
            chunk_size,
            ..Behaviour::default()
        });
        for (path, fixture) in STREAMS {
            for client in [http1_client(), h2c_client()] {
                let (res, received) = receive(&client, stream_request(&relay, path)).await;
                assert_eq!(res.status(), 200, "{path}");
                assert!(received.error.is_none(), "{path}: {:?}", received.error);
                assert_eq!(received.bytes(), fixture, "{path} chunk {chunk_size:?}");
                assert_eq!(
                    res.headers().get("content-type").unwrap(),
                    "text/event-stream"
                );
                let accel: Vec<_> = res.headers().get_all("x-accel-buffering").iter().collect();
                assert_eq!(accel, ["no"], "{path}");
                assert!(res.headers().get("x-stand-in-request-id").is_some());
            }
        }
    }
    // h2c reached Relay as HTTP/2.
    let (res, _) = receive(&h2c_client(), stream_request(&relay, "/v1/messages")).await;
    assert_eq!(res.version(), Version::HTTP_2);
}

#[tokio::test]
async fn x_accel_buffering_is_added_only_to_sse_and_never_overrides_the_provider() {
    let stand_in = StandIn::start().await.unwrap();
    let relay = Setup::new(&stand_in.base_url()).start().await;
    // A JSON answer gets nothing.
    let answer = relay.post("/v1/chat/completions", &[], "{}").await;
    assert_eq!(answer.status, 200);
    assert!(answer.headers.get("x-accel-buffering").is_none());
    // An SSE answer that says what it wants keeps it.
    stand_in.set_behaviour(Behaviour {
        status: Some(
            CannedResponse::new(StatusCode::OK)
                .header(
                    http::header::CONTENT_TYPE,
                    HeaderValue::from_static("text/event-stream; charset=utf-8"),
                )
                .header(
                    http::HeaderName::from_static("x-accel-buffering"),
                    HeaderValue::from_static("yes"),
                )
                .body("data: [DONE]\r\n\r\n"),
        ),
        ..Behaviour::default()
    });
    let answer = relay.post("/v1/chat/completions", &[], "{}").await;
    let accel: Vec<_> = answer.headers.get_all("x-accel-buffering").iter().collect();
    assert_eq!(accel, ["yes"]);
    assert_eq!(answer.body, "data: [DONE]\r\n\r\n");
}

/// Each event reaches the client while the provider still holds back the next: relayd passes
/// events on as they come, and none waits for the bytes after it. (A relayd that held each
/// event for a bounded time, under the test's wait, would pass; relayd has no such timer, and
/// a test of one would be a test of the clock.)
#[tokio::test]
async fn each_event_arrives_before_the_provider_sends_the_next() {
    let stand_in = StandIn::start().await.unwrap();
    let relay = Setup::new(&stand_in.base_url()).start().await;
    // Where each of the fixture's events ends, blank line included.
    let sse = ANTHROPIC_MESSAGES_SSE;
    let ends: Vec<usize> = (2..=sse.len())
        .filter(|&end| &sse[end - 2..end] == b"\n\n")
        .collect();
    assert!(ends.len() >= 5, "only {} events", ends.len());
    assert_eq!(ends.last(), Some(&sse.len()));
    for client in [http1_client(), h2c_client()] {
        // The stand-in sends its first event, then one more each time the test lets it.
        let steps = stand_in.step_answers();
        let res = client
            .request(stream_request(&relay, "/v1/messages"))
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        let mut body = res.into_body();
        let mut received = Vec::new();
        for (n, &sent) in ends.iter().enumerate() {
            // Until the provider's next event is let through, nothing but this one can come.
            read_to_length(&mut body, &mut received, sent).await;
            assert_eq!(received, sse[..sent], "event {n}");
            steps.release(1);
        }
        // Nothing more: the body ends.
        let rest = tokio::time::timeout(WAIT, body.collect()).await.unwrap();
        assert!(rest.unwrap().to_bytes().is_empty());
    }
}

/// The stand-in's id for the request a response answers.
fn request_id(headers: &http::HeaderMap) -> u64 {
    headers["x-stand-in-request-id"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// A client that disconnects mid-stream cancels the provider request at once.
#[tokio::test]
async fn a_client_leaving_mid_stream_cancels_the_provider_request() {
    let stand_in = StandIn::start().await.unwrap();
    let relay = Setup::new(&stand_in.base_url()).start().await;
    stand_in.set_behaviour(Behaviour {
        stream_events: Some(400),
        pace: Some(Duration::from_millis(25)),
        ..Behaviour::default()
    });
    // HTTP/1.1 over a raw socket that the test closes.
    let mut stream = relay.connect().await;
    let head = format!(
        "POST /v1/messages HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Content-Length: 15\r\n\r\n{{\"stream\":true}}",
        relay.host()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut seen = Vec::new();
    while !seen.windows(10).any(|w| w == b"text_delta") {
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout(WAIT, stream.read(&mut chunk))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0);
        seen.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8_lossy(&seen);
    let id: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("x-stand-in-request-id: "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let left = Instant::now();
    drop(stream);
    let gone = stand_in
        .wait_for_client_gone(id, Duration::from_secs(1))
        .await
        .unwrap();
    assert!(gone.went_away_at.unwrap() - left < Duration::from_secs(1));

    // HTTP/2: dropping the response body resets the stream.
    let client = h2c_client();
    let res = client
        .request(stream_request(&relay, "/v1/messages"))
        .await
        .unwrap();
    let id = request_id(res.headers());
    let mut body = res.into_body();
    body.frame().await.unwrap().unwrap();
    drop(body);
    stand_in
        .wait_for_client_gone(id, Duration::from_secs(1))
        .await
        .unwrap();
}

/// A client that disconnects while the provider has not answered yet cancels it too.
#[tokio::test]
async fn a_client_leaving_before_the_response_head_cancels_the_provider_request() {
    let stand_in = StandIn::start().await.unwrap();
    let relay = Setup::new(&stand_in.base_url()).start().await;
    stand_in.set_behaviour(Behaviour {
        hang_before_headers: true,
        ..Behaviour::default()
    });
    let mut stream = relay.connect().await;
    let head = format!(
        "POST /v1/responses HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Content-Length: 2\r\n\r\n{{}}",
        relay.host()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let recorded = stand_in.wait_for_requests(1, WAIT).await.unwrap();
    assert!(recorded[0].body_complete);
    assert!(!recorded[0].client_went_away);
    let left = Instant::now();
    drop(stream);
    let gone = stand_in
        .wait_for_client_gone(recorded[0].id, Duration::from_secs(1))
        .await
        .unwrap();
    assert!(gone.went_away_at.unwrap() - left < Duration::from_secs(1));

    // The same over HTTP/2: the request future is dropped, the stream reset.
    stand_in.clear_requests();
    let client = h2c_client();
    let sending = tokio::spawn({
        let req = stream_request(&relay, "/v1/messages");
        async move { client.request(req).await }
    });
    let recorded = stand_in.wait_for_requests(1, WAIT).await.unwrap();
    sending.abort();
    stand_in
        .wait_for_client_gone(recorded[0].id, Duration::from_secs(1))
        .await
        .unwrap();
}

/// A provider that breaks mid-stream makes the client's read fail, after exactly the bytes
/// the provider sent: chunked HTTP/1.1, a Content-Length body, and HTTP/2.
#[tokio::test]
async fn a_provider_breaking_mid_stream_fails_the_client_read() {
    let stand_in = StandIn::start().await.unwrap();
    let relay = Setup::new(&stand_in.base_url()).start().await;
    stand_in.set_behaviour(Behaviour {
        fail_after_bytes: Some(300),
        ..Behaviour::default()
    });
    for client in [http1_client(), h2c_client()] {
        let (res, received) = receive(&client, stream_request(&relay, "/v1/messages")).await;
        assert_eq!(res.status(), 200);
        assert!(
            received.error.is_some(),
            "the truncated stream ended cleanly"
        );
        assert_eq!(received.bytes(), &ANTHROPIC_MESSAGES_SSE[..300]);
    }
    // Complete data but no clean end is still a failure.
    stand_in.set_behaviour(Behaviour {
        fail_after_bytes: Some(ANTHROPIC_MESSAGES_SSE.len()),
        ..Behaviour::default()
    });
    let (_, received) = receive(&http1_client(), stream_request(&relay, "/v1/messages")).await;
    assert!(
        received.error.is_some(),
        "a stream without its end ended cleanly"
    );
    assert_eq!(received.bytes(), ANTHROPIC_MESSAGES_SSE);

    // A Content-Length answer cut short.
    let body = Bytes::from(vec![b'x'; 1000]);
    stand_in.set_behaviour(Behaviour {
        status: Some(CannedResponse::json(StatusCode::OK, body.clone()).header(
            http::header::CONTENT_LENGTH,
            HeaderValue::from_static("1000"),
        )),
        fail_after_bytes: Some(100),
        ..Behaviour::default()
    });
    for client in [http1_client(), h2c_client()] {
        let (res, received) =
            receive(&client, stream_request(&relay, "/v1/chat/completions")).await;
        assert_eq!(res.status(), 200);
        assert_eq!(res.headers()["content-length"], "1000");
        assert!(
            received.error.is_some(),
            "a short Content-Length body ended cleanly"
        );
        assert_eq!(received.bytes(), &body[..100]);
    }
}

/// A connection to `relay` that has sent an HTTP/1.0 request for a streamed answer.
async fn http_1_0_stream(relay: &Relay) -> tokio::net::TcpStream {
    let body = r#"{"model":"m","max_tokens":16,"stream":true,"messages":[]}"#;
    let request = format!(
        "POST /v1/messages HTTP/1.0\r\nHost: {}\r\nContent-Type: application/json\r\n\
         anthropic-version: 2023-06-01\r\nContent-Length: {}\r\n\r\n{body}",
        relay.host(),
        body.len()
    );
    let mut stream = relay.connect().await;
    stream.write_all(request.as_bytes()).await.unwrap();
    stream
}

/// What `stream` reads before the connection ends, which must be with a reset: an HTTP/1.0
/// answer closed cleanly would read as whole.
async fn read_until_reset(mut stream: tokio::net::TcpStream) -> String {
    let mut received = Vec::new();
    let ended = tokio::time::timeout(WAIT, stream.read_to_end(&mut received))
        .await
        .expect("the connection stayed open");
    let text = String::from_utf8_lossy(&received).into_owned();
    let error = ended.expect_err(&format!("the HTTP/1.0 stream ended cleanly: {text}"));
    assert_eq!(error.kind(), std::io::ErrorKind::ConnectionReset, "{error}");
    text
}

/// An HTTP/1.0 answer has neither chunks nor a length to show it was cut: its end is the
/// connection's end. A provider breaking mid-stream must then reset the connection, never
/// close it cleanly, or the truncated stream would read as complete.
#[tokio::test]
async fn a_provider_breaking_mid_stream_resets_an_http_1_0_connection() {
    let stand_in = StandIn::start().await.unwrap();
    let relay = Setup::new(&stand_in.base_url()).start().await;
    stand_in.set_behaviour(Behaviour {
        fail_after_bytes: Some(300),
        ..Behaviour::default()
    });
    let text = read_until_reset(http_1_0_stream(&relay).await).await;
    assert!(text.starts_with("HTTP/1.0 200"), "{text}");
    assert!(
        !text.to_ascii_lowercase().contains("transfer-encoding"),
        "{text}"
    );
}

/// A stream still running when the drain time runs out is cut off. Over HTTP/1.0 the cut
/// must reset the connection too: a clean close would let the client read the truncated
/// stream as complete.
#[tokio::test]
async fn a_stream_cut_off_at_the_end_of_the_drain_resets_an_http_1_0_connection() {
    let stand_in = StandIn::start().await.unwrap();
    let relay = Setup::new(&stand_in.base_url()).start().await;
    stand_in.set_behaviour(Behaviour {
        pace: Some(Duration::from_millis(100)),
        stream_events: Some(1000),
        ..Behaviour::default()
    });
    let mut stream = http_1_0_stream(&relay).await;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.0 200");
    // The stream runs on past the drain time, which is a second here.
    let report = tokio::time::timeout(WAIT, relay.stop()).await.unwrap();
    assert_eq!(report.unfinished, 1);
    let text = read_until_reset(stream).await;
    assert!(text.contains("event: "), "{text}");
    assert!(!text.contains("message_stop"), "{text}");
}

/// The raw HTTP/1.1 bytes of a truncated chunked stream: no terminating chunk, then the
/// connection closes.
#[tokio::test]
async fn a_truncated_chunked_stream_never_gets_its_terminating_chunk() {
    let stand_in = StandIn::start().await.unwrap();
    let relay = Setup::new(&stand_in.base_url()).start().await;
    stand_in.set_behaviour(Behaviour {
        fail_after_bytes: Some(50),
        ..Behaviour::default()
    });
    let mut stream = relay.connect().await;
    let head = format!(
        "POST /v1/messages HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Content-Length: 15\r\n\r\n{{\"stream\":true}}",
        relay.host()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut all = Vec::new();
    tokio::time::timeout(WAIT, stream.read_to_end(&mut all))
        .await
        .unwrap()
        .ok();
    let text = String::from_utf8_lossy(&all);
    assert!(text.contains("transfer-encoding: chunked"), "{text}");
    assert!(!text.ends_with("0\r\n\r\n"), "{text}");
    assert!(text.contains(std::str::from_utf8(&ANTHROPIC_MESSAGES_SSE[..50]).unwrap()));
}

/// Provider errors reach the client verbatim: status, `Retry-After`, body.
#[tokio::test]
async fn rate_limits_and_provider_errors_are_relayed_verbatim() {
    let stand_in = StandIn::start().await.unwrap();
    let relay = Setup::new(&stand_in.base_url()).start().await;
    for (status, retry_after, body) in [
        (
            429,
            Some("7"),
            r#"{"type":"error","error":{"type":"rate_limit_error"}}"#,
        ),
        (
            529,
            None,
            r#"{"type":"error","error":{"type":"overloaded_error"}}"#,
        ),
        (500, None, "not json at all"),
    ] {
        let mut canned = CannedResponse::json(StatusCode::from_u16(status).unwrap(), body);
        if let Some(value) = retry_after {
            canned = canned.header(http::header::RETRY_AFTER, HeaderValue::from_static(value));
        }
        stand_in.set_behaviour(Behaviour {
            status: Some(canned),
            ..Behaviour::default()
        });
        stand_in.clear_requests();
        let answer = relay
            .post("/v1/messages", &[("x-api-key", "caller")], "{}")
            .await;
        assert_eq!(answer.status, status);
        assert_eq!(answer.header("retry-after"), retry_after);
        assert_eq!(answer.body, body);
        let recorded = stand_in.wait_for_requests(1, WAIT).await.unwrap();
        assert!(recorded[0].body_complete);
    }
}

/// A stream without a byte for `stream_idle_secs` is aborted toward both sides: the client's
/// read fails and the provider sees its client go.
#[tokio::test]
async fn an_idle_stream_is_aborted_on_both_sides() {
    let stand_in = StandIn::start().await.unwrap();
    let mut setup = Setup::new(&stand_in.base_url());
    setup.config.daemon.stream_idle_secs = crate::support::secs_f64(0.3);
    let relay = setup.start().await;
    stand_in.set_behaviour(Behaviour {
        pace: Some(Duration::from_secs(2)),
        ..Behaviour::default()
    });
    let started = Instant::now();
    let (res, received) = receive(&http1_client(), stream_request(&relay, "/v1/messages")).await;
    let took = started.elapsed();
    assert_eq!(res.status(), 200);
    assert!(received.error.is_some(), "an idle stream ended cleanly");
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_millis(1500),
        "{took:?}"
    );
    // Only the first event had been sent.
    assert!(ANTHROPIC_MESSAGES_SSE.starts_with(&received.bytes()));
    stand_in
        .wait_for_client_gone(request_id(res.headers()), Duration::from_secs(1))
        .await
        .unwrap();
}

/// relayd, its streams idle after `stream_idle` seconds, in front of a provider that answers
/// one request with an SSE stream of 1 KiB frames for as long as they are taken.
async fn before_an_endless_stream(stream_idle: f64) -> (Relay, EndlessStream) {
    let provider = tokio::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
        .await
        .unwrap();
    let mut setup = Setup::new(&format!("http://{}", provider.local_addr().unwrap()));
    setup.config.daemon.stream_idle_secs = crate::support::secs_f64(stream_idle);
    let relay = setup.start().await;
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let streaming = tokio::spawn(async move {
        let (mut upstream, _) = provider.accept().await.unwrap();
        let mut head = [0u8; 4096];
        let _ = upstream.read(&mut head).await.unwrap();
        upstream
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
            .await
            .unwrap();
        let frame = format!("{:x}\r\ndata: {}\n\n\r\n", 1024 + 8, "x".repeat(1024));
        loop {
            tokio::select! {
                written = upstream.write_all(frame.as_bytes()) => if written.is_err() { return Ended::Cut },
                _ = &mut stopped => return Ended::Stopped,
            }
        }
    });
    (relay, EndlessStream { stop, streaming })
}

#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// relayd closed the provider's connection.
    Cut,
    /// The test stopped it.
    Stopped,
}

struct EndlessStream {
    stop: tokio::sync::oneshot::Sender<()>,
    streaming: tokio::task::JoinHandle<Ended>,
}

impl EndlessStream {
    /// Waits for relayd to cut the provider's stream.
    async fn cut(self) {
        let ended = tokio::time::timeout(WAIT, self.streaming)
            .await
            .expect("the provider's stream was not cut")
            .unwrap();
        assert_eq!(ended, Ended::Cut);
    }

    /// Stops the stream, which relayd must not have cut.
    async fn stop(self) {
        self.stop.send(()).unwrap();
        assert_eq!(self.streaming.await.unwrap(), Ended::Stopped);
    }
}

/// Sends the streamed model request on `client`, a raw connection to `relay`.
async fn ask_for_the_stream(client: &mut tokio::net::TcpStream, relay: &Relay) {
    let request = format!(
        "POST /v1/messages HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\nx-api-key: k\r\ncontent-length: 2\r\n\r\n{{}}",
        relay.host()
    );
    client.write_all(request.as_bytes()).await.unwrap();
}

/// A client that stops reading a stream moves no byte either way once the sockets between
/// are full: after `stream_idle_secs` relayd cuts it, and the provider's stream behind it,
/// instead of holding both for as long as the client lives.
#[tokio::test]
async fn a_client_that_stops_reading_is_cut_after_the_stream_idle_time() {
    let (relay, stream) = before_an_endless_stream(0.5).await;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut client = socket.connect(relay.addr).await.unwrap();
    ask_for_the_stream(&mut client, &relay).await;
    // Reads nothing, and stays connected.
    let started = Instant::now();
    stream.cut().await;
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "{:?}",
        started.elapsed()
    );
    // The client's connection was reset, not closed: read, what arrived ends in an error,
    // never in a clean end that an HTTP/1.0 client would take for the whole answer.
    let mut sink = vec![0u8; 64 * 1024];
    let ended = tokio::time::timeout(WAIT, async {
        loop {
            match client.read(&mut sink).await {
                Ok(0) => return Ok(()),
                Ok(_) => continue,
                Err(error) => return Err(error),
            }
        }
    })
    .await
    .unwrap();
    assert!(ended.is_err(), "the cut answer ended cleanly");
}

/// A client that reads slowly but steadily is not a stalled one, however large the answer
/// queued for it: it is never cut while it reads.
#[tokio::test]
async fn a_client_that_reads_slowly_is_not_cut() {
    let (relay, stream) = before_an_endless_stream(1.0).await;
    let mut client = relay.connect().await;
    ask_for_the_stream(&mut client, &relay).await;
    // 8 KiB every 50 ms, for four times the stream idle time.
    let mut piece = vec![0u8; 8 * 1024];
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(4) {
        let n = client.read(&mut piece).await.unwrap();
        assert_ne!(n, 0, "cut after {:?}", started.elapsed());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stream.stop().await;
}

/// A socket that stops both ways when told to, as a client process that was stopped does:
/// nothing more is read from it or written to it, and it stays open.
struct Freezable {
    inner: tokio::net::TcpStream,
    frozen: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Freezable {
    fn is_frozen(&self) -> bool {
        self.frozen.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl tokio::io::AsyncRead for Freezable {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if self.is_frozen() {
            return std::task::Poll::Pending;
        }
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Freezable {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        if self.is_frozen() {
            return std::task::Poll::Pending;
        }
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if self.is_frozen() {
            return std::task::Poll::Pending;
        }
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// An HTTP/2 client that stops reading altogether: its small flow-control window stops
/// relayd's writes long before its socket fills, so no write ever waits. It also answers
/// no PING: after `stream_idle_secs` without a byte from it, and as long again for the
/// answer, relayd cuts the connection and the provider's stream behind it.
#[tokio::test]
async fn an_http2_client_that_stops_reading_is_cut_by_an_unanswered_ping() {
    let (relay, stream) = before_an_endless_stream(0.5).await;
    let frozen = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let io = Freezable {
        inner: relay.connect().await,
        frozen: frozen.clone(),
    };
    let (mut client, connection) = h2::client::handshake(io).await.unwrap();
    let connection = tokio::spawn(connection);
    let req = http::Request::builder()
        .method(Method::POST)
        .uri(relay.url("/v1/messages"))
        .header("content-type", "application/json")
        .header("x-api-key", "k")
        .body(())
        .unwrap();
    let (answer, mut upload) = client.send_request(req, false).unwrap();
    upload.send_data(Bytes::from_static(b"{}"), true).unwrap();
    let answer = tokio::time::timeout(WAIT, answer).await.unwrap().unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    frozen.store(true, std::sync::atomic::Ordering::Relaxed);
    stream.cut().await;
    connection.abort();
}
