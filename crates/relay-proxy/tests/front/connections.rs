//! The connection rules of §3.6 against the real front: answers reach a client that writes
//! its whole request before it reads (Python's urllib, many SDKs), because relayd closes
//! such a connection gently, discarding what the client still sends, and keeps reading an
//! upload while the provider's answer waits for the client; bare-LF heads are judged like
//! CRLF ones; blank lines keep no connection open; streams cannot take more provider
//! connections than the open-file limit leaves room for.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use relay_testkit::{StandIn, duplex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::support::{Setup, Tripwire, WAIT, is_closed_within, raw_exchange, read_response};

/// Well over what the loopback socket buffers hold, so a server that stops reading makes
/// the client's write fail unless it lingers.
const BODY: usize = 16 * 1024 * 1024;

fn post(host: &str, extra: &str, body_len: usize) -> Vec<u8> {
    let mut bytes = format!(
        "POST /v1/messages HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         {extra}\r\n"
    )
    .into_bytes();
    bytes.resize(bytes.len() + body_len, b'x');
    bytes
}

/// Writes everything, then reads one response, as a write-first client does.
async fn write_all_then_read(
    relay: &crate::support::Relay,
    request: &[u8],
) -> crate::support::RawResponse {
    let mut stream = relay.connect().await;
    if let Err(error) = stream.write_all(request).await {
        panic!("the client could not finish writing its request: {error}");
    }
    read_response(&mut stream).await
}

#[tokio::test]
async fn a_413_reaches_a_client_that_sends_its_whole_body_first() {
    let tripwire = Tripwire::new().await;
    let mut setup = Setup::new(&tripwire.base_url());
    setup.config.daemon.max_request_body_bytes = 1024;
    let relay = setup.start().await;
    let request = post(&relay.host(), &format!("Content-Length: {BODY}\r\n"), BODY);
    let res = write_all_then_read(&relay, &request).await;
    res.assert_error(413, "relay_payload_too_large");
    assert!(!tripwire.was_touched().await);
}

#[tokio::test]
async fn a_431_reaches_a_client_that_sends_its_whole_body_first() {
    let stand_in = StandIn::start().await.unwrap();
    let relay = Setup::new(&stand_in.base_url()).start().await;
    let fields: String = (0..150).map(|i| format!("x-h{i}: {i}\r\n")).collect();
    let request = post(
        &relay.host(),
        &format!("{fields}Content-Length: {BODY}\r\n"),
        BODY,
    );
    let res = write_all_then_read(&relay, &request).await;
    assert_eq!(res.status, 431);
    assert_eq!(stand_in.request_count(), 0);
}

#[tokio::test]
async fn a_400_reaches_a_client_that_sends_its_whole_body_first() {
    let stand_in = StandIn::start().await.unwrap();
    let relay = Setup::new(&stand_in.base_url()).start().await;
    let request = post(
        &relay.host(),
        &format!("Content-Length: {BODY}\r\nTransfer-Encoding: chunked\r\n"),
        BODY,
    );
    let res = write_all_then_read(&relay, &request).await;
    res.assert_error(400, "relay_bad_request");
    assert_eq!(stand_in.request_count(), 0);
}

/// relayd in front of the raw provider `serve` starts on its listener, and a client that
/// writes a `BODY`-byte upload whole before it reads: its answer within 30 s (else the
/// test fails with `stalled`), and what the provider returned.
async fn write_first_through<T: Send + 'static>(
    serve: impl FnOnce(TcpListener) -> tokio::task::JoinHandle<T>,
    stalled: &str,
) -> (crate::support::RawResponse, T) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let provider = serve(listener);
    let relay = Setup::new(&base).start().await;
    let request = post(&relay.host(), &format!("Content-Length: {BODY}\r\n"), BODY);
    let res = tokio::time::timeout(
        Duration::from_secs(30),
        write_all_then_read(&relay, &request),
    )
    .await
    .expect(stalled);
    (res, provider.await.unwrap())
}

/// Both ways carry more than the socket buffers hold: if relayd stopped reading the upload
/// while the answer waits for the client, neither side would finish.
#[tokio::test]
async fn an_upload_goes_on_while_an_early_answer_waits_for_the_client() {
    let (res, read) = write_first_through(
        |listener| tokio::spawn(duplex::answer_while_reading(listener, BODY)),
        "the upload stalled behind the answer",
    )
    .await;
    assert_eq!(res.status, 200);
    assert_eq!(res.body.len(), BODY);
    assert_eq!(read.unwrap(), BODY);
}

