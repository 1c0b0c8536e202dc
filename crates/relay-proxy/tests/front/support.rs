//! Running a real `Front` in-process against the provider stand-in, and the small clients the
//! tests talk to it with: hyper's legacy client where ordinary requests do, raw TCP where a
//! test needs exact bytes or a connection it can cut.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode, Version};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use relay_proxy::config::{BaseUrl, Config, Secs};
use relay_proxy::front::{Advertised, Front, FrontOptions, Mode, ProviderKeys};
use relay_proxy::metrics::Metrics;
use relay_proxy::server::{ServeOptions, ServeReport, serve};
use relay_proxy::upstream::{UpstreamClient, UpstreamOptions};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// How long a test waits for something that should happen at once.
pub(crate) const WAIT: Duration = Duration::from_secs(5);

/// Everything a test may change before the front starts.
#[derive(Debug, Clone)]
pub(crate) struct Setup {
    pub(crate) config: Config,
    pub(crate) mode: Mode,
    /// What `FrontOptions.bind` says (decides the loopback rules).
    pub(crate) bind: Ipv4Addr,
    /// Where the listener really listens.
    pub(crate) listen: Ipv4Addr,
    pub(crate) allow_anonymous_pass_through: bool,
    pub(crate) keys: ProviderKeys,
    /// `None`: `http://127.0.0.1:<port>` (`https` with TLS).
    pub(crate) advertised_host: Option<String>,
    pub(crate) tls: Option<Arc<rustls::ServerConfig>>,
    pub(crate) no_proxy: Option<String>,
    /// The daemon-wide budget of buffered hook body bytes; `None` keeps the default.
    pub(crate) hook_buffer_bytes: Option<u64>,
    /// Provider connections open at once, at most.
    pub(crate) provider_connections: usize,
}

impl Setup {
    /// A managed-mode front on loopback whose three upstream bases all point at `upstream`
    /// (`http://127.0.0.1:<port>`): OpenAI at `<upstream>/v1`, Anthropic at `<upstream>`,
    /// ChatGPT Codex at `<upstream>/backend-api/codex`.
    pub(crate) fn new(upstream: &str) -> Setup {
        let mut config = Config::default();
        config.upstream.openai_base_url = base(&format!("{upstream}/v1"));
        config.upstream.anthropic_base_url = base(upstream);
        config.upstream.chatgpt_codex_base_url = base(&format!("{upstream}/backend-api/codex"));
        Setup {
            config,
            mode: Mode::Managed,
            bind: Ipv4Addr::LOCALHOST,
            listen: Ipv4Addr::LOCALHOST,
            allow_anonymous_pass_through: false,
            keys: ProviderKeys::default(),
            advertised_host: None,
            tls: None,
            no_proxy: None,
            hook_buffer_bytes: None,
            provider_connections: 1024,
        }
    }

    pub(crate) fn header_read_timeout(mut self, secs: f64) -> Setup {
        self.config.daemon.timers.header_read_timeout_secs = secs_f64(secs);
        self
    }

    pub(crate) fn keepalive_idle(mut self, secs: f64) -> Setup {
        self.config.daemon.keepalive_idle_secs = secs_f64(secs);
        self
    }

