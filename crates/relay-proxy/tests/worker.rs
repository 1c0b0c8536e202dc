//! Integration tests of the worker's data plane (SPEC §5.5, §3.2–§3.4, §3.7, §7.2): a real
//! `WorkerHandler` served over TLS on `127.0.0.1:0` with a freshly generated identity, in
//! front of the recording provider stand-in, called by a client that pins the certificate
//! digest the way the daemon does. Every test asserts on what the stand-in received.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test set-up helpers fail the test on error"
)]

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::{Bytes, BytesMut};
use futures_util::FutureExt;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use relay_proxy::config::{BaseUrl, Config, Secs};
use relay_proxy::server::{ServeReport, serve};
use relay_proxy::tls;
use relay_proxy::upstream::{UpstreamClient, UpstreamOptions};
use relay_proxy::worker::{
    Observer, PluginHost, READY_PATH, WorkerHandler, WorkerIdentity, WorkerLimits, WorkerState,
    generation_redactors, serve_options,
};
use relay_testkit::{
    ANTHROPIC_MESSAGES_SSE, Behaviour, CannedResponse, FIXTURE_REQUEST_NAMES, OPENAI_CHAT_SSE,
    OPENAI_RESPONSES_SSE, StandIn, eventually, eventually_some, fixture_request,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// How long a test waits for something that should happen at once.
const WAIT: Duration = Duration::from_secs(5);

const SECRET: [u8; 32] = [0x5a; 32];

const STREAMS: [(&str, &[u8]); 3] = [
    ("/v1/messages?beta=true", ANTHROPIC_MESSAGES_SSE),
    ("/v1/responses", OPENAI_RESPONSES_SSE),
    ("/v1/chat/completions", OPENAI_CHAT_SSE),
];

// ---- set-up ----

/// Everything a test may change before the worker starts.
struct Setup {
    config: Config,
    limits: WorkerLimits,
    /// `None`: the worker has not registered yet.
    secret: Option<[u8; 32]>,
    ready: bool,
    plugins: Option<PluginHost>,
}

impl Setup {
    /// A registered, ready worker whose three upstream bases point at `upstream`: OpenAI at
    /// `<upstream>/v1`, Anthropic at `<upstream>`, ChatGPT Codex at
    /// `<upstream>/backend-api/codex`.
    fn new(upstream: &str) -> Setup {
        let mut config = Config::default();
        config.upstream.openai_base_url = base(&format!("{upstream}/v1"));
        config.upstream.anthropic_base_url = base(upstream);
        config.upstream.chatgpt_codex_base_url = base(&format!("{upstream}/backend-api/codex"));
        Setup {
            config,
            limits: WorkerLimits::default(),
            secret: Some(SECRET),
            ready: true,
            plugins: None,
        }
    }

    async fn start(self) -> Worker {
        let identity = WorkerIdentity::generate("127.0.0.1").unwrap();
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let upstream = &self.config.upstream;
        let client = UpstreamClient::new(&UpstreamOptions {
            connect_timeout: upstream.connect_timeout_secs.get(),
            response_timeout: (!upstream.response_timeout_secs.is_zero())
                .then(|| upstream.response_timeout_secs.get()),
            proxy_url: None,
            max_connections: 1024,
            no_proxy: None,
        })
        .unwrap();
        let state = Arc::new(WorkerState::new());
        if let Some(secret) = self.secret {
            state.set_secret(secret);
        }
        if self.ready {
            state.set_ready();
        }
        let handler = Arc::new(WorkerHandler::new(
            state.clone(),
            Arc::new(self.config),
            client,
            self.limits,
        ));
        if let Some(plugins) = self.plugins {
            handler.install_plugins(plugins);
        }
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve(
            listener,
            serve_options(&identity, Duration::from_secs(1)),
            handler.clone(),
            async move {
                stopped.await.ok();
            },
        ));
        let sha256 = identity.certificate_sha256();
        Worker {
            addr,
            state,
            handler,
            sha256,
            client: pinned_client(sha256),
            _stop: stop,
            _task: task,
        }
    }
}

fn base(text: &str) -> BaseUrl {
    BaseUrl::parse(text).unwrap()
}

type PinnedClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// A client that trusts exactly one certificate digest, as the daemon does.
fn pinned_client(sha256: [u8; 32]) -> PinnedClient {
    let mut config = tls::pinned_client_config(sha256).unwrap();
    // hyper-rustls sets ALPN itself (http/1.1 here) and refuses a preset list.
    config.alpn_protocols.clear();
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_only()
        .enable_http1()
        .build();
    Client::builder(TokioExecutor::new()).build(connector)
}

fn secret_header(secret: [u8; 32]) -> String {
    URL_SAFE_NO_PAD.encode(secret)
}

/// A running worker. Dropping it stops the server.
struct Worker {
    addr: SocketAddr,
    state: Arc<WorkerState>,
    handler: Arc<WorkerHandler>,
    sha256: [u8; 32],
    client: PinnedClient,
    _stop: oneshot::Sender<()>,
    _task: JoinHandle<ServeReport>,
}

impl Worker {
    fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.addr)
    }

    /// A request carrying the right secret.
    fn request(&self, method: Method, path: &str) -> http::request::Builder {
        self.unauthenticated(method, path)
            .header("x-relay-worker-secret", secret_header(SECRET))
    }

    fn unauthenticated(&self, method: Method, path: &str) -> http::request::Builder {
        Request::builder().method(method).uri(self.url(path))
    }

    async fn send(&self, req: Request<Full<Bytes>>) -> Answer {
        Answer::read(self.client.request(req).await.unwrap()).await
    }

    async fn post(&self, path: &str, body: &[u8]) -> Answer {
        let req = self
            .request(Method::POST, path)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::copy_from_slice(body)))
            .unwrap();
        self.send(req).await
    }

    async fn get(&self, path: &str) -> Answer {
        self.send(
            self.request(Method::GET, path)
                .body(Full::default())
                .unwrap(),
        )
        .await
    }

    /// A raw TLS connection pinned to this worker.
    async fn connect(&self) -> tokio_rustls::client::TlsStream<TcpStream> {
        connect_pinned(self.addr, self.sha256).await.unwrap()
    }
}

async fn connect_pinned(
    addr: SocketAddr,
    sha256: [u8; 32],
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let connector =
        tokio_rustls::TlsConnector::from(Arc::new(tls::pinned_client_config(sha256).unwrap()));
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    connector
        .connect(ServerName::IpAddress(addr.ip().into()), tcp)
        .await
}

/// A whole answer.
#[derive(Debug)]
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Answer {
    async fn read(res: Response<Incoming>) -> Answer {
        let (parts, body) = res.into_parts();
        Answer {
            status: parts.status,
            headers: parts.headers,
            body: body.collect().await.unwrap().to_bytes(),
        }
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    /// Asserts a Relay error: this status and `{"error":{"type":kind,"message":…}}`.
    #[track_caller]
    fn assert_error(&self, status: u16, kind: &str) {
        let text = String::from_utf8_lossy(&self.body);
        assert_eq!(self.status.as_u16(), status, "{text}");
        assert_eq!(
            self.header("content-type"),
            Some("application/json"),
            "{text}"
        );
        let value: Value = serde_json::from_slice(&self.body).unwrap();
        assert_eq!(value["error"]["type"], kind, "{text}");
        assert!(
            value["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
        if status == 503 {
            assert_eq!(self.header("retry-after"), Some("1"));
        }
    }
}

/// The body frames of a response and how the body ended.
struct Received {
    bytes: Bytes,
    error: Option<String>,
}

async fn receive_body(mut body: Incoming) -> Received {
    let mut bytes = BytesMut::new();
    let error = loop {
        match body.frame().await {
            None => break None,
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    bytes.extend_from_slice(&data);
                }
            }
            Some(Err(e)) => break Some(e.to_string()),
        }
    };
    Received {
        bytes: bytes.freeze(),
        error,
    }
}

fn stream_request(worker: &Worker, path: &str) -> Request<Full<Bytes>> {
    worker
        .request(Method::POST, path)
        .header("content-type", "application/json")
        .header("authorization", "Bearer caller")
        .body(Full::new(Bytes::from_static(
            br#"{"model":"m","stream":true}"#,
        )))
        .unwrap()
}

/// Reads a response head off a raw stream, returning the status line and headers as text.
async fn read_head(stream: &mut (impl AsyncRead + Unpin), within: Duration) -> String {
    let deadline = tokio::time::Instant::now() + within;
    let mut seen = Vec::new();
    while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout_at(deadline, stream.read(&mut chunk))
            .await
            .expect("no response head in time")
            .unwrap();
        assert!(n > 0, "closed before a response head: {seen:?}");
        seen.extend_from_slice(&chunk[..n]);
    }
    String::from_utf8_lossy(&seen).into_owned()
}

