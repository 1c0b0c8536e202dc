//! The accept loop shared by the daemon and the worker: HTTP/1.1 and HTTP/2 on one
//! listener (by ALPN under TLS, by preface on plain TCP or without ALPN), the connection
//! and protocol limits of SPEC §3.6, `TCP_NODELAY`, and graceful shutdown.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::{Future, poll_fn};
use std::net::{IpAddr, SocketAddr};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker, ready};
use std::time::{Duration, Instant};

use futures_util::task::AtomicWaker;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper::service::{HttpService, service_fn};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, oneshot, watch};
use tokio::task::{AbortHandle, JoinSet};

use crate::BoxError;
use crate::answers::close_after;
use crate::body::{ClientBody, ResponseBody};
use crate::conn::{ConnIo, ConnState, Expiry, Keep};
use crate::per_address::{Hold, PerAddress};
use crate::tls::HandshakeFailure;
use crate::tls_io::{Gather, ReadAhead};

/// Per-stream window and HTTP/1 buffer: at most this much body is buffered per stream
/// (§3.3).
pub const STREAM_BUFFER_BYTES: usize = 64 * 1024;
/// Answer bytes queued per HTTP/2 stream for a client that is not reading. h2 keeps each
/// queued chunk as a frame of its own, and an SSE stream's chunks are small, so a queue
/// holds far more memory than its bytes: 200 streams of a client that opened the largest
/// window and stopped reading made relayd hold 255 KiB each at 64 KiB here, 86 KiB at
/// 16 KiB and 56 KiB at 8 KiB. The kernel's socket buffer still holds what a reading
/// client has not read yet.
const HTTP2_SEND_BUFFER_BYTES: usize = 8 * 1024;

/// What a handler knows about the connection a request came on.
#[derive(Debug, Clone)]
pub struct ConnContext {
    pub peer: SocketAddr,
    pub local: SocketAddr,
    pub tls: bool,
    pub state: Arc<ConnState>,
}

/// Serves requests. One value serves every connection of a listener.
pub trait Handler: Send + Sync + 'static {
    fn handle(
        self: Arc<Self>,
        req: Request<ClientBody>,
        conn: ConnContext,
    ) -> impl Future<Output = Response<ResponseBody>> + Send + 'static;
}

/// A request after the checks a handler makes before anything is awaited: answered
/// (`T`), or on its way by the boxed future of its route, a model request's or a hook
/// event's.
///
/// hyper keeps an HTTP/1 connection's service future in a box of that future's size for
/// the connection's life, and moves each request's future into it. Checked in a plain
/// function and forwarded by a boxed future, a request makes that future a few words, and
/// a route's state is freed once its answer's head is out. An `async` step of checks
/// instead copies the request into its state twice more and holds it beside the route's.
///
/// The checks run when hyper hands the request over, which for HTTP/2 is on the
/// connection's task before the stream gets its own: they must stay short and must not
/// wait.
pub(crate) enum Next<T, M, H> {
    Answered(Box<T>),
    Model(Pin<Box<M>>),
    Hook(Pin<Box<H>>),
}

impl<T, M, H> Next<T, M, H> {
    pub(crate) fn answered(answer: T) -> Self {
        Next::Answered(Box::new(answer))
    }
}

/// Listener limits and timers.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
    pub keepalive_idle: Duration,
    /// How long a client may read nothing of what is written to it before its connection
    /// is cut (`stream_idle_secs`): a stalled reader would otherwise hold its answer, and
    /// the provider's stream behind it, for ever.
    pub write_stall: Duration,
    /// How long accepted requests may run on after shutdown begins.
    pub drain_timeout: Duration,
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// How long a TLS handshake may take.
    pub handshake_timeout: Duration,
    /// Connections at once from one peer address.
    pub per_peer: PeerLimit,
    /// At most this many connections that no request has vouched for yet (the handler
    /// calls [`ConnState::vouch`] for a request that proved its right to be served); one
    /// more closes the oldest of them. `None`: no such limit (relayd's public listener,
    /// whose callers prove nothing per connection).
    pub unvouched: Option<usize>,
    /// On stop, keep the listener's port while accepted requests drain, refusing new
    /// connections (see [`serve`]). `false` for a socket the service manager passed: it
    /// holds the port itself, and its socket must go on listening for the next instance.
    pub hold_port: bool,
}

