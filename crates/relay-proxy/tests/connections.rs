//! The accept loop and the framing watcher under attack (SPEC §3.6, §5.1), with a small
//! handler of their own: timers that cannot be dodged, a per-address cap, smuggling after a
//! long chunk extension, upgraded connections that keep their permit, and the worker's
//! listener limits.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test set-up helpers fail the test on error"
)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use relay_proxy::body::ClientBody;
use relay_proxy::body::ResponseBody;
use relay_proxy::conn::HeadVerdict;
use relay_proxy::server::{ConnContext, Handler, PeerLimit, ServeOptions, serve};
use relay_proxy::worker::WorkerIdentity;
use relay_proxy::worker::serve_options;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::time::Instant;

const WAIT: Duration = Duration::from_secs(5);

/// Refuses ambiguous framing, upgrades `Upgrade: test` requests (holding the upgraded
/// socket until its client closes), and answers anything else 200 after reading the body.
/// A request with `x-vouch` vouches for its connection, as a worker's secret does.
struct Echo;

impl Handler for Echo {
    async fn handle(
        self: Arc<Self>,
        mut req: Request<ClientBody>,
        conn: ConnContext,
    ) -> Response<ResponseBody> {
        {
            if req.headers().contains_key("x-vouch") {
                conn.state.vouch();
            }
            if conn.state.take_verdict() == HeadVerdict::AmbiguousFraming {
                let mut res = Response::new(ResponseBody::full("ambiguous"));
                *res.status_mut() = StatusCode::BAD_REQUEST;
                res.headers_mut()
                    .insert(header::CONNECTION, "close".parse().unwrap());
                return res;
            }
            if req.headers().contains_key(header::UPGRADE) {
                let on_upgrade = hyper::upgrade::on(&mut req);
                tokio::spawn(async move {
                    if let Ok(upgraded) = on_upgrade.await {
                        let mut io = hyper_util::rt::TokioIo::new(upgraded);
                        let mut sink = [0u8; 64];
                        while matches!(io.read(&mut sink).await, Ok(n) if n > 0) {}
                    }
                });
                let mut res = Response::new(ResponseBody::empty());
                *res.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
                res.headers_mut()
                    .insert(header::UPGRADE, "test".parse().unwrap());
                res.headers_mut()
                    .insert(header::CONNECTION, "upgrade".parse().unwrap());
                return res;
            }
            let body = req.into_body().collect().await.map(|b| b.to_bytes());
            match body {
                Ok(body) => Response::new(ResponseBody::full(format!("{}", body.len()))),
                Err(_) => {
                    let mut res = Response::new(ResponseBody::empty());
                    *res.status_mut() = StatusCode::BAD_REQUEST;
                    res
                }
            }
        }
    }
}

struct Server {
    addr: SocketAddr,
    _stop: oneshot::Sender<()>,
}

async fn start(options: ServeOptions) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(serve(listener, options, Arc::new(Echo), async move {
        stopped.await.ok();
    }));
    Server { addr, _stop: stop }
}

fn options(header: f64, idle: f64) -> ServeOptions {
    ServeOptions {
        header_read_timeout: Duration::from_secs_f64(header),
        keepalive_idle: Duration::from_secs_f64(idle),
        drain_timeout: Duration::from_secs(1),
        ..ServeOptions::default()
    }
}

/// Reads one response head and its `Content-Length` body; `None` when the connection
/// closes first. Returns the status.
async fn read_status(stream: &mut TcpStream) -> Option<u16> {
    let mut buf = Vec::new();
    loop {
        let mut slots = [httparse::EMPTY_HEADER; 32];
        let mut res = httparse::Response::new(&mut slots);
        if let Ok(httparse::Status::Complete(len)) = res.parse(&buf) {
            let status = res.code?;
            let body: usize = res
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .map_or(0, |h| {
                    std::str::from_utf8(h.value).unwrap().parse().unwrap()
                });
            while buf.len() < len + body {
                let mut chunk = [0u8; 4096];
                match tokio::time::timeout(WAIT, stream.read(&mut chunk)).await {
                    Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
                    _ => return None,
                }
            }
            return Some(status);
        }
        let mut chunk = [0u8; 4096];
        match tokio::time::timeout(WAIT, stream.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            _ => return None,
        }
    }
}

