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

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;

/// Longest request head tracked; hyper refuses longer ones itself (431).
const MAX_HEAD: usize = 64 * 1024;
/// Longest chunk-size line tracked.
const MAX_CHUNK_LINE: usize = 4096;
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0";

/// What the read side saw of one HTTP/1 request head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadVerdict {
    Clean,
    /// `Content-Length` with `Transfer-Encoding`, or differing `Content-Length`s.
    AmbiguousFraming,
}

/// State shared between a connection's IO, its requests and its watchdog.
#[derive(Debug)]
pub struct ConnState {
    epoch: Instant,
    /// Milliseconds since `epoch` (+1) when the current head's first byte arrived; 0 when
    /// no head is being read.
    head_started: AtomicU64,
    /// Milliseconds since `epoch` of the last byte read or the last request finished.
    last_activity: AtomicU64,
    active: AtomicUsize,
    verdicts: Mutex<VecDeque<HeadVerdict>>,
    wake: Notify,
}

impl ConnState {
    pub fn new() -> ConnState {
        ConnState {
            epoch: Instant::now(),
            head_started: AtomicU64::new(0),
            last_activity: AtomicU64::new(0),
            active: AtomicUsize::new(0),
            verdicts: Mutex::new(VecDeque::new()),
            wake: Notify::new(),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn at(&self, ms: u64) -> Instant {
        self.epoch + Duration::from_millis(ms)
    }

    /// The verdict on the next request head, in order. `Clean` when nothing was tracked
    /// (HTTP/2, or a head the tracker gave up on and hyper will refuse).
    pub fn take_verdict(&self) -> HeadVerdict {
        self.verdicts
            .lock()
            .ok()
            .and_then(|mut v| v.pop_front())
            .unwrap_or(HeadVerdict::Clean)
    }

    /// Marks a request as in progress until the returned guard is dropped.
    pub fn begin_request(self: &std::sync::Arc<Self>) -> ActiveRequest {
        self.active.fetch_add(1, Ordering::Relaxed);
        ActiveRequest { conn: self.clone() }
    }

    /// Resolves when the connection should close: a head that is not complete within
    /// `header_timeout` yields [`Expiry::HeaderTimeout`]; an idle connection with no request
    /// for `keepalive_idle` yields [`Expiry::Idle`].
    pub async fn expired(&self, header_timeout: Duration, keepalive_idle: Duration) -> Expiry {
        loop {
            let now = self.now_ms();
            let head_started = self.head_started.load(Ordering::Relaxed);
            let deadline = if head_started != 0 {
                let deadline = self.at(head_started - 1) + header_timeout;
                if self.at(now) >= deadline {
                    return Expiry::HeaderTimeout;
                }
                deadline
            } else if self.active.load(Ordering::Relaxed) == 0 {
                let deadline = self.at(self.last_activity.load(Ordering::Relaxed)) + keepalive_idle;
                if self.at(now) >= deadline {
                    return Expiry::Idle;
                }
                deadline
            } else {
                self.at(now) + keepalive_idle
            };
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => {}
                _ = self.wake.notified() => {}
            }
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
        if self.conn.active.fetch_sub(1, Ordering::Relaxed) == 1 {
            self.conn.wake.notify_one();
        }
    }
}

/// Where the tracker is in the HTTP/1 byte stream.
#[derive(Debug)]
enum Framing {
    Head(Vec<u8>),
    Fixed(u64),
    ChunkSize(Vec<u8>),
    ChunkData(u64),
    ChunkEnd(u8),
    Trailers(Vec<u8>),
    /// HTTP/2, an upgraded connection, or bytes hyper will refuse: stop tracking.
    Off,
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
        if http1 {
            // The first head is timed from the start of the connection, so a client that
            // connects and sends nothing is cut at the header timeout like a slow head
            // (hyper's own header timeout did the same), not kept for the idle time.
            let now = state.now_ms();
            state.head_started.store(now + 1, Ordering::Relaxed);
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
        }
    }

    fn observe(&mut self, mut bytes: &[u8]) {
        let now = self.state.now_ms();
        self.state.last_activity.fetch_max(now, Ordering::Relaxed);
        while !bytes.is_empty() {
            bytes = match &mut self.framing {
                Framing::Off => return,
                Framing::Head(buf) => {
                    if buf.is_empty() {
                        // Blank lines before a request line are allowed and skipped.
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
                        self.state.wake.notify_one();
                    }
                    let searched = buf.len().saturating_sub(3);
                    buf.extend_from_slice(bytes);
                    match find(&buf[searched..], b"\r\n\r\n") {
                        Some(at) => {
                            let end = searched + at + 4;
                            let rest_len = buf.len() - end;
                            let head = std::mem::take(buf);
                            self.state.head_started.store(0, Ordering::Relaxed);
                            self.framing = self.on_head(&head[..end]);
                            &bytes[bytes.len() - rest_len..]
                        }
                        None => {
                            if buf.len() > MAX_HEAD || buf.starts_with(H2_PREFACE) {
                                self.state.head_started.store(0, Ordering::Relaxed);
                                self.framing = Framing::Off;
                            }
                            return;
                        }
                    }
                }
                Framing::Fixed(remaining) => {
                    let n = (*remaining).min(bytes.len() as u64);
                    *remaining -= n;
                    if *remaining == 0 {
                        self.framing = Framing::Head(Vec::new());
                    }
                    &bytes[n as usize..]
                }
                Framing::ChunkSize(line) => match bytes.iter().position(|b| *b == b'\n') {
                    Some(at) => {
                        line.extend_from_slice(&bytes[..=at]);
                        self.framing = match httparse::parse_chunk_size(line) {
                            Ok(httparse::Status::Complete((_, 0))) => Framing::Trailers(Vec::new()),
                            Ok(httparse::Status::Complete((_, size))) => Framing::ChunkData(size),
                            _ => Framing::Off,
                        };
                        &bytes[at + 1..]
                    }
                    None => {
                        line.extend_from_slice(bytes);
                        if line.len() > MAX_CHUNK_LINE {
                            self.framing = Framing::Off;
                        }
                        return;
                    }
                },
                Framing::ChunkData(remaining) => {
                    let n = (*remaining).min(bytes.len() as u64);
                    *remaining -= n;
                    if *remaining == 0 {
                        self.framing = Framing::ChunkEnd(0);
                    }
                    &bytes[n as usize..]
                }
                Framing::ChunkEnd(seen) => {
                    let need = 2 - usize::from(*seen);
                    let n = need.min(bytes.len());
                    *seen += n as u8;
                    if *seen == 2 {
                        self.framing = Framing::ChunkSize(Vec::new());
                    }
                    &bytes[n..]
                }
                Framing::Trailers(buf) => {
                    let searched = buf.len().saturating_sub(3);
                    buf.extend_from_slice(bytes);
                    let end = if buf.starts_with(b"\r\n") {
                        Some(2)
                    } else {
                        find(&buf[searched..], b"\r\n\r\n").map(|at| searched + at + 4)
                    };
                    match end {
                        Some(end) => {
                            let rest_len = buf.len() - end;
                            self.framing = Framing::Head(Vec::new());
                            &bytes[bytes.len() - rest_len..]
                        }
                        None => {
                            if buf.len() > MAX_HEAD {
                                self.framing = Framing::Off;
                            }
                            return;
                        }
                    }
                }
            };
        }
    }

    /// Judges a complete head and returns the framing of what follows it.
    fn on_head(&self, head: &[u8]) -> Framing {
        let mut headers = [httparse::EMPTY_HEADER; 128];
        let mut req = httparse::Request::new(&mut headers);
        let Ok(httparse::Status::Complete(_)) = req.parse(head) else {
            // hyper refuses it (400 or 431) and closes.
            return Framing::Off;
        };
        let mut transfer_encoding: Option<&[u8]> = None;
        let mut lengths: Vec<&[u8]> = Vec::new();
        let mut upgrade = req.method == Some("CONNECT");
        for h in req.headers.iter() {
            if h.name.eq_ignore_ascii_case("transfer-encoding") {
                transfer_encoding = Some(h.value);
            } else if h.name.eq_ignore_ascii_case("content-length") {
                lengths.extend(h.value.split(|b| *b == b',').map(trim));
            } else if h.name.eq_ignore_ascii_case("upgrade") {
                upgrade = true;
            }
        }
        let differing = lengths.windows(2).any(|w| w[0] != w[1]);
        let verdict = if (transfer_encoding.is_some() && !lengths.is_empty()) || differing {
            HeadVerdict::AmbiguousFraming
        } else {
            HeadVerdict::Clean
        };
        if let Ok(mut verdicts) = self.state.verdicts.lock() {
            verdicts.push_back(verdict);
        }
        if upgrade || verdict == HeadVerdict::AmbiguousFraming {
            // Upgraded bytes are not HTTP/1, and an ambiguous request ends the connection.
            return Framing::Off;
        }
        if let Some(te) = transfer_encoding {
            let chunked = te
                .rsplit(|b| *b == b',')
                .next()
                .is_some_and(|last| trim(last).eq_ignore_ascii_case(b"chunked"));
            return if chunked {
                Framing::ChunkSize(Vec::new())
            } else {
                Framing::Off
            };
        }
        match lengths.first() {
            None => Framing::Head(Vec::new()),
            Some(text) => match std::str::from_utf8(text)
                .ok()
                .and_then(|t| t.parse::<u64>().ok())
            {
                Some(0) => Framing::Head(Vec::new()),
                Some(n) => Framing::Fixed(n),
                None => Framing::Off,
            },
        }
    }
}

fn trim(bytes: &[u8]) -> &[u8] {
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &bytes[start..end]
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

impl<T: AsyncRead + Unpin> AsyncRead for ConnIo<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        ready!(this.inner_mut()?.poll_read(cx, buf))?;
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
        self.get_mut().inner_mut()?.poll_write(cx, buf)
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
        self.get_mut().inner_mut()?.poll_write_vectored(cx, bufs)
    }
}

#[cfg(test)]
mod tests;