/// The stand-in's request id from a response head.
fn request_id(headers: &HeaderMap) -> u64 {
    headers["x-stand-in-request-id"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

#[track_caller]
fn assert_no_relay_headers(recorded: &relay_testkit::Recorded) {
    for (name, _) in &recorded.headers {
        assert!(!name.starts_with("x-relay-"), "{name} reached the provider");
    }
}

// ---- the secret ----

#[tokio::test]
async fn every_request_needs_the_generation_secret() {
    let stand_in = StandIn::start().await.unwrap();
    let worker = Setup::new(&stand_in.base_url()).start().await;
    let mut other = SECRET;
    other[0] ^= 1;
    let wrong_values = [
        secret_header(other),
        format!("{}=", secret_header(SECRET)),
        base64::engine::general_purpose::STANDARD.encode(SECRET),
        hex::encode(SECRET),
        String::new(),
    ];
    for path in ["/v1/messages", "/hooks/claude-code", READY_PATH, "/nowhere"] {
        let method = if path == READY_PATH {
            Method::GET
        } else {
            Method::POST
        };
        // Missing.
        let req = worker
            .unauthenticated(method.clone(), path)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from_static(b"{}")))
            .unwrap();
        worker
            .send(req)
            .await
            .assert_error(401, "relay_unauthorized");
        // Wrong.
        for value in &wrong_values {
            let req = worker
                .unauthenticated(method.clone(), path)
                .header("x-relay-worker-secret", value.as_str())
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from_static(b"{}")))
                .unwrap();
            worker
                .send(req)
                .await
                .assert_error(401, "relay_unauthorized");
        }
        // Right, but twice.
        let req = worker
            .request(method.clone(), path)
            .header("x-relay-worker-secret", secret_header(SECRET))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from_static(b"{}")))
            .unwrap();
        worker
            .send(req)
            .await
            .assert_error(401, "relay_unauthorized");
    }
    // A replaced secret no longer works; the new one does.
    worker.state.set_secret(other);
    worker
        .post("/v1/chat/completions", b"{}")
        .await
        .assert_error(401, "relay_unauthorized");
    worker.state.set_secret(SECRET);
    // Nothing reached the provider: the first request it sees is this one.
    let answer = worker
        .post("/v1/chat/completions", br#"{"marker":1}"#)
        .await;
    assert_eq!(answer.status, 200);
    let recorded = stand_in.wait_for_requests(1, WAIT).await.unwrap();
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].body, r#"{"marker":1}"#);
}

