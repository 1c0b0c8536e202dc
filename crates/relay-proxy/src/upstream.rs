//! The pooled client toward model providers (SPEC §3.2, §3.3, §3.7): rustls with the
//! platform roots, HTTP/1.1 and HTTP/2 by ALPN, `TCP_NODELAY`, a connect timeout, an
//! optional response-head timeout, and an optional egress proxy with `NO_PROXY`.
//!
//! hyper-util's connectors open the connections (TCP, the CONNECT tunnel, TLS); the pool
//! and the request forms are here, so a request costs no task, timer or header formatting
//! of its own beyond what its connection needs. An HTTP/1.1 connection (hyper's) has no
//! task either: the request using it drives it, until its response body has been read
//! ([`UpstreamBody`]). An HTTP/2 connection (h2's) has a task of its own, and each request
//! drives its own stream ([`send_on_stream`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Waker, ready};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, HOST, HeaderValue};
use http::uri::{Authority, Scheme};
use http::{Request, Response, Uri};
use http_body_util::{BodyExt as _, Either};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::{TrySendError, http1};
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::legacy::connect::{Connection, HttpConnector};
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::TokioIo;
use tokio::sync::watch;
use tower_service::Service as _;

use crate::BoxError;
use crate::body::{BodyError, RequestBody, Upload, answer_within};
use crate::driven::DriverWaker;
use crate::error_chain::causes;
use crate::headers::{Toward, strip_request_headers};
use crate::sockets::{Budget, Budgeted, NoRoom};
use crate::tls;

type Stream = MaybeHttpsStream<TokioIo<Budgeted>>;
/// A connection to a provider: TLS over `Stream` for `https`, which is itself TLS only to
/// an `https` egress proxy.
type ProviderIo = MaybeHttpsStream<Stream>;

/// How the upstream client behaves.
#[derive(Debug, Clone)]
pub struct UpstreamOptions {
    pub connect_timeout: Duration,
    /// `None`: no response-head deadline (the default: long thinking calls take minutes).
    pub response_timeout: Option<Duration>,
    /// Egress proxy URL, if any.
    pub proxy_url: Option<String>,
    /// The `NO_PROXY` list, read by the caller from the environment.
    pub no_proxy: Option<String>,
    /// Connections to providers and to the egress proxy open at once, at most (the
    /// outbound share of [`crate::sockets::Descriptors`]). A request that needs one more
    /// gets [`UpstreamError::NoRoom`].
    pub max_connections: usize,
}

impl UpstreamOptions {
    /// The options of `[upstream]`, with `NO_PROXY` (or `no_proxy`) from `env`, and at most
    /// `max_connections` open at once.
    pub fn from_config(
        config: &crate::config::UpstreamConfig,
        env: &impl relay_identity::Env,
        max_connections: usize,
    ) -> UpstreamOptions {
        let response = config.response_timeout_secs;
        UpstreamOptions {
            connect_timeout: config.connect_timeout_secs.get(),
            response_timeout: (!response.is_zero()).then(|| response.get()),
            proxy_url: (!config.proxy_url.is_empty()).then(|| config.proxy_url.clone()),
            no_proxy: env
                .var_os(relay_identity::names::NO_PROXY)
                .or_else(|| env.var_os(relay_identity::names::NO_PROXY_LOWER))
                .map(|v| v.to_string_lossy().into_owned()),
            max_connections,
        }
    }
}

/// Why an upstream request produced no response head.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("the request body exceeds the limit of {limit} bytes")]
    BodyTooLarge { limit: u64 },
    /// The client's upload stopped arriving (`idle`) or its connection failed mid-body.
    #[error("the request body could not be read from the client")]
    RequestBody { idle: bool },
    #[error("connecting to the upstream timed out")]
    ConnectTimeout,
    #[error("the upstream could not be reached")]
    Unreachable(#[source] BoxError),
    #[error("the upstream sent no response head in time")]
    ResponseHeadTimeout,
    #[error("the upstream failed before its response head")]
    Failed(#[source] BoxError),
    /// A new connection was needed, and as many are open as the open-file limit allows.
    #[error("too many provider connections are open at once")]
    NoRoom,
}

impl UpstreamError {
    /// Every [`UpstreamError::reason`] of a provider failure, those for which
    /// [`UpstreamError::is_provider_failure`] holds.
    const FAILURE_REASONS: [&'static str; 5] = [
        "connect_timeout",
        "connect_failed",
        "response_head_timeout",
        "upstream_failed",
        "too_many_provider_connections",
    ];

    /// The reason a worker named in [`crate::headers::WORKER_UPSTREAM_FAILED`], as the
    /// same static code; `upstream_failed` for one this build does not know.
    pub fn failure_reason(text: &[u8]) -> &'static str {
        Self::FAILURE_REASONS
            .into_iter()
            .find(|reason| reason.as_bytes() == text)
            .unwrap_or("upstream_failed")
    }

    /// A request body's own failure, met while sending it: the client's doing.
    pub fn of_request_body(found: &BodyError) -> UpstreamError {
        match found {
            BodyError::TooLarge { limit } => UpstreamError::BodyTooLarge { limit: *limit },
            BodyError::Idle { .. } => UpstreamError::RequestBody { idle: true },
            BodyError::Transport(_) => UpstreamError::RequestBody { idle: false },
        }
    }

    /// False when the client caused it (a body over the limit, an upload that broke off):
    /// no provider failure to log or to report.
    pub fn is_provider_failure(&self) -> bool {
        !matches!(
            self,
            UpstreamError::BodyTooLarge { .. } | UpstreamError::RequestBody { .. }
        )
    }

    /// The same failure, for another request that waited on the connection that failed.
    fn shared(&self) -> UpstreamError {
        let text =
            |error: &BoxError| -> BoxError { crate::error_chain::error_chain(&**error).into() };
        match self {
            UpstreamError::BodyTooLarge { limit } => UpstreamError::BodyTooLarge { limit: *limit },
            UpstreamError::RequestBody { idle } => UpstreamError::RequestBody { idle: *idle },
            UpstreamError::ConnectTimeout => UpstreamError::ConnectTimeout,
            UpstreamError::Unreachable(error) => UpstreamError::Unreachable(text(error)),
            UpstreamError::ResponseHeadTimeout => UpstreamError::ResponseHeadTimeout,
            UpstreamError::Failed(error) => UpstreamError::Failed(text(error)),
            UpstreamError::NoRoom => UpstreamError::NoRoom,
        }
    }

    /// The `reason` field of request-failure log events.
    pub fn reason(&self) -> &'static str {
        match self {
            UpstreamError::BodyTooLarge { .. } => "body_too_large",
            UpstreamError::RequestBody { .. } => "request_body_failed",
            UpstreamError::ConnectTimeout => "connect_timeout",
            UpstreamError::Unreachable(_) => "connect_failed",
            UpstreamError::ResponseHeadTimeout => "response_head_timeout",
            UpstreamError::Failed(_) => "upstream_failed",
            UpstreamError::NoRoom => "too_many_provider_connections",
        }
    }
}

/// Idle connections to a provider are closed after this long, as most providers and
/// proxies would close them soon after anyway.
const POOL_IDLE: Duration = Duration::from_secs(90);
/// How often idle connections are looked for.
const SWEEP_EVERY: Duration = Duration::from_secs(30);
/// Connections kept per provider origin, busy or idle: as many as the default limit of
/// requests in flight per credential, so a burst at that concurrency reuses them.
const MAX_POOLED: usize = 256;
/// The largest head or body chunk buffered per connection, and the HTTP/2 stream window.
const BUFFER_BYTES: usize = 64 * 1024;
/// Streams open at once on one HTTP/2 connection to a provider, at most: as many as the
/// connection's window has room for at a full stream window each, so that answers nobody
/// is reading (a paused or slow client) can never use up the window the others need.
const STREAMS_PER_CONNECTION: usize = 100;
/// How often an HTTP/2 connection to a provider is sent a `PING`, and how long its answer
/// may take before the connection is closed ([`run_http2`]).
const HTTP2_PING_AFTER: Duration = Duration::from_secs(20);
/// How long an HTTP/2 answer whose declared length has all arrived is kept, once its reader
/// is done with it, for the end of its stream (see [`UpstreamBody`]'s `Drop`). The end
/// nearly always comes in the frame after the last byte.
const END_OF_STREAM_GRACE: Duration = Duration::from_secs(5);
/// How many times a request the provider refused unprocessed is sent again.
const MAX_REFUSALS: usize = 3;
/// The largest block of headers accepted from a provider over HTTP/2, as hyper's HTTP/2
/// client allows.
const MAX_HEADER_LIST_BYTES: u32 = 16 * 1024;

