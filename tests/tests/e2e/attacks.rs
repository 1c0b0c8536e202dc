//! Attacks on the control plane (SPEC §4.3, §5.2, §5.5, §5.6, §5.8): each is refused with a
//! typed `Refused` reason, logged as `control_registration_refused` with that reason, and
//! counted in `/metrics`; none registers anything or makes the daemon send a secret or a
//! request where it should not.
//!
//! The attacker is the test's own control client ([`ControlClient`], [`RawHandshake`]):
//! the real client code with a machine key of its own, talking to the real relayd.

use std::sync::Arc;

use http::StatusCode;
use relay_e2e::http::{fetch, post_json};
use relay_e2e::{
    CONNECT_TIMEOUT, ControlClient, PinnedEndpoint, RawHandshake, Relayd, Squatter, User,
    worker_fields,
};
use relay_identity::{DaemonAddress, PinStore, PublicKey, RouteToken, SigningKey};
use relay_proto::{Directive, Grant, Message, RefusedCode, Registered, Role};
use relay_proxy::control::MCP_PATH;
use relay_proxy::control::client::{ConnectError, Session};
use relay_testkit::StandIn;
use tokio::io::AsyncWriteExt as _;
use tokio_rustls::rustls;

use super::support::{
    EVENT_TIMEOUT, INITIALIZE_TIMEOUT, assert_healthy, field, fresh_token, metrics, new_ca,
    pass_throughs, requests_to, route_status, trusting, user_for, worker_config,
};

/// Registers `client` as an MCP for `token` and returns its session and the launch grant
/// the broker gave it (the first MCP of a route gets one, §5.4).
async fn grant_for(client: &ControlClient, token: &RouteToken) -> anyhow::Result<(Session, Grant)> {
    let (mut session, registered) = client.register_mcp(token).await?;
    let Registered::Mcp { directive, .. } = registered else {
        anyhow::bail!("an MCP registration was answered as a worker's");
    };
    if let Directive::LaunchWorker(grant) = directive {
        return Ok((session, grant));
    }
    loop {
        if let Message::LaunchWorker(grant) = session.recv_within(CONNECT_TIMEOUT).await?.message {
            return Ok((session, grant));
        }
    }
}

/// The refusal code of a registration that must have been refused.
fn refusal<T>(result: Result<T, ConnectError>) -> Option<RefusedCode> {
    match result {
        Ok(_) => None,
        Err(error) => error.refused_code(),
    }
}

/// Waits until relayd has logged `count` refusals with `reason` for `role` (and, when
/// given, the client with `fingerprint`), and checks `/metrics` counted them.
async fn assert_refusals(
    relayd: &Relayd,
    role: &str,
    reason: &str,
    fingerprint: Option<&str>,
    count: usize,
) -> anyhow::Result<()> {
    let matching = |logs: &relay_e2e::Logs| {
        logs.events_named("control_registration_refused")
            .into_iter()
            .filter(|event| field(event, "reason") == reason && field(event, "role") == role)
            .filter(|event| fingerprint.is_none_or(|fp| field(event, "fingerprint") == fp))
            .count()
    };
    relayd
        .logs()
        .wait_for(
            &format!("{count} × control_registration_refused {role} {reason}"),
            EVENT_TIMEOUT,
            |logs| (matching(logs) >= count).then_some(()),
        )
        .await?;
    assert_eq!(matching(relayd.logs()), count, "{reason}");
    let counted = relay_e2e::metrics::sample_sum(
        &metrics(relayd).await?,
        "relay_refused_registrations_total",
        &[("reason", reason)],
    );
    assert!(
        counted >= count as f64,
        "/metrics counted {counted} refusals for {reason}, expected {count}"
    );
    Ok(())
}

async fn relayd_for(stand_in: &StandIn, daemon: &str) -> anyhow::Result<Relayd> {
    Ok(Relayd::builder()?
        .config(worker_config(stand_in, daemon))
        .start()
        .await?)
}

