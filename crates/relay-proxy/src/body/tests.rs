//! The forwarding bodies on a real hyper `Incoming` (a client and a server over an in-memory
//! pipe), on tokio's paused clock where time matters.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::TokioIo;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use super::*;

pub(crate) type Chunk = Result<Frame<Bytes>, std::io::Error>;

/// A request body that is still arriving: the test writes its chunks through `chunks`.
/// Dropping `tasks` cuts the connection mid-body.
pub(crate) struct Upload {
    pub(crate) incoming: Incoming,
    pub(crate) chunks: mpsc::Sender<Chunk>,
    pub(crate) tasks: JoinSet<()>,
}

/// Starts an HTTP/1.1 request with a chunked body of unknown length and hands back the
/// server side's `Incoming`.
/// An HTTP/1 request body streamed from `incoming`, as the front makes one.
pub(crate) fn streamed(incoming: Incoming, limit: u64, idle: Duration) -> RequestBody {
    RequestBody::streaming(
        ClientBody::new(incoming, http::Version::HTTP_11),
        limit,
        idle,
    )
}

pub(crate) async fn upload() -> Upload {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let (incoming_tx, incoming_rx) = oneshot::channel();
    let mut tasks = JoinSet::new();
    let incoming_tx = std::sync::Mutex::new(Some(incoming_tx));
    tasks.spawn(async move {
        let service = hyper::service::service_fn(move |req: http::Request<Incoming>| {
            if let Some(tx) = relay_logging::sync::lock(&incoming_tx, "test")
                .unwrap()
                .take()
            {
                let _ = tx.send(req.into_body());
            }
            // Never answers: the test only reads the request body.
            std::future::pending::<Result<http::Response<ResponseBody>, Infallible>>()
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(server_io), service)
            .await;
    });
    let (chunks, chunk_rx) = mpsc::channel::<Chunk>(16);
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake::<_, StreamBody<_>>(TokioIo::new(client_io))
            .await
            .unwrap();
    tasks.spawn(async move {
        let _ = connection.await;
    });
    let body = StreamBody::new(futures_util::stream::unfold(
        chunk_rx,
        |mut rx| async move { rx.recv().await.map(|chunk| (chunk, rx)) },
    ));
    let req = http::Request::post("/v1/messages").body(body).unwrap();
    tasks.spawn(async move {
        let _ = sender.send_request(req).await;
    });
    Upload {
        incoming: incoming_rx.await.unwrap(),
        chunks,
        tasks,
    }
}

pub(crate) async fn send(chunks: &mpsc::Sender<Chunk>, data: &'static [u8]) {
    chunks
        .send(Ok(Frame::data(Bytes::from_static(data))))
        .await
        .unwrap();
}

async fn next<B>(body: &mut B) -> Option<Result<Bytes, BodyError>>
where
    B: Body<Data = Bytes, Error = BodyError> + Unpin,
{
    match body.frame().await? {
        Ok(frame) => Some(Ok(frame.into_data().unwrap_or_default())),
        Err(e) => Some(Err(e)),
    }
}

const IDLE: Duration = Duration::from_secs(5);

#[tokio::test]
async fn a_request_body_passes_unchanged_up_to_its_limit_and_fails_beyond() {
    let upload = upload().await;
    let mut body = streamed(upload.incoming, 10, IDLE);
    send(&upload.chunks, b"abcd").await;
    assert_eq!(next(&mut body).await.unwrap().unwrap(), "abcd");
    send(&upload.chunks, b"efghij").await;
    assert_eq!(
        next(&mut body).await.unwrap().unwrap(),
        "efghij",
        "exactly at the limit"
    );
    send(&upload.chunks, b"k").await;
    match next(&mut body).await {
        Some(Err(BodyError::TooLarge { limit: 10 })) => {}
        other => panic!("one byte over the limit gave {other:?}"),
    }
}

#[tokio::test]
async fn a_request_body_ends_cleanly_when_the_client_ends_it() {
    let upload = upload().await;
    let mut body = streamed(upload.incoming, 100, IDLE);
    send(&upload.chunks, b"{}").await;
    assert_eq!(next(&mut body).await.unwrap().unwrap(), "{}");
    drop(upload.chunks);
    assert!(next(&mut body).await.is_none());
}

#[tokio::test]
async fn a_request_body_cut_by_the_client_fails() {
    let mut upload = upload().await;
    let mut body = streamed(upload.incoming, 100, IDLE);
    send(&upload.chunks, b"part").await;
    assert_eq!(next(&mut body).await.unwrap().unwrap(), "part");
    upload.tasks.shutdown().await;
    match next(&mut body).await {
        Some(Err(BodyError::Transport(_))) => {}
        other => panic!("a cut upload gave {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_request_body_without_a_byte_for_the_idle_time_fails() {
    let upload = upload().await;
    let mut body = streamed(upload.incoming, 100, IDLE);
    // A byte every 4 s keeps it alive well past one idle time.
    let started = Instant::now();
    for _ in 0..5 {
        tokio::time::advance(Duration::from_secs(4)).await;
        send(&upload.chunks, b"x").await;
        assert_eq!(next(&mut body).await.unwrap().unwrap(), "x");
    }
    assert!(started.elapsed() >= Duration::from_secs(20));
    let silent_from = Instant::now();
    match next(&mut body).await {
        Some(Err(BodyError::Idle { after })) => assert_eq!(after, IDLE),
        other => panic!("a silent upload gave {other:?}"),
    }
    let waited = silent_from.elapsed();
    assert!(
        waited >= IDLE && waited < IDLE + Duration::from_secs(1),
        "{waited:?}"
    );
}

/// A guard that records how its body broke off: 0 while it has not, 1 broken, 2 idle.
struct BrokeOff(Arc<AtomicUsize>);

impl StreamGuard for BrokeOff {
    fn broke_off(&mut self, idle: bool) {
        self.0.store(if idle { 2 } else { 1 }, Ordering::SeqCst);
    }
}

#[tokio::test(start_paused = true)]
async fn a_forwarded_response_fails_on_idle_and_on_transport_errors_and_tells_its_guard() {
    let broke = Arc::new(AtomicUsize::new(0));
    let guard = || Some(Box::new(BrokeOff(broke.clone())) as Box<dyn StreamGuard>);
    let silent = upload().await;
    let mut body = ResponseBody::forward(
        UpstreamBody::new(silent.incoming, None, None),
        IDLE,
        guard(),
    );
    send(&silent.chunks, b"data: 1\n\n").await;
    assert_eq!(next(&mut body).await.unwrap().unwrap(), "data: 1\n\n");
    assert_eq!(broke.load(Ordering::SeqCst), 0);
    match next(&mut body).await {
        Some(Err(BodyError::Idle { .. })) => {}
        other => panic!("a silent stream gave {other:?}"),
    }
    assert_eq!(broke.swap(0, Ordering::SeqCst), 2);

    let mut broken = upload().await;
    let mut body = ResponseBody::forward(
        UpstreamBody::new(broken.incoming, None, None),
        IDLE,
        guard(),
    );
    send(&broken.chunks, b"data: 1\n\n").await;
    assert_eq!(next(&mut body).await.unwrap().unwrap(), "data: 1\n\n");
    broken.tasks.shutdown().await;
    match next(&mut body).await {
        Some(Err(BodyError::Transport(_))) => {}
        other => panic!("a broken stream gave {other:?}"),
    }
    assert_eq!(broke.swap(0, Ordering::SeqCst), 1);
}

struct Counted(Arc<AtomicUsize>);

impl StreamGuard for Counted {}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn the_stream_guard_lives_exactly_as_long_as_the_body() {
    let dropped = Arc::new(AtomicUsize::new(0));
    let upload = upload().await;
    let mut body = ResponseBody::forward(
        UpstreamBody::new(upload.incoming, None, None),
        IDLE,
        Some(Box::new(Counted(dropped.clone()))),
    );
    send(&upload.chunks, b"a").await;
    assert_eq!(next(&mut body).await.unwrap().unwrap(), "a");
    assert_eq!(dropped.load(Ordering::SeqCst), 0);
    drop(body);
    assert_eq!(dropped.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn fixed_bodies_report_their_exact_size_and_end() {
    let mut empty = ResponseBody::empty();
    assert!(empty.is_end_stream());
    assert_eq!(empty.size_hint().exact(), Some(0));
    assert!(next(&mut empty).await.is_none());
    assert!(ResponseBody::full(Bytes::new()).is_end_stream());
    let mut full = ResponseBody::full("{\"a\":1}");
    assert!(!full.is_end_stream());
    assert_eq!(full.size_hint().exact(), Some(7));
    assert_eq!(next(&mut full).await.unwrap().unwrap(), "{\"a\":1}");
    assert!(full.is_end_stream());
    assert!(next(&mut full).await.is_none());

    let mut request = RequestBody::full(Bytes::from_static(b"xyz"));
    assert_eq!(request.size_hint().exact(), Some(3));
    assert_eq!(next(&mut request).await.unwrap().unwrap(), "xyz");
    assert!(request.is_end_stream());
    assert!(RequestBody::empty().is_end_stream());
}

/// An error that wraps another, the way hyper and hyper-util wrap a body's error.
#[derive(Debug)]
struct Wrapped(Box<dyn std::error::Error + Send + Sync>);

impl fmt::Display for Wrapped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("wrapped")
    }
}

impl std::error::Error for Wrapped {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.0)
    }
}

#[test]
fn a_body_error_is_found_through_wrappers() {
    let error = Wrapped(Box::new(Wrapped(Box::new(BodyError::TooLarge {
        limit: 3,
    }))));
    assert!(matches!(
        BodyError::find(&error),
        Some(BodyError::TooLarge { limit: 3 })
    ));
    let other = Wrapped(Box::new(std::io::Error::other("no body error here")));
    assert!(BodyError::find(&other).is_none());
    assert_eq!(
        BodyError::TooLarge { limit: 3 }.to_string(),
        "body exceeds the limit of 3 bytes"
    );
}

/// The other side's time leaves out a wait for the client only while the body waits: a body
/// that is not read again (it went back to be sent again, was dropped, or its reader stalled
/// on the other side) gives that time back, at the latest after the stream idle time.
#[tokio::test(start_paused = true)]
async fn a_wait_for_the_client_that_nobody_ends_counts_no_longer_than_the_idle_time() {
    let limit = Duration::from_secs(1);
    for case in ["sent again", "dropped", "not read again"] {
        let upload = upload().await;
        let mut body = streamed(upload.incoming, 100, IDLE);
        // One look that finds nothing: a wait for the client begins.
        let looked = std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut body).poll_frame(cx)));
        assert!(looked.await.is_pending(), "{case}");
        let watch = body.upload().unwrap();
        let kept = match case {
            "sent again" => Some(RequestBody::again(Vec::new(), body)),
            "dropped" => {
                drop(body);
                None
            }
            _ => Some(body),
        };
        let started = Instant::now();
        let answer = answer_within(limit, Some(watch), std::future::pending::<()>()).await;
        assert!(answer.is_none(), "{case}");
        let took = started.elapsed();
        let most = if case == "not read again" {
            limit + IDLE
        } else {
            limit
        };
        assert!(
            took >= limit && took <= most + Duration::from_millis(10),
            "{case}: {took:?}"
        );
        drop(kept);
    }
}