impl Default for ServeOptions {
    /// The daemon's defaults (SPEC §3.6), without TLS.
    fn default() -> Self {
        let daemon = crate::config::DaemonConfig::default();
        let header_read_timeout = daemon.timers.header_read_timeout_secs.get();
        ServeOptions {
            max_connections: daemon.max_connections,
            header_read_timeout,
            keepalive_idle: daemon.keepalive_idle_secs.get(),
            write_stall: daemon.stream_idle_secs.get(),
            drain_timeout: daemon.timers.drain_secs.get(),
            tls: None,
            handshake_timeout: header_read_timeout,
            per_peer: PeerLimit {
                max: daemon.max_connections_per_ip,
                loopback: false,
            },
            unvouched: None,
            hold_port: true,
        }
    }
}

/// A cap on the connections one peer address may hold at once; a connection over it is
/// closed as soon as it is accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerLimit {
    pub max: usize,
    /// Whether loopback peers count too. The daemon exempts them (every local user shares
    /// 127.0.0.1, so a cap would let one local user lock out the others); a worker does not.
    pub loopback: bool,
}

/// Lingering close: after relayd closes an HTTP/1 connection on which it answered (a 413
/// before the body was read, a 400, a 431), it reads and discards what the client still
/// sends, for at most [`LINGER_TIME`] and [`LINGER_BYTES`], so a client that writes its
/// whole body before reading gets the answer instead of a reset.
pub(crate) const LINGER_TIME: Duration = Duration::from_secs(5);

/// 64 MiB: twice the default model body limit, so a client that sent a body somewhat over
/// the limit still reads its 413.
pub(crate) const LINGER_BYTES: u64 = 64 * 1024 * 1024;

/// How long the connections cut off at the end of the drain have to reset their sockets
/// before their tasks are dropped.
const CUT_OFF_TIME: Duration = Duration::from_secs(1);

/// How a server stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeReport {
    /// Connections still answering when the drain time ran out, whose requests were cut
    /// off: one request each on HTTP/1; an HTTP/2 connection counts once however many
    /// streams it had open.
    pub unfinished: usize,
}

impl ServeReport {
    /// Every accepted request finished within the drain time.
    pub fn drained(&self) -> bool {
        self.unfinished == 0
    }
}

/// Serves `listener` until `shutdown` resolves, then stops accepting, lets accepted
/// requests finish for at most `drain_timeout`, and returns.
pub async fn serve<H: Handler>(
    listener: TcpListener,
    options: ServeOptions,
    handler: Arc<H>,
    shutdown: impl Future<Output = ()>,
) -> ServeReport {
    let builders = Arc::new(Builders::new(options.write_stall));
    let tls = options.tls.clone().map(tokio_rustls::TlsAcceptor::from);
    // Shared by every connection, which keeps only a pointer to it.
    let options = Arc::new(options);
    let permits = Arc::new(Semaphore::new(options.max_connections));
    let peers = PeerCounts::new(options.per_peer);
    let mut unvouched = Unvouched::new(options.unvouched);
    // Each connection holds a receiver until its last answer is written: the stop is sent
    // on it, and the drain ends when every one has been dropped.
    let (stop, _) = watch::channel(());
    // Set when the drain time runs out: every connection still answering then, and one
    // whose TLS handshake ends later, is cut off.
    let (cut_off, _) = watch::channel(false);
    let mut tasks = JoinSet::new();
    let mut accept_failures = relay_logging::Throttle::default();
    let peer_lines = Arc::default();
    tokio::pin!(shutdown);
    loop {
        // Reap finished connections so the set stays small.
        while tasks.try_join_next().is_some() {}
        let permit = tokio::select! {
            biased;
            () = &mut shutdown => break,
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
        };
        let (tcp, peer) = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of descriptors or a connection reset before accept: back off
                    // briefly instead of spinning, and say so at most every few seconds.
                    if let Some(suppressed) =
                        accept_failures.admit(Instant::now(), FLOOD_LOG_EVERY)
                    {
                        tracing::warn!(
                            event = "accept_failed",
                            %error,
                            suppressed_since_last_emit = suppressed,
                            "accepting a connection failed"
                        );
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
        };
        // An IPv4 peer on a dual-stack socket arrives as ::ffff:a.b.c.d; every rule that
        // looks at loopback must see a.b.c.d.
        let peer = SocketAddr::new(peer.ip().to_canonical(), peer.port());
        let Some(peer_slot) = peers.admit(peer.ip()) else {
            tracing::debug!(peer = %peer.ip(), "connection refused: too many from this address");
            continue;
        };
        crate::sockets::prepare_accepted(&tcp);
        let local = tcp.local_addr().unwrap_or(peer);
        let handler = handler.clone();
        let tls = tls.clone();
        let state = Arc::new(ConnState::new());
        let conn = Conn {
            peer,
            local,
            state: state.clone(),
            options: options.clone(),
            builders: builders.clone(),
            stopping: stop.subscribe(),
            cut_off: cut_off.subscribe(),
            peer_lines: Arc::clone(&peer_lines),
        };
        // The permit and the address slot live as long as the socket: through an upgrade,
        // and through the lingering close.
        let keep = Keep::new((permit, peer_slot));
        let task = tasks.spawn(async move {
            match tls {
                None => {
                    conn.serve(tcp, false, Protocol::FromPreface, keep, handler)
                        .await;
                }
                // Boxed: the handshake and the TLS stream make this branch's state six
                // times the plain one's, and a task holds the largest of its branches (and
                // tokio copies it a few times) for every connection.
                Some(acceptor) => Box::pin(conn.serve_tls(acceptor, tcp, keep, handler)).await,
            }
        });
        unvouched.admit(task, state);
    }
    let _ = stop.send(());
    // Stop listening, but keep the port while the accepted requests finish: closed, it would
    // be free for the whole drain, for any local user to bind and answer in relayd's place
    // (and be sent the route tokens and provider keys of every client that connects). A
    // listening socket shut for reading no longer listens, so new connections are refused
    // as by a closed port, yet keeps a port that was named at bind (relayd's is); without
    // `SO_REUSEADDR` on it, no other socket may listen on that port, whatever options it
    // sets.
    if options.hold_port {
        let _ = rustix::net::sockopt::set_socket_reuseaddr(&listener, false);
        let _ = rustix::net::shutdown(&listener, rustix::net::Shutdown::Read);
    } else {
        drop(listener);
    }
    let unfinished = match tokio::time::timeout(options.drain_timeout, stop.closed()).await {
        Ok(()) => 0,
        Err(_) => {
            let unfinished = stop.receiver_count();
            // Each connection still answering resets its socket itself, and is given a
            // moment to: dropped with its task, it would close cleanly, and a client whose
            // answer ends with its connection (HTTP/1.0) would take the cut one for whole.
            cut_off.send_replace(true);
            let _ = tokio::time::timeout(CUT_OFF_TIME, stop.closed()).await;
            unfinished
        }
    };
    tasks.shutdown().await;
    ServeReport { unfinished }
}

