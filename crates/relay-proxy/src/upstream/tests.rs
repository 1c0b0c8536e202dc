use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::uri::{Authority, Scheme};
use http::{Request, StatusCode, Version};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc};

use super::*;
use crate::body::tests::streamed;
use crate::body::{BodyEnd, BodyTap, ResponseBody};

const WAIT: Duration = Duration::from_secs(5);

fn options() -> UpstreamOptions {
    UpstreamOptions {
        connect_timeout: Duration::from_secs(2),
        response_timeout: None,
        proxy_url: None,
        max_connections: 1024,
        no_proxy: None,
    }
}

fn client() -> UpstreamClient {
    client_of(options())
}

/// A client with `options` that trusts no provider certificate.
fn client_of(options: UpstreamOptions) -> UpstreamClient {
    UpstreamClient::with_tls(&options, client_tls(rustls::RootCertStore::empty()))
}

/// A client with the default options that trusts `roots`.
fn trusting(roots: rustls::RootCertStore) -> UpstreamClient {
    UpstreamClient::with_tls(&options(), client_tls(roots))
}

fn client_tls(roots: rustls::RootCertStore) -> rustls::ClientConfig {
    rustls::ClientConfig::builder_with_provider(crate::tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth()
}

fn get(uri: &str) -> Request<RequestBody> {
    let mut req = Request::new(RequestBody::empty());
    *req.uri_mut() = uri.parse().unwrap();
    req
}

async fn read_all(res: Response<UpstreamBody>) -> (StatusCode, Bytes) {
    let status = res.status();
    (status, res.into_body().collect().await.unwrap().to_bytes())
}

/// What a peer saw: each connection it accepted, and each request head on it.
pub(crate) enum Seen {
    Connection,
    Head(String),
    Closed,
}

/// When a peer closes a connection, without saying so in its answers.
#[derive(Clone)]
pub(crate) enum Close {
    Never,
    /// Right after its first answer.
    AtOnce,
    /// After its first answer, once the test says so (one permit per connection).
    WhenTold(Arc<Notify>),
}

/// A plain HTTP/1.1 provider answering `ok` to bodiless requests.
async fn provider(close: Close) -> (String, mpsc::UnboundedReceiver<Seen>) {
    provider_answering(OK, close).await
}

const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";

/// A plain HTTP/1.1 provider answering every request head with `response`.
async fn provider_answering(
    response: &'static [u8],
    close: Close,
) -> (String, mpsc::UnboundedReceiver<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let _ = tx.send(Seen::Connection);
            tokio::spawn(answer(stream, response, close.clone(), tx.clone()));
        }
    });
    (format!("http://{addr}"), rx)
}

/// Answers every request head on `stream` with `response`, and closes it as `close` says.
/// Shared with the worker client's tests.
pub(crate) async fn answer(
    mut stream: impl AsyncRead + AsyncWrite + Unpin,
    response: &[u8],
    close: Close,
    tx: mpsc::UnboundedSender<Seen>,
) {
    let mut buf = Vec::new();
    loop {
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            let _ = tx.send(Seen::Closed);
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head: Vec<u8> = buf.drain(..end + 4).collect();
            let _ = tx.send(Seen::Head(String::from_utf8(head).unwrap()));
            if stream.write_all(response).await.is_err() {
                let _ = tx.send(Seen::Closed);
                return;
            }
            let closing = match &close {
                Close::Never => false,
                Close::AtOnce => true,
                Close::WhenTold(told) => {
                    told.notified().await;
                    true
                }
            };
            if closing {
                drop(stream);
                let _ = tx.send(Seen::Closed);
                return;
            }
        }
    }
}

/// The events of one connection that answered one request and was closed.
pub(crate) async fn answered_once_and_closed(rx: &mut mpsc::UnboundedReceiver<Seen>) {
    assert!(matches!(next(rx).await, Seen::Connection));
    assert!(matches!(next(rx).await, Seen::Head(_)));
    assert!(matches!(next(rx).await, Seen::Closed));
}

async fn next(rx: &mut mpsc::UnboundedReceiver<Seen>) -> Seen {
    tokio::time::timeout(WAIT, rx.recv())
        .await
        .unwrap()
        .unwrap()
}

pub(crate) fn counts(rx: &mut mpsc::UnboundedReceiver<Seen>) -> (usize, Vec<String>) {
    let (mut connections, mut heads) = (0, Vec::new());
    while let Ok(seen) = rx.try_recv() {
        match seen {
            Seen::Connection => connections += 1,
            Seen::Head(head) => heads.push(head),
            Seen::Closed => {}
        }
    }
    (connections, heads)
}

#[tokio::test]
async fn requests_one_after_another_share_one_connection_in_origin_form_with_host() {
    let (base, mut seen) = provider(Close::Never).await;
    let client = client();
    for _ in 0..3 {
        let res = client.send(get(&format!("{base}/v1/models?limit=2"))).await;
        assert_eq!(read_all(res.unwrap()).await, (StatusCode::OK, "ok".into()));
    }
    let (connections, heads) = counts(&mut seen);
    assert_eq!(connections, 1);
    assert_eq!(heads.len(), 3);
    let port = base.rsplit(':').next().unwrap();
    for head in heads {
        assert!(
            head.starts_with("GET /v1/models?limit=2 HTTP/1.1\r\n"),
            "{head}"
        );
        assert!(
            head.contains(&format!("host: 127.0.0.1:{port}\r\n")),
            "{head}"
        );
    }
}

/// Wakes that arrive while the future being counted is polled: tokio would poll it once
/// more for each, for nothing. Wakes between polls go on to the task.
#[derive(Default)]
struct WakesInPoll {
    task: futures_util::task::AtomicWaker,
    in_poll: AtomicBool,
    count: AtomicUsize,
    /// Every wake.
    woken: AtomicUsize,
}

impl std::task::Wake for WakesInPoll {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.fetch_add(1, Ordering::SeqCst);
        if self.in_poll.load(Ordering::SeqCst) {
            self.count.fetch_add(1, Ordering::SeqCst);
        }
        self.task.wake();
    }
}

impl WakesInPoll {
    /// Polls with `poll` until it is ready, counting.
    async fn poll<T>(
        self: &Arc<Self>,
        mut poll: impl FnMut(&mut std::task::Context<'_>) -> std::task::Poll<T>,
    ) -> T {
        let waker = std::task::Waker::from(self.clone());
        std::future::poll_fn(|cx| {
            self.task.register(cx.waker());
            self.in_poll.store(true, Ordering::SeqCst);
            let polled = poll(&mut std::task::Context::from_waker(&waker));
            self.in_poll.store(false, Ordering::SeqCst);
            polled
        })
        .await
    }
}

/// A provider of one connection: it reads a request head and says so on the receiver it
/// returns, then writes each of `pieces` when told on the sender, saying so once written,
/// and keeps the connection open until the sender is dropped.
async fn provider_writing_when_told(
    pieces: Vec<&'static [u8]>,
) -> (
    String,
    mpsc::UnboundedSender<()>,
    mpsc::UnboundedReceiver<()>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (go, mut told) = mpsc::unbounded_channel::<()>();
    let (said, seen) = mpsc::unbounded_channel::<()>();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            stream.read_exact(&mut byte).await.unwrap();
            head.push(byte[0]);
        }
        let _ = said.send(());
        for piece in pieces {
            if told.recv().await.is_none() {
                return;
            }
            stream.write_all(piece).await.unwrap();
            let _ = said.send(());
        }
        let _ = told.recv().await;
    });
    (format!("http://{addr}/v1/stream"), go, seen)
}

const CHUNKED_HEAD: &[u8] = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n";
const EVENT_CHUNK: &[u8] = b"6\r\nevent\n\r\n";

/// The task that reads an answer drives its connection too, so the answer's head and each
/// chunk of its body pass from the connection to the body within that task: none of them
/// may wake it, or each would cost a second poll of the whole client connection. And a
/// small chunk is handed on apart from the connection's read buffer, which the next read
/// could otherwise not reuse.
#[tokio::test]
async fn reading_a_streamed_answer_wakes_its_task_only_when_the_provider_sends() {
    const CHUNKS: usize = 20;
    let mut pieces = vec![CHUNKED_HEAD];
    pieces.extend([EVENT_CHUNK; CHUNKS]);
    pieces.push(b"0\r\n\r\n");
    let (uri, go, _seen) = provider_writing_when_told(pieces).await;
    let client = client();
    let wakes = Arc::new(WakesInPoll::default());
    let mut sending = std::pin::pin!(client.send(get(&uri)));
    go.send(()).unwrap();
    let res = wakes.poll(|cx| sending.as_mut().poll(cx)).await.unwrap();
    assert_eq!(
        wakes.count.load(Ordering::SeqCst),
        0,
        "the head woke the task"
    );
    let mut body = res.into_body();
    for chunk in 0..CHUNKS {
        go.send(()).unwrap();
        let frame = wakes
            .poll(|cx| Pin::new(&mut body).poll_frame(cx))
            .await
            .unwrap()
            .unwrap();
        let data = frame.into_data().unwrap();
        assert_eq!(data, "event\n");
        // Not a view of the connection's read buffer, which could then not be reused.
        assert!(data.is_unique(), "chunk {chunk} holds the read buffer");
        assert_eq!(
            wakes.count.load(Ordering::SeqCst),
            0,
            "chunk {chunk} woke the task that took it"
        );
    }
    go.send(()).unwrap();
    assert!(
        wakes
            .poll(|cx| Pin::new(&mut body).poll_frame(cx))
            .await
            .is_none()
    );
}

/// Spends tokio's budget down to `left` units, then polls `sending` once with a waker that
/// counts: the answer's head (written by the provider before) is read with the budget's
/// last units. Whether the request went on: answered, or its task woken to go on.
async fn answer_goes_on_with_budget_left(left: usize) -> bool {
    // The head and a first chunk, read at once.
    let (uri, go, mut seen) = provider_writing_when_told(vec![
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n6\r\nevent\n\r\n",
    ])
    .await;
    let client = client();
    let mut sending = Box::pin(client.send(get(&uri)));
    tokio::select! {
        _ = &mut sending => panic!("answered before the provider wrote"),
        _ = seen.recv() => {}
    }
    go.send(()).unwrap();
    seen.recv().await.unwrap();
    // tokio polls its driver before it runs a task that yielded: the head's arrival is seen.
    tokio::task::yield_now().await;
    let woken = Arc::new(WakesInPoll::default());
    let waker = std::task::Waker::from(woken.clone());
    let polled = std::future::poll_fn(|cx| {
        for _ in left..128 {
            let Poll::Ready(spent) = tokio::task::coop::poll_proceed(cx) else {
                panic!("the budget ran out before the request was polled");
            };
            spent.made_progress();
        }
        Poll::Ready(sending.as_mut().poll(&mut Context::from_waker(&waker)))
    })
    .await;
    // A wake tokio defers to a task out of budget is made once the task has yielded.
    tokio::task::yield_now().await;
    polled.is_ready() || woken.woken.load(Ordering::SeqCst) > 0
}

