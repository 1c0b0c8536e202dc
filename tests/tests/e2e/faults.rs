//! A worker's life under failure (SPEC §3.3, §3.7, §5.4, §5.5): a worker killed mid-stream,
//! a stopped worker a request cannot reach, a client that goes away mid-stream, the last
//! session ending while a stream runs, a worker binary that fails to start and is repaired,
//! and a draining worker that never exits. Each test runs the real processes with shortened
//! timers and checks the lifecycle events relayd, relay-mcp and the worker log (§10.3)
//! beside what the client and the provider stand-in saw.

use std::time::{Duration, Instant};

use http::StatusCode;
use relay_e2e::http::{post_json, send};
use relay_e2e::{BrokenWorker, Relayd, Tap, procfs};
use relay_proto::Message;
use relay_testkit::{ANTHROPIC_MESSAGES_SSE, Behaviour, REQUEST_ID_HEADER, StandIn};
use rustix::process::Signal;

use super::support::{
    EVENT_TIMEOUT, MCP_EXIT_TIMEOUT, STATUS_POLL, WORKER_TIMEOUT, anthropic_request, assert_cut,
    assert_passed_through, assert_through_worker, atof_dir, atof_records, between, context,
    event_with, fault_config, field, fresh_token, marker, nth_event, nth_worker, paced,
    pass_throughs, ready_mcp, recorded_with, route_status, spawn_mcp, stand_in_id,
    streaming_request, upstream_config, user_for, wait_for_workers_status, with_a_ready_worker,
    workers_status,
};

/// How soon a broken stream or a client's disconnect must be seen on the other side (§3.3:
/// "at once"); generous for two shared cores, far below any timer in play.
const PROMPTLY: Duration = Duration::from_secs(1);

/// Checks that relayd logged no `worker_request_failed`: what a client caused, or a
/// provider answered, is no failure of the worker's.
#[track_caller]
fn assert_no_worker_failure(relayd: &Relayd) {
    assert!(
        relayd
            .logs()
            .events_named("worker_request_failed")
            .is_empty(),
        "{}",
        relayd.logs().text()
    );
}

/// Which way a tapped control message went.
#[derive(Debug, Clone, Copy)]
enum Sent {
    ByMcp,
    ByDaemon,
}

/// How many messages the MCP control sessions forwarded by `tap` carried `sent` that
/// `matches`, once there are at least `n` (a message relay-mcp logged having sent may still
/// be on its way through the tap).
async fn wait_for_mcp_messages(
    tap: &Tap,
    what: &str,
    sent: Sent,
    n: usize,
    matches: impl Fn(&Message) -> bool,
) -> anyhow::Result<usize> {
    let deadline = tokio::time::Instant::now() + EVENT_TIMEOUT;
    let mut poll = tokio::time::interval(STATUS_POLL);
    loop {
        poll.tick().await;
        let count = relay_e2e::ws::control_sessions(&tap.exchanges())
            .iter()
            .filter(|s| s.path == relay_proxy::control::MCP_PATH)
            .flat_map(|s| match sent {
                Sent::ByMcp => &s.from_client,
                Sent::ByDaemon => &s.from_daemon,
            })
            .filter(|m| matches(m))
            .count();
        if count >= n {
            return Ok(count);
        }
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!("the tap saw {count} {what} within {EVENT_TIMEOUT:?}, not {n}");
        }
    }
}

/// Waits until process `pid` is in `state` (`/proc/<pid>/stat`: `T` once a SIGSTOP took).
async fn wait_for_state(pid: u32, state: char) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + EVENT_TIMEOUT;
    let mut poll = tokio::time::interval(STATUS_POLL);
    loop {
        poll.tick().await;
        let now = procfs::state(pid);
        if now == Some(state) {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!(
                "process {pid} is in state {now:?}, not {state:?}, after {EVENT_TIMEOUT:?}"
            );
        }
    }
}

/// A `WorkerExited` for an exit by SIGKILL.
fn killed_exit(message: &Message) -> bool {
    matches!(message, Message::WorkerExited(exit) if exit.signal == Some(9))
}

