use std::net::{IpAddr, Ipv4Addr};

use super::*;

fn ip(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(a, b, c, d))
}

#[test]
fn a_loopback_session_may_only_name_127_0_0_1() {
    let peer = ip(127, 0, 0, 1);
    assert!(check_endpoint("127.0.0.1:40001", peer, &[], &[]).is_ok());
    for endpoint in [
        "127.0.0.2:40001",
        "10.0.0.5:40001",
        "0.0.0.0:40001",
        "127.0.0.1:0",
        "localhost:40001",
        "[::1]:40001",
        "garbage",
    ] {
        assert!(
            check_endpoint(endpoint, peer, &[], &[]).is_err(),
            "{endpoint}"
        );
    }
}

#[test]
fn a_remote_worker_names_its_own_address_or_an_allowed_network() {
    let peer = ip(10, 0, 0, 7);
    let networks = ["10.1.0.0/16".parse().unwrap()];
    let own = [ip(10, 0, 0, 1)];
    assert!(check_endpoint("10.0.0.7:47700", peer, &networks, &own).is_ok());
    assert!(check_endpoint("10.1.2.3:47700", peer, &networks, &own).is_ok());
    for endpoint in [
        "10.0.0.8:47700",
        "127.0.0.1:47700",
        "169.254.0.1:47700",
        "224.0.0.1:47700",
        "0.0.0.0:47700",
        "255.255.255.255:47700",
        "10.0.0.1:47700",
    ] {
        assert!(
            check_endpoint(endpoint, peer, &networks, &own).is_err(),
            "{endpoint}"
        );
    }
    // The daemon's own address stays refused even inside an allowed network.
    let networks = ["10.0.0.0/8".parse().unwrap()];
    assert!(check_endpoint("10.0.0.1:47700", peer, &networks, &own).is_err());
}

/// A control plane with `challenge_limit` handshakes per 15 s window, and its metrics.
fn limited_control(
    challenge_limit: u32,
) -> (
    Arc<ControlPlane>,
    Arc<crate::metrics::Metrics>,
    tempfile::TempDir,
) {
    control_with(|options| options.challenge_limit = challenge_limit)
}

/// A control plane with the test's options, as `edit` leaves them, and its metrics.
fn control_with(
    edit: impl FnOnce(&mut ControlOptions),
) -> (
    Arc<ControlPlane>,
    Arc<crate::metrics::Metrics>,
    tempfile::TempDir,
) {
    let state = tempfile::tempdir().unwrap();
    let metrics = Arc::new(crate::metrics::Metrics::new());
    let shell = Shell::new(
        relay_broker::BrokerConfig::default(),
        crate::state::StateStore::new(state.path()),
        metrics.clone(),
    )
    .unwrap();
    let mut options = ControlOptions {
        daemon_key: Arc::new(SigningKey::generate().unwrap()),
        origins: vec!["https://relay.example:8443".to_owned()],
        challenge_ttl: Duration::from_secs(30),
        challenge_window: Duration::from_secs(15),
        challenge_limit: 16,
        max_sessions_per_ip: 256,
        ping: Duration::from_secs(30),
        pong_timeout: Duration::from_secs(10),
        worker_networks: Vec::new(),
        own_addresses: Vec::new(),
        interfaces: Vec::new,
    };
    edit(&mut options);
    let control = ControlPlane::new(options, shell);
    (control, metrics, state)
}

/// An address the host gained after the daemon started is its own as much as those it had:
/// a remote worker may not name it, even inside `worker_networks`, where the daemon would
/// otherwise connect to a port of the worker's choosing on its own host.
#[test]
fn an_address_the_host_gains_after_start_is_never_a_remote_worker_endpoint() {
    fn gained() -> Vec<IpAddr> {
        vec![
            ip(10, 77, 0, 1),
            IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
            ip(10, 77, 0, 2),
        ]
    }
    let (control, _metrics, _state) = control_with(|options| {
        options.worker_networks = vec!["10.77.0.0/24".parse().unwrap()];
        options.own_addresses = vec![ip(10, 77, 0, 1)];
        options.interfaces = gained;
    });
    let peer = ip(10, 77, 0, 11);
    for own in ["10.77.0.1:9452", "10.77.0.2:9452"] {
        assert!(control.check_endpoint(own, peer).is_err(), "{own}");
    }
    assert!(control.check_endpoint("10.77.0.12:9452", peer).is_ok());
    assert!(control.check_endpoint("10.77.0.11:9452", peer).is_ok());
}