/// The connections no request has vouched for yet, oldest first, for
/// [`ServeOptions::unvouched`]. Only the accept loop touches it.
///
/// A worker's listener is on an address every local user can reach. Without this, one of
/// them could open connections and hold them (a TLS handshake taken slowly, requests
/// refused 401 on a kept-alive connection) until the per-address cap, which the daemon's
/// own connections from 127.0.0.1 share, locked the daemon out. Closing the oldest
/// unvouched connection for each new one past the limit means a newcomer, the daemon's
/// included, always gets in, and keeps its place once its first request vouches for it.
struct Unvouched {
    max: Option<usize>,
    open: VecDeque<(AbortHandle, Arc<ConnState>)>,
    /// The closes are said at most every [`FLOOD_LOG_EVERY`].
    said: relay_logging::Throttle,
}

impl Unvouched {
    fn new(max: Option<usize>) -> Unvouched {
        Unvouched {
            max,
            open: VecDeque::new(),
            said: relay_logging::Throttle::default(),
        }
    }

    /// Counts a new connection, closing the oldest unvouched one when that makes one more
    /// than the limit. The queue is looked over for connections that have ended or been
    /// vouched for only when it is full, so an accept costs nothing more until then.
    fn admit(&mut self, task: AbortHandle, state: Arc<ConnState>) {
        let Some(max) = self.max else {
            return;
        };
        if self.open.len() >= max {
            self.open
                .retain(|(task, state)| !task.is_finished() && !state.is_vouched());
        }
        if self.open.len() >= max
            && let Some((oldest, _)) = self.open.pop_front()
        {
            oldest.abort();
            if let Some(suppressed) = self.said.admit(Instant::now(), FLOOD_LOG_EVERY) {
                tracing::warn!(
                    event = "unvouched_connection_closed",
                    unvouched = max,
                    suppressed_since_last_emit = suppressed,
                    "closed the oldest connection no request has vouched for, to make room: something holds connections open without the secret (another local user flooding this listener?)"
                );
            }
        }
        self.open.push_back((task, state));
    }
}

/// How many connections each peer address holds, for [`PeerLimit`].
#[derive(Debug)]
struct PeerCounts {
    limit: PeerLimit,
    counts: Arc<PerAddress>,
}