/// A pooled provider client. Cheap to clone.
///
/// The pool is Relay's own, on hyper's and h2's connection APIs: one list of connections
/// per scheme and authority, a connection handed to one request at a time over HTTP/1.1
/// (shared over HTTP/2), and the `Host` value made once per connection. A request given to
/// a kept connection that the provider has closed comes back unwritten and goes to another;
/// once any byte may have been written it is never sent again, unless the provider said it
/// processed none of it (HTTP/2, [`is_unprocessed`]).
#[derive(Clone)]
pub struct UpstreamClient {
    inner: Arc<Inner>,
}

struct Inner {
    connector: HttpsConnector<EgressConnector>,
    /// The whole of opening a connection: name look-up, TCP, the egress proxy's `CONNECT`
    /// and TLS.
    connect_timeout: Duration,
    response_timeout: Option<Duration>,
    /// [`HTTP2_PING_AFTER`]; the tests shorten it.
    http2_ping_after: Duration,
    origins: Mutex<Vec<Origin>>,
    sweeping: AtomicBool,
    /// The room its connections share, which the daemon's connections to workers share too.
    budget: Budget,
    /// What all the request bodies it keeps to send again hold now ([`KeptBody`]): each
    /// process has one client, so this bounds the process.
    kept: Arc<AtomicUsize>,
}

/// The kept connections to one scheme and authority.
struct Origin {
    scheme: Scheme,
    authority: Authority,
    conns: Vec<Kept>,
    /// A connection being opened over TLS, that other requests wait for rather than each
    /// opening its own, as it may be HTTP/2 and take them all ([`Opener`]).
    opening: Option<watch::Receiver<Opened>>,
    /// The provider chose HTTP/1.1 for the last connection opened to it: each request
    /// needs a connection of its own, and none waits for another's.
    http1: bool,
}

/// How the connection other requests waited for came out.
enum Opened {
    Pending,
    /// HTTP/1.1, lent to its opener alone: each that waited opens its own.
    Http1,
    /// HTTP/2, settled and kept in the pool to be shared.
    Http2,
    /// The same failure for each that waited.
    Failed(UpstreamError),
}

/// The request opening the connection that others to its origin wait for. Dropped, it
/// tells them how it came out, or, if it was cancelled first, lets one of them open one.
struct Opener {
    pool: Weak<Inner>,
    uri: Uri,
    tell: watch::Sender<Opened>,
    opened: Opened,
}

impl Opener {
    /// Tells those waiting how opening came out: an HTTP/2 connection tells them itself,
    /// once it is settled ([`Settling`]).
    fn opened(mut self, result: &Result<Lent, UpstreamError>) {
        self.opened = match result {
            Ok(Lent::Http1(_)) => Opened::Http1,
            Ok(Lent::Http2(..)) => Opened::Http2,
            Err(error) => Opened::Failed(error.shared()),
        };
    }
}

impl Drop for Opener {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.upgrade()
            && let Some(mut origins) = relay_logging::sync::lock(&pool.origins, "provider pool")
            && let Some(origin) = origins.iter_mut().find(|o| o.serves(&self.uri))
        {
            // Only an opener sets it, and only when it is empty.
            origin.opening = None;
            // An HTTP/2 connection clears it as it is kept.
            if matches!(self.opened, Opened::Http1) {
                origin.http1 = true;
            }
        }
        let opened = std::mem::replace(&mut self.opened, Opened::Pending);
        if !matches!(opened, Opened::Pending) {
            self.tell.send_replace(opened);
        }
    }
}

/// A new HTTP/2 connection until the provider's settings are in: until then h2 takes the
/// provider to allow 100 streams at once, so the connection is kept for other requests,
/// and those waiting for it are told, only then. The answer to a first `PING` comes after
/// the settings, which a provider sends first; one that does not answer within `within`
/// is settled all the same, as its settings are in by then whether it answers or not.
struct Settling {
    pool: Weak<Inner>,
    shared: Shared,
    opener: Option<Opener>,
    /// How long to wait for the answer to that `PING` before settling all the same: the
    /// connect timeout, as it is still part of opening the connection.
    within: Duration,
}

impl Settling {
    fn settled(self) {
        if let Some(pool) = self.pool.upgrade() {
            pool.keep(Sender::Http2(self.shared));
        }
        if let Some(mut opener) = self.opener {
            opener.opened = Opened::Http2;
        }
    }
}

/// What a request that found no kept connection with room does.
enum Turn {
    /// Opens one, telling those who wait for it when there is an [`Opener`].
    Open(Option<Opener>),
    /// Waits for the one another request is opening.
    Wait(watch::Receiver<Opened>),
}

struct Kept {
    sender: Sender,
    /// When it was last used: put back after a response (HTTP/1.1), or given a request
    /// (HTTP/2).
    used: Instant,
}

enum Sender {
    /// Kept only while idle: a request takes it out of the pool, and its response body
    /// puts it back.
    Http1(Box<Driven>),
    /// Shared: it has a task of its own, and stays in the pool while in use.
    Http2(Shared),
}

impl Sender {
    fn is_closed(&mut self) -> bool {
        match self {
            Sender::Http1(driven) => !driven.is_idle(),
            Sender::Http2(shared) => shared.is_closed(),
        }
    }

    /// Its origin's scheme and authority.
    fn origin(&self) -> &Uri {
        match self {
            Sender::Http1(driven) => &driven.origin,
            Sender::Http2(shared) => &shared.origin,
        }
    }

    /// An HTTP/2 connection with a stream open: not idle, however long ago it was taken.
    fn is_busy(&self) -> bool {
        matches!(self, Sender::Http2(shared) if shared.streams.load(Ordering::Relaxed) != 0)
    }
}

/// h2's side of an HTTP/2 connection to a provider, run by its own task ([`run_http2`]).
type Http2Connection = h2::client::Connection<TokioIo<ProviderIo>, Bytes>;

/// An HTTP/2 connection to a provider, and how many of its streams are open. h2 itself
/// speaks it: the connection has a task of its own, and each request drives its own stream
/// from its own task.
struct Shared {
    sender: h2::client::SendRequest<Bytes>,
    /// Its origin's scheme and authority.
    origin: Uri,
    /// Requests sent on it whose answers have not been done with: each holds a
    /// [`StreamSlot`].
    streams: Arc<AtomicUsize>,
}

impl Shared {
    /// Whether the provider would open one more stream now. Past the number of concurrent
    /// streams it allows (its `SETTINGS_MAX_CONCURRENT_STREAMS`, which may change at any
    /// time), h2 would hold a request until one of the others ended, which for a streamed
    /// answer can take minutes. The limit is read as h2 knows it now.
    fn has_room(&self) -> bool {
        let allowed = self
            .sender
            .current_max_send_streams()
            .min(STREAMS_PER_CONNECTION);
        self.streams.load(Ordering::Relaxed) < allowed
    }

    /// Closed, or told by the provider to open no more streams (`GOAWAY`).
    fn is_closed(&mut self) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        matches!(self.sender.poll_ready(&mut cx), Poll::Ready(Err(_)))
    }

    /// The connection lent to one more request.
    fn lend(&self) -> Lent {
        self.streams.fetch_add(1, Ordering::Relaxed);
        Lent::Http2(self.sender.clone(), StreamSlot(self.streams.clone()))
    }
}

/// One stream counted open on an HTTP/2 connection, until it is dropped.
struct StreamSlot(Arc<AtomicUsize>);

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A connection given to one request.
enum Lent {
    Http1(Box<Driven>),
    /// A stream on a shared connection, open until the answer is done with.
    Http2(h2::client::SendRequest<Bytes>, StreamSlot),
}