/// The daemon must tell the worker's refusal of its secret from a provider's 401 (a wrong
/// key, an expired login), which goes back to the client as it is: only the former is
/// marked.
#[tokio::test]
async fn only_the_workers_own_refusal_of_the_secret_is_marked() {
    let stand_in = StandIn::start().await.unwrap();
    let worker = Setup::new(&stand_in.base_url()).start().await;
    let req = worker
        .unauthenticated(Method::POST, "/v1/messages")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap();
    let refused = worker.send(req).await;
    refused.assert_error(401, "relay_unauthorized");
    assert_eq!(refused.header("x-relay-worker-refused"), Some("secret"));

    let mut login = CannedResponse::new(StatusCode::UNAUTHORIZED);
    login.body = Bytes::from_static(br#"{"type":"error","error":{"type":"authentication_error"}}"#);
    // A provider that sends the worker's marks itself does not pass them on.
    for name in ["x-relay-worker-refused", "x-relay-worker-upstream-failed"] {
        login.headers.insert(
            http::HeaderName::from_static(name),
            http::HeaderValue::from_static("connect_timeout"),
        );
    }
    stand_in.set_behaviour(Behaviour {
        status: Some(login),
        ..Behaviour::default()
    });
    let provider = worker.post("/v1/messages", b"{}").await;
    assert_eq!(provider.status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        provider.body,
        r#"{"type":"error","error":{"type":"authentication_error"}}"#
    );
    assert_eq!(provider.header("x-relay-worker-refused"), None);
    assert_eq!(provider.header("x-relay-worker-upstream-failed"), None);
}

#[tokio::test]
async fn a_worker_without_a_secret_yet_answers_401() {
    let stand_in = StandIn::start().await.unwrap();
    let mut setup = Setup::new(&stand_in.base_url());
    setup.secret = None;
    let worker = setup.start().await;
    for header in [secret_header(SECRET), secret_header([0; 32]), String::new()] {
        let req = worker
            .unauthenticated(Method::GET, READY_PATH)
            .header("x-relay-worker-secret", header)
            .body(Full::default())
            .unwrap();
        worker
            .send(req)
            .await
            .assert_error(401, "relay_unauthorized");
    }
    worker
        .post("/v1/messages", b"{}")
        .await
        .assert_error(401, "relay_unauthorized");
    assert_eq!(stand_in.request_count(), 0);
}

/// The secret is checked before the body is read: a wrong secret with a body that never
/// ends, or a huge one, is answered at once and the body is not consumed.
#[tokio::test]
async fn a_wrong_secret_is_answered_before_the_body_is_read() {
    let stand_in = StandIn::start().await.unwrap();
    let setup = Setup::new(&stand_in.base_url());
    // "At once" is before any timer of the worker's could end the body: the wait for the
    // answers below is far shorter than its stream idle time, the only one that could.
    assert!(setup.limits.stream_idle >= 10 * WAIT);
    let worker = setup.start().await;
    let head = "POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n\
                Content-Type: application/json\r\nx-relay-worker-secret: wrong\r\n\
                Transfer-Encoding: chunked\r\n\r\n";

    // A body that never ends.
    let mut stream = worker.connect().await;
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(b"2\r\n{\"\r\n").await.unwrap();
    let text = read_head(&mut stream, WAIT).await;
    assert!(text.starts_with("HTTP/1.1 401"), "{text}");

    // A 256 MiB body, written as fast as the worker takes it.
    let stream = worker.connect().await;
    let (mut reader, mut writer) = tokio::io::split(stream);
    let writing = tokio::spawn(async move {
        writer.write_all(head.as_bytes()).await?;
        let chunk = vec![b'x'; 64 * 1024];
        let framed = [
            format!("{:x}\r\n", chunk.len()).into_bytes(),
            chunk,
            b"\r\n".to_vec(),
        ]
        .concat();
        for _ in 0..4096 {
            writer.write_all(&framed).await?;
        }
        writer.write_all(b"0\r\n\r\n").await?;
        writer.flush().await
    });
    let text = read_head(&mut reader, WAIT).await;
    assert!(text.starts_with("HTTP/1.1 401"), "{text}");
    // The worker closes the connection instead of reading the rest, so the writer fails.
    drop(reader);
    let written = tokio::time::timeout(WAIT, writing).await.unwrap().unwrap();
    assert!(
        written.is_err(),
        "the worker read a 256 MiB body it had refused"
    );
    assert_eq!(stand_in.request_count(), 0);
}

// ---- readiness and states ----

#[tokio::test]
async fn the_readiness_probe_says_ready_once_plugins_are_loaded() {
    let stand_in = StandIn::start().await.unwrap();
    let mut setup = Setup::new(&stand_in.base_url());
    setup.ready = false;
    let worker = setup.start().await;
    // Starting: the probe, model requests and hooks get 503.
    worker
        .get(READY_PATH)
        .await
        .assert_error(503, "relay_worker_unavailable");
    let refused = worker.post("/v1/messages", b"{}").await;
    refused.assert_error(503, "relay_worker_unavailable");
    // Marked as the worker's own refusal, so the daemon can tell it from a provider's 503.
    assert_eq!(
        refused.header("x-relay-worker-refused"),
        Some("unavailable")
    );
    worker
        .post("/hooks/codex", b"{}")
        .await
        .assert_error(503, "relay_worker_unavailable");
    worker.state.set_ready();
    let answer = worker.get(READY_PATH).await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.body, r#"{"ready":true}"#);
    assert_eq!(answer.header("content-type"), Some("application/json"));
    assert_eq!(answer.header("cache-control"), Some("no-store"));
    // Only GET.
    worker
        .post(READY_PATH, b"{}")
        .await
        .assert_error(405, "relay_method_not_allowed");
    // The daemon's own routes do not exist here.
    for path in ["/healthz", "/_relay/v1/workers", "/nowhere"] {
        worker.get(path).await.assert_error(404, "relay_not_found");
    }
    let answer = worker
        .send(
            worker
                .request(Method::HEAD, "/")
                .body(Full::default())
                .unwrap(),
        )
        .await;
    assert_eq!(answer.status, 404);
    assert_eq!(stand_in.request_count(), 0);
}

#[tokio::test]
async fn without_control_new_requests_get_503_while_an_accepted_stream_finishes() {
    let stand_in = StandIn::start().await.unwrap();
    let worker = Setup::new(&stand_in.base_url()).start().await;
    stand_in.set_behaviour(Behaviour {
        stream_events: Some(20),
        pace: Some(Duration::from_millis(20)),
        ..Behaviour::default()
    });
    let res = worker
        .client
        .request(stream_request(&worker, "/v1/messages"))
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(worker.state.in_flight(), 1);
    worker.state.set_control(false);
    stand_in.set_behaviour(Behaviour::default());
    worker
        .post("/v1/messages", b"{}")
        .await
        .assert_error(503, "relay_worker_unavailable");
    worker
        .post("/hooks/claude-code", b"{}")
        .await
        .assert_error(503, "relay_worker_unavailable");
    worker
        .get(READY_PATH)
        .await
        .assert_error(503, "relay_worker_unavailable");
    // The secret is still checked first.
    let req = worker
        .unauthenticated(Method::GET, READY_PATH)
        .body(Full::default())
        .unwrap();
    worker
        .send(req)
        .await
        .assert_error(401, "relay_unauthorized");
    // The accepted stream completes.
    let received = receive_body(res.into_body()).await;
    assert!(received.error.is_none(), "{:?}", received.error);
    assert!(received.bytes.ends_with(b"\n\n"));
    assert!(eventually(WAIT, || worker.state.in_flight() == 0).await);
    assert_eq!(stand_in.request_count(), 1);
    // A resume: a fresh secret, then control.
    let fresh = [0x11; 32];
    worker.state.set_secret(fresh);
    worker.state.set_control(true);
    let req = worker
        .unauthenticated(Method::GET, READY_PATH)
        .header("x-relay-worker-secret", secret_header(fresh))
        .body(Full::default())
        .unwrap();
    assert_eq!(worker.send(req).await.status, 200);
}

#[tokio::test]
async fn draining_refuses_model_requests_answers_hooks_and_resolves_once_in_flight_ends() {
    let stand_in = StandIn::start().await.unwrap();
    let worker = Setup::new(&stand_in.base_url()).start().await;
    stand_in.set_behaviour(Behaviour {
        stream_events: Some(20),
        pace: Some(Duration::from_millis(20)),
        ..Behaviour::default()
    });
    let res = worker
        .client
        .request(stream_request(&worker, "/v1/chat/completions"))
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    worker
        .state
        .start_drain(Instant::now() + Duration::from_secs(60));
    worker
        .post("/v1/chat/completions", b"{}")
        .await
        .assert_error(503, "relay_worker_unavailable");
    worker
        .get("/v1/models")
        .await
        .assert_error(503, "relay_worker_unavailable");
    let answer = worker
        .post("/hooks/claude-code", br#"{"hook_event_name":"Stop"}"#)
        .await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.body, r#"{"continue":true}"#);
    worker
        .get(READY_PATH)
        .await
        .assert_error(503, "relay_worker_unavailable");
    // The stream is still in flight, so the drain is not done.
    let mut drained = Box::pin(worker.state.drained());
    assert!((&mut drained).now_or_never().is_none());
    assert_eq!(worker.state.in_flight(), 1);
    let received = receive_body(res.into_body()).await;
    assert!(received.error.is_none(), "{:?}", received.error);
    tokio::time::timeout(WAIT, drained)
        .await
        .expect("drained() did not resolve after the last stream ended");
    assert_eq!(worker.state.in_flight(), 0);
    assert_eq!(stand_in.request_count(), 1);
}

// ---- model routes ----

#[tokio::test]
async fn every_model_route_is_forwarded_byte_for_byte_without_relay_headers() {
    let stand_in = StandIn::start().await.unwrap();
    let worker = Setup::new(&stand_in.base_url()).start().await;
    // Odd spacing, key order and escapes that re-serialising would change.
    let body: &[u8] = b"{ \"z\":1,\"model\" : \"m\",\"a\":\"\\u00e9\xc3\xa9\",\"stream\":false}";
    for (method, path, upstream_path) in [
        (
            Method::POST,
            "/v1/messages?beta=true",
            "/v1/messages?beta=true",
        ),
        (
            Method::POST,
            "/v1/messages/count_tokens",
            "/v1/messages/count_tokens",
        ),
        (Method::POST, "/v1/responses", "/v1/responses"),
        (Method::POST, "/responses", "/v1/responses"),
        (
            Method::POST,
            "/backend-api/codex/responses",
            "/backend-api/codex/responses",
        ),
        (Method::POST, "/v1/chat/completions", "/v1/chat/completions"),
        (Method::POST, "/chat/completions", "/v1/chat/completions"),
        (Method::GET, "/v1/models", "/v1/models"),
        (Method::GET, "/models", "/v1/models"),
    ] {
        stand_in.clear_requests();
        let mut req = worker
            .request(method.clone(), path)
            .header("authorization", "Bearer caller-key")
            .header("x-api-key", "caller-anthropic-key")
            .header("session_id", "pi-session")
            .header("x-relay-session-id", "relay-session")
            .header("x-vendor-thing", "a")
            .header("x-vendor-thing", "b");
        let sent = if method == Method::POST {
            req = req.header("content-type", "application/json");
            Full::new(Bytes::from_static(body))
        } else {
            Full::default()
        };
        let answer = worker.send(req.body(sent).unwrap()).await;
        assert_eq!(answer.status, 200, "{path}: {:?}", answer.body);
        let recorded = stand_in.wait_for_requests(1, WAIT).await.unwrap();
        let recorded = &recorded[0];
        assert_eq!(recorded.method, method, "{path}");
        assert_eq!(recorded.path_and_query, upstream_path, "{path}");
        if method == Method::POST {
            assert_eq!(recorded.body, body, "{path}");
            assert!(recorded.body_complete);
        }
        assert_no_relay_headers(recorded);
        assert_eq!(
            recorded.header_str("authorization"),
            Some("Bearer caller-key")
        );
        assert_eq!(
            recorded.header_str("x-api-key"),
            Some("caller-anthropic-key")
        );
        assert_eq!(recorded.header_str("session_id"), Some("pi-session"));
        assert_eq!(recorded.header_values("x-vendor-thing"), [b"a", b"b"]);
        let models = path.ends_with("models");
        assert_eq!(
            answer.header("cache-control") == Some("no-store"),
            models,
            "{path}"
        );
    }
    // The models list of Anthropic, chosen by `anthropic-version`.
    stand_in.clear_requests();
    let req = worker
        .request(Method::GET, "/models")
        .header("anthropic-version", "2023-06-01")
        .body(Full::default())
        .unwrap();
    assert_eq!(worker.send(req).await.status, 200);
    let recorded = stand_in.wait_for_requests(1, WAIT).await.unwrap();
    assert_eq!(recorded[0].path_and_query, "/v1/models");
    assert_eq!(
        recorded[0].header_str("anthropic-version"),
        Some("2023-06-01")
    );
}

/// The requests the real harnesses sent reach the provider with their bodies and headers.
#[tokio::test]
async fn harness_requests_reach_the_provider_unchanged() {
    let stand_in = StandIn::start().await.unwrap();
    let worker = Setup::new(&stand_in.base_url()).start().await;
    for name in FIXTURE_REQUEST_NAMES {
        stand_in.clear_requests();
        let fixture = fixture_request(name).unwrap();
        let mut req = fixture.to_request(&worker.url("")).unwrap();
        req.headers_mut().insert(
            "x-relay-worker-secret",
            secret_header(SECRET).parse().unwrap(),
        );
        let answer = worker.send(req).await;
        assert_eq!(answer.status, 200, "{name}");
        let recorded = stand_in.wait_for_requests(1, WAIT).await.unwrap();
        assert_eq!(recorded[0].body, fixture.body, "{name}");
        assert_no_relay_headers(&recorded[0]);
        for (header, value) in &fixture.headers {
            let header = header.to_ascii_lowercase();
            let hop_by_hop = [
                "connection",
                "keep-alive",
                "te",
                "transfer-encoding",
                "upgrade",
            ];
            if header.starts_with("x-relay-") || hop_by_hop.contains(&header.as_str()) {
                continue;
            }
            assert!(
                recorded[0]
                    .header_values(&header)
                    .contains(&value.as_bytes()),
                "{name}: {header} did not pass"
            );
        }
    }
}

#[tokio::test]
async fn a_caller_selected_upstream_is_honoured_only_when_allowed() {
    let stand_in = StandIn::start().await.unwrap();
    let selected = StandIn::start().await.unwrap();
    let mut setup = Setup::new(&stand_in.base_url());
    setup.config.upstream.allowed_base_urls = vec![base(&format!("{}/v1", selected.base_url()))];
    let worker = setup.start().await;
    let send = |base: String| {
        let req = worker
            .request(Method::POST, "/v1/chat/completions")
            .header("content-type", "application/json")
            .header("x-relay-upstream-base-url", base)
            .body(Full::new(Bytes::from_static(b"{}")))
            .unwrap();
        worker.send(req)
    };
    let answer = send(format!("{}/v1/", selected.base_url())).await;
    assert_eq!(answer.status, 200);
    let recorded = selected.wait_for_requests(1, WAIT).await.unwrap();
    assert_eq!(recorded[0].path_and_query, "/v1/chat/completions");
    assert_no_relay_headers(&recorded[0]);
    for base in [
        stand_in.base_url(),
        format!("{}/v2", selected.base_url()),
        "not a url".to_owned(),
    ] {
        send(base)
            .await
            .assert_error(400, "relay_upstream_not_allowed");
    }
    assert_eq!(stand_in.request_count(), 0);
    assert_eq!(selected.request_count(), 1);
}

#[tokio::test]
async fn websocket_probes_wrong_methods_and_oversized_bodies_are_refused() {
    let stand_in = StandIn::start().await.unwrap();
    let mut setup = Setup::new(&stand_in.base_url());
    setup.limits.max_request_body_bytes = 1000;
    let worker = setup.start().await;
    let req = worker
        .request(Method::GET, "/v1/responses")
        .header("connection", "upgrade")
        .header("upgrade", "websocket")
        .body(Full::default())
        .unwrap();
    worker
        .send(req)
        .await
        .assert_error(426, "relay_upgrade_required");
    worker
        .get("/v1/responses")
        .await
        .assert_error(405, "relay_method_not_allowed");
    worker
        .get("/v1/messages")
        .await
        .assert_error(405, "relay_method_not_allowed");
    worker
        .post("/v1/messages", &[b' '; 1001])
        .await
        .assert_error(413, "relay_payload_too_large");
    assert_eq!(stand_in.request_count(), 0);
}

/// A chunked body that crosses the limit while streaming: the provider never receives a
/// complete request, and the answer is 413.
#[tokio::test]
async fn a_streamed_body_over_the_limit_never_reaches_the_provider_whole() {
    let stand_in = StandIn::start().await.unwrap();
    let mut setup = Setup::new(&stand_in.base_url());
    setup.limits.max_request_body_bytes = 1000;
    let worker = setup.start().await;
    let mut stream = worker.connect().await;
    let head = format!(
        "POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         x-relay-worker-secret: {}\r\nTransfer-Encoding: chunked\r\n\r\n",
        secret_header(SECRET)
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    for _ in 0..3 {
        stream.write_all(b"190\r\n").await.unwrap();
        stream.write_all(&[b' '; 0x190]).await.unwrap();
        stream.write_all(b"\r\n").await.unwrap();
    }
    stream.write_all(b"0\r\n\r\n").await.unwrap();
    let text = read_head(&mut stream, WAIT).await;
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    for recorded in stand_in.requests() {
        assert!(
            !recorded.body_complete,
            "the provider got a complete request"
        );
    }
}

/// A provider that answers before it has read the upload, to a client that reads nothing
/// until its whole upload is written: both ways carry more than the socket buffers hold, so
/// the worker must keep reading the upload while the answer waits for the client.
#[tokio::test]
async fn an_upload_goes_on_while_an_early_answer_waits_for_the_client() {
    const BODY: usize = 16 * 1024 * 1024;
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let provider = tokio::spawn(relay_testkit::duplex::answer_while_reading(listener, BODY));
    let worker = Setup::new(&base).start().await;
    let mut stream = worker.connect().await;
    let head = format!(
        "POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         x-relay-worker-secret: {}\r\nContent-Length: {BODY}\r\n\r\n",
        secret_header(SECRET)
    );
    let exchange = async {
        stream.write_all(head.as_bytes()).await.unwrap();
        stream.write_all(&vec![b'x'; BODY]).await.unwrap();
        let text = read_head(&mut stream, WAIT).await;
        let head_len = text.find("\r\n\r\n").unwrap() + 4;
        let mut got = text.len() - head_len;
        let mut chunk = vec![0u8; 64 * 1024];
        while got < BODY {
            let n = stream.read(&mut chunk).await.unwrap();
            assert!(n > 0, "the answer stopped after {got} bytes");
            got += n;
        }
        text
    };
    let text = tokio::time::timeout(Duration::from_secs(30), exchange)
        .await
        .expect("the upload stalled behind the answer");
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert_eq!(provider.await.unwrap().unwrap(), BODY);
}

#[tokio::test]
async fn provider_failures_get_the_answers_of_section_3_7() {
    // Unreachable: a port nobody listens on.
    let closed = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
    let closed_url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let worker = Setup::new(&closed_url).start().await;
    let answer = worker.post("/v1/messages", b"{}").await;
    answer.assert_error(502, "relay_upstream_unreachable");
    // Named for the daemon, which logs it (`worker_request_failed`) and removes the mark.
    assert_eq!(
        answer.header("x-relay-worker-upstream-failed"),
        Some("connect_failed")
    );
    assert!(eventually(WAIT, || worker.state.in_flight() == 0).await);

    // No response head within `response_timeout_secs`.
    let stand_in = StandIn::start().await.unwrap();
    stand_in.set_behaviour(Behaviour {
        hang_before_headers: true,
        ..Behaviour::default()
    });
    let mut setup = Setup::new(&stand_in.base_url());
    setup.config.upstream.response_timeout_secs = Secs(Duration::from_millis(200));
    let worker = setup.start().await;
    let answer = worker.post("/v1/responses", b"{}").await;
    answer.assert_error(504, "relay_upstream_timeout");
    assert_eq!(
        answer.header("x-relay-worker-upstream-failed"),
        Some("response_head_timeout")
    );
    assert!(eventually(WAIT, || worker.state.in_flight() == 0).await);

    // A provider's own error answer is no failure of the worker's.
    stand_in.set_behaviour(Behaviour {
        status: Some(CannedResponse::new(StatusCode::BAD_GATEWAY)),
        ..Behaviour::default()
    });
    let answer = worker.post("/v1/responses", b"{}").await;
    assert_eq!(answer.status, 502);
    assert_eq!(answer.header("x-relay-worker-upstream-failed"), None);
}

// ---- streaming ----

#[tokio::test]
async fn fixture_streams_arrive_byte_exact_whole_and_in_one_byte_chunks() {
    let stand_in = StandIn::start().await.unwrap();
    let worker = Setup::new(&stand_in.base_url()).start().await;
    for chunk_size in [None, Some(1)] {
        stand_in.set_behaviour(Behaviour {
            chunk_size,
            ..Behaviour::default()
        });
        for (path, fixture) in STREAMS {
            let res = worker
                .client
                .request(stream_request(&worker, path))
                .await
                .unwrap();
            assert_eq!(res.status(), 200, "{path}");
            assert_eq!(res.headers()["content-type"], "text/event-stream");
            let accel: Vec<_> = res.headers().get_all("x-accel-buffering").iter().collect();
            assert_eq!(accel, ["no"], "{path}");
            let received = receive_body(res.into_body()).await;
            assert!(received.error.is_none(), "{path}: {:?}", received.error);
            assert_eq!(received.bytes, fixture, "{path} chunk {chunk_size:?}");
        }
    }
    assert!(eventually(WAIT, || worker.state.in_flight() == 0).await);
}

/// The daemon going away mid-stream cancels the provider request at once and ends the
/// request's in-flight count.
#[tokio::test]
async fn a_client_leaving_mid_stream_cancels_the_provider_request() {
    let stand_in = StandIn::start().await.unwrap();
    let worker = Setup::new(&stand_in.base_url()).start().await;
    stand_in.set_behaviour(Behaviour {
        stream_events: Some(400),
        pace: Some(Duration::from_millis(25)),
        ..Behaviour::default()
    });
    let mut stream = worker.connect().await;
    let head = format!(
        "POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         x-relay-worker-secret: {}\r\nContent-Length: 15\r\n\r\n{{\"stream\":true}}",
        secret_header(SECRET)
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut seen = Vec::new();
    while !seen.windows(10).any(|w| w == b"text_delta") {
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout(WAIT, stream.read(&mut chunk))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0);
        seen.extend_from_slice(&chunk[..n]);
    }
    assert_eq!(worker.state.in_flight(), 1);
    let text = String::from_utf8_lossy(&seen);
    let id: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("x-stand-in-request-id: "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let left = Instant::now();
    drop(stream);
    let gone = stand_in
        .wait_for_client_gone(id, Duration::from_secs(1))
        .await
        .unwrap();
    assert!(gone.went_away_at.unwrap() - left < Duration::from_secs(1));
    assert!(eventually(WAIT, || worker.state.in_flight() == 0).await);

    // The same through the pooled client: dropping the body mid-stream.
    let res = worker
        .client
        .request(stream_request(&worker, "/v1/messages"))
        .await
        .unwrap();
    let id = request_id(res.headers());
    let mut body = res.into_body();
    body.frame().await.unwrap().unwrap();
    drop(body);
    stand_in
        .wait_for_client_gone(id, Duration::from_secs(1))
        .await
        .unwrap();
    assert!(eventually(WAIT, || worker.state.in_flight() == 0).await);
}

/// A provider that breaks mid-stream makes the daemon's read fail after exactly the bytes
/// the provider sent.
#[tokio::test]
async fn a_provider_breaking_mid_stream_fails_the_client_read() {
    let stand_in = StandIn::start().await.unwrap();
    let worker = Setup::new(&stand_in.base_url()).start().await;
    for fail_after in [300, ANTHROPIC_MESSAGES_SSE.len()] {
        stand_in.set_behaviour(Behaviour {
            fail_after_bytes: Some(fail_after),
            ..Behaviour::default()
        });
        let res = worker
            .client
            .request(stream_request(&worker, "/v1/messages"))
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        let received = receive_body(res.into_body()).await;
        assert!(received.error.is_some(), "a truncated stream ended cleanly");
        assert_eq!(received.bytes, &ANTHROPIC_MESSAGES_SSE[..fail_after]);
    }
    assert!(eventually(WAIT, || worker.state.in_flight() == 0).await);
}

// ---- hooks ----

fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hooks")
}

#[tokio::test]
async fn every_captured_hook_payload_gets_its_agents_answer() {
    let stand_in = StandIn::start().await.unwrap();
    let worker = Setup::new(&stand_in.base_url()).start().await;
    let mut n = 0;
    for (agent, answer) in [
        ("claude-code", r#"{"continue":true}"#),
        ("codex", "{}"),
        ("pi", "{}"),
    ] {
        let mut files: Vec<_> = std::fs::read_dir(fixtures_dir().join(agent))
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .collect();
        files.sort();
        assert!(files.len() >= 5, "{agent}: {files:?}");
        for file in files {
            let payload = std::fs::read(&file).unwrap();
            let req = worker
                .request(Method::POST, &format!("/hooks/{agent}"))
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(payload)))
                .unwrap();
            let got = worker.send(req).await;
            assert_eq!(got.status, 200, "{}", file.display());
            assert_eq!(got.body, answer, "{}", file.display());
            assert_eq!(got.header("content-type"), Some("application/json"));
            n += 1;
        }
    }
    assert!(n >= 30);
    assert_eq!(worker.state.in_flight(), 0);
    // Hooks never reach the provider.
    assert_eq!(stand_in.request_count(), 0);
}

#[tokio::test]
async fn hook_bodies_must_be_json_objects_of_at_most_1_mib() {
    let stand_in = StandIn::start().await.unwrap();
    let worker = Setup::new(&stand_in.base_url()).start().await;
    for body in [&b""[..], b"[]", b"\"x\"", b"3", b"{", b"{} {}", b"\xff"] {
        worker
            .post("/hooks/pi", body)
            .await
            .assert_error(400, "relay_bad_request");
    }
    let mut big = b"{\"a\":\"".to_vec();
    big.resize(1024 * 1024 + 1, b'x');
    worker
        .post("/hooks/codex", &big)
        .await
        .assert_error(413, "relay_payload_too_large");
    // Exactly 1 MiB is fine.
    let mut fits = b"{\"a\":\"".to_vec();
    fits.resize(1024 * 1024 - 2, b'x');
    fits.extend_from_slice(b"\"}");
    let answer = worker.post("/hooks/codex", &fits).await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.body, "{}");
    worker
        .get("/hooks/claude-code")
        .await
        .assert_error(405, "relay_method_not_allowed");
}

// ---- TLS pinning ----

#[tokio::test]
async fn a_client_pinning_another_certificate_fails_the_handshake() {
    let stand_in = StandIn::start().await.unwrap();
    let worker = Setup::new(&stand_in.base_url()).start().await;
    let other = WorkerIdentity::generate("127.0.0.1").unwrap();
    for pin in [other.certificate_sha256(), [0; 32]] {
        assert!(connect_pinned(worker.addr, pin).await.is_err());
        let req = Request::get(worker.url(READY_PATH))
            .header("x-relay-worker-secret", secret_header(SECRET))
            .body(Full::default())
            .unwrap();
        assert!(pinned_client(pin).request(req).await.is_err());
    }
    // The right pin works.
    assert!(connect_pinned(worker.addr, worker.sha256).await.is_ok());
}

/// Serves one TLS handshake with `certificate` and `key` (which need not match).
#[derive(Debug)]
struct FixedCertificate(Arc<rustls::sign::CertifiedKey>);

impl rustls::server::ResolvesServerCert for FixedCertificate {
    fn resolve(
        &self,
        _hello: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(self.0.clone())
    }
}

async fn serve_handshakes(
    certificate: CertificateDer<'static>,
    key: &rcgen::KeyPair,
    version: &'static rustls::SupportedProtocolVersion,
) -> SocketAddr {
    let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let signing = rustls::crypto::ring::sign::any_supported_type(&der).unwrap();
    let certified = rustls::sign::CertifiedKey::new(vec![certificate], signing);
    let config = rustls::ServerConfig::builder_with_provider(tls::provider())
        .with_protocol_versions(&[version])
        .unwrap()
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(FixedCertificate(Arc::new(certified))));
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                if let Ok(mut tls) = acceptor.accept(tcp).await {
                    let _ = tls.read(&mut [0u8; 1]).await;
                }
            });
        }
    });
    addr
}