impl PeerCounts {
    fn new(limit: PeerLimit) -> PeerCounts {
        PeerCounts {
            limit,
            counts: PerAddress::new("connections per address"),
        }
    }

    /// A place for one more connection from `ip`; `None` when the address is at its cap.
    /// Uncounted (loopback, when exempt) connections get `Some(None)`.
    fn admit(&self, ip: IpAddr) -> Option<Option<Hold>> {
        if ip.is_loopback() && !self.limit.loopback {
            return Some(None);
        }
        let cap = u64::try_from(self.limit.max).unwrap_or(u64::MAX);
        self.counts.hold(ip, 1, cap).map(Some)
    }
}

/// The most header lines a request may carry (§3.6): hyper refuses more in HTTP/1 (431), and
/// the front counts them for HTTP/2, where hyper bounds only the header list's size.
pub(crate) const MAX_REQUEST_HEADERS: usize = 100;
/// The largest request head (HTTP/1: request line and header lines; HTTP/2: header list);
/// larger ones get 431.
const MAX_REQUEST_HEAD_BYTES: usize = 64 * 1024;

/// hyper's two servers, one of which serves each connection.
struct Builders {
    http1: http1::Builder,
    http2: http2::Builder<TokioExecutor>,
}

impl Builders {
    /// `write_stall` also spaces HTTP/2 PINGs: a client that has sent nothing for that long
    /// is asked for an answer, and cut 20 s later without one (or `write_stall` later, when
    /// that is shorter). Its flow-control windows may
    /// stop relayd's writes long before its socket fills, so the stalled-write timer alone
    /// would not see a client that reads nothing at all.
    fn new(write_stall: Duration) -> Builders {
        let mut http1 = http1::Builder::new();
        http1
            .timer(TokioTimer::new())
            // Relay's own watchdog times header reads and idle keep-alive separately.
            .header_read_timeout(None)
            .max_headers(MAX_REQUEST_HEADERS)
            // Checked on every head, however its bytes arrived: without it, hyper refuses
            // only a head still incomplete when its read buffer is full, and one that a
            // read brought in whole past that size went through.
            .max_header_size(MAX_REQUEST_HEAD_BYTES)
            .max_buf_size(STREAM_BUFFER_BYTES)
            .keep_alive(true);
        let mut http2 = http2::Builder::new(TokioExecutor::new());
        http2
            .timer(TokioTimer::new())
            .max_concurrent_streams(100)
            // h2 refuses a list whose size reaches the setting, so one more byte lets a list
            // of exactly the limit through, as HTTP/1 lets a head of exactly the limit.
            .max_header_list_size(MAX_REQUEST_HEAD_BYTES as u32 + 1)
            .max_pending_accept_reset_streams(20)
            .initial_stream_window_size(STREAM_BUFFER_BYTES as u32)
            .initial_connection_window_size(1024 * 1024)
            .adaptive_window(false)
            .max_send_buf_size(HTTP2_SEND_BUFFER_BYTES)
            .keep_alive_interval(write_stall)
            .keep_alive_timeout(write_stall.min(Duration::from_secs(20)));
        Builders { http1, http2 }
    }
}

/// How often an event that comes in floods is logged at most: a failed accept (out of
/// descriptors, a server retries about 50 times a second) or a connection closed for want
/// of a vouching request (one per connection of a flood).
const FLOOD_LOG_EVERY: Duration = Duration::from_secs(10);

/// How a connection's protocol is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    /// Negotiated by ALPN.
    Http1,
    Http2,
    /// From its first bytes: HTTP/2 with prior knowledge starts with the connection preface,
    /// anything else is HTTP/1.
    FromPreface,
}

/// One connection served by hyper, once its protocol is known. Unlike hyper-util's
/// automatic server, it gives the bytes read to find the protocol back to hyper in the same
/// read as the rest of the first request, so hyper's read buffer is not grown to take them
/// and a head that arrived whole is judged whole.
enum Served<'a, S, Svc: HttpService<Incoming>> {
    /// Reading the first bytes; nothing is left to serve once the server stopped first.
    Sniffing(&'a Builders, Option<(ConnIo<S>, Svc)>),
    Http1(Pin<Box<http1::UpgradeableConnection<Io<S>, Svc>>>),
    Http2(Pin<Box<http2::Connection<Io<S>, Svc, TokioExecutor>>>),
}

/// A served connection's IO as hyper sees it.
type Io<S> = TokioIo<ConnIo<S>>;