/// An HTTP/1.1 connection to a provider with no task of its own. The task of the request
/// using it polls it, from writing the request to the end of the response body, so the
/// request, its answer and each chunk of the body cross no channel between tasks and wake
/// no second task. An idle one in the pool is polled when it is looked at, which is when a
/// close by the provider is seen.
struct Driven {
    sender: http1::SendRequest<RequestBody>,
    conn: http1::Connection<ProviderIo, RequestBody>,
    /// Where it goes back: weakly, as the pool holds it while it is idle.
    pool: Weak<Inner>,
    /// Its origin's scheme and authority.
    origin: Uri,
    /// The `Host` header of a request on it: the host, and the port unless it is the
    /// scheme's default.
    host: HeaderValue,
    driver: DriverWaker,
}

impl Driven {
    fn is_idle(&mut self) -> bool {
        is_idle(&mut self.conn, &self.sender)
    }
}

impl Lease for Driven {
    fn poll_open(&mut self, cx: &mut Context<'_>) -> bool {
        poll_driven(&self.driver, &mut self.conn, cx)
    }

    fn driver(&self) -> &DriverWaker {
        &self.driver
    }

    fn sender(&mut self) -> &mut http1::SendRequest<RequestBody> {
        &mut self.sender
    }

    fn give_back(mut self: Box<Self>) {
        if self.is_idle()
            && let Some(pool) = self.pool.upgrade()
        {
            pool.keep(Sender::Http1(self));
        }
    }

    fn run_alone(self: Box<Self>, until: Answered) {
        run_alone(self.conn, until);
    }
}

/// An HTTP/1.1 connection with no task of its own, lent to the request that drives it
/// (a provider's, or a worker's in the daemon).
pub(crate) trait Lease: Send {
    /// Lets the connection make progress; false once it has ended, after which it must not
    /// be polled again. It is polled through its [`DriverWaker`].
    fn poll_open(&mut self, cx: &mut Context<'_>) -> bool;
    /// The waker it is polled with.
    fn driver(&self) -> &DriverWaker;
    /// Where a request is handed to it.
    fn sender(&mut self) -> &mut http1::SendRequest<RequestBody>;
    /// Its response has been read whole: it goes back to its pool if it is idle.
    fn give_back(self: Box<Self>);
    /// Its request is still uploading while the response comes: the connection runs in a
    /// task of its own, uploading and reading, until `until` says the response body has
    /// ended or was dropped, and then closes. hyper's server stops polling a response body
    /// while the client is not reading, and a client may read nothing until its whole
    /// upload is written: driven only by the response body, the upload would stall, and the
    /// client with it. Once the answer is over the rest of the upload is not needed, and a
    /// provider that neither reads it nor closes must not hold the connection.
    fn run_alone(self: Box<Self>, until: Answered);
}

/// Resolves when the response body it was made for has ended or was dropped.
pub(crate) type Answered = tokio::sync::oneshot::Receiver<()>;

/// Runs a connection whose sender has been dropped until `until` resolves or the
/// connection ends.
pub(crate) fn run_alone<T, B>(conn: http1::Connection<T, B>, until: Answered)
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    tokio::spawn(async move {
        tokio::select! {
            ended = conn => if let Err(error) = ended {
                tracing::debug!(error = %error, "connection ended with an error");
            },
            _ = until => {}
        }
    });
}

/// Polls a connection; false once it has ended.
pub(crate) fn poll_open<T, B>(conn: &mut http1::Connection<T, B>, cx: &mut Context<'_>) -> bool
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin,
    B: Body + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    match Pin::new(conn).poll(cx) {
        Poll::Pending => true,
        Poll::Ready(Ok(())) => false,
        Poll::Ready(Err(error)) => {
            tracing::debug!(error = %error, "connection ended with an error");
            false
        }
    }
}

/// Polls a connection through the waker it is driven with; false once it has ended. One
/// that nothing woke since its last poll is not polled, and is open as far as it knows.
pub(crate) fn poll_driven<T, B>(
    driver: &DriverWaker,
    conn: &mut http1::Connection<T, B>,
    cx: &mut Context<'_>,
) -> bool
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin,
    B: Body + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    driver.poll(cx, |cx| poll_open(conn, cx)).unwrap_or(true)
}

/// Polls `conn`, the connection the polling task drives (dropped once it has ended), then,
/// with `take`, what only that connection fills: through [`DriverWaker::take`] while it is
/// open, with the task's own waker once it is gone.
fn drive_then_take<L: Lease + ?Sized, T>(
    conn: &mut Option<Box<L>>,
    cx: &mut Context<'_>,
    take: impl FnOnce(&mut Context<'_>) -> Poll<T>,
) -> Poll<T> {
    if conn.as_mut().is_some_and(|c| !c.poll_open(cx)) {
        *conn = None;
    }
    match conn {
        Some(conn) => conn.driver().take(cx, take),
        None => take(cx),
    }
}

/// Open and waiting for a request, as far as one look tells. Polled without a waker: an
/// idle connection waits for nothing, and the request that takes it next polls it with its
/// own.
///
/// The look is made even when hyper already asks for the next request, as it usually does
/// by the end of a response body. Skipped in that case, it cut 850 instructions per request
/// under callgrind, yet at concurrency 1 the load generator measured a longer p99 in each of
/// 14 alternating runs, and about 1% more CPU per request in 12. One thing the look does:
/// it leaves hyper's dispatcher holding the no-op waker, not the last request's task's,
/// which handing over the next request would otherwise wake. Measured again once a
/// connection given back had forgotten its task ([`DriverWaker::forget`]), so that no
/// task could be woken for nothing: 792 instructions fewer per request, no difference in
/// CPU per request that six alternating runs could tell, and a c=1 p50 higher in 9 of 12
/// alternating runs (by about 1.3 µs); so the look stays.
pub(crate) fn is_idle<T, B>(
    conn: &mut http1::Connection<T, B>,
    sender: &http1::SendRequest<B>,
) -> bool
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin,
    B: Body + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    poll_open(conn, &mut Context::from_waker(Waker::noop())) && sender.is_ready()
}

/// Hands `req` to `conn` and waits for its response head, polling the connection
/// meanwhile: it writes the request and reads the answer only while it is polled. The
/// response body drives it from then on. A connection that ends first is dropped, which
/// settles the answer: given back if nothing of the request was written, failed otherwise.
pub(crate) async fn send_on<L: Lease + 'static>(
    mut conn: Box<L>,
    mut req: Request<RequestBody>,
) -> Result<Response<UpstreamBody>, TrySendError<Request<RequestBody>>> {
    // hyper frames an empty body with nothing at all, which for a method whose requests
    // carry content is a request without a length: some front ends answer it 411 where the
    // provider itself would have answered.
    if req.body().size_hint().exact() == Some(0) && carries_content(req.method()) {
        req.headers_mut()
            .insert(CONTENT_LENGTH, HeaderValue::from_static("0"));
    }
    let upload = req.body().upload();
    // The hand-over wakes whatever waker the connection was last polled with, which for a
    // connection from the pool is none.
    conn.driver().mark_woken();
    let mut answer = std::pin::pin!(conn.sender().try_send_request(req));
    let mut conn = Some(conn);
    let res =
        std::future::poll_fn(|cx| drive_then_take(&mut conn, cx, |cx| answer.as_mut().poll(cx)))
            .await?;
    Ok(res.map(|incoming| UpstreamBody::new(incoming, conn.map(|c| c as Box<dyn Lease>), upload)))
}

/// A response body from a provider or a worker. Over HTTP/1.1 to a provider it holds the
/// connection it arrives on and drives it while it is read, then puts it back in the pool
/// once the body has ended; dropped before its end, it closes the connection.
pub struct UpstreamBody {
    /// `None` only once `drop` has handed it on.
    source: Option<Source>,
    /// The HTTP/1.1 connection it arrives on, while it is open.
    driven: Option<Box<dyn Lease>>,
    /// Held while the body has not ended, when its connection (HTTP/1.1) or its request's
    /// upload (HTTP/2) runs alone.
    alone: Option<tokio::sync::oneshot::Sender<()>>,
    /// Its stream, over HTTP/2.
    stream: Option<Arc<StreamSlot>>,
    /// The last frame has been read.
    ended: bool,
    /// The last poll handed out a frame.
    after_frame: bool,
    /// An error held back for one poll, see [`Body::poll_frame`].
    held: Option<BoxError>,
}