/// The attack of a peer opening handshake after handshake: past `challenge_limit` in the
/// window, its upgrades get 429 with `Retry-After` and count as refused registrations,
/// while another address and loopback peers go on.
#[tokio::test]
async fn a_remote_address_past_its_handshakes_per_window_gets_429_and_is_counted() {
    let (control, metrics, _state) = limited_control(3);
    let attacker = ip(192, 0, 2, 7);
    for _ in 0..3 {
        assert!(control.refuse_over_rate(attacker, Role::Mcp).is_none());
    }
    let refused = control
        .refuse_over_rate(attacker, Role::Worker)
        .expect("the fourth handshake in the window was let on");
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry_after: u64 = refused.headers()[header::RETRY_AFTER]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=15).contains(&retry_after), "{retry_after}");
    assert!(
        control
            .refuse_over_rate(ip(192, 0, 2, 8), Role::Mcp)
            .is_none()
    );
    for _ in 0..10 {
        assert!(
            control
                .refuse_over_rate(ip(127, 0, 0, 1), Role::Mcp)
                .is_none()
        );
    }
    let text = metrics.encode();
    assert!(
        text.lines()
            .any(|l| l == r#"relay_refused_registrations_total{reason="rate_limited"} 1"#),
        "{text}"
    );
}