impl<'a, S, Svc> Served<'a, S, Svc>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    Svc: HttpService<Incoming, ResBody = ResponseBody>,
    Svc::Future: Send + 'static,
    Svc::Error: Into<BoxError>,
{
    fn new(
        builders: &'a Builders,
        io: ConnIo<S>,
        service: Svc,
        protocol: Protocol,
    ) -> Served<'a, S, Svc> {
        match protocol {
            Protocol::Http1 => Served::by(builders, io, service, false),
            Protocol::Http2 => Served::by(builders, io, service, true),
            Protocol::FromPreface => Served::Sniffing(builders, Some((io, service))),
        }
    }

    /// The connection served by hyper's HTTP/2 server, or its HTTP/1 one.
    fn by(builders: &'a Builders, io: ConnIo<S>, service: Svc, h2: bool) -> Served<'a, S, Svc> {
        let io = TokioIo::new(io);
        if h2 {
            Served::Http2(Box::pin(builders.http2.serve_connection(io, service)))
        } else {
            Served::Http1(Box::pin(
                builders.http1.serve_connection(io, service).with_upgrades(),
            ))
        }
    }

    /// Asks hyper to finish the answer in progress and close (HTTP/2: GOAWAY).
    fn graceful_shutdown(&mut self) {
        match self {
            Served::Sniffing(_, pending) => *pending = None,
            Served::Http1(conn) => conn.as_mut().graceful_shutdown(),
            Served::Http2(conn) => conn.as_mut().graceful_shutdown(),
        }
    }
}

impl<S, Svc> Future for Served<'_, S, Svc>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    Svc: HttpService<Incoming, ResBody = ResponseBody> + Unpin,
    Svc::Future: Send + 'static,
    Svc::Error: Into<BoxError>,
{
    type Output = Result<(), BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        loop {
            match this {
                Served::Sniffing(builders, pending) => {
                    let Some((io, _)) = pending else {
                        return Poll::Ready(Ok(()));
                    };
                    let h2 = ready!(io.poll_sniff_h2(cx))?;
                    let builders = *builders;
                    if let Some((io, service)) = pending.take() {
                        *this = Served::by(builders, io, service, h2);
                    }
                }
                Served::Http1(conn) => return conn.as_mut().poll(cx).map_err(Into::into),
                Served::Http2(conn) => return conn.as_mut().poll(cx).map_err(Into::into),
            }
        }
    }
}

/// One accepted connection, served.
struct Conn {
    peer: SocketAddr,
    local: SocketAddr,
    state: Arc<ConnState>,
    options: Arc<ServeOptions>,
    builders: Arc<Builders>,
    /// Changes when the server stops: the connection then finishes its current answer and
    /// closes (HTTP/2: GOAWAY).
    stopping: watch::Receiver<()>,
    /// True once the drain time has run out: the answer in progress is cut off.
    cut_off: watch::Receiver<bool>,
    /// The listener's lines about what its peers did.
    peer_lines: Arc<PeerLines>,
}

/// A listener's lines about what its peers did, each at most once every
/// [`FLOOD_LOG_EVERY`], since a peer can cause them at the rate it connects.
#[derive(Debug, Default)]
struct PeerLines {
    /// HTTP/2 connections closed for breaking h2's limits on reset streams.
    calm: PeerLine,
    /// TLS handshakes that failed, one line for each cause: scanners sending plain HTTP
    /// must not hide the clients that refuse the certificate.
    handshakes: [PeerLine; HandshakeFailure::COUNT],
}

/// One of a listener's lines about its peers.
type PeerLine = std::sync::Mutex<relay_logging::Throttle>;

/// `Some(lines held back since the last one)` when `line` may be written at `now`.
fn admit(line: &PeerLine, now: Instant) -> Option<u64> {
    relay_logging::sync::lock(line, "a line about a listener's peers")?.admit(now, FLOOD_LOG_EVERY)
}

impl PeerLines {
    /// Says, or counts, that `peer`'s TLS handshake failed. rustls's own warnings of it are
    /// held at a service's levels, and a client that refuses the certificate says nothing
    /// else: this line is how the operator of a daemon serving HTTPS learns that clients
    /// cannot reach it, and why.
    fn handshake_failed(&self, peer: SocketAddr, failure: HandshakeFailure) {
        if let Some(suppressed) = admit(&self.handshakes[failure as usize], Instant::now()) {
            tracing::warn!(
                event = "tls_handshake_failed",
                peer = %peer.ip(),
                reason = failure.reason(),
                suppressed_since_last_emit = suppressed,
                "{}",
                failure.message()
            );
        }
    }