/// Where an answer's body is read from: hyper's HTTP/1.1 connection, or a stream of an
/// HTTP/2 connection.
type Source = http_body_util::Either<Incoming, Http2Answer>;

/// An answer's body on an HTTP/2 stream.
struct Http2Answer {
    recv: h2::RecvStream,
    /// How much of the length its `Content-Length` declared has not arrived yet; none at all
    /// for an answer that has no body whatever its headers say (to `HEAD`, a 204 or a 304).
    left: Option<u64>,
    /// Its data has ended: only trailers may follow.
    data_over: bool,
}

impl Http2Answer {
    /// The answer `res` to a request, `HEAD` if `to_head`.
    fn new(res: Response<h2::RecvStream>, to_head: bool) -> Response<Http2Answer> {
        let status = res.status();
        let left = if to_head
            || status == http::StatusCode::NO_CONTENT
            || status == http::StatusCode::NOT_MODIFIED
        {
            Some(0)
        } else {
            res.headers()
                .get(http::header::CONTENT_LENGTH)
                .and_then(|value| value.to_str().ok()?.parse().ok())
        };
        res.map(|recv| Http2Answer {
            recv,
            left,
            data_over: false,
        })
    }
}

impl Body for Http2Answer {
    type Data = Bytes;
    type Error = h2::Error;

    /// Each chunk's room in the stream's window is given back to the provider as the chunk
    /// is handed on, as hyper does.
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, h2::Error>>> {
        if !self.data_over {
            match ready!(self.recv.poll_data(cx)) {
                Some(Ok(data)) => {
                    let _ = self.recv.flow_control().release_capacity(data.len());
                    if let Some(left) = &mut self.left {
                        *left = left.saturating_sub(data.len() as u64);
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Some(Err(error)) => return Poll::Ready(Some(Err(error))),
                None => self.data_over = true,
            }
        }
        self.recv
            .poll_trailers(cx)
            .map(|trailers| trailers.transpose().map(|t| t.map(Frame::trailers)))
    }

    fn is_end_stream(&self) -> bool {
        self.recv.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.left
            .map_or_else(SizeHint::default, SizeHint::with_exact)
    }
}

impl UpstreamBody {
    /// A body read from `source`, its connection's or upload's task held by `alone`.
    fn reading(source: Source, alone: Option<tokio::sync::oneshot::Sender<()>>) -> UpstreamBody {
        UpstreamBody {
            source: Some(source),
            driven: None,
            alone,
            stream: None,
            ended: false,
            after_frame: false,
            held: None,
        }
    }

    /// A body read off `driven`, the connection its request was sent on with `upload` still
    /// being read from the client, if it was streamed.
    pub(crate) fn new(
        incoming: Incoming,
        mut driven: Option<Box<dyn Lease>>,
        upload: Option<Upload>,
    ) -> UpstreamBody {
        let mut alone = None;
        if upload.is_some_and(|u| !u.is_over())
            && let Some(conn) = driven.take()
        {
            let (held, until) = tokio::sync::oneshot::channel();
            conn.run_alone(until);
            alone = Some(held);
        }
        let mut body = UpstreamBody::reading(Either::Left(incoming), alone);
        body.driven = driven;
        body
    }

    /// A body read off an HTTP/2 stream, its request still uploading in a task of its own
    /// until `alone` is dropped, if it is.
    fn on_stream(
        answer: Http2Answer,
        stream: Arc<StreamSlot>,
        alone: Option<tokio::sync::oneshot::Sender<()>>,
    ) -> UpstreamBody {
        let mut body = UpstreamBody::reading(Either::Right(answer), alone);
        body.stream = Some(stream);
        body
    }
}

impl std::fmt::Debug for UpstreamBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamBody")
            .field("driven", &self.driven.is_some())
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = BoxError;

    /// An error that comes right after a frame is held back for one poll, which returns
    /// `Pending` and wakes the task at once. hyper's server gives up a response whose body
    /// fails without writing out what it had buffered, and it writes out only when the
    /// body is pending. With the connection read in the same task, the bytes before a
    /// provider's failure and the failure itself are often read together: without this, the
    /// client would lose those bytes, and even the response head.
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if let Some(error) = this.held.take() {
            return Poll::Ready(Some(Err(error)));
        }
        let Some(source) = &mut this.source else {
            return Poll::Ready(None);
        };
        // The connection first: it reads what the body then hands out. Only it fills the
        // body's channel, and taking a chunk frees its place, which would wake this task
        // for nothing.
        let polled = drive_then_take(&mut this.driven, cx, |cx| {
            Pin::new(&mut *source).poll_frame(cx)
        });
        let Poll::Ready(frame) = polled else {
            this.after_frame = false;
            return Poll::Pending;
        };
        match frame {
            Some(Ok(frame)) => {
                // Trailers are the last frame, and hyper's server polls no further.
                this.ended = frame.is_trailers() || source.is_end_stream();
                if this.ended {
                    this.alone = None;
                }
                this.after_frame = true;
                if this.driven.is_some() {
                    return Poll::Ready(Some(Ok(frame.map_data(off_the_read_buffer))));
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Some(Err(error)) => {
                this.driven = None;
                if std::mem::take(&mut this.after_frame) {
                    this.held = Some(error);
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                Poll::Ready(Some(Err(error)))
            }
            None => {
                this.ended = true;
                this.alone = None;
                Poll::Ready(None)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.source.as_ref().is_none_or(Source::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.source
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Source::size_hint)
    }
}

/// The largest chunk [`off_the_read_buffer`] copies.
const COPIED_CHUNK_MAX: usize = 4096;

/// A small chunk of an answer, copied out of the read buffer of the HTTP/1.1 connection
/// that the body drives. hyper's server writes a chunk out only once the body is pending,
/// so the connection is driven again, and reads, while the chunk it just handed out is
/// still queued: sharing the read buffer with that chunk, it cannot reuse it, and allocates
/// a new one (8 KiB) for every chunk of a stream. Copying a chunk of an event or two, then
/// letting it go, costs far less; a large chunk is one large read, which a new buffer
/// costs little beside.
fn off_the_read_buffer(chunk: Bytes) -> Bytes {
    if chunk.len() <= COPIED_CHUNK_MAX {
        Bytes::copy_from_slice(&chunk)
    } else {
        chunk
    }
}

impl Drop for UpstreamBody {
    /// hyper drops a body as soon as it has ended, never polls one that was empty, and stops
    /// reading one once it has written the length its `Content-Length` declared.
    ///
    /// Over HTTP/2 a provider may end the stream in a frame of its own after the last byte.
    /// An answer dropped before that frame is read would be reset (`RST_STREAM`), which says
    /// "cancelled" of a request that succeeded, and whose late frame h2 then counts as an
    /// error on the connection; past 1,024 of those it closes the connection with every
    /// request on it. So an answer whose declared length has all arrived is read to its end
    /// in a task of its own, for [`END_OF_STREAM_GRACE`] at most. One dropped short of its
    /// length is cancelled at once, as the client went away.
    fn drop(&mut self) {
        let ended = self.is_end_stream();
        if let Some(driven) = self.driven.take()
            && ended
        {
            // Idle, it keeps no waker of this task.
            driven.driver().forget();
            driven.give_back();
        }
        if !ended
            && let Some(source) = self
                .source
                .take_if(|source| source.size_hint().exact() == Some(0))
        {
            read_to_end(source, self.stream.take(), self.alone.take());
        }
    }
}

/// Reads `source` to its end, for [`END_OF_STREAM_GRACE`] at most, in a task of its own
/// (or drops it at once outside a runtime), its stream counted open and its upload, if it
/// still runs alone, held meanwhile. What it reads is what its declared length had already
/// accounted for: nothing at all, or trailers.
fn read_to_end(
    mut source: Source,
    stream: Option<Arc<StreamSlot>>,
    alone: Option<tokio::sync::oneshot::Sender<()>>,
) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        let rest = async { while let Some(Ok(_)) = source.frame().await {} };
        let _ = tokio::time::timeout(END_OF_STREAM_GRACE, rest).await;
        drop((stream, alone));
    });
}

impl std::fmt::Debug for UpstreamClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamClient")
            .field("response_timeout", &self.inner.response_timeout)
            .finish_non_exhaustive()
    }
}

