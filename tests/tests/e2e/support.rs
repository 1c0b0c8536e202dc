//! What several test modules share: timeouts, the config that points relayd at a stand-in,
//! fresh secrets, a CA for the tests that serve HTTPS, and the status, route and metrics
//! reads of the worker tests.

use std::time::Duration;

use http::{Method, StatusCode};
use relay_e2e::http::{fetch, post_json, request};
use relay_e2e::{Mcp, Relayd, RelaydBuilder, User};
use relay_identity::RouteToken;
use relay_testkit::StandIn;

/// The hook events wired for Claude Code and Codex, in the order a tool round trip fires
/// them.
pub(crate) const HOOK_EVENTS: [&str; 5] = [
    "SessionStart",
    "UserPromptSubmit",
    "PreToolUse",
    "PostToolUse",
    "Stop",
];

/// For a log line or a recorded request that should appear almost at once.
pub(crate) const EVENT_TIMEOUT: Duration = Duration::from_secs(10);
/// For a relayd command that should exit at once (help, usage errors, subcommands).
pub(crate) const CLI_TIMEOUT: Duration = Duration::from_secs(20);

/// The `[upstream]` table that sends both provider families to `stand_in`, plus `extra`
/// lines appended to it.
pub(crate) fn upstream_config(stand_in: &StandIn, extra: &str) -> String {
    families_config(stand_in, stand_in, extra)
}

/// The `[upstream]` table that sends each provider family to a stand-in of its own, plus
/// `extra` lines appended to it.
pub(crate) fn families_config(anthropic: &StandIn, openai: &StandIn, extra: &str) -> String {
    format!(
        "[upstream]\nanthropic_base_url = \"{}\"\nopenai_base_url = \"{}/v1\"\n{extra}",
        anthropic.base_url(),
        openai.base_url()
    )
}

/// A fresh route token in its wire form (43 characters of base64url).
pub(crate) fn fresh_token() -> anyhow::Result<String> {
    Ok(RouteToken::generate()?.encode())
}

/// A fresh string that appears nowhere unless a test put it there.
pub(crate) fn marker(label: &str) -> anyhow::Result<String> {
    let bytes = relay_identity::random_id_bytes()?;
    let hex: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
    Ok(format!("relay-e2e-{label}-{hex}"))
}

/// The JSON event's string field, or "" (for assertions with readable failures).
pub(crate) fn field<'a>(event: &'a serde_json::Value, name: &str) -> &'a str {
    event[name].as_str().unwrap_or_default()
}

/// Whether SPEC §3.2 has relayd forward a request header unchanged: everything but the
/// hop-by-hop headers, `host`, Relay's own `x-relay-*`, and the framing headers (outgoing
/// framing comes from the body, §3.6).
pub(crate) fn passes_unchanged(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    !(matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | "host"
            | "content-length"
    ) || name.starts_with("proxy-")
        || name.starts_with("x-relay-"))
}

/// `GET /healthz` answers 200 `ok` from the daemon that was started (same instance id).
pub(crate) async fn assert_healthy(relayd: &Relayd) -> anyhow::Result<()> {
    let (status, headers, body) = fetch(
        relayd.addr(),
        request(Method::GET, "/healthz", &[], bytes::Bytes::new())?,
    )
    .await?;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        headers.get("cache-control").map(|v| v.as_bytes()),
        Some(&b"no-store"[..])
    );
    let health: serde_json::Value = serde_json::from_slice(&body)?;
    assert_eq!(health["service"], "relayd");
    assert_eq!(health["status"], "ok");
    assert_eq!(
        health["instance_id"],
        relayd.listening_event()["instance_id"],
        "the daemon that answered is the one that was started"
    );
    Ok(())
}

/// For `initialize`, which relay-mcp may hold up to 5 s while its route settles (§6).
pub(crate) const INITIALIZE_TIMEOUT: Duration = Duration::from_secs(10);
/// For a worker to start, register and pass its readiness probe.
pub(crate) const WORKER_TIMEOUT: Duration = Duration::from_secs(20);
/// For relay-mcp to exit after a signal or the end of stdin (§5.5 says 2 s; the margin is
/// for a loaded machine).
pub(crate) const MCP_EXIT_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a test re-reads a status endpoint it polls.
pub(crate) const STATUS_POLL: Duration = Duration::from_millis(20);