    /// Says, or counts, that h2 closed `peer`'s connection for resetting more streams than
    /// it may (the rapid-reset attack). h2's own warning of it is held at a service's levels,
    /// as a peer could send one a frame; this line is what tells the operator.
    fn too_many_resets(&self, peer: SocketAddr) {
        if let Some(suppressed) = admit(&self.calm, Instant::now()) {
            tracing::warn!(
                event = "http2_connection_closed",
                peer = %peer.ip(),
                reason = "too_many_resets",
                suppressed_since_last_emit = suppressed,
                "closed an HTTP/2 connection whose client reset more streams than it may (a rapid-reset attack?)"
            );
        }
    }
}

/// Whether a connection ended because its HTTP/2 client broke h2's limits on reset streams
/// (the rapid-reset attack), which h2 answers with GOAWAY `ENHANCE_YOUR_CALM`: h2's own
/// GOAWAY, not one a client sent with that code.
fn told_to_calm_down(error: &BoxError) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error.as_ref());
    while let Some(error) = source {
        if let Some(h2) = error.downcast_ref::<h2::Error>() {
            return h2.is_go_away()
                && h2.is_library()
                && h2.reason() == Some(h2::Reason::ENHANCE_YOUR_CALM);
        }
        source = error.source();
    }
    false
}

impl Conn {
    /// Serves a TLS connection once its handshake is done, by the protocol ALPN chose.
    async fn serve_tls<H: Handler>(
        self,
        acceptor: tokio_rustls::TlsAcceptor,
        tcp: tokio::net::TcpStream,
        keep: Keep,
        handler: Arc<H>,
    ) {
        let deadline = tokio::time::Instant::now() + self.options.handshake_timeout;
        // A connection closed, or held open, before it sends a byte (a TCP health check, a
        // port scan) did nothing worth a line; it is closed at the deadline all the same.
        let mut first = [0_u8; 1];
        let sent = tokio::time::timeout_at(deadline, tcp.peek(&mut first)).await;
        if !matches!(sent, Ok(Ok(1..))) {
            return;
        }
        // A TLS record begins with its type, a byte below 32; an HTTP request with its
        // method's first letter.
        if first[0].is_ascii_uppercase() {
            refuse_plain_http(tcp, self.builders.http1.clone(), deadline).await;
            self.peer_lines
                .handshake_failed(self.peer, HandshakeFailure::NotTls);
            return;
        }
        let handshake = acceptor.accept(ReadAhead::new(tcp));
        let failure = match tokio::time::timeout_at(deadline, handshake).await {
            Ok(Ok(stream)) => {
                let protocol = match stream.get_ref().1.alpn_protocol() {
                    Some(b"h2") => Protocol::Http2,
                    Some(_) => Protocol::Http1,
                    None => Protocol::FromPreface,
                };
                return self
                    .serve(Gather::new(stream), true, protocol, keep, handler)
                    .await;
            }
            Ok(Err(error)) => HandshakeFailure::of(&error),
            Err(_) => Some(HandshakeFailure::TimedOut),
        };
        if let Some(failure) = failure {
            self.peer_lines.handshake_failed(self.peer, failure);
        }
    }