/// A provider that answers in full at once and then neither reads the upload nor closes:
/// once its answer has reached the client, relayd closes the provider connection and
/// discards the rest of the upload, so neither the client nor the connection is held.
#[tokio::test]
async fn an_answer_complete_before_the_upload_lets_go_of_a_provider_that_stops_reading() {
    let (res, stream) = write_first_through(
        |listener| tokio::spawn(duplex::answer_then_stop_reading(listener)),
        "the client was held by a provider that stopped reading",
    )
    .await;
    assert_eq!((res.status, res.body.as_slice()), (200, &b"ok"[..]));
    // Whatever of the upload reached the provider's socket, then its end.
    let mut stream = stream.unwrap();
    let mut sink = vec![0u8; 64 * 1024];
    tokio::time::timeout(WAIT, async {
        while stream.read(&mut sink).await.unwrap_or(0) > 0 {}
    })
    .await
    .expect("relayd kept the provider connection open");
}

#[tokio::test]
async fn uploads_read_whole_before_their_answers_share_one_provider_connection() {
    let stand_in = StandIn::start().await.unwrap();
    let relay = Setup::new(&stand_in.base_url()).start().await;
    let body = format!(r#"{{"pad":"{}"}}"#, "x".repeat(256 * 1024));
    for _ in 0..3 {
        assert_eq!(relay.post("/v1/messages", &[], &body).await.status, 200);
    }
    let recorded = stand_in.wait_for_requests(3, WAIT).await.unwrap();
    assert!(recorded.iter().all(|r| r.body.len() == body.len()));
    assert!(
        recorded.iter().all(|r| r.peer == recorded[0].peer),
        "{:?}",
        recorded.iter().map(|r| r.peer).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn content_length_with_transfer_encoding_in_bare_lf_heads_is_400() {
    let stand_in = StandIn::start().await.unwrap();
    let relay = Setup::new(&stand_in.base_url()).start().await;
    for (first, second) in [
        ("Content-Length: 5", "Transfer-Encoding: chunked"),
        ("Transfer-Encoding: chunked", "Content-Length: 5"),
    ] {
        let mut stream = relay.connect().await;
        let head = format!(
            "POST /v1/messages HTTP/1.1\nHost: {}\nContent-Type: application/json\n{first}\n{second}\n\n0\n\n",
            relay.host()
        );
        let res = raw_exchange(&mut stream, head.as_bytes()).await;
        res.assert_error(400, "relay_bad_request");
        assert!(is_closed_within(&mut stream, WAIT).await);
    }
    assert_eq!(stand_in.request_count(), 0);
}

/// Every answer on `stream` until the server closes it, as status and `Connection` header.
async fn answers_until_closed(stream: &mut tokio::net::TcpStream) -> Vec<(u16, String)> {
    let mut bytes = Vec::new();
    tokio::time::timeout(WAIT, stream.read_to_end(&mut bytes))
        .await
        .expect("the connection stayed open")
        .unwrap();
    let mut answers = Vec::new();
    let mut rest = bytes.as_slice();
    while !rest.is_empty() {
        let mut slots = [httparse::EMPTY_HEADER; 32];
        let mut res = httparse::Response::new(&mut slots);
        let httparse::Status::Complete(head) = res.parse(rest).unwrap() else {
            panic!("a partial answer: {rest:?}");
        };
        let header = |name: &str| {
            res.headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case(name))
                .map(|h| String::from_utf8_lossy(h.value).into_owned())
        };
        let len: usize = header("content-length").map_or(0, |v| v.parse().unwrap());
        answers.push((res.code.unwrap(), header("connection").unwrap_or_default()));
        rest = &rest[head + len..];
    }
    answers
}

/// Requests written in one piece with a smuggling attempt behind them are each answered in
/// order, the refused one with 400, and the connection then closes.
#[tokio::test]
async fn requests_pipelined_before_a_refused_head_are_answered_before_its_400() {
    let stand_in = StandIn::start().await.unwrap();
    let relay = Setup::new(&stand_in.base_url()).start().await;
    let host = relay.host();
    let get = format!("GET /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n");
    let smuggling = format!(
        "POST /v1/messages HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    );
    let mut stream = relay.connect().await;
    stream
        .write_all(format!("{get}{get}{smuggling}{get}").as_bytes())
        .await
        .unwrap();
    let answers = answers_until_closed(&mut stream).await;
    assert_eq!(
        answers,
        [
            (200, String::new()),
            (200, String::new()),
            (400, "close".to_owned())
        ]
    );
    assert_eq!(stand_in.request_count(), 0);
}

#[tokio::test]
async fn blank_lines_between_requests_do_not_keep_a_connection_open() {
    let stand_in = StandIn::start().await.unwrap();
    let relay = Setup::new(&stand_in.base_url())
        .keepalive_idle(0.5)
        .start()
        .await;
    let mut stream = relay.connect().await;
    let get = format!("GET /healthz HTTP/1.1\r\nHost: {}\r\n\r\n", relay.host());
    assert_eq!(raw_exchange(&mut stream, get.as_bytes()).await.status, 200);
    // CRLF every 100 ms, far more often than the idle time: the connection is still cut.
    let mut every = tokio::time::interval(Duration::from_millis(100));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(4);
    let mut sink = [0u8; 64];
    let closed = loop {
        tokio::select! {
            _ = every.tick() => {
                if stream.write_all(b"\r\n").await.is_err() {
                    break true;
                }
            }
            read = stream.read(&mut sink) => match read {
                Ok(0) | Err(_) => break true,
                Ok(_) => {}
            },
            () = tokio::time::sleep_until(deadline) => break false,
        }
    };
    assert!(closed, "a CRLF trickle kept the connection open");
}

/// A provider that accepts connections, reads what comes and never answers; it says how
/// many connections it has accepted and how many are still open.
async fn provider_that_never_answers() -> (String, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (accepted, open) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let counts = (accepted.clone(), open.clone());
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            counts.0.fetch_add(1, Ordering::SeqCst);
            counts.1.fetch_add(1, Ordering::SeqCst);
            let open = counts.1.clone();
            tokio::spawn(async move {
                let mut sink = [0u8; 4096];
                while stream.read(&mut sink).await.unwrap_or(0) > 0 {}
                open.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    (base, accepted, open)
}

/// A model request on `h2` whose upload starts and never ends.
fn endless_upload(
    h2: &mut h2::client::SendRequest<Bytes>,
    url: &str,
) -> (h2::client::ResponseFuture, h2::SendStream<Bytes>) {
    let req = http::Request::post(url)
        .header("content-type", "application/json")
        .body(())
        .unwrap();
    h2.send_request(req, false).unwrap()
}

/// The attack: each HTTP/2 stream whose upload never ends holds a provider connection, and
/// one client connection may have 100 of them, so streams alone could use up the daemon's
/// descriptors. Past its budget of provider connections a request is answered 429 at once
/// and opens none, the daemon goes on answering everyone else, and a stream that ends gives
/// its connection's room back.
#[tokio::test]
async fn streams_whose_uploads_never_end_take_no_more_provider_connections_than_the_budget() {
    let (base, accepted, open) = provider_that_never_answers().await;
    let mut setup = Setup::new(&base);
    setup.provider_connections = 3;
    let relay = setup.start().await;
    let (mut h2, connection) = h2::client::handshake(relay.connect().await).await.unwrap();
    tokio::spawn(connection);
    let url = relay.url("/v1/messages");
    let mut held: Vec<_> = (0..3).map(|_| endless_upload(&mut h2, &url)).collect();
    let three_open = || open.load(Ordering::SeqCst) == 3;
    assert!(relay_testkit::eventually(WAIT, three_open).await);

    let (refused, _upload) = endless_upload(&mut h2, &url);
    let res = tokio::time::timeout(WAIT, refused).await.unwrap().unwrap();
    assert_eq!(res.status(), 429);
    assert_eq!(res.headers()["retry-after"], "1");
    let mut body = res.into_body();
    let mut bytes = Vec::new();
    while let Some(Ok(chunk)) = body.data().await {
        bytes.extend_from_slice(&chunk);
    }
    let json: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(json["error"]["type"], "relay_too_many_requests");
    assert_eq!(accepted.load(Ordering::SeqCst), 3);
    // Everyone else is still served.
    assert_eq!(relay.get("/healthz", &[]).await.status, 200);

    // A stream the client gives up on closes its provider connection and frees its room.
    drop(held.pop());
    let two_open = || open.load(Ordering::SeqCst) == 2;
    assert!(relay_testkit::eventually(WAIT, two_open).await);
    let _again = endless_upload(&mut h2, &url);
    let four_accepted = || accepted.load(Ordering::SeqCst) == 4;
    assert!(relay_testkit::eventually(WAIT, four_accepted).await);
}