/// A squatter replaying the registered certificate without its key cannot complete the
/// handshake: the pinned verifier still checks the handshake signature (TLS 1.3 and 1.2).
#[tokio::test]
async fn the_right_certificate_with_another_key_fails_the_handshake() {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let other_key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "relay-worker");
    let certificate = params.self_signed(&key).unwrap().der().clone();
    let pin = tls::certificate_sha256(certificate.as_ref());
    for version in [&rustls::version::TLS13, &rustls::version::TLS12] {
        // The genuine holder of the key passes, so the failure below is the key's.
        let genuine = serve_handshakes(certificate.clone(), &key, version).await;
        assert!(connect_pinned(genuine, pin).await.is_ok(), "{version:?}");
        let squatter = serve_handshakes(certificate.clone(), &other_key, version).await;
        assert!(connect_pinned(squatter, pin).await.is_err(), "{version:?}");
    }
}

// ---- plugins ----

/// An observer that keeps every observation; `flushes` counts terminal-hook flushes.
#[derive(Default)]
struct Collected {
    seen: std::sync::Mutex<Vec<relay_plugins::atof::Observation>>,
    flushes: std::sync::atomic::AtomicUsize,
}

impl Collected {
    fn clear(&self) {
        relay_logging::sync::lock(&self.seen, "test observations")
            .unwrap()
            .clear();
    }