    async fn serve<S, H>(
        self,
        stream: S,
        tls: bool,
        protocol: Protocol,
        keep: Keep,
        handler: Arc<H>,
    ) where
        S: AsyncRead + AsyncWrite + Resettable + Unpin + Send + 'static,
        H: Handler,
    {
        let Conn {
            peer,
            local,
            state,
            options,
            builders,
            mut stopping,
            mut cut_off,
            peer_lines,
        } = self;
        let ctx = ConnContext {
            peer,
            local,
            tls,
            state,
        };
        let state = ctx.state.clone();
        let (give_back, mut given_back) = oneshot::channel();
        let io = ConnIo::new(stream, state.clone(), protocol != Protocol::Http2)
            .with_keep(keep, give_back);
        let service = service_fn(move |req| {
            let active = ctx.state.begin_request();
            let handling = handler.clone().handle(ClientBody::of(req), ctx.clone());
            let state = ctx.state.clone();
            async move {
                let mut res = handling.await;
                if state.ends_with_this_answer() {
                    // The framing watcher lost this byte stream: no further request may
                    // come on it unchecked and untimed.
                    close_after(&mut res);
                }
                res.body_mut().attach(active);
                Ok::<_, Infallible>(res)
            }
        });
        // The connection, and with it the socket unless an upgrade took it, is dropped at
        // the end of this block.
        let closing = {
            let mut connection = Served::new(&builders, io, service, protocol);
            let mut watchdog = pin!(state.expired(
                options.header_read_timeout,
                options.keepalive_idle,
                options.write_stall,
            ));
            let mut stop = Some(pin!(stopping.changed()));
            let mut cut = pin!(cut_off.wait_for(|cut| *cut));
            // The watchdog and the server's stop, polled only when one of them woke the task.
            let mut guard = poll_fn(|cx| {
                if let Poll::Ready(expiry) = watchdog.as_mut().poll(cx) {
                    return Poll::Ready(Told::Expired(expiry));
                }
                if cut.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Told::CutOff);
                }
                match stop.as_mut().map(|stop| stop.as_mut().poll(cx)) {
                    // The sender is gone only when the server is, which is a stop too.
                    Some(Poll::Ready(_)) => {
                        stop = None;
                        Poll::Ready(Told::Stop)
                    }
                    _ => Poll::Pending,
                }
            });
            loop {
                match Guarded::new(&mut connection, &mut guard).await {
                    Ended::Work(Ok(())) => break Closing::Done,
                    Ended::Work(Err(error)) => {
                        tracing::debug!(error = %error, "connection ended with an error");
                        if told_to_calm_down(&error) {
                            peer_lines.too_many_resets(peer);
                        }
                        // An answer's body failed (a provider that broke off): the client
                        // must not take the truncated answer for a whole one.
                        let broken = error
                            .downcast_ref::<hyper::Error>()
                            .is_some_and(hyper::Error::is_user);
                        break if broken {
                            Closing::Broken
                        } else {
                            Closing::Done
                        };
                    }
                    Ended::Guard(Told::Expired(expiry)) => break Closing::Expired(expiry),
                    Ended::Guard(Told::CutOff) => break Closing::CutOff,
                    // The server stops: no new request on this connection, the current one
                    // runs to its end.
                    Ended::Guard(Told::Stop) => connection.graceful_shutdown(),
                }
            }
        };
        drop(stopping);
        match closing {
            // hyper closed the connection itself, after its last answer (or the client
            // did): linger unless it was upgraded, in which case the socket lives on in the
            // upgraded session.
            Closing::Done => {
                // The connection future is gone by now, so a socket it did not hand to an
                // upgrade has been given back already.
                if let Ok((stream, keep)) = given_back.try_recv() {
                    linger(stream).await;
                    drop(keep);
                }
            }
            // Reset, not closed: an HTTP/1.0 answer ends with its connection, so a clean
            // close would make a truncated one look whole. An answer cut because its client
            // read nothing, or because the drain time ran out, is truncated too, and a reset
            // also frees at once what the kernel still holds for a client that may never
            // read it.
            Closing::Broken | Closing::CutOff | Closing::Expired(Expiry::WriteStalled) => {
                if let Ok((stream, keep)) = given_back.try_recv() {
                    stream.reset_on_close();
                    drop(stream);
                    drop(keep);
                }
            }
            // Dropping the connection closes the socket: a slow head gets no answer, an idle
            // keep-alive connection has nothing in flight.
            Closing::Expired(expiry) => {
                tracing::debug!(?expiry, "connection timed out");
            }
        }
    }
}

/// How a served connection ends.
enum Closing {
    /// hyper ended it, or the client did.
    Done,
    /// An answer's body failed part-way.
    Broken,
    /// The server's drain time ran out before its answers were done.
    CutOff,
    /// The watchdog ended it.
    Expired(Expiry),
}

/// A served connection's socket, which can be made to end with a reset rather than a clean
/// close.
trait Resettable {
    /// Makes closing the socket send a reset (`SO_LINGER` 0).
    fn reset_on_close(&self);
}

impl Resettable for tokio::net::TcpStream {
    fn reset_on_close(&self) {
        let _ = socket2::SockRef::from(self).set_linger(Some(Duration::ZERO));
    }
}

impl Resettable for Gather<tokio_rustls::server::TlsStream<ReadAhead<tokio::net::TcpStream>>> {
    fn reset_on_close(&self) {
        self.get_ref().get_ref().0.get_ref().reset_on_close();
    }
}

/// What ends a served connection's wait, or changes it, besides the connection itself.
enum Told {
    /// The watchdog's timers.
    Expired(Expiry),
    /// The server stops: finish the answer in progress, take no new request.
    Stop,
    /// The server's drain time has run out.
    CutOff,
}

/// Runs `work` until it ends or `guard` ends first, like a two-branch `select!`, except
/// that `guard` is polled only when its own waker has fired. A connection's task is woken
/// for every read and write; its watchdog cares about none of them.
struct Guarded<W, G> {
    work: W,
    guard: G,
    woken: Arc<GuardWoken>,
}

