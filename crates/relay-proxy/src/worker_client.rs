//! The daemon's connections to its workers (SPEC §5.5): HTTPS to the registered endpoint,
//! accepting only the registered certificate, with the generation secret on every request.
//!
//! Connections are HTTP/1.1, pooled per worker generation. A request is handed to a
//! connection with `try_send_request`, so a pooled connection that turns out dead gives the
//! request back unsent; the caller can then tell "nothing was written" (pass through once,
//! §3.7) from "the worker may have it" (502, never retried). A connection has no task of
//! its own: the request using it drives it until its response body has been read, as the
//! provider client's do ([`crate::upstream::Lease`]).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use base64::Engine as _;
use http::header::HeaderValue;
use http::{Request, Response};
use hyper::client::conn::http1::{Connection, SendRequest};
use hyper_util::rt::TokioIo;
use relay_broker::ProbeOutcome;
use relay_proto::Id;
use std::task::Context;
use tokio::net::TcpStream;

use crate::body::RequestBody;
use crate::driven::DriverWaker;
use crate::headers::WORKER_SECRET;
use crate::sockets::{Budget, Budgeted, Share};
use crate::tls_io::{Gather, ReadAhead};
use crate::upstream::{Answered, Lease, UpstreamBody, is_idle, poll_driven, run_alone, send_on};
use crate::worker::READY_PATH;

/// Probes get this long (§5.1).
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// TCP, TLS and HTTP handshakes with a worker get this long together.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Idle connections kept per worker generation: as many as one credential may have requests
/// in flight by default (`max_requests_per_identity`), so that under load a request finds a
/// kept connection instead of paying a TLS handshake (which, at 32, half the requests at
/// concurrency 64 did). A closed one is found when a request is handed to it, or by the
/// look over a generation's idle connections that a request makes every [`LOOK_EVERY`].
const MAX_POOLED: usize = 256;
/// How often a generation's idle connections are looked at, so that those the worker has
/// closed (after its keep-alive timeout) are not held for long.
const LOOK_EVERY: Duration = Duration::from_secs(30);

/// Where and how to reach one worker generation.
#[derive(Debug, Clone)]
pub struct WorkerTarget {
    pub worker_id: Id,
    pub endpoint: String,
    pub certificate_sha256: [u8; 32],
    pub secret: [u8; 32],
}

/// Why a request did not reach a worker.
#[derive(Debug, thiserror::Error)]
pub enum WorkerSendError {
    /// Nothing of the request was written: it is given back. `outcome` says whether the
    /// worker looks gone (refused, wrong certificate) or just failed.
    #[error("the worker could not be reached")]
    NotSent {
        request: Box<Request<RequestBody>>,
        outcome: ProbeOutcome,
    },
    /// The request may have reached the worker.
    #[error("the worker failed before its response head")]
    Failed(#[source] hyper::Error),
    /// A new connection was needed, and as many are open as the open-file limit allows.
    /// Nothing was written, and the worker is not to blame.
    #[error("too many connections are open at once")]
    NoRoom,
}

/// Pools of idle connections, one per worker generation.
#[derive(Default)]
pub struct WorkerClient {
    pools: Arc<Pools>,
    /// The room new connections take their share from, once the daemon has set it.
    budget: std::sync::OnceLock<Budget>,
}

/// Ordered by the generation ids the daemon makes rather than hashed: a request looks its
/// generation up twice, and a keyed hash of the id costs more than a few comparisons.
type Pools = Mutex<BTreeMap<Id, Generation>>;

/// The idle connections of one worker generation.
struct Generation {
    #[expect(
        clippy::vec_box,
        reason = "each goes to a response body as a boxed Lease, and comes back, without moving"
    )]
    conns: Vec<Box<WorkerConn>>,
    looked: Instant,
    /// The generation secret and its header, encoded by the first request that needed it.
    secret: Option<([u8; 32], HeaderValue)>,
}

type WorkerIo = TokioIo<Gather<tokio_rustls::client::TlsStream<ReadAhead<Budgeted>>>>;

/// One pinned connection to a worker generation.
struct WorkerConn {
    sender: SendRequest<RequestBody>,
    conn: Connection<WorkerIo, RequestBody>,
    worker_id: Id,
    /// Where it goes back; none for a probe's connection, which is not kept.
    pools: Weak<Pools>,
    driver: DriverWaker,
}

impl Lease for WorkerConn {
    fn poll_open(&mut self, cx: &mut Context<'_>) -> bool {
        poll_driven(&self.driver, &mut self.conn, cx)
    }

    fn driver(&self) -> &DriverWaker {
        &self.driver
    }

