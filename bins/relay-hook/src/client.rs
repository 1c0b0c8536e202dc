//! Step 3 of SPEC §7.1: one POST to the daemon's hook route, on one connection, within one
//! deadline, retried only while the daemon answers 503 `relay_worker_unavailable`.
//!
//! The exchange runs on a current-thread tokio runtime with hyper's low-level HTTP/1 client:
//! no worker threads, no pool, no proxy discovery and no redirect following, so what is sent
//! and where is exactly what this module says.

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{CONTENT_TYPE, HOST, HeaderValue, USER_AGENT};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use relay_identity::{DaemonAddress, RouteToken};
use relay_proxy::daemon_http::{self, ConnectError};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::outcome::{Failure, Outcome, Verdict, judge};

/// The header that carries the route credential (SPEC §3.5).
const TOKEN_HEADER: &str = relay_proxy::headers::CLIENT_TOKEN_NAME;
/// The pause between two attempts that got 503 `relay_worker_unavailable`.
const RETRY_INTERVAL: Duration = Duration::from_millis(100);
/// The largest answer body accepted; hook answers are a few bytes.
pub(crate) const MAX_ANSWER_BYTES: usize = 1024 * 1024;

/// One hook event on its way to the daemon.
#[derive(Debug)]
pub(crate) struct HookPost<'a> {
    /// The daemon.
    pub(crate) address: &'a DaemonAddress,
    /// `/hooks/<agent>`.
    pub(crate) route: &'static str,
    /// The route credential.
    pub(crate) token: &'a RouteToken,
    /// The payload, exactly as read.
    pub(crate) body: Bytes,
    /// When the whole exchange, retries included, must be over.
    pub(crate) deadline: Instant,
    /// The timeout the deadline came from, for messages.
    pub(crate) timeout: Duration,
    /// `RELAY_EXTRA_CA_FILE`, trusted besides the platform roots for an https daemon.
    pub(crate) extra_ca_file: Option<&'a Path>,
}

