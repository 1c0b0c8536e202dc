//! One keep-alive HTTP/1.1 connection of the load generator, plain or over TLS, and the requests it sends.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use bytes::Bytes;
use http::header::{CONTENT_TYPE, HOST, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio_rustls::TlsConnector;

/// The longest a single exchange may take before the run fails: far above any sane figure, low enough that a wedged target does not hang the bench.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);
/// A tiny non-streaming Chat Completions request.
const CHAT_BODY: &[u8] = br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
/// The same request, streaming.
const CHAT_STREAM_BODY: &[u8] =
    br#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
/// A streaming Anthropic Messages request: relayd sends these to the paced stand-in (its `anthropic_base_url`).
const MESSAGES_STREAM_BODY: &[u8] =
    br#"{"model":"m","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
/// The size of the large request body of SPEC §12 (2 MiB).
const LARGE_BODY_BYTES: usize = 2 * 1024 * 1024;
/// The header that carries the route credential (SPEC §3.5).
const TOKEN_HEADER: HeaderName = HeaderName::from_static("x-relay-client-token");

/// What one exchange sends and what it times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Probe {
    /// Tiny Chat Completions request; time until the whole answer has arrived.
    Json,
    /// Streaming Chat Completions request; time until the first body byte (the rest is read, untimed).
    StreamFirstByte,
    /// Streaming Chat Completions request; time until the whole stream has arrived.
    WholeStream,
    /// Streaming Messages request to the paced stand-in, held open by the memory scenario.
    HeldStream,
    /// Chat Completions request whose body is [`LARGE_BODY_BYTES`] of JSON; time until the whole answer has arrived.
    LargeJson,
    /// `GET /metrics` on relayd.
    Metrics,
}

impl Probe {
    fn request(self, host: &HeaderValue) -> Result<Request<Full<Bytes>>> {
        let (method, path, body) = match self {
            Probe::Json => (
                Method::POST,
                "/v1/chat/completions",
                Bytes::from_static(CHAT_BODY),
            ),
            Probe::StreamFirstByte | Probe::WholeStream => (
                Method::POST,
                "/v1/chat/completions",
                Bytes::from_static(CHAT_STREAM_BODY),
            ),
            Probe::HeldStream => (
                Method::POST,
                "/v1/messages",
                Bytes::from_static(MESSAGES_STREAM_BODY),
            ),
            Probe::LargeJson => (Method::POST, "/v1/chat/completions", large_body()),
            Probe::Metrics => (Method::GET, "/metrics", Bytes::new()),
        };
        let mut builder = Request::builder()
            .method(method)
            .uri(path)
            .header(HOST, host.clone());
        if !body.is_empty() {
            builder = builder.header(CONTENT_TYPE, "application/json");
        }
        if self == Probe::HeldStream {
            builder = builder.header("anthropic-version", "2023-06-01");
        }
        builder.body(Full::new(body)).context("building a request")
    }
}

/// The 2 MiB Chat Completions body, built once and shared (cloning `Bytes` copies nothing, so building the request is not timed as copying 2 MiB).
pub(crate) fn large_body() -> Bytes {
    static BODY: OnceLock<Bytes> = OnceLock::new();
    BODY.get_or_init(|| Bytes::from(chat_body_of_size(LARGE_BODY_BYTES)))
        .clone()
}

/// A Chat Completions body of exactly `size` bytes (or the smallest one, when `size` is below that), its user message padded with `x`.
pub(crate) fn chat_body_of_size(size: usize) -> Vec<u8> {
    let head = br#"{"model":"m","messages":[{"role":"user","content":""#;
    let tail = br#""}]}"#;
    let padding = size.saturating_sub(head.len() + tail.len());
    let mut body = Vec::with_capacity(head.len() + padding + tail.len());
    body.extend_from_slice(head);
    body.resize(head.len() + padding, b'x');
    body.extend_from_slice(tail);
    body
}

/// One HTTP/1.1 keep-alive connection with `TCP_NODELAY`, as a harness would hold.
#[derive(Debug)]
pub(crate) struct Conn {
    sender: SendRequest<Full<Bytes>>,
    driver: JoinHandle<()>,
    host: HeaderValue,
    /// The route credential sent with every request, if any.
    token: Option<HeaderValue>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

impl Conn {
    pub(crate) async fn open(addr: SocketAddr) -> Result<Conn> {
        Conn::start(connect(addr).await?, addr).await
    }

