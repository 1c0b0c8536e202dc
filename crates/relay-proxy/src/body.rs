//! Bodies on the forwarding path (SPEC §3.3, §3.6).
//!
//! Bytes pass through untouched, one frame at a time: nothing here buffers, re-encodes or
//! allocates per chunk. A request body that crosses its limit, and a stream that goes
//! idle, end with an error, so hyper aborts the connection and the peer never mistakes a
//! cut message for a complete one.

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use tokio::time::{Instant, Sleep};

use crate::BoxError;
use crate::conn::ActiveRequest;
use crate::server::{LINGER_BYTES, LINGER_TIME};
use crate::upstream::UpstreamBody;

/// Why a body stopped early.
#[derive(Debug)]
pub enum BodyError {
    /// A request body grew past its limit while streaming.
    TooLarge { limit: u64 },
    /// No byte for the stream idle time.
    Idle { after: Duration },
    /// The peer's connection failed mid-body.
    Transport(BoxError),
}

impl fmt::Display for BodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BodyError::TooLarge { limit } => write!(f, "body exceeds the limit of {limit} bytes"),
            BodyError::Idle { after } => write!(f, "no body bytes for {after:?}"),
            BodyError::Transport(_) => f.write_str("body transport failed"),
        }
    }
}

impl std::error::Error for BodyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BodyError::Transport(e) => Some(&**e),
            _ => None,
        }
    }
}

impl BodyError {
    /// Finds a `BodyError` in an error's source chain (hyper wraps body errors).
    pub fn find<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a BodyError> {
        crate::error_chain::causes(error).find_map(|cause| cause.downcast_ref())
    }
}

/// Aborts a stream that has waited `idle` for its next byte. The wait is timed from the
/// first poll that finds nothing after a chunk, so a stream reads the clock once per wait,
/// not once per chunk, and a body that arrives whole reads it never. The timer is made the
/// first time the stream waits, and its deadline is only moved when it fires, so a busy
/// stream resets no timer.
struct IdleTimer {
    idle: Duration,
    /// When the current wait began; `None` until the stream waits after a chunk.
    waiting_since: Option<Instant>,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl IdleTimer {
    fn new(idle: Duration) -> IdleTimer {
        IdleTimer {
            idle,
            waiting_since: None,
            sleep: None,
        }
    }

    /// A chunk came: the next wait is timed from its own start. Returns when the wait it
    /// ended began, if the stream had waited.
    fn touch(&mut self) -> Option<Instant> {
        self.waiting_since.take()
    }

    /// Ready with an error once the stream has really been waiting for the whole time.
    fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<BodyError> {
        let deadline = *self.waiting_since.get_or_insert_with(Instant::now) + self.idle;
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        loop {
            ready!(sleep.as_mut().poll(cx));
            if Instant::now() >= deadline {
                return Poll::Ready(BodyError::Idle { after: self.idle });
            }
            sleep.as_mut().reset(deadline);
        }
    }
}

/// The body of a request on its way upstream: the client's bytes, cut with an error once
/// more than `limit` bytes arrive or none arrives for the idle time.
pub struct RequestBody {
    inner: RequestInner,
}

enum RequestInner {
    Empty,
    Full(Option<Bytes>),
    /// A body sent again: the chunks already read from the client, then what it still sends.
    Again {
        read: VecDeque<Bytes>,
        rest: Box<RequestBody>,
    },
    Streaming {
        incoming: ClientBody,
        remaining: u64,
        limit: u64,
        idle: IdleTimer,
        /// Ends the upload when the body's end is read, or the body dropped: see [`Upload`].
        upload: UploadEnd,
    },
}

/// Watches a streaming request body's upload: whether it is over (its end has been read, or
/// the body dropped, as hyper drops the body it sends once it has it all), and how long it
/// has waited for the client's bytes.
pub(crate) struct Upload(Arc<UploadSignal>);

struct UploadSignal {
    /// The most one wait counts as the client's: the stream idle time, after which the
    /// body fails if it is being read. A body that is not read again (its sender stalled on
    /// the other side) must not hold the other side's clock for ever.
    cap: Duration,
    over: AtomicBool,
    /// When the body first waited for the client: the times below count from it.
    first_wait: OnceLock<Instant>,
    /// Microseconds (+1) since `first_wait` when the current wait for the client began; 0
    /// while the body is not waiting for it.
    waiting_since: AtomicU64,
    /// Microseconds spent waiting for the client in waits that have ended.
    waited: AtomicU64,
}

impl Upload {
    pub(crate) fn is_over(&self) -> bool {
        self.0.over.load(Ordering::Acquire)
    }

