//! Per-connection bookkeeping under hyper (SPEC §3.6): the header read timeout, the
//! keep-alive idle timeout, and the request-smuggling check hyper does not make.
//!
//! hyper accepts a request with both `Content-Length` and `Transfer-Encoding` (it drops
//! the length, reads chunked, and closes afterwards), and its header read timeout also
//! runs while a keep-alive connection is idle. Relay must answer the first with 400 and
//! keep the two timeouts apart, so [`ConnIo`] watches the bytes hyper reads: it finds
//! each HTTP/1 request head with `httparse`, follows the body framing to the next head,
//! and records per head whether its framing headers were ambiguous. hyper stays the one
//! parser that serves requests; this only observes.
//!
//! Where the watcher cannot follow an HTTP/1 byte stream (bytes hyper will refuse, or that
//! disagree with what it expects), it says so: a request without a verdict is refused as
//! ambiguous, the connection closes after the current answer, and it is timed by the
//! header timeout meanwhile, so losing the watcher never leaves a connection untimed.

use std::collections::VecDeque;
use std::future::{Future, poll_fn};
use std::io;
use std::mem::MaybeUninit;
use std::pin::{Pin, pin};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use futures_util::task::AtomicWaker;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::oneshot;
use tokio::time::Instant;

/// Longest request head tracked; hyper refuses longer ones itself (431).
const MAX_HEAD: usize = 64 * 1024;
/// Most header lines in a head that is followed; hyper refuses more (431).
const MAX_HEADERS: usize = 128;
/// Longest chunk-size line followed (its size and extension); hyper refuses more than
/// 16 KiB of extensions in one body, so a longer line never reaches a handler.
const MAX_CHUNK_LINE: usize = 64 * 1024;
/// The connection preface of HTTP/2, which a client speaking it with prior knowledge sends
/// before anything else.
const H2_CONNECTION_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Its request line, which is enough for the watcher to stop following HTTP/1.
const H2_PREFACE: &[u8] = H2_CONNECTION_PREFACE.split_at(14).0;

/// What the read side saw of one HTTP/1 request head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadVerdict {
    Clean,
    /// `Content-Length` with `Transfer-Encoding`, or differing `Content-Length`s.
    AmbiguousFraming,
    /// A transfer coding besides a single `chunked` (`gzip, chunked`, or two
    /// `Transfer-Encoding` lines): hyper undoes the chunking and leaves the rest undone, so
    /// the body would go on still coded, with nothing saying so.
    UnsupportedTransferCoding,
}

/// State shared between a connection's IO, its requests and its watchdog.
#[derive(Debug)]
pub struct ConnState {
    epoch: Instant,
    /// Milliseconds since `epoch` (+1) when the current head's first byte arrived; 0 when
    /// no head is being read.
    head_started: AtomicU64,
    /// Milliseconds since `epoch` of the last HTTP/1 byte read that was not a blank line
    /// between requests, or of the last request finished. HTTP/2 bytes (PING, SETTINGS,
    /// WINDOW_UPDATE) are no activity: only streams are.
    last_activity: AtomicU64,
    active: AtomicUsize,
    /// An HTTP/1 watcher follows this connection, so every request must have a verdict.
    watched: AtomicBool,
    /// Milliseconds since `epoch` (+1) when the watcher lost the HTTP/1 byte stream; 0
    /// while it follows it.
    untracked_since: AtomicU64,
    verdicts: Mutex<VecDeque<HeadVerdict>>,
    /// Milliseconds since `epoch` (+1) since when every write has found the client's
    /// socket full; 0 once a write goes through.
    write_blocked_since: AtomicU64,
    /// The watchdog, woken when a deadline may have moved earlier.
    wake: AtomicWaker,
    /// A request on this connection proved its right to be served
    /// ([`crate::server::ServeOptions::unvouched`]).
    vouched: AtomicBool,
}

impl ConnState {
    pub fn new() -> ConnState {
        ConnState {
            epoch: Instant::now(),
            head_started: AtomicU64::new(0),
            last_activity: AtomicU64::new(0),
            active: AtomicUsize::new(0),
            watched: AtomicBool::new(false),
            untracked_since: AtomicU64::new(0),
            verdicts: Mutex::new(VecDeque::new()),
            write_blocked_since: AtomicU64::new(0),
            wake: AtomicWaker::new(),
            vouched: AtomicBool::new(false),
        }
    }