    /// A connection over TLS (HTTP/1.1, as no ALPN is offered), the server checked against `tls`'s roots under the IP address it is dialled at.
    pub(crate) async fn open_tls(addr: SocketAddr, tls: &Arc<ClientConfig>) -> Result<Conn> {
        let tcp = connect(addr).await?;
        let stream = TlsConnector::from(Arc::clone(tls))
            .connect(ServerName::IpAddress(addr.ip().into()), tcp)
            .await
            .with_context(|| format!("TLS handshake with {addr}"))?;
        Conn::start(stream, addr).await
    }

    async fn start<T>(io: T, addr: SocketAddr) -> Result<Conn>
    where
        T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
            .await
            .with_context(|| format!("starting HTTP/1.1 with {addr}"))?;
        let driver = tokio::spawn(async move {
            // The exchange that is waiting on this connection sees its error.
            let _ = connection.await;
        });
        let host = HeaderValue::from_str(&addr.to_string()).context("building the host header")?;
        Ok(Conn {
            sender,
            driver,
            host,
            token: None,
        })
    }

    /// The same connection, sending `token` as the route credential with every request.
    pub(crate) fn with_token(mut self, token: HeaderValue) -> Conn {
        self.token = Some(token);
        self
    }

    /// Sends the probe's request and returns its response once the head has arrived.
    pub(crate) async fn send(&mut self, probe: Probe) -> Result<Response<Incoming>> {
        let mut req = probe.request(&self.host)?;
        if let Some(token) = &self.token {
            req.headers_mut().insert(TOKEN_HEADER, token.clone());
        }
        self.sender.ready().await.context("connection closed")?;
        let res = self
            .sender
            .send_request(req)
            .await
            .context("sending a request")?;
        if res.status() != StatusCode::OK {
            bail!("{probe:?} answered {} instead of 200", res.status());
        }
        Ok(res)
    }

    /// One timed exchange: the time [`Probe`] describes, with the whole answer read.
    pub(crate) async fn exchange(&mut self, probe: Probe) -> Result<Duration> {
        let run = async {
            self.sender.ready().await.context("connection closed")?;
            let started = Instant::now();
            let mut body = self.send(probe).await?.into_body();
            match probe {
                Probe::StreamFirstByte => {
                    let first = first_data(&mut body).await?;
                    let elapsed = started.elapsed();
                    ensure!(first, "the stream ended without a body byte");
                    while let Some(frame) = body.frame().await {
                        frame.context("reading the rest of the stream")?;
                    }
                    Ok(elapsed)
                }
                Probe::Json
                | Probe::WholeStream
                | Probe::HeldStream
                | Probe::LargeJson
                | Probe::Metrics => {
                    body.collect().await.context("reading the answer")?;
                    Ok(started.elapsed())
                }
            }
        };
        tokio::time::timeout(EXCHANGE_TIMEOUT, run)
            .await
            .with_context(|| format!("{probe:?} took longer than {EXCHANGE_TIMEOUT:?}"))?
    }

    /// The whole body of a `GET /metrics`, as text.
    pub(crate) async fn metrics_text(&mut self) -> Result<String> {
        let body = self.send(Probe::Metrics).await?.into_body();
        let bytes = tokio::time::timeout(EXCHANGE_TIMEOUT, body.collect())
            .await
            .context("reading /metrics timed out")?
            .context("reading /metrics")?
            .to_bytes();
        String::from_utf8(bytes.to_vec()).context("/metrics is not UTF-8")
    }
}

/// A TCP connection to `addr` with `TCP_NODELAY`.
async fn connect(addr: SocketAddr) -> Result<TcpStream> {
    let tcp = TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to {addr}"))?;
    tcp.set_nodelay(true).context("setting TCP_NODELAY")?;
    Ok(tcp)
}

/// Reads frames until the first non-empty data frame; false when the body ended first.
pub(crate) async fn first_data(body: &mut Incoming) -> Result<bool> {
    while let Some(frame) = body.frame().await {
        let frame = frame.context("reading the stream")?;
        if frame.data_ref().is_some_and(|data| !data.is_empty()) {
            return Ok(true);
        }
    }
    Ok(false)
}