/// The head comes through tokio's one-shot, which answers `Pending` to a task out of budget
/// and wakes the waker it was polled with; polled with none, the request would wait forever.
#[tokio::test]
async fn an_answer_read_with_the_last_of_the_tasks_budget_goes_on() {
    for left in 1..=4 {
        assert!(
            answer_goes_on_with_budget_left(left).await,
            "with {left} units of budget left the request was neither answered nor woken"
        );
    }
}

/// An empty POST says `content-length: 0`, which hyper would leave out, so a front end that
/// requires a length does not answer 411; a GET says nothing.
#[tokio::test]
async fn an_empty_post_says_its_length_over_http1() {
    let (base, mut seen) = provider(Close::Never).await;
    let client = client();
    let uri = format!("{base}/v1/messages");
    // The client's own empty body, as the front passes it on.
    let (incoming, _tasks) =
        incoming_of(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n").await;
    let empty = streamed(incoming, 1 << 20, WAIT);
    for req in [post(&uri, empty), get(&uri)] {
        let res = client.send(req).await.unwrap();
        assert_eq!(read_all(res).await.0, StatusCode::OK);
    }
    let (_, heads) = counts(&mut seen);
    assert!(heads[0].starts_with("POST "), "{heads:?}");
    assert!(heads[0].contains("content-length: 0\r\n"), "{heads:?}");
    assert!(!heads[1].contains("content-length"), "{heads:?}");
}

#[tokio::test]
async fn requests_at_once_get_a_connection_each_and_all_are_kept() {
    let (base, mut seen) = provider(Close::Never).await;
    let client = client();
    let uri = format!("{base}/v1/models");
    let answers = futures_util::future::join_all((0..4).map(|_| client.send(get(&uri)))).await;
    let bodies = futures_util::future::join_all(answers.into_iter().map(|r| read_all(r.unwrap())));
    assert!(
        bodies
            .await
            .iter()
            .all(|(status, _)| *status == StatusCode::OK)
    );
    let (connections, _) = counts(&mut seen);
    assert_eq!(connections, 4);
    // Each answered connection went back to the pool: four more at once open none.
    let answers = futures_util::future::join_all((0..4).map(|_| client.send(get(&uri)))).await;
    for answer in answers {
        read_all(answer.unwrap()).await;
    }
    let (connections, heads) = counts(&mut seen);
    assert_eq!((connections, heads.len()), (0, 4));
}

#[tokio::test]
async fn a_connection_the_provider_closed_is_not_used_and_nothing_is_sent_twice() {
    let (base, mut seen) = provider(Close::AtOnce).await;
    let client = client();
    let uri = format!("{base}/v1/models");
    let (mut connections, mut heads) = (0, 0);
    for _ in 0..3 {
        let res = client.send(get(&uri)).await.unwrap();
        assert_eq!(read_all(res).await.0, StatusCode::OK);
        loop {
            match next(&mut seen).await {
                Seen::Connection => connections += 1,
                Seen::Head(_) => heads += 1,
                Seen::Closed => break,
            }
        }
        // A look at the kept connection reads the close before the next request is sent.
        let closed = || {
            let mut origins = relay_logging::sync::lock(&client.inner.origins, "test").unwrap();
            origins
                .iter_mut()
                .all(|o| o.conns.iter_mut().all(|k| k.sender.is_closed()))
        };
        assert!(relay_testkit::eventually(WAIT, closed).await);
    }
    let (more_connections, more_heads) = counts(&mut seen);
    assert_eq!((more_connections, more_heads.len()), (0, 0));
    assert_eq!((connections, heads), (3, 3));
}

#[tokio::test]
async fn a_request_on_a_kept_connection_closed_unseen_goes_unwritten_on_a_new_one() {
    let told = Arc::new(Notify::new());
    let (base, mut seen) = provider(Close::WhenTold(told.clone())).await;
    let client = client();
    let uri = format!("{base}/v1/models");
    for round in 1..=3 {
        let res = client.send(get(&uri)).await.unwrap();
        assert_eq!(read_all(res).await, (StatusCode::OK, "ok".into()));
        // The provider closes its end once the connection is kept, and nothing looks at it
        // since: the next request is handed to it, and comes back unwritten.
        told.notify_one();
        answered_once_and_closed(&mut seen).await;
        assert_eq!(
            relay_logging::sync::lock(&client.inner.origins, "test").unwrap()[0]
                .conns
                .len(),
            1,
            "round {round}"
        );
    }
    assert_eq!(counts(&mut seen), (0, Vec::new()));
}

#[tokio::test]
async fn a_response_without_a_body_gives_its_connection_back() {
    let (base, mut seen) =
        provider_answering(b"HTTP/1.1 204 No Content\r\n\r\n", Close::Never).await;
    let client = client();
    for _ in 0..3 {
        let res = client.send(get(&format!("{base}/v1/models"))).await;
        let res = res.unwrap();
        assert_eq!(res.status(), StatusCode::NO_CONTENT);
        // Dropped unread, as hyper's server drops a body that has ended before its start.
        assert!(res.body().is_end_stream());
    }
    let (connections, heads) = counts(&mut seen);
    assert_eq!((connections, heads.len()), (1, 3));
}

#[tokio::test]
async fn a_body_ending_with_trailers_is_complete_and_gives_its_connection_back() {
    let (base, mut seen) = provider_answering(
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nx-checksum: 1\r\n\r\n",
        Close::Never,
    )
    .await;
    /// Records how each tapped body ended.
    struct Ends(Arc<std::sync::Mutex<Vec<BodyEnd>>>);
    impl BodyTap for Ends {
        fn data(&mut self, _chunk: &Bytes) {}
        fn end(self: Box<Self>, end: BodyEnd) {
            relay_logging::sync::lock(&self.0, "test")
                .unwrap()
                .push(end);
        }
    }
    let ends = Arc::new(std::sync::Mutex::new(Vec::new()));
    let client = client();
    for _ in 0..3 {
        let res = client
            .send(get(&format!("{base}/v1/models")))
            .await
            .unwrap();
        let mut body = ResponseBody::forward(res.into_body(), WAIT, None);
        body.set_tap(Box::new(Ends(ends.clone())));
        // Read as hyper's server reads: the trailers are the last frame, and the body is
        // dropped without being polled again.
        loop {
            let frame = body.frame().await.unwrap().unwrap();
            if frame.is_trailers() {
                break;
            }
        }
        drop(body);
    }
    let (connections, heads) = counts(&mut seen);
    assert_eq!((connections, heads.len()), (1, 3));
    // The tap saw whole bodies, not bodies dropped before their end.
    assert_eq!(
        *relay_logging::sync::lock(&ends, "test").unwrap(),
        [BodyEnd::Complete; 3]
    );
}

#[tokio::test]
async fn a_body_dropped_before_its_end_closes_its_connection() {
    let (base, mut seen) = provider_answering(
        b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\nonly the start",
        Close::Never,
    )
    .await;
    let client = client();
    let uri = format!("{base}/v1/models");
    let mut res = client.send(get(&uri)).await.unwrap();
    let first = res.body_mut().frame().await.unwrap().unwrap();
    assert_eq!(first.into_data().unwrap(), "only the start");
    drop(res);
    answered_once_and_closed(&mut seen).await;
    assert!(
        relay_logging::sync::lock(&client.inner.origins, "test")
            .unwrap()
            .iter()
            .all(|o| o.conns.is_empty())
    );
    // The next request gets a new connection.
    let res = client.send(get(&uri)).await.unwrap();
    drop(res);
    assert!(matches!(next(&mut seen).await, Seen::Connection));
}

#[tokio::test]
async fn past_its_budget_a_request_opens_no_connection_until_one_closes() {
    let (base, mut seen) = provider_answering(
        b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\nonly the start",
        Close::Never,
    )
    .await;
    let client = client_of(UpstreamOptions {
        max_connections: 2,
        ..options()
    });
    let uri = format!("{base}/v1/models");
    // Two answers being read hold their connections.
    let mut held: Vec<_> = futures_util::future::join_all((0..2).map(|_| client.send(get(&uri))))
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let refused = client.send(get(&uri)).await.unwrap_err();
    assert!(matches!(refused, UpstreamError::NoRoom), "{refused:?}");
    assert_eq!(refused.reason(), "too_many_provider_connections");
    let (connections, heads) = counts(&mut seen);
    assert_eq!((connections, heads.len()), (2, 2));
    // An answer dropped before its end closes its connection, which gives its room back.
    drop(held.pop());
    let res = client.send(get(&uri)).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let (connections, _) = counts(&mut seen);
    assert_eq!(connections, 1);
}

/// Idle connections keep their room in the budget, but not against a request that needs one:
/// the one used longest ago, of any origin, is closed for it.
#[tokio::test]
async fn past_its_budget_a_request_to_another_origin_takes_the_room_of_an_idle_connection() {
    let (first, mut first_seen) = provider(Close::Never).await;
    let (second, mut second_seen) = provider(Close::Never).await;
    let client = client_of(UpstreamOptions {
        max_connections: 2,
        ..options()
    });
    let uri = format!("{first}/v1/models");
    let answers = futures_util::future::join_all((0..2).map(|_| client.send(get(&uri)))).await;
    for answer in answers {
        assert_eq!(read_all(answer.unwrap()).await.0, StatusCode::OK);
    }
    assert_eq!(counts(&mut first_seen).0, 2);
    // Both are idle in the pool, holding the whole budget.
    let res = client
        .send(get(&format!("{second}/v1/models")))
        .await
        .unwrap();
    assert_eq!(read_all(res).await.0, StatusCode::OK);
    assert_eq!(counts(&mut second_seen).0, 1);
    assert!(matches!(next(&mut first_seen).await, Seen::Closed));
}

#[tokio::test]
async fn idle_connections_are_closed_by_the_sweep_and_busy_ones_are_not() {
    let (base, mut seen) = provider(Close::Never).await;
    let client = client();
    let res = client
        .send(get(&format!("{base}/v1/models")))
        .await
        .unwrap();
    read_all(res).await;
    let (connections, _) = counts(&mut seen);
    assert_eq!(connections, 1);
    // Not idle long enough: kept, and still open.
    client.inner.sweep(Instant::now());
    {
        let mut origins = relay_logging::sync::lock(&client.inner.origins, "test").unwrap();
        assert_eq!(origins.len(), 1);
        assert_eq!(origins[0].conns.len(), 1);
        assert!(!origins[0].conns[0].sender.is_closed());
    }
    assert!(seen.try_recv().is_err());
    // Idle past the limit: closed.
    client.inner.sweep(Instant::now() + POOL_IDLE);
    assert!(matches!(next(&mut seen).await, Seen::Closed));
    assert!(
        relay_logging::sync::lock(&client.inner.origins, "test")
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn an_unreachable_provider_is_a_connect_failure() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let error = client()
        .send(get(&format!("http://{addr}/v1/models")))
        .await
        .unwrap_err();
    assert_eq!(error.reason(), "connect_failed", "{error:?}");
}

/// A provider, or an egress proxy, that accepts the TCP connection and then says nothing:
/// the TLS handshake or the `CONNECT` never ends, and the connect timeout ends the wait.
#[tokio::test(start_paused = true)]
async fn a_peer_that_accepts_and_never_speaks_is_a_connect_timeout() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let _held = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let proxied = client_of(UpstreamOptions {
        proxy_url: Some(format!("http://{addr}")),
        ..options()
    });
    for (client, uri) in [
        (client(), format!("https://{addr}/v1/models")),
        (proxied, "https://provider.invalid/v1/models".to_owned()),
    ] {
        let error = tokio::time::timeout(Duration::from_secs(60), client.send(get(&uri)))
            .await
            .unwrap_or_else(|_| panic!("{uri}: still connecting after a minute"))
            .unwrap_err();
        assert_eq!(error.reason(), "connect_timeout", "{uri}: {error:?}");
    }
}

#[test]
fn the_host_value_names_the_port_only_when_it_is_not_the_default() {
    let host = |scheme: &str, authority: &str| {
        let scheme: Scheme = scheme.parse().unwrap();
        let authority: Authority = authority.parse().unwrap();
        host_value(&scheme, &authority).unwrap()
    };
    assert_eq!(host("http", "api.example:80"), "api.example");
    assert_eq!(host("https", "api.example:443"), "api.example");
    assert_eq!(host("https", "api.example"), "api.example");
    assert_eq!(host("https", "api.example:80"), "api.example:80");
    assert_eq!(host("http", "127.0.0.1:8080"), "127.0.0.1:8080");
    assert_eq!(host("https", "[::1]:8443"), "[::1]:8443");
}

/// A TLS listener for `localhost` that offers HTTP/2 by ALPN, its base URL, and the roots
/// that trust it.
async fn h2_listener() -> (
    TcpListener,
    tokio_rustls::TlsAcceptor,
    String,
    rustls::RootCertStore,
) {
    let (listener, config, base, roots) = tls_listener().await;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    (listener, acceptor, base, roots)
}

/// A TLS listener for `localhost`, the server configuration to accept with (HTTP/2 and
/// HTTP/1.1 offered by ALPN), its base URL, and the roots that trust it.
async fn tls_listener() -> (
    TcpListener,
    rustls::ServerConfig,
    String,
    rustls::RootCertStore,
) {
    let generated = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert, generated.cert.pem()).unwrap();
    std::fs::write(&key, generated.signing_key.serialize_pem()).unwrap();
    let server = crate::tls::ServedCertificate::from_files(&cert, &key, "localhost")
        .unwrap()
        .server_config()
        .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(generated.cert.der().clone()).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!(
        "https://localhost:{}",
        listener.local_addr().unwrap().port()
    );
    (listener, server, base, roots)
}

