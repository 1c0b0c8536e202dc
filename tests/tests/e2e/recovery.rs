//! Control sessions that drop and come back (SPEC §5.1, §5.4, §5.7): a worker's control
//! session cut for less and for more than the reconnect grace, and relayd restarted or
//! stopped while a session and its worker are live. Each test proves from outside (process
//! ids, `/proc`, the status endpoints, the logs) that the same worker resumed or that a new
//! generation took over, and that the harness session (the relay-mcp process) was never
//! restarted.
//!
//! A [`ControlCut`] between the clients and relayd cuts one path of control sessions (the
//! worker's, or the MCP's) while the other passes; relay-mcp is given its address, so its
//! worker dials it too, and relayd advertises it so the handshake's origin is accepted.

use std::time::{Duration, Instant};

use http::StatusCode;
use relay_e2e::http::fetch;
use relay_e2e::{ControlCut, Relayd, STOP_TIMEOUT, Tap, User, procfs};
use relay_proto::Message;
use relay_proxy::control::{MCP_PATH, WORKER_PATH};
use relay_testkit::StandIn;

use super::support::{
    EVENT_TIMEOUT, WORKER_TIMEOUT, anthropic_request, assert_passed_through, assert_through_worker,
    between, context, event_with, fault_config, field, fresh_token, marker, nth_event, ready_mcp,
    route_status, user_for, wait_for_route_state, workers_status,
};

/// relayd's `worker_control_reconnected` for `worker_id`, within `timeout`.
async fn reconnected(
    relayd: &Relayd,
    worker_id: &str,
    timeout: Duration,
) -> anyhow::Result<serde_json::Value> {
    event_with(
        relayd.logs(),
        "worker_control_reconnected",
        "worker_id",
        worker_id,
        timeout,
    )
    .await
}

/// The one worker of `user` that relayd added first: its id and pid.
async fn first_worker(relayd: &Relayd, user: &User) -> anyhow::Result<(String, u32)> {
    let added = relayd
        .wait_for_log_event("worker_added", WORKER_TIMEOUT)
        .await?;
    let pids = user.wait_for_workers(1, WORKER_TIMEOUT).await?;
    Ok((field(&added, "worker_id").to_owned(), pids[0]))
}

#[tokio::test]
async fn a_control_cut_shorter_than_the_grace_resumes_the_same_worker() -> anyhow::Result<()> {
    let stand_in = StandIn::start().await?;
    let cut = ControlCut::bind().await?;
    let relayd = Relayd::builder()?
        .config(fault_config(
            &stand_in,
            "activation_wait_ms = 0",
            "reconnect_grace_secs = 10\ndrain_secs = 1\nretry_base_ms = 200",
        ))
        .args(["--advertise-address", &cut.origin()])
        .start()
        .await?;
    let cut = cut.forward_to(relayd.addr());
    let user = user_for(&stand_in)?;
    let token = fresh_token()?;
    let mcp = ready_mcp(&user, &cut.origin(), &token).await?;
    let (worker_id, worker_pid) = first_worker(&relayd, &user).await?;

    cut.cut(WORKER_PATH);
    let cut_at = Instant::now();
    let lost = event_with(
        relayd.logs(),
        "worker_control_lost",
        "worker_id",
        &worker_id,
        EVENT_TIMEOUT,
    )
    .await?;
    let disconnected = relayd
        .wait_for_log_event("worker_control_disconnected", EVENT_TIMEOUT)
        .await?;
    // The cut closes the TCP connection without a WebSocket close frame.
    assert!(
        ["peer_closed", "worker_communication_failed"].contains(&field(&disconnected, "reason")),
        "{disconnected}"
    );
    relayd
        .wait_for_log_event("worker_recovery_started", EVENT_TIMEOUT)
        .await?;
    // The worker noticed too and tries to resume through the cut.
    assert!(
        cut.wait_for_held(WORKER_PATH, 1, EVENT_TIMEOUT).await,
        "the worker never tried to resume: {}",
        user.worker_log_text()
    );
    let workers = workers_status(&relayd).await?;
    assert_eq!(workers.len(), 1, "{workers:?}");
    assert_eq!(workers[0]["state"], "recovering", "{workers:?}");
    assert_eq!(workers[0]["control_available"], false, "{workers:?}");
    // Requests meanwhile pass through (§3.5: recovering is "worker not ready").
    assert_passed_through(
        &relayd,
        &stand_in,
        anthropic_request(&token, &marker("during-cut")?)?,
        "worker_unavailable",
    )
    .await?;
    let route = route_status(&relayd, &token).await?;
    assert_eq!(route["state"], "recovering", "{route}");

    cut.restore(WORKER_PATH);
    let reconnected = reconnected(&relayd, &worker_id, EVENT_TIMEOUT).await?;
    let outage = cut_at.elapsed();
    assert!(
        outage < Duration::from_secs(10),
        "the cut lasted {outage:?}, not less than the grace"
    );
    assert!(between(&lost, &reconnected) < Duration::from_secs(10));
    let route = wait_for_route_state(&relayd, &token, "ready", EVENT_TIMEOUT).await?;
    assert_eq!(route["worker_id"], worker_id.as_str(), "{route}");
    // The same process resumed: no second worker was ever started.
    assert_eq!(user.worker_pids(), [worker_pid]);
    assert_eq!(relayd.logs().events_named("worker_staged").len(), 1);
    assert!(relayd.logs().events_named("worker_removed").is_empty());
    assert_through_worker(
        &relayd,
        &stand_in,
        worker_pid,
        anthropic_request(&token, &marker("after-cut")?)?,
    )
    .await?;
    let log = user.worker_log_text();
    assert!(log.contains("worker control lost"), "{log}");
    assert!(
        mcp.logs()
            .events_named("daemon_mcp_pass_through")
            .is_empty(),
        "{}",
        context(&relayd, &user, &[&mcp])
    );
    Ok(())
}