impl UpstreamClient {
    pub fn new(options: &UpstreamOptions) -> Result<UpstreamClient, tls::TlsError> {
        Ok(UpstreamClient::with_tls(
            options,
            tls::provider_client_config()?,
        ))
    }

    /// The client with its TLS configuration given (the tests trust their own CA).
    fn with_tls(options: &UpstreamOptions, tls: rustls::ClientConfig) -> UpstreamClient {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(options.connect_timeout));
        let budget = Budget::new(options.max_connections);
        let http = Dialer {
            http,
            budget: budget.clone(),
        };
        let egress = match options.proxy_url.as_deref().filter(|p| !p.is_empty()) {
            None => EgressConnector::direct(http),
            Some(proxy) => {
                let matcher = Matcher::builder()
                    .all(proxy.to_owned())
                    .no(options.no_proxy.clone().unwrap_or_default())
                    .build();
                let to_proxy = hyper_rustls::HttpsConnectorBuilder::new()
                    .with_tls_config(tls.clone())
                    .https_or_http()
                    .enable_http1()
                    .wrap_connector(http.clone());
                EgressConnector::proxied(http, to_proxy, matcher)
            }
        };
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_all_versions()
            .wrap_connector(egress);
        UpstreamClient {
            inner: Arc::new(Inner {
                connector,
                connect_timeout: options.connect_timeout,
                response_timeout: options.response_timeout,
                http2_ping_after: HTTP2_PING_AFTER,
                origins: Mutex::new(Vec::new()),
                sweeping: AtomicBool::new(false),
                budget,
                kept: Arc::default(),
            }),
        }
    }

    /// The room this client's connections share: the daemon's connections to workers take
    /// theirs from it too.
    pub fn budget(&self) -> Budget {
        self.inner.budget.clone()
    }

    /// Sends one request and waits for its response head. Never sent again once bytes may
    /// have reached the provider, as that could bill twice, unless the provider refused it
    /// before processing any of it.
    ///
    /// Not `async` itself: the request goes straight into the boxed future that sends it,
    /// rather than being copied into this one's state first.
    pub fn send(
        &self,
        req: Request<RequestBody>,
    ) -> impl Future<Output = Result<Response<UpstreamBody>, UpstreamError>> + Send {
        let limit = self.inner.response_timeout;
        let upload = limit.and_then(|_| req.body().upload());
        // Boxed, as hyper-util's client boxed its own: the sending future is 1.8 KB, and a
        // caller's future that holds this one holds only a pointer to it.
        let sending = crate::boxed(|| self.inner.send(req));
        async move {
            match limit {
                None => sending.await,
                Some(limit) => answer_within(limit, upload, sending)
                    .await
                    .unwrap_or(Err(UpstreamError::ResponseHeadTimeout)),
            }
        }
    }
}

impl Inner {
    async fn send(
        self: &Arc<Self>,
        mut req: Request<RequestBody>,
    ) -> Result<Response<UpstreamBody>, UpstreamError> {
        self.start_sweeping();
        let mut refusals = 0;
        let mut closed_idle = false;
        loop {
            let (lent, fresh) = match self.take(req.uri()) {
                Some(lent) => (lent, false),
                // Boxed: its state (the stream, the handshakes) is large and needed only for
                // a new connection.
                None => match Box::pin(self.open(req.uri())).await {
                    Ok(Some(lent)) => (lent, true),
                    // Another request opened one: it may have room for this one.
                    Ok(None) => continue,
                    // Every share is held: one idle connection, of any origin, gives up its
                    // own, once per request.
                    Err(UpstreamError::NoRoom) if !closed_idle && self.close_one_idle() => {
                        closed_idle = true;
                        continue;
                    }
                    Err(error) => return Err(error),
                },
            };
            // Written here rather than in a function of its own: each `async fn` the request
            // passes through copies it into its state twice.
            let sent = match lent {
                Lent::Http1(driven) => {
                    let target = to_origin_form(&mut req, &driven.host);
                    send_on(driven, req).await.map_err(|mut error| {
                        let back = error.take_message().map(|mut back| {
                            *back.uri_mut() = target;
                            back.headers_mut().remove(HOST);
                            back
                        });
                        match back {
                            Some(back) => Unanswered::Unwritten(back),
                            None => Unanswered::Failed(send_error(error.into_error())),
                        }
                    })
                }
                Lent::Http2(sender, stream) => {
                    send_on_stream(sender, stream, req, &self.kept).await
                }
            };
            match sent {
                Ok(res) => return Ok(res),
                // Nothing of it was written: on a kept connection the provider may have
                // closed, the request goes to another.
                Err(Unanswered::Unwritten(back)) if !fresh => req = back,
                Err(Unanswered::Unwritten(_)) => {
                    return Err(UpstreamError::Failed(
                        "the provider closed a new connection before the request was written"
                            .into(),
                    ));
                }
                // Nothing of it was processed: it goes again, to a connection with room.
                Err(Unanswered::Refused(back, _)) if refusals < MAX_REFUSALS => {
                    refusals += 1;
                    req = back;
                }
                Err(Unanswered::Refused(_, error) | Unanswered::Failed(error)) => {
                    return Err(error);
                }
            }
        }
    }

    /// A kept connection to the request's origin, the one kept last first: the likeliest
    /// to be still open. An HTTP/1.1 one leaves the pool and is not looked at here: the
    /// request polls it first thing, and one the provider has closed gives the request back
    /// unwritten. HTTP/2 ones stay, shared: those the provider has closed are dropped, and
    /// one with no stream to spare is passed over (see [`Shared::has_room`]).
    fn take(&self, uri: &Uri) -> Option<Lent> {
        let mut origins = relay_logging::sync::lock(&self.origins, "provider pool")?;
        let conns = &mut origins.iter_mut().find(|o| o.serves(uri))?.conns;
        let http1 = |conns: &mut Vec<Kept>| match conns
            .pop_if(|kept| matches!(kept.sender, Sender::Http1(_)))
        {
            Some(Kept {
                sender: Sender::Http1(driven),
                ..
            }) => Some(Lent::Http1(driven)),
            _ => None,
        };
        if let Some(lent) = http1(conns) {
            return Some(lent);
        }
        conns.retain_mut(|kept| match &mut kept.sender {
            Sender::Http2(shared) => !shared.is_closed(),
            Sender::Http1(_) => true,
        });
        let now = Instant::now();
        let http2 = conns.iter_mut().rev().find_map(|kept| match &kept.sender {
            Sender::Http2(shared) if shared.has_room() => {
                kept.used = now;
                Some(shared.lend())
            }
            _ => None,
        });
        // A provider that chose HTTP/1.1 for some connections: one may lie under the
        // HTTP/2 ones dropped just now.
        http2.or_else(|| http1(conns))
    }

    /// Closes the idle HTTP/1.1 connection used longest ago, of any origin, so that its
    /// socket's room in the budget goes to a new one; false when none is idle. (An idle
    /// HTTP/2 connection's socket closes only once its task has ended, too late to help.)
    fn close_one_idle(&self) -> bool {
        let Some(mut origins) = relay_logging::sync::lock(&self.origins, "provider pool") else {
            return false;
        };
        let oldest = origins
            .iter()
            .enumerate()
            .flat_map(|(o, origin)| {
                origin
                    .conns
                    .iter()
                    .enumerate()
                    .filter(|(_, kept)| matches!(kept.sender, Sender::Http1(_)))
                    .map(move |(c, kept)| (kept.used, o, c))
            })
            .min_by_key(|(used, _, _)| *used);
        match oldest {
            Some((_, o, c)) => {
                drop(origins[o].conns.remove(c));
                true
            }
            None => false,
        }
    }