    /// Marks the connection as one a request proved the right to be served on: it is no
    /// longer among the first closed when unvouched connections are too many.
    pub fn vouch(&self) {
        self.vouched.store(true, Ordering::Relaxed);
    }

    pub fn is_vouched(&self) -> bool {
        self.vouched.load(Ordering::Relaxed)
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn at(&self, ms: u64) -> Instant {
        self.epoch + Duration::from_millis(ms)
    }

    fn touch(&self, now: u64) {
        self.last_activity.fetch_max(now, Ordering::Relaxed);
    }

    /// The verdict on the next request head, in order. A request on a watched HTTP/1
    /// connection without a verdict (the watcher lost the byte stream) is
    /// `AmbiguousFraming`: it is refused, never assumed clean. Requests on connections no
    /// watcher follows (HTTP/2) are `Clean`.
    pub fn take_verdict(&self) -> HeadVerdict {
        let next = relay_logging::sync::lock(&self.verdicts, "framing verdicts")
            .and_then(|mut v| v.pop_front());
        match next {
            Some(verdict) => verdict,
            None if self.watched.load(Ordering::Relaxed) => HeadVerdict::AmbiguousFraming,
            None => HeadVerdict::Clean,
        }
    }

    /// True once the watcher lost the HTTP/1 byte stream.
    pub fn is_untracked(&self) -> bool {
        self.untracked_since.load(Ordering::Relaxed) != 0
    }

    /// True when the answer being written must be the connection's last: the watcher lost
    /// the byte stream and has judged no request head after this one. Requests it judged
    /// before it lost the stream (pipelined in one read with a head it refused, say) are
    /// answered first; the first one after them has no verdict, and is refused.
    pub fn ends_with_this_answer(&self) -> bool {
        self.is_untracked()
            && relay_logging::sync::lock(&self.verdicts, "framing verdicts")
                .is_none_or(|v| v.is_empty())
    }

    /// Marks a request as in progress until the returned guard is dropped. On HTTP/2 the
    /// first one ends the first-request timer (`ConnIo::new`); HTTP/1's watcher times
    /// heads itself.
    pub fn begin_request(self: &std::sync::Arc<Self>) -> ActiveRequest {
        if !self.watched.load(Ordering::Relaxed) {
            self.head_started.store(0, Ordering::Relaxed);
        }
        self.active.fetch_add(1, Ordering::Relaxed);
        ActiveRequest { conn: self.clone() }
    }

    /// Notes whether a write to the client went through or found its socket full. The
    /// first write that waits starts the stalled-write timer and wakes the watchdog; the
    /// next that goes through stops it.
    fn on_write_poll(&self, waiting: bool) {
        let blocked = self.write_blocked_since.load(Ordering::Relaxed) != 0;
        if waiting && !blocked {
            self.write_blocked_since
                .store(self.now_ms() + 1, Ordering::Relaxed);
            self.wake.wake();
        } else if !waiting && blocked {
            self.write_blocked_since.store(0, Ordering::Relaxed);
        }
    }

    /// Resolves when the connection should close: a head that is not complete within
    /// `header_timeout` yields [`Expiry::HeaderTimeout`]; an idle connection with no request
    /// for `keepalive_idle` yields [`Expiry::Idle`]; a connection whose byte stream the
    /// watcher lost yields [`Expiry::Untracked`] `header_timeout` after that or after its
    /// last request, whichever is later; a client that has read nothing of what was written
    /// to it for `write_stall` yields [`Expiry::WriteStalled`].
    pub async fn expired(
        &self,
        header_timeout: Duration,
        keepalive_idle: Duration,
        write_stall: Duration,
    ) -> Expiry {
        // One timer for the connection's life. It may be set earlier than the deadline,
        // never later: activity only moves a deadline later, so when it does the timer is
        // left alone and, when it fires early, the state is read again and the timer set
        // anew. What can move a deadline earlier wakes this and resets the timer at once: a
        // read that leaves the head timer changed, the watcher losing the byte stream, and
        // the last request ending on a connection it lost.
        let mut timer = pin!(tokio::time::sleep(keepalive_idle));
        poll_fn(|cx| {
            // Registered before the state is read, so a change made after the read wakes
            // this again.
            self.wake.register(cx.waker());
            loop {
                let deadline = match self.deadline(header_timeout, keepalive_idle, write_stall) {
                    Ok(deadline) => deadline,
                    Err(expiry) => return Poll::Ready(expiry),
                };
                if timer.is_elapsed() || deadline < timer.deadline() {
                    timer.as_mut().reset(deadline);
                }
                if timer.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
            }
        })
        .await
    }

    /// When the connection expires as things stand, or why it has expired.
    fn deadline(
        &self,
        header_timeout: Duration,
        keepalive_idle: Duration,
        write_stall: Duration,
    ) -> Result<Instant, Expiry> {
        let now = self.at(self.now_ms());
        let deadline = self.read_deadline(now, header_timeout, keepalive_idle)?;
        let blocked = self.write_blocked_since.load(Ordering::Relaxed);
        if blocked == 0 {
            return Ok(deadline);
        }
        // Bytes from the client count too: one still uploading is not idle, though it reads
        // nothing until it is done (HTTP/1 only, where every byte read is activity).
        let since = blocked.max(self.last_activity.load(Ordering::Relaxed) + 1);
        let stalled = self.at(since - 1) + write_stall;
        if now >= stalled {
            return Err(Expiry::WriteStalled);
        }
        Ok(deadline.min(stalled))
    }

    /// [`ConnState::deadline`] as the reads and requests alone set it.
    fn read_deadline(
        &self,
        now: Instant,
        header_timeout: Duration,
        keepalive_idle: Duration,
    ) -> Result<Instant, Expiry> {
        let head_started = self.head_started.load(Ordering::Relaxed);
        if head_started != 0 {
            let mut deadline = (
                self.at(head_started - 1) + header_timeout,
                Expiry::HeaderTimeout,
            );
            if !self.watched.load(Ordering::Relaxed) {
                // HTTP/2 before its first stream is idle too, whichever ends first.
                let idle = self.at(self.last_activity.load(Ordering::Relaxed)) + keepalive_idle;
                if idle < deadline.0 {
                    deadline = (idle, Expiry::Idle);
                }
            }
            return if now >= deadline.0 {
                Err(deadline.1)
            } else {
                Ok(deadline.0)
            };
        }
        if self.active.load(Ordering::Relaxed) != 0 {
            return Ok(now + keepalive_idle);
        }
        let last = self.at(self.last_activity.load(Ordering::Relaxed));
        let untracked = self.untracked_since.load(Ordering::Relaxed);
        let (deadline, expiry) = if untracked == 0 {
            (last + keepalive_idle, Expiry::Idle)
        } else {
            let since = last.max(self.at(untracked - 1));
            (
                since + header_timeout.min(keepalive_idle),
                Expiry::Untracked,
            )
        };
        if now >= deadline {
            Err(expiry)
        } else {
            Ok(deadline)
        }
    }

    /// Records that the byte stream can no longer be followed.
    fn lost(&self, now: u64) -> Framing {
        let _ =
            self.untracked_since
                .compare_exchange(0, now + 1, Ordering::Relaxed, Ordering::Relaxed);
        self.wake.wake();
        Framing::Lost
    }

    /// Parses the head `bytes` start with and judges it: its length and the framing of what
    /// follows. `None` when it is incomplete or does not parse: the caller gathers the bytes
    /// until the head's end, so that an invalid head is judged whole, and a split HTTP/2
    /// preface (which httparse refuses at its version) is still recognised.
    fn on_head(&self, bytes: &[u8], now: u64) -> Option<(usize, Framing)> {
        let mut headers = [const { MaybeUninit::uninit() }; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut []);
        match req.parse_with_uninit_headers(bytes, &mut headers) {
            Ok(httparse::Status::Complete(end)) => Some((end, self.judge(&req, now))),
            Ok(httparse::Status::Partial) | Err(_) => None,
        }
    }

    /// Judges the framing headers of a parsed head and returns the framing of what follows.
    fn judge(&self, req: &httparse::Request<'_, '_>, now: u64) -> Framing {
        // A `Transfer-Encoding` line, and whether any says more than a single `chunked`.
        let mut transfer_encoding = false;
        let mut other_coding = false;
        // The first `Content-Length` value, and whether any other differs from it.
        let mut length: Option<&[u8]> = None;
        let mut differing = false;
        for h in req.headers.iter() {
            if h.name.eq_ignore_ascii_case("transfer-encoding") {
                other_coding |=
                    transfer_encoding || !h.value.trim_ascii().eq_ignore_ascii_case(b"chunked");
                transfer_encoding = true;
            } else if h.name.eq_ignore_ascii_case("content-length") {
                for value in h.value.split(|b| *b == b',').map(<[u8]>::trim_ascii) {
                    match length {
                        None => length = Some(value),
                        Some(first) => differing |= first != value,
                    }
                }
            }
        }
        let verdict = if (transfer_encoding && length.is_some()) || differing {
            HeadVerdict::AmbiguousFraming
        } else if other_coding {
            HeadVerdict::UnsupportedTransferCoding
        } else {
            HeadVerdict::Clean
        };
        if let Some(mut verdicts) = relay_logging::sync::lock(&self.verdicts, "framing verdicts") {
            verdicts.push_back(verdict);
        }
        // An upgrade request is followed like any other until hyper writes its `101`
        // (`on_write`): a refused upgrade leaves an HTTP/1 connection that stays checked.
        if verdict != HeadVerdict::Clean {
            // The request is refused and the connection closed.
            return self.lost(now);
        }
        // A clean head's `Transfer-Encoding` is exactly one `chunked`.
        if transfer_encoding {
            return Framing::ChunkSize(ChunkLine::default());
        }
        match length {
            None => Framing::Head(Vec::new()),
            Some(text) => match crate::headers::decimal(text) {
                Some(0) => Framing::Head(Vec::new()),
                Some(n) => Framing::Fixed(n),
                // hyper refuses a length it cannot read.
                None => self.lost(now),
            },
        }
    }
}

impl Default for ConnState {
    fn default() -> Self {
        ConnState::new()
    }
}

/// Why a connection's watchdog fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    HeaderTimeout,
    Idle,
    /// The watcher lost the byte stream and nothing is in flight.
    Untracked,
    /// The client read nothing of what was written to it for `stream_idle_secs`: no byte
    /// moved toward it, and none comes from the provider while the answer waits.
    WriteStalled,
}