#[tokio::test]
async fn a_worker_killed_mid_stream_breaks_that_stream_and_a_new_generation_takes_over()
-> anyhow::Result<()> {
    let stand_in = StandIn::start().await?;
    // The clients dial through a tap, so the test can read the `WorkerExited` relay-mcp
    // sends; the grace is long so a relaunch within it proves nobody waited for it.
    let tap = Tap::bind().await?;
    let relayd = Relayd::builder()?
        .config(fault_config(
            &stand_in,
            "",
            "reconnect_grace_secs = 20\ndrain_secs = 1\nretry_base_ms = 200",
        ))
        .args(["--advertise-address", &tap.origin()])
        .start()
        .await?;
    let tap = tap.forward_to(relayd.addr());
    let user = user_for(&stand_in)?;
    let token = fresh_token()?;
    let mcp = ready_mcp(&user, &tap.origin(), &token).await?;
    let (first_id, first_pid) = nth_worker(&relayd, &user, 1).await?;

    // 16 bytes every 100 ms: the stream would take about six seconds.
    stand_in.set_behaviour(paced(16, Duration::from_millis(100)));
    let streamed = marker("killed")?;
    let mut res = send(relayd.addr(), streaming_request(&token, &streamed)?).await?;
    assert_eq!(res.status(), StatusCode::OK);
    let first = res.next_data().await?.unwrap_or_default();
    assert!(!first.is_empty());
    let id: u64 = res.header_str(REQUEST_ID_HEADER).unwrap_or("").parse()?;
    let peer = stand_in
        .request(id)
        .ok_or_else(|| anyhow::anyhow!("the stand-in has no request {id}"))?
        .peer;
    assert!(
        procfs::owns_connection(first_pid, peer, stand_in.addr()),
        "the stream does not go through the worker"
    );

    user.signal_worker(first_pid, Signal::KILL)?;
    let killed = Instant::now();
    let cut = tokio::time::timeout(PROMPTLY, res.read_rest(&first))
        .await
        .map_err(|_| anyhow::anyhow!("the stream was still open {PROMPTLY:?} after the kill"))?;
    assert_cut(cut);
    // relayd says why it cut the client's stream.
    let failed = relayd
        .wait_for_log_event("worker_request_failed", EVENT_TIMEOUT)
        .await?;
    assert_eq!(field(&failed, "reason"), "response_body_failed", "{failed}");
    assert_eq!(field(&failed, "worker_id"), first_id, "{failed}");

    // relay-mcp saw its child die and said so; the broker calls it a crash and relaunches
    // at once, since the worker had served (§5.4), far inside the 20 s grace.
    let stopped = mcp
        .logs()
        .wait_for_event("worker_stopped", EVENT_TIMEOUT)
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", context(&relayd, &user, &[&mcp])))?;
    assert_eq!(stopped["exit_signal"], 9, "{stopped}");
    let removed = event_with(
        relayd.logs(),
        "worker_removed",
        "worker_id",
        &first_id,
        EVENT_TIMEOUT,
    )
    .await?;
    assert_eq!(field(&removed, "reason"), "crashed", "{removed}");
    let (second_id, second_pid) = nth_worker(&relayd, &user, 2).await?;
    let relaunched = killed.elapsed();
    assert_ne!(second_id, first_id);
    assert_ne!(second_pid, first_pid);
    assert!(
        relaunched < Duration::from_secs(5),
        "the new generation took {relaunched:?}"
    );
    assert_eq!(procfs::parent_pid(second_pid), Some(mcp.pid()?));
    let exited =
        wait_for_mcp_messages(&tap, "WorkerExited signal 9", Sent::ByMcp, 1, killed_exit).await?;
    assert_eq!(
        exited, 1,
        "relay-mcp did not report WorkerExited once for the kill"
    );
    for event in ["worker_recovery_failed", "worker_activation_failed"] {
        assert!(
            relayd.logs().events_named(event).is_empty(),
            "{event}: {}",
            context(&relayd, &user, &[&mcp])
        );
    }

    // The next request goes to the new generation; the broken one was never retried.
    stand_in.set_behaviour(Behaviour::default());
    let next = marker("next")?;
    assert_through_worker(
        &relayd,
        &stand_in,
        second_pid,
        anthropic_request(&token, &next)?,
    )
    .await?;
    assert_eq!(recorded_with(&stand_in, &streamed).len(), 1);
    assert_eq!(stand_in.request_count(), 2, "a request was sent again");
    assert!(
        pass_throughs(&relayd).is_empty(),
        "{:?}",
        pass_throughs(&relayd)
    );
    Ok(())
}

/// The race behind the test above when the machine is loaded: relayd learns first that
/// the worker died (its control session drops and its endpoint refuses) and grants the next
/// launch before relay-mcp has handled its child's exit. relay-mcp is stopped across the
/// kill and continued only once the tap has handed it the fresh grant, so the exit and the
/// grant are both waiting for it; whichever it handles first, the exit is logged and
/// reported exactly once, and the grant starts the next generation.
#[tokio::test]
async fn a_worker_death_relayd_sees_first_is_still_logged_and_reported_by_relay_mcp()
-> anyhow::Result<()> {
    let stand_in = StandIn::start().await?;
    let tap = Tap::bind().await?;
    let relayd = Relayd::builder()?
        .config(fault_config(
            &stand_in,
            "",
            "reconnect_grace_secs = 20\ndrain_secs = 1\nretry_base_ms = 200",
        ))
        .args(["--advertise-address", &tap.origin()])
        .start()
        .await?;
    let tap = tap.forward_to(relayd.addr());
    let user = user_for(&stand_in)?;
    let token = fresh_token()?;
    let mcp = ready_mcp(&user, &tap.origin(), &token).await?;
    let (first_id, first_pid) = nth_worker(&relayd, &user, 1).await?;
    // The worker serves once, so its death is a crash relaunched at once (§5.4).
    assert_through_worker(
        &relayd,
        &stand_in,
        first_pid,
        anthropic_request(&token, &marker("served")?)?,
    )
    .await?;

    mcp.signal(Signal::STOP)?;
    wait_for_state(mcp.pid()?, 'T').await?;
    user.signal_worker(first_pid, Signal::KILL)?;
    let removed = event_with(
        relayd.logs(),
        "worker_removed",
        "worker_id",
        &first_id,
        EVENT_TIMEOUT,
    )
    .await?;
    assert_eq!(field(&removed, "reason"), "crashed", "{removed}");
    // The first grant came in `Registered`; the relaunch is a `LaunchWorker`. The tap
    // writes what it records in the same step, on this test's one thread: once it shows
    // the grant, the grant is in the stopped relay-mcp's socket.
    let is_grant = |m: &Message| matches!(m, Message::LaunchWorker(_));
    wait_for_mcp_messages(&tap, "LaunchWorker", Sent::ByDaemon, 1, is_grant).await?;
    assert!(
        mcp.logs().events_named("worker_stopped").is_empty(),
        "relay-mcp logged while stopped"
    );
    mcp.signal(Signal::CONT)?;

    let stopped = mcp
        .logs()
        .wait_for_event("worker_stopped", EVENT_TIMEOUT)
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", context(&relayd, &user, &[&mcp])))?;
    assert_eq!(stopped["exit_signal"], 9, "{stopped}");
    let (second_id, second_pid) = nth_worker(&relayd, &user, 2).await?;
    assert_ne!(second_id, first_id);
    assert_eq!(procfs::parent_pid(second_pid), Some(mcp.pid()?));
    let exited =
        wait_for_mcp_messages(&tap, "WorkerExited signal 9", Sent::ByMcp, 1, killed_exit).await?;
    assert_eq!(exited, 1, "{}", context(&relayd, &user, &[&mcp]));
    assert_eq!(
        mcp.logs().events_named("worker_stopped").len(),
        1,
        "{}",
        mcp.logs().text()
    );
    for event in ["worker_recovery_failed", "worker_activation_failed"] {
        assert!(
            relayd.logs().events_named(event).is_empty(),
            "{event}: {}",
            context(&relayd, &user, &[&mcp])
        );
    }
    stand_in.set_behaviour(Behaviour::default());
    assert_through_worker(
        &relayd,
        &stand_in,
        second_pid,
        anthropic_request(&token, &marker("next")?)?,
    )
    .await?;
    Ok(())
}