/// relayd's config for worker tests: `[upstream]` at the stand-in and short timers
/// (§5.4: every timer is configurable so tests can shorten it), plus `extra` lines, which
/// may add `[daemon]` keys but no second `[daemon.timers]` table.
pub(crate) fn worker_config(stand_in: &StandIn, daemon: &str) -> String {
    upstream_config(stand_in, &format!("\n[daemon]\n{daemon}\n{WORKER_TIMERS}"))
}

/// The short `[daemon.timers]` of the worker tests.
pub(crate) const WORKER_TIMERS: &str =
    "[daemon.timers]\ndrain_secs = 1\nreconnect_grace_secs = 2\nretry_base_ms = 200\n";

/// A machine-user whose workers send both provider families to `stand_in` (the worker
/// reads `[upstream]` only from config files, §8).
pub(crate) fn user_for(stand_in: &StandIn) -> anyhow::Result<User> {
    let user = User::new()?;
    user.write_system_config(&upstream_config(stand_in, ""))?;
    Ok(user)
}

/// `GET path` with `headers`; the status and the JSON body.
pub(crate) async fn get_json(
    relayd: &Relayd,
    path: &str,
    headers: &[(&str, &str)],
) -> anyhow::Result<(StatusCode, serde_json::Value)> {
    let (status, _, body) = fetch(
        relayd.addr(),
        request(Method::GET, path, headers, bytes::Bytes::new())?,
    )
    .await?;
    let value = serde_json::from_slice(&body)
        .map_err(|_| anyhow::anyhow!("{path} answered {status} with {body:?}"))?;
    Ok((status, value))
}

/// `GET /_relay/v1/workers/status`'s list.
pub(crate) async fn workers_status(relayd: &Relayd) -> anyhow::Result<Vec<serde_json::Value>> {
    let (status, body) = get_json(relayd, "/_relay/v1/workers/status", &[]).await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    Ok(body["workers"].as_array().cloned().unwrap_or_default())
}

/// `GET /_relay/v1/route` for `token`.
pub(crate) async fn route_status(
    relayd: &Relayd,
    token: &str,
) -> anyhow::Result<serde_json::Value> {
    let (status, body) = get_json(
        relayd,
        "/_relay/v1/route",
        &[("x-relay-client-token", token)],
    )
    .await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    Ok(body)
}

/// Polls `/_relay/v1/route` for `token` until its `state` is `state`.
pub(crate) async fn wait_for_route_state(
    relayd: &Relayd,
    token: &str,
    state: &str,
    timeout: Duration,
) -> anyhow::Result<serde_json::Value> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut poll = tokio::time::interval(STATUS_POLL);
    loop {
        poll.tick().await;
        let route = route_status(relayd, token).await?;
        if route["state"] == state {
            return Ok(route);
        }
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!("the route did not reach {state:?} within {timeout:?}: {route}");
        }
    }
}