/// Held while a request is in progress on a connection (until its response body ends).
#[derive(Debug)]
pub struct ActiveRequest {
    conn: std::sync::Arc<ConnState>,
}

impl Drop for ActiveRequest {
    fn drop(&mut self) {
        let now = self.conn.now_ms();
        self.conn.last_activity.fetch_max(now, Ordering::Relaxed);
        // The idle deadline from now is later than any the watchdog has set, unless the
        // watcher lost the byte stream: then the header timeout may end it sooner.
        if self.conn.active.fetch_sub(1, Ordering::Relaxed) == 1 && self.conn.is_untracked() {
            self.conn.wake.wake();
        }
    }
}

/// Where the tracker is in the HTTP/1 byte stream.
#[derive(Debug)]
enum Framing {
    Head(Vec<u8>),
    Fixed(u64),
    ChunkSize(ChunkLine),
    ChunkData(u64),
    ChunkEnd(u8),
    Trailers(Vec<u8>),
    /// HTTP/2, or a connection upgraded to another protocol: no HTTP/1 request follows.
    Off,
    /// HTTP/1 bytes the tracker cannot follow (hyper will refuse them, or they disagree
    /// with what it expects): see [`ConnState::is_untracked`].
    Lost,
}

/// A chunk-size line read so far: the hexadecimal size, then anything (whitespace, the
/// extensions) up to its LF, which is followed without being buffered.
#[derive(Debug, Default)]
struct ChunkLine {
    size: u64,
    digits: u8,
    /// The size has ended; the rest of the line is skipped.
    in_rest: bool,
    len: usize,
}