    fn sender(&mut self) -> &mut SendRequest<RequestBody> {
        &mut self.sender
    }

    /// Kept only while its generation's pool is: a generation forgotten meanwhile gets
    /// none back.
    fn give_back(mut self: Box<Self>) {
        if !is_idle(&mut self.conn, &self.sender) {
            return;
        }
        let Some(pools) = self.pools.upgrade() else {
            return;
        };
        if let Some(mut pools) = relay_logging::sync::lock(&pools, "worker pools")
            && let Some(generation) = pools.get_mut(&self.worker_id)
            && generation.conns.len() < MAX_POOLED
        {
            generation.conns.push(self);
        }
    }

    fn run_alone(self: Box<Self>, until: Answered) {
        run_alone(self.conn, until);
    }
}

impl std::fmt::Debug for WorkerClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerClient").finish_non_exhaustive()
    }
}

/// The header value of a generation secret: base64url without padding.
pub fn secret_header(secret: &[u8; 32]) -> HeaderValue {
    let mut value =
        HeaderValue::from_str(&base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret))
            .unwrap_or_else(|_| HeaderValue::from_static(""));
    value.set_sensitive(true);
    value
}

impl WorkerClient {
    pub fn new() -> WorkerClient {
        WorkerClient::default()
    }

    /// Takes the room of new connections (not probes') from `budget`, the provider client's:
    /// both kinds of connection count against the same share of the open-file limit.
    pub fn limit_to(&self, budget: Budget) {
        let _ = self.budget.set(budget);
    }

    /// Opens the pool of a generation a request is routed to. Called with the broker
    /// locked, as [`WorkerClient::forget`] is on a retirement, so a retired generation is
    /// never opened again by a request that was routed to it earlier: its connections are
    /// not kept. A request sent without it keeps no connection.
    pub fn admit(&self, worker_id: Id) {
        if let Some(mut pools) = relay_logging::sync::lock(&self.pools, "worker pools") {
            pools.entry(worker_id).or_insert_with(|| Generation {
                conns: Vec::new(),
                looked: Instant::now(),
                secret: None,
            });
        }
    }

    /// Drops every pooled connection of a generation (revoked, or its secret changed).
    pub fn forget(&self, worker_id: Id) {
        if let Some(mut pools) = relay_logging::sync::lock(&self.pools, "worker pools") {
            pools.remove(&worker_id);
        }
    }

    /// Sends a request to the worker; the secret header is added here.
    pub async fn send(
        &self,
        target: &WorkerTarget,
        mut req: Request<RequestBody>,
    ) -> Result<Response<UpstreamBody>, WorkerSendError> {
        let (secret, mut pooled) = self.check_out(target);
        req.headers_mut().insert(WORKER_SECRET, secret);
        // Pooled connections first; a dead one gives the request back unsent.
        while let Some(conn) = pooled {
            match send_on(conn, req).await {
                Ok(res) => return Ok(res),
                Err(mut error) => match error.take_message() {
                    Some(back) => req = back,
                    None => return Err(WorkerSendError::Failed(error.into_error())),
                },
            }
            pooled = self.take(target.worker_id);
        }
        // A stopped or unreachable worker must not hold the request: nothing is written until
        // the connection is up, so a timeout here still allows one pass-through (§3.7).
        let share = self.budget.get().map(Budget::take).transpose();
        let share = share.map_err(|_| WorkerSendError::NoRoom)?;
        let pools = Arc::downgrade(&self.pools);
        // Boxed: the handshake's state is large and needed only for a new connection; inline,
        // it would grow the future of every request sent to a worker.
        let connecting =
            tokio::time::timeout(CONNECT_TIMEOUT, Box::pin(connect(target, pools, share))).await;
        let conn = match connecting.unwrap_or(Err(ProbeOutcome::Failed)) {
            Ok(conn) => conn,
            Err(outcome) => {
                return Err(WorkerSendError::NotSent {
                    request: Box::new(req),
                    outcome,
                });
            }
        };
        match send_on(conn, req).await {
            Ok(res) => Ok(res),
            Err(mut error) => match error.take_message() {
                Some(back) => Err(WorkerSendError::NotSent {
                    request: Box::new(back),
                    outcome: ProbeOutcome::Failed,
                }),
                None => Err(WorkerSendError::Failed(error.into_error())),
            },
        }
    }

