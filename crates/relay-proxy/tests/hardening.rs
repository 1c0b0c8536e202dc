//! Attacks on shared budgets, replayed against the real `Front`, `Shell` and `ControlPlane`
//! served in-process on `127.0.0.1:0`, with the real client side of the control handshake:
//! a flood of unbound opening hooks must not stop a known user's `SessionStart` from waiting
//! for its worker (SPEC §3.5), and handshakes held open by a peer that never answers must
//! not keep a legitimate client from registering (§5.2, §5.8).

// The set-up helpers sit outside `#[test]` functions, where clippy's allow-unwrap-in-tests
// does not reach.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test set-up helpers fail the test on error"
)]

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use relay_broker::BrokerConfig;
use relay_identity::{DaemonAddress, PinStore, RouteToken, SigningKey};
use relay_proto::{Bytes32, Id, RegisterMcpFields, Timers};
use relay_proxy::config::{BaseUrl, Config};
use relay_proxy::control::MCP_PATH;
use relay_proxy::control::client::{ClientIdentity, Registration, Session, connect};
use relay_proxy::control::daemon::{ControlOptions, ControlPlane, MAX_HANDSHAKES};
use relay_proxy::front::{Advertised, Front, FrontOptions, Mode, ProviderKeys};
use relay_proxy::metrics::Metrics;
use relay_proxy::server::{ServeOptions, serve};
use relay_proxy::shell::Shell;
use relay_proxy::state::StateStore;
use relay_proxy::upstream::{UpstreamClient, UpstreamOptions};
use relay_testkit::{StandIn, eventually, eventually_some};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How long a test waits for something that should happen at once.
const WAIT: Duration = Duration::from_secs(10);

/// How long an opening hook waits for a starting route.
const ACTIVATION_WAIT: Duration = Duration::from_secs(3);

/// The waiting places the daemon had, shared by every credential, before this fix.
const OLD_SHARED_POOL: usize = 256;