    /// Keeps a connection for later requests to its origin.
    fn keep(&self, sender: Sender) {
        let Some(mut origins) = relay_logging::sync::lock(&self.origins, "provider pool") else {
            return;
        };
        let Some(origin) = Origin::of(&mut origins, sender.origin()) else {
            return;
        };
        if matches!(sender, Sender::Http2(_)) {
            origin.http1 = false;
        }
        if origin.conns.len() < MAX_POOLED {
            origin.conns.push(Kept {
                sender,
                used: Instant::now(),
            });
        }
    }

    /// A new connection for the request, or `None` once the one another request was
    /// opening is ready, to be looked for in the pool.
    ///
    /// Over TLS, requests that find no connection with room wait for the one connection
    /// being opened: it is likely HTTP/2, with room for them all, and a burst of requests
    /// would otherwise open one connection and handshake each. They share its failure,
    /// rather than each trying again in turn. Once the provider has chosen HTTP/1.1, or
    /// for plain `http`, each request opens its own at once.
    async fn open(self: &Arc<Self>, uri: &Uri) -> Result<Option<Lent>, UpstreamError> {
        match self.turn(uri) {
            Turn::Open(mut opener) => {
                let opened = self.connect(uri, &mut opener).await;
                if let Some(opener) = opener {
                    opener.opened(&opened);
                }
                opened.map(Some)
            }
            Turn::Wait(mut opening) => {
                match opening
                    .wait_for(|opened| !matches!(opened, Opened::Pending))
                    .await
                {
                    Ok(opened) => match &*opened {
                        Opened::Failed(error) => Err(error.shared()),
                        Opened::Pending | Opened::Http1 | Opened::Http2 => Ok(None),
                    },
                    // Its opener was cancelled.
                    Err(_) => Ok(None),
                }
            }
        }
    }

    /// Whether the request opens a connection or waits for one ([`Inner::open`]).
    fn turn(self: &Arc<Self>, uri: &Uri) -> Turn {
        if uri.scheme() != Some(&Scheme::HTTPS) {
            return Turn::Open(None);
        }
        let Some(mut origins) = relay_logging::sync::lock(&self.origins, "provider pool") else {
            return Turn::Open(None);
        };
        let Some(origin) = Origin::of(&mut origins, uri) else {
            return Turn::Open(None);
        };
        if origin.http1 {
            return Turn::Open(None);
        }
        if let Some(opening) = &origin.opening {
            return Turn::Wait(opening.clone());
        }
        let (tell, opening) = watch::channel(Opened::Pending);
        origin.opening = Some(opening);
        Turn::Open(Some(Opener {
            pool: Arc::downgrade(self),
            uri: uri.clone(),
            tell,
            opened: Opened::Pending,
        }))
    }

    /// Opens a connection to the request's origin (directly or through the egress proxy,
    /// TLS for `https`), HTTP/2 if the provider chose it by ALPN. An HTTP/2 connection
    /// carries the request at once, and is kept to be shared (and `opener` told) once the
    /// provider's settings are in ([`Settling`]); an HTTP/1.1 one is kept once its first
    /// response body is read.
    async fn connect(
        self: &Arc<Self>,
        uri: &Uri,
        opener: &mut Option<Opener>,
    ) -> Result<Lent, UpstreamError> {
        let (Some(scheme), Some(authority)) = (uri.scheme(), uri.authority()) else {
            return Err(UpstreamError::Failed(
                format!("the upstream address {uri} is not absolute").into(),
            ));
        };
        let mut connector = self.connector.clone();
        std::future::poll_fn(|cx| connector.poll_ready(cx))
            .await
            .map_err(connect_error)?;
        // The TCP connector's own timeout covers only its connect; a provider or proxy that
        // accepts and then never speaks TLS or answers `CONNECT` must not hold the request.
        let io = tokio::time::timeout(self.connect_timeout, connector.call(uri.clone()))
            .await
            .map_err(|_| UpstreamError::ConnectTimeout)?
            .map_err(connect_error)?;
        // Scheme and authority only: a query may carry a key.
        let origin = Uri::builder()
            .scheme(scheme.clone())
            .authority(authority.clone())
            .path_and_query("/")
            .build()
            .map_err(|e| UpstreamError::Failed(Box::new(e)))?;
        if io.connected().is_negotiated_h2() {
            // Boxed: HTTP/2's handshake state would make every new connection's future,
            // HTTP/1 ones included, larger.
            let (sender, connection) = Box::pin(
                h2::client::Builder::new()
                    // Until the provider's settings say otherwise.
                    .initial_max_send_streams(STREAMS_PER_CONNECTION)
                    .initial_window_size(BUFFER_BYTES as u32)
                    .initial_connection_window_size((STREAMS_PER_CONNECTION * BUFFER_BYTES) as u32)
                    .max_header_list_size(MAX_HEADER_LIST_BYTES)
                    .enable_push(false)
                    .handshake::<_, Bytes>(TokioIo::new(io)),
            )
            .await
            .map_err(|e| UpstreamError::Unreachable(Box::new(e)))?;
            let shared = Shared {
                sender,
                origin,
                streams: Arc::default(),
            };
            let lent = shared.lend();
            let settling = Settling {
                pool: Arc::downgrade(self),
                shared,
                opener: opener.take(),
                within: self.connect_timeout.min(self.http2_ping_after),
            };
            tokio::spawn(run_http2(connection, self.http2_ping_after, settling));
            Ok(lent)
        } else {
            let (sender, conn) = http1::Builder::new()
                .max_buf_size(BUFFER_BYTES)
                .handshake(io)
                .await
                .map_err(|e| UpstreamError::Unreachable(Box::new(e)))?;
            let driven = Driven {
                sender,
                conn,
                pool: Arc::downgrade(self),
                origin,
                host: host_value(scheme, authority)?,
                driver: DriverWaker::new(),
            };
            Ok(Lent::Http1(Box::new(driven)))
        }
    }

    /// Starts, once, the task that closes connections idle for longer than [`POOL_IDLE`].
    /// It holds the pool weakly and ends with the client.
    fn start_sweeping(self: &Arc<Self>) {
        // A load first: every request passes here, and only the first needs the swap.
        if self.sweeping.load(Ordering::Relaxed) || self.sweeping.swap(true, Ordering::Relaxed) {
            return;
        }
        let pool = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(SWEEP_EVERY).await;
                let Some(inner) = pool.upgrade() else { return };
                inner.sweep(Instant::now());
            }
        });
    }

    /// Drops the connections closed, or last used before `now - POOL_IDLE`, and origins
    /// left with none, none being opened, and no choice of HTTP/1.1 to remember: an
    /// HTTP/1.1 connection busy with a response is not in the pool.
    fn sweep(&self, now: Instant) {
        let Some(mut origins) = relay_logging::sync::lock(&self.origins, "provider pool") else {
            return;
        };
        for origin in origins.iter_mut() {
            origin.conns.retain_mut(|kept| {
                let idle =
                    now.saturating_duration_since(kept.used) >= POOL_IDLE && !kept.sender.is_busy();
                !kept.sender.is_closed() && !idle
            });
        }
        origins
            .retain(|origin| !origin.conns.is_empty() || origin.opening.is_some() || origin.http1);
    }
}

/// Runs an HTTP/2 connection to a provider until it ends: when the provider closes it, or
/// when it has no stream open and the pool has let it go. It sends the provider a `PING`
/// at once, and settles the connection ([`Settling`]) when the answer comes; then every
/// [`HTTP2_PING_AFTER`] again. It closes the connection when an answer does not come
/// within that time: a path that went silent (a dead link, a NAT that forgot the
/// connection) would otherwise hold every request on it until TCP gives up, which takes
/// about a quarter of an hour.
async fn run_http2(mut connection: Http2Connection, ping_after: Duration, settling: Settling) {
    let Some(mut pings) = connection.ping_pong() else {
        return;
    };
    let keep_alive = async move {
        let mut settling = Some(settling);
        loop {
            if settling.is_none() {
                tokio::time::sleep(ping_after).await;
            }
            if pings.send_ping(h2::Ping::opaque()).is_err() {
                return;
            }
            let deadline = tokio::time::Instant::now() + ping_after;
            let mut pong = std::pin::pin!(std::future::poll_fn(|cx| pings.poll_pong(cx)));
            if let Some(settling) = settling.take() {
                let first = tokio::time::timeout(settling.within, &mut pong).await;
                if matches!(first, Ok(Err(_))) {
                    return;
                }
                settling.settled();
                if first.is_ok() {
                    continue;
                }
            }
            if !matches!(tokio::time::timeout_at(deadline, pong).await, Ok(Ok(_))) {
                return;
            }
        }
    };
    tokio::select! {
        ended = &mut connection => if let Err(error) = ended {
            tracing::debug!(error = %error, "provider connection ended with an error");
        },
        () = keep_alive => {
            tracing::debug!("the provider did not answer a ping in time; closing its connection");
        }
    }
}