/// relayd's `/metrics` text.
pub(crate) async fn metrics(relayd: &Relayd) -> anyhow::Result<String> {
    let (status, _, body) = fetch(
        relayd.addr(),
        request(Method::GET, "/metrics", &[], bytes::Bytes::new())?,
    )
    .await?;
    assert_eq!(status, StatusCode::OK);
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// How many requests of `route` relayd counted toward `destination` (any status).
pub(crate) async fn requests_to(
    relayd: &Relayd,
    route: &str,
    destination: &str,
) -> anyhow::Result<u64> {
    let text = metrics(relayd).await?;
    let sum = relay_e2e::metrics::sample_sum(
        &text,
        "relay_requests_total",
        &[("route", route), ("destination", destination)],
    );
    Ok(sum as u64)
}

/// A non-streaming Anthropic Messages request with the route credential `token` whose
/// body carries `marker`.
pub(crate) fn anthropic_request(
    token: &str,
    marker: &str,
) -> anyhow::Result<http::Request<http_body_util::Full<bytes::Bytes>>> {
    Ok(post_json(
        "/v1/messages",
        &[
            ("x-relay-client-token", token),
            ("x-api-key", "sk-ant-test"),
            ("anthropic-version", "2023-06-01"),
        ],
        format!(
            r#"{{"model":"m","max_tokens":16,"messages":[{{"role":"user","content":"{marker}"}}]}}"#
        ),
    )?)
}

/// The stand-in request id of an answer.
pub(crate) fn stand_in_id(headers: &http::HeaderMap) -> anyhow::Result<u64> {
    Ok(headers
        .get(relay_testkit::REQUEST_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| anyhow::anyhow!("the answer did not come from the stand-in: {headers:?}"))?
        .parse()?)
}

/// The stand-in's recorded requests whose body contains `marker`.
pub(crate) fn recorded_with(stand_in: &StandIn, marker: &str) -> Vec<relay_testkit::Recorded> {
    stand_in
        .requests()
        .into_iter()
        .filter(|r| contains(&r.body, marker.as_bytes()))
        .collect()
}

/// Whether `needle` occurs in `haystack`.
pub(crate) fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty()
        && haystack
            .windows(needle.len())
            .any(|window| window == needle)
}

/// The `public_request_pass_through` events relayd logged so far.
pub(crate) fn pass_throughs(relayd: &Relayd) -> Vec<serde_json::Value> {
    relayd.logs().events_named("public_request_pass_through")
}

/// Everything a failed worker test needs to show.
pub(crate) fn context(relayd: &Relayd, user: &User, mcps: &[&Mcp]) -> String {
    let mut out = format!("--- relayd ---\n{}", relayd.logs().text());
    for (i, mcp) in mcps.iter().enumerate() {
        out.push_str(&format!("\n--- relay-mcp {i} ---\n{}", mcp.logs().text()));
    }
    out.push('\n');
    out.push_str(&user.worker_log_text());
    out
}

/// The secrets of a worker-backed run: the route tokens, the user's machine key, the
/// daemon's key, and every secret the control sessions forwarded by `tap` carried (route
/// credentials, resume tokens, activation tokens, generation secrets). Returns them with
/// the kinds of control secrets found, so a test can check the capture worked.
pub(crate) fn run_secrets(
    relayd: &Relayd,
    user: &User,
    tokens: &[&str],
    tap: Option<&relay_e2e::Tap>,
) -> anyhow::Result<(relay_e2e::Secrets, Vec<&'static str>)> {
    let mut secrets = relay_e2e::Secrets::new();
    for token in tokens {
        secrets.add_text("route token", token);
        secrets.add_bytes("route token", RouteToken::parse(token)?.expose_bytes());
    }
    secrets.add_key_file("machine key", &user.machine_key_file())?;
    secrets.add_key_file("daemon key", &relayd.daemon_key_file())?;
    let mut kinds = Vec::new();
    if let Some(tap) = tap {
        for session in relay_e2e::ws::control_sessions(&tap.exchanges()) {
            for message in session.from_client.iter().chain(&session.from_daemon) {
                for (kind, secret) in relay_e2e::ws::secrets(message) {
                    secrets.add_bytes(kind, &secret);
                    if !kinds.contains(&kind) {
                        kinds.push(kind);
                    }
                }
            }
        }
    }
    Ok((secrets, kinds))
}

/// Fails, naming every secret and the log it was found in, if any of `logs` holds one.
pub(crate) fn assert_no_leaks(secrets: &relay_e2e::Secrets, logs: &[(String, Vec<u8>)]) {
    assert!(!secrets.is_empty());
    let leaks: Vec<String> = logs
        .iter()
        .flat_map(|(name, bytes)| secrets.find_in(name, bytes))
        .map(|leak| leak.to_string())
        .collect();
    assert!(
        leaks.is_empty(),
        "secrets reached the logs:\n{}",
        leaks.join("\n")
    );
}

