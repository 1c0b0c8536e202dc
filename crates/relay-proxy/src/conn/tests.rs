use std::sync::Arc;
use std::task::Waker;

use proptest::prelude::*;

use super::*;

fn tracker() -> ConnIo<()> {
    ConnIo::new((), Arc::new(ConnState::new()), true)
}

fn verdicts<T>(io: &ConnIo<T>) -> Vec<HeadVerdict> {
    relay_logging::sync::lock(&io.state.verdicts, "test")
        .unwrap()
        .iter()
        .copied()
        .collect()
}

/// The stalled-write time of the tests that are not about it: longer than any of them.
const STALL: Duration = Duration::from_secs(3600);

const CLEAN: HeadVerdict = HeadVerdict::Clean;
const AMBIGUOUS: HeadVerdict = HeadVerdict::AmbiguousFraming;

#[test]
fn content_length_with_transfer_encoding_is_ambiguous_in_either_order() {
    for head in [
        "POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
        "POST /v1/messages HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
    ] {
        let mut io = tracker();
        io.observe(head.as_bytes());
        assert_eq!(verdicts(&io), [AMBIGUOUS], "{head:?}");
        assert!(matches!(io.framing, Framing::Lost));
    }
}

#[test]
fn differing_content_lengths_are_ambiguous_and_equal_ones_are_not() {
    let mut io = tracker();
    io.observe(b"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n");
    assert_eq!(verdicts(&io), [AMBIGUOUS]);
    let mut io = tracker();
    io.observe(b"POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok");
    assert_eq!(verdicts(&io), [CLEAN]);
    assert!(matches!(io.framing, Framing::Head(ref b) if b.is_empty()));
}

/// Three pipelined requests: fixed length, chunked with trailers, and a smuggling try.
const PIPELINE: &[u8] = b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 24\r\n\r\n\r\n\r\nGET /fake HTTP/1.1\r\n\
POST /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n18\r\nTransfer-Encoding: x\r\n\r\n\r\n0\r\nTrailer-A: 1\r\n\r\n\
POST /c HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n";

#[test]
fn framing_is_followed_across_pipelined_requests() {
    let mut io = tracker();
    io.observe(PIPELINE);
    assert_eq!(verdicts(&io), [CLEAN, CLEAN, AMBIGUOUS]);
}

proptest! {
    #[test]
    fn any_split_of_the_byte_stream_gives_the_same_verdicts(cuts in proptest::collection::vec(0usize..PIPELINE.len(), 0..12)) {
        let mut cuts = cuts;
        cuts.sort_unstable();
        let mut io = tracker();
        let mut at = 0;
        for cut in cuts.into_iter().chain([PIPELINE.len()]) {
            io.observe(&PIPELINE[at..cut.max(at)]);
            at = cut.max(at);
        }
        prop_assert_eq!(verdicts(&io), vec![CLEAN, CLEAN, AMBIGUOUS]);
    }
}