/// Why a connection gave a request no answer.
enum Unanswered {
    /// Given back unwritten: the connection had closed before it was handed the request.
    Unwritten(Request<RequestBody>),
    /// Refused by the provider before it processed any of it (HTTP/2's `REFUSED_STREAM`, or
    /// a stream past the last one a `GOAWAY` kept), and given back whole to send again.
    Refused(Request<RequestBody>, UpstreamError),
    Failed(UpstreamError),
}

/// Sends `req` on a new stream of an HTTP/2 connection and waits for its answer's head,
/// uploading its body meanwhile, all from the request's own task. A body still uploading
/// when the head comes goes on in a task of its own, as over HTTP/1.1 ([`Lease::run_alone`]),
/// until the answer has ended or was dropped: then the stream is reset, as a provider that
/// has answered and reads no more must not hold the client, nor go on with an answer that
/// nobody reads.
///
/// Given back unwritten when the connection has closed or been told to open no more
/// streams before the request was handed to it; given back whole when the provider refuses
/// it unprocessed, if what was read of its body is still at hand ([`Http2Upload::again`]).
async fn send_on_stream(
    mut sender: h2::client::SendRequest<Bytes>,
    stream: StreamSlot,
    req: Request<RequestBody>,
    kept: &Arc<AtomicUsize>,
) -> Result<Response<UpstreamBody>, Unanswered> {
    if std::future::poll_fn(|cx| sender.poll_ready(cx))
        .await
        .is_err()
    {
        return Err(Unanswered::Unwritten(req));
    }
    let (mut head, body) = req.into_parts();
    let to_head = head.method == http::Method::HEAD;
    let empty = body.is_end_stream();
    crate::headers::never_index_credentials(&mut head.headers);
    // The forwarded headers have no `Content-Length` (the framing is the body's), and
    // HTTP/2 has no framing of its own to say the length: it is said when it is known, as
    // over HTTP/1.1.
    if let Some(length) = body.size_hint().exact()
        && (length != 0 || carries_content(&head.method))
    {
        head.headers
            .insert(CONTENT_LENGTH, HeaderValue::from(length));
    }
    // h2 takes the head; a request refused unprocessed is sent again with this copy.
    let mut again = Request::new(());
    *again.method_mut() = head.method.clone();
    *again.uri_mut() = head.uri.clone();
    *again.headers_mut() = head.headers.clone();
    let (mut answer, send) = match sender.send_request(Request::from_parts(head, ()), empty) {
        Ok(sent) => sent,
        // The connection closed, or was told to open no more streams, since it was ready:
        // nothing was written.
        Err(error) if error.is_go_away() || error.is_io() => {
            return Err(Unanswered::Unwritten(again.map(|()| body)));
        }
        Err(error) => return Err(Unanswered::Failed(UpstreamError::Failed(Box::new(error)))),
    };
    let mut upload = Http2Upload {
        body,
        send,
        chunk: Bytes::new(),
        read: Some(KeptBody {
            chunks: Vec::new(),
            size: 0,
            in_all: kept.clone(),
        }),
    };
    let mut uploading = !empty;
    // The client's failure first; then the provider's answer, or its failure.
    let answered = std::future::poll_fn(|cx| {
        if uploading && let Poll::Ready(sent) = upload.poll(cx) {
            uploading = false;
            if let Err(Some(error)) = sent {
                return Poll::Ready(Err(UpstreamError::of_request_body(&error)));
            }
        }
        Pin::new(&mut answer).poll(cx).map(Ok)
    })
    .await
    .map_err(Unanswered::Failed)?;
    let res = match answered {
        Ok(res) => res,
        Err(error) => {
            let body = if is_unprocessed(&error) {
                upload.again()
            } else {
                None
            };
            let failed = UpstreamError::Failed(Box::new(error));
            return Err(match body {
                Some(body) => Unanswered::Refused(again.map(|()| body), failed),
                None => Unanswered::Failed(failed),
            });
        }
    };
    let stream = Arc::new(stream);
    upload.read = None;
    let alone = uploading.then(|| {
        let (held, mut until) = tokio::sync::oneshot::channel::<()>();
        let stream = stream.clone();
        let mut sending = upload;
        tokio::spawn(async move {
            let sent = std::future::poll_fn(|cx| match sending.poll(cx) {
                Poll::Ready(_) => Poll::Ready(true),
                Poll::Pending => Pin::new(&mut until).poll(cx).map(|_| false),
            })
            .await;
            if !sent {
                sending.send.send_reset(h2::Reason::CANCEL);
            }
            drop(stream);
        });
        held
    });
    Ok(Http2Answer::new(res, to_head).map(|answer| UpstreamBody::on_stream(answer, stream, alone)))
}

/// Whether the provider refused a stream before processing any of it, so that its request
/// may be sent again: a reset with `REFUSED_STREAM`, or a stream past the last one a
/// `GOAWAY` said it would process. h2 gives the `GOAWAY`'s own error to those streams only:
/// the streams it kept end with the connection, as an I/O error.
fn is_unprocessed(error: &h2::Error) -> bool {
    error.is_remote()
        && (error.is_go_away()
            || (error.is_reset() && error.reason() == Some(h2::Reason::REFUSED_STREAM)))
}

/// The most of one request body kept to send again while its answer's head is awaited.
const KEPT_FOR_AGAIN: usize = 16 * BUFFER_BYTES;
/// The most of all request bodies one client keeps to send again at once: past it, a body
/// is not kept.
const KEPT_FOR_AGAIN_IN_ALL: usize = 32 * 1024 * 1024;

/// The chunks of a request body kept to send again, in order, counted in `in_all` (the
/// client's [`Inner::kept`]) until dropped.
struct KeptBody {
    chunks: Vec<Bytes>,
    size: usize,
    in_all: Arc<AtomicUsize>,
}

impl Drop for KeptBody {
    fn drop(&mut self) {
        self.in_all.fetch_sub(self.size, Ordering::Relaxed);
    }
}

/// A request body on its way up an HTTP/2 stream, as the provider's window lets it.
struct Http2Upload {
    body: RequestBody,
    send: h2::SendStream<Bytes>,
    /// What of the last chunk read from the body has not been sent yet.
    chunk: Bytes,
    /// What was read of the body before `chunk`, while it is kept to send again: until the
    /// answer's head comes, unless it grows past [`KEPT_FOR_AGAIN`], all that is kept grows
    /// past [`KEPT_FOR_AGAIN_IN_ALL`], or the body has trailers. Each chunk is shared with
    /// the frame that sent it, not copied.
    read: Option<KeptBody>,
}

impl Http2Upload {
    /// The whole body again, if what was read of it has been kept.
    fn again(self) -> Option<RequestBody> {
        let mut read = std::mem::take(&mut self.read?.chunks);
        if !self.chunk.is_empty() {
            read.push(self.chunk);
        }
        Some(RequestBody::again(read, self.body))
    }

    /// Keeps `part` to send again, while the body is kept.
    fn keep(&mut self, part: &Bytes) {
        let Some(kept) = &mut self.read else {
            return;
        };
        // Counted at once: dropping what is kept gives it all back.
        kept.size += part.len();
        let in_all = kept.in_all.fetch_add(part.len(), Ordering::Relaxed) + part.len();
        if kept.size > KEPT_FOR_AGAIN || in_all > KEPT_FOR_AGAIN_IN_ALL {
            self.read = None;
        } else {
            kept.chunks.push(part.clone());
        }
    }