/// Which of a [`Guarded`] pair ended.
enum Ended<W, G> {
    Work(W),
    Guard(G),
}

/// The guard's waker: marks the guard as woken and wakes the task.
#[derive(Debug)]
struct GuardWoken {
    fired: AtomicBool,
    task: AtomicWaker,
}

impl<W, G> Guarded<W, G> {
    fn new(work: W, guard: G) -> Guarded<W, G> {
        Guarded {
            work,
            guard,
            // Fired from the start, so the guard is polled once and registers its wakers.
            woken: Arc::new(GuardWoken {
                fired: AtomicBool::new(true),
                task: AtomicWaker::new(),
            }),
        }
    }
}

impl Wake for GuardWoken {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.fired.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl<W: Future + Unpin, G: Future + Unpin> Future for Guarded<W, G> {
    type Output = Ended<W::Output, G::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        this.woken.task.register(cx.waker());
        if let Poll::Ready(out) = Pin::new(&mut this.work).poll(cx) {
            return Poll::Ready(Ended::Work(out));
        }
        if this.woken.fired.swap(false, Ordering::AcqRel) {
            let waker = Waker::from(this.woken.clone());
            if let Poll::Ready(out) =
                Pin::new(&mut this.guard).poll(&mut Context::from_waker(&waker))
            {
                return Poll::Ready(Ended::Guard(out));
            }
        }
        Poll::Pending
    }
}

/// Answers plain HTTP sent to an HTTPS listener 400 in plain HTTP, once, and closes: a
/// client given an `http://` address then reads why it failed instead of a reset connection.
/// The head is read under the front's own limits (`http1`, its builder), and the close
/// lingers as after any early answer, so a client still writing its body reads the 400.
async fn refuse_plain_http(
    tcp: tokio::net::TcpStream,
    mut http1: http1::Builder,
    deadline: tokio::time::Instant,
) {
    let service = service_fn(|_: Request<Incoming>| async {
        let mut res = crate::answers::error(
            http::StatusCode::BAD_REQUEST,
            relay_proto::ErrorKind::RelayBadRequest,
            "this address serves HTTPS: plain HTTP was sent to it; use an https:// address",
        );
        close_after(&mut res);
        Ok::<_, Infallible>(res)
    });
    let connection = http1
        .keep_alive(false)
        .serve_connection(TokioIo::new(tcp), service)
        .without_shutdown();
    if let Ok(Ok(parts)) = tokio::time::timeout_at(deadline, connection).await {
        linger(parts.io.into_inner()).await;
    }
}

/// Lingering close (see [`LINGER_TIME`]): closes the write side, then discards what the
/// client still sends until it closes too or a bound is reached.
async fn linger<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S) {
    let deadline = tokio::time::Instant::now() + LINGER_TIME;
    if !matches!(
        tokio::time::timeout_at(deadline, stream.shutdown()).await,
        Ok(Ok(()))
    ) {
        return;
    }
    // Read into spare capacity, never zeroed: most connections end with the client's own
    // close, and thousands of streams closing at once would otherwise each fill 16 KiB.
    let mut sink = bytes::BytesMut::with_capacity(16 * 1024);
    let mut left = LINGER_BYTES;
    while left > 0 {
        sink.clear();
        match tokio::time::timeout_at(deadline, stream.read_buf(&mut sink)).await {
            Ok(Ok(n)) if n > 0 => left = left.saturating_sub(n as u64),
            _ => return,
        }
    }
}

/// Raises the soft open-file limit to the hard limit and returns the new soft limit: the
/// daemon and a worker each hold two descriptors per open stream (client and upstream), so
/// the usual soft limit of 1,024 would cap them near 500 streams. An unlimited hard limit
/// (macOS's usual one) may not be set as the soft one, so the largest of a few usual
/// ceilings the system accepts is taken instead.
pub fn raise_open_file_limit() -> u64 {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let wanted = match limit.maximum {
        Some(maximum) => vec![Some(maximum)],
        None => vec![None, Some(1_048_576), Some(65_536), Some(10_240)],
    };
    for current in wanted {
        // Never lowered: a finite soft limit already this high stays. An unlimited soft
        // limit has an unlimited hard one, whose first ceiling (unlimited) sets it as it is.
        if current.is_some() && current <= limit.current {
            break;
        }
        let raised = Rlimit {
            current,
            maximum: limit.maximum,
        };
        if setrlimit(Resource::Nofile, raised).is_ok() {
            break;
        }
    }
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests;