#[tokio::test]
async fn a_worker_started_by_hand_without_a_grant_registers_nothing() -> anyhow::Result<()> {
    let stand_in = StandIn::start().await?;
    let relayd = relayd_for(&stand_in, "").await?;
    let user = user_for(&stand_in)?;
    let not_a_grant = relay_proto::encode(&Message::Ready)?;
    for (stdin, says) in [
        (&b""[..], "no launch grant on stdin"),
        (&b"{\"grant\":1}"[..], "decoding the launch grant"),
        (&not_a_grant[..], "another message than a launch grant"),
    ] {
        let mut worker = tokio::process::Command::new(relay_e2e::binary("relay-worker")?)
            .args(["--daemon-address", &relayd.origin()])
            .env_clear()
            .env("HOME", user.home())
            .env("XDG_CONFIG_HOME", user.xdg_config_home())
            .env("RELAY_SYSTEM_CONFIG_DIR", user.system_config_dir())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        if let Some(mut pipe) = worker.stdin.take() {
            pipe.write_all(stdin).await?;
        }
        let out = tokio::time::timeout(EVENT_TIMEOUT, worker.wait_with_output()).await??;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{says}: {stderr}");
        assert!(stderr.contains(says), "{says}: {stderr}");
    }
    // It never even opened a control session.
    assert_eq!(requests_to(&relayd, "control", "local").await?, 0);
    assert!(
        relayd
            .logs()
            .events_named("worker_control_connected")
            .is_empty()
    );
    assert!(user.worker_pids().is_empty());
    Ok(())
}

#[tokio::test]
async fn a_grant_is_good_for_one_registration_only() -> anyhow::Result<()> {
    let stand_in = StandIn::start().await?;
    let relayd = relayd_for(&stand_in, "").await?;
    let user = User::new()?;
    let client = ControlClient::new(&relayd.origin(), &user.pins_dir())?;
    let (_mcp, grant) = grant_for(&client, &RouteToken::generate()?).await?;
    let endpoint = PinnedEndpoint::start().await?;
    let fields = worker_fields(&grant, endpoint.addr(), endpoint.certificate_sha256());

    // An unknown activation id, and the right one with a wrong token, are unknown grants.
    let mut unknown = fields.clone();
    unknown.activation_id = relay_proto::Id::from(uuid::Uuid::now_v7());
    let mut wrong_token = fields.clone();
    wrong_token.activation_token = relay_proto::Bytes32([0x5a; 32]);
    for forged in [unknown, wrong_token] {
        assert_eq!(
            refusal(client.register_worker(forged).await),
            Some(RefusedCode::GrantUnknown)
        );
    }
    let fingerprint = client.fingerprint_prefix();
    assert_refusals(&relayd, "worker", "grant_unknown", Some(&fingerprint), 2).await?;

    let (_worker, registered) = client.register_worker(fields.clone()).await?;
    assert!(matches!(registered, Registered::Worker { .. }));
    assert_eq!(
        refusal(client.register_worker(fields).await),
        Some(RefusedCode::GrantReplayed),
        "a replayed grant"
    );
    assert_refusals(&relayd, "worker", "grant_replayed", Some(&fingerprint), 1).await?;
    assert_eq!(
        relayd.logs().events_named("worker_control_connected").len(),
        1
    );
    Ok(())
}