impl HookPost<'_> {
    /// Runs the exchange to its outcome on a runtime that lives for this call only.
    pub(crate) fn send(&self) -> Outcome {
        let tls = match self.tls_config() {
            Ok(tls) => tls,
            Err(failure) => return Outcome::Failure(failure),
        };
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
        {
            Ok(runtime) => runtime,
            Err(source) => return Outcome::Failure(Failure::Runtime { source }),
        };
        let outcome = runtime.block_on(self.exchange(tls));
        // A DNS lookup still running on the blocking pool must not hold the process.
        runtime.shutdown_background();
        outcome
    }

    fn tls_config(&self) -> Result<Option<Arc<rustls::ClientConfig>>, Failure> {
        if !self.address.is_tls() {
            return Ok(None);
        }
        let mut config = relay_proxy::tls::client_config(self.extra_ca_file).map_err(|source| {
            Failure::TlsConfig {
                address: self.address.clone(),
                source,
            }
        })?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Some(Arc::new(config)))
    }

    async fn exchange(&self, tls: Option<Arc<rustls::ClientConfig>>) -> Outcome {
        let mut unavailable = 0;
        let deadline = tokio::time::Instant::from_std(self.deadline);
        let attempts = tokio::time::timeout_at(deadline, self.attempts(tls, &mut unavailable));
        match attempts.await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(failure)) => Outcome::Failure(failure),
            Err(_elapsed) if unavailable > 0 => Outcome::Failure(Failure::WorkerUnavailable {
                attempts: unavailable,
                timeout: self.timeout,
            }),
            Err(_elapsed) => Outcome::Failure(Failure::Timeout {
                address: self.address.clone(),
                timeout: self.timeout,
            }),
        }
    }

    /// Posts until an answer other than 503 `relay_worker_unavailable` arrives, reusing the
    /// connection while the daemon keeps it open. `unavailable` counts the 503 answers so the
    /// caller can name them when the deadline cuts this short.
    async fn attempts(
        &self,
        tls: Option<Arc<rustls::ClientConfig>>,
        unavailable: &mut u32,
    ) -> Result<Outcome, Failure> {
        let request = self.request_parts()?;
        let mut idle: Option<SendRequest<Full<Bytes>>> = None;
        loop {
            let reusable = match idle.take() {
                Some(mut sender) => sender.ready().await.is_ok().then_some(sender),
                None => None,
            };
            let mut sender = match reusable {
                Some(sender) => sender,
                None => {
                    let mut sender = self.connect(tls.clone()).await?;
                    sender.ready().await.map_err(|source| self.http(source))?;
                    sender
                }
            };
            let response = sender
                .send_request(request.build(self.body.clone()))
                .await
                .map_err(|source| self.http(source))?;
            let status = response.status();
            let body = self.read_answer(response.into_body()).await?;
            match judge(status, body) {
                Verdict::Proceed => return Ok(Outcome::Silent),
                Verdict::PolicyRejected(reason) => return Ok(Outcome::PolicyRejected(reason)),
                Verdict::Failure(failure) => return Err(failure),
                Verdict::RetryLater => {
                    *unavailable += 1;
                    if Instant::now() + RETRY_INTERVAL >= self.deadline {
                        return Err(Failure::WorkerUnavailable {
                            attempts: *unavailable,
                            timeout: self.timeout,
                        });
                    }
                    tokio::time::sleep(RETRY_INTERVAL).await;
                    idle = Some(sender);
                }
            }
        }
    }

    fn request_parts(&self) -> Result<RequestParts, Failure> {
        let host = format!("{}:{}", self.address.host(), self.address.port());
        let host =
            HeaderValue::try_from(host).map_err(|_| Failure::HeaderValue { name: "host" })?;
        let mut token = HeaderValue::try_from(self.token.encode())
            .map_err(|_| Failure::HeaderValue { name: TOKEN_HEADER })?;
        token.set_sensitive(true);
        Ok(RequestParts {
            route: self.route,
            host,
            token,
        })
    }

    async fn connect(
        &self,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Result<SendRequest<Full<Bytes>>, Failure> {
        let tcp = self.connect_tcp().await?;
        let Some(config) = tls else {
            return self.handshake(tcp).await;
        };
        let handshake_failed = |source| Failure::TlsHandshake {
            address: self.address.clone(),
            source,
        };
        let server_name = ServerName::try_from(self.address.host().to_owned())
            .map_err(|err| handshake_failed(io::Error::new(io::ErrorKind::InvalidInput, err)))?;
        let stream = tokio_rustls::TlsConnector::from(config)
            .connect(server_name, tcp)
            .await
            .map_err(handshake_failed)?;
        self.handshake(stream).await
    }

    /// The TCP connection, as every client opens one to the daemon
    /// ([`relay_proxy::daemon_http::connect`]).
    async fn connect_tcp(&self) -> Result<TcpStream, Failure> {
        daemon_http::connect(self.address)
            .await
            .map_err(|error| match error {
                ConnectError::Resolve { host, source } => Failure::Resolve { host, source },
                ConnectError::Connect { source, .. } => Failure::Connect {
                    address: self.address.clone(),
                    source,
                },
                ConnectError::NoAddress { .. } => Failure::Connect {
                    address: self.address.clone(),
                    source: io::Error::new(io::ErrorKind::NotFound, "the host name has no address"),
                },
            })
    }

    async fn handshake<IO>(&self, io: IO) -> Result<SendRequest<Full<Bytes>>, Failure>
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (sender, connection) = http1::handshake(TokioIo::new(io))
            .await
            .map_err(|source| self.http(source))?;
        // The connection's errors reach the sender; the task ends with the runtime.
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(sender)
    }

    async fn read_answer(&self, mut body: hyper::body::Incoming) -> Result<Bytes, Failure> {
        let mut answer = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|source| self.http(source))?;
            if let Ok(data) = frame.into_data() {
                if answer.len() + data.len() > MAX_ANSWER_BYTES {
                    return Err(Failure::AnswerTooLarge {
                        limit: MAX_ANSWER_BYTES,
                    });
                }
                answer.extend_from_slice(&data);
            }
        }
        Ok(Bytes::from(answer))
    }

    fn http(&self, source: hyper::Error) -> Failure {
        Failure::Http {
            address: self.address.clone(),
            source,
        }
    }
}

/// The request line and headers, built once and reused by every attempt.
struct RequestParts {
    route: &'static str,
    host: HeaderValue,
    token: HeaderValue,
}

impl RequestParts {
    fn build(&self, body: Bytes) -> Request<Full<Bytes>> {
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = hyper::Uri::from_static(self.route);
        let headers = request.headers_mut();
        headers.insert(HOST, self.host.clone());
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(TOKEN_HEADER, self.token.clone());
        headers.insert(
            USER_AGENT,
            HeaderValue::from_static(concat!("relay-hook/", env!("CARGO_PKG_VERSION"))),
        );
        request
    }
}