    fn all(&self) -> Vec<relay_plugins::atof::Observation> {
        relay_logging::sync::lock(&self.seen, "test observations")
            .unwrap()
            .clone()
    }
}

impl Observer for Collected {
    fn observe(&self, _at: std::time::SystemTime, observation: relay_plugins::atof::Observation) {
        relay_logging::sync::lock(&self.seen, "test observations")
            .unwrap()
            .push(observation);
    }

    fn flush(
        &self,
        _deadline: Duration,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'static>> {
        self.flushes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Box::pin(async {})
    }
}

/// A worker running `plugins_toml` (a system `plugins.toml`), recording into the returned
/// observer.
async fn worker_with_plugins(stand_in: &StandIn, plugins_toml: &str) -> (Worker, Arc<Collected>) {
    let (setup, collected) = plugin_setup(stand_in, plugins_toml);
    (setup.start().await, collected)
}

/// [`worker_with_plugins`] before it starts, for a test to change its limits.
fn plugin_setup(stand_in: &StandIn, plugins_toml: &str) -> (Setup, Arc<Collected>) {
    let plugins = relay_plugins::Plugins::parse(
        Some((
            std::path::Path::new("/etc/relay/plugins.toml"),
            plugins_toml,
        )),
        None,
    )
    .unwrap();
    let collected = Arc::new(Collected::default());
    let redactor = generation_redactors(&plugins, b"test key").requests;
    let observer = collected.clone() as Arc<dyn Observer>;
    let mut setup = Setup::new(&stand_in.base_url());
    setup.plugins = Some(PluginHost::new(
        &plugins,
        redactor,
        Some(observer),
        &relay_proxy::config::WorkerConfig::default(),
    ));
    (setup, collected)
}