/// An HTTPS provider that chooses HTTP/2 by ALPN and hands each connection, with its index
/// from 0, to `serve`. Returns its base URL, the roots that trust it, and the connections
/// it took.
async fn h2_serving<F, Fut>(serve: F) -> (String, rustls::RootCertStore, Arc<AtomicUsize>)
where
    F: Fn(usize, tokio_rustls::server::TlsStream<tokio::net::TcpStream>) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let (listener, acceptor, base, roots) = h2_listener().await;
    let connections = Arc::new(AtomicUsize::new(0));
    tokio::spawn({
        let connections = connections.clone();
        async move {
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                let index = connections.fetch_add(1, Ordering::SeqCst);
                let tls = acceptor.accept(tcp).await.unwrap();
                assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
                tokio::spawn(serve(index, tls));
            }
        }
    });
    (base, roots, connections)
}

/// An HTTPS provider over HTTP/2 (hyper's server) that allows `streams` open at once on a
/// connection (hyper's default when `None`) and answers each request with `answer`.
async fn h2_provider_answering<B>(
    streams: Option<u32>,
    answer: fn(Request<Incoming>) -> Response<B>,
) -> (String, rustls::RootCertStore, Arc<AtomicUsize>)
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    h2_serving(move |_, tls| async move {
        let service = hyper::service::service_fn(move |req| async move {
            Ok::<_, std::convert::Infallible>(answer(req))
        });
        let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
            .max_concurrent_streams(streams)
            .serve_connection(TokioIo::new(tls), service)
            .await;
    })
    .await
}

#[tokio::test]
async fn an_https_provider_that_chooses_http2_shares_one_connection() {
    // Answers with the version and authority it saw.
    let (base, roots, connections) = h2_provider_answering(None, |req| {
        let seen = format!(
            "{:?} {} {}",
            req.version(),
            req.uri().authority().map_or("", |a| a.as_str()),
            req.uri().path()
        );
        Response::new(Full::new(Bytes::from(seen)))
    })
    .await;
    let client = trusting(roots);
    let uri = format!("{base}/v1/messages");
    let first = client.send(get(&uri)).await.unwrap();
    assert_eq!(first.version(), Version::HTTP_2);
    let answers = futures_util::future::join_all((0..3).map(|_| client.send(get(&uri)))).await;
    let mut bodies = vec![read_all(first).await];
    for answer in answers {
        bodies.push(read_all(answer.unwrap()).await);
    }
    let port = base.rsplit(':').next().unwrap();
    for (status, body) in bodies {
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body, format!("HTTP/2.0 localhost:{port} /v1/messages"));
    }
    assert_eq!(connections.load(Ordering::SeqCst), 1);
}

type Answer = Result<Response<UpstreamBody>, UpstreamError>;

/// Every request answered `200` within [`WAIT`]: none waited for another's answer.
async fn all_answered<F: Future<Output = Answer>>(requests: impl IntoIterator<Item = F>) {
    let answers = tokio::time::timeout(WAIT, futures_util::future::join_all(requests))
        .await
        .expect("a request waited for another's answer");
    for answer in answers {
        assert_eq!(answer.unwrap().status(), StatusCode::OK);
    }
}

#[tokio::test]
async fn requests_at_once_to_a_new_http2_provider_share_the_one_connection_opened() {
    let (base, roots, connections) = h2_provider_answering(None, |_| {
        Response::new(Full::new(Bytes::from_static(b"ok")))
    })
    .await;
    let client = trusting(roots);
    let uri = format!("{base}/v1/messages");
    let answers = futures_util::future::join_all((0..20).map(|_| client.send(get(&uri)))).await;
    for answer in answers {
        assert_eq!(
            read_all(answer.unwrap()).await,
            (StatusCode::OK, Bytes::from_static(b"ok"))
        );
    }
    assert_eq!(connections.load(Ordering::SeqCst), 1);
}

/// Requests at once to a new provider that allows fewer streams than they are, each in a
/// task of its own: every one is answered, none waits for another's answer, and the first
/// connection carries no more streams than the provider's settings allow.
async fn a_burst_past_a_new_providers_stream_limit(limit: u32, requests: usize) {
    let (base, roots, connections) = limited_h2_provider(limit).await;
    let client = trusting(roots);
    let uri = format!("{base}/hold");
    let tasks: Vec<_> = (0..requests)
        .map(|_| {
            let (client, uri) = (client.clone(), uri.clone());
            tokio::spawn(async move { tokio::time::timeout(WAIT, client.send(get(&uri))).await })
        })
        .collect();
    let mut held = Vec::new();
    for task in tasks {
        let answered = task
            .await
            .unwrap()
            .expect("a request waited for another's answer");
        held.push(answered.expect("a request failed"));
    }
    let needed = requests.div_ceil(limit as usize);
    assert_eq!(connections.load(Ordering::SeqCst), needed);
}