/// relayd's stderr, each MCP's stderr and every worker log of `user`, named.
pub(crate) fn all_logs(relayd: &Relayd, user: &User, mcps: &[&Mcp]) -> Vec<(String, Vec<u8>)> {
    let mut logs = vec![("relayd stderr".to_owned(), relayd.logs().raw())];
    for (i, mcp) in mcps.iter().enumerate() {
        logs.push((format!("relay-mcp {i} stderr"), mcp.logs().raw()));
    }
    for (path, bytes) in user.worker_logs() {
        logs.push((path.display().to_string(), bytes));
    }
    logs
}

// ----- fault tests (SPEC §5.4 under failure) -------------------------------------------------

/// relayd's config for fault tests: `[upstream]` at the stand-in, `daemon` lines under
/// `[daemon]` and `timers` lines under `[daemon.timers]`, each test choosing the timers it
/// measures and shortening the others.
pub(crate) fn fault_config(stand_in: &StandIn, daemon: &str, timers: &str) -> String {
    upstream_config(
        stand_in,
        &format!("\n[daemon]\n{daemon}\n[daemon.timers]\n{timers}\n"),
    )
}

/// Starts relay-mcp for `user` with `token` (through `program` when given), logging at
/// `info` in jsonl so its lifecycle events can be read; `initialize` is not sent yet.
pub(crate) fn spawn_mcp(
    user: &User,
    origin: &str,
    token: &str,
    program: Option<std::path::PathBuf>,
) -> anyhow::Result<Mcp> {
    let mut builder = user.mcp(origin)?.token(token).log("info", "jsonl");
    if let Some(program) = program {
        builder = builder.program(program);
    }
    Ok(builder.spawn()?)
}

/// Starts relay-mcp for `user` with `token` and waits until it answered `initialize` and
/// logged `daemon_mcp_ready route_mode="worker"`.
pub(crate) async fn ready_mcp(user: &User, origin: &str, token: &str) -> anyhow::Result<Mcp> {
    let mut mcp = spawn_mcp(user, origin, token, None)?;
    let answer = mcp.initialize("2025-11-25", INITIALIZE_TIMEOUT).await?;
    assert_eq!(
        answer["result"]["protocolVersion"], "2025-11-25",
        "{answer}"
    );
    let ready = mcp
        .logs()
        .wait_for_event("daemon_mcp_ready", WORKER_TIMEOUT)
        .await?;
    assert_eq!(field(&ready, "route_mode"), "worker", "{ready}");
    Ok(mcp)
}

/// The worker id and pid of the `n`-th (from 1) worker relayd added, once it runs.
pub(crate) async fn nth_worker(
    relayd: &Relayd,
    user: &User,
    n: usize,
) -> anyhow::Result<(String, u32)> {
    let added = nth_event(relayd.logs(), "worker_added", n, WORKER_TIMEOUT).await?;
    let id = field(&added, "worker_id").to_owned();
    let pids = user.wait_for_workers(1, WORKER_TIMEOUT).await?;
    Ok((id, pids[0]))
}

/// Starts `relayd`, then a relay-mcp of `user` with a fresh token, and waits for its worker:
/// the daemon, the token, the session (alive while it is held) and the worker's pid.
pub(crate) async fn with_a_ready_worker(
    relayd: RelaydBuilder,
    user: &User,
) -> anyhow::Result<(Relayd, String, Mcp, u32)> {
    let relayd = relayd.start().await?;
    let token = fresh_token()?;
    let mcp = ready_mcp(user, &relayd.origin(), &token).await?;
    let (_, pid) = nth_worker(&relayd, user, 1).await?;
    Ok((relayd, token, mcp, pid))
}

/// Sends `tools/list` with `id` and checks the answer is the empty tool list (§6): the
/// MCP session still works whatever happened to its route.
pub(crate) async fn assert_serves_mcp(mcp: &mut Mcp, id: u64) -> anyhow::Result<()> {
    mcp.send(&format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/list"}}"#
    ))
    .await?;
    let answer = mcp.next_json(EVENT_TIMEOUT).await?;
    assert_eq!(answer["id"], id, "{answer}");
    assert_eq!(
        answer["result"],
        serde_json::json!({"tools": []}),
        "{answer}"
    );
    Ok(())
}