const OBSERVE: &str = "version = 1\n[[components]]\nkind = \"observability\"\n[components.config]\ncapture_content = true\n";

const ALLOW_LIST: &str = r#"
[[components]]
kind = "policy"
[components.config]
[[components.config.rules]]
model = "claude-*"
action = "allow"
[[components.config.rules]]
model = "*"
action = "deny"
reason = "only Claude models are allowed"
"#;

const DENY_RM: &str = r#"
[[components]]
kind = "policy"
[components.config]
mode = "MODE"
[[components.config.rules]]
event = "PreToolUse"
tool = "Bash"
input_field = "command"
regex = "rm -rf"
action = "deny"
reason = "destructive command"
"#;

fn rejection_reason(answer: &Answer) -> String {
    answer.assert_error(403, "relay_policy_rejected");
    let value: Value = serde_json::from_slice(&answer.body).unwrap();
    value["error"]["reason"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_model_off_the_allow_list_is_refused_before_the_provider_sees_a_byte() {
    let stand_in = StandIn::start().await.unwrap();
    let (worker, seen) = worker_with_plugins(&stand_in, &format!("{OBSERVE}{ALLOW_LIST}")).await;
    let answer = worker
        .post("/v1/messages", br#"{"model":"gpt-5","messages":[]}"#)
        .await;
    assert_eq!(rejection_reason(&answer), "only Claude models are allowed");
    // A body without a model is not on the list either.
    let answer = worker.post("/v1/messages", br#"{"messages":[]}"#).await;
    assert_eq!(rejection_reason(&answer), "only Claude models are allowed");
    assert_eq!(stand_in.request_count(), 0);
    let allowed = br#"{"model":"claude-sonnet-4-5","stream":true,"messages":[]}"#;
    let answer = worker.post("/v1/messages", allowed).await;
    assert_eq!(answer.status, 200);
    let recorded = stand_in.wait_for_requests(1, WAIT).await.unwrap();
    assert_eq!(recorded[0].body, &allowed[..]);
    use relay_plugins::atof::{Decision, Observation};
    let decisions: Vec<Decision> = seen
        .all()
        .into_iter()
        .filter_map(|o| match o {
            Observation::PolicyDecision(d) => Some(d.decision),
            _ => None,
        })
        .collect();
    assert_eq!(decisions, [Decision::Deny, Decision::Deny, Decision::Allow]);
}

#[tokio::test]
async fn a_denied_tool_call_is_403_with_the_reason_and_dry_run_blocks_nothing() {
    let stand_in = StandIn::start().await.unwrap();
    let payload = |command: &str| {
        serde_json::json!({
            "hook_event_name": "PreToolUse",
            "session_id": "s1",
            "tool_name": "Bash",
            "tool_use_id": "t1",
            "tool_input": { "command": command },
        })
        .to_string()
    };
    let (worker, seen) = worker_with_plugins(
        &stand_in,
        &format!("{OBSERVE}{}", DENY_RM.replace("MODE", "enforce")),
    )
    .await;
    // The second time with a lone surrogate escape at the end of the command (an emoji cut
    // in two, as JavaScript writes it): still JSON, read and judged, not refused.
    for tail in ["", r" \ud83d"] {
        let command = |text: &str| payload(&format!("{text}TAIL")).replace("TAIL", tail);
        let denied = worker
            .post(
                "/hooks/claude-code",
                command("rm -rf /tmp/canary").as_bytes(),
            )
            .await;
        assert_eq!(rejection_reason(&denied), "destructive command", "{tail}");
        let allowed = worker
            .post("/hooks/claude-code", command("ls").as_bytes())
            .await;
        assert_eq!(allowed.status, 200, "{tail}");
        assert_eq!(allowed.body, r#"{"continue":true}"#, "{tail}");
    }
    // pi names the same tool `bash` and the event `tool_call`.
    let pi = serde_json::json!({
        "hook_event_name": "tool_call",
        "session_id": "p1",
        "event": { "toolName": "bash", "toolCallId": "c1", "input": { "command": "rm -rf ~" } },
    });
    let denied = worker.post("/hooks/pi", pi.to_string().as_bytes()).await;
    assert_eq!(rejection_reason(&denied), "destructive command");
    let marks = seen
        .all()
        .into_iter()
        .filter(|o| matches!(o, relay_plugins::atof::Observation::PolicyDecision(_)))
        .count();
    assert_eq!(marks, 3, "only matching rules make guardrail marks");

    let (dry, seen) = worker_with_plugins(
        &stand_in,
        &format!("{OBSERVE}{}", DENY_RM.replace("MODE", "dry_run")),
    )
    .await;
    let answer = dry
        .post("/hooks/codex", payload("rm -rf /tmp/canary").as_bytes())
        .await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.body, "{}");
    let dry_runs: Vec<bool> = seen
        .all()
        .into_iter()
        .filter_map(|o| match o {
            relay_plugins::atof::Observation::PolicyDecision(d) => Some(d.dry_run),
            _ => None,
        })
        .collect();
    assert_eq!(dry_runs, [true]);
}

#[tokio::test]
async fn secrets_reach_the_provider_untouched_unless_request_redaction_is_on() {
    let stand_in = StandIn::start().await.unwrap();
    let body = br#"{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"mail jane.doe@example.com key sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789"}]}"#;
    let redaction = "\n[[components]]\nkind = \"pii_redaction\"\n[components.config]\ndetectors = [\"email\", \"api_key\"]\naction = \"redact\"\n";
    let (worker, seen) = worker_with_plugins(&stand_in, &format!("{OBSERVE}{redaction}")).await;
    assert_eq!(worker.post("/v1/messages", body).await.status, 200);
    let recorded = stand_in.wait_for_requests(1, WAIT).await.unwrap();
    assert_eq!(recorded[0].body, &body[..]);
    // The prompt is observed (the recorder redacts it before any record).
    let prompt = seen.all().into_iter().find_map(|o| match o {
        relay_plugins::atof::Observation::ModelRequestStart(start) => start.prompt,
        _ => None,
    });
    assert!(prompt.unwrap().starts_with("mail "));

    stand_in.clear_requests();
    let rewriting = format!("{OBSERVE}{redaction}redact_requests = true\n");
    let (worker, seen) = worker_with_plugins(&stand_in, &rewriting).await;
    assert_eq!(worker.post("/v1/messages", body).await.status, 200);
    let recorded = stand_in.wait_for_requests(1, WAIT).await.unwrap();
    let sent = String::from_utf8(recorded[0].body.to_vec()).unwrap();
    assert!(!sent.contains("jane.doe@example.com"), "{sent}");
    assert!(!sent.contains("sk-ant-api03"), "{sent}");
    assert!(sent.contains("mail "), "{sent}");
    assert_eq!(
        recorded[0].header_str("content-length"),
        Some(sent.len().to_string().as_str())
    );
    serde_json::from_str::<Value>(&sent).unwrap();
    let redactions = seen.all().into_iter().find_map(|o| match o {
        relay_plugins::atof::Observation::ModelRequestStart(start) => {
            Some(start.request_redactions)
        }
        _ => None,
    });
    assert_eq!(redactions, Some(2));
}

/// Token counting takes a whole Messages request: request redaction rewrites it and model
/// rules judge it like any other model request.
#[tokio::test]
async fn token_counting_is_redacted_and_judged_like_a_messages_request() {
    let stand_in = StandIn::start().await.unwrap();
    let body = br#"{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"mail jane.doe@example.com"}]}"#;
    let redaction = "\n[[components]]\nkind = \"pii_redaction\"\n[components.config]\ndetectors = [\"email\"]\naction = \"redact\"\nredact_requests = true\n";
    let (worker, _) = worker_with_plugins(&stand_in, &format!("{OBSERVE}{redaction}")).await;
    assert_eq!(
        worker.post("/v1/messages/count_tokens", body).await.status,
        200
    );
    let recorded = stand_in.wait_for_requests(1, WAIT).await.unwrap();
    let sent = String::from_utf8(recorded[0].body.to_vec()).unwrap();
    assert!(!sent.contains("jane.doe@example.com"), "{sent}");
    assert!(sent.contains("mail "), "{sent}");

    stand_in.clear_requests();
    let (worker, _) = worker_with_plugins(&stand_in, &format!("{OBSERVE}{ALLOW_LIST}")).await;
    worker
        .post(
            "/v1/messages/count_tokens",
            br#"{"model":"gpt-5","messages":[]}"#,
        )
        .await
        .assert_error(403, "relay_policy_rejected");
    assert_eq!(stand_in.request_count(), 0);
}

/// A provider stream that breaks after its 200 head ends its record with the break named,
/// so the request is not counted a success.
#[tokio::test]
async fn a_stream_that_breaks_off_is_recorded_as_failed_after_its_head() {
    let stand_in = StandIn::start().await.unwrap();
    let (worker, seen) = worker_with_plugins(&stand_in, OBSERVE).await;
    stand_in.set_behaviour(Behaviour {
        fail_after_bytes: Some(300),
        ..Behaviour::default()
    });
    let res = worker
        .client
        .request(stream_request(&worker, "/v1/messages"))
        .await
        .unwrap();
    assert!(receive_body(res.into_body()).await.error.is_some());
    let end = first_request_end(&seen).await;
    assert_eq!(end.status, 200);
    assert!(end.truncated);
    assert_eq!(end.error.as_deref(), Some("response_body_failed"));
}

/// The end of the first model request the plugins observed, once there is one.
async fn first_request_end(seen: &Collected) -> relay_plugins::atof::ModelRequestEnd {
    let end = || {
        seen.all().into_iter().find_map(|o| match o {
            relay_plugins::atof::Observation::ModelRequestEnd(end) => Some(end),
            _ => None,
        })
    };
    assert!(eventually(WAIT, || end().is_some()).await);
    end().unwrap()
}

/// A stream that sent every event, its final one included, before its connection broke:
/// the record names the break, but the copy is whole, so the answer is not truncated.
#[tokio::test]
async fn a_stream_that_breaks_after_its_final_event_is_not_truncated() {
    let stand_in = StandIn::start().await.unwrap();
    let (worker, seen) = worker_with_plugins(&stand_in, OBSERVE).await;
    stand_in.set_behaviour(Behaviour {
        // Fails once the whole body is out, before the closing chunk.
        fail_after_bytes: Some(ANTHROPIC_MESSAGES_SSE.len()),
        ..Behaviour::default()
    });
    let res = worker
        .client
        .request(stream_request(&worker, "/v1/messages"))
        .await
        .unwrap();
    let received = receive_body(res.into_body()).await;
    assert!(received.error.is_some());
    assert_eq!(&received.bytes[..], ANTHROPIC_MESSAGES_SSE);
    let end = first_request_end(&seen).await;
    assert!(!end.truncated, "{end:?}");
    assert_eq!(end.error.as_deref(), Some("response_body_failed"));
    assert!(!end.finish_reasons.is_empty(), "{end:?}");
}

#[tokio::test]
async fn the_response_tap_reports_usage_status_and_time_to_first_byte() {
    let stand_in = StandIn::start().await.unwrap();
    let (worker, seen) = worker_with_plugins(&stand_in, OBSERVE).await;
    for chunk_size in [None, Some(1)] {
        stand_in.set_behaviour(Behaviour {
            chunk_size,
            ..Behaviour::default()
        });
        let res = worker
            .client
            .request(stream_request(&worker, "/v1/messages"))
            .await
            .unwrap();
        let received = receive_body(res.into_body()).await;
        // The client gets the stream byte for byte: the tap only copies.
        assert_eq!(received.bytes, ANTHROPIC_MESSAGES_SSE);
    }
    let ends = || {
        seen.all()
            .into_iter()
            .filter_map(|o| match o {
                relay_plugins::atof::Observation::ModelRequestEnd(end) => Some(end),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    assert!(eventually(WAIT, || ends().len() >= 2).await);
    // The start names the provider the request went to.
    let upstream: http::Uri = stand_in.base_url().parse().unwrap();
    let server = seen.all().into_iter().find_map(|o| match o {
        relay_plugins::atof::Observation::ModelRequestStart(start) => start.server,
        _ => None,
    });
    assert_eq!(
        server,
        upstream
            .host()
            .map(|host| (host.to_owned(), upstream.port_u16().unwrap()))
    );
    let ends = ends();
    assert_eq!(ends.len(), 2);
    for end in ends {
        assert_eq!(end.status, 200);
        assert!(!end.truncated, "{end:?}");
        assert!(end.time_to_first_byte_ms.is_some());
        let usage = end.usage.unwrap();
        assert_eq!(usage.input_tokens, Some(10));
        assert_eq!(usage.output_tokens, Some(5));
    }
}

/// With a price table, a request it cannot price says why, rather than leaving its cost
/// out as if it were free; one it prices has its cost and no error; without a table
/// nobody asked, and neither is there.
#[tokio::test]
async fn a_request_the_price_table_cannot_price_says_why() {
    let stand_in = StandIn::start().await.unwrap();
    let prices = |model: &str| {
        format!("{OBSERVE}[components.config.prices.\"{model}\"]\ninput = 1\noutput = 2\n")
    };
    for (plugins, cost, error) in [
        (prices("other"), false, Some(r#"no price for model "m""#)),
        (prices("m"), true, None),
        (OBSERVE.to_owned(), false, None),
    ] {
        let (worker, seen) = worker_with_plugins(&stand_in, &plugins).await;
        let res = worker
            .client
            .request(stream_request(&worker, "/v1/messages"))
            .await
            .unwrap();
        receive_body(res.into_body()).await;
        let usage = || {
            seen.all().into_iter().find_map(|o| match o {
                relay_plugins::atof::Observation::ModelRequestEnd(end) => end.usage,
                _ => None,
            })
        };
        assert!(eventually(WAIT, || usage().is_some()).await);
        let usage = usage().unwrap();
        assert_eq!(usage.cost.is_some(), cost, "{plugins}");
        assert_eq!(usage.cost_error.as_deref(), error, "{plugins}");
    }
}

#[tokio::test]
async fn terminal_hooks_wait_for_the_records_and_others_do_not() {
    let stand_in = StandIn::start().await.unwrap();
    let (worker, seen) = worker_with_plugins(&stand_in, OBSERVE).await;
    for (agent, event, flushes) in [
        ("claude-code", "UserPromptSubmit", 0),
        ("claude-code", "Stop", 1),
        ("codex", "SessionEnd", 2),
        ("pi", "agent_end", 2),
        ("pi", "session_shutdown", 3),
    ] {
        let body = serde_json::json!({ "hook_event_name": event, "session_id": "s" }).to_string();
        assert_eq!(
            worker
                .post(&format!("/hooks/{agent}"), body.as_bytes())
                .await
                .status,
            200
        );
        assert_eq!(
            seen.flushes.load(std::sync::atomic::Ordering::Relaxed),
            flushes,
            "{agent} {event}"
        );
    }
}

/// A Messages request whose JSON body is coded with `coding`.
fn coded_messages(worker: &Worker, coding: &str, body: Bytes) -> Request<Full<Bytes>> {
    worker
        .request(Method::POST, "/v1/messages")
        .header("content-type", "application/json")
        .header("content-encoding", coding)
        .body(Full::new(body))
        .unwrap()
}

/// `body`, coded with `coding`, cannot be decoded: with records alone, or a model rule in
/// dry run (which blocks nothing), it reaches the provider as it came; a model rule that
/// enforces cannot decide on it, so it is refused with 415 and nothing is sent.
async fn forwarded_unless_a_rule_needs_it(stand_in: &StandIn, coding: &str, body: Bytes) {
    let dry_run = ALLOW_LIST.replace(
        "[components.config]\n",
        "[components.config]\nmode = \"dry_run\"\n",
    );
    for plugins in [OBSERVE.to_owned(), format!("{OBSERVE}{dry_run}")] {
        stand_in.clear_requests();
        let (worker, _) = worker_with_plugins(stand_in, &plugins).await;
        let answer = worker
            .send(coded_messages(&worker, coding, body.clone()))
            .await;
        assert_eq!(answer.status, 200, "{plugins}");
        let recorded = stand_in.wait_for_requests(1, WAIT).await.unwrap();
        assert_eq!(recorded[0].body, body);
        assert_eq!(recorded[0].header_str("content-encoding"), Some(coding));
    }
    stand_in.clear_requests();
    let (worker, _) = worker_with_plugins(stand_in, &format!("{OBSERVE}{ALLOW_LIST}")).await;
    worker
        .send(coded_messages(&worker, coding, body))
        .await
        .assert_error(415, "relay_unsupported_encoding");
    assert_eq!(stand_in.request_count(), 0);
}

/// A compressed body within the limit that decodes past it: records alone cannot read it
/// whole but forward it as it came; a model rule cannot decide on it.
#[tokio::test]
async fn a_body_that_decodes_past_the_limit_is_refused_only_when_a_rule_needs_it() {
    use std::io::Write as _;
    const LIMIT: u64 = 1000;
    let stand_in = StandIn::start().await.unwrap();
    let decoded = format!(r#"{{"model":"claude-x","pad":"{}"}}"#, "p".repeat(2000));
    let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gzip.write_all(decoded.as_bytes()).unwrap();
    let body = Bytes::from(gzip.finish().unwrap());
    assert!((body.len() as u64) < LIMIT);
    let send = |worker: &Worker| coded_messages(worker, "gzip", body.clone());
    // Records alone forward it untouched.
    let (mut setup, _) = plugin_setup(&stand_in, OBSERVE);
    setup.limits.max_request_body_bytes = LIMIT;
    let worker = setup.start().await;
    assert_eq!(worker.send(send(&worker)).await.status, 200);
    let recorded = stand_in.wait_for_requests(1, WAIT).await.unwrap();
    assert_eq!(recorded[0].body, body);
    assert_eq!(recorded[0].header_str("content-encoding"), Some("gzip"));
    // A model rule would decide on a cut body: 413, nothing sent.
    stand_in.clear_requests();
    let (mut setup, _) = plugin_setup(&stand_in, &format!("{OBSERVE}{ALLOW_LIST}"));
    setup.limits.max_request_body_bytes = LIMIT;
    let worker = setup.start().await;
    worker
        .send(send(&worker))
        .await
        .assert_error(413, "relay_payload_too_large");
    assert_eq!(stand_in.request_count(), 0);
}

/// A deny rule for one model, read from the body.
const DENY_ONE_MODEL: &str = r#"
[[components]]
kind = "policy"
[components.config]
[[components.config.rules]]
model = "blocked-*"
action = "deny"
reason = "that model is not for us"
"#;

/// A body whose model cannot be read for certain (named twice with different values, as
/// something other than text, or in a body that is no JSON object) cannot be judged by a
/// model rule: a provider's reader may take another value. Refused with 400 whichever
/// comes first, and nothing is sent; with records alone, or a policy in `dry_run`, it
/// goes on as it came.
#[tokio::test]
async fn a_body_whose_model_is_unclear_is_refused_when_a_rule_judges_the_model() {
    let stand_in = StandIn::start().await.unwrap();
    let (worker, _) = worker_with_plugins(&stand_in, &format!("{OBSERVE}{DENY_ONE_MODEL}")).await;
    let bodies: [&[u8]; 6] = [
        br#"{"model":"claude-x","messages":[],"model":"blocked-x"}"#,
        br#"{"model":"blocked-x","messages":[],"model":"claude-x"}"#,
        br#"{"model":"claude-x","messages":[],"mod\u0065l":"blocked-x"}"#,
        br#"{"model":"blocked-x","messages":[],"model":1}"#,
        br#"{"model":"blocked-x","messages":[],"model":{}}"#,
        b"\xef\xbb\xbf{\"model\":\"blocked-x\",\"messages\":[]}",
    ];
    for body in bodies {
        worker
            .post("/v1/messages", body)
            .await
            .assert_error(400, "relay_bad_request");
    }
    assert_eq!(stand_in.request_count(), 0);
    let dry_run = DENY_ONE_MODEL.replace(
        "[components.config]\n",
        "[components.config]\nmode = \"dry_run\"\n",
    );
    for plugins in [OBSERVE.to_owned(), format!("{OBSERVE}{dry_run}")] {
        stand_in.clear_requests();
        let (worker, _) = worker_with_plugins(&stand_in, &plugins).await;
        assert_eq!(worker.post("/v1/messages", bodies[0]).await.status, 200);
        let recorded = stand_in.wait_for_requests(1, WAIT).await.unwrap();
        assert_eq!(recorded[0].body, bodies[0]);
    }
}

/// Codings on two `Content-Encoding` lines are one list, as HTTP and the provider read
/// them: a gzip body behind an `identity` line is decoded and judged, not taken for plain
/// bytes the rules cannot read.
#[tokio::test]
async fn codings_on_several_lines_are_all_undone_before_the_rules_judge() {
    use std::io::Write as _;
    let stand_in = StandIn::start().await.unwrap();
    let (worker, _) = worker_with_plugins(&stand_in, &format!("{OBSERVE}{DENY_ONE_MODEL}")).await;
    let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gzip.write_all(br#"{"model":"blocked-x","messages":[]}"#)
        .unwrap();
    let body = Bytes::from(gzip.finish().unwrap());
    let coded = |lines: &[&[u8]]| {
        let mut req = worker
            .request(Method::POST, "/v1/messages")
            .header("content-type", "application/json");
        for line in lines {
            req = req.header(
                "content-encoding",
                http::HeaderValue::from_bytes(line).unwrap(),
            );
        }
        req.body(Full::new(body.clone())).unwrap()
    };
    for lines in [[&b"identity"[..], b"gzip"], [b"gzip", b"identity"]] {
        worker
            .send(coded(&lines))
            .await
            .assert_error(403, "relay_policy_rejected");
    }
    // A coding that is not text is no coding anyone knows, not the absence of one.
    worker
        .send(coded(&[b"gz\xffip"]))
        .await
        .assert_error(415, "relay_unsupported_encoding");
    assert_eq!(stand_in.request_count(), 0);
}

#[tokio::test]
async fn an_undecodable_body_is_refused_only_when_a_rule_needs_it() {
    let stand_in = StandIn::start().await.unwrap();
    let body = Bytes::from_static(b"\x00\x01 not a coding anyone knows");
    forwarded_unless_a_rule_needs_it(&stand_in, "x-unknown", body).await;
}

/// A gzip body that stops before its coding does (cut in half, or empty) is corrupt, not
/// too large: records alone forward it as it came; a model rule answers 415, not 413.
#[tokio::test]
async fn a_gzip_body_that_ends_early_is_undecodable_not_too_large() {
    use std::io::Write as _;
    let stand_in = StandIn::start().await.unwrap();
    let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gzip.write_all(br#"{"model":"claude-x","messages":[]}"#)
        .unwrap();
    let whole = gzip.finish().unwrap();
    for body in [
        Bytes::copy_from_slice(&whole[..whole.len() / 2]),
        Bytes::new(),
    ] {
        forwarded_unless_a_rule_needs_it(&stand_in, "gzip", body).await;
    }
}

/// An answer the worker cuts off at its drain deadline is no client's going away: the
/// record keeps the status the client got and names the cut.
#[tokio::test]
async fn an_answer_cut_off_at_the_drain_deadline_is_recorded_as_cut() {
    let stand_in = StandIn::start().await.unwrap();
    let (worker, seen) = worker_with_plugins(&stand_in, OBSERVE).await;
    stand_in.set_behaviour(Behaviour {
        chunk_size: Some(4),
        pace: Some(Duration::from_millis(50)),
        ..Behaviour::default()
    });
    let res = worker
        .client
        .request(stream_request(&worker, "/v1/messages"))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    // The worker's own cut comes to the body as the client's drop does.
    worker.handler.cut_off_in_flight();
    drop(res);
    let end = first_request_end(&seen).await;
    assert_eq!(
        (end.status, end.truncated, end.error.as_deref()),
        (200, true, Some("drain_deadline_passed"))
    );
}

/// The status the `llm` record ends with when the client closes before the body's end:
/// 499 for an answer that was going well, but an error status it had already received
/// stays (an SDK reads a 429's head and closes to retry), so traces agree with the metrics
/// and the harness.
#[tokio::test]
async fn a_client_closing_an_error_answer_early_keeps_its_status_in_the_record() {
    let stand_in = StandIn::start().await.unwrap();
    let (worker, seen) = worker_with_plugins(&stand_in, OBSERVE).await;
    let ended_with = |seen: &Collected| {
        seen.all().into_iter().find_map(|o| match o {
            relay_plugins::atof::Observation::ModelRequestEnd(end) => {
                Some((end.status, end.truncated))
            }
            _ => None,
        })
    };
    for (status, recorded) in [(StatusCode::TOO_MANY_REQUESTS, 429), (StatusCode::OK, 499)] {
        seen.clear();
        stand_in.set_behaviour(Behaviour {
            status: Some(CannedResponse::json(
                status,
                r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#,
            )),
            chunk_size: Some(4),
            pace: Some(Duration::from_millis(50)),
            ..Behaviour::default()
        });
        let res = worker
            .client
            .request(stream_request(&worker, "/v1/messages"))
            .await
            .unwrap();
        assert_eq!(res.status(), status);
        // The head is read; the body is left, as an SDK about to retry does.
        drop(res);
        let ended = eventually_some(WAIT, || async { ended_with(&seen) }).await;
        assert_eq!(ended, Some((recorded, true)), "{status}");
    }
}