    pub(crate) async fn start(self) -> Relay {
        let listener = TcpListener::bind((self.listen, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let upstream = &self.config.upstream;
        let client = UpstreamClient::new(&UpstreamOptions {
            connect_timeout: upstream.connect_timeout_secs.get(),
            response_timeout: (!upstream.response_timeout_secs.is_zero())
                .then(|| upstream.response_timeout_secs.get()),
            proxy_url: (!upstream.proxy_url.is_empty()).then(|| upstream.proxy_url.clone()),
            max_connections: self.provider_connections,
            no_proxy: self.no_proxy.clone(),
        })
        .unwrap();
        let config = Arc::new(self.config);
        let instance_id = uuid::Uuid::now_v7();
        let front = Front::new(
            FrontOptions {
                bind: self.bind,
                port: addr.port(),
                advertised: Advertised {
                    https: self.tls.is_some(),
                    host: self
                        .advertised_host
                        .clone()
                        .unwrap_or_else(|| "127.0.0.1".into()),
                    port: addr.port(),
                },
                mode: self.mode,
                allow_anonymous_pass_through: self.allow_anonymous_pass_through,
                config: config.clone(),
                instance_id,
            },
            client,
            self.keys,
            Arc::new(Metrics::new()),
        );
        let front = Arc::new(match self.hook_buffer_bytes {
            Some(bytes) => front.with_hook_buffer_bytes(bytes),
            None => front,
        });
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve(
            listener,
            ServeOptions {
                max_connections: config.daemon.max_connections,
                header_read_timeout: config.daemon.timers.header_read_timeout_secs.get(),
                keepalive_idle: config.daemon.keepalive_idle_secs.get(),
                write_stall: config.daemon.stream_idle_secs.get(),
                drain_timeout: Duration::from_secs(1),
                tls: self.tls,
                ..ServeOptions::default()
            },
            front.clone(),
            async move {
                stopped.await.ok();
            },
        ));
        Relay {
            addr,
            front,
            instance_id,
            stop: Some(stop),
            task: Some(task),
        }
    }
}

pub(crate) fn base(text: &str) -> BaseUrl {
    BaseUrl::parse(text).unwrap()
}

pub(crate) fn secs_f64(secs: f64) -> Secs {
    Secs(Duration::from_secs_f64(secs))
}

/// A running front. Dropping it stops the server.
#[derive(Debug)]
pub(crate) struct Relay {
    pub(crate) addr: SocketAddr,
    pub(crate) front: Arc<Front>,
    pub(crate) instance_id: uuid::Uuid,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<ServeReport>>,
}

impl Drop for Relay {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl Relay {
    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Stops the server and waits for it.
    pub(crate) async fn stop(mut self) -> ServeReport {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.take().unwrap().await.unwrap()
    }

    /// A request to this front (`path` with query), HTTP/1.1.
    pub(crate) fn request(&self, method: Method, path: &str) -> http::request::Builder {
        Request::builder().method(method).uri(self.url(path))
    }

    /// Sends over a fresh HTTP/1.1 connection and reads the whole answer.
    pub(crate) async fn send(&self, req: Request<Full<Bytes>>) -> Answer {
        Answer::read(http1_client().request(req).await.unwrap()).await
    }

    /// Sends over a fresh prior-knowledge HTTP/2 connection and reads the whole answer.
    pub(crate) async fn send_h2(&self, req: Request<Full<Bytes>>) -> Answer {
        Answer::read(h2c_client().request(req).await.unwrap()).await
    }

    /// A JSON POST with extra headers.
    pub(crate) async fn post(&self, path: &str, headers: &[(&str, &str)], body: &str) -> Answer {
        let mut req = self
            .request(Method::POST, path)
            .header("content-type", "application/json");
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        self.send(req.body(Full::new(Bytes::from(body.to_owned()))).unwrap())
            .await
    }

    pub(crate) async fn get(&self, path: &str, headers: &[(&str, &str)]) -> Answer {
        let mut req = self.request(Method::GET, path);
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        self.send(req.body(Full::default()).unwrap()).await
    }