/// A worker that is still ready in relayd's eyes but does not answer a new connection: the
/// request passes through once, and the provider gets neither the caller's credential that
/// its `Connection` header named (a hop-by-hop header, dropped on the way) nor the daemon's
/// key, which is configured but never added while workers serve (§3.2, §3.7).
#[tokio::test]
async fn a_stopped_worker_passes_the_request_through_once_without_the_dropped_or_daemon_key()
-> anyhow::Result<()> {
    let stand_in = StandIn::start().await?;
    let daemon_key = marker("anthropic-daemon-key")?;
    let caller_key = marker("caller-key")?;
    let builder = Relayd::builder()?;
    let key_file = builder.write_private_file("anthropic.key", &format!("{daemon_key}\n"))?;
    // The readiness probe runs every `ping_secs` (30 s by default), far from this test's
    // few seconds.
    let config = upstream_config(
        &stand_in,
        &format!(
            "daemon_keys = \"any_local\"\nanthropic_api_key_file = \"{}\"\n\
             [daemon.timers]\ndrain_secs = 1\nretry_base_ms = 200\n",
            key_file.display()
        ),
    );
    let user = user_for(&stand_in)?;
    let (relayd, token, _mcp, pid) = with_a_ready_worker(builder.config(config), &user).await?;
    // No request has gone to the worker, so relayd holds no connection to it: the next
    // request opens one, whose TLS handshake the stopped worker never answers.
    user.signal_worker(pid, Signal::STOP)?;
    wait_for_state(pid, 'T').await?;

    let body = marker("body")?;
    let req = post_json(
        "/v1/messages",
        &[
            ("x-relay-client-token", token.as_str()),
            ("connection", "x-api-key"),
            ("x-api-key", caller_key.as_str()),
            ("anthropic-version", "2023-06-01"),
        ],
        format!(
            r#"{{"model":"m","max_tokens":16,"messages":[{{"role":"user","content":"{body}"}}]}}"#
        ),
    )?;
    let recorded = assert_passed_through(&relayd, &stand_in, req, "worker_connect_failed").await;
    user.signal_worker(pid, Signal::CONT)?;
    let recorded = recorded?;
    assert_eq!(recorded.header("x-api-key"), None, "{:?}", recorded.headers);
    for (name, value) in &recorded.headers {
        let value = String::from_utf8_lossy(value);
        assert!(
            !value.contains(&daemon_key) && !value.contains(&caller_key),
            "a key reached the provider in {name}"
        );
    }
    assert_eq!(
        recorded_with(&stand_in, &body).len(),
        1,
        "sent more than once"
    );
    Ok(())
}

/// A request whose credential is bound falls back to pass-through and finds its provider
/// unreachable: `upstream_request_failed` names the caller's fingerprint (its prefix).
#[tokio::test]
async fn a_failed_pass_through_of_a_bound_caller_is_logged_with_its_fingerprint()
-> anyhow::Result<()> {
    let stand_in = StandIn::start().await?;
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.local_addr()?
    };
    let config = format!(
        "[upstream]\nanthropic_base_url = \"http://{closed}\"\n\
         [daemon.timers]\ndrain_secs = 1\nretry_base_ms = 200\n"
    );
    let user = user_for(&stand_in)?;
    let (relayd, token, _mcp, pid) =
        with_a_ready_worker(Relayd::builder()?.config(config), &user).await?;
    user.signal_worker(pid, Signal::STOP)?;
    wait_for_state(pid, 'T').await?;
    let answer =
        relay_e2e::http::fetch(relayd.addr(), anthropic_request(&token, &marker("x")?)?).await;
    user.signal_worker(pid, Signal::CONT)?;
    let (status, _, _) = answer?;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    let failed = relayd
        .wait_for_log_event("upstream_request_failed", EVENT_TIMEOUT)
        .await?;
    assert_eq!(field(&failed, "reason"), "connect_failed", "{failed}");
    let passed = pass_throughs(&relayd);
    let fingerprint = field(&passed[0], "fingerprint");
    assert_eq!(fingerprint.len(), 12, "{passed:?}");
    assert_eq!(field(&failed, "fingerprint"), fingerprint, "{failed}");
    Ok(())
}

/// A provider that refuses the caller's own credential (a wrong key, an expired login)
/// answers 401; through the worker that answer reaches the client as it is, so the agent
/// can ask its user to log in again. Only the worker's own refusal of the daemon's secret
/// becomes 502.
#[tokio::test]
async fn a_providers_401_through_the_worker_reaches_the_client_as_it_is() -> anyhow::Result<()> {
    let stand_in = StandIn::start().await?;
    let config = fault_config(&stand_in, "", "drain_secs = 1\nretry_base_ms = 200");
    let user = user_for(&stand_in)?;
    let (relayd, token, _mcp, pid) =
        with_a_ready_worker(Relayd::builder()?.config(config), &user).await?;
    let refusal =
        r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#;
    let mut canned = relay_testkit::CannedResponse::new(StatusCode::UNAUTHORIZED);
    canned.body = bytes::Bytes::from_static(refusal.as_bytes());
    canned.headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    stand_in.set_behaviour(Behaviour {
        status: Some(canned),
        ..Behaviour::default()
    });
    let body = marker("login")?;
    let (status, headers, answer) =
        relay_e2e::http::fetch(relayd.addr(), anthropic_request(&token, &body)?).await?;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "{}",
        String::from_utf8_lossy(&answer)
    );
    assert_eq!(answer, refusal.as_bytes());
    assert!(
        headers.get("x-relay-worker-refused").is_none(),
        "{headers:?}"
    );
    let recorded = recorded_with(&stand_in, &body);
    assert_eq!(recorded.len(), 1, "sent more than once");
    assert!(
        procfs::owns_connection(pid, recorded[0].peer, stand_in.addr()),
        "the request did not go through the worker"
    );
    assert_no_worker_failure(&relayd);
    Ok(())
}