/// The attack of a peer that floods the control path with handshakes it knows will be
/// refused: each refusal costs it one request, and must not cost the daemon a log line.
/// One line is written, then none for ten seconds, and the next says how many were left out.
#[test]
fn a_flood_of_refused_handshakes_is_logged_once_per_ten_seconds() {
    let (control, _metrics, _state) = limited_control(1);
    let (capture, dispatch) = relay_logging::LogCapture::jsonl("info");
    tracing::dispatcher::with_default(&dispatch, || {
        let attacker = ip(192, 0, 2, 7);
        assert!(control.refuse_over_rate(attacker, Role::Mcp).is_none());
        for _ in 0..1000 {
            assert!(control.refuse_over_rate(attacker, Role::Mcp).is_some());
        }
    });
    let log = capture.contents();
    assert_eq!(log.matches("control_rate_limited").count(), 1, "{log}");
    assert!(log.contains(r#""suppressed_since_last_emit":0"#), "{log}");
}

/// Two remote addresses holding every handshake they can (the attack that locked every
/// client out, loopback included) get a few places each; loopback keeps all of its own, and
/// each place comes back when its handshake ends.
#[test]
fn remote_peers_holding_handshakes_cannot_lock_out_loopback_or_other_addresses() {
    let places = HandshakePlaces::new();
    let attackers: [IpAddr; 2] = ["10.77.2.2".parse().unwrap(), "10.77.2.3".parse().unwrap()];
    let mut held = Vec::new();
    for ip in attackers {
        while let Some(place) = places.take(ip) {
            held.push(place);
            assert!(held.len() <= 2 * MAX_HANDSHAKES_PER_ADDRESS as usize);
        }
    }
    assert_eq!(held.len(), 2 * MAX_HANDSHAKES_PER_ADDRESS as usize);
    let legitimate: IpAddr = "10.77.1.5".parse().unwrap();
    assert!(places.take(legitimate).is_some());
    let loopback: Vec<HandshakePlace> = (0..MAX_HANDSHAKES)
        .map(|_| places.take(IpAddr::from([127, 0, 0, 1])).unwrap())
        .collect();
    assert!(places.take(IpAddr::from([127, 0, 0, 1])).is_none());
    drop(loopback);
    assert!(places.take(IpAddr::from([127, 0, 0, 1])).is_some());

    // Many addresses together fill only the remote places, and it takes many.
    let many: Vec<HandshakePlace> = (0..=255u8)
        .flat_map(|third| (0..=255u8).map(move |last| IpAddr::from([10, 9, third, last])))
        .filter_map(|ip| places.take(ip))
        .collect();
    assert_eq!(many.len() + held.len(), MAX_REMOTE_HANDSHAKES);
    assert!(MAX_REMOTE_HANDSHAKES / MAX_HANDSHAKES_PER_ADDRESS as usize >= 64);
    drop(held);
    assert!(places.take(attackers[0]).is_some());
}

/// A site behind one NAT address reconnects all at once after a daemon restart: the
/// upgrades past the address's few handshake places get 503 and retry a moment later. Those
/// turned away opened no handshake, so they must not use up the address's handshakes per
/// window; counted, every session past the first few got 429 until the window passed, and
/// the site's workers outlived their reconnect grace.
#[tokio::test]
async fn upgrades_turned_away_for_want_of_a_place_do_not_count_against_the_window() {
    let (control, _metrics, _state) = limited_control(16);
    let site = ip(198, 51, 100, 9);
    let held: Vec<HandshakePlace> = (0..MAX_HANDSHAKES_PER_ADDRESS)
        .map(|_| control.admit(site, Role::Mcp).ok().unwrap())
        .collect();
    for _ in 0..40 {
        let refused = control.admit(site, Role::Worker).err().unwrap();
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    }
    drop(held);
    // The window has room for the twelve handshakes the four did not use, and no more.
    for n in 0..12 {
        assert!(
            control.admit(site, Role::Mcp).is_ok(),
            "handshake {n} after the places came back"
        );
    }
    let refused = control.admit(site, Role::Mcp).err().unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
}

/// A refused endpoint says why, and what to change, in terms a user on the client machine
/// can act on; the worker's log is where they read it.
#[test]
fn a_refused_endpoint_says_why_and_what_to_change() {
    let peer = ip(10, 77, 2, 2);
    let networks = ["10.1.0.0/16".parse().unwrap()];
    let own = [ip(10, 77, 1, 1)];
    let why = |endpoint: &str| {
        check_endpoint(endpoint, peer, &networks, &own)
            .unwrap_err()
            .to_string()
    };
    // Behind NAT: the private address is not the one the daemon sees.
    let nat = why("192.168.77.2:9443");
    for part in ["192.168.77.2", "10.77.2.2", "worker_networks", "NAT"] {
        assert!(nat.contains(part), "{part}: {nat}");
    }
    assert_eq!(
        check_endpoint("192.168.77.2:9443", peer, &networks, &own),
        Err(EndpointRefusal::NotThePeer {
            host: Ipv4Addr::new(192, 168, 77, 2),
            peer,
        })
    );
    // The daemon's own address is refused in the same words as any other that is not the
    // peer's: the refusal comes before the grant is checked, and must not tell anyone who
    // opens a handshake which addresses belong to the daemon's host.
    assert_eq!(
        check_endpoint("10.77.1.1:9443", peer, &networks, &own),
        Err(EndpointRefusal::NotThePeer {
            host: Ipv4Addr::new(10, 77, 1, 1),
            peer,
        })
    );
    assert_eq!(
        why("10.77.1.1:9443").replace("10.77.1.1", "HOST"),
        why("10.77.1.9:9443").replace("10.77.1.9", "HOST")
    );
    for (endpoint, kind) in [
        ("127.0.0.1:9443", "loopback"),
        ("169.254.1.1:9443", "link-local"),
        ("224.0.0.9:9443", "multicast"),
        ("0.0.0.0:9443", "unspecified"),
        ("255.255.255.255:9443", "broadcast"),
    ] {
        let text = why(endpoint);
        assert!(text.contains(kind), "{endpoint}: {text}");
        assert!(text.contains("RELAY_WORKER_ADVERTISE_ADDRESS"), "{text}");
    }
    for endpoint in [
        "client.example:9443",
        "[::1]:9443",
        "[::ffff:127.0.0.1]:9443",
        "10.77.2.2:0",
    ] {
        assert_eq!(
            check_endpoint(endpoint, peer, &networks, &own),
            Err(EndpointRefusal::Malformed),
            "{endpoint}"
        );
    }
    assert_eq!(
        check_endpoint("10.77.2.2:9443", peer, &networks, &own),
        Ok(())
    );
    // The text fits a `Refused` whole.
    assert!(nat.len() <= 2048);
}

/// The attack of a peer that registers and then reads nothing, keeping its reference live:
/// once the pipe to it is full, the daemon's next message waits; after the pong time the
/// session ends, where it used to wait for as long as the peer lived.
#[tokio::test(start_paused = true)]
async fn a_session_whose_peer_reads_nothing_ends_after_the_pong_time() {
    let (control, _metrics, _state) = limited_control(16);
    let (_peer, daemon_side) = tokio::io::duplex(256);
    let ws = tokio_tungstenite::WebSocketStream::from_raw_socket(
        daemon_side,
        tokio_tungstenite::tungstenite::protocol::Role::Server,
        Some(super::ws_config()),
    )
    .await;
    let mut transport = Transport::new(ws);
    let (sender, outbound) = tokio::sync::mpsc::channel(crate::shell::SESSION_QUEUE);
    let serving = tokio::spawn(async move {
        control
            .serve(&mut transport, Role::Mcp, ConnId(1), outbound, false)
            .await
    });
    for _ in 0..crate::shell::SESSION_QUEUE {
        let message = Message::WaitForWorker {
            retry_after_ms: 1000,
        };
        if sender
            .try_send(crate::shell::Outbound::Message(Box::new(message)))
            .is_err()
        {
            break;
        }
    }
    let reason = tokio::time::timeout(Duration::from_secs(60), serving)
        .await
        .expect("the session waited on a peer that reads nothing")
        .unwrap();
    assert_eq!(reason, DisconnectReason::PongTimeout);
}

/// A registered peer that sends a kind this daemon does not know is answered
/// `Refused { protocol_unsupported }` with the supported range before the session closes.
#[tokio::test]
async fn an_unknown_kind_in_a_session_is_refused_as_unsupported() {
    use futures_util::{SinkExt as _, StreamExt as _};
    use tokio_tungstenite::tungstenite::Message as Ws;

    let (control, _metrics, _state) = limited_control(16);
    let (peer_side, daemon_side) = tokio::io::duplex(64 * 1024);
    let ws = |io, role| {
        tokio_tungstenite::WebSocketStream::from_raw_socket(io, role, Some(super::ws_config()))
    };
    let mut transport = Transport::new(
        ws(
            daemon_side,
            tokio_tungstenite::tungstenite::protocol::Role::Server,
        )
        .await,
    );
    let mut peer = ws(
        peer_side,
        tokio_tungstenite::tungstenite::protocol::Role::Client,
    )
    .await;
    let (_sender, outbound) = tokio::sync::mpsc::channel(crate::shell::SESSION_QUEUE);
    let serving = tokio::spawn(async move {
        control
            .serve(&mut transport, Role::Mcp, ConnId(1), outbound, false)
            .await
    });
    // The frame header (magic, version 1, kind 999) and nothing after it.
    let mut unknown = relay_proto::MAGIC.to_be_bytes().to_vec();
    unknown.extend_from_slice(&1u16.to_be_bytes());
    unknown.extend_from_slice(&999u16.to_be_bytes());
    peer.send(Ws::binary(unknown)).await.unwrap();
    let Some(Ok(Ws::Binary(bytes))) = peer.next().await else {
        panic!("no answer");
    };
    let Message::Refused(refused) = relay_proto::decode(&bytes).unwrap().message else {
        panic!("not Refused");
    };
    assert_eq!(refused.reason(), Some(RefusedCode::ProtocolUnsupported));
    assert_eq!(refused.supported, SUPPORTED_PROTOCOLS);
    serving.await.unwrap();
}

/// A plain request on a control path is answered 426 naming what to switch to: the
/// `Upgrade` protocol a 426 must carry, and the WebSocket version this daemon speaks.
#[tokio::test]
async fn a_control_path_asked_without_an_upgrade_names_websocket_13() {
    let (control, _metrics, _state) = limited_control(16);
    let peer = SocketAddr::from((Ipv4Addr::LOCALHOST, 40000));
    for upgrade in [None, Some("h2c"), Some("websocket")] {
        let mut req = Request::get("/_relay/control/v1/mcp");
        if let Some(protocol) = upgrade {
            req = req
                .header(header::CONNECTION, "upgrade")
                .header(header::UPGRADE, protocol)
                .header(header::SEC_WEBSOCKET_VERSION, "8")
                .header(header::SEC_WEBSOCKET_KEY, "dGhlIHNhbXBsZSBub25jZQ==");
        }
        let res = control.upgrade(req.body(()).unwrap(), Role::Mcp, peer);
        assert_eq!(res.status(), StatusCode::UPGRADE_REQUIRED, "{upgrade:?}");
        assert_eq!(res.headers()[header::UPGRADE], "websocket", "{upgrade:?}");
        assert_eq!(res.headers()[header::CONNECTION], "upgrade");
        assert_eq!(res.headers()[header::SEC_WEBSOCKET_VERSION], "13");
    }
}