    /// A raw TCP connection to the front.
    pub(crate) async fn connect(&self) -> TcpStream {
        let stream = TcpStream::connect(self.addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        stream
    }

    /// `Host` value for loopback clients.
    pub(crate) fn host(&self) -> String {
        format!("127.0.0.1:{}", self.addr.port())
    }
}

pub(crate) type TestClient = Client<HttpConnector, Full<Bytes>>;

pub(crate) fn http1_client() -> TestClient {
    Client::builder(TokioExecutor::new()).build_http()
}

pub(crate) fn h2c_client() -> TestClient {
    Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http()
}

/// A whole answer.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) version: Version,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

impl Answer {
    pub(crate) async fn read(res: Response<Incoming>) -> Answer {
        let status = res.status();
        let version = res.version();
        let headers = res.headers().clone();
        let body = res.into_body().collect().await.unwrap().to_bytes();
        Answer {
            status,
            version,
            headers,
            body,
        }
    }

    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "{} body is not JSON ({e}): {:?}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    /// Asserts a Relay error: this status and `{"error":{"type":kind,"message":<string>}}`
    /// with nothing else, and `Cache-Control: no-store`.
    #[track_caller]
    pub(crate) fn assert_error(&self, status: u16, kind: &str) {
        assert_error_body(
            self.status.as_u16(),
            &self.headers,
            &self.body,
            status,
            kind,
        );
    }
}

#[track_caller]
pub(crate) fn assert_error_body(
    got_status: u16,
    headers: &HeaderMap,
    body: &[u8],
    status: u16,
    kind: &str,
) {
    let text = String::from_utf8_lossy(body);
    assert_eq!(got_status, status, "body: {text}");
    assert_eq!(
        headers.get("content-type").map(|v| v.as_bytes()),
        Some(&b"application/json"[..]),
        "{text}"
    );
    let value: Value = serde_json::from_slice(body).unwrap_or_else(|e| panic!("{e}: {text}"));
    let error = value["error"]
        .as_object()
        .unwrap_or_else(|| panic!("{text}"));
    assert_eq!(value.as_object().unwrap().len(), 1, "{text}");
    assert_eq!(error["type"], kind, "{text}");
    assert!(
        error["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{text}"
    );
    assert!(
        error.keys().all(|k| k == "type" || k == "message"),
        "{text}"
    );
}

/// A fresh valid route token, encoded.
pub(crate) fn token() -> String {
    relay_identity::RouteToken::generate().unwrap().encode()
}

/// The recorded headers minus those the forwarding hop sets itself (`host`, framing).
pub(crate) fn forwarded_headers(recorded: &relay_testkit::Recorded) -> Vec<(String, Vec<u8>)> {
    recorded
        .headers
        .iter()
        .filter(|(name, _)| {
            !matches!(
                name.as_str(),
                "host" | "content-length" | "transfer-encoding"
            )
        })
        .cloned()
        .collect()
}

/// Asserts that nothing of Relay's own travelled upstream.
#[track_caller]
pub(crate) fn assert_no_relay_headers(recorded: &relay_testkit::Recorded) {
    for (name, _) in &recorded.headers {
        assert!(!name.starts_with("x-relay-"), "{name} reached the provider");
    }
}

// ---- raw HTTP/1 over TCP ----

/// A response read off a raw connection.
#[derive(Debug)]
pub(crate) struct RawResponse {
    pub(crate) status: u16,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Vec<u8>,
}

impl RawResponse {
    #[track_caller]
    pub(crate) fn assert_error(&self, status: u16, kind: &str) {
        assert_error_body(self.status, &self.headers, &self.body, status, kind);
    }

    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }
}

/// Reads one response whose body has a `Content-Length` (or none at all), skipping 1xx.
pub(crate) async fn read_response(stream: &mut TcpStream) -> RawResponse {
    let mut buf = Vec::new();
    loop {
        let (status, headers, head_len) = loop {
            let mut slots = [httparse::EMPTY_HEADER; 64];
            let mut res = httparse::Response::new(&mut slots);
            if let httparse::Status::Complete(len) = res.parse(&buf).unwrap() {
                let mut headers = HeaderMap::new();
                for h in res.headers.iter() {
                    headers.append(
                        http::HeaderName::from_bytes(h.name.as_bytes()).unwrap(),
                        http::HeaderValue::from_bytes(h.value).unwrap(),
                    );
                }
                break (res.code.unwrap(), headers, len);
            }
            let mut chunk = [0u8; 8192];
            let n = tokio::time::timeout(WAIT, stream.read(&mut chunk))
                .await
                .expect("no response head in time")
                .unwrap();
            assert!(n > 0, "connection closed before a response head: {buf:?}");
            buf.extend_from_slice(&chunk[..n]);
        };
        buf.drain(..head_len);
        if (100..200).contains(&status) {
            continue;
        }
        let len: usize = headers
            .get("content-length")
            .map_or(0, |v| v.to_str().unwrap().parse().unwrap());
        while buf.len() < len {
            let mut chunk = [0u8; 8192];
            let n = tokio::time::timeout(WAIT, stream.read(&mut chunk))
                .await
                .expect("no response body in time")
                .unwrap();
            assert!(n > 0, "connection closed inside the response body");
            buf.extend_from_slice(&chunk[..n]);
        }
        buf.truncate(len);
        return RawResponse {
            status,
            headers,
            body: buf,
        };
    }
}

/// Writes `head` and `body` and reads the answer.
pub(crate) async fn raw_exchange(stream: &mut TcpStream, bytes: &[u8]) -> RawResponse {
    stream.write_all(bytes).await.unwrap();
    read_response(stream).await
}

/// True when the peer closes (or resets) the connection within `within`; any bytes read on
/// the way are discarded.
pub(crate) async fn is_closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    let mut chunk = [0u8; 4096];
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut chunk)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

/// The local machine's own non-loopback IPv4 address, if it has one: a connection to it
/// from this machine has a non-loopback peer address.
pub(crate) fn non_loopback_ip() -> Option<Ipv4Addr> {
    // Connecting a UDP socket sends nothing; it only picks the source address of the route.
    let socket = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).ok()?;
    socket.connect((Ipv4Addr::new(192, 0, 2, 1), 9)).ok()?;
    match socket.local_addr().ok()?.ip() {
        IpAddr::V4(ip) if !ip.is_loopback() && !ip.is_unspecified() => Some(ip),
        _ => None,
    }
}

/// A listener that must never see a connection: it proves a request did not reach any
/// upstream at all.
#[derive(Debug)]
pub(crate) struct Tripwire {
    listener: TcpListener,
}

impl Tripwire {
    pub(crate) async fn new() -> Tripwire {
        Tripwire {
            listener: TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap(),
        }
    }