/// Whatever must live exactly as long as the connection's socket (its connection permit),
/// including after an upgrade hands the socket to another task.
pub struct Keep {
    _held: Box<dyn Send + Sync>,
}

impl Keep {
    pub fn new(value: impl Send + Sync + 'static) -> Keep {
        Keep {
            _held: Box::new(value),
        }
    }
}

impl std::fmt::Debug for Keep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Keep")
    }
}

/// The socket and its [`Keep`], handed back when hyper lets go of a connection it did not
/// upgrade, so the server can close it gently.
pub type GiveBack<T> = oneshot::Sender<(T, Option<Keep>)>;

/// The IO of one accepted connection, observed on the way to hyper.
#[derive(Debug)]
pub struct ConnIo<T> {
    /// `None` only after `drop` has handed the socket back.
    inner: Option<T>,
    state: std::sync::Arc<ConnState>,
    framing: Framing,
    keep: Option<Keep>,
    give_back: Option<GiveBack<T>>,
    sniffed: Sniffed,
}

/// The first bytes of a connection, read to tell HTTP/2 with prior knowledge from HTTP/1
/// ([`ConnIo::poll_sniff_h2`]) and served again at the start of hyper's first read.
#[derive(Debug, Default)]
struct Sniffed {
    bytes: [u8; H2_CONNECTION_PREFACE.len()],
    len: usize,
    served: usize,
    /// The error of the read that followed the last of them, for the next read: the one
    /// that returned them must return them.
    error: Option<io::Error>,
}