/// A chunked body that crosses `max_request_body_bytes` on its way to the worker is the
/// client's fault: 413, as on the way to a provider, never a worker failure, and the
/// provider gets no complete request.
#[tokio::test]
async fn a_chunked_body_over_the_limit_through_the_worker_is_413() -> anyhow::Result<()> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    let stand_in = StandIn::start().await?;
    let config = fault_config(
        &stand_in,
        "max_request_body_bytes = 65536",
        "drain_secs = 1\nretry_base_ms = 200",
    );
    let user = user_for(&stand_in)?;
    let (relayd, token, _mcp, _) =
        with_a_ready_worker(Relayd::builder()?.config(config), &user).await?;

    let body = marker("too-large")?;
    let mut stream = tokio::net::TcpStream::connect(relayd.addr()).await?;
    let head = format!(
        "POST /v1/messages HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         x-relay-client-token: {token}\r\nx-api-key: sk-ant-test\r\n\
         anthropic-version: 2023-06-01\r\nTransfer-Encoding: chunked\r\n\r\n",
        relayd.addr()
    );
    stream.write_all(head.as_bytes()).await?;
    let first =
        format!(r#"{{"model":"m","max_tokens":16,"messages":[{{"role":"user","content":"{body}"#);
    let filler = "x".repeat(16 * 1024);
    // The daemon may answer and stop reading before all of it is written.
    let written: std::io::Result<()> = async {
        stream
            .write_all(format!("{:x}\r\n{first}\r\n", first.len()).as_bytes())
            .await?;
        for _ in 0..8 {
            stream
                .write_all(format!("{:x}\r\n{filler}\r\n", filler.len()).as_bytes())
                .await?;
        }
        stream.write_all(b"0\r\n\r\n").await
    }
    .await;
    drop(written);
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(EVENT_TIMEOUT, stream.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 413 "), "{answer}");
    assert!(answer.contains("relay_payload_too_large"), "{answer}");
    assert_no_worker_failure(&relayd);
    for recorded in recorded_with(&stand_in, &body) {
        assert!(
            !recorded.body_complete,
            "the provider got a complete request"
        );
    }
    Ok(())
}

/// A provider that sends no response head in time, through the worker: the client gets the
/// worker's 504 and relayd logs `worker_request_failed reason="response_head_timeout"`,
/// as it would for its own timeout.
#[tokio::test]
async fn a_provider_timeout_through_the_worker_is_logged_by_relayd() -> anyhow::Result<()> {
    let stand_in = StandIn::start().await?;
    let timeout = "response_timeout_secs = 1\n";
    let config = upstream_config(
        &stand_in,
        &format!("{timeout}\n[daemon.timers]\ndrain_secs = 1\nretry_base_ms = 200\n"),
    );
    let user = relay_e2e::User::new()?;
    user.write_system_config(&upstream_config(&stand_in, timeout))?;
    let (relayd, token, _mcp, _) =
        with_a_ready_worker(Relayd::builder()?.config(config), &user).await?;
    stand_in.set_behaviour(Behaviour {
        hang_before_headers: true,
        ..Behaviour::default()
    });
    let (status, headers, body) =
        relay_e2e::http::fetch(relayd.addr(), anthropic_request(&token, &marker("late")?)?).await?;
    assert_eq!(
        status,
        StatusCode::GATEWAY_TIMEOUT,
        "{}",
        String::from_utf8_lossy(&body)
    );
    assert!(
        String::from_utf8_lossy(&body).contains("relay_upstream_timeout"),
        "{}",
        String::from_utf8_lossy(&body)
    );
    assert!(
        headers.get("x-relay-worker-upstream-failed").is_none(),
        "{headers:?}"
    );
    let failed = relayd
        .wait_for_log_event("worker_request_failed", EVENT_TIMEOUT)
        .await?;
    assert_eq!(
        field(&failed, "reason"),
        "response_head_timeout",
        "{failed}"
    );
    assert_eq!(field(&failed, "route"), "anthropic", "{failed}");
    Ok(())
}

#[tokio::test]
async fn a_client_leaving_mid_stream_cancels_the_provider_request_through_the_worker()
-> anyhow::Result<()> {
    let stand_in = StandIn::start().await?;
    let relayd = Relayd::builder()?
        .config(fault_config(
            &stand_in,
            "",
            "drain_secs = 1\nreconnect_grace_secs = 2",
        ))
        .start()
        .await?;
    let user = user_for(&stand_in)?;
    let token = fresh_token()?;
    let mcp = ready_mcp(&user, &relayd.origin(), &token).await?;
    let (worker_id, worker_pid) = nth_worker(&relayd, &user, 1).await?;

    stand_in.set_behaviour(paced(16, Duration::from_millis(100)));
    let mut res = send(
        relayd.addr(),
        streaming_request(&token, &marker("leaves")?)?,
    )
    .await?;
    assert_eq!(res.status(), StatusCode::OK);
    let first = res.next_data().await?.unwrap_or_default();
    assert!(!first.is_empty());
    let id: u64 = res.header_str(REQUEST_ID_HEADER).unwrap_or("").parse()?;
    let peer = stand_in
        .request(id)
        .ok_or_else(|| anyhow::anyhow!("the stand-in has no request {id}"))?
        .peer;
    assert!(procfs::owns_connection(worker_pid, peer, stand_in.addr()));
    let workers = workers_status(&relayd).await?;
    assert_eq!(workers[0]["in_flight"], 1, "{workers:?}");

    drop(res);
    let left = Instant::now();
    let gone = stand_in.wait_for_client_gone(id, EVENT_TIMEOUT).await?;
    let went_away_at = gone
        .went_away_at
        .ok_or_else(|| anyhow::anyhow!("no disconnect time recorded"))?;
    let took = went_away_at.saturating_duration_since(left);
    assert!(
        took < PROMPTLY,
        "the provider saw the client go {took:?} after it left"
    );
    wait_for_workers_status(&relayd, "in_flight 0", EVENT_TIMEOUT, |workers| {
        workers.len() == 1 && workers[0]["in_flight"] == 0
    })
    .await?;
    // The worker is still the route's, and serves the next request.
    stand_in.set_behaviour(Behaviour::default());
    assert_through_worker(
        &relayd,
        &stand_in,
        worker_pid,
        anthropic_request(&token, &marker("after")?)?,
    )
    .await?;
    assert_eq!(
        route_status(&relayd, &token).await?["worker_id"],
        worker_id.as_str()
    );
    // A client going away is no fault of the worker's: its route never changed.
    for event in [
        "worker_control_lost",
        "worker_removed",
        "worker_request_failed",
        "public_request_pass_through",
    ] {
        assert!(
            relayd.logs().events_named(event).is_empty(),
            "{event}: {}",
            context(&relayd, &user, &[&mcp])
        );
    }
    assert_eq!(user.worker_pids(), [worker_pid]);
    Ok(())
}

#[tokio::test]
async fn the_last_session_ending_mid_stream_drains_the_worker_and_a_new_session_gets_a_fresh_one()
-> anyhow::Result<()> {
    let stand_in = StandIn::start().await?;
    let relayd = Relayd::builder()?
        .config(fault_config(
            &stand_in,
            "activation_wait_ms = 0",
            "drain_secs = 8\nreconnect_grace_secs = 2\nretry_base_ms = 200",
        ))
        .start()
        .await?;
    let user = user_for(&stand_in)?;
    let token = fresh_token()?;
    let mut mcp = ready_mcp(&user, &relayd.origin(), &token).await?;
    let (old_id, old_pid) = nth_worker(&relayd, &user, 1).await?;

    // 32 bytes every 100 ms: about three seconds of stream.
    stand_in.set_behaviour(paced(32, Duration::from_millis(100)));
    let streamed = marker("drained")?;
    let mut res = send(relayd.addr(), streaming_request(&token, &streamed)?).await?;
    assert_eq!(res.status(), StatusCode::OK);
    let first = res.next_data().await?.unwrap_or_default();
    let id: u64 = res.header_str(REQUEST_ID_HEADER).unwrap_or("").parse()?;

    // The harness session ends: relay-mcp's stdin closes.
    mcp.close_stdin();
    assert_eq!(mcp.wait(MCP_EXIT_TIMEOUT).await?.code(), Some(0));
    let drain = relayd
        .wait_for_log_event("worker_drain_started", EVENT_TIMEOUT)
        .await?;
    assert_eq!(field(&drain, "worker_id"), old_id);

    // A new session of the same user arrives during the drain: the draining worker never
    // returns to service, so its requests pass through until a fresh worker is ready.
    let mut next = spawn_mcp(&user, &relayd.origin(), &token, None)?;
    relayd
        .logs()
        .wait_for("a second mcp_added", EVENT_TIMEOUT, |logs| {
            logs.events_named("mcp_added").get(1).cloned()
        })
        .await?;
    let route = route_status(&relayd, &token).await?;
    assert_eq!(route["state"], "draining", "{route}");
    let during = marker("during-drain")?;
    stand_in.set_behaviour(Behaviour::default());
    assert_passed_through(
        &relayd,
        &stand_in,
        anthropic_request(&token, &during)?,
        "worker_unavailable",
    )
    .await?;
    // Still draining afterwards: the request met the draining worker, not a fresh one.
    let route = route_status(&relayd, &token).await?;
    assert_eq!(route["state"], "draining", "{route}");
    assert_eq!(route["reason"], "worker_unavailable", "{route}");

    // The stream in flight finishes on the draining worker, byte for byte.
    let body = res.read_rest(&first).await?;
    assert!(body == ANTHROPIC_MESSAGES_SSE, "the drained stream changed");
    let recorded = stand_in
        .request(id)
        .ok_or_else(|| anyhow::anyhow!("the stand-in has no request {id}"))?;
    assert!(!recorded.client_went_away, "the drain cut the stream");

    // Then the old worker exits within drain_secs, and the new session's worker starts.
    let removed = event_with(
        relayd.logs(),
        "worker_removed",
        "worker_id",
        &old_id,
        WORKER_TIMEOUT,
    )
    .await?;
    assert_eq!(field(&removed, "reason"), "drained", "{removed}");
    assert!(between(&drain, &removed) < Duration::from_secs(8));
    user.wait_for_exit(old_pid, WORKER_TIMEOUT).await?;
    let (new_id, new_pid) = nth_worker(&relayd, &user, 2).await?;
    assert_ne!(new_id, old_id);
    assert_eq!(procfs::parent_pid(new_pid), Some(next.pid()?));
    let added = nth_event(relayd.logs(), "worker_added", 2, EVENT_TIMEOUT).await?;
    assert!(
        relay_e2e::event_time(&added) >= relay_e2e::event_time(&removed),
        "the fresh worker was added before the old one left"
    );
    let answer = next.initialize("2025-11-25", EVENT_TIMEOUT).await?;
    assert_eq!(answer["result"]["protocolVersion"], "2025-11-25");
    assert_through_worker(
        &relayd,
        &stand_in,
        new_pid,
        anthropic_request(&token, &marker("fresh")?)?,
    )
    .await?;
    assert_eq!(recorded_with(&stand_in, &during).len(), 1);
    Ok(())
}

/// A session that starts while the last one's worker drains with nothing to do gets a
/// worker of its own at once: its first model request waits for that worker and reaches it,
/// never passing by policy and records (found running Codex right after a Claude Code
/// session), and the old worker is retired as drained and exits.
#[tokio::test]
async fn a_session_starting_while_an_idle_worker_drains_gets_its_own_worker_at_once()
-> anyhow::Result<()> {
    let stand_in = StandIn::start().await?;
    let relayd = Relayd::builder()?
        .config(upstream_config(&stand_in, ""))
        .start()
        .await?;
    let user = user_for(&stand_in)?;
    let token = fresh_token()?;
    let mut mcp = ready_mcp(&user, &relayd.origin(), &token).await?;
    let (old_id, old_pid) = nth_worker(&relayd, &user, 1).await?;
    mcp.close_stdin();
    assert_eq!(mcp.wait(MCP_EXIT_TIMEOUT).await?.code(), Some(0));
    relayd
        .wait_for_log_event("worker_drain_started", EVENT_TIMEOUT)
        .await?;

    let next = spawn_mcp(&user, &relayd.origin(), &token, None)?;
    relayd
        .logs()
        .wait_for("a second mcp_added", EVENT_TIMEOUT, |logs| {
            logs.events_named("mcp_added").get(1).cloned()
        })
        .await?;
    let (status, headers, body) = relay_e2e::http::fetch(
        relayd.addr(),
        anthropic_request(&token, &marker("first-of-the-next")?)?,
    )
    .await?;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let removed = event_with(
        relayd.logs(),
        "worker_removed",
        "worker_id",
        &old_id,
        WORKER_TIMEOUT,
    )
    .await?;
    assert_eq!(field(&removed, "reason"), "drained", "{removed}");
    user.wait_for_exit(old_pid, WORKER_TIMEOUT).await?;
    let (new_id, new_pid) = nth_worker(&relayd, &user, 2).await?;
    assert_ne!(new_id, old_id);
    let id = stand_in_id(&headers)?;
    let recorded = stand_in
        .request(id)
        .ok_or_else(|| anyhow::anyhow!("the stand-in has no request {id}"))?;
    assert!(
        procfs::owns_connection(new_pid, recorded.peer, stand_in.addr()),
        "the first request did not reach the new worker: {}",
        context(&relayd, &user, &[&next])
    );
    assert!(
        pass_throughs(&relayd).is_empty(),
        "{}",
        context(&relayd, &user, &[&next])
    );
    Ok(())
}

/// A worker stopped by SIGTERM (a logout, a shutdown, an administrator's `kill`) while its
/// MCP lives and a stream is in flight: the stream finishes on it, byte for byte, while the
/// daemon has the MCP launch its successor (which asks the old one to stop, and does not kill
/// it); then the old worker closes what it was recording, the session's scope as
/// `shutdown`, where it used to die at once with every scope open.
#[tokio::test]
async fn a_worker_stopped_by_sigterm_finishes_its_stream_and_closes_its_records()
-> anyhow::Result<()> {
    sigterm_mid_stream(false).await
}

/// The same at a logout, where the MCP gets SIGTERM at the same moment: whichever the daemon
/// hears of first, relay-mcp leaves its child the drain instead of a SIGKILL that would cut
/// the stream and leave the records open.
#[tokio::test]
async fn at_a_logout_the_worker_finishes_its_stream_and_closes_its_records() -> anyhow::Result<()> {
    sigterm_mid_stream(true).await
}

/// A stream in flight through a worker with records on; SIGTERM to the worker, and to its
/// MCP too when `logout`; the stream completes, the records close.
async fn sigterm_mid_stream(logout: bool) -> anyhow::Result<()> {
    let stand_in = StandIn::start().await?;
    let relayd = Relayd::builder()?
        .config(upstream_config(&stand_in, ""))
        .start()
        .await?;
    let user = user_for(&stand_in)?;
    let atof = atof_dir()?;
    std::fs::write(
        user.system_config_dir().join("plugins.toml"),
        format!(
            "version = 1\n[[components]]\nkind = \"observability\"\nenabled = true\n\
             [components.config]\n[[components.config.sinks]]\ntype = \"file\"\n\
             directory = {dir}\nfilename = \"events-{{user}}.jsonl\"\n",
            dir = toml::Value::from(atof.path().display().to_string())
        ),
    )?;
    let token = fresh_token()?;
    let mcp = ready_mcp(&user, &relayd.origin(), &token).await?;
    let (_, pid) = nth_worker(&relayd, &user, 1).await?;
    let (status, _, body) = relay_e2e::http::fetch(
        relayd.addr(),
        post_json(
            "/hooks/claude-code",
            &[("x-relay-client-token", &token)],
            r#"{"hook_event_name":"SessionStart","session_id":"ended-by-sigterm","source":"startup"}"#,
        )?,
    )
    .await?;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    // 32 bytes every 100 ms: about three seconds of stream, within the worker's 5 s.
    stand_in.set_behaviour(paced(32, Duration::from_millis(100)));
    let mut res = send(
        relayd.addr(),
        streaming_request(&token, &marker("through-sigterm")?)?,
    )
    .await?;
    assert_eq!(res.status(), StatusCode::OK);
    let first = res.next_data().await?.unwrap_or_default();

    if logout {
        mcp.signal(Signal::TERM)?;
    }
    user.signal_worker(pid, Signal::TERM)?;
    let body = res.read_rest(&first).await?;
    assert!(
        body == ANTHROPIC_MESSAGES_SSE,
        "the stream was cut: {}",
        context(&relayd, &user, &[&mcp])
    );
    user.wait_for_exit(pid, WORKER_TIMEOUT).await?;
    let (text, records) = atof_records(atof.path())?;
    let ends = |category: &str| -> Vec<&serde_json::Value> {
        records
            .iter()
            .filter(|r| r["category"] == category && r["scope_category"] == "end")
            .collect()
    };
    let agent = ends("agent");
    assert_eq!(
        agent.len(),
        1,
        "{text}\n{}",
        context(&relayd, &user, &[&mcp])
    );
    assert_eq!(agent[0]["data"]["closed_by"], "shutdown", "{text}");
    let llm = ends("llm");
    assert_eq!(llm.len(), 1, "{text}");
    assert_eq!(llm[0]["data"]["status"], 200, "{text}");
    if logout {
        return Ok(());
    }
    // The successor serves the session.
    let (_, new_pid) = nth_worker(&relayd, &user, 2).await?;
    assert_ne!(new_pid, pid);
    stand_in.set_behaviour(Behaviour::default());
    assert_through_worker(
        &relayd,
        &stand_in,
        new_pid,
        anthropic_request(&token, &marker("after-sigterm")?)?,
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn failed_worker_starts_back_off_and_a_repaired_binary_resets_the_delay() -> anyhow::Result<()>
{
    let stand_in = StandIn::start().await?;
    // A scaled-down base so the three delays take three and a half seconds; the broker doubles
    // whatever the config says (§5.4).
    let relayd = Relayd::builder()?
        .config(fault_config(
            &stand_in,
            "activation_wait_ms = 0",
            "retry_base_ms = 500\nretry_cap_secs = 60\ndrain_secs = 1\nreconnect_grace_secs = 2",
        ))
        .start()
        .await?;
    let user = user_for(&stand_in)?;
    let broken = BrokenWorker::install(&user.dir().join("broken"))?;
    let token = fresh_token()?;
    let mut mcp = spawn_mcp(&user, &relayd.origin(), &token, Some(broken.mcp_program()))?;

    let failures = relayd
        .logs()
        .wait_for_events("worker_activation_failed", 3, WORKER_TIMEOUT)
        .await?;
    // Repaired at once, so the fourth launch (after 2 s) finds the real binary.
    broken.repair()?;
    let delays: Vec<u64> = failures
        .iter()
        .map(|f| f["retry_after_ms"].as_u64().unwrap_or_default())
        .collect();
    assert_eq!(delays, [500, 1000, 2000], "{failures:?}");
    for failure in &failures {
        assert_eq!(
            field(failure, "failure_reason"),
            "worker_exited_before_ready",
            "{failure}"
        );
    }
    // Each relaunch waited out its delay (from the log's own clock).
    let relaunches = relayd
        .logs()
        .wait_for_events("worker_relaunch_requested", 3, WORKER_TIMEOUT)
        .await?;
    for (n, (failure, relaunch)) in failures.iter().zip(&relaunches).enumerate() {
        assert_eq!(relaunch["attempt"], n + 1, "{relaunch}");
        let waited = between(failure, relaunch);
        assert!(
            waited >= Duration::from_millis(delays[n]) - Duration::from_millis(5),
            "relaunch {} came {waited:?} after its failure",
            n + 1
        );
    }
    let mcp_failed = mcp
        .logs()
        .wait_for_events("worker_stopped", 3, EVENT_TIMEOUT)
        .await?;
    assert!(
        mcp_failed.iter().all(|e| e["exit_code"] == 1),
        "{mcp_failed:?}"
    );
    // The MCP that started each of them names the failed launch too.
    let launch_failed = mcp
        .logs()
        .wait_for_events("worker_launch_failed", 3, EVENT_TIMEOUT)
        .await?;
    assert!(
        launch_failed
            .iter()
            .all(|e| e["failure_reason"] == "worker_exited_before_ready"),
        "{launch_failed:?}"
    );
    // The session serves without a worker meanwhile, and says it is for a failed start.
    let settled = mcp
        .logs()
        .wait_for_event("daemon_mcp_pass_through", EVENT_TIMEOUT)
        .await?;
    assert_eq!(field(&settled, "reason"), "activation_failed", "{settled}");

    // The repaired binary starts: the route is ready and the session works.
    let (worker_id, worker_pid) = nth_worker(&relayd, &user, 1).await?;
    assert_eq!(
        relayd.logs().events_named("worker_activation_failed").len(),
        3,
        "{}",
        context(&relayd, &user, &[&mcp])
    );
    let answer = mcp.initialize("2025-11-25", EVENT_TIMEOUT).await?;
    assert_eq!(answer["result"]["protocolVersion"], "2025-11-25");

    // It dies before serving anything: a crash, relaunched at once (§5.4).
    user.signal_worker(worker_pid, Signal::KILL)?;
    let removed = event_with(
        relayd.logs(),
        "worker_removed",
        "worker_id",
        &worker_id,
        EVENT_TIMEOUT,
    )
    .await?;
    assert_eq!(field(&removed, "reason"), "crashed", "{removed}");
    let (relaunched_id, relaunched_pid) = nth_worker(&relayd, &user, 2).await?;
    assert_ne!(relaunched_id, worker_id);
    assert_eq!(
        relayd.logs().events_named("worker_activation_failed").len(),
        3,
        "a crash relaunches without a failed start: {}",
        context(&relayd, &user, &[&mcp])
    );
    // The relaunched worker dies before serving too: a failed start now, with the delay back
    // at the base because a worker became ready in between (reset once a worker is ready).
    user.signal_worker(relaunched_pid, Signal::KILL)?;
    let fourth = nth_event(relayd.logs(), "worker_activation_failed", 4, EVENT_TIMEOUT).await?;
    assert_eq!(fourth["retry_after_ms"], 500, "{fourth}");
    assert_eq!(
        field(&fourth, "failure_reason"),
        "worker_exited_before_serving"
    );
    let (again_id, again_pid) = nth_worker(&relayd, &user, 3).await?;
    assert_ne!(again_id, relaunched_id);
    assert_through_worker(
        &relayd,
        &stand_in,
        again_pid,
        anthropic_request(&token, &marker("repaired")?)?,
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn a_draining_worker_that_never_exits_is_revoked_after_drain_plus_grace() -> anyhow::Result<()>
{
    let stand_in = StandIn::start().await?;
    let relayd = Relayd::builder()?
        .config(fault_config(
            &stand_in,
            "activation_wait_ms = 0",
            "drain_secs = 2\nreconnect_grace_secs = 1\nretry_base_ms = 200",
        ))
        .start()
        .await?;
    let user = user_for(&stand_in)?;
    let token = fresh_token()?;
    let mut mcp = ready_mcp(&user, &relayd.origin(), &token).await?;
    let (old_id, old_pid) = nth_worker(&relayd, &user, 1).await?;

    // A long stream keeps the worker busy, so it is still draining when it hangs.
    stand_in.set_behaviour(paced(8, Duration::from_millis(100)));
    let mut res = send(relayd.addr(), streaming_request(&token, &marker("hung")?)?).await?;
    assert_eq!(res.status(), StatusCode::OK);
    res.next_data().await?;

    // The last session ends, then the worker hangs (stopped, its sockets open). It is
    // stopped only once relay-mcp has exited: stopping it before would make the kernel
    // send it SIGHUP and SIGCONT when its parent exits (POSIX orphaned process groups),
    // which kills it.
    mcp.close_stdin();
    assert_eq!(mcp.wait(MCP_EXIT_TIMEOUT).await?.code(), Some(0));
    user.signal_worker(old_pid, Signal::STOP)?;
    let drain = relayd
        .wait_for_log_event("worker_drain_started", EVENT_TIMEOUT)
        .await?;
    assert_eq!(drain["in_flight"], 1, "{drain}");
    // A new session arrives meanwhile and waits for the route's next worker.
    let mut next = spawn_mcp(&user, &relayd.origin(), &token, None)?;

    let removed = event_with(
        relayd.logs(),
        "worker_removed",
        "worker_id",
        &old_id,
        WORKER_TIMEOUT,
    )
    .await?;
    assert_eq!(
        field(&removed, "reason"),
        "drain_timeout",
        "{}",
        context(&relayd, &user, &[&mcp, &next])
    );
    let waited = between(&drain, &removed);
    assert!(
        waited >= Duration::from_millis(2990) && waited < Duration::from_secs(6),
        "revoked {waited:?} after the drain started; drain_secs + reconnect_grace_secs is 3 s"
    );
    assert_eq!(
        procfs::state(old_pid),
        Some('T'),
        "the stopped worker went away by itself"
    );

    // The new session's fresh worker serves it; the stopped one is gone from the status.
    let added = nth_event(relayd.logs(), "worker_added", 2, WORKER_TIMEOUT).await?;
    let new_id = field(&added, "worker_id").to_owned();
    assert_ne!(new_id, old_id);
    let answer = next.initialize("2025-11-25", EVENT_TIMEOUT).await?;
    assert_eq!(answer["result"]["protocolVersion"], "2025-11-25");
    let new_pid = user
        .worker_pids()
        .into_iter()
        .find(|pid| *pid != old_pid)
        .ok_or_else(|| anyhow::anyhow!("no new worker process"))?;
    assert_eq!(procfs::parent_pid(new_pid), Some(next.pid()?));
    stand_in.set_behaviour(Behaviour::default());
    assert_through_worker(
        &relayd,
        &stand_in,
        new_pid,
        anthropic_request(&token, &marker("after-timeout")?)?,
    )
    .await?;
    let workers = workers_status(&relayd).await?;
    assert_eq!(workers.len(), 1, "{workers:?}");
    assert_eq!(workers[0]["worker_id"], new_id.as_str(), "{workers:?}");

    // Let the revoked process run again: past its drain deadline, it stops and exits.
    drop(res);
    user.signal_worker(old_pid, Signal::CONT)?;
    user.wait_for_exit(old_pid, WORKER_TIMEOUT).await?;
    assert_eq!(user.worker_pids(), [new_pid]);
    Ok(())
}

/// A worker stopped by an invalid `plugins.toml`: the daemon and the MCP that started it
/// both name the reason, and the session serves without a worker.
#[tokio::test]
async fn an_invalid_plugin_configuration_is_named_by_the_daemon_and_the_mcp() -> anyhow::Result<()>
{
    let stand_in = StandIn::start().await?;
    let relayd = Relayd::builder()?
        .config(fault_config(&stand_in, "activation_wait_ms = 0", ""))
        .start()
        .await?;
    let user = user_for(&stand_in)?;
    user.write_file(
        &user.system_config_dir().join("plugins.toml"),
        "version = 1\n[[components]]\nkind = \"policy\"\n[[components.config.rules]]\nevent = \"PreToolUse\"\nregex = \"rm((\"\ninput_field = \"command\"\naction = \"deny\"\nreason = \"no\"\n",
        0o644,
    )?;
    let token = fresh_token()?;
    let mut mcp = spawn_mcp(&user, &relayd.origin(), &token, None)?;
    let failed = relayd
        .logs()
        .wait_for_event("worker_activation_failed", WORKER_TIMEOUT)
        .await?;
    assert_eq!(
        field(&failed, "failure_reason"),
        "plugin_config_invalid",
        "{failed}"
    );
    let launch_failed = mcp
        .logs()
        .wait_for_event("worker_launch_failed", EVENT_TIMEOUT)
        .await?;
    assert_eq!(
        field(&launch_failed, "failure_reason"),
        "plugin_config_invalid",
        "{launch_failed}"
    );
    let stopped = mcp
        .logs()
        .wait_for_event("worker_stopped", EVENT_TIMEOUT)
        .await?;
    assert_eq!(
        stopped["exit_code"],
        u64::from(relay_proto::WORKER_EXIT_PLUGIN_CONFIG_INVALID),
        "{stopped}"
    );
    let answer = mcp.initialize("2025-11-25", EVENT_TIMEOUT).await?;
    assert_eq!(answer["result"]["protocolVersion"], "2025-11-25");
    Ok(())
}

/// A drain ends at `drain_secs`: a stream through the worker that outlasts it is cut then,
/// and the worker exits, rather than streaming on through a worker the daemon removed.
#[tokio::test]
async fn a_stream_through_a_draining_worker_is_cut_at_the_drain_deadline() -> anyhow::Result<()> {
    let stand_in = StandIn::start().await?;
    let config = fault_config(&stand_in, "", "drain_secs = 1\nretry_base_ms = 200");
    let user = user_for(&stand_in)?;
    let (relayd, token, mut mcp, pid) =
        with_a_ready_worker(Relayd::builder()?.config(config), &user).await?;
    // 8 bytes every 100 ms: about ten seconds of stream.
    stand_in.set_behaviour(paced(8, Duration::from_millis(100)));
    let mut res = send(
        relayd.addr(),
        streaming_request(&token, &marker("drained")?)?,
    )
    .await?;
    assert_eq!(res.status(), StatusCode::OK);
    let first = res.next_data().await?.unwrap_or_default();

    // The session ends: the route drains with the stream in flight.
    mcp.close_stdin();
    let released = Instant::now();
    assert_cut(res.read_rest(&first).await);
    let cut_after = released.elapsed();
    assert!(
        cut_after < Duration::from_secs(3),
        "the stream ran {cut_after:?} past the release with a 1 s drain"
    );
    // The worker exits (it may stay a zombie until its new parent reaps it). A process in
    // the middle of exiting has no command line any more, so it is no longer listed as a
    // worker a moment before its state turns to zombie: wait for the state itself.
    user.wait_for_exit(pid, EVENT_TIMEOUT).await?;
    assert_eq!(user.worker_pids(), [] as [u32; 0]);
    // One overrun, one warning.
    let log = user.worker_log_text();
    let warnings: Vec<&str> = log
        .lines()
        .filter(|line| line.contains(r#""level":"warn""#))
        .collect();
    assert_eq!(warnings.len(), 1, "{log}");
    assert!(warnings[0].contains("cutting off"), "{log}");
    Ok(())
}