#[tokio::test]
async fn a_burst_past_a_new_providers_stream_limit_is_answered() {
    a_burst_past_a_new_providers_stream_limit(1, 5).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_past_a_new_providers_stream_limit_is_answered_on_two_threads() {
    a_burst_past_a_new_providers_stream_limit(2, 8).await;
}

#[tokio::test]
async fn a_burst_past_a_hundred_streams_opens_a_connection_per_hundred() {
    // The provider would allow 200: relayd's own bound of 100 per connection holds.
    let (base, roots, connections) = limited_h2_provider(200).await;
    let client = trusting(roots);
    let uri = format!("{base}/hold");
    all_answered((0..250).map(|_| client.send(get(&uri)))).await;
    assert_eq!(connections.load(Ordering::SeqCst), 3);
}

/// An HTTPS provider that offers only HTTP/1.1 by ALPN on its first `http1_first`
/// connections, and HTTP/2 as well on the later ones. It answers `/hold` with a body that
/// never ends, as a long stream does, and anything else with `ok`. Returns its base URL,
/// the roots that trust it, and the connections it took.
async fn provider_choosing_http1_first(
    http1_first: usize,
) -> (String, rustls::RootCertStore, Arc<AtomicUsize>) {
    let (listener, config, base, roots) = tls_listener().await;
    let mut http1_only = config.clone();
    http1_only.alpn_protocols = vec![b"http/1.1".to_vec()];
    let (http1, both) = (Arc::new(http1_only), Arc::new(config));
    let connections = Arc::new(AtomicUsize::new(0));
    tokio::spawn({
        let connections = connections.clone();
        async move {
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                let index = connections.fetch_add(1, Ordering::SeqCst);
                let config = if index < http1_first { &http1 } else { &both };
                let tls = tokio_rustls::TlsAcceptor::from(config.clone())
                    .accept(tcp)
                    .await
                    .unwrap();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(|req: Request<Incoming>| async move {
                        let body = if req.uri().path() == "/hold" {
                            let never = futures_util::stream::pending::<
                                Result<Frame<Bytes>, std::convert::Infallible>,
                            >();
                            http_body_util::Either::Left(http_body_util::StreamBody::new(never))
                        } else {
                            http_body_util::Either::Right(Full::new(Bytes::from_static(b"ok")))
                        };
                        Ok::<_, std::convert::Infallible>(Response::new(body))
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        }
    });
    (base, roots, connections)
}

#[tokio::test]
async fn requests_at_once_to_an_https_provider_that_chose_http1_get_a_connection_each() {
    // A request that waited for another's answer rather than for its connection would
    // never be answered: `/hold` never ends.
    let (base, roots, connections) = provider_choosing_http1_first(usize::MAX).await;
    let client = trusting(roots);
    let (first, second, (), ()) = tokio::join!(
        client.send(get(&format!("{base}/hold"))),
        client.send(get(&format!("{base}/hold"))),
        quick(&client, &base),
        quick(&client, &base),
    );
    let (first, second) = (first.unwrap(), second.unwrap());
    assert_eq!(first.version(), Version::HTTP_11);
    assert_eq!(connections.load(Ordering::SeqCst), 4);
    drop((first, second));
}

#[tokio::test]
async fn once_a_provider_that_chose_http1_chooses_http2_again_requests_wait_for_one_connection() {
    let (base, roots, connections) = provider_choosing_http1_first(1).await;
    let client = trusting(roots);
    let held = client.send(get(&format!("{base}/hold"))).await.unwrap();
    assert_eq!(held.version(), Version::HTTP_11);
    // With the HTTP/1.1 connection busy, the next request opens the provider's first
    // HTTP/2 connection.
    let first = client.send(get(&format!("{base}/hold"))).await.unwrap();
    assert_eq!(first.version(), Version::HTTP_2);
    // 99 fill it; the 50 past them wait for one more connection.
    let uri = format!("{base}/hold");
    all_answered((0..STREAMS_PER_CONNECTION + 49).map(|_| client.send(get(&uri)))).await;
    assert_eq!(connections.load(Ordering::SeqCst), 3);
    drop((held, first));
}

/// A client with `connect_timeout`, the URL of a peer that accepts TCP connections and
/// never says a word (so a TLS handshake with it never ends), and how many it took.
async fn silent_provider(connect_timeout: Duration) -> (UpstreamClient, String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    tokio::spawn({
        let accepted = accepted.clone();
        async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                accepted.fetch_add(1, Ordering::SeqCst);
                held.push(stream);
            }
        }
    });
    let client = client_of(UpstreamOptions {
        connect_timeout,
        ..options()
    });
    (client, format!("https://{addr}/v1/messages"), accepted)
}

#[tokio::test]
async fn requests_that_waited_for_a_connection_share_its_failure() {
    let (client, uri, accepted) = silent_provider(Duration::from_millis(300)).await;
    let answers = futures_util::future::join_all((0..5).map(|_| client.send(get(&uri)))).await;
    for answer in answers {
        assert_eq!(answer.unwrap_err().reason(), "connect_timeout");
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn when_the_request_opening_a_connection_is_cancelled_one_that_waited_opens_its_own() {
    let (client, uri, accepted) = silent_provider(Duration::from_secs(60)).await;
    let opening = tokio::spawn({
        let (client, uri) = (client.clone(), uri.clone());
        async move { client.send(get(&uri)).await }
    });
    assert!(relay_testkit::eventually(WAIT, || accepted.load(Ordering::SeqCst) == 1).await);
    let mut waiting = Box::pin(client.send(get(&uri)));
    assert!(is_pending(&mut waiting).await);
    assert_eq!(accepted.load(Ordering::SeqCst), 1, "it did not wait");
    opening.abort();
    assert!(opening.await.unwrap_err().is_cancelled());
    tokio::select! {
        answer = &mut waiting => panic!("it ended instead of opening a connection: {answer:?}"),
        opened = relay_testkit::eventually(WAIT, || accepted.load(Ordering::SeqCst) == 2) => {
            assert!(opened);
        }
    }
}

/// An HTTPS provider over HTTP/2 that allows `streams` open at once on a connection. It
/// answers `/hold` with a body that never ends, as a long stream does, and anything else
/// with `ok`.
async fn limited_h2_provider(streams: u32) -> (String, rustls::RootCertStore, Arc<AtomicUsize>) {
    h2_provider_answering(Some(streams), |req| {
        let body = if req.uri().path() == "/hold" {
            let never = futures_util::stream::pending::<
                Result<hyper::body::Frame<Bytes>, std::convert::Infallible>,
            >();
            http_body_util::Either::Left(http_body_util::StreamBody::new(never))
        } else {
            http_body_util::Either::Right(Full::new(Bytes::from_static(b"ok")))
        };
        Response::new(body)
    })
    .await
}

/// Sends a request that [`limited_h2_provider`] answers at once, failing if the answer does
/// not come within [`WAIT`], as when the request waits for a held stream to end.
async fn quick(client: &UpstreamClient, base: &str) {
    let res = tokio::time::timeout(WAIT, client.send(get(&format!("{base}/quick"))))
        .await
        .expect("the request waited for a held stream to end")
        .unwrap();
    assert_eq!(
        read_all(res).await,
        (StatusCode::OK, Bytes::from_static(b"ok"))
    );
}

#[tokio::test]
async fn a_request_past_an_http2_providers_stream_limit_goes_on_another_connection() {
    let (base, roots, connections) = limited_h2_provider(1).await;
    let client = trusting(roots);
    quick(&client, &base).await;
    let held = client.send(get(&format!("{base}/hold"))).await.unwrap();
    quick(&client, &base).await;
    assert_eq!(connections.load(Ordering::SeqCst), 2);
    // Idle past the limit, the connection with a stream open stays and the other goes.
    let kept = || {
        relay_logging::sync::lock(&client.inner.origins, "test")
            .unwrap()
            .iter()
            .map(|o| o.conns.len())
            .sum::<usize>()
    };
    client.inner.sweep(Instant::now() + POOL_IDLE);
    assert_eq!(kept(), 1);
    drop(held);
    client.inner.sweep(Instant::now() + POOL_IDLE);
    assert_eq!(kept(), 0);
}

#[tokio::test]
async fn the_stream_limit_holds_from_a_new_connections_first_stream() {
    // The provider's settings arrive after the first request was placed, and before its
    // answer: the second request must see them.
    let (base, roots, connections) = limited_h2_provider(1).await;
    let client = trusting(roots);
    let held = client.send(get(&format!("{base}/hold"))).await.unwrap();
    quick(&client, &base).await;
    assert_eq!(connections.load(Ordering::SeqCst), 2);
    drop(held);
}

#[tokio::test]
async fn requests_sent_together_past_the_stream_limit_do_not_wait() {
    let (base, roots, connections) = limited_h2_provider(2).await;
    let client = trusting(roots);
    quick(&client, &base).await;
    let (first, second, ()) = tokio::join!(
        client.send(get(&format!("{base}/hold"))),
        client.send(get(&format!("{base}/hold"))),
        quick(&client, &base),
    );
    assert_eq!(connections.load(Ordering::SeqCst), 2);
    drop((first.unwrap(), second.unwrap()));
}

#[tokio::test]
async fn an_http2_connection_takes_no_more_streams_than_its_window_can_feed() {
    // The provider would take 200; answers nobody reads would each hold a full stream
    // window, and past the connection's window they would stall every other answer on it.
    let (base, roots, connections) = limited_h2_provider(200).await;
    let client = trusting(roots);
    let mut held = Vec::new();
    for _ in 0..STREAMS_PER_CONNECTION {
        held.push(client.send(get(&format!("{base}/hold"))).await.unwrap());
    }
    assert_eq!(connections.load(Ordering::SeqCst), 1);
    quick(&client, &base).await;
    assert_eq!(connections.load(Ordering::SeqCst), 2);
}

/// A TCP relay to `port` on 127.0.0.1. Once `silent` is set, the connections it already
/// carries stop forwarding in both directions and stay open, as over a path that died;
/// connections made after that forward as before.
async fn relay_that_can_go_silent(port: u16, silent: Arc<AtomicBool>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let relay_port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let (inbound, _) = listener.accept().await.unwrap();
            let outbound = tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .unwrap();
            let born_silent = silent.load(Ordering::SeqCst);
            let (from_client, to_client) = inbound.into_split();
            let (from_provider, to_provider) = outbound.into_split();
            for (mut from, mut to) in [
                (
                    Box::new(from_client) as Box<dyn AsyncRead + Unpin + Send>,
                    Box::new(to_provider) as Box<dyn AsyncWrite + Unpin + Send>,
                ),
                (Box::new(from_provider), Box::new(to_client)),
            ] {
                let silent = silent.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0; 16 * 1024];
                    while let Ok(n @ 1..) = from.read(&mut buf).await {
                        if !born_silent && silent.load(Ordering::SeqCst) {
                            std::future::pending::<()>().await;
                        }
                        if to.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        }
    });
    relay_port
}

#[tokio::test]
async fn a_request_on_an_http2_connection_that_went_silent_ends_and_the_next_one_is_answered() {
    let (base, roots, _) = limited_h2_provider(100).await;
    let port = base.rsplit(':').next().unwrap().parse().unwrap();
    let silent = Arc::new(AtomicBool::new(false));
    let base = format!(
        "https://localhost:{}",
        relay_that_can_go_silent(port, silent.clone()).await
    );
    let mut client = trusting(roots);
    Arc::get_mut(&mut client.inner).unwrap().http2_ping_after = Duration::from_millis(100);
    quick(&client, &base).await;
    silent.store(true, Ordering::SeqCst);
    // Without pings it would wait for TCP to give up; with them the connection is found
    // dead and the request fails (or, had the pings found it dead first, goes on a new one).
    let _ = tokio::time::timeout(WAIT, client.send(get(&format!("{base}/quick"))))
        .await
        .expect("a request on a silent connection waited on");
    quick(&client, &base).await;
}

#[tokio::test]
async fn an_http2_connection_the_provider_closed_is_not_used_again() {
    // The provider answers one request on its first connection and then closes it
    // gracefully (GOAWAY); every later connection answers as many as it is sent.
    let (closed, mut first_closed) = mpsc::unbounded_channel();
    let (base, roots, connections) = h2_serving(move |index, tls| {
        let closed = closed.clone();
        async move {
            let mut conn = h2::server::handshake(tls).await.unwrap();
            while let Some(Ok((_, mut respond))) = conn.accept().await {
                let mut stream = respond
                    .send_response(http::Response::new(()), false)
                    .unwrap();
                stream.send_data(Bytes::from_static(b"ok"), true).unwrap();
                if index == 0 {
                    conn.graceful_shutdown();
                }
            }
            if index == 0 {
                closed.send(()).unwrap();
            }
        }
    })
    .await;
    let client = trusting(roots);
    quick(&client, &base).await;
    first_closed.recv().await.unwrap();
    quick(&client, &base).await;
    assert_eq!(connections.load(Ordering::SeqCst), 2);
}

/// Whether an HTTP/2 provider saw its answer's stream reset, when the answer to `method`
/// declares `length` (or nothing), sends `first` (which the client reads), and is then
/// dropped, as hyper's server drops one once it has written the declared length or its
/// client went away.
async fn provider_sees_a_reset(
    method: http::Method,
    length: Option<usize>,
    first: &'static [u8],
) -> Option<h2::Reason> {
    let (listener, acceptor, base, roots) = h2_listener().await;
    let provider = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let tls = acceptor.accept(tcp).await.unwrap();
        let mut conn = h2::server::handshake(tls).await.unwrap();
        let (_, mut respond) = conn.accept().await.unwrap().unwrap();
        let mut head = http::Response::builder();
        if let Some(length) = length {
            head = head.header(http::header::CONTENT_LENGTH, length);
        }
        let mut answer = respond
            .send_response(head.body(()).unwrap(), false)
            .unwrap();
        if !first.is_empty() {
            answer.send_data(Bytes::from_static(first), false).unwrap();
        }
        // The client's next request comes after anything it sent about the first answer,
        // on the same connection, so by now a reset has been read.
        let (_, mut next) = conn.accept().await.unwrap().unwrap();
        let reset = match answer.poll_reset(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(reason) => Some(reason.unwrap()),
            Poll::Pending => None,
        };
        // The end of the first stream, in a frame of its own.
        let _ = answer.send_data(Bytes::new(), true);
        next.send_response(http::Response::new(()), true).unwrap();
        tokio::spawn(async move { while conn.accept().await.is_some() {} });
        reset
    });
    let client = trusting(roots);
    let uri = format!("{base}/v1/messages");
    let mut req = get(&uri);
    *req.method_mut() = method;
    let mut body = client.send(req).await.unwrap().into_body();
    if !first.is_empty() {
        let data = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(data, first);
    }
    drop(body);
    let next = client.send(get(&uri)).await.unwrap();
    assert_eq!(next.status(), StatusCode::OK);
    provider.await.unwrap()
}