    /// Ready once the body has all been sent, or with an error once it cannot be: the
    /// client's own failure (a body over its limit, an upload that stopped or broke off),
    /// after which the stream is reset, or none when the provider has stopped the stream,
    /// whose answer then says why.
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Option<BodyError>>> {
        loop {
            if self.send.poll_reset(cx).is_ready() {
                return Poll::Ready(Err(None));
            }
            if !self.chunk.is_empty() {
                self.send.reserve_capacity(self.chunk.len());
                let room = match ready!(self.send.poll_capacity(cx)) {
                    Some(Ok(0)) => continue,
                    Some(Ok(room)) => room,
                    Some(Err(_)) | None => return Poll::Ready(Err(None)),
                };
                let part = self.chunk.split_to(room.min(self.chunk.len()));
                self.keep(&part);
                let last = self.chunk.is_empty() && self.body.is_end_stream();
                let sent = self.send.send_data(part, last);
                if sent.is_err() || last {
                    return Poll::Ready(self.ended(sent));
                }
                continue;
            }
            let sent = match ready!(Pin::new(&mut self.body).poll_frame(cx)) {
                None => self.send.send_data(Bytes::new(), true),
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => {
                        self.chunk = data;
                        continue;
                    }
                    Err(frame) => match frame.into_trailers() {
                        Ok(mut trailers) => {
                            // Under the same rules as the request's headers: h2 refuses
                            // the hop-by-hop ones, and would leave the stream open.
                            strip_request_headers(&mut trailers, Toward::Provider);
                            // Not kept: a body with trailers is not sent again.
                            self.read = None;
                            self.send.send_trailers(trailers)
                        }
                        Err(_) => continue,
                    },
                },
                Some(Err(error)) => {
                    self.send.send_reset(h2::Reason::CANCEL);
                    return Poll::Ready(Err(Some(error)));
                }
            };
            return Poll::Ready(self.ended(sent));
        }
    }

    /// The end of an upload whose last frame was `sent`. A frame h2 refused leaves the
    /// stream open, neither ended nor reset, and the provider would wait for the rest of
    /// the body forever: the stream is reset instead.
    fn ended(&mut self, sent: Result<(), h2::Error>) -> Result<(), Option<BodyError>> {
        if sent.is_err() {
            self.send.send_reset(h2::Reason::CANCEL);
            return Err(None);
        }
        Ok(())
    }
}

impl Origin {
    /// The origin of `uri` among `origins`, added if it is not there.
    fn of<'a>(origins: &'a mut Vec<Origin>, uri: &Uri) -> Option<&'a mut Origin> {
        let (scheme, authority) = (uri.scheme()?, uri.authority()?);
        let index = match origins.iter().position(|o| o.serves(uri)) {
            Some(index) => index,
            None => {
                origins.push(Origin {
                    scheme: scheme.clone(),
                    authority: authority.clone(),
                    conns: Vec::new(),
                    opening: None,
                    http1: false,
                });
                origins.len() - 1
            }
        };
        Some(&mut origins[index])
    }

    /// Authorities compare without case, a byte at a time; a request's nearly always has
    /// the very bytes of its origin's (the origin was kept from an earlier request to the
    /// same base URL), so those are compared first, at the cost of a `memcmp`.
    fn serves(&self, uri: &Uri) -> bool {
        uri.scheme() == Some(&self.scheme)
            && uri
                .authority()
                .is_some_and(|a| a.as_str() == self.authority.as_str() || *a == self.authority)
    }
}

/// Readies a request for an HTTP/1.1 connection: origin-form, with the connection's `Host`.
/// HTTP/2 sends the absolute URI instead (its `:authority`). Returns the absolute URI, which
/// a request given back unwritten needs again.
/// Whether requests of `method` carry content, so that even an empty body says its length
/// (RFC 9110: a user agent sends `Content-Length: 0` for such a request without content).
fn carries_content(method: &http::Method) -> bool {
    !matches!(
        method.as_str(),
        "GET" | "HEAD" | "DELETE" | "CONNECT" | "OPTIONS" | "TRACE"
    )
}

fn to_origin_form(req: &mut Request<RequestBody>, host: &HeaderValue) -> Uri {
    let target = std::mem::take(req.uri_mut());
    *req.uri_mut() = target
        .path_and_query()
        .cloned()
        .map_or_else(|| Uri::from_static("/"), Uri::from);
    req.headers_mut().insert(HOST, host.clone());
    target
}

/// The `Host` value for an origin: the host, with the port unless it is the scheme's
/// default (80 for http, 443 for https).
fn host_value(scheme: &Scheme, authority: &Authority) -> Result<HeaderValue, UpstreamError> {
    let default_port = match scheme.as_str() {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    };
    let text = match authority.port_u16() {
        Some(port) if Some(port) != default_port => format!("{}:{port}", authority.host()),
        _ => authority.host().to_owned(),
    };
    HeaderValue::from_str(&text).map_err(|e| UpstreamError::Failed(Box::new(e)))
}

fn connect_error(error: BoxError) -> UpstreamError {
    if causes(&*error).any(|cause| cause.is::<NoRoom>()) {
        return UpstreamError::NoRoom;
    }
    if is_timeout(&*error) {
        UpstreamError::ConnectTimeout
    } else {
        UpstreamError::Unreachable(error)
    }
}

fn send_error(error: hyper::Error) -> UpstreamError {
    match BodyError::find(&error) {
        Some(found) => UpstreamError::of_request_body(found),
        None => UpstreamError::Failed(Box::new(error)),
    }
}

fn is_timeout(error: &(dyn std::error::Error + 'static)) -> bool {
    causes(error).any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
    })
}

/// Opens every TCP connection of the provider client, to the provider or to the egress
/// proxy, within its budget of descriptors, and gives it Relay's socket options
/// ([`crate::sockets::prepare`]).
#[derive(Clone)]
struct Dialer {
    http: HttpConnector,
    budget: Budget,
}

impl tower_service::Service<Uri> for Dialer {
    type Response = TokioIo<Budgeted>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.http.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        // Taken before connecting, and given back if the connection fails.
        let share = self.budget.take();
        let connecting = self.http.call(dst);
        Box::pin(async move {
            let share = share?;
            let tcp = connecting.await?.into_inner();
            crate::sockets::prepare(&tcp);
            Ok(TokioIo::new(Budgeted::new(tcp, Some(share))))
        })
    }
}

/// Connects directly, or through a CONNECT proxy unless `NO_PROXY` exempts the host.
#[derive(Clone)]
pub struct EgressConnector {
    direct: Dialer,
    proxy: Option<Arc<ProxyRoute>>,
}

struct ProxyRoute {
    matcher: Matcher,
    to_proxy: HttpsConnector<Dialer>,
}

impl std::fmt::Debug for EgressConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EgressConnector")
            .field("proxied", &self.proxy.is_some())
            .finish()
    }
}

impl EgressConnector {
    fn direct(direct: Dialer) -> EgressConnector {
        EgressConnector {
            direct,
            proxy: None,
        }
    }

    fn proxied(
        direct: Dialer,
        to_proxy: HttpsConnector<Dialer>,
        matcher: Matcher,
    ) -> EgressConnector {
        EgressConnector {
            direct,
            proxy: Some(Arc::new(ProxyRoute { matcher, to_proxy })),
        }
    }
}

impl tower_service::Service<Uri> for EgressConnector {
    type Response = Stream;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Stream, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let intercept = self.proxy.as_ref().and_then(|p| p.matcher.intercept(&dst));
        match (intercept, &self.proxy) {
            (Some(intercept), Some(route)) => {
                let mut tunnel = Tunnel::new(intercept.uri().clone(), route.to_proxy.clone());
                if let Some(auth) = intercept.basic_auth() {
                    tunnel = tunnel.with_auth(auth.clone());
                }
                Box::pin(async move {
                    let mut tunnel = tunnel;
                    tower_service::Service::call(&mut tunnel, dst)
                        .await
                        .map_err(|e| Box::new(e) as BoxError)
                })
            }
            _ => {
                let mut direct = self.direct.clone();
                Box::pin(async move {
                    let tcp = tower_service::Service::call(&mut direct, dst).await?;
                    Ok(MaybeHttpsStream::Http(tcp))
                })
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