/// A whole daemon (front, shell, control plane) on loopback.
struct Daemon {
    addr: SocketAddr,
    _state: tempfile::TempDir,
    _stand_in: StandIn,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Daemon {
    async fn start(challenge_ttl: Duration) -> Daemon {
        Daemon::start_on(challenge_ttl, Ipv4Addr::LOCALHOST, Timers::default()).await
    }

    /// A daemon whose front takes `bind` as its bind address (the listener stays on
    /// loopback so the test can reach it: a non-loopback `bind` makes it refuse unknown
    /// callers, as a remote daemon does), with the broker's `timers`.
    async fn start_on(challenge_ttl: Duration, bind: Ipv4Addr, timers: Timers) -> Daemon {
        let stand_in = StandIn::start().await.unwrap();
        let upstream = stand_in.base_url();
        let base = |text: &str| BaseUrl::parse(text).unwrap();
        let mut config = Config::default();
        config.upstream.openai_base_url = base(&format!("{upstream}/v1"));
        config.upstream.anthropic_base_url = base(&upstream);
        config.upstream.chatgpt_codex_base_url = base(&format!("{upstream}/backend-api/codex"));
        let config = Arc::new(config);
        let state = tempfile::tempdir().unwrap();
        let metrics = Arc::new(Metrics::new());
        let shell = Shell::new(
            BrokerConfig {
                activation_wait: ACTIVATION_WAIT,
                timers,
                ..BrokerConfig::default()
            },
            StateStore::new(state.path()),
            metrics.clone(),
        )
        .unwrap();
        tokio::spawn(shell.clone().run(std::future::pending()));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let control = ControlPlane::new(
            ControlOptions {
                daemon_key: Arc::new(SigningKey::generate().unwrap()),
                origins: vec![format!("http://127.0.0.1:{}", addr.port())],
                challenge_ttl,
                challenge_window: Duration::from_secs(15),
                challenge_limit: 16,
                max_sessions_per_ip: 256,
                ping: Duration::from_secs(30),
                pong_timeout: Duration::from_secs(10),
                worker_networks: Vec::new(),
                own_addresses: vec![addr.ip()],
                interfaces: Vec::new,
            },
            shell.clone(),
        );
        let client = UpstreamClient::new(&UpstreamOptions {
            connect_timeout: Duration::from_secs(5),
            response_timeout: None,
            proxy_url: None,
            max_connections: 1024,
            no_proxy: None,
        })
        .unwrap();
        let front = Front::new(
            FrontOptions {
                bind,
                port: addr.port(),
                advertised: Advertised {
                    https: false,
                    host: "127.0.0.1".into(),
                    port: addr.port(),
                },
                mode: Mode::Managed,
                allow_anonymous_pass_through: false,
                config,
                instance_id: uuid::Uuid::now_v7(),
            },
            client,
            ProviderKeys::default(),
            metrics,
        )
        .with_control(shell, control);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(serve(
            listener,
            ServeOptions::default(),
            Arc::new(front),
            async move {
                stopped.await.ok();
            },
        ));
        Daemon {
            addr,
            _state: state,
            _stand_in: stand_in,
            _stop: stop,
        }
    }

    fn identity(&self, pins: &tempfile::TempDir) -> ClientIdentity {
        ClientIdentity {
            daemon: DaemonAddress::parse(&format!("http://127.0.0.1:{}", self.addr.port()))
                .unwrap(),
            key: Arc::new(SigningKey::generate().unwrap()),
            pins: Arc::new(PinStore::new(pins.path(), None)),
            tls: None,
            instance_id: Id::from(uuid::Uuid::now_v7()),
        }
    }

    /// A `SessionStart` hook with `token`, over a fresh connection; the status.
    async fn session_start(&self, token: &str) -> u16 {
        self.hook(token, "SessionStart").await
    }

    /// A Claude Code hook of `event` with `token`, over a fresh connection; the status.
    async fn hook(&self, token: &str, event: &str) -> u16 {
        let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
        let req = Request::builder()
            .method(Method::POST)
            .uri(format!("http://{}/hooks/claude-code", self.addr))
            .header("content-type", "application/json")
            .header("x-relay-client-token", token)
            .body(Full::new(Bytes::from(format!(
                r#"{{"hook_event_name":"{event}"}}"#
            ))))
            .unwrap();
        let res = client.request(req).await.unwrap();
        let status = res.status().as_u16();
        let _ = res.into_body().collect().await;
        status
    }

    /// The pass-through reason `/_relay/v1/route` gives for `token`, if any.
    async fn route_reason(&self, token: &str) -> Option<String> {
        let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
        let req = Request::builder()
            .uri(format!("http://{}/_relay/v1/route", self.addr))
            .header("x-relay-client-token", token)
            .body(Full::default())
            .unwrap();
        let body = client.request(req).await.unwrap().into_body();
        let body = body.collect().await.unwrap().to_bytes();
        let status: serde_json::Value = serde_json::from_slice(&body).unwrap();
        status["reason"].as_str().map(str::to_owned)
    }
}

/// A remote daemon (a bind that refuses unknown callers) decides a hook from its head, so
/// that unknown callers are refused before their body is read. A known user's
/// `SessionStart` that arrives before its MCP session, as Claude Code's does, must still
/// wait for that session as on loopback, not pass through at once and escape the records
/// and the policy; an unknown caller still gets 401 at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_remote_bind_a_known_users_session_start_waits_for_its_session() {
    let timers = Timers {
        reconnect_grace_ms: 100,
        ..Timers::default()
    };
    let daemon = Daemon::start_on(Duration::from_secs(30), Ipv4Addr::UNSPECIFIED, timers).await;
    let pins = tempfile::tempdir().unwrap();
    let user = RouteToken::generate().unwrap();
    let identity = daemon.identity(&pins);
    // An earlier session bound the credential and ended.
    let session = register(&identity, &user).await;
    drop(session);
    let token = user.encode();
    let ended = eventually_some(WAIT, || async {
        (daemon.route_reason(&token).await.as_deref() == Some("no_live_session")).then_some(())
    });
    assert!(ended.await.is_some(), "the ended session stayed live");

    let started = tokio::time::Instant::now();
    assert_eq!(daemon.session_start(&token).await, 200);
    let waited = started.elapsed();
    assert!(
        waited >= ACTIVATION_WAIT.mul_f64(0.9),
        "the SessionStart waited {waited:?}, not the activation wait"
    );
    // Other events do not wait, and an unknown caller is refused at once.
    let started = tokio::time::Instant::now();
    assert_eq!(daemon.hook(&token, "Stop").await, 200);
    let stranger = RouteToken::generate().unwrap().encode();
    assert_eq!(daemon.session_start(&stranger).await, 401);
    assert!(started.elapsed() < ACTIVATION_WAIT / 2);

    // With its session back and its worker still starting, a hook waits the activation
    // wait once, not once before its body and again after.
    let _session = register(&identity, &user).await;
    let started = tokio::time::Instant::now();
    assert_eq!(daemon.session_start(&token).await, 200);
    let waited = started.elapsed();
    assert!(
        waited >= ACTIVATION_WAIT.mul_f64(0.9) && waited < ACTIVATION_WAIT.mul_f64(1.5),
        "the SessionStart waited {waited:?}, not the activation wait once"
    );
}

/// An MCP session of `identity` registering `credential`; dropped, it ends.
async fn register(identity: &ClientIdentity, credential: &RouteToken) -> Session {
    let (session, _registered) = connect(
        identity,
        Registration::Mcp(RegisterMcpFields {
            credential: Bytes32(*credential.expose_bytes()),
            worker_hint: None,
        }),
        WAIT,
    )
    .await
    .unwrap();
    session
}