    pub(crate) fn base_url(&self) -> String {
        format!("http://{}", self.listener.local_addr().unwrap())
    }

    /// True when some connection reached the listener. The kernel completes handshakes
    /// without `accept`, so a connection made before the answer is already queued.
    pub(crate) async fn was_touched(&self) -> bool {
        tokio::time::timeout(Duration::from_millis(50), self.listener.accept())
            .await
            .is_ok()
    }
}

/// Reads `body` into `received` until it holds `len` bytes or more; fails when the body
/// ends or fails first, or a frame takes longer than [`WAIT`].
pub(crate) async fn read_to_length(body: &mut Incoming, received: &mut Vec<u8>, len: usize) {
    while received.len() < len {
        let frame = tokio::time::timeout(WAIT, body.frame())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "no frame within {WAIT:?}, {} of {len} bytes read",
                    received.len()
                )
            })
            .expect("the body ended early")
            .unwrap();
        if let Ok(data) = frame.into_data() {
            received.extend_from_slice(&data);
        }
    }
}

/// A streaming model request to `path` on `relay`, with a caller's key.
pub(crate) fn stream_request(relay: &Relay, path: &str) -> http::Request<Full<Bytes>> {
    relay
        .request(Method::POST, path)
        .header("content-type", "application/json")
        .header("authorization", "Bearer caller")
        .body(Full::new(Bytes::from_static(
            br#"{"model":"m","stream":true}"#,
        )))
        .unwrap()
}