    /// How long the body has waited for the client's bytes, up to `now`.
    fn client_time(&self, now: Instant) -> Duration {
        let Some(first) = self.0.first_wait.get() else {
            return Duration::ZERO;
        };
        // The open wait first: one that ends between the two reads is then counted twice
        // (late, and capped) rather than not at all (early).
        let since = self.0.waiting_since.load(Ordering::Acquire);
        let waited = self.0.waited.load(Ordering::Acquire);
        let waiting = match since {
            0 => 0,
            since => micros(now.saturating_duration_since(*first))
                .saturating_sub(since - 1)
                .min(micros(self.0.cap)),
        };
        Duration::from_micros(waited.saturating_add(waiting))
    }
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// Waits for `answer`, but for no longer than `limit` of time spent waiting on the other
/// side: time the request's body spends waiting for the client's bytes is not counted (the
/// other side cannot answer a request it has not had whole, and an upload that stalls is the
/// client's doing, cut by the body's own idle timer), while time the other side takes to
/// accept the body, and to answer it, is. `None` when the time ran out.
///
/// A caller without a limit awaits its answer itself: this future is large, and building
/// it for nothing cost the usual request about 190 instructions.
pub(crate) async fn answer_within<T>(
    limit: Duration,
    upload: Option<Upload>,
    answer: impl Future<Output = T>,
) -> Option<T> {
    let client_time = |now| {
        upload
            .as_ref()
            .map_or(Duration::ZERO, |u| u.client_time(now))
    };
    let started = Instant::now();
    let before = client_time(started);
    // Set for the earliest the time can run out, and moved on, when it fires, by the time
    // the client was waited for meanwhile: no wake per chunk.
    let clock = async {
        let mut deadline = started + limit;
        loop {
            tokio::time::sleep_until(deadline).await;
            let now = Instant::now();
            deadline = started + limit + client_time(now).saturating_sub(before);
            if now >= deadline {
                return;
            }
        }
    };
    tokio::select! {
        biased;
        answer = answer => Some(answer),
        () = clock => None,
    }
}

/// The body's end of an [`Upload`].
struct UploadEnd(Arc<UploadSignal>);

impl UploadEnd {
    fn end(&self) {
        self.0.over.store(true, Ordering::Release);
    }

    /// The body began waiting for the client at `at`.
    fn wait_began(&self, at: Instant) {
        let first = *self.0.first_wait.get_or_init(|| at);
        let since = micros(at.saturating_duration_since(first));
        self.0.waiting_since.store(since + 1, Ordering::Relaxed);
    }

    /// A chunk, or the end, came (or nobody will read the body to see one): the wait the
    /// idle timer was timing, if any, is over.
    fn wait_over(&self, idle: &mut IdleTimer) {
        if let Some(began) = idle.touch() {
            self.wait_ended(began);
        }
    }

    /// The wait that began at `began` has ended.
    fn wait_ended(&self, began: Instant) {
        let waited = micros(began.elapsed().min(self.0.cap));
        self.0.waited.fetch_add(waited, Ordering::Release);
        self.0.waiting_since.store(0, Ordering::Release);
    }
}

impl Drop for UploadEnd {
    fn drop(&mut self) {
        // A body dropped while it waited for the client waits no more.
        let since = self.0.waiting_since.load(Ordering::Relaxed);
        if since != 0
            && let Some(first) = self.0.first_wait.get()
        {
            self.wait_ended(*first + Duration::from_micros(since - 1));
        }
        self.end();
    }
}

impl fmt::Debug for RequestBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner {
            RequestInner::Empty => f.write_str("RequestBody::Empty"),
            RequestInner::Full(b) => write!(
                f,
                "RequestBody::Full({} bytes)",
                b.as_ref().map_or(0, Bytes::len)
            ),
            RequestInner::Streaming { limit, .. } => {
                write!(f, "RequestBody::Streaming(limit {limit})")
            }
            RequestInner::Again { read, rest } => {
                write!(
                    f,
                    "RequestBody::Again({} chunks, then {rest:?})",
                    read.len()
                )
            }
        }
    }
}

impl RequestBody {
    pub fn empty() -> RequestBody {
        RequestBody {
            inner: RequestInner::Empty,
        }
    }