#[tokio::test]
async fn an_http2_answer_read_to_its_declared_length_is_not_reset_before_its_stream_ends() {
    assert_eq!(
        provider_sees_a_reset(http::Method::GET, Some(5), b"hello").await,
        None
    );
    // An answer to HEAD declares the length of what a GET would get, and has no body.
    assert_eq!(
        provider_sees_a_reset(http::Method::HEAD, Some(5), b"").await,
        None
    );
}

#[tokio::test]
async fn an_http2_answer_dropped_before_its_end_is_cancelled_at_once() {
    // Short of its declared length, or with no length: the client went away.
    assert_eq!(
        provider_sees_a_reset(http::Method::GET, Some(10), b"hello").await,
        Some(h2::Reason::CANCEL)
    );
    assert_eq!(
        provider_sees_a_reset(http::Method::GET, None, b"hello").await,
        Some(h2::Reason::CANCEL)
    );
}

/// How much of an upload an HTTP/2 provider received, or why its stream was reset.
type Received = Result<usize, Option<h2::Reason>>;

/// An HTTP/2 provider (h2's server) that hands each stream to [`count_upload`].
async fn h2_provider_counting_uploads(
    early: bool,
) -> (
    String,
    rustls::RootCertStore,
    mpsc::UnboundedReceiver<Received>,
) {
    let (received, seen) = mpsc::unbounded_channel();
    let (base, roots, _) = h2_serving(move |_, tls| {
        let received = received.clone();
        async move {
            let mut conn = h2::server::handshake(tls).await.unwrap();
            while let Some(Ok((req, respond))) = conn.accept().await {
                tokio::spawn(count_upload(req, respond, early, received.clone()));
            }
        }
    })
    .await;
    (base, roots, seen)
}

/// An HTTP/2 provider's handling of one stream (h2's server): reads its upload to the end,
/// giving the window back, reports how much arrived or why the stream was reset, and
/// answers with the count, its head sent first if `early`.
async fn count_upload(
    req: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    early: bool,
    received: mpsc::UnboundedSender<Received>,
) {
    let mut answer = early.then(|| respond.send_response(Response::new(()), false).unwrap());
    let mut body = req.into_body();
    let mut count = 0;
    let got = loop {
        match body.data().await {
            Some(Ok(data)) => {
                count += data.len();
                body.flow_control().release_capacity(data.len()).unwrap();
            }
            Some(Err(error)) => break Err(error.reason()),
            None => break Ok(count),
        }
    };
    received.send(got).unwrap();
    if got.is_ok() {
        let mut answer = answer
            .take()
            .unwrap_or_else(|| respond.send_response(Response::new(()), false).unwrap());
        answer
            .send_data(Bytes::from(count.to_string()), true)
            .unwrap();
    }
}

/// Checks that an upload of `size` bytes arrived whole: the provider reported `size` bytes
/// on `seen` ([`count_upload`]), and answered with that count.
async fn arrived_whole(
    res: Response<UpstreamBody>,
    seen: &mut mpsc::UnboundedReceiver<Received>,
    size: usize,
) {
    assert_eq!(
        read_all(res).await,
        (StatusCode::OK, Bytes::from(size.to_string()))
    );
    assert_eq!(seen.recv().await.unwrap(), Ok(size));
}

fn post(uri: &str, body: RequestBody) -> Request<RequestBody> {
    let mut req = Request::new(body);
    *req.method_mut() = http::Method::POST;
    *req.uri_mut() = uri.parse().unwrap();
    req
}

fn chunk(bytes: usize) -> crate::body::tests::Chunk {
    Ok(hyper::body::Frame::data(Bytes::from(vec![b'x'; bytes])))
}

#[tokio::test]
async fn a_body_larger_than_the_stream_window_reaches_an_http2_provider_whole() {
    let (base, roots, mut seen) = h2_provider_counting_uploads(false).await;
    let client = trusting(roots);
    let body = RequestBody::full(Bytes::from(vec![b'x'; 300_000]));
    let res = client
        .send(post(&format!("{base}/v1/messages"), body))
        .await;
    arrived_whole(res.unwrap(), &mut seen, 300_000).await;
}

#[tokio::test]
async fn an_upload_goes_on_up_its_http2_stream_after_an_early_answer_head() {
    let (base, roots, mut seen) = h2_provider_counting_uploads(true).await;
    let client = trusting(roots);
    let upload = crate::body::tests::upload().await;
    let body = streamed(upload.incoming, 1 << 20, WAIT);
    upload.chunks.send(chunk(40_000)).await.unwrap();
    let res = client
        .send(post(&format!("{base}/v1/messages"), body))
        .await
        .unwrap();
    // The rest, well past the stream's window, once the answer's head is in.
    for _ in 0..4 {
        upload.chunks.send(chunk(40_000)).await.unwrap();
    }
    drop(upload.chunks);
    arrived_whole(res, &mut seen, 200_000).await;
}

/// Over HTTP/2 as over HTTP/1.1, the provider's time to answer leaves out the time spent
/// waiting for the client's upload: an upload slower than that time is answered, a provider
/// that has it all and says nothing is cut that long after the upload's end, and one that
/// takes none of a body the client has sent is cut that long after the request.
#[tokio::test]
async fn over_http2_the_response_head_timeout_leaves_out_the_wait_for_the_client() {
    let timed = |limit, roots| {
        let options = UpstreamOptions {
            response_timeout: Some(limit),
            ..options()
        };
        UpstreamClient::with_tls(&options, client_tls(roots))
    };
    // A POST whose body comes in five chunks `every` apart, four times that in all: its
    // answer, and when the body ended.
    let slow_post = |base: String, roots, limit, every| async move {
        let client = timed(limit, roots);
        let upload = crate::body::tests::upload().await;
        let body = streamed(upload.incoming, 1 << 20, WAIT);
        let chunks = upload.chunks;
        let slowly = async move {
            let mut every = tokio::time::interval(every);
            for _ in 0..5 {
                every.tick().await;
                chunks.send(chunk(1000)).await.unwrap();
            }
            drop(chunks);
            Instant::now()
        };
        tokio::join!(
            client.send(post(&format!("{base}/v1/messages"), body)),
            slowly
        )
    };

    // The upload takes at least 1.2 s, past a 1 s limit. The provider answers as soon as the
    // upload has ended, and its answer then has the whole second to arrive.
    let (base, roots, mut seen) = h2_provider_counting_uploads(false).await;
    let (res, _) = slow_post(
        base,
        roots,
        Duration::from_secs(1),
        Duration::from_millis(300),
    )
    .await;
    arrived_whole(res.unwrap(), &mut seen, 5000).await;

    // Below, only waits of at least the limit are asserted: it can be short.
    let limit = Duration::from_millis(200);
    let (base, roots, _) = h2_serving(|_, tls| async move {
        let mut conn = h2::server::handshake(tls).await.unwrap();
        while let Some(Ok((req, respond))) = conn.accept().await {
            tokio::spawn(async move {
                let mut body = req.into_body();
                while let Some(Ok(data)) = body.data().await {
                    let _ = body.flow_control().release_capacity(data.len());
                }
                // It has the whole request, and never answers.
                std::future::pending::<()>().await;
                drop(respond);
            });
        }
    })
    .await;
    let (res, ended) = slow_post(base, roots, limit, Duration::from_millis(100)).await;
    assert!(
        matches!(res, Err(UpstreamError::ResponseHeadTimeout)),
        "{res:?}"
    );
    let after = ended.elapsed();
    assert!(after >= limit - Duration::from_millis(50), "{after:?}");

    // A provider that opens no window for the body: the upload waits on it, not on the
    // client, whose whole body is there.
    let (base, roots, _) = h2_serving(|_, tls| async move {
        let mut conn = h2::server::Builder::new()
            .initial_window_size(0)
            .handshake::<_, Bytes>(tls)
            .await
            .unwrap();
        let mut held = Vec::new();
        while let Some(Ok(stream)) = conn.accept().await {
            held.push(stream);
        }
    })
    .await;
    let client = timed(limit, roots);
    let upload = crate::body::tests::upload().await;
    let body = streamed(upload.incoming, 1 << 20, WAIT);
    upload.chunks.send(chunk(1000)).await.unwrap();
    drop(upload.chunks);
    let started = Instant::now();
    let res = tokio::time::timeout(
        WAIT,
        client.send(post(&format!("{base}/v1/messages"), body)),
    )
    .await
    .unwrap();
    assert!(
        matches!(res, Err(UpstreamError::ResponseHeadTimeout)),
        "{res:?}"
    );
    let took = started.elapsed();
    assert!(
        took >= limit - Duration::from_millis(50) && took < WAIT,
        "{took:?}"
    );
}

#[tokio::test]
async fn an_upload_over_its_limit_fails_and_its_http2_stream_is_cancelled() {
    let (base, roots, mut seen) = h2_provider_counting_uploads(false).await;
    let client = trusting(roots);
    let upload = crate::body::tests::upload().await;
    let body = streamed(upload.incoming, 10, WAIT);
    crate::body::tests::send(&upload.chunks, b"0123456789abcdef").await;
    let failed = client
        .send(post(&format!("{base}/v1/messages"), body))
        .await;
    assert!(
        matches!(failed, Err(UpstreamError::BodyTooLarge { limit: 10 })),
        "{failed:?}"
    );
    assert_eq!(seen.recv().await.unwrap(), Err(Some(h2::Reason::CANCEL)));
}

/// The streams counted open on each kept HTTP/2 connection.
fn streams_open(client: &UpstreamClient) -> Vec<usize> {
    let origins = relay_logging::sync::lock(&client.inner.origins, "test").unwrap();
    origins
        .iter()
        .flat_map(|o| o.conns.iter())
        .filter_map(|kept| match &kept.sender {
            Sender::Http2(shared) => Some(shared.streams.load(Ordering::SeqCst)),
            Sender::Http1(_) => None,
        })
        .collect()
}