#[test]
fn http2_and_upgrades_stop_tracking() {
    let mut io = tracker();
    io.observe(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
    assert!(matches!(io.framing, Framing::Off));
    let mut io = tracker();
    io.observe(
        b"GET /_relay/control/v1/mcp HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
    );
    assert_eq!(verdicts(&io), [CLEAN]);
    // Followed until hyper accepts the upgrade: a refused one stays HTTP/1.
    assert!(matches!(io.framing, Framing::Head(_)));
    io.on_write(b"HTTP/1.1 101 Switching Protocols\r\n\r\n");
    assert!(matches!(io.framing, Framing::Off));
    assert_eq!(
        io.state.take_verdict(),
        CLEAN,
        "HTTP/2 requests need no verdict"
    );
}

#[test]
fn a_partial_head_marks_the_head_timer_and_a_complete_one_clears_it() {
    let mut io = tracker();
    io.observe(b"\r\nGET / HTTP/1.1\r\nHo");
    assert_ne!(io.state.head_started.load(Ordering::Relaxed), 0);
    io.observe(b"st: x\r\n\r\n");
    assert_eq!(io.state.head_started.load(Ordering::Relaxed), 0);
    assert_eq!(io.state.take_verdict(), CLEAN);
    assert_eq!(
        io.state.take_verdict(),
        AMBIGUOUS,
        "an HTTP/1 request without a verdict is refused"
    );
}

#[tokio::test(start_paused = true)]
async fn watchdog_separates_header_timeout_from_keepalive_idle() {
    let state = Arc::new(ConnState::new());
    let header = Duration::from_secs(10);
    let idle = Duration::from_secs(90);
    // Idle from the start: fires after the keep-alive time, not the header time.
    let started = Instant::now();
    assert_eq!(state.expired(header, idle, STALL).await, Expiry::Idle);
    assert!(started.elapsed() >= idle);
    // A head in progress: fires after the header time.
    let mut io = ConnIo::new((), state.clone(), true);
    io.observe(b"GET / HT");
    let started = Instant::now();
    assert_eq!(
        state.expired(header, idle, STALL).await,
        Expiry::HeaderTimeout
    );
    assert!(started.elapsed() >= header && started.elapsed() < idle);
}

/// The watchdog of `state` with a 10 s header timeout and a 90 s keep-alive idle time,
/// running in its own task.
fn watchdog(state: &Arc<ConnState>) -> tokio::task::JoinHandle<Expiry> {
    let state = state.clone();
    tokio::spawn(async move {
        state
            .expired(Duration::from_secs(10), Duration::from_secs(90), STALL)
            .await
    })
}

#[tokio::test(start_paused = true)]
async fn an_active_request_holds_the_connection_open() {
    let state = Arc::new(ConnState::new());
    let request = state.begin_request();
    let watch = watchdog(&state);
    tokio::time::advance(Duration::from_secs(600)).await;
    tokio::task::yield_now().await;
    assert!(!watch.is_finished());
    let ended = Instant::now();
    drop(request);
    assert_eq!(watch.await.unwrap(), Expiry::Idle);
    assert!(ended.elapsed() >= Duration::from_secs(90));
}

#[tokio::test(start_paused = true)]
async fn a_head_on_an_idle_connection_brings_the_deadline_forward() {
    let state = Arc::new(ConnState::new());
    let mut io = ConnIo::new((), state.clone(), true);
    io.observe(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    let watch = watchdog(&state);
    // The watchdog waits for the idle time; a head starting 5 s in must cut that short.
    tokio::time::advance(Duration::from_secs(5)).await;
    tokio::task::yield_now().await;
    let head_started = Instant::now();
    io.observe(b"GET / HT");
    assert_eq!(watch.await.unwrap(), Expiry::HeaderTimeout);
    let waited = head_started.elapsed();
    assert!(waited >= Duration::from_secs(10) && waited < Duration::from_secs(11));
}

#[tokio::test(start_paused = true)]
async fn activity_after_the_timer_was_set_moves_the_idle_deadline_later() {
    let state = Arc::new(ConnState::new());
    let mut io = ConnIo::new((), state.clone(), true);
    io.observe(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    let request = state.begin_request();
    let watch = watchdog(&state);
    tokio::task::yield_now().await;
    // The request ends 60 s in: idle from then, not from when the watchdog set its timer.
    tokio::time::advance(Duration::from_secs(60)).await;
    let ended = Instant::now();
    drop(request);
    assert_eq!(watch.await.unwrap(), Expiry::Idle);
    let idle = ended.elapsed();
    assert!(idle >= Duration::from_secs(90) && idle < Duration::from_secs(91));
}

#[test]
fn an_http2_preface_split_anywhere_stops_tracking() {
    let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    for split in 1..preface.len() {
        let mut io = tracker();
        io.observe(&preface[..split]);
        io.observe(&preface[split..]);
        assert!(matches!(io.framing, Framing::Off), "split at {split}");
        assert!(!io.state.is_untracked(), "split at {split}");
        assert_eq!(io.state.take_verdict(), CLEAN, "split at {split}");
    }
}

#[test]
fn an_invalid_head_is_gathered_until_it_ends_and_keeps_its_head_timer() {
    let mut io = tracker();
    io.observe(b"GET / HTTP/1.1\r\nBad Name: x\r\n");
    assert!(!io.state.is_untracked());
    assert_ne!(io.state.head_started.load(Ordering::Relaxed), 0);
    io.observe(b"\r\n");
    assert!(io.state.is_untracked());
    assert!(matches!(io.framing, Framing::Lost));
}

#[tokio::test(start_paused = true)]
async fn a_split_head_that_ends_hands_over_to_a_shorter_idle_time() {
    let state = Arc::new(ConnState::new());
    let mut io = ConnIo::new((), state.clone(), true);
    io.observe(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    // A keep-alive time shorter than the header timeout.
    let watch = tokio::spawn({
        let state = state.clone();
        async move {
            state
                .expired(Duration::from_secs(30), Duration::from_secs(5), STALL)
                .await
        }
    });
    tokio::task::yield_now().await;
    // A head starts 1 s in; when the idle timer fires it is still being read, so the
    // watchdog waits for its header timeout (31 s in).
    tokio::time::advance(Duration::from_secs(1)).await;
    io.observe(b"GET / HTTP/1.1\r\nHo");
    tokio::time::advance(Duration::from_secs(5)).await;
    tokio::task::yield_now().await;
    assert!(!watch.is_finished());
    // The head ends and no request begins (as when hyper refuses it): idle from now.
    let ended = Instant::now();
    io.observe(b"st: x\r\n\r\n");
    assert_eq!(watch.await.unwrap(), Expiry::Idle);
    let idle = ended.elapsed();
    assert!(
        idle >= Duration::from_secs(5) && idle < Duration::from_secs(6),
        "{idle:?}"
    );
}

#[test]
fn bare_lf_heads_end_and_are_judged() {
    let mut io = tracker();
    io.observe(b"POST / HTTP/1.1\nHost: x\nContent-Length: 5\nTransfer-Encoding: chunked\n\n");
    assert_eq!(verdicts(&io), [AMBIGUOUS]);
    let mut io = tracker();
    io.observe(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\nok");
    io.observe(b"GET / HTTP/1.1\nHost: x\n\r\n");
    assert_eq!(verdicts(&io), [CLEAN, CLEAN]);
    assert!(matches!(io.framing, Framing::Head(ref b) if b.is_empty()));
}

#[test]
fn a_long_chunk_extension_split_across_reads_is_followed() {
    let mut io = tracker();
    io.observe(b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;e=");
    let extension = vec![b'a'; 10_000];
    for part in extension.chunks(1000) {
        io.observe(part);
    }
    io.observe(b"\r\nhello\r\n0\r\n\r\n");
    io.observe(b"POST /b HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n");
    assert_eq!(verdicts(&io), [CLEAN, AMBIGUOUS]);
}

#[test]
fn bytes_the_watcher_cannot_follow_leave_requests_refused_and_the_connection_untracked() {
    for stream in [
        &b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"[..],
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n11111111111111111\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n",
        b"GET / HTTP/9\r\n\r\n",
    ] {
        let mut io = tracker();
        io.observe(stream);
        io.observe(b"GET / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n");
        assert!(io.state.is_untracked(), "{stream:?}");
        assert!(matches!(io.framing, Framing::Lost));
        while !relay_logging::sync::lock(&io.state.verdicts, "test")
            .unwrap()
            .is_empty()
        {
            io.state.take_verdict();
        }
        assert_eq!(io.state.take_verdict(), AMBIGUOUS, "{stream:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn blank_lines_between_requests_are_no_activity() {
    let state = Arc::new(ConnState::new());
    let mut io = ConnIo::new((), state.clone(), true);
    io.observe(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    let before = state.last_activity.load(Ordering::Relaxed);
    tokio::time::advance(Duration::from_secs(5)).await;
    io.observe(b"\r\n\r\n\n");
    assert_eq!(state.last_activity.load(Ordering::Relaxed), before);
    assert_eq!(state.head_started.load(Ordering::Relaxed), 0);
    // A real byte is.
    io.observe(b"G");
    assert!(state.last_activity.load(Ordering::Relaxed) > before);
    assert_ne!(state.head_started.load(Ordering::Relaxed), 0);
}

#[tokio::test(start_paused = true)]
async fn an_untracked_connection_is_cut_by_the_header_timer_once_idle() {
    let state = Arc::new(ConnState::new());
    let mut io = ConnIo::new((), state.clone(), true);
    io.observe(b"POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n");
    let started = Instant::now();
    let header = Duration::from_secs(10);
    assert_eq!(
        state.expired(header, Duration::from_secs(90), STALL).await,
        Expiry::Untracked
    );
    assert!(started.elapsed() >= header && started.elapsed() < Duration::from_secs(90));
}

#[tokio::test(start_paused = true)]
async fn an_untracked_connection_is_cut_by_the_header_timer_once_its_request_ends() {
    let state = Arc::new(ConnState::new());
    let mut io = ConnIo::new((), state.clone(), true);
    io.observe(b"POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n");
    let request = state.begin_request();
    let watch = watchdog(&state);
    // Held open by its request well past both timers; the watchdog has set its timer for
    // the keep-alive time from its last turn.
    tokio::time::advance(Duration::from_secs(100)).await;
    tokio::task::yield_now().await;
    assert!(!watch.is_finished());
    let ended = Instant::now();
    drop(request);
    assert_eq!(watch.await.unwrap(), Expiry::Untracked);
    let waited = ended.elapsed();
    assert!(
        waited >= Duration::from_secs(10) && waited < Duration::from_secs(11),
        "{waited:?}"
    );
}

/// An HTTP/2 connection that has not begun a stream (it trickles its first header block,
/// or sends only PINGs) is cut at the header timeout, as a slow HTTP/1 head is.
#[tokio::test(start_paused = true)]
async fn an_http2_connection_without_a_stream_ends_at_the_header_timeout() {
    for http1 in [true, false] {
        let state = Arc::new(ConnState::new());
        let mut io = ConnIo::new((), state.clone(), http1);
        if http1 {
            io.observe(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
        }
        let watch = watchdog(&state);
        let started = Instant::now();
        while !watch.is_finished() {
            io.observe(&[0, 0, 8, 6, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]);
            tokio::time::advance(Duration::from_secs(1)).await;
            tokio::task::yield_now().await;
        }
        assert_eq!(watch.await.unwrap(), Expiry::HeaderTimeout);
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_secs(10) && waited <= Duration::from_secs(11),
            "{waited:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn http2_bytes_are_no_activity() {
    let state = Arc::new(ConnState::new());
    let mut io = ConnIo::new((), state.clone(), true);
    io.observe(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
    // A first stream, so the connection is past its first-request timer.
    drop(state.begin_request());
    let idle = Duration::from_secs(90);
    let watch = watchdog(&state);
    let started = Instant::now();
    // PINGs every second do not keep it open.
    while !watch.is_finished() {
        io.observe(&[0, 0, 8, 6, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]);
        tokio::time::advance(Duration::from_secs(1)).await;
        tokio::task::yield_now().await;
        assert!(
            started.elapsed() < idle * 2,
            "PINGs kept an idle HTTP/2 connection open"
        );
    }
    assert_eq!(watch.await.unwrap(), Expiry::Idle);
    assert_eq!(state.take_verdict(), CLEAN);
}

/// A socket whose reads return `pieces` one at a time, as much of each as fits, then an
/// error if `then_fails`, then EOF.
#[derive(Debug)]
struct Pieces {
    pieces: VecDeque<Vec<u8>>,
    then_fails: bool,
}

impl Pieces {
    fn new(pieces: &[&[u8]]) -> Pieces {
        Pieces {
            pieces: pieces.iter().map(|piece| piece.to_vec()).collect(),
            then_fails: false,
        }
    }
}

impl AsyncRead for Pieces {
    fn poll_read(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match this.pieces.front_mut() {
            Some(piece) => {
                let n = piece.len().min(buf.remaining());
                buf.put_slice(&piece[..n]);
                piece.drain(..n);
                if piece.is_empty() {
                    this.pieces.pop_front();
                }
            }
            None if std::mem::take(&mut this.then_fails) => {
                return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into()));
            }
            None => {}
        }
        Poll::Ready(Ok(()))
    }
}

fn sniffer(pieces: &[&[u8]]) -> ConnIo<Pieces> {
    ConnIo::new(Pieces::new(pieces), Arc::new(ConnState::new()), true)
}

fn sniff(io: &mut ConnIo<Pieces>) -> bool {
    let mut cx = Context::from_waker(Waker::noop());
    match io.poll_sniff_h2(&mut cx) {
        Poll::Ready(found) => found.unwrap(),
        Poll::Pending => panic!("the sniff waited on a socket that never waits"),
    }
}

/// One read of at most `room` bytes, as hyper makes it.
fn read_once(io: &mut ConnIo<Pieces>, room: usize) -> Vec<u8> {
    try_read_once(io, room).unwrap()
}

fn try_read_once(io: &mut ConnIo<Pieces>, room: usize) -> io::Result<Vec<u8>> {
    let mut cx = Context::from_waker(Waker::noop());
    let mut space = vec![0u8; room];
    let mut buf = ReadBuf::new(&mut space);
    match Pin::new(&mut *io).poll_read(&mut cx, &mut buf) {
        Poll::Ready(read) => read.map(|()| buf.filled().to_vec()),
        Poll::Pending => panic!("the read waited on a socket that never waits"),
    }
}

const REQUEST: &[u8] =
    b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Type: application/json\r\n\r\n{}";

#[test]
fn bytes_read_to_find_the_protocol_come_back_with_the_rest_in_one_read() {
    let mut io = sniffer(&[REQUEST]);
    assert!(!sniff(&mut io));
    // The sniff took only what it needed to decide.
    assert_eq!(io.sniffed.len, H2_CONNECTION_PREFACE.len());
    // hyper's first read gets the whole request, and the watcher judged its head once.
    assert_eq!(read_once(&mut io, 8192), REQUEST);
    assert_eq!(verdicts(&io), [CLEAN]);
    assert!(read_once(&mut io, 8192).is_empty(), "no end of input");
}

#[test]
fn the_sniff_stops_at_the_first_byte_that_differs_from_the_preface() {
    // `P` could begin the preface; `O` cannot.
    let mut io = sniffer(&[b"P", &REQUEST[1..]]);
    assert!(!sniff(&mut io));
    assert_eq!(read_once(&mut io, 8192), REQUEST);
    assert_eq!(verdicts(&io), [CLEAN]);
}

#[test]
fn the_http2_preface_is_found_across_reads_and_given_back() {
    let settings: &[u8] = &[0, 0, 0, 4, 0, 0, 0, 0, 0];
    let mut io = sniffer(&[b"PRI * HT", b"TP/2.0\r\n\r\nSM\r\n\r\n", settings]);
    assert!(sniff(&mut io));
    let mut expected = H2_CONNECTION_PREFACE.to_vec();
    expected.extend_from_slice(settings);
    assert_eq!(read_once(&mut io, 8192), expected);
    // The watcher saw the preface and follows no HTTP/1 from here.
    assert!(!io.state.watched.load(Ordering::Relaxed));
}

#[test]
fn a_read_smaller_than_what_was_sniffed_gets_it_in_turns() {
    let mut io = sniffer(&[REQUEST]);
    assert!(!sniff(&mut io));
    let mut got = Vec::new();
    for room in [10, 10, 40, 8192] {
        got.extend(read_once(&mut io, room));
    }
    assert_eq!(got, REQUEST);
    assert_eq!(verdicts(&io), [CLEAN]);
}

#[test]
fn a_connection_that_ends_while_sniffed_is_not_http2() {
    let mut io = sniffer(&[]);
    assert!(!sniff(&mut io));
    assert!(read_once(&mut io, 8192).is_empty());
    // A preface cut short is given back as it came.
    let mut io = sniffer(&[b"PRI * HTTP/2.0\r\n"]);
    assert!(!sniff(&mut io));
    assert_eq!(read_once(&mut io, 8192), b"PRI * HTTP/2.0\r\n");
}

#[test]
fn a_socket_error_after_the_sniffed_bytes_comes_with_the_next_read() {
    // A whole request in the bytes the sniff read, and the socket fails right after.
    let request: &[u8] = b"GET / HTTP/1.0\r\n\r\n";
    let mut io = sniffer(&[request]);
    io.inner.as_mut().unwrap().then_fails = true;
    assert!(!sniff(&mut io));
    assert_eq!(read_once(&mut io, 8192), request);
    assert_eq!(
        try_read_once(&mut io, 8192).unwrap_err().kind(),
        io::ErrorKind::UnexpectedEof
    );
    assert!(read_once(&mut io, 8192).is_empty());
}

/// The stalled-write time of the two tests below.
const TEST_STALL: Duration = Duration::from_secs(5);

/// A connection over a 64-byte pipe with a request in progress, and its watchdog (10 s
/// header timeout, 90 s keep-alive, [`TEST_STALL`]) in its own task.
struct Stalling {
    io: ConnIo<tokio::io::DuplexStream>,
    client: tokio::io::DuplexStream,
    _active: ActiveRequest,
    expired: tokio::task::JoinHandle<Expiry>,
}

impl Stalling {
    fn new(head: &[u8]) -> Stalling {
        let state = Arc::new(ConnState::new());
        let (client, server) = tokio::io::duplex(64);
        let mut io = ConnIo::new(server, state.clone(), true);
        io.observe(head);
        let _active = state.begin_request();
        let expired = tokio::spawn(async move {
            state
                .expired(Duration::from_secs(10), Duration::from_secs(90), TEST_STALL)
                .await
        });
        Stalling {
            io,
            client,
            _active,
            expired,
        }
    }

    fn write(&mut self) -> Poll<io::Result<usize>> {
        let mut cx = Context::from_waker(Waker::noop());
        Pin::new(&mut self.io).poll_write(&mut cx, &[b'x'; 64])
    }

    /// Fills the pipe, then finds it full.
    fn fill(&mut self) {
        assert!(matches!(self.write(), Poll::Ready(Ok(64))));
        assert!(self.write().is_pending());
    }
}

/// A client that reads nothing: once its socket is full, every write waits. After the
/// stalled-write time without one going through, the watchdog ends the connection, though
/// a request is in progress; a write that goes through in time starts the count anew.
#[tokio::test(start_paused = true)]
async fn a_client_that_reads_nothing_is_cut_after_the_stalled_write_time() {
    let mut conn = Stalling::new(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    conn.fill();
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(!conn.expired.is_finished());
    // The client reads: the next write goes through, and the count starts again.
    let mut sink = [0u8; 64];
    tokio::io::AsyncReadExt::read_exact(&mut conn.client, &mut sink)
        .await
        .unwrap();
    conn.fill();
    let started = Instant::now();
    assert_eq!(conn.expired.await.unwrap(), Expiry::WriteStalled);
    assert!(started.elapsed() >= TEST_STALL);
}

/// Bytes from the client count as activity: one that uploads while it reads nothing (an
/// answer that began before the upload ended) is not cut while its upload flows.
#[tokio::test(start_paused = true)]
async fn an_upload_in_progress_keeps_a_blocked_writer_alive() {
    let mut conn = Stalling::new(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n");
    conn.fill();
    // The upload goes on for 12 s, a piece every second: no cut.
    for _ in 0..12 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        conn.io.observe(&[b'a'; 100]);
        assert!(!conn.expired.is_finished());
    }
    // Then nothing moves either way: cut after the stalled-write time.
    let started = Instant::now();
    assert_eq!(conn.expired.await.unwrap(), Expiry::WriteStalled);
    assert!(started.elapsed() >= TEST_STALL - Duration::from_secs(1));
}