    pub fn full(bytes: Bytes) -> RequestBody {
        RequestBody {
            inner: RequestInner::Full(Some(bytes)),
        }
    }

    /// A body streamed from the client, at most `limit` bytes, failing after `idle` without
    /// a byte. hyper ends an HTTP/2 request body cleanly when the client resets the stream
    /// with `NO_ERROR` (an early response, in HTTP/2's terms), so a body cut off by a reset
    /// would reach the provider as a complete request: over HTTP/2, a body that ends without
    /// END_STREAM fails instead.
    pub fn streaming(incoming: ClientBody, limit: u64, idle: Duration) -> RequestBody {
        RequestBody {
            inner: RequestInner::Streaming {
                incoming,
                remaining: limit,
                limit,
                idle: IdleTimer::new(idle),
                upload: UploadEnd(Arc::new(UploadSignal {
                    cap: idle,
                    over: AtomicBool::new(false),
                    first_wait: OnceLock::new(),
                    waiting_since: AtomicU64::new(0),
                    waited: AtomicU64::new(0),
                })),
            },
        }
    }

    /// The same body to send again: the chunks of it already read (`read`, in order), then
    /// the rest of `rest`.
    pub(crate) fn again(read: Vec<Bytes>, mut rest: RequestBody) -> RequestBody {
        // What was read goes first, so the client is not what it waits for until then.
        rest.stop_waiting();
        RequestBody {
            inner: RequestInner::Again {
                read: read.into(),
                rest: Box::new(rest),
            },
        }
    }

    /// Ends a wait for the client's bytes that nobody will end by reading the body.
    fn stop_waiting(&mut self) {
        match &mut self.inner {
            RequestInner::Streaming { idle, upload, .. } => upload.wait_over(idle),
            RequestInner::Again { rest, .. } => rest.stop_waiting(),
            RequestInner::Empty | RequestInner::Full(_) => {}
        }
    }

    /// For a body streamed from the client: whether it is still being read. Empty and full
    /// bodies are already in memory, and so is one whose end has already arrived.
    pub(crate) fn upload(&self) -> Option<Upload> {
        match &self.inner {
            RequestInner::Streaming { incoming, .. } if incoming.is_end_stream() => None,
            RequestInner::Streaming { upload, .. } => Some(Upload(upload.0.clone())),
            RequestInner::Again { rest, .. } => rest.upload(),
            RequestInner::Empty | RequestInner::Full(_) => None,
        }
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        match &mut self.get_mut().inner {
            RequestInner::Empty => Poll::Ready(None),
            RequestInner::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            RequestInner::Again { read, rest } => match read.pop_front() {
                Some(chunk) => Poll::Ready(Some(Ok(Frame::data(chunk)))),
                None => Pin::new(&mut **rest).poll_frame(cx),
            },
            RequestInner::Streaming {
                incoming,
                remaining,
                limit,
                idle,
                upload,
            } => match Pin::new(&mut *incoming).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    upload.wait_over(idle);
                    if let Some(data) = frame.data_ref() {
                        let len = data.len() as u64;
                        if len > *remaining {
                            return Poll::Ready(Some(Err(BodyError::TooLarge { limit: *limit })));
                        }
                        *remaining -= len;
                    }
                    if incoming.is_end_stream() {
                        upload.end();
                    }
                    Poll::Ready(Some(Ok(frame)))
                }
                Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(BodyError::Transport(e.into())))),
                // h2 tells a stream that ended with END_STREAM from one that was reset.
                Poll::Ready(None) if incoming.http2 && !incoming.is_end_stream() => {
                    Poll::Ready(Some(Err(BodyError::Transport(
                        "the client reset the stream before the body's end".into(),
                    ))))
                }
                Poll::Ready(None) => {
                    upload.wait_over(idle);
                    upload.end();
                    Poll::Ready(None)
                }
                Poll::Pending => {
                    let waited = idle.waiting_since.is_some();
                    let expired = idle.poll_expired(cx);
                    if !waited && let Some(began) = idle.waiting_since {
                        upload.wait_began(began);
                    }
                    expired.map(|e| Some(Err(e)))
                }
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            RequestInner::Empty => true,
            RequestInner::Full(bytes) => bytes.is_none(),
            RequestInner::Again { read, rest } => read.is_empty() && rest.is_end_stream(),
            RequestInner::Streaming { incoming, .. } => incoming.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            RequestInner::Empty => SizeHint::with_exact(0),
            RequestInner::Full(bytes) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            RequestInner::Again { read, rest } => {
                let read: u64 = read.iter().map(|chunk| chunk.len() as u64).sum();
                let rest = rest.size_hint();
                let mut hint = SizeHint::new();
                hint.set_lower(rest.lower() + read);
                if let Some(upper) = rest.upper() {
                    hint.set_upper(upper + read);
                }
                hint
            }
            RequestInner::Streaming { incoming, .. } => incoming.size_hint(),
        }
    }
}