/// An HTTP/2 provider (h2's server) that answers each request at once with `first ` and
/// then `rest` chunks of 16 KiB as its body, each once the client has room for it. It reads
/// the upload without ever giving back window, so the upload stalls once it has filled the
/// stream's window, which it reports on `stalled`, and it never resets the stream. Reports
/// on `reports`, for each stream, how many of the `rest` chunks it sent and whether it saw
/// the stream reset, once either ends it.
async fn h2_provider_ignoring_uploads(
    rest: usize,
) -> (
    String,
    rustls::RootCertStore,
    mpsc::UnboundedReceiver<(usize, Option<h2::Reason>)>,
    mpsc::UnboundedReceiver<()>,
) {
    const CHUNK: usize = 16 * 1024;
    let (report, reports) = mpsc::unbounded_channel();
    let (stall, stalled) = mpsc::unbounded_channel();
    let (base, roots, _) = h2_serving(move |_, tls| {
        let (report, stall) = (report.clone(), stall.clone());
        async move {
            let mut conn = h2::server::handshake(tls).await.unwrap();
            while let Some(Ok((req, mut respond))) = conn.accept().await {
                let (report, stall) = (report.clone(), stall.clone());
                let mut upload = req.into_body();
                tokio::spawn(async move {
                    let mut received = 0;
                    while let Some(Ok(data)) = upload.data().await {
                        received += data.len();
                        if received == usize::from(u16::MAX) {
                            stall.send(()).unwrap();
                        }
                    }
                });
                tokio::spawn(async move {
                    let mut answer = respond.send_response(Response::new(()), false).unwrap();
                    answer
                        .send_data(Bytes::from_static(b"first "), rest == 0)
                        .unwrap();
                    for sent in 0..rest {
                        // Each chunk once the last one was taken, or the stream reset.
                        answer.reserve_capacity(CHUNK);
                        let room = std::future::poll_fn(|cx| {
                            if let Poll::Ready(reason) = answer.poll_reset(cx) {
                                return Poll::Ready(Err(reason.ok()));
                            }
                            answer.poll_capacity(cx).map(|c| Ok(c.is_some()))
                        });
                        match room.await {
                            Ok(true) => {}
                            Ok(false) => return report.send((sent, None)).unwrap(),
                            Err(reason) => return report.send((sent, reason)).unwrap(),
                        }
                        let last = sent + 1 == rest;
                        let chunk = Bytes::from_static(&[b'x'; CHUNK]);
                        answer.send_data(chunk, last).unwrap();
                    }
                    let reset = std::future::poll_fn(|cx| answer.poll_reset(cx)).await.ok();
                    report.send((rest, reset)).unwrap();
                });
            }
        }
    })
    .await;
    (base, roots, reports, stalled)
}

/// A request sent with an upload that outgrows the provider's window, which
/// [`h2_provider_ignoring_uploads`] never gives back.
struct Uploading {
    res: Response<UpstreamBody>,
    /// Whether the client's body is still being read.
    watch: Upload,
    /// Where the client's connection runs: dropping them cuts it.
    tasks: tokio::task::JoinSet<()>,
    _chunks: mpsc::Sender<crate::body::tests::Chunk>,
}

async fn send_upload_past_the_window(client: &UpstreamClient, base: &str) -> Uploading {
    let crate::body::tests::Upload {
        incoming,
        chunks,
        tasks,
    } = crate::body::tests::upload().await;
    let body = streamed(incoming, 1 << 20, WAIT);
    let watch = body.upload().unwrap();
    chunks.send(chunk(40_000)).await.unwrap();
    let res = client
        .send(post(&format!("{base}/v1/messages"), body))
        .await
        .unwrap();
    chunks.send(chunk(40_000)).await.unwrap();
    Uploading {
        res,
        watch,
        tasks,
        _chunks: chunks,
    }
}

#[tokio::test]
async fn an_upload_left_running_ends_with_its_answer_and_frees_its_stream() {
    let (base, roots, mut reports, _) = h2_provider_ignoring_uploads(0).await;
    let client = trusting(roots);
    let uploading = send_upload_past_the_window(&client, &base).await;
    assert_eq!(
        read_all(uploading.res).await,
        (StatusCode::OK, Bytes::from_static(b"first "))
    );
    // The answer is whole: what the provider does not read of the upload is cut.
    let report = tokio::time::timeout(WAIT, reports.recv()).await;
    assert_eq!(report.unwrap().unwrap(), (0, Some(h2::Reason::CANCEL)));
    let freed = relay_testkit::eventually(WAIT, || {
        streams_open(&client) == [0] && uploading.watch.is_over()
    });
    assert!(freed.await, "streams open: {:?}", streams_open(&client));
}

#[tokio::test]
async fn an_answer_dropped_while_its_upload_runs_alone_is_cancelled() {
    let (base, roots, mut reports, mut stalled) = h2_provider_ignoring_uploads(1_000).await;
    let client = trusting(roots);
    let uploading = send_upload_past_the_window(&client, &base).await;
    // Stalled, the upload reads no more of the client's body, so it cannot see the client
    // go away.
    let stall = tokio::time::timeout(WAIT, stalled.recv()).await;
    stall.expect("the upload never filled the window").unwrap();
    let mut body = uploading.res.into_body();
    body.frame().await.unwrap().unwrap();
    // The client went away, and its connection with it.
    drop(body);
    drop(uploading.tasks);
    let report = tokio::time::timeout(WAIT, reports.recv()).await;
    let (sent, reset) = report.expect("the provider went on streaming").unwrap();
    assert_eq!(reset, Some(h2::Reason::CANCEL));
    assert!(sent < 1_000);
}

/// The body of a request read by hyper's HTTP/1.1 server from `raw`, as the front gets
/// one, and the tasks that run its connection.
async fn incoming_of(raw: &'static [u8]) -> (Incoming, tokio::task::JoinSet<()>) {
    let (mut client_io, server_io) = tokio::io::duplex(64 * 1024);
    let (tx, rx) = tokio::sync::oneshot::channel();
    let tx = std::sync::Mutex::new(Some(tx));
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(async move {
        let service = hyper::service::service_fn(move |req: Request<Incoming>| {
            if let Some(tx) = relay_logging::sync::lock(&tx, "test").unwrap().take() {
                let _ = tx.send(req.into_body());
            }
            std::future::pending::<Result<Response<Full<Bytes>>, std::convert::Infallible>>()
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(server_io), service)
            .await;
    });
    tasks.spawn(async move {
        client_io.write_all(raw).await.unwrap();
        std::future::pending::<()>().await;
    });
    (rx.await.unwrap(), tasks)
}

#[tokio::test]
async fn an_http2_provider_is_told_the_length_of_a_body_whose_length_is_known() {
    let (base, roots, _) = h2_provider_answering(None, |req| {
        let length = req
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .map_or("none".to_owned(), |v| v.to_str().unwrap().to_owned());
        Response::new(Full::new(Bytes::from(length)))
    })
    .await;
    let client = trusting(roots);
    let uri = format!("{base}/v1/messages");
    let full = RequestBody::full(Bytes::from_static(b"hello"));
    let res = client.send(post(&uri, full)).await.unwrap();
    assert_eq!(read_all(res).await.1, "5");
    let (incoming, _tasks) =
        incoming_of(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\nhello")
            .await;
    let sized = streamed(incoming, 1 << 20, WAIT);
    let res = client.send(post(&uri, sized)).await.unwrap();
    assert_eq!(read_all(res).await.1, "5");
    // Neither a GET without a body, nor a chunked upload.
    let res = client.send(get(&uri)).await.unwrap();
    assert_eq!(read_all(res).await.1, "none");
    let (incoming, _tasks) = incoming_of(
        b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    )
    .await;
    let chunked = streamed(incoming, 1 << 20, WAIT);
    let res = client.send(post(&uri, chunked)).await.unwrap();
    assert_eq!(read_all(res).await.1, "none");
}

#[tokio::test]
async fn request_trailers_reach_an_http2_provider_without_hop_by_hop_names() {
    let (base, roots, _) = h2_serving(|_, tls| async move {
        let mut conn = h2::server::handshake(tls).await.unwrap();
        while let Some(Ok((req, mut respond))) = conn.accept().await {
            tokio::spawn(async move {
                let mut body = req.into_body();
                while let Some(Ok(_)) = body.data().await {}
                let trailers = std::future::poll_fn(|cx| body.poll_trailers(cx)).await;
                let names = trailers.unwrap().unwrap_or_default();
                let mut names: Vec<_> = names.keys().map(|n| n.as_str().to_owned()).collect();
                names.sort();
                let mut answer = respond.send_response(Response::new(()), false).unwrap();
                answer
                    .send_data(Bytes::from(names.join(",")), true)
                    .unwrap();
            });
        }
    })
    .await;
    let client = trusting(roots);
    let (incoming, _tasks) = incoming_of(
        b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nkeep-alive: timeout=5\r\nx-checksum: abc\r\n\r\n",
    )
    .await;
    let body = streamed(incoming, 1 << 20, WAIT);
    let sent = client.send(post(&format!("{base}/v1/messages"), body));
    let res = tokio::time::timeout(WAIT, sent)
        .await
        .expect("the provider never saw the upload end")
        .unwrap();
    assert_eq!(read_all(res).await.1, "x-checksum");
}

#[tokio::test]
async fn trailers_from_an_http2_provider_end_the_body() {
    let (base, roots, _) = h2_serving(|_, tls| async move {
        let mut conn = h2::server::handshake(tls).await.unwrap();
        while let Some(Ok((_, mut respond))) = conn.accept().await {
            let mut answer = respond.send_response(Response::new(()), false).unwrap();
            answer
                .send_data(Bytes::from_static(b"data"), false)
                .unwrap();
            let mut trailers = http::HeaderMap::new();
            trailers.insert("x-checksum", HeaderValue::from_static("abc"));
            answer.send_trailers(trailers).unwrap();
        }
    })
    .await;
    let client = trusting(roots);
    let res = client
        .send(get(&format!("{base}/v1/messages")))
        .await
        .unwrap();
    let mut body = res.into_body();
    let collected = (&mut body).collect().await.unwrap();
    assert_eq!(collected.trailers().unwrap()["x-checksum"], "abc");
    assert_eq!(collected.to_bytes(), "data");
    assert!(body.is_end_stream());
}

#[test]
fn a_failure_reason_read_back_is_the_same_static_code() {
    let failures = [
        UpstreamError::ConnectTimeout,
        UpstreamError::Unreachable("x".into()),
        UpstreamError::ResponseHeadTimeout,
        UpstreamError::Failed("x".into()),
    ];
    for failure in failures {
        let reason = failure.reason();
        assert_eq!(UpstreamError::failure_reason(reason.as_bytes()), reason);
    }
    assert_eq!(UpstreamError::failure_reason(b"made-up"), "upstream_failed");
}

/// An HTTP/2 provider (h2's server) whose first stream is reset with `refuse`: the rest,
/// on that connection and others, go to [`count_upload`].
async fn h2_provider_refusing_once(
    refuse: h2::Reason,
) -> (
    String,
    rustls::RootCertStore,
    mpsc::UnboundedReceiver<Received>,
    Arc<AtomicUsize>,
) {
    let (received, seen) = mpsc::unbounded_channel();
    let refused = Arc::new(AtomicBool::new(false));
    let (base, roots, connections) = h2_serving(move |_, tls| {
        let (received, refused) = (received.clone(), refused.clone());
        async move {
            let mut conn = h2::server::handshake(tls).await.unwrap();
            while let Some(Ok((req, mut respond))) = conn.accept().await {
                if !refused.swap(true, Ordering::SeqCst) {
                    respond.send_reset(refuse);
                    continue;
                }
                tokio::spawn(count_upload(req, respond, false, received.clone()));
            }
        }
    })
    .await;
    (base, roots, seen, connections)
}

#[tokio::test]
async fn a_request_refused_unprocessed_is_sent_again_whole() {
    let (base, roots, mut seen, _) = h2_provider_refusing_once(h2::Reason::REFUSED_STREAM).await;
    let client = trusting(roots);
    // More than the stream's window, so part of it was sent on the refused stream, and the
    // rest still arrives from the client while the request is refused and sent again.
    let crate::body::tests::Upload {
        incoming,
        chunks,
        tasks: _tasks,
    } = crate::body::tests::upload().await;
    let body = streamed(incoming, 1 << 20, WAIT);
    chunks.send(chunk(50_000)).await.unwrap();
    chunks.send(chunk(50_000)).await.unwrap();
    let uploading = async move {
        for _ in 0..3 {
            chunks.send(chunk(50_000)).await.unwrap();
        }
    };
    let (res, ()) = tokio::join!(
        client.send(post(&format!("{base}/v1/messages"), body)),
        uploading
    );
    arrived_whole(res.unwrap(), &mut seen, 250_000).await;
    // Sent again once: the refused stream was never answered.
    assert!(seen.try_recv().is_err());
}

#[tokio::test]
async fn a_request_reset_for_another_reason_is_not_sent_again() {
    for reason in [h2::Reason::INTERNAL_ERROR, h2::Reason::CANCEL] {
        let (base, roots, mut seen, _) = h2_provider_refusing_once(reason).await;
        fails_as_sent_once(roots, &base, &mut seen).await;
    }
}

/// A small POST to `base` fails as the provider's doing, and is not sent again: the
/// provider's handler never sees it.
async fn fails_as_sent_once(
    roots: rustls::RootCertStore,
    base: &str,
    seen: &mut mpsc::UnboundedReceiver<Received>,
) {
    fails_as_the_providers_doing(roots, base).await;
    assert!(seen.try_recv().is_err());
}

/// A small POST to `base` fails as the provider's doing (before its answer's head).
async fn fails_as_the_providers_doing(roots: rustls::RootCertStore, base: &str) {
    let client = trusting(roots);
    let body = RequestBody::full(Bytes::from_static(b"{}"));
    let failed = client
        .send(post(&format!("{base}/v1/messages"), body))
        .await;
    assert!(
        matches!(failed, Err(UpstreamError::Failed(_))),
        "{failed:?}"
    );
}

/// The start of an HTTP/2 provider written frame by frame: reads the client's preface and
/// sends an empty SETTINGS.
async fn raw_h2_start(tls: &mut tokio_rustls::server::TlsStream<tokio::net::TcpStream>) {
    let mut preface = [0; 24];
    tls.read_exact(&mut preface).await.unwrap();
    tls.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]).await.unwrap();
}