/// The `n`-th (from 1) `event` logged by `logs`, waiting for it.
pub(crate) async fn nth_event(
    logs: &relay_e2e::Logs,
    event: &str,
    n: usize,
    timeout: Duration,
) -> anyhow::Result<serde_json::Value> {
    let events = logs.wait_for_events(event, n, timeout).await?;
    Ok(events[n - 1].clone())
}

/// The first `event` logged by `logs` whose `key` field is `value`, waiting for it.
pub(crate) async fn event_with(
    logs: &relay_e2e::Logs,
    event: &str,
    key: &str,
    value: &str,
    timeout: Duration,
) -> anyhow::Result<serde_json::Value> {
    Ok(logs
        .wait_for(&format!("{event} {key}={value}"), timeout, |logs| {
            logs.events_named(event)
                .into_iter()
                .find(|e| field(e, key) == value)
        })
        .await?)
}

/// The time between two logged events, from their own timestamps.
pub(crate) fn between(earlier: &serde_json::Value, later: &serde_json::Value) -> Duration {
    match (relay_e2e::event_time(earlier), relay_e2e::event_time(later)) {
        (Some(a), Some(b)) => b.duration_since(a).unwrap_or(Duration::ZERO),
        _ => panic!("events without a timestamp: {earlier} {later}"),
    }
}

/// A streaming Anthropic Messages request with the route credential `token` whose body
/// carries `marker`.
pub(crate) fn streaming_request(
    token: &str,
    marker: &str,
) -> anyhow::Result<http::Request<http_body_util::Full<bytes::Bytes>>> {
    Ok(post_json(
        "/v1/messages",
        &[
            ("x-relay-client-token", token),
            ("x-api-key", "sk-ant-test"),
            ("anthropic-version", "2023-06-01"),
        ],
        format!(
            r#"{{"model":"m","max_tokens":16,"stream":true,"messages":[{{"role":"user","content":"{marker}"}}]}}"#
        ),
    )?)
}

/// Stand-in behaviour whose streams trickle: `chunk` bytes every `pace`.
pub(crate) fn paced(chunk: usize, pace: Duration) -> relay_testkit::Behaviour {
    relay_testkit::Behaviour {
        chunk_size: Some(chunk),
        pace: Some(pace),
        ..relay_testkit::Behaviour::default()
    }
}

/// Sends `req` and checks it reached the stand-in through the worker `worker`: the
/// stand-in's TCP peer is a socket of that process, not of relayd.
pub(crate) async fn assert_through_worker(
    relayd: &Relayd,
    stand_in: &StandIn,
    worker: u32,
    req: http::Request<http_body_util::Full<bytes::Bytes>>,
) -> anyhow::Result<relay_testkit::Recorded> {
    let (status, headers, body) = fetch(relayd.addr(), req).await?;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let id = stand_in_id(&headers)?;
    let recorded = stand_in
        .request(id)
        .ok_or_else(|| anyhow::anyhow!("the stand-in has no request {id}"))?;
    assert!(
        relay_e2e::procfs::owns_connection(worker, recorded.peer, stand_in.addr()),
        "the stand-in's peer {} is not a socket of the worker (pid {worker})",
        recorded.peer
    );
    assert!(
        !relay_e2e::procfs::owns_connection(relayd.pid()?, recorded.peer, stand_in.addr()),
        "relayd itself held the provider connection"
    );
    for name in ["x-relay-client-token", "x-relay-worker-secret"] {
        assert_eq!(recorded.header(name), None, "{name} reached the provider");
    }
    Ok(recorded)
}