impl<T> Drop for ConnIo<T> {
    fn drop(&mut self) {
        if let (Some(inner), Some(give_back)) = (self.inner.take(), self.give_back.take()) {
            // When nobody waits any more (the connection was upgraded, or timed out), the
            // socket and its keep are simply dropped here.
            let _ = give_back.send((inner, self.keep.take()));
        }
    }
}

impl<T> ConnIo<T> {
    /// Holds `keep` for as long as the socket lives, and sends both to `give_back` when the
    /// wrapper is dropped.
    pub fn with_keep(mut self, keep: Keep, give_back: GiveBack<T>) -> ConnIo<T> {
        self.keep = Some(keep);
        self.give_back = Some(give_back);
        self
    }

    fn inner_mut(&mut self) -> io::Result<Pin<&mut T>>
    where
        T: Unpin,
    {
        match self.inner.as_mut() {
            Some(inner) => Ok(Pin::new(inner)),
            None => Err(io::ErrorKind::NotConnected.into()),
        }
    }

    pub fn new(inner: T, state: std::sync::Arc<ConnState>, http1: bool) -> ConnIo<T> {
        // The first request is timed from the start of the connection, so a client that
        // connects and sends nothing, or trickles its first HTTP/2 header block, is cut at
        // the header timeout like a slow head (hyper's own header timeout did the same for
        // HTTP/1), not kept for the idle time. On HTTP/2 the first stream ends the timer
        // (`begin_request`); on HTTP/1 the end of the first head does.
        let now = state.now_ms();
        state.head_started.store(now + 1, Ordering::Relaxed);
        if http1 {
            state.watched.store(true, Ordering::Relaxed);
        }
        ConnIo {
            inner: Some(inner),
            state,
            framing: if http1 {
                Framing::Head(Vec::new())
            } else {
                Framing::Off
            },
            keep: None,
            give_back: None,
            sniffed: Sniffed::default(),
        }
    }