/// The next frame from the client, as its 9-byte head and its payload; `None` once the
/// connection has ended.
async fn raw_h2_frame(
    tls: &mut tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
) -> Option<([u8; 9], Vec<u8>)> {
    let mut head = [0; 9];
    tls.read_exact(&mut head).await.ok()?;
    let length = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
    let mut payload = vec![0; length];
    tls.read_exact(&mut payload).await.ok()?;
    Some((head, payload))
}

/// An HTTP/2 answer `200` to the stream of a request whose frame head is `head`, written
/// as `:status 200` (index 8 of HPACK's static table), ending the stream if `end`.
fn raw_h2_ok(head: &[u8; 9], end: bool) -> Vec<u8> {
    let mut answer = vec![0, 0, 1, 1, if end { 5 } else { 4 }];
    answer.extend(&head[5..9]);
    answer.push(0x88);
    answer
}

/// A provider whose first connection answers the client's first HEADERS with a `GOAWAY`
/// whose last stream is `last` (0: it keeps none) and whose error is `reason`, and then
/// closes, written frame by frame as no HTTP/2 library sends such a `GOAWAY` on demand;
/// later connections hand each stream to [`count_upload`].
async fn h2_provider_going_away_first(
    reason: h2::Reason,
    last: u32,
) -> (
    String,
    rustls::RootCertStore,
    mpsc::UnboundedReceiver<Received>,
    Arc<AtomicUsize>,
) {
    let (received, seen) = mpsc::unbounded_channel();
    let (base, roots, connections) = h2_serving(move |index, mut tls| {
        let received = received.clone();
        async move {
            if index == 0 {
                // The client's frames until its first HEADERS.
                raw_h2_start(&mut tls).await;
                while raw_h2_frame(&mut tls).await.unwrap().0[3] != 1 {}
                let mut go_away = vec![0, 0, 8, 7, 0, 0, 0, 0, 0];
                go_away.extend(last.to_be_bytes());
                go_away.extend(u32::from(reason).to_be_bytes());
                tls.write_all(&go_away).await.unwrap();
                tls.shutdown().await.unwrap();
                // Read on until the client closes, so the GOAWAY is not lost to a reset.
                let mut rest = Vec::new();
                let _ = tls.read_to_end(&mut rest).await;
                return;
            }
            let mut conn = h2::server::handshake(tls).await.unwrap();
            while let Some(Ok((req, respond))) = conn.accept().await {
                tokio::spawn(count_upload(req, respond, false, received.clone()));
            }
        }
    })
    .await;
    (base, roots, seen, connections)
}

#[tokio::test]
async fn credentials_and_cookies_are_never_indexed_toward_an_http2_provider() {
    // Indexed, the second request's secret would take a byte or two; never indexed, every
    // request carries it whole.
    let secret = "k3y".repeat(40);
    for (name, value) in [
        ("authorization", format!("Bearer {secret}")),
        ("x-api-key", secret.clone()),
        ("api-key", secret.clone()),
        ("anthropic-api-key", secret.clone()),
        ("cookie", format!("session={secret}")),
    ] {
        let RawProvider {
            base,
            roots,
            mut blocks,
            connections,
            ..
        } = h2_provider_pinged(Vec::new(), true).await;
        let client = trusting(roots);
        for _ in 0..2 {
            let mut req = get(&format!("{base}/v1/messages"));
            req.headers_mut()
                .insert(name, HeaderValue::from_str(&value).unwrap());
            let res = tokio::time::timeout(WAIT, client.send(req))
                .await
                .unwrap()
                .unwrap();
            assert_eq!(read_all(res).await.0, StatusCode::OK);
        }
        let (first, second) = (blocks.recv().await.unwrap(), blocks.recv().await.unwrap());
        // On a second connection, its HPACK table empty, the test would prove nothing.
        assert_eq!(connections.load(Ordering::SeqCst), 1, "{name}");
        assert!(
            second >= secret.len() / 2,
            "{name}: the first request's block took {first} bytes and the second's {second}"
        );
    }
}

#[tokio::test]
async fn a_request_past_the_last_stream_of_a_goaway_goes_on_a_new_connection() {
    // Whatever the GOAWAY's error: a stream past its last one was never processed.
    for reason in [h2::Reason::NO_ERROR, h2::Reason::INTERNAL_ERROR] {
        let (base, roots, mut seen, connections) = h2_provider_going_away_first(reason, 0).await;
        let client = trusting(roots);
        let body = RequestBody::full(Bytes::from(vec![b'x'; 100_000]));
        let res = client
            .send(post(&format!("{base}/v1/messages"), body))
            .await;
        arrived_whole(res.unwrap(), &mut seen, 100_000).await;
        assert_eq!(connections.load(Ordering::SeqCst), 2);
    }
}

#[tokio::test]
async fn a_request_a_goaway_kept_is_not_sent_again_when_its_connection_closes() {
    // The provider may have processed a stream its GOAWAY kept.
    for reason in [h2::Reason::NO_ERROR, h2::Reason::INTERNAL_ERROR] {
        let (base, roots, mut seen, connections) = h2_provider_going_away_first(reason, 1).await;
        fails_as_sent_once(roots, &base, &mut seen).await;
        assert_eq!(connections.load(Ordering::SeqCst), 1);
    }
}

#[tokio::test]
async fn a_body_is_kept_to_send_again_only_until_its_answer_head_and_within_its_bound() {
    // The provider reads each body whole, and answers when told to.
    let answer_now = Arc::new(Notify::new());
    let (read, mut got) = mpsc::unbounded_channel();
    let (base, roots, _) = h2_serving({
        let answer_now = answer_now.clone();
        move |_, tls| {
            let (read, answer_now) = (read.clone(), answer_now.clone());
            async move {
                let mut conn = h2::server::handshake(tls).await.unwrap();
                while let Some(Ok((req, mut respond))) = conn.accept().await {
                    let (read, answer_now) = (read.clone(), answer_now.clone());
                    tokio::spawn(async move {
                        let mut body = req.into_body();
                        while let Some(Ok(data)) = body.data().await {
                            body.flow_control().release_capacity(data.len()).unwrap();
                        }
                        read.send(()).unwrap();
                        answer_now.notified().await;
                        respond.send_response(Response::new(()), true).unwrap();
                    });
                }
            }
        }
    })
    .await;
    let client = trusting(roots);
    for (size, kept) in [(900_000, 900_000), (KEPT_FOR_AGAIN + 1, 0)] {
        let body = RequestBody::full(Bytes::from(vec![b'x'; size]));
        let req = post(&format!("{base}/v1/messages"), body);
        let sending = tokio::spawn({
            let client = client.clone();
            async move { client.send(req).await }
        });
        got.recv().await.unwrap();
        // Read whole by the provider, and kept while its answer's head is awaited, if it is
        // within its bound.
        assert_eq!(client.inner.kept.load(Ordering::SeqCst), kept);
        answer_now.notify_one();
        sending.await.unwrap().unwrap();
        assert_eq!(client.inner.kept.load(Ordering::SeqCst), 0);
    }
}