/// Sends `req` and checks relayd passed it through itself (its own socket is the stand-in's
/// peer) and logged `public_request_pass_through` with `reason`.
pub(crate) async fn assert_passed_through(
    relayd: &Relayd,
    stand_in: &StandIn,
    req: http::Request<http_body_util::Full<bytes::Bytes>>,
    reason: &str,
) -> anyhow::Result<relay_testkit::Recorded> {
    let before = pass_throughs(relayd).len();
    let (status, headers, body) = fetch(relayd.addr(), req).await?;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let id = stand_in_id(&headers)?;
    let recorded = stand_in
        .request(id)
        .ok_or_else(|| anyhow::anyhow!("the stand-in has no request {id}"))?;
    assert!(
        relay_e2e::procfs::owns_connection(relayd.pid()?, recorded.peer, stand_in.addr()),
        "the stand-in's peer {} is not relayd's socket: the request did not pass through",
        recorded.peer
    );
    let logged = relayd
        .logs()
        .wait_for_events("public_request_pass_through", before + 1, EVENT_TIMEOUT)
        .await?;
    let event = &logged[before];
    assert_eq!(field(event, "reason"), reason, "{event}");
    assert_eq!(field(event, "route_mode"), "pass_through", "{event}");
    assert_eq!(field(event, "route"), "anthropic", "{event}");
    Ok(recorded)
}

/// Polls `/_relay/v1/workers/status` until `check` accepts the list.
pub(crate) async fn wait_for_workers_status(
    relayd: &Relayd,
    what: &str,
    timeout: Duration,
    check: impl Fn(&[serde_json::Value]) -> bool,
) -> anyhow::Result<Vec<serde_json::Value>> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut poll = tokio::time::interval(STATUS_POLL);
    loop {
        poll.tick().await;
        let workers = workers_status(relayd).await?;
        if check(&workers) {
            return Ok(workers);
        }
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!("the workers status never showed {what} within {timeout:?}: {workers:?}");
        }
    }
}

/// The end of a streamed Messages answer (`read_rest`'s result) that must have been cut:
/// ending cleanly would make a truncated answer look whole, so it fails, as does a body
/// that holds the whole stream.
#[track_caller]
pub(crate) fn assert_cut(read: Result<bytes::Bytes, relay_e2e::http::BodyError>) {
    match read {
        Ok(body) => panic!(
            "the stream ended cleanly after {} of {} bytes; a cut stream must end with an error",
            body.len(),
            relay_testkit::ANTHROPIC_MESSAGES_SSE.len()
        ),
        Err(cut) => assert!(cut.received.len() < relay_testkit::ANTHROPIC_MESSAGES_SSE.len()),
    }
}

/// The check `id` of a `relay-doctor --json` report, or `null`.
pub(crate) fn report_check<'a>(report: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    report["checks"]
        .as_array()
        .and_then(|checks| checks.iter().find(|c| c["id"] == id))
        .unwrap_or(&serde_json::Value::Null)
}

/// A directory for an ATOF file sink: private (0700), as the sink requires of a directory
/// only its user writes.
pub(crate) fn atof_dir() -> anyhow::Result<tempfile::TempDir> {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::Builder::new()
        .prefix("relay-e2e-atof-")
        .tempdir()?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))?;
    Ok(dir)
}

/// The one ATOF file in `dir` (one per user), as text and as its records in file order.
pub(crate) fn atof_records(
    dir: &std::path::Path,
) -> anyhow::Result<(String, Vec<serde_json::Value>)> {
    let files: Vec<std::path::PathBuf> = std::fs::read_dir(dir)?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    anyhow::ensure!(files.len() == 1, "one ATOF file per user: {files:?}");
    let text = std::fs::read_to_string(&files[0])?;
    let records = text
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<Vec<serde_json::Value>, _>>()?;
    Ok((text, records))
}

/// A certificate authority made for a test, named `name`: its certificate is `.pem()` or
/// `.der()`, and it signs the certificates a test's servers present.
pub(crate) fn new_ca(
    name: &str,
) -> anyhow::Result<rcgen::CertifiedIssuer<'static, rcgen::KeyPair>> {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    let mut params = rcgen::CertificateParams::new(Vec::new())?;
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    Ok(rcgen::CertifiedIssuer::self_signed(params, key)?)
}

/// A TLS client configuration that trusts `ca` alone.
pub(crate) fn trusting(
    ca: &tokio_rustls::rustls::pki_types::CertificateDer<'static>,
) -> anyhow::Result<tokio_rustls::rustls::ClientConfig> {
    let mut roots = tokio_rustls::rustls::RootCertStore::empty();
    roots.add(ca.clone())?;
    Ok(
        tokio_rustls::rustls::ClientConfig::builder_with_provider(relay_proxy::tls::provider())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}