#[tokio::test]
async fn fifty_concurrent_registrations_with_one_grant_let_exactly_one_in() -> anyhow::Result<()> {
    const ATTEMPTS: usize = 50;
    let stand_in = StandIn::start().await?;
    let relayd = relayd_for(&stand_in, "").await?;
    let user = User::new()?;
    let client = ControlClient::new(&relayd.origin(), &user.pins_dir())?;
    let (_mcp, grant) = grant_for(&client, &RouteToken::generate()?).await?;
    let endpoint = PinnedEndpoint::start().await?;
    let fields = worker_fields(&grant, endpoint.addr(), endpoint.certificate_sha256());
    let mut attempts = tokio::task::JoinSet::new();
    for _ in 0..ATTEMPTS {
        let (client, fields) = (client.clone(), fields.clone());
        attempts.spawn(async move { client.register_worker(fields).await });
    }
    let mut admitted = Vec::new();
    let mut replayed = 0;
    while let Some(result) = attempts.join_next().await {
        match result? {
            Ok(session) => admitted.push(session),
            Err(error) if error.refused_code() == Some(RefusedCode::GrantReplayed) => replayed += 1,
            Err(error) => panic!("an attempt failed otherwise: {error}"),
        }
    }
    assert_eq!(
        admitted.len(),
        1,
        "exactly one registration consumes the grant"
    );
    assert_eq!(replayed, ATTEMPTS - 1);
    let fingerprint = client.fingerprint_prefix();
    assert_refusals(
        &relayd,
        "worker",
        "grant_replayed",
        Some(&fingerprint),
        ATTEMPTS - 1,
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn a_grant_presented_by_another_machine_identity_is_refused() -> anyhow::Result<()> {
    let stand_in = StandIn::start().await?;
    let relayd = relayd_for(&stand_in, "").await?;
    let user = User::new()?;
    let owner = ControlClient::new(&relayd.origin(), &user.pins_dir())?;
    let thief = ControlClient::new(&relayd.origin(), &user.pins_dir())?;
    let (_mcp, grant) = grant_for(&owner, &RouteToken::generate()?).await?;
    let endpoint = PinnedEndpoint::start().await?;
    let fields = worker_fields(&grant, endpoint.addr(), endpoint.certificate_sha256());
    assert_eq!(
        refusal(thief.register_worker(fields.clone()).await),
        Some(RefusedCode::GrantIdentityMismatch)
    );
    assert_refusals(
        &relayd,
        "worker",
        "grant_identity_mismatch",
        Some(&thief.fingerprint_prefix()),
        1,
    )
    .await?;
    // The refused attempt did not use the grant up: its owner still can.
    let (_worker, registered) = owner.register_worker(fields).await?;
    assert!(matches!(registered, Registered::Worker { .. }));
    Ok(())
}

#[tokio::test]
async fn a_worker_endpoint_other_than_127_0_0_1_is_refused_on_loopback() -> anyhow::Result<()> {
    let stand_in = StandIn::start().await?;
    let relayd = relayd_for(&stand_in, "").await?;
    let user = User::new()?;
    let client = ControlClient::new(&relayd.origin(), &user.pins_dir())?;
    let (_mcp, grant) = grant_for(&client, &RouteToken::generate()?).await?;
    let endpoint = PinnedEndpoint::start().await?;
    let named = [
        "10.0.0.1:443",
        "127.0.0.2:443",
        "0.0.0.0:443",
        "localhost:443",
        "[::1]:443",
        "127.0.0.1:0",
    ];
    for name in named {
        let mut fields = worker_fields(&grant, endpoint.addr(), endpoint.certificate_sha256());
        fields.endpoint = relay_proto::Text::truncated(name);
        assert_eq!(
            refusal(client.register_worker(fields).await),
            Some(RefusedCode::EndpointNotAllowed),
            "{name}"
        );
    }
    assert_refusals(
        &relayd,
        "worker",
        "endpoint_not_allowed",
        Some(&client.fingerprint_prefix()),
        named.len(),
    )
    .await?;
    // The daemon connected to none of them (it never connects where a worker merely
    // names, §5.5), and the grant is still good for a loopback endpoint.
    assert!(endpoint.requests().is_empty());
    let fields = worker_fields(&grant, endpoint.addr(), endpoint.certificate_sha256());
    let (_worker, registered) = client.register_worker(fields).await?;
    assert!(matches!(registered, Registered::Worker { .. }));
    Ok(())
}

#[tokio::test]
async fn registrations_signed_over_another_transcript_are_refused() -> anyhow::Result<()> {
    let stand_in = StandIn::start().await?;
    let relayd = relayd_for(&stand_in, "").await?;
    let other_daemon = relayd_for(&stand_in, "").await?;
    let key = Arc::new(SigningKey::generate()?);
    let fingerprint = key.fingerprint().short();
    let token = RouteToken::generate()?;
    let origin = relayd.origin();
    let addr = relayd.addr();
    let challenge = |answer: Message| match answer {
        Message::Challenge(challenge) => Ok(challenge),
        other => Err(anyhow::anyhow!("expected a Challenge, got {other:?}")),
    };
    let refused = |answer: Message| match answer {
        Message::Refused(refused) => refused.reason(),
        other => panic!("expected Refused, got {other:?}"),
    };

    // A Hello naming an origin this daemon does not serve, or a role its path is not for.
    let (_, answer) =
        RawHandshake::start(addr, Role::Mcp, key.clone(), "http://127.0.0.1:1").await?;
    assert_eq!(refused(answer), Some(RefusedCode::TranscriptMismatch));
    let (_, answer) =
        RawHandshake::start_on(addr, MCP_PATH, Role::Worker, key.clone(), &origin).await?;
    assert_eq!(refused(answer), Some(RefusedCode::TranscriptMismatch));
    assert_refusals(&relayd, "mcp", "transcript_mismatch", Some(&fingerprint), 2).await?;

    // Signatures over the wrong transcript: another origin than the Hello named (one the
    // daemon also serves), another daemon's challenge, and another session's challenge.
    let (mut session, answer) = RawHandshake::start(addr, Role::Mcp, key.clone(), &origin).await?;
    let own = challenge(answer)?;
    let localhost = format!("http://localhost:{}", addr.port());
    let daemon_key = PublicKey::from_bytes(own.daemon_key.0);
    let message = session.register_mcp(&session.transcript(&own, &localhost, daemon_key), &token);
    session.send(&message).await?;
    assert_eq!(
        refused(session.recv().await?),
        Some(RefusedCode::BadSignature)
    );

    let (elsewhere, answer) = RawHandshake::start(
        other_daemon.addr(),
        Role::Mcp,
        key.clone(),
        &other_daemon.origin(),
    )
    .await?;
    let theirs = challenge(answer)?;
    let their_transcript = elsewhere.transcript(
        &theirs,
        &other_daemon.origin(),
        PublicKey::from_bytes(theirs.daemon_key.0),
    );
    let (mut session, answer) = RawHandshake::start(addr, Role::Mcp, key.clone(), &origin).await?;
    challenge(answer)?;
    let message = session.register_mcp(&their_transcript, &token);
    session.send(&message).await?;
    assert_eq!(
        refused(session.recv().await?),
        Some(RefusedCode::BadSignature)
    );

    let (first, answer) = RawHandshake::start(addr, Role::Mcp, key.clone(), &origin).await?;
    let first_challenge = challenge(answer)?;
    let first_transcript = first.transcript(&first_challenge, &origin, daemon_key);
    let (mut second, answer) = RawHandshake::start(addr, Role::Mcp, key.clone(), &origin).await?;
    challenge(answer)?;
    let message = second.register_mcp(&first_transcript, &token);
    second.send(&message).await?;
    assert_eq!(
        refused(second.recv().await?),
        Some(RefusedCode::BadSignature)
    );
    assert_refusals(&relayd, "mcp", "bad_signature", Some(&fingerprint), 3).await?;
    assert!(relayd.logs().events_named("mcp_added").is_empty());

    // The same key over the right transcript is accepted: the refusals were about the
    // signatures, nothing else.
    let (mut session, answer) = RawHandshake::start(addr, Role::Mcp, key.clone(), &origin).await?;
    let good = challenge(answer)?;
    let message = session.register_mcp(&session.transcript(&good, &origin, daemon_key), &token);
    session.send(&message).await?;
    let answer = session.recv().await?;
    assert!(
        matches!(answer, Message::Registered(Registered::Mcp { .. })),
        "{answer:?}"
    );
    relayd
        .wait_for_log_event("mcp_added", EVENT_TIMEOUT)
        .await?;
    Ok(())
}

#[tokio::test]
async fn a_squatter_on_a_workers_port_never_gets_a_secret_or_a_request() -> anyhow::Result<()> {
    let stand_in = StandIn::start().await?;
    let relayd = relayd_for(&stand_in, "activation_wait_ms = 0").await?;
    let user = User::new()?;
    let client = ControlClient::new(&relayd.origin(), &user.pins_dir())?;
    let token = RouteToken::generate()?;
    let token_text = token.encode();
    let (mut mcp, grant) = grant_for(&client, &token).await?;

    // An honest worker: its own certificate, the probe answered behind the secret.
    let honest = PinnedEndpoint::start().await?;
    let fields = worker_fields(&grant, honest.addr(), honest.certificate_sha256());
    let (mut worker, registered) = client.register_worker(fields).await?;
    let Registered::Worker {
        generation_secret, ..
    } = registered
    else {
        anyhow::bail!("a worker registration was answered as an MCP's");
    };
    honest.set_secret(generation_secret.0);
    worker.send(&Message::Ready).await?;
    relayd
        .wait_for_log_event("worker_ready", EVENT_TIMEOUT)
        .await?;
    let hook = || {
        post_json(
            "/hooks/claude-code",
            &[("x-relay-client-token", &token_text)],
            r#"{"hook_event_name":"Stop"}"#,
        )
    };
    let (status, _, _) = fetch(relayd.addr(), hook()?).await?;
    assert_eq!(status, StatusCode::OK);
    let served = honest.requests();
    assert!(
        served
            .iter()
            .any(|r| r.path == "/hooks/claude-code" && r.authorized),
        "the worker served the hook: {served:?}"
    );

    // The worker goes away: its listener closes and, before its control session drops, a
    // squatter with another certificate takes the port.
    let port = honest.stop().await;
    let squatter = Squatter::bind(port).await?;
    drop(worker);
    for event in ["worker_control_lost", "worker_recovery_started"] {
        relayd.wait_for_log_event(event, EVENT_TIMEOUT).await?;
    }
    let removed = relayd
        .wait_for_log_event("worker_removed", EVENT_TIMEOUT)
        .await?;
    assert_eq!(field(&removed, "reason"), "crashed", "{removed}");
    let attempts = squatter
        .wait_for_connections(1, EVENT_TIMEOUT)
        .await
        .ok_or_else(|| anyhow::anyhow!("the daemon never tried the worker's endpoint"))?;
    // The route relaunches: the MCP gets a fresh grant.
    let relaunched = loop {
        if let Message::LaunchWorker(grant) = mcp.recv_within(CONNECT_TIMEOUT).await?.message {
            break grant;
        }
    };
    assert_ne!(relaunched.activation_id, grant.activation_id);
    // Requests pass through meanwhile, never to the squatter.
    let (status, _, body) = fetch(relayd.addr(), hook()?).await?;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(&body[..], br#"{"continue":true}"#);
    assert!(!pass_throughs(&relayd).is_empty());
    let seen = squatter.connections();
    assert!(seen.len() >= attempts.len());
    for connection in &seen {
        assert!(
            !connection.handshake_completed && connection.received.is_empty(),
            "the squatter completed a handshake or read bytes: {seen:?}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn an_mcp_that_sees_another_key_for_a_pinned_origin_registers_nothing() -> anyhow::Result<()>
{
    let stand_in = StandIn::start().await?;
    let relayd = relayd_for(&stand_in, "").await?;
    let user = user_for(&stand_in)?;
    let origin = DaemonAddress::parse(&relayd.origin())
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .origin()
        .clone();
    // A pin for this origin with another key, in the format of §4.3.
    let pins = PinStore::new(user.pins_dir(), None);
    let pin_file = pins.pin_file(&origin);
    let pin = relay_identity::format_pin(&origin, &SigningKey::generate()?.public_key());
    for dir in [
        user.xdg_config_home().join("relay"),
        user.state_dir(),
        user.pins_dir(),
    ] {
        std::fs::create_dir_all(&dir)?;
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
    }
    user.write_file(&pin_file, &pin, 0o600)?;

    let token = fresh_token()?;
    let mut mcp = user
        .mcp(&relayd.origin())?
        .token(&token)
        .log("info", "jsonl")
        .spawn()?;
    let answer = mcp.initialize("2025-11-25", INITIALIZE_TIMEOUT).await?;
    assert_eq!(
        answer["result"]["protocolVersion"], "2025-11-25",
        "{answer}"
    );
    let mismatch = mcp
        .logs()
        .wait_for_event("daemon_pin_mismatch", EVENT_TIMEOUT)
        .await?;
    assert_eq!(field(&mismatch, "origin"), origin.to_string(), "{mismatch}");
    assert_eq!(
        field(&mismatch, "pin_file"),
        pin_file.display().to_string(),
        "{mismatch}"
    );
    // It still serves MCP.
    mcp.send(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)
        .await?;
    let tools = mcp.next_json(EVENT_TIMEOUT).await?;
    assert_eq!(tools["result"]["tools"], serde_json::json!([]), "{tools}");
    // Nothing was registered, nothing launched, and the pin is as it was.
    let route = route_status(&relayd, &token).await?;
    assert_eq!(route["reason"], "unbound_credential", "{route}");
    assert!(relayd.logs().events_named("mcp_added").is_empty());
    assert!(relayd.logs().events_named("worker_staged").is_empty());
    assert!(user.worker_pids().is_empty());
    assert_eq!(std::fs::read_to_string(&pin_file)?, pin);
    Ok(())
}

/// The resident set size of a process, from `/proc/<pid>/status`, in bytes.
fn rss_bytes(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .ok_or_else(|| anyhow::anyhow!("no VmRSS line in /proc/{pid}/status"))?;
    Ok(kib * 1024)
}

/// The attack of the hardening review: 200 connections, none with a credential, each
/// sending all but the last byte of a 1 MiB hook body and holding it. relayd once held every
/// one of them (10 MB → 228 MB); now it decides the credential from the head and buffers
/// hook bodies only within a daemon-wide budget, so its memory stays bounded.
#[tokio::test]
async fn two_hundred_held_hook_bodies_without_a_credential_stay_within_48_mib() -> anyhow::Result<()>
{
    const CONNECTIONS: usize = 200;
    const BODY: usize = 1024 * 1024 - 1;
    let relayd = Relayd::builder()?.start().await?;
    let pid = relayd.pid()?;
    let before = rss_bytes(pid)?;
    let prefix = "{\"hook_event_name\":\"SessionStart\",\"pad\":\"";
    let head = format!(
        "POST /hooks/claude-code HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{prefix}",
        relayd.addr(),
        BODY + 1
    );
    let filler = Arc::new(vec![b'a'; BODY - prefix.len()]);
    let head = Arc::new(head);
    let (sent, mut sent_rx) = tokio::sync::mpsc::channel::<()>(CONNECTIONS);
    let (release, _) = tokio::sync::broadcast::channel::<()>(1);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..CONNECTIONS {
        let (addr, head, filler, sent) =
            (relayd.addr(), head.clone(), filler.clone(), sent.clone());
        let mut released = release.subscribe();
        tasks.spawn(async move {
            if let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await {
                // The daemon may answer at once (401, or 503 over its budget) and close: the
                // rest of the body then goes nowhere, which is the point.
                if stream.write_all(head.as_bytes()).await.is_ok() {
                    let _ = stream.write_all(&filler).await;
                }
                let _ = sent.send(()).await;
                let _ = released.recv().await;
                drop(stream);
            } else {
                let _ = sent.send(()).await;
            }
        });
    }
    drop(sent);
    // Sample relayd's memory until every connection has sent what it could, while all of
    // them are still held open.
    let mut peak = before;
    let mut done = 0;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    while done < CONNECTIONS {
        peak = peak.max(rss_bytes(pid)?);
        match tokio::time::timeout_at(deadline, sent_rx.recv()).await {
            Ok(Some(())) => done += 1,
            Ok(None) => break,
            Err(_) => {
                anyhow::bail!("only {done} of {CONNECTIONS} connections sent their bodies in 60 s")
            }
        }
    }
    peak = peak.max(rss_bytes(pid)?);
    let _ = release.send(());
    while tasks.join_next().await.is_some() {}
    let growth = peak.saturating_sub(before);
    assert!(
        growth < 48 * 1024 * 1024,
        "relayd grew by {} MiB holding {CONNECTIONS} unauthenticated hook bodies",
        growth / (1024 * 1024)
    );
    Ok(())
}

/// What an HTTP/2 client sends first: the preface, then empty SETTINGS.
fn h2_preface() -> Vec<u8> {
    let mut preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    preface.extend(h2_frame(4, 0, 0, &[]));
    preface
}

/// One HTTP/2 frame on `stream`: the 9-byte header, then `payload`.
fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len())
        .unwrap_or(u32::MAX)
        .to_be_bytes();
    let mut frame = vec![len[1], len[2], len[3], kind, flags];
    frame.extend_from_slice(&stream.to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

/// What a peer's bytes make the TLS and HTTP/2 libraries say (a record out of place, a
/// ping nobody sent) comes once per connection or per frame: were it logged, any peer
/// could write relayd's log at the rate it sends, fill the disk, or drown the lifecycle
/// events in what journald's rate limit lets through. relayd serving HTTPS, as it does for
/// remote clients, takes 50 such handshakes and 500 such pings at its default level and
/// logs a line for none of them.
#[tokio::test]
async fn a_peer_cannot_make_relayd_log_a_line_per_handshake_or_frame() -> anyhow::Result<()> {
    use tokio::io::AsyncReadExt as _;

    const HANDSHAKES: usize = 50;
    const PINGS: usize = 500;
    let (mut relayd, ca) = relayd_serving_https().await?;

    // Application data where a ClientHello belongs: rustls warns of each.
    for _ in 0..HANDSHAKES {
        let mut stream = tokio::net::TcpStream::connect(relayd.addr()).await?;
        stream
            .write_all(&[0x17, 0x03, 0x03, 0x00, 0x01, 0x00])
            .await?;
        let mut answer = Vec::new();
        tokio::time::timeout(EVENT_TIMEOUT, stream.read_to_end(&mut answer)).await??;
    }

    // Over HTTP/2, acknowledgements of pings relayd never sent: h2 warns of each. A ping of
    // the test's own follows them; once relayd acknowledges it, it has read every one.
    let mut config = trusting(&ca)?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    let mut tls = tls_connect(&relayd, config).await?;
    let mut frames = h2_preface();
    for _ in 0..PINGS {
        frames.extend(h2_frame(6, 1, 0, &[1; 8]));
    }
    frames.extend(h2_frame(6, 0, 0, b"answered"));
    tls.write_all(&frames).await?;
    let answered = async {
        let mut header = [0_u8; 9];
        loop {
            tls.read_exact(&mut header).await?;
            let len = u32::from_be_bytes([0, header[0], header[1], header[2]]) as usize;
            let mut payload = vec![0_u8; len];
            tls.read_exact(&mut payload).await?;
            if header[3] == 6 && header[4] & 1 == 1 && payload == b"answered" {
                return anyhow::Ok(());
            }
        }
    };
    tokio::time::timeout(EVENT_TIMEOUT, answered).await??;
    drop(tls);

    // Stopped, relayd has written all it will.
    relayd.stop().await?;
    relayd
        .wait_for_log_event("daemon_stopped", EVENT_TIMEOUT)
        .await?;
    let from_libraries: Vec<_> = relayd
        .logs()
        .events()
        .into_iter()
        .filter(|event| {
            let target = event["target"].as_str().unwrap_or_default();
            target.starts_with("rustls") || target.starts_with("h2")
        })
        .collect();
    assert!(
        from_libraries.is_empty(),
        "{} lines from the TLS and HTTP/2 libraries, the first {:?}",
        from_libraries.len(),
        from_libraries.first()
    );
    // relayd's own line for the failed handshakes comes once, for the first of them.
    let failed = relayd.logs().events_named("tls_handshake_failed");
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(field(&failed[0], "reason"), "malformed", "{failed:?}");
    assert_eq!(failed[0]["suppressed_since_last_emit"], 0, "{failed:?}");
    Ok(())
}

/// A client whose TLS handshake fails says nothing relayd would log otherwise: rustls's
/// own warnings are held back, and a client that refuses the certificate only sends an
/// alert. relayd says it once, with its cause, so the operator of a daemon serving HTTPS
/// learns that clients cannot reach it and why; a connection that closes without a byte
/// (a TCP health check, a port scan) is no failure.
#[tokio::test]
async fn a_failed_tls_handshake_is_said_with_its_cause() -> anyhow::Result<()> {
    use tokio::io::AsyncReadExt as _;

    // Plain HTTP sent to the HTTPS address: answered 400 in plain HTTP, as nginx does.
    let (relayd, _ca) = relayd_serving_https().await?;
    let mut tcp = tokio::net::TcpStream::connect(relayd.addr()).await?;
    tcp.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await?;
    let mut answer = Vec::new();
    tokio::time::timeout(EVENT_TIMEOUT, tcp.read_to_end(&mut answer)).await??;
    drop(tcp);
    // Answered in plain HTTP, so the client reads why.
    let answer = String::from_utf8(answer)?;
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    assert!(answer.contains("relay_bad_request"), "{answer}");
    assert!(answer.contains("https://"), "{answer}");
    let said = relayd
        .wait_for_log_event("tls_handshake_failed", EVENT_TIMEOUT)
        .await?;
    assert_eq!(field(&said, "reason"), "not_tls", "{said}");
    assert_eq!(field(&said, "peer"), "127.0.0.1", "{said}");
    assert!(field(&said, "message").contains("http://"), "{said}");

    // A client that writes a whole 4 MiB body before it reads still reads the answer: the
    // close lingers as after any early answer.
    let mut tcp = tokio::net::TcpStream::connect(relayd.addr()).await?;
    let body = vec![b'x'; 4 << 20];
    let head = format!(
        "POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    tcp.write_all(head.as_bytes()).await?;
    tokio::time::timeout(EVENT_TIMEOUT, tcp.write_all(&body)).await??;
    let mut answer = Vec::new();
    tokio::time::timeout(EVENT_TIMEOUT, tcp.read_to_end(&mut answer)).await??;
    drop(tcp);
    let answer = String::from_utf8(answer)?;
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");

    // A head that never ends is held no longer than the front holds one (64 KiB), not up to
    // hyper's own default of hundreds of KiB until the handshake's deadline.
    let mut tcp = tokio::net::TcpStream::connect(relayd.addr()).await?;
    tcp.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Long: ")
        .await?;
    let _ = tcp.write_all(&vec![b'a'; 100 << 10]).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(EVENT_TIMEOUT, tcp.read_to_end(&mut answer)).await?;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 431 "), "{answer}");
    drop(tcp);

    // A client that does not trust the certificate's issuer.
    let (mut relayd, _ca) = relayd_serving_https().await?;
    for _ in 0..3 {
        drop(tokio::net::TcpStream::connect(relayd.addr()).await?);
    }
    let stranger = new_ca("another CA")?;
    let stranger = rustls::pki_types::CertificateDer::from(stranger.der().to_vec());
    let refused = tls_connect(&relayd, trusting(&stranger)?).await;
    assert!(
        refused.is_err(),
        "a client trusting another CA completed its handshake"
    );
    let said = relayd
        .wait_for_log_event("tls_handshake_failed", EVENT_TIMEOUT)
        .await?;
    assert_eq!(
        field(&said, "reason"),
        "client_refused_certificate",
        "{said}"
    );
    // The connections closed without a byte were not counted as failures.
    assert_eq!(said["suppressed_since_last_emit"], 0, "{said}");
    for _ in 0..3 {
        let refused = tls_connect(&relayd, trusting(&stranger)?).await;
        assert!(refused.is_err());
    }
    relayd.stop().await?;
    relayd
        .wait_for_log_event("daemon_stopped", EVENT_TIMEOUT)
        .await?;
    let lines = relayd.logs().events_named("tls_handshake_failed");
    assert_eq!(lines.len(), 1, "{lines:?}");
    Ok(())
}

/// A relayd serving HTTPS on 127.0.0.1 with a certificate from a CA made for the test, and
/// that CA's certificate.
async fn relayd_serving_https()
-> anyhow::Result<(Relayd, rustls::pki_types::CertificateDer<'static>)> {
    let builder = Relayd::builder()?;
    let ca = new_ca("relayd's CA")?;
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])?.signed_by(&key, &ca)?;
    let cert_path = builder.write_private_file("relayd.pem", &cert.pem())?;
    let key_path = builder.write_private_file("relayd-key.pem", &key.serialize_pem())?;
    let relayd = builder
        .args(["--advertise-address", "https://127.0.0.1:443", "--tls-cert"])
        .arg(&cert_path)
        .arg("--tls-key")
        .arg(&key_path)
        .start()
        .await?;
    Ok((
        relayd,
        rustls::pki_types::CertificateDer::from(ca.der().to_vec()),
    ))
}

/// A TLS connection to `relayd` as 127.0.0.1.
async fn tls_connect(
    relayd: &Relayd,
    config: rustls::ClientConfig,
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let tcp = tokio::net::TcpStream::connect(relayd.addr()).await?;
    let server = rustls::pki_types::ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into());
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(server, tcp)
        .await
}

/// The rapid-reset attack (streams opened and reset at once, faster than they can be
/// served): h2 closes the connection with GOAWAY `ENHANCE_YOUR_CALM`, relayd keeps serving,
/// and says so in a line of its own, at most once every ten seconds, since h2's warning of
/// each such connection is held back at a service's levels.
#[tokio::test]
async fn a_rapid_reset_attack_is_cut_off_and_said_once() -> anyhow::Result<()> {
    use tokio::io::AsyncReadExt as _;

    const CONNECTIONS: usize = 3;
    const RESETS: u32 = 60;
    let relayd = Relayd::builder()?.start().await?;
    let authority = relayd.addr().to_string();
    for _ in 0..CONNECTIONS {
        let mut tcp = tokio::net::TcpStream::connect(relayd.addr()).await?;
        let mut frames = h2_preface();
        // GET / with :authority, from HPACK's static table and one literal.
        let mut head = vec![0x82, 0x86, 0x84, 0x01, u8::try_from(authority.len())?];
        head.extend_from_slice(authority.as_bytes());
        for stream in (1..RESETS * 2).step_by(2) {
            frames.extend(h2_frame(1, 0x5, stream, &head));
            frames.extend(h2_frame(3, 0, stream, &8_u32.to_be_bytes()));
        }
        // relayd may close before it has read everything; what matters is that it closes.
        let _ = tcp.write_all(&frames).await;
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(EVENT_TIMEOUT, tcp.read_to_end(&mut answer)).await?;
        // A GOAWAY (type 7) with ENHANCE_YOUR_CALM (0xb) is among what relayd sent.
        let mut at = 0;
        let mut calm = false;
        while at + 9 <= answer.len() {
            let len = u32::from_be_bytes([0, answer[at], answer[at + 1], answer[at + 2]]) as usize;
            if answer[at + 3] == 7 && answer.len() >= at + 9 + 8 {
                calm |= answer[at + 13..at + 17] == 0xb_u32.to_be_bytes();
            }
            at += 9 + len;
        }
        assert!(calm, "no GOAWAY ENHANCE_YOUR_CALM in {answer:?}");
    }
    assert_healthy(&relayd).await?;

    let said = relayd
        .wait_for_log_event("http2_connection_closed", EVENT_TIMEOUT)
        .await?;
    assert_eq!(field(&said, "reason"), "too_many_resets", "{said}");
    assert_eq!(said["suppressed_since_last_emit"], 0, "{said}");
    let lines = relayd.logs().events_named("http2_connection_closed").len();
    assert_eq!(lines, 1, "{}", relayd.logs().text());

    // A client that itself sends GOAWAY with ENHANCE_YOUR_CALM is not taken for an attack.
    let mut relayd = Relayd::builder()?.start().await?;
    let mut tcp = tokio::net::TcpStream::connect(relayd.addr()).await?;
    let mut frames = h2_preface();
    frames.extend(h2_frame(7, 0, 0, &[0, 0, 0, 0, 0, 0, 0, 0xb]));
    tcp.write_all(&frames).await?;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(EVENT_TIMEOUT, tcp.read_to_end(&mut answer)).await?;
    relayd.stop().await?;
    relayd
        .wait_for_log_event("daemon_stopped", EVENT_TIMEOUT)
        .await?;
    let lines = relayd.logs().events_named("http2_connection_closed");
    assert!(lines.is_empty(), "{lines:?}");
    Ok(())
}