#[tokio::test]
async fn a_request_refused_every_time_fails_after_a_few_tries() {
    let (base, roots, connections) = h2_serving(|_, tls| async move {
        let mut conn = h2::server::handshake(tls).await.unwrap();
        while let Some(Ok((_, mut respond))) = conn.accept().await {
            respond.send_reset(h2::Reason::REFUSED_STREAM);
        }
    })
    .await;
    fails_as_the_providers_doing(roots, &base).await;
    assert_eq!(connections.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_stream_past_a_new_connections_unknown_limit_comes_back_refused_to_send_again() {
    // Until the provider's settings are in, h2 takes it to allow 100 streams: with a limit
    // of 1, the provider refuses a second stream placed in the first round trip. The pool
    // lends a new connection to no other request until then, but a stream can still meet
    // a limit lowered later.
    let (base, roots, _) = limited_h2_provider(1).await;
    let client = trusting(roots);
    let held: Uri = format!("{base}/hold").parse().unwrap();
    let Lent::Http2(sender, stream) = client.inner.connect(&held, &mut None).await.unwrap() else {
        panic!("the provider did not choose HTTP/2");
    };
    let (second_sender, second_stream) = (sender.clone(), StreamSlot(Arc::default()));
    let (first, second) = tokio::join!(
        send_on_stream(sender, stream, get(&held.to_string()), &client.inner.kept),
        send_on_stream(
            second_sender,
            second_stream,
            get(&format!("{base}/quick")),
            &client.inner.kept
        ),
    );
    assert!(first.is_ok());
    let Err(Unanswered::Refused(back, _)) = second else {
        panic!("the second stream was not given back refused");
    };
    assert_eq!(back.uri().path(), "/quick");
    // Sent again through the pool, it finds the limit known and goes on a connection with room.
    let res = tokio::time::timeout(WAIT, client.send(back)).await.unwrap();
    assert_eq!(
        read_all(res.unwrap()).await,
        (StatusCode::OK, Bytes::from_static(b"ok"))
    );
}

/// How [`h2_provider_pinged`] treats the client's `PING`s on one connection.
#[derive(Clone)]
enum OnPing {
    /// Acknowledged at once.
    Answer,
    /// Acknowledged once the `Notify` is notified; the requests before it are answered
    /// only then.
    AnswerWhen(Arc<Notify>),
    /// Never acknowledged, the requests answered all the same.
    Ignore,
    /// The connection is closed instead, once the `Notify` is notified.
    CloseWhen(Arc<Notify>),
}

/// [`h2_provider_pinged`], and what it saw.
struct RawProvider {
    base: String,
    roots: rustls::RootCertStore,
    /// The index of each connection on which a `PING` arrived.
    pinged: mpsc::UnboundedReceiver<usize>,
    /// The length of each request's header block, as HPACK encoded it.
    blocks: mpsc::UnboundedReceiver<usize>,
    connections: Arc<AtomicUsize>,
}

/// An HTTP/2 provider spoken to frame by frame: its connection `i` treats `PING`s as
/// `pings[i]` says (answered at once past the list). It answers each request `200`,
/// ending the stream if `end`.
async fn h2_provider_pinged(pings: Vec<OnPing>, end: bool) -> RawProvider {
    let (pinged_tx, pinged) = mpsc::unbounded_channel();
    let (blocks_tx, blocks) = mpsc::unbounded_channel();
    let (base, roots, connections) = h2_serving(move |index, mut tls| {
        let on_ping = pings.get(index).cloned().unwrap_or(OnPing::Answer);
        let (pinged, blocks) = (pinged_tx.clone(), blocks_tx.clone());
        async move {
            raw_h2_start(&mut tls).await;
            // Answers held until the first PING is acknowledged.
            let mut held =
                matches!(on_ping, OnPing::AnswerWhen(_) | OnPing::CloseWhen(_)).then(Vec::new);
            while let Some((head, payload)) = raw_h2_frame(&mut tls).await {
                match (head[3], head[4]) {
                    (4, 0) => tls.write_all(&[0, 0, 0, 4, 1, 0, 0, 0, 0]).await.unwrap(),
                    (1, _) => {
                        let _ = blocks.send(payload.len());
                        match &mut held {
                            Some(held) => held.push(raw_h2_ok(&head, end)),
                            None => tls.write_all(&raw_h2_ok(&head, end)).await.unwrap(),
                        }
                    }
                    (6, 0) => {
                        let _ = pinged.send(index);
                        match &on_ping {
                            OnPing::Ignore => continue,
                            OnPing::CloseWhen(release) => {
                                release.notified().await;
                                let _ = tls.shutdown().await;
                                return;
                            }
                            OnPing::AnswerWhen(release) => release.notified().await,
                            OnPing::Answer => {}
                        }
                        let mut pong = vec![0, 0, 8, 6, 1, 0, 0, 0, 0];
                        pong.extend(&payload);
                        tls.write_all(&pong).await.unwrap();
                        for answer in held.take().into_iter().flatten() {
                            tls.write_all(&answer).await.unwrap();
                        }
                    }
                    _ => {}
                }
            }
        }
    })
    .await;
    RawProvider {
        base,
        roots,
        pinged,
        blocks,
        connections,
    }
}

/// Polls `request` once, and says whether it is still pending.
async fn is_pending<F: Future + Unpin>(request: &mut F) -> bool {
    std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut *request).poll(cx).is_pending())).await
}

/// A client of a frame-by-frame provider whose first connection acts on its first `PING`
/// only once `release` is notified, as `on_ping` says, and the URL to send to.
struct HeldPing {
    client: UpstreamClient,
    uri: String,
    pinged: mpsc::UnboundedReceiver<usize>,
    connections: Arc<AtomicUsize>,
    release: Arc<Notify>,
}

async fn held_ping(on_ping: fn(Arc<Notify>) -> OnPing) -> HeldPing {
    let release = Arc::new(Notify::new());
    let provider = h2_provider_pinged(vec![on_ping(release.clone())], true).await;
    HeldPing {
        client: trusting(provider.roots),
        uri: format!("{}/v1/messages", provider.base),
        pinged: provider.pinged,
        connections: provider.connections,
        release,
    }
}

/// Spawns a request that opens a connection to `uri`, waits until the provider has seen
/// that connection's first `PING`, and polls three more requests until they wait for it.
async fn opened_and_waited_for<'a>(
    client: &'a UpstreamClient,
    uri: &'a str,
    pinged: &mut mpsc::UnboundedReceiver<usize>,
) -> (
    tokio::task::JoinHandle<Answer>,
    Vec<Pin<Box<impl Future<Output = Answer> + 'a>>>,
) {
    let opening = tokio::spawn({
        let (client, uri) = (client.clone(), uri.to_owned());
        async move { client.send(get(&uri)).await }
    });
    assert_eq!(
        tokio::time::timeout(WAIT, pinged.recv()).await.unwrap(),
        Some(0)
    );
    let mut waiting: Vec<_> = (0..3).map(|_| Box::pin(client.send(get(uri)))).collect();
    for request in &mut waiting {
        assert!(is_pending(request).await);
    }
    (opening, waiting)
}

#[tokio::test]
async fn a_connection_whose_opener_is_cancelled_while_it_settles_is_still_shared() {
    let mut held = held_ping(OnPing::AnswerWhen).await;
    let (opening, waiting) = opened_and_waited_for(&held.client, &held.uri, &mut held.pinged).await;
    opening.abort();
    assert!(opening.await.unwrap_err().is_cancelled());
    // A sweep meanwhile keeps the origin being opened.
    held.client.inner.sweep(Instant::now() + POOL_IDLE);
    held.release.notify_one();
    all_answered(waiting).await;
    assert_eq!(held.connections.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn when_a_new_connection_ends_before_its_first_pong_those_waiting_open_another() {
    let mut held = held_ping(OnPing::CloseWhen).await;
    let (opening, waiting) = opened_and_waited_for(&held.client, &held.uri, &mut held.pinged).await;
    held.release.notify_one();
    // The opener's stream went with its connection; those waiting share the next.
    let opened = tokio::time::timeout(WAIT, opening).await.unwrap().unwrap();
    assert!(opened.is_err());
    all_answered(waiting).await;
    assert_eq!(held.connections.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_provider_that_never_answers_ping_is_shared_once_the_connect_timeout_has_passed() {
    // It breaks RFC 9113 (section 6.7), but its settings are in by then all the same.
    let RawProvider {
        base,
        roots,
        connections,
        ..
    } = h2_provider_pinged(vec![OnPing::Ignore], true).await;
    // The connect timeout of every test here: it covers a debug build's TLS and HTTP/2
    // handshake on a loaded machine, which a shorter one made a race.
    let client = UpstreamClient::with_tls(&options(), client_tls(roots));
    let uri = format!("{base}/v1/messages");
    all_answered((0..4).map(|_| client.send(get(&uri)))).await;
    assert_eq!(connections.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_provider_that_never_answers_ping_has_its_connection_closed_after_the_ping_time() {
    let RawProvider { base, roots, .. } = h2_provider_pinged(vec![OnPing::Ignore], false).await;
    // The connect timeout of every test here, and a ping time as long: the handshake, and
    // then the answer's head, each have as long as elsewhere to arrive before the cut.
    let mut client = UpstreamClient::with_tls(&options(), client_tls(roots));
    Arc::get_mut(&mut client.inner).unwrap().http2_ping_after = options().connect_timeout;
    let res = tokio::time::timeout(WAIT, client.send(get(&format!("{base}/v1/messages"))))
        .await
        .unwrap()
        .unwrap();
    let read = tokio::time::timeout(WAIT, res.into_body().collect()).await;
    assert!(matches!(read, Ok(Err(_))), "the answer was not cut");
}

#[tokio::test]
async fn an_https_origin_known_to_choose_http1_is_not_waited_for_after_a_sweep() {
    let (base, roots, _) = provider_choosing_http1_first(usize::MAX).await;
    let client = trusting(roots);
    let uri: Uri = format!("{base}/hold").parse().unwrap();
    // A long answer holds its HTTP/1.1 connection out of the pool.
    let held = client.send(get(&uri.to_string())).await.unwrap();
    assert_eq!(held.version(), Version::HTTP_11);
    assert!(matches!(client.inner.turn(&uri), Turn::Open(None)));
    client.inner.sweep(Instant::now());
    assert!(
        matches!(client.inner.turn(&uri), Turn::Open(None)),
        "the sweep forgot that the provider chose HTTP/1.1: the next burst waits for one handshake"
    );
    drop(held);
}

#[tokio::test]
async fn a_client_dropped_while_a_connection_settles_is_freed_at_once() {
    let HeldPing {
        client,
        uri,
        mut pinged,
        release,
        ..
    } = held_ping(OnPing::AnswerWhen).await;
    let pool = Arc::downgrade(&client.inner);
    let opening = tokio::spawn({
        let client = client.clone();
        async move { client.send(get(&uri)).await }
    });
    assert_eq!(
        tokio::time::timeout(WAIT, pinged.recv()).await.unwrap(),
        Some(0)
    );
    opening.abort();
    let _ = opening.await;
    drop(client);
    // The connection's task, settling, holds the pool only weakly.
    assert!(relay_testkit::eventually(WAIT, || pool.upgrade().is_none()).await);
    release.notify_one();
}