/// The attack of issue 9: 300 opening hooks, each with a random, unbound, well-formed
/// token, are in flight when a known user's `SessionStart` arrives. Before the fix they held
/// every one of the 256 daemon-wide waiting places and the victim passed through at once
/// (2.00 s became 0.00 s); now they can fill only the unbound pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_unbound_opening_hooks_does_not_stop_a_known_users_session_start_waiting() {
    let daemon = Daemon::start(Duration::from_secs(30)).await;
    let pins = tempfile::tempdir().unwrap();
    let victim = RouteToken::generate().unwrap();
    // The victim's MCP registers: its route activates and waits for a worker that the
    // test never starts, so the victim's hooks must wait the whole activation wait.
    let _session = register(&daemon.identity(&pins), &victim).await;

    let flood = OLD_SHARED_POOL + 44;
    let answered = Arc::new(AtomicUsize::new(0));
    let daemon = Arc::new(daemon);
    let mut attackers = tokio::task::JoinSet::new();
    for _ in 0..flood {
        let (daemon, answered) = (daemon.clone(), answered.clone());
        attackers.spawn(async move {
            let random = RouteToken::generate().unwrap().encode();
            let status = daemon.session_start(&random).await;
            answered.fetch_add(1, Ordering::SeqCst);
            status
        });
    }
    // Those that found no waiting place answered at once; the others hold their place. Before
    // the fix, 44 answered because all 256 places were taken; now at least that many do.
    assert!(
        eventually(WAIT, || answered.load(Ordering::SeqCst)
            >= flood - OLD_SHARED_POOL)
        .await,
        "the flood never settled"
    );

    let started = tokio::time::Instant::now();
    let status = daemon.session_start(&victim.encode()).await;
    let waited = started.elapsed();
    assert_eq!(
        status, 200,
        "a SessionStart without a worker still gets its silent answer"
    );
    assert!(
        waited >= ACTIVATION_WAIT.mul_f64(0.9),
        "the victim's SessionStart waited {waited:?}, not the activation wait"
    );
    while let Some(status) = attackers.join_next().await {
        assert_eq!(status.unwrap(), 200);
    }
}

/// Opens a control WebSocket upgrade and reads the answer's head; the socket stays open,
/// never sending `Hello`, as a peer holding handshakes would.
async fn held_upgrade(addr: SocketAddr) -> (TcpStream, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "GET {MCP_PATH} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nUpgrade: websocket\r\n\
         Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
         Sec-WebSocket-Version: 13\r\n\r\n",
        addr.port()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    let read = async {
        while !head.ends_with(b"\r\n\r\n") {
            if stream.read(&mut byte).await.unwrap() == 0 {
                break;
            }
            head.push(byte[0]);
        }
    };
    tokio::time::timeout(WAIT, read).await.unwrap();
    (stream, String::from_utf8_lossy(&head).into_owned())
}

/// A loopback peer (no per-address cap applies to it) holds many control handshakes open
/// and never answers: past the daemon-wide cap the upgrade is refused with 503 and
/// `Retry-After`, the held ones are closed once the challenge lifetime passes, and a
/// legitimate client then registers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handshakes_held_open_by_a_silent_peer_are_capped_and_a_legitimate_client_registers() {
    let ttl = Duration::from_secs(1);
    let daemon = Daemon::start(ttl).await;
    let mut held = Vec::new();
    for _ in 0..MAX_HANDSHAKES {
        let (stream, head) = held_upgrade(daemon.addr).await;
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
        held.push(stream);
    }
    for _ in 0..8 {
        let (_stream, head) = held_upgrade(daemon.addr).await;
        assert!(head.starts_with("HTTP/1.1 503"), "over the cap: {head}");
        assert!(
            head.to_ascii_lowercase().contains("\r\nretry-after: 1\r\n"),
            "{head}"
        );
    }
    // The silent handshakes end when their challenge lifetime passes: the daemon closes them.
    for stream in &mut held {
        let mut buf = [0u8; 256];
        let closed = async {
            loop {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        };
        tokio::time::timeout(WAIT, closed)
            .await
            .expect("a silent handshake stayed open past its challenge lifetime");
    }
    let pins = tempfile::tempdir().unwrap();
    let identity = daemon.identity(&pins);
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut poll = tokio::time::interval(Duration::from_millis(50));
    loop {
        poll.tick().await;
        let registration = Registration::Mcp(RegisterMcpFields {
            credential: Bytes32(*RouteToken::generate().unwrap().expose_bytes()),
            worker_hint: None,
        });
        match connect(&identity, registration, WAIT).await {
            Ok(_) => break,
            Err(error) => assert!(
                tokio::time::Instant::now() < deadline,
                "a legitimate client could not register: {error}"
            ),
        }
    }
}
