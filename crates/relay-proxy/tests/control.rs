//! The daemon's control plane in-process, with the real client side of the handshake: what a
//! control peer says must not become text of its choosing in the daemon's log.

// The set-up helpers sit outside `#[test]` functions, where clippy's allow-unwrap-in-tests
// does not reach.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test set-up helpers fail the test on error"
)]

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use relay_broker::BrokerConfig;
use relay_identity::{DaemonAddress, PinStore, SigningKey};
use relay_logging::{LogCapture, LogConfig, LogFormat};
use relay_proto::{
    Bytes32, Directive, Id, McpActivationFailed, Message, RegisterMcpFields, RegisterWorkerFields,
    Registered, Text, WorkerActivationFailed,
};
use relay_proxy::control::client::{ClientIdentity, Registration, Session, connect};
use relay_proxy::control::daemon::{ControlOptions, ControlPlane};
use relay_proxy::control::{MCP_PATH, WORKER_PATH};
use relay_proxy::metrics::Metrics;
use relay_proxy::shell::Shell;
use relay_proxy::state::StateStore;
use tokio::net::TcpListener;

/// How long a test waits for something that should happen at once.
const WAIT: Duration = Duration::from_secs(10);

/// A `failure_reason` that would forge a second log line if it were written as it came.
const EVIL: &str = "evil\n{\"event\":\"daemon_stopped\",\"level\":\"INFO\"}";

/// A daemon control plane on `127.0.0.1:<port>` with its shell running.
struct Daemon {
    address: DaemonAddress,
    state: tempfile::TempDir,
}

async fn start_daemon() -> Daemon {
    start_daemon_with(BrokerConfig::default()).await
}

async fn start_daemon_with(config: BrokerConfig) -> Daemon {
    let state = tempfile::tempdir().unwrap();
    let shell = Shell::new(
        config,
        StateStore::new(state.path()),
        Arc::new(Metrics::new()),
    )
    .unwrap();
    tokio::spawn(shell.clone().run(std::future::pending()));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let local = listener.local_addr().unwrap();
    let plane = ControlPlane::new(
        ControlOptions {
            daemon_key: Arc::new(SigningKey::generate().unwrap()),
            origins: vec![format!("http://127.0.0.1:{}", local.port())],
            challenge_ttl: Duration::from_secs(30),
            challenge_window: Duration::from_secs(15),
            challenge_limit: 16,
            max_sessions_per_ip: 256,
            ping: Duration::from_secs(30),
            pong_timeout: Duration::from_secs(10),
            worker_networks: Vec::new(),
            own_addresses: vec![local.ip()],
            interfaces: Vec::new,
        },
        shell,
    );
    tokio::spawn(async move {
        loop {
            let Ok((stream, peer)) = listener.accept().await else {
                return;
            };
            let plane = plane.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let plane = plane.clone();
                    async move {
                        let role = if req.uri().path() == WORKER_PATH {
                            relay_proto::Role::Worker
                        } else {
                            assert_eq!(req.uri().path(), MCP_PATH);
                            relay_proto::Role::Mcp
                        };
                        Ok::<_, Infallible>(plane.upgrade(req, role, peer))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .with_upgrades()
                    .await;
            });
        }
    });
    Daemon {
        address: DaemonAddress::parse(&format!("http://127.0.0.1:{}", local.port())).unwrap(),
        state,
    }
}

fn identity(daemon: &Daemon, key: &Arc<SigningKey>, pins: &tempfile::TempDir) -> ClientIdentity {
    ClientIdentity {
        daemon: daemon.address.clone(),
        key: key.clone(),
        pins: Arc::new(PinStore::new(pins.path(), None)),
        tls: None,
        instance_id: Id::from(uuid::Uuid::now_v7()),
    }
}

/// An MCP registers and receives its launch grant.
async fn mcp_with_grant(client: &ClientIdentity) -> (Session, relay_proto::Grant) {
    mcp_with_grant_for(client, Bytes32([7; 32])).await
}