#[tokio::test]
async fn a_control_cut_longer_than_the_grace_ends_the_worker_and_a_new_generation_takes_over()
-> anyhow::Result<()> {
    let stand_in = StandIn::start().await?;
    let cut = ControlCut::bind().await?;
    // Strict mode: requests during the cut get 503 instead of passing through. The worker
    // waits `reconnect_first_ms` (1 s) after its grace before it gives up, so relayd's
    // recovery deadline always comes first.
    let relayd = Relayd::builder()?
        .config(fault_config(
            &stand_in,
            "activation_wait_ms = 0",
            "reconnect_grace_secs = 1\nreconnect_first_ms = 1000\ndrain_secs = 1\nretry_base_ms = 200",
        ))
        .args(["--advertise-address", &cut.origin(), "--require-worker"])
        .start()
        .await?;
    let cut = cut.forward_to(relayd.addr());
    let user = user_for(&stand_in)?;
    let token = fresh_token()?;
    let mcp = ready_mcp(&user, &cut.origin(), &token).await?;
    let (old_id, old_pid) = first_worker(&relayd, &user).await?;

    cut.cut(WORKER_PATH);
    let lost = event_with(
        relayd.logs(),
        "worker_control_lost",
        "worker_id",
        &old_id,
        EVENT_TIMEOUT,
    )
    .await?;
    let (status, headers, body) = fetch(relayd.addr(), anthropic_request(&token, "cut")?).await?;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(headers.get("retry-after").is_some(), "{headers:?}");
    let error: serde_json::Value = serde_json::from_slice(&body)?;
    assert_eq!(
        error["error"]["type"], "relay_worker_unavailable",
        "{error}"
    );
    assert_eq!(stand_in.request_count(), 0, "a 503 forwards nothing");

    // The grace runs out: relayd revokes the generation and hands the MCP a fresh grant;
    // the old process exits (relay-mcp ends the child whose grant is gone before it
    // launches the next, and the worker itself would give up after its own grace).
    let failed = event_with(
        relayd.logs(),
        "worker_recovery_failed",
        "worker_id",
        &old_id,
        WORKER_TIMEOUT,
    )
    .await?;
    let waited = between(&lost, &failed);
    assert!(
        waited >= Duration::from_millis(990) && waited < Duration::from_secs(4),
        "recovery failed {waited:?} after the loss; the grace is 1 s"
    );
    let removed = event_with(
        relayd.logs(),
        "worker_removed",
        "worker_id",
        &old_id,
        EVENT_TIMEOUT,
    )
    .await?;
    assert_eq!(field(&removed, "reason"), "revoked", "{removed}");
    user.wait_for_exit(old_pid, WORKER_TIMEOUT).await?;

    // The new generation's registration waits behind the cut; once restored it goes on.
    relayd
        .wait_for_log_event("worker_staged", EVENT_TIMEOUT)
        .await?;
    cut.restore(WORKER_PATH);
    let added = nth_event(relayd.logs(), "worker_added", 2, WORKER_TIMEOUT).await?;
    let new_id = field(&added, "worker_id").to_owned();
    assert_ne!(new_id, old_id);
    let new_pid = user.wait_for_workers(1, WORKER_TIMEOUT).await?[0];
    assert_ne!(new_pid, old_pid);
    assert_eq!(procfs::parent_pid(new_pid), Some(mcp.pid()?));
    let route = wait_for_route_state(&relayd, &token, "ready", EVENT_TIMEOUT).await?;
    assert_eq!(route["worker_id"], new_id.as_str(), "{route}");
    assert_through_worker(
        &relayd,
        &stand_in,
        new_pid,
        anthropic_request(&token, &marker("new-generation")?)?,
    )
    .await?;
    assert!(
        relayd
            .logs()
            .events_named("worker_control_reconnected")
            .is_empty(),
        "{}",
        context(&relayd, &user, &[&mcp])
    );
    Ok(())
}