    /// Reads the connection's first bytes until they show whether it starts with HTTP/2's
    /// connection preface, as a client speaking HTTP/2 with prior knowledge does. Nothing
    /// read here is lost or observed yet: hyper's first read gets it back together with what
    /// the socket holds by then, so a request head that arrived whole is read, and judged,
    /// whole, and hyper's read buffer keeps its first size.
    pub fn poll_sniff_h2(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<bool>>
    where
        T: AsyncRead + Unpin,
    {
        let sniffed = &mut self.sniffed;
        let preface = H2_CONNECTION_PREFACE;
        while sniffed.len < preface.len() {
            let Some(inner) = self.inner.as_mut() else {
                return Poll::Ready(Err(io::ErrorKind::NotConnected.into()));
            };
            let from = sniffed.len;
            let mut buf = ReadBuf::new(&mut sniffed.bytes[from..]);
            ready!(Pin::new(inner).poll_read(cx, &mut buf))?;
            let got = buf.filled().len();
            sniffed.len += got;
            if got == 0 || sniffed.bytes[from..sniffed.len] != preface[from..sniffed.len] {
                return Poll::Ready(Ok(false));
            }
        }
        Poll::Ready(Ok(true))
    }

    /// Follows the bytes hyper just read.
    fn observe(&mut self, bytes: &[u8]) {
        let head_started = self.state.head_started.load(Ordering::Relaxed);
        self.follow(bytes);
        // A head that started or ended in this read moves the deadline, perhaps earlier (a
        // head on an idle connection; a head's end when the keep-alive time is shorter
        // than the header timeout). One that started and ended in it, the usual request,
        // moves nothing and costs the watchdog no turn.
        if self.state.head_started.load(Ordering::Relaxed) != head_started {
            self.state.wake.wake();
        }
    }

    fn follow(&mut self, mut bytes: &[u8]) {
        let now = self.state.now_ms();
        while !bytes.is_empty() {
            bytes = match &mut self.framing {
                Framing::Off | Framing::Lost => return,
                Framing::Head(buf) => {
                    if buf.is_empty() {
                        // Blank lines before a request line are allowed and skipped. They
                        // are no activity: they neither start the head timer nor keep an
                        // idle connection open.
                        let start = bytes.iter().position(|b| *b != b'\r' && *b != b'\n');
                        let Some(start) = start else { return };
                        bytes = &bytes[start..];
                        // Keeps the start of the connection for its first head.
                        let _ = self.state.head_started.compare_exchange(
                            0,
                            now + 1,
                            Ordering::Relaxed,
                            Ordering::Relaxed,
                        );
                    }
                    self.state.touch(now);
                    // The usual case, a whole head in one read, is judged where it lies,
                    // parsed once; only a head split across reads is gathered first.
                    if buf.is_empty()
                        && let Some((end, framing)) = self.state.on_head(bytes, now)
                    {
                        self.state.head_started.store(0, Ordering::Relaxed);
                        self.framing = framing;
                        bytes = &bytes[end..];
                        continue;
                    }
                    let searched = buf.len().saturating_sub(2);
                    buf.extend_from_slice(bytes);
                    if buf.starts_with(H2_PREFACE) {
                        // Prior-knowledge HTTP/2 on plain TCP: no HTTP/1 watcher from here;
                        // the connection's first-request timer runs on until a stream.
                        self.state.watched.store(false, Ordering::Relaxed);
                        self.framing = Framing::Off;
                        return;
                    }
                    match head_end(buf, searched) {
                        Some(end) => {
                            let rest_len = buf.len() - end;
                            let head = std::mem::take(buf);
                            self.state.head_started.store(0, Ordering::Relaxed);
                            self.framing = match self.state.on_head(&head[..end], now) {
                                Some((_, framing)) => framing,
                                // hyper refuses it (400 or 431) and closes; should it not,
                                // the request has no verdict and is refused.
                                None => self.state.lost(now),
                            };
                            &bytes[bytes.len() - rest_len..]
                        }
                        None => {
                            if buf.len() > MAX_HEAD {
                                // hyper answers 431; the head timer keeps running.
                                self.framing = self.state.lost(now);
                            }
                            return;
                        }
                    }
                }
                Framing::Fixed(remaining) => {
                    self.state.touch(now);
                    let n = (*remaining).min(bytes.len() as u64);
                    *remaining -= n;
                    if *remaining == 0 {
                        self.framing = Framing::Head(Vec::new());
                    }
                    &bytes[n as usize..]
                }
                Framing::ChunkSize(line) => {
                    self.state.touch(now);
                    let mut end = None;
                    let mut overflow = false;
                    for (i, b) in bytes.iter().enumerate() {
                        line.len += 1;
                        if *b == b'\n' {
                            end = Some(i);
                            break;
                        }
                        if line.in_rest {
                            continue;
                        }
                        match char::from(*b).to_digit(16) {
                            Some(digit) if line.digits < 16 => {
                                line.size = line.size * 16 + u64::from(digit);
                                line.digits += 1;
                            }
                            Some(_) => {
                                overflow = true;
                                break;
                            }
                            None => line.in_rest = true,
                        }
                    }
                    match end {
                        _ if overflow => {
                            self.framing = self.state.lost(now);
                            return;
                        }
                        Some(at) => {
                            self.framing = match (line.digits, line.size) {
                                (0, _) => self.state.lost(now),
                                (_, 0) => Framing::Trailers(Vec::new()),
                                (_, size) => Framing::ChunkData(size),
                            };
                            &bytes[at + 1..]
                        }
                        None => {
                            if line.len > MAX_CHUNK_LINE {
                                self.framing = self.state.lost(now);
                            }
                            return;
                        }
                    }
                }
                Framing::ChunkData(remaining) => {
                    self.state.touch(now);
                    let n = (*remaining).min(bytes.len() as u64);
                    *remaining -= n;
                    if *remaining == 0 {
                        self.framing = Framing::ChunkEnd(0);
                    }
                    &bytes[n as usize..]
                }
                Framing::ChunkEnd(seen) => {
                    self.state.touch(now);
                    let need = 2 - usize::from(*seen);
                    let n = need.min(bytes.len());
                    *seen += n as u8;
                    if *seen == 2 {
                        self.framing = Framing::ChunkSize(ChunkLine::default());
                    }
                    &bytes[n..]
                }
                Framing::Trailers(buf) => {
                    self.state.touch(now);
                    let searched = buf.len().saturating_sub(2);
                    buf.extend_from_slice(bytes);
                    let end = if buf.starts_with(b"\n") {
                        Some(1)
                    } else if buf.starts_with(b"\r\n") {
                        Some(2)
                    } else {
                        head_end(buf, searched)
                    };
                    match end {
                        Some(end) => {
                            let rest_len = buf.len() - end;
                            self.framing = Framing::Head(Vec::new());
                            &bytes[bytes.len() - rest_len..]
                        }
                        None => {
                            if buf.len() > MAX_HEAD {
                                self.framing = self.state.lost(now);
                            }
                            return;
                        }
                    }
                }
            };
        }
    }

    /// Sees the start of what hyper writes: a `101` ends HTTP/1 on this connection.
    fn on_write(&mut self, first: &[u8]) {
        if matches!(self.framing, Framing::Head(_)) && first.starts_with(b"HTTP/1.1 101 ") {
            self.framing = Framing::Off;
        }
    }
}

/// Where a head (or a trailer section) that `buf` starts with ends, searching from `from`:
/// just after the first empty line, whether its lines end in CRLF or in a bare LF (httparse,
/// and so hyper, accept both).
fn head_end(buf: &[u8], from: usize) -> Option<usize> {
    (from..buf.len()).find_map(|i| {
        if buf[i] != b'\n' {
            return None;
        }
        match (buf.get(i + 1), buf.get(i + 2)) {
            (Some(b'\n'), _) => Some(i + 2),
            (Some(b'\r'), Some(b'\n')) => Some(i + 3),
            _ => None,
        }
    })
}

impl<T: AsyncRead + Unpin> AsyncRead for ConnIo<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let sniffed = &mut this.sniffed;
        if let Some(error) = sniffed.error.take() {
            return Poll::Ready(Err(error));
        }
        if sniffed.served < sniffed.len {
            let rest = &sniffed.bytes[sniffed.served..sniffed.len];
            let n = rest.len().min(buf.remaining());
            buf.put_slice(&rest[..n]);
            sniffed.served += n;
            // And what followed them, in the same read; none yet is no reason to wait.
            if sniffed.served == sniffed.len
                && buf.remaining() > 0
                && let Some(inner) = this.inner.as_mut()
                && let Poll::Ready(Err(error)) = Pin::new(inner).poll_read(cx, buf)
            {
                sniffed.error = Some(error);
            }
        } else {
            ready!(this.inner_mut()?.poll_read(cx, buf))?;
        }
        this.observe(&buf.filled()[before..]);
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for ConnIo<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.on_write(buf);
        let written = this.inner_mut()?.poll_write(cx, buf);
        this.state.on_write_poll(written.is_pending());
        written
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().inner_mut()?.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().inner_mut()?.poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.as_ref().is_some_and(T::is_write_vectored)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(first) = bufs.iter().find(|b| !b.is_empty()) {
            this.on_write(first);
        }
        let written = this.inner_mut()?.poll_write_vectored(cx, bufs);
        this.state.on_write_poll(written.is_pending());
        written
    }
}

#[cfg(test)]
mod tests;