/// A client's request body as hyper reads it.
///
/// Over HTTP/2 one dropped before its end (relayd answered early: a refusal before the body
/// was read, a provider that answered before it had it all) is read to its end in the
/// background and thrown away, within the bounds of HTTP/1's lingering close. Dropped at
/// once, its stream would be reset with `NO_ERROR` after the answer, which HTTP/2 allows
/// but some clients (Python's httpcore, curl) never take as the end of their upload: they
/// wait for window to send the rest of a body larger than the stream window, and never read
/// the answer.
#[derive(Debug)]
pub struct ClientBody {
    /// Always there until the body drops.
    incoming: Option<Incoming>,
    /// The body is an HTTP/2 stream's, whose end must be its END_STREAM flag.
    http2: bool,
}

impl ClientBody {
    pub fn new(incoming: Incoming, version: http::Version) -> ClientBody {
        ClientBody {
            incoming: Some(incoming),
            http2: version == http::Version::HTTP_2,
        }
    }

    /// `req` with its body as a `ClientBody`.
    pub fn of(req: http::Request<Incoming>) -> http::Request<ClientBody> {
        let version = req.version();
        req.map(|incoming| ClientBody::new(incoming, version))
    }
}

impl Body for ClientBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match &mut self.get_mut().incoming {
            Some(incoming) => Pin::new(incoming).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.incoming.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.incoming
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Body::size_hint)
    }
}

impl Drop for ClientBody {
    fn drop(&mut self) {
        if !self.http2 {
            return;
        }
        let Some(incoming) = self.incoming.take() else {
            return;
        };
        if incoming.is_end_stream() {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(read_to_its_end(incoming));
        }
    }
}

/// Reads and drops what is left of an HTTP/2 request body, until its end, an error, or the
/// lingering close's bounds: at most [`LINGER_BYTES`], and no wait of more than
/// [`LINGER_TIME`] for the next frame. Over HTTP/1 the time bounds the whole close, since a lingering connection holds a
/// connection permit; here it bounds each wait, since a client such as httpcore sends a
/// large body over HTTP/2 slowly (a few MiB/s, one window at a time), and a stream that
/// keeps sending holds no more than an upload in progress does. [`LINGER_MAX`] bounds the
/// whole. The stream is released when this ends.
async fn read_to_its_end(mut incoming: Incoming) {
    let reading = async {
        let mut left = LINGER_BYTES;
        while let Ok(Some(Ok(frame))) = tokio::time::timeout(LINGER_TIME, incoming.frame()).await {
            let read = frame.data_ref().map_or(0, |data| data.len() as u64);
            left = left.saturating_sub(read);
            if left == 0 {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(LINGER_MAX, reading).await;
}

/// The longest an HTTP/2 body is read after its answer: 64 MiB at a little over 2 MiB/s.
const LINGER_MAX: Duration = Duration::from_secs(30);

/// Something that must live exactly as long as a response stream: metrics of open
/// streams, the broker's in-flight count. Dropped when the body ends or is dropped.
pub trait StreamGuard: Send + Sync + 'static {
    /// The body ended with an error of the side it comes from (it broke off, or, when
    /// `idle`, no byte came for the idle time), just before the client's answer is aborted.
    fn broke_off(&mut self, _idle: bool) {}
}

/// Sees the side copy of a relayed response body (SPEC §3.3): every data frame as it passes,
/// then how the body ended. It runs on the response path, so it must only copy within its
/// own bound and never wait.
pub trait BodyTap: Send + Sync + 'static {
    fn data(&mut self, chunk: &Bytes);
    fn end(self: Box<Self>, end: BodyEnd);
}

/// How a tapped body ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyEnd {
    /// The provider's body ended normally.
    Complete,
    /// The provider's body failed, or no byte came for the idle time.
    Failed,
    /// The client went away (the body was dropped before its end).
    Dropped,
}