#[tokio::test]
async fn after_a_relayd_restart_requests_pass_through_until_the_session_returns_to_the_same_worker()
-> anyhow::Result<()> {
    let stand_in = StandIn::start().await?;
    let cut = ControlCut::bind().await?;
    // The harness keeps relayd's socket, as systemd's relayd.socket does, so the restarted
    // relayd serves on the same port.
    let mut relayd = Relayd::builder()?
        .config(fault_config(
            &stand_in,
            "activation_wait_ms = 0",
            "reconnect_grace_secs = 15\ndrain_secs = 1\nretry_base_ms = 200",
        ))
        .args(["--advertise-address", &cut.origin()])
        .keep_socket()
        .start()
        .await?;
    let cut = cut.forward_to(relayd.addr());
    let user = user_for(&stand_in)?;
    let token = fresh_token()?;
    let mut mcp = ready_mcp(&user, &cut.origin(), &token).await?;
    let (worker_id, worker_pid) = first_worker(&relayd, &user).await?;
    let mcp_pid = mcp.pid()?;

    // Hold the MCP back so the test sees the window before it registers again; the worker's
    // path stays open and it resumes on its own.
    cut.cut(MCP_PATH);
    relayd
        .wait_for_log_event("mcp_control_disconnected", EVENT_TIMEOUT)
        .await?;
    let status = relayd.stop().await?;
    assert_eq!(status.code(), Some(0), "{}", relayd.logs().text());
    relayd.start_again().await?;

    // Bindings survived the restart, references did not (§3.5, §5.7).
    assert_passed_through(
        &relayd,
        &stand_in,
        anthropic_request(&token, &marker("after-restart")?)?,
        "no_live_session",
    )
    .await?;
    let route = route_status(&relayd, &token).await?;
    assert_eq!(route["route_mode"], "pass_through", "{route}");
    assert_eq!(route["reason"], "no_live_session", "{route}");

    cut.restore(MCP_PATH);
    let reconnected = reconnected(&relayd, &worker_id, WORKER_TIMEOUT).await?;
    assert_eq!(field(&reconnected, "worker_id"), worker_id);
    let route = wait_for_route_state(&relayd, &token, "ready", EVENT_TIMEOUT).await?;
    assert_eq!(route["worker_id"], worker_id.as_str(), "{route}");
    assert_through_worker(
        &relayd,
        &stand_in,
        worker_pid,
        anthropic_request(&token, &marker("resumed")?)?,
    )
    .await?;
    // The same worker process, the same relay-mcp process: nothing was restarted.
    assert_eq!(user.worker_pids(), [worker_pid]);
    assert!(relayd.logs().events_named("worker_staged").is_empty());
    assert!(relayd.logs().events_named("worker_added").is_empty());
    assert_eq!(mcp.pid()?, mcp_pid);
    assert!(mcp.try_status()?.is_none(), "relay-mcp exited");
    // relay-mcp settled its route a second time, on the same worker.
    let settled = mcp
        .logs()
        .wait_for_events("daemon_mcp_ready", 2, EVENT_TIMEOUT)
        .await?;
    assert_eq!(field(&settled[1], "route_mode"), "worker", "{settled:?}");
    assert_eq!(procfs::parent_pid(worker_pid), Some(mcp_pid));
    super::support::assert_serves_mcp(&mut mcp, 7).await?;
    Ok(())
}

