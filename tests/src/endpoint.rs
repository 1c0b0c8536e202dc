//! TLS endpoints a test registers as a worker's: [`PinnedEndpoint`] plays an honest worker's
//! data plane (its own certificate, the readiness probe behind the generation secret), and
//! [`Squatter`] is a listener with another certificate that takes over a port and records
//! every connection attempt and every byte it could read.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use relay_proxy::worker::WorkerIdentity;
use tokio::io::AsyncReadExt as _;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio_rustls::TlsAcceptor;

use crate::error::Error;

/// The header the daemon authenticates itself to a worker with (SPEC §5.5).
const WORKER_SECRET: &str = "x-relay-worker-secret";

/// One request an endpoint answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointRequest {
    pub method: String,
    pub path: String,
    /// It carried the current generation secret.
    pub authorized: bool,
}

#[derive(Debug, Default)]
struct Shared {
    secret: Option<[u8; 32]>,
    requests: Vec<EndpointRequest>,
}

/// A worker data plane with its own certificate: answers `GET /_relay/worker/v1/ready`
/// with `{"ready":true}` and hook events with `{"continue":true}` when the request carries
/// the secret set with [`PinnedEndpoint::set_secret`], 401 otherwise.
#[derive(Debug)]
pub struct PinnedEndpoint {
    addr: SocketAddr,
    certificate_sha256: [u8; 32],
    shared: Arc<Mutex<Shared>>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl PinnedEndpoint {
    /// Listens on `127.0.0.1:0` with a fresh certificate.
    pub async fn start() -> Result<PinnedEndpoint, Error> {
        let identity = WorkerIdentity::generate("127.0.0.1")?;
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .map_err(|source| Error::Bind { source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| Error::Bind { source })?;
        let shared = Arc::new(Mutex::new(Shared::default()));
        let (stop, stopped) = oneshot::channel();
        let acceptor = TlsAcceptor::from(identity.server_config());
        let task = tokio::spawn(serve_pinned(listener, acceptor, shared.clone(), stopped));
        Ok(PinnedEndpoint {
            addr,
            certificate_sha256: identity.certificate_sha256(),
            shared,
            stop: Some(stop),
            task,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The SHA-256 of its certificate, what a worker registers.
    pub fn certificate_sha256(&self) -> [u8; 32] {
        self.certificate_sha256
    }

    /// The generation secret from `Registered`.
    pub fn set_secret(&self, secret: [u8; 32]) {
        lock(&self.shared).secret = Some(secret);
    }

    /// What it answered so far.
    pub fn requests(&self) -> Vec<EndpointRequest> {
        lock(&self.shared).requests.clone()
    }

    /// Closes the listener and every connection; when this returns the port is free.
    pub async fn stop(mut self) -> SocketAddr {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
        self.addr
    }
}

impl Drop for PinnedEndpoint {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

async fn serve_pinned(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    shared: Arc<Mutex<Shared>>,
    mut stopped: oneshot::Receiver<()>,
) {
    // Dropped (aborting every connection) when this function returns.
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            _ = &mut stopped => return,
            accepted = listener.accept() => accepted,
        };
        let Ok((tcp, _)) = accepted else { return };
        let acceptor = acceptor.clone();
        let shared = shared.clone();
        connections.spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let res = answer(&shared, &req);
                async move { Ok::<_, std::convert::Infallible>(res) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), service)
                .await;
        });
    }
}

fn answer(shared: &Mutex<Shared>, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let mut shared = lock(shared);
    let authorized = match (shared.secret, req.headers().get(WORKER_SECRET)) {
        (Some(secret), Some(value)) => {
            value.as_bytes() == relay_proxy::worker_client::secret_header(&secret).as_bytes()
        }
        _ => false,
    };
    shared.requests.push(EndpointRequest {
        method: req.method().to_string(),
        path: req.uri().path().to_owned(),
        authorized,
    });
    let (status, body): (StatusCode, &'static str) = if !authorized {
        (
            StatusCode::UNAUTHORIZED,
            r#"{"error":{"type":"relay_unauthorized"}}"#,
        )
    } else if req.uri().path() == relay_proxy::worker::READY_PATH {
        (StatusCode::OK, r#"{"ready":true}"#)
    } else if req.uri().path() == "/hooks/claude-code" {
        (StatusCode::OK, r#"{"continue":true}"#)
    } else {
        (StatusCode::OK, "{}")
    };
    let mut res = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *res.status_mut() = status;
    res.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    res
}

/// One connection a [`Squatter`] accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SquatterConnection {
    /// The TLS handshake completed (it cannot with a client that pins another
    /// certificate).
    pub handshake_completed: bool,
    /// Application bytes read after a completed handshake.
    pub received: Vec<u8>,
}

/// A TLS listener with a certificate of its own on a port it took over.
#[derive(Debug)]
pub struct Squatter {
    addr: SocketAddr,
    connections: watch::Sender<Vec<SquatterConnection>>,
    task: JoinHandle<()>,
}

impl Squatter {
    /// Binds `addr` (a port another endpoint just freed) with a fresh certificate.
    pub async fn bind(addr: SocketAddr) -> Result<Squatter, Error> {
        let identity = WorkerIdentity::generate("127.0.0.1")?;
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| Error::Bind { source })?;
        let acceptor = TlsAcceptor::from(identity.server_config());
        let (connections, _) = watch::channel(Vec::new());
        let task = tokio::spawn(squat(listener, acceptor, connections.clone()));
        Ok(Squatter {
            addr,
            connections,
            task,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every connection that ended so far.
    pub fn connections(&self) -> Vec<SquatterConnection> {
        self.connections.borrow().clone()
    }

    /// Waits until at least `count` connections have ended.
    pub async fn wait_for_connections(
        &self,
        count: usize,
        timeout: Duration,
    ) -> Option<Vec<SquatterConnection>> {
        let mut changes = self.connections.subscribe();
        let waited = tokio::time::timeout(timeout, changes.wait_for(|seen| seen.len() >= count));
        match waited.await {
            Ok(Ok(seen)) => Some(seen.clone()),
            _ => None,
        }
    }
}

impl Drop for Squatter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn squat(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    seen: watch::Sender<Vec<SquatterConnection>>,
) {
    let mut connections = JoinSet::new();
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            return;
        };
        let acceptor = acceptor.clone();
        let seen = seen.clone();
        connections.spawn(async move {
            let connection = match acceptor.accept(tcp).await {
                Err(_) => SquatterConnection {
                    handshake_completed: false,
                    received: Vec::new(),
                },
                Ok(mut tls) => {
                    let mut received = Vec::new();
                    let _ = tokio::time::timeout(
                        Duration::from_secs(5),
                        tls.read_to_end(&mut received),
                    )
                    .await;
                    SquatterConnection {
                        handshake_completed: true,
                        received,
                    }
                }
            };
            seen.send_modify(|seen| seen.push(connection));
        });
    }
}