/// An MCP registers `credential` and receives its launch grant.
async fn mcp_with_grant_for(
    client: &ClientIdentity,
    credential: Bytes32,
) -> (Session, relay_proto::Grant) {
    let (session, registered) = connect(
        client,
        Registration::Mcp(RegisterMcpFields {
            credential,
            worker_hint: None,
        }),
        WAIT,
    )
    .await
    .unwrap();
    let Registered::Mcp {
        directive: Directive::LaunchWorker(grant),
        ..
    } = registered
    else {
        panic!("expected a launch grant, got {registered:?}");
    };
    (session, grant)
}

/// Polls the log until a `worker_activation_failed` line is there.
async fn activation_failed_line(capture: &LogCapture) -> String {
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut interval = tokio::time::interval(Duration::from_millis(20));
    loop {
        interval.tick().await;
        let log = capture.contents();
        if let Some(line) = log
            .lines()
            .find(|line| line.contains("\"worker_activation_failed\""))
        {
            return line.to_owned();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no worker_activation_failed in the log:\n{log}"
        );
    }
}

fn capture_log() -> (LogCapture, tracing::Dispatch) {
    let capture = LogCapture::new();
    let dispatch = relay_logging::subscriber(
        &LogConfig {
            level: "trace".into(),
            format: LogFormat::Jsonl,
        },
        capture.clone(),
    )
    .unwrap();
    (capture, dispatch)
}

fn assert_only_unknown(capture: &LogCapture, line: &str) {
    let event: serde_json::Value = serde_json::from_str(line).unwrap();
    assert_eq!(event["failure_reason"], "unknown", "{line}");
    let log = capture.contents();
    assert!(!log.contains("evil"), "peer text reached the log:\n{log}");
    assert!(
        !log.contains("daemon_stopped"),
        "a forged event reached the log:\n{log}"
    );
    for line in log.lines() {
        assert!(
            serde_json::from_str::<serde_json::Value>(line).is_ok(),
            "not one JSON object per line: {line:?}"
        );
    }
}

// Everything runs on this one thread, so the thread's default subscriber sees the events of
// every task: the control plane's sessions and the shell.
#[tokio::test(flavor = "current_thread")]
async fn an_mcp_cannot_write_its_own_failure_reason_into_the_daemon_log() {
    let (capture, dispatch) = capture_log();
    let _default = tracing::dispatcher::set_default(&dispatch);
    let daemon = start_daemon().await;
    let pins = tempfile::tempdir().unwrap();
    let key = Arc::new(SigningKey::generate().unwrap());
    let client = identity(&daemon, &key, &pins);
    let (mut mcp, grant) = mcp_with_grant(&client).await;

    mcp.send(&Message::ActivationFailed(McpActivationFailed {
        activation_id: grant.activation_id,
        failure_reason: Text::new(EVIL).unwrap(),
    }))
    .await
    .unwrap();

    let line = activation_failed_line(&capture).await;
    assert_only_unknown(&capture, &line);
}

#[tokio::test(flavor = "current_thread")]
async fn a_worker_cannot_write_its_failure_reason_or_diagnostic_into_the_daemon_log() {
    let (capture, dispatch) = capture_log();
    let _default = tracing::dispatcher::set_default(&dispatch);
    let daemon = start_daemon().await;
    let pins = tempfile::tempdir().unwrap();
    let key = Arc::new(SigningKey::generate().unwrap());
    let client = identity(&daemon, &key, &pins);
    let (_mcp, grant) = mcp_with_grant(&client).await;

    let (mut worker, registered) = connect(
        &client,
        Registration::Worker(RegisterWorkerFields {
            activation_id: grant.activation_id,
            activation_token: grant.activation_token,
            endpoint: Text::new("127.0.0.1:9").unwrap(),
            certificate_sha256: Bytes32([9; 32]),
        }),
        WAIT,
    )
    .await
    .unwrap();
    assert!(
        matches!(registered, Registered::Worker { .. }),
        "{registered:?}"
    );
    worker
        .send(&Message::WorkerActivationFailed(WorkerActivationFailed {
            failure_reason: Text::new(EVIL).unwrap(),
            diagnostic: Text::new(EVIL).unwrap(),
        }))
        .await
        .unwrap();

    let line = activation_failed_line(&capture).await;
    assert_only_unknown(&capture, &line);
}

