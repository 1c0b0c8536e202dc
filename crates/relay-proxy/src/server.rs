//! The accept loop shared by the daemon and the worker: HTTP/1.1 and HTTP/2 on one
//! listener (by ALPN under TLS, by preface on plain TCP), the connection and protocol
//! limits of SPEC §3.6, `TCP_NODELAY`, and graceful shutdown.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::body::ResponseBody;
use crate::conn::{ConnIo, ConnState, Expiry};

/// Per-stream window and HTTP/1 buffer: at most this much body is buffered per stream
/// (§3.3).
pub const STREAM_BUFFER_BYTES: usize = 64 * 1024;

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
        req: Request<Incoming>,
        conn: ConnContext,
    ) -> impl Future<Output = Response<ResponseBody>> + Send + 'static;
}

/// Listener limits and timers.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
    pub keepalive_idle: Duration,
    /// How long accepted requests may run on after shutdown begins.
    pub drain_timeout: Duration,
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

/// How a server stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeReport {
    /// False when some request was still running at the end of the drain timeout.
    pub drained: bool,
}

/// Serves `listener` until `shutdown` resolves, then stops accepting, lets accepted
/// requests finish for at most `drain_timeout`, and returns.
pub async fn serve<H: Handler>(
    listener: TcpListener,
    options: ServeOptions,
    handler: Arc<H>,
    shutdown: impl Future<Output = ()>,
) -> ServeReport {
    let builder = Arc::new(http_builder());
    let tls = options.tls.clone().map(tokio_rustls::TlsAcceptor::from);
    let permits = Arc::new(Semaphore::new(options.max_connections));
    let graceful = GracefulShutdown::new();
    let mut tasks = JoinSet::new();
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
                    // briefly instead of spinning.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
        };
        let _ = tcp.set_nodelay(true);
        // An IPv4 peer on a dual-stack socket arrives as ::ffff:a.b.c.d; every rule that
        // looks at loopback must see a.b.c.d.
        let peer = SocketAddr::new(peer.ip().to_canonical(), peer.port());
        let local = tcp.local_addr().unwrap_or(peer);
        let handler = handler.clone();
        let builder = builder.clone();
        let watcher = graceful.watcher();
        let tls = tls.clone();
        let options = options.clone();
        tasks.spawn(async move {
            let _permit = permit;
            match tls {
                None => {
                    let ctx = context(peer, local, false);
                    serve_connection(tcp, true, ctx, &options, handler, &builder, watcher).await;
                }
                Some(acceptor) => {
                    let handshake = acceptor.accept(tcp);
                    let Ok(Ok(stream)) =
                        tokio::time::timeout(options.header_read_timeout, handshake).await
                    else {
                        return;
                    };
                    let http1 = stream.get_ref().1.alpn_protocol() != Some(b"h2");
                    let ctx = context(peer, local, true);
                    serve_connection(stream, http1, ctx, &options, handler, &builder, watcher)
                        .await;
                }
            }
        });
    }
    drop(listener);
    let drained = tokio::time::timeout(options.drain_timeout, graceful.shutdown())
        .await
        .is_ok();
    tasks.shutdown().await;
    ServeReport { drained }
}

fn context(peer: SocketAddr, local: SocketAddr, tls: bool) -> ConnContext {
    ConnContext {
        peer,
        local,
        tls,
        state: Arc::new(ConnState::new()),
    }
}

fn http_builder() -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        // Relay's own watchdog times header reads and idle keep-alive separately.
        .header_read_timeout(None)
        .max_headers(100)
        .max_buf_size(STREAM_BUFFER_BYTES)
        .keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(100)
        .max_header_list_size(64 * 1024)
        .max_pending_accept_reset_streams(20)
        .initial_stream_window_size(STREAM_BUFFER_BYTES as u32)
        .initial_connection_window_size(1024 * 1024)
        .adaptive_window(false)
        .max_send_buf_size(STREAM_BUFFER_BYTES);
    builder
}

async fn serve_connection<S, H>(
    stream: S,
    http1: bool,
    ctx: ConnContext,
    options: &ServeOptions,
    handler: Arc<H>,
    builder: &auto::Builder<TokioExecutor>,
    watcher: Watcher,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    H: Handler,
{
    let state = ctx.state.clone();
    let io = TokioIo::new(ConnIo::new(stream, state.clone(), http1));
    let service = service_fn(move |req| {
        let active = ctx.state.begin_request();
        let handling = handler.clone().handle(req, ctx.clone());
        async move {
            let mut res = handling.await;
            res.body_mut().attach(active);
            Ok::<_, Infallible>(res)
        }
    });
    let connection = watcher.watch(
        builder
            .serve_connection_with_upgrades(io, service)
            .into_owned(),
    );
    tokio::select! {
        result = connection => {
            if let Err(error) = result {
                tracing::debug!(error = %error, "connection ended with an error");
            }
        }
        expiry = state.expired(options.header_read_timeout, options.keepalive_idle) => {
            // Dropping the connection closes the socket: a slow head gets no answer, an idle
            // keep-alive connection has nothing in flight.
            tracing::debug!(slow_head = expiry == Expiry::HeaderTimeout, "connection timed out");
        }
    }
}