/// Holds a tap until the body ends; a body dropped before its end tells the tap so.
struct TapSlot(Option<Box<dyn BodyTap>>);

impl TapSlot {
    fn data(&mut self, chunk: &Bytes) {
        if let Some(tap) = &mut self.0 {
            tap.data(chunk);
        }
    }

    fn end(&mut self, end: BodyEnd) {
        if let Some(tap) = self.0.take() {
            tap.end(end);
        }
    }
}

impl Drop for TapSlot {
    fn drop(&mut self) {
        self.end(BodyEnd::Dropped);
    }
}

/// The body of a response on its way to the client.
pub struct ResponseBody {
    inner: ResponseInner,
    /// Keeps the connection counted as busy until the body is done (keep-alive idle).
    active: Option<ActiveRequest>,
}

enum ResponseInner {
    Full(Option<Bytes>),
    Forward {
        incoming: UpstreamBody,
        idle: IdleTimer,
        tap: TapSlot,
        /// Held until the body is finished or dropped.
        guard: Option<Box<dyn StreamGuard>>,
    },
}

impl fmt::Debug for ResponseBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner {
            ResponseInner::Full(_) => f.write_str("ResponseBody::Full"),
            ResponseInner::Forward { .. } => f.write_str("ResponseBody::Forward"),
        }
    }
}

impl ResponseBody {
    pub fn empty() -> ResponseBody {
        ResponseBody {
            inner: ResponseInner::Full(None),
            active: None,
        }
    }

    pub fn full(bytes: impl Into<Bytes>) -> ResponseBody {
        let bytes = bytes.into();
        ResponseBody {
            inner: ResponseInner::Full((!bytes.is_empty()).then_some(bytes)),
            active: None,
        }
    }

    /// Relays an upstream body frame by frame. An upstream failure or `idle` without a
    /// byte ends the body with an error, which aborts the client's response.
    pub fn forward(
        incoming: UpstreamBody,
        idle: Duration,
        guard: Option<Box<dyn StreamGuard>>,
    ) -> ResponseBody {
        ResponseBody {
            inner: ResponseInner::Forward {
                incoming,
                idle: IdleTimer::new(idle),
                tap: TapSlot(None),
                guard,
            },
            active: None,
        }
    }

    /// Gives a relayed body's side copy to `tap`; a body that is not relayed has none.
    pub fn set_tap(&mut self, new: Box<dyn BodyTap>) {
        if let ResponseInner::Forward { tap, incoming, .. } = &mut self.inner {
            *tap = TapSlot(Some(new));
            // An empty body is never polled: it has already ended.
            if incoming.is_end_stream() {
                tap.end(BodyEnd::Complete);
            }
        }
    }

    /// Ties the connection's busy mark to this body.
    pub(crate) fn attach(&mut self, active: ActiveRequest) {
        self.active = Some(active);
    }
}

/// Tells a relayed body's tap and guard that it broke off (when `idle`, that no byte came
/// for the idle time).
fn broke_off(tap: &mut TapSlot, guard: &mut Option<Box<dyn StreamGuard>>, idle: bool) {
    tap.end(BodyEnd::Failed);
    if let Some(guard) = guard {
        guard.broke_off(idle);
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        match &mut self.get_mut().inner {
            ResponseInner::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            ResponseInner::Forward {
                incoming,
                idle,
                tap,
                guard,
            } => match Pin::new(&mut *incoming).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    idle.touch();
                    if let Some(data) = frame.data_ref() {
                        tap.data(data);
                    }
                    // hyper stops polling a body that says it has ended.
                    if incoming.is_end_stream() {
                        tap.end(BodyEnd::Complete);
                    }
                    Poll::Ready(Some(Ok(frame)))
                }
                Poll::Ready(Some(Err(e))) => {
                    broke_off(tap, guard, false);
                    Poll::Ready(Some(Err(BodyError::Transport(e))))
                }
                Poll::Ready(None) => {
                    tap.end(BodyEnd::Complete);
                    Poll::Ready(None)
                }
                Poll::Pending => idle.poll_expired(cx).map(|e| {
                    broke_off(tap, guard, true);
                    Some(Err(e))
                }),
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            ResponseInner::Full(bytes) => bytes.is_none(),
            ResponseInner::Forward { incoming, .. } => incoming.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            ResponseInner::Full(bytes) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            ResponseInner::Forward { incoming, .. } => incoming.size_hint(),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