#[tokio::test]
async fn sigterm_leaves_the_clients_running_and_they_resume_when_relayd_returns()
-> anyhow::Result<()> {
    let stand_in = StandIn::start().await?;
    // Through a tap, to read the `DaemonStopping` each client was sent.
    let tap = Tap::bind().await?;
    let mut relayd = Relayd::builder()?
        .config(fault_config(
            &stand_in,
            "",
            "reconnect_grace_secs = 15\ndrain_secs = 1\nretry_base_ms = 200",
        ))
        .args(["--advertise-address", &tap.origin()])
        .keep_socket()
        .start()
        .await?;
    let tap = tap.forward_to(relayd.addr());
    let user = user_for(&stand_in)?;
    let token = fresh_token()?;
    let mut mcp = ready_mcp(&user, &tap.origin(), &token).await?;
    let (worker_id, worker_pid) = first_worker(&relayd, &user).await?;

    relayd.terminate()?;
    let status = relayd.wait_exit(STOP_TIMEOUT).await?;
    assert_eq!(status.code(), Some(0), "{}", relayd.logs().text());
    relayd
        .wait_for_log_event("daemon_stopped", EVENT_TIMEOUT)
        .await?;
    // Both clients were told, and keep running in their grace.
    let sessions = relay_e2e::ws::control_sessions(&tap.exchanges());
    for path in [MCP_PATH, WORKER_PATH] {
        let told = sessions
            .iter()
            .filter(|s| s.path == path)
            .flat_map(|s| &s.from_daemon)
            .any(|m| {
                matches!(
                    m,
                    Message::DaemonStopping {
                        restart_expected: true
                    }
                )
            });
        assert!(told, "no DaemonStopping on {path}");
    }
    assert!(mcp.try_status()?.is_none(), "relay-mcp exited with relayd");
    assert!(
        procfs::is_alive(worker_pid),
        "the worker exited with relayd"
    );

    relayd.start_again().await?;
    let reconnected = reconnected(&relayd, &worker_id, WORKER_TIMEOUT).await?;
    assert_eq!(field(&reconnected, "worker_id"), worker_id);
    let route = wait_for_route_state(&relayd, &token, "ready", EVENT_TIMEOUT).await?;
    assert_eq!(route["worker_id"], worker_id.as_str(), "{route}");
    assert_through_worker(
        &relayd,
        &stand_in,
        worker_pid,
        anthropic_request(&token, &marker("returned")?)?,
    )
    .await?;
    assert_eq!(user.worker_pids(), [worker_pid]);
    assert!(relayd.logs().events_named("worker_staged").is_empty());
    assert!(mcp.try_status()?.is_none(), "relay-mcp exited");
    let added = relayd
        .wait_for_log_event("mcp_added", EVENT_TIMEOUT)
        .await?;
    assert_eq!(added["references"], 1, "{added}");
    let settled = mcp
        .logs()
        .wait_for_events("daemon_mcp_ready", 2, EVENT_TIMEOUT)
        .await?;
    assert_eq!(field(&settled[1], "route_mode"), "worker", "{settled:?}");
    let log = user.worker_log_text();
    assert!(log.contains("daemon_stopping"), "{log}");
    // The daemon keeps no MCP session across a restart: relay-mcp registers anew rather than
    // spending a handshake on a resume that would be refused.
    let mcp_openings: Vec<_> = relay_e2e::ws::control_sessions(&tap.exchanges())
        .into_iter()
        .filter(|s| s.path == MCP_PATH)
        .filter_map(|s| s.from_client.get(1).map(Message::kind))
        .collect();
    assert_eq!(
        mcp_openings,
        [
            relay_proto::Kind::RegisterMcp,
            relay_proto::Kind::RegisterMcp
        ],
        "the MCP's message after Hello on each control session"
    );
    super::support::assert_serves_mcp(&mut mcp, 3).await?;
    Ok(())
}

/// Two sessions of one user share the worker that the first launched. After relayd
/// restarts, the worker resumes and the restarted daemon owns it; it has no record of the
/// launch, so when the launching session ends, its relay-mcp must leave the worker to the
/// daemon rather than kill it under the other session.
#[tokio::test]
async fn after_a_relayd_restart_the_launching_session_ending_leaves_the_shared_worker_serving()
-> anyhow::Result<()> {
    let stand_in = StandIn::start().await?;
    let mut relayd = Relayd::builder()?
        .config(fault_config(
            &stand_in,
            "",
            "reconnect_grace_secs = 15\ndrain_secs = 1\nretry_base_ms = 200",
        ))
        .keep_socket()
        .start()
        .await?;
    let user = user_for(&stand_in)?;
    let token = fresh_token()?;
    let mut launcher = ready_mcp(&user, &relayd.origin(), &token).await?;
    let (worker_id, worker_pid) = first_worker(&relayd, &user).await?;
    let other = ready_mcp(&user, &relayd.origin(), &token).await?;

    let status = relayd.stop().await?;
    assert_eq!(status.code(), Some(0), "{}", relayd.logs().text());
    relayd.start_again().await?;
    reconnected(&relayd, &worker_id, WORKER_TIMEOUT).await?;
    for mcp in [&launcher, &other] {
        mcp.logs()
            .wait_for_events("daemon_mcp_ready", 2, EVENT_TIMEOUT)
            .await?;
    }
    wait_for_route_state(&relayd, &token, "ready", EVENT_TIMEOUT).await?;

    launcher.close_stdin();
    let status = launcher.wait(STOP_TIMEOUT).await?;
    assert!(status.success(), "{status:?}\n{}", launcher.logs().text());
    assert!(
        procfs::is_alive(worker_pid),
        "the launching relay-mcp killed the shared worker\n{}",
        launcher.logs().text()
    );
    assert_through_worker(
        &relayd,
        &stand_in,
        worker_pid,
        anthropic_request(&token, &marker("after-the-launcher")?)?,
    )
    .await?;
    assert_eq!(user.worker_pids(), [worker_pid]);
    Ok(())
}