    /// The secret header for a request to `target`, and the connection [`Self::take`] gives,
    /// with one look at the pools. The header is encoded once per generation and secret.
    fn check_out(&self, target: &WorkerTarget) -> (HeaderValue, Option<Box<WorkerConn>>) {
        let mut pools = relay_logging::sync::lock(&self.pools, "worker pools");
        let Some(generation) = pools.as_mut().and_then(|p| p.get_mut(&target.worker_id)) else {
            return (secret_header(&target.secret), None);
        };
        let secret = match &generation.secret {
            // Two copies of the daemon's own secret: nothing here comes from a client.
            Some((raw, header)) if *raw == target.secret => header.clone(),
            _ => {
                let header = secret_header(&target.secret);
                generation.secret = Some((target.secret, header.clone()));
                header
            }
        };
        (secret, Self::pop(generation))
    }

    /// The connection kept last, the likeliest to be still open. It is not looked at here:
    /// one the worker has closed gives the request back unwritten.
    fn take(&self, worker_id: Id) -> Option<Box<WorkerConn>> {
        let mut pools = relay_logging::sync::lock(&self.pools, "worker pools")?;
        Self::pop(pools.get_mut(&worker_id)?)
    }

    /// The connection of `generation` kept last; once every [`LOOK_EVERY`], those the worker
    /// has closed are dropped first.
    fn pop(generation: &mut Generation) -> Option<Box<WorkerConn>> {
        let now = Instant::now();
        if now.saturating_duration_since(generation.looked) >= LOOK_EVERY {
            generation.looked = now;
            generation
                .conns
                .retain_mut(|c| is_idle(&mut c.conn, &c.sender));
        }
        generation.conns.pop()
    }

    /// `GET /_relay/worker/v1/ready` over a fresh pinned connection (§5.5).
    pub async fn probe(&self, target: &WorkerTarget) -> ProbeOutcome {
        let probe = async {
            let conn = connect(target, Weak::new(), None).await?;
            let mut req = Request::new(RequestBody::empty());
            *req.uri_mut() = http::Uri::from_static(READY_PATH);
            req.headers_mut()
                .insert(http::header::HOST, HeaderValue::from_static("relay-worker"));
            req.headers_mut()
                .insert(WORKER_SECRET, secret_header(&target.secret));
            let res = send_on(conn, req).await.map_err(|_| ProbeOutcome::Failed)?;
            if !res.status().is_success() {
                return Err(ProbeOutcome::Failed);
            }
            let body = http_body_util::BodyExt::collect(http_body_util::Limited::new(
                res.into_body(),
                4096,
            ))
            .await
            .map_err(|_| ProbeOutcome::Failed)?
            .to_bytes();
            let ready = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v.get("ready").and_then(serde_json::Value::as_bool))
                == Some(true);
            Ok::<_, ProbeOutcome>(if ready {
                ProbeOutcome::Ready
            } else {
                ProbeOutcome::Failed
            })
        };
        match tokio::time::timeout(PROBE_TIMEOUT, probe).await {
            Ok(Ok(outcome) | Err(outcome)) => outcome,
            Err(_) => ProbeOutcome::Failed,
        }
    }
}

/// One pinned HTTPS connection, holding `share` while it is open. A refused connection or a
/// certificate other than the registered one is evidence that the worker is gone (§5.4).
async fn connect(
    target: &WorkerTarget,
    pools: Weak<Pools>,
    share: Option<Share>,
) -> Result<Box<WorkerConn>, ProbeOutcome> {
    let addr: SocketAddr = target.endpoint.parse().map_err(|_| ProbeOutcome::Gone)?;
    let tcp = match TcpStream::connect(addr).await {
        Ok(tcp) => tcp,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            return Err(ProbeOutcome::Gone);
        }
        Err(_) => return Err(ProbeOutcome::Failed),
    };
    crate::sockets::prepare(&tcp);
    let config = crate::tls::pinned_client_config(target.certificate_sha256)
        .map_err(|_| ProbeOutcome::Failed)?;
    let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
    let tls = match tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, ReadAhead::new(Budgeted::new(tcp, share)))
        .await
    {
        Ok(tls) => tls,
        Err(e) if is_certificate_mismatch(&e) => return Err(ProbeOutcome::Gone),
        Err(_) => return Err(ProbeOutcome::Failed),
    };
    let (sender, conn) = hyper::client::conn::http1::Builder::new()
        .max_buf_size(crate::server::STREAM_BUFFER_BYTES)
        .handshake(TokioIo::new(Gather::new(tls)))
        .await
        .map_err(|_| ProbeOutcome::Failed)?;
    Ok(Box::new(WorkerConn {
        sender,
        conn,
        worker_id: target.worker_id,
        pools,
        driver: DriverWaker::new(),
    }))
}

fn is_certificate_mismatch(error: &std::io::Error) -> bool {
    error
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>())
        .is_some_and(|e| matches!(e, rustls::Error::InvalidCertificate(_)))
}

#[cfg(test)]
mod tests;