#[tokio::test(flavor = "current_thread")]
async fn a_reason_from_the_closed_set_is_logged_as_it_is() {
    let (capture, dispatch) = capture_log();
    let _default = tracing::dispatcher::set_default(&dispatch);
    let daemon = start_daemon().await;
    let pins = tempfile::tempdir().unwrap();
    let key = Arc::new(SigningKey::generate().unwrap());
    let client = identity(&daemon, &key, &pins);
    let (mut mcp, grant) = mcp_with_grant(&client).await;

    mcp.send(&Message::ActivationFailed(McpActivationFailed {
        activation_id: grant.activation_id,
        failure_reason: Text::new("worker_process_spawn_failed").unwrap(),
    }))
    .await
    .unwrap();

    let line = activation_failed_line(&capture).await;
    let event: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(
        event["failure_reason"], "worker_process_spawn_failed",
        "{line}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_handshake_refusal_is_sent_logged_and_closes_the_session() {
    let (capture, dispatch) = capture_log();
    let _default = tracing::dispatcher::set_default(&dispatch);
    let daemon = start_daemon().await;
    let pins = tempfile::tempdir().unwrap();
    let key = Arc::new(SigningKey::generate().unwrap());
    let client = identity(&daemon, &key, &pins);
    let (_mcp, grant) = mcp_with_grant(&client).await;

    // A loopback worker may only name 127.0.0.1 (§5.5).
    let refused = connect(
        &client,
        Registration::Worker(RegisterWorkerFields {
            activation_id: grant.activation_id,
            activation_token: grant.activation_token,
            endpoint: Text::new("10.0.0.1:9").unwrap(),
            certificate_sha256: Bytes32([9; 32]),
        }),
        WAIT,
    )
    .await
    .map(|_| ())
    .unwrap_err();
    assert_eq!(
        refused.refused_code(),
        Some(relay_proto::RefusedCode::EndpointNotAllowed),
        "{refused}"
    );
    // The worker is told why, so its log says what to change.
    assert!(
        refused.to_string().contains("must listen on 127.0.0.1"),
        "{refused}"
    );
    let log = capture.contents();
    let line = log
        .lines()
        .find(|line| line.contains("\"control_registration_refused\""))
        .unwrap_or_else(|| panic!("no refusal in the log:\n{log}"));
    let event: serde_json::Value = serde_json::from_str(line).unwrap();
    assert_eq!(event["reason"], "endpoint_not_allowed", "{line}");
    assert_eq!(event["role"], "worker", "{line}");
}

/// The authority of `daemon` and the URL of its MCP control path, for a raw WebSocket client.
fn mcp_url(daemon: &Daemon) -> (String, String) {
    let origin = daemon.address.origin().to_string();
    let authority = origin.trim_start_matches("http://").to_owned();
    let url = format!("ws://{authority}{MCP_PATH}");
    (authority, url)
}

/// The lines saying a control session was closed before it registered.
fn closed_before_registering(capture: &LogCapture) -> Vec<serde_json::Value> {
    capture
        .contents()
        .lines()
        .filter(|line| line.contains("control session closed before it registered"))
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// A first frame that is not a `Hello` (text, garbage, or far too large) closes the session
/// with a protocol close code and a logged reason.
#[tokio::test]
async fn a_malformed_first_frame_closes_the_session_with_a_logged_reason() {
    use futures_util::{SinkExt as _, StreamExt as _};
    use tokio_tungstenite::tungstenite::Message as Ws;
    use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

    let (capture, dispatch) = capture_log();
    let _default = tracing::dispatcher::set_default(&dispatch);
    let daemon = start_daemon().await;
    let (authority, url) = mcp_url(&daemon);
    // A peer that goes away before saying anything is no malformed session (it goes first,
    // so the daemon has long seen it leave when the log is read below).
    let tcp = tokio::net::TcpStream::connect(&authority).await.unwrap();
    let (ws, _) = tokio_tungstenite::client_async(url.as_str(), tcp)
        .await
        .unwrap();
    drop(ws);
    for first in [
        Ws::text("hello"),
        Ws::binary(b"XX\0\x01\0\0".to_vec()),
        Ws::binary(vec![0u8; 300 * 1024]),
    ] {
        let tcp = tokio::net::TcpStream::connect(&authority).await.unwrap();
        let (mut ws, _) = tokio_tungstenite::client_async(url.as_str(), tcp)
            .await
            .unwrap();
        let _ = ws.send(first).await;
        let closed = tokio::time::timeout(WAIT, async {
            while let Some(frame) = ws.next().await {
                match frame {
                    Ok(Ws::Close(close)) => return close,
                    Ok(_) => {}
                    Err(_) => return None,
                }
            }
            None
        })
        .await
        .unwrap();
        let close = closed.expect("no close frame");
        assert_eq!(close.code, CloseCode::Protocol, "{close:?}");
    }
    // Said once, with its reason; the two sessions closed after it within ten seconds are
    // only counted, as a local process can open thousands of such sessions a second
    // (loopback peers are not rate-limited).
    let closed = closed_before_registering(&capture);
    assert_eq!(closed.len(), 1, "{closed:?}");
    assert_eq!(closed[0]["reason"], "expected Hello", "{closed:?}");
    assert_eq!(closed[0]["suppressed_since_last_emit"], 0, "{closed:?}");
}

/// A local process opening session after session, each closed for a malformed first frame,
/// costs the daemon one log line per ten seconds, not one per session.
#[tokio::test]
async fn sessions_closed_for_a_malformed_first_frame_are_logged_once_per_interval() {
    use futures_util::{SinkExt as _, StreamExt as _};
    use tokio_tungstenite::tungstenite::Message as Ws;

    let (capture, dispatch) = capture_log();
    let _default = tracing::dispatcher::set_default(&dispatch);
    let daemon = start_daemon().await;
    let (authority, url) = mcp_url(&daemon);
    for _ in 0..200 {
        let tcp = tokio::net::TcpStream::connect(&authority).await.unwrap();
        let (mut ws, _) = tokio_tungstenite::client_async(url.as_str(), tcp)
            .await
            .unwrap();
        let _ = ws.send(Ws::binary(vec![0_u8; 8])).await;
        // Closed by the daemon: its line, if any, was written before the close.
        tokio::time::timeout(WAIT, async {
            while ws.next().await.is_some_and(|f| f.is_ok()) {}
        })
        .await
        .unwrap();
    }
    let closed = closed_before_registering(&capture);
    assert_eq!(closed.len(), 1, "{closed:?}");
}

/// The attack on the credential tombstones, through real handshakes: a local process mints
/// one machine identity after another, registers a credential under each and releases it, so
/// the full route table evicts route after route, each leaving a tombstone for 30 days. The
/// state file, which every registration rewrites whole, must stop growing at the table's cap
/// (2 routes × 1 token × 4 tombstones here), and the daemon must say it dropped the oldest.
#[tokio::test(flavor = "current_thread")]
async fn minted_identities_cannot_grow_the_state_file_without_bound() {
    let (capture, dispatch) = capture_log();
    let _default = tracing::dispatcher::set_default(&dispatch);
    let daemon = start_daemon_with(BrokerConfig {
        max_routes: 2,
        max_tokens_per_identity: 1,
        ..BrokerConfig::default()
    })
    .await;
    let pins = tempfile::tempdir().unwrap();
    for n in 0..20u8 {
        let key = Arc::new(SigningKey::generate().unwrap());
        let client = identity(&daemon, &key, &pins);
        let (mut mcp, grant) = mcp_with_grant_for(&client, Bytes32([n; 32])).await;
        // As relay-mcp leaves: `Release`, then the launch's status, whose answer says the
        // daemon has handled the release, so the route is idle before the next identity.
        mcp.send(&Message::Release).await.unwrap();
        mcp.send(&Message::LaunchStatus {
            activation_id: grant.activation_id,
        })
        .await
        .unwrap();
        loop {
            let frame = mcp.recv_within(WAIT).await.unwrap();
            if matches!(frame.message, Message::LaunchStatusIs(_)) {
                break;
            }
        }
    }
    let store = StateStore::new(daemon.state.path());
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let state = store.load().unwrap();
        let tombstones = state
            .bindings
            .iter()
            .filter(|b| b.tombstone_until.is_some())
            .count();
        assert!(tombstones <= 8, "{tombstones} tombstones in the state file");
        // 18 routes were evicted; the last registration's write may still be on its way.
        if tombstones == 8 && state.bindings.len() == 10 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the state file never settled: {} bindings",
            state.bindings.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let log = capture.contents();
    assert_eq!(
        log.matches("\"credential_tombstones_dropped\"").count(),
        10,
        "{log}"
    );
}

/// A frame of a kind this daemon does not know, sent where a registration belongs, is
/// answered `Refused { protocol_unsupported }` with the range the daemon speaks, and the
/// session closes; it was dropped without a word or a log line.
#[tokio::test(flavor = "current_thread")]
async fn an_unknown_kind_after_the_challenge_is_refused_as_unsupported() {
    use futures_util::SinkExt as _;
    use tokio_tungstenite::tungstenite::Message as Ws;

    let daemon = start_daemon().await;
    let origin = daemon.address.origin().to_string();
    let authority = origin.trim_start_matches("http://").to_owned();
    let tcp = tokio::net::TcpStream::connect(&authority).await.unwrap();
    let (mut ws, _) =
        tokio_tungstenite::client_async(format!("ws://{authority}{MCP_PATH}").as_str(), tcp)
            .await
            .unwrap();
    let key = SigningKey::generate().unwrap();
    let hello = Message::Hello(relay_proto::Hello {
        role: relay_proto::Role::Mcp,
        protocols: relay_proto::SUPPORTED_PROTOCOLS,
        binary_version: Text::truncated("test"),
        instance_id: Id::from(uuid::Uuid::now_v7()),
        machine_key: relay_proto::PublicKey(*key.public_key().as_bytes()),
        client_nonce: Bytes32([9; 32]),
        target_origin: Text::truncated(&origin),
    });
    ws.send(Ws::binary(relay_proto::encode(&hello).unwrap()))
        .await
        .unwrap();
    let Some(Message::Challenge(challenge)) = next_message(&mut ws).await else {
        panic!("no Challenge");
    };
    // Its id is a UUIDv7, as every id on the wire is.
    assert_eq!(
        uuid::Uuid::from_bytes(challenge.challenge_id.0).get_version_num(),
        7
    );
    // The frame header (magic, version 1, kind 999) and nothing after it.
    let mut unknown = relay_proto::MAGIC.to_be_bytes().to_vec();
    unknown.extend_from_slice(&1u16.to_be_bytes());
    unknown.extend_from_slice(&999u16.to_be_bytes());
    ws.send(Ws::binary(unknown)).await.unwrap();
    let Some(Message::Refused(refused)) = next_message(&mut ws).await else {
        panic!("no Refused");
    };
    assert_eq!(
        refused.reason(),
        Some(relay_proto::RefusedCode::ProtocolUnsupported)
    );
    assert_eq!(refused.supported, relay_proto::SUPPORTED_PROTOCOLS);
}

/// The next control message on a raw client socket, or `None` when the next frame is not one.
async fn next_message(
    ws: &mut tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>,
) -> Option<Message> {
    use futures_util::StreamExt as _;
    match tokio::time::timeout(WAIT, ws.next()).await.unwrap() {
        Some(Ok(tokio_tungstenite::tungstenite::Message::Binary(bytes))) => {
            Some(relay_proto::decode(&bytes).unwrap().message)
        }
        _ => None,
    }
}