/// True when the server closes the connection before `deadline`.
async fn closed_before(stream: &mut TcpStream, deadline: Instant) -> bool {
    let mut sink = [0u8; 256];
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut sink)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

/// Sends a chunked request whose chunk extension (6,000 bytes, more than the 4,096 the
/// watcher once followed) arrives in three separate reads, and reads its answer.
async fn long_extension_request(stream: &mut TcpStream) {
    let mut every = tokio::time::interval(Duration::from_millis(50));
    stream
        .write_all(b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;e=")
        .await
        .unwrap();
    for _ in 0..3 {
        every.tick().await;
        stream.write_all(&[b'a'; 2000]).await.unwrap();
    }
    every.tick().await;
    stream.write_all(b"\r\nhello\r\n0\r\n\r\n").await.unwrap();
    assert_eq!(read_status(stream).await, Some(200));
}

#[tokio::test]
async fn a_slow_head_after_a_long_chunk_extension_is_cut_by_the_header_timeout() {
    let server = start(options(0.5, 30.0)).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    long_extension_request(&mut stream).await;
    // Trickle the next head at one byte per 100 ms; it would take 2.5 s.
    let head = b"GET /b HTTP/1.1\r\nHost: x\r\n";
    let started = Instant::now();
    let mut every = tokio::time::interval(Duration::from_millis(100));
    let mut cut = false;
    for byte in head {
        every.tick().await;
        if stream.write_all(&[*byte]).await.is_err() {
            cut = true;
            break;
        }
        let mut sink = [0u8; 64];
        if let Ok(Ok(0) | Err(_)) =
            tokio::time::timeout(Duration::from_millis(1), stream.read(&mut sink)).await
        {
            cut = true;
            break;
        }
    }
    if !cut {
        cut = closed_before(&mut stream, started + Duration::from_secs(2)).await;
    }
    assert!(cut, "a slow head stayed open after a long chunk extension");
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn content_length_with_transfer_encoding_after_a_long_chunk_extension_is_400() {
    let server = start(options(5.0, 30.0)).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    long_extension_request(&mut stream).await;
    stream
        .write_all(
            b"POST /c HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        )
        .await
        .unwrap();
    // Refused, or the connection closed before it was read: never served.
    let status = read_status(&mut stream).await;
    assert!(matches!(status, None | Some(400)), "{status:?}");
}

#[tokio::test]
async fn pings_do_not_keep_an_idle_http2_connection_open() {
    let server = start(options(5.0, 0.5)).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .await
        .unwrap();
    let ping = [0, 0, 8, 6, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];
    let deadline = Instant::now() + Duration::from_secs(4);
    let mut every = tokio::time::interval(Duration::from_millis(100));
    let mut sink = [0u8; 256];
    let closed = loop {
        tokio::select! {
            _ = every.tick() => {
                if stream.write_all(&ping).await.is_err() {
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
    assert!(closed, "PINGs kept an idle HTTP/2 connection open");
}

#[tokio::test]
async fn one_address_holds_at_most_its_cap_of_connections() {
    let server = start(ServeOptions {
        per_peer: PeerLimit {
            max: 2,
            loopback: true,
        },
        ..options(5.0, 30.0)
    })
    .await;
    let get = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        stream.write_all(get).await.unwrap();
        assert_eq!(read_status(&mut stream).await, Some(200));
        held.push(stream);
    }
    let mut over = TcpStream::connect(server.addr).await.unwrap();
    let _ = over.write_all(get).await;
    assert_eq!(
        read_status(&mut over).await,
        None,
        "a third connection was served"
    );
    // Once one closes, the address may connect again.
    drop(held.pop());
    let deadline = Instant::now() + WAIT;
    loop {
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        let _ = stream.write_all(get).await;
        if read_status(&mut stream).await == Some(200) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the freed slot was never given back"
        );
    }
}

/// One local user holding connections open cannot lock another out of a listener that
/// counts loopback against its per-address cap, as a worker's does: past `unvouched`, each
/// new connection closes the oldest that no request has vouched for, so a newcomer (the
/// daemon) always gets in, and once vouched for it stays however many more arrive.
#[tokio::test]
async fn connections_nothing_vouched_for_make_room_for_a_newcomer() {
    // The server runs on this test's thread, so its events land here.
    let (capture, dispatch) = relay_logging::LogCapture::jsonl("warn");
    let _guard = tracing::dispatcher::set_default(&dispatch);
    let server = start(ServeOptions {
        per_peer: PeerLimit {
            max: 6,
            loopback: true,
        },
        unvouched: Some(3),
        ..options(5.0, 30.0)
    })
    .await;
    let get = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    let vouched = b"GET / HTTP/1.1\r\nHost: x\r\nx-vouch: 1\r\n\r\n";
    // Kept-alive connections whose requests vouch for nothing, more than the cap.
    let hold = || {
        let addr = server.addr;
        async move {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            stream.write_all(get).await.unwrap();
            assert_eq!(read_status(&mut stream).await, Some(200));
            stream
        }
    };
    let mut held = Vec::new();
    for _ in 0..10 {
        let stream = hold().await;
        held.push(stream);
    }
    let mut daemon = TcpStream::connect(server.addr).await.unwrap();
    daemon.write_all(vouched).await.unwrap();
    assert_eq!(
        read_status(&mut daemon).await,
        Some(200),
        "the newcomer was shut out"
    );
    for _ in 0..10 {
        let stream = hold().await;
        held.push(stream);
    }
    daemon.write_all(vouched).await.unwrap();
    assert_eq!(
        read_status(&mut daemon).await,
        Some(200),
        "the vouched connection was closed"
    );
    // The oldest of the others were closed to make room, and the operator is told, once
    // however many were.
    let _ = held[0].write_all(get).await;
    assert_eq!(read_status(&mut held[0]).await, None);
    let logs = capture.contents();
    assert_eq!(
        logs.matches("\"unvouched_connection_closed\"").count(),
        1,
        "{logs}"
    );
}

#[tokio::test]
async fn upgraded_connections_keep_their_connection_permit() {
    let server = start(ServeOptions {
        max_connections: 2,
        ..options(5.0, 30.0)
    })
    .await;
    let mut sessions = Vec::new();
    for _ in 0..2 {
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        stream
            .write_all(
                b"GET /up HTTP/1.1\r\nHost: x\r\nUpgrade: test\r\nConnection: upgrade\r\n\r\n",
            )
            .await
            .unwrap();
        assert_eq!(read_status(&mut stream).await, Some(101));
        sessions.push(stream);
    }
    // The kernel queues the connection, but relayd must not take it while two upgraded
    // sessions are open.
    let mut third = TcpStream::connect(server.addr).await.unwrap();
    third
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut first_byte = [0u8; 1];
    let early = tokio::time::timeout(Duration::from_millis(500), third.peek(&mut first_byte)).await;
    assert!(
        early.is_err(),
        "a connection was served beyond max_connections"
    );
    // Ending one session frees its permit.
    drop(sessions.pop());
    assert_eq!(read_status(&mut third).await, Some(200));
}

#[test]
fn workers_listen_with_small_limits_and_a_per_peer_cap() {
    let identity = WorkerIdentity::generate("127.0.0.1").unwrap();
    let options = serve_options(&identity, Duration::from_secs(1));
    let daemon = ServeOptions::default();
    // Far below the daemon's 10,000, yet room for the 1,000 open streams of one worker that
    // the performance targets ask for, plus probes and pooled connections.
    assert!(options.max_connections <= 2048);
    assert!(options.per_peer.max >= 1_000 + 64);
    assert!(options.handshake_timeout <= Duration::from_secs(2));
    assert!(options.header_read_timeout < daemon.header_read_timeout);
    assert!(
        options.per_peer.loopback,
        "local users share 127.0.0.1 with the daemon"
    );
    assert!(options.per_peer.max < options.max_connections);
    // Room for a burst of the daemon's new connections, and for the daemon beside another
    // user who holds as many as may be held.
    let unvouched = options
        .unvouched
        .expect("a worker limits unvouched connections");
    assert!(unvouched >= 1_000 && options.per_peer.max - unvouched >= 512);
    assert!(options.tls.is_some());
}

/// An `Echo` server that stops when told, and its report.
async fn stoppable() -> (
    SocketAddr,
    oneshot::Sender<()>,
    tokio::task::JoinHandle<relay_proxy::server::ServeReport>,
) {
    // A port named at bind, as relayd's is: the kernel keeps only such a port for a socket
    // that stopped listening (one it picked is given back).
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let listener = TcpListener::bind(addr).await.unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(serve(
        listener,
        options(30.0, 30.0),
        Arc::new(Echo),
        async move {
            stopped.await.ok();
        },
    ));
    (addr, stop, server)
}

/// A request of `length` body bytes in flight, none of them sent yet: hyper answers its
/// `Expect: 100-continue` once the handler reads the body.
async fn in_flight(addr: SocketAddr, length: usize) -> TcpStream {
    let mut running = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: {length}\r\n\r\n"
    );
    running.write_all(head.as_bytes()).await.unwrap();
    assert_eq!(read_status(&mut running).await, Some(100));
    running
}

/// A connection whose first bytes have not yet told its protocol (nothing sent, or part of
/// HTTP/2's preface) does not hold a stop: it is closed at once, and the drain ends.
#[tokio::test]
async fn connections_whose_protocol_is_not_known_yet_close_when_the_server_stops() {
    let (addr, stop, server) = stoppable().await;
    let mut silent = TcpStream::connect(addr).await.unwrap();
    let mut partial = TcpStream::connect(addr).await.unwrap();
    partial.write_all(b"PRI * HT").await.unwrap();
    // A request answered on a third connection: the two before it were accepted by then.
    let mut served = TcpStream::connect(addr).await.unwrap();
    served
        .write_all(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
        .await
        .unwrap();
    assert_eq!(read_status(&mut served).await, Some(200));
    stop.send(()).unwrap();
    let report = tokio::time::timeout(WAIT, server).await.unwrap().unwrap();
    assert!(report.drained(), "a connection held the drain");
    let deadline = Instant::now() + WAIT;
    assert!(closed_before(&mut silent, deadline).await);
    assert!(closed_before(&mut partial, deadline).await);
}

/// While accepted requests drain, new connections are refused as by a closed port, yet the
/// port stays taken: another local user cannot bind it, with any socket option, and answer
/// in the server's place. Once the drain ends, it is free.
#[tokio::test]
async fn the_port_stays_taken_while_requests_drain() {
    let (addr, stop, server) = stoppable().await;
    let mut running = in_flight(addr, 2).await;
    stop.send(()).unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        match TcpStream::connect(addr).await {
            Err(error) if error.kind() == std::io::ErrorKind::ConnectionRefused => break,
            // Accepted before the stop was seen.
            _ => assert!(
                Instant::now() < deadline,
                "new connections were still taken"
            ),
        }
    }
    // With SO_REUSEADDR the kernel may let a socket bind, but never listen.
    for reuse in [false, true] {
        let squatter = tokio::net::TcpSocket::new_v4().unwrap();
        squatter.set_reuseaddr(reuse).unwrap();
        let listening = squatter.bind(addr).and_then(|()| squatter.listen(16));
        assert!(
            listening.is_err(),
            "the port was free during the drain (reuseaddr {reuse})"
        );
    }
    // The request in flight still finishes, and then the port is given up.
    running.write_all(b"{}").await.unwrap();
    assert_eq!(read_status(&mut running).await, Some(200));
    drop(running);
    let report = tokio::time::timeout(WAIT, server).await.unwrap().unwrap();
    assert!(report.drained());
    assert!(std::net::TcpListener::bind(addr).is_ok());
}

/// A request still running when the drain time runs out is cut off and counted; an idle
/// keep-alive connection beside it closes and is not.
#[tokio::test]
async fn a_request_running_past_the_drain_time_is_counted_as_unfinished() {
    let (addr, stop, server) = stoppable().await;
    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
        .await
        .unwrap();
    assert_eq!(read_status(&mut idle).await, Some(200));
    let mut running = in_flight(addr, 10).await;
    running.write_all(b"{}").await.unwrap();
    stop.send(()).unwrap();
    let report = tokio::time::timeout(WAIT, server).await.unwrap().unwrap();
    assert_eq!(report.unfinished, 1);
    assert!(!report.drained());
}
