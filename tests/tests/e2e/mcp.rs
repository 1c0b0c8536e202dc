//! `relay-mcp` as the real harnesses drive it (SPEC §2.2, §5.5, §6): the captured Claude Code
//! and Codex sessions are answered with their protocol version echoed, and every way a
//! harness ends the session (SIGINT, SIGTERM, end of stdin) makes it exit 0 at once and
//! release its reference, until the last one lets the worker drain and exit.

use std::path::PathBuf;
use std::time::Instant;

use relay_e2e::{Mcp, Relayd, User};
use relay_testkit::StandIn;
use rustix::process::Signal;

use super::support::{
    EVENT_TIMEOUT, INITIALIZE_TIMEOUT, MCP_EXIT_TIMEOUT, WORKER_TIMEOUT, context, field,
    fresh_token, ready_mcp, spawn_mcp, upstream_config, user_for, worker_config, workers_status,
};

/// The MCP stdio sessions captured from the real CLIs.
fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../bins/relay-mcp/tests/fixtures")
        .join(name)
}

/// Starts relay-mcp, replays a captured session, and checks the answers: `initialize`
/// echoes `version`, `tools/list` is empty, and the notification gets nothing (the next
/// line answers a `ping` sent after it).
async fn replay(
    user: &User,
    relayd: &Relayd,
    token: &str,
    name: &str,
    version: &str,
) -> anyhow::Result<Mcp> {
    let mut mcp = user
        .mcp(&relayd.origin())?
        .token(token)
        .log("info", "jsonl")
        .spawn()?;
    // As the clients do, each request waits for its answer (a client sends nothing after
    // `initialize` until it is answered, and relay-mcp may hold that answer, §6).
    let session = std::fs::read_to_string(fixture(name))?;
    let mut answers = Vec::new();
    for line in session.lines() {
        mcp.send(line).await?;
        let request: serde_json::Value = serde_json::from_str(line)?;
        if request.get("id").is_some() {
            answers.push(mcp.next_json(INITIALIZE_TIMEOUT).await?);
        }
    }
    let [initialize, tools] = &answers[..] else {
        panic!("{name}: expected two answers, got {answers:?}");
    };
    assert_eq!(initialize["id"], 0, "{initialize}");
    assert_eq!(
        initialize["result"]["protocolVersion"], version,
        "{initialize}"
    );
    assert_eq!(
        initialize["result"]["serverInfo"]["name"], "relay",
        "{initialize}"
    );
    assert_eq!(
        initialize["result"]["capabilities"],
        serde_json::json!({"tools": {}}),
        "{initialize}"
    );
    assert_eq!(tools["id"], 1, "{tools}");
    assert_eq!(tools["result"], serde_json::json!({"tools": []}), "{tools}");
    mcp.send(r#"{"jsonrpc":"2.0","id":"after","method":"ping"}"#)
        .await?;
    let pong = mcp.next_json(EVENT_TIMEOUT).await?;
    assert_eq!(pong["id"], "after", "the notification was answered: {pong}");
    assert_eq!(pong["result"], serde_json::json!({}), "{pong}");
    Ok(mcp)
}

/// Waits for relayd's `mcp_removed` leaving `references`, released.
async fn assert_released(relayd: &Relayd, references: u64) -> anyhow::Result<()> {
    let removed = relayd
        .logs()
        .wait_for(
            &format!("mcp_removed leaving {references}"),
            EVENT_TIMEOUT,
            |logs| {
                logs.events_named("mcp_removed")
                    .into_iter()
                    .find(|event| event["references"] == references)
            },
        )
        .await?;
    assert_eq!(field(&removed, "reason"), "released", "{removed}");
    Ok(())
}

/// Ends `mcp` with `how` and checks it exits 0 within the 2 s of §5.5 (plus a margin).
async fn end(mut mcp: Mcp, how: Option<Signal>) -> anyhow::Result<Mcp> {
    let started = Instant::now();
    match how {
        Some(signal) => mcp.signal(signal)?,
        None => mcp.close_stdin(),
    }
    let status = mcp.wait(MCP_EXIT_TIMEOUT).await?;
    assert_eq!(status.code(), Some(0), "{how:?}: {}", mcp.logs().text());
    let took = started.elapsed();
    assert!(
        took < std::time::Duration::from_millis(2500),
        "{how:?}: relay-mcp took {took:?} to exit"
    );
    Ok(mcp)
}

#[tokio::test]
async fn relay_mcp_answers_the_captured_sessions_and_releases_on_every_way_out()
-> anyhow::Result<()> {
    let stand_in = StandIn::start().await?;
    let relayd = Relayd::builder()?
        .config(worker_config(&stand_in, ""))
        .start()
        .await?;
    let user = user_for(&stand_in)?;
    let token = fresh_token()?;
    let claude = replay(
        &user,
        &relayd,
        &token,
        "claude-code-initialize.jsonl",
        "2025-11-25",
    )
    .await?;
    let codex = replay(
        &user,
        &relayd,
        &token,
        "codex-initialize.jsonl",
        "2025-06-18",
    )
    .await?;
    let mut plain = user
        .mcp(&relayd.origin())?
        .token(&token)
        .log("info", "jsonl")
        .spawn()?;
    let answer = plain.initialize("2025-03-26", INITIALIZE_TIMEOUT).await?;
    assert_eq!(
        answer["result"]["protocolVersion"], "2025-03-26",
        "{answer}"
    );
    let workers = workers_status(&relayd).await?;
    assert_eq!(workers.len(), 1, "{workers:?}");
    assert_eq!(workers[0]["reference_count"], 3, "{workers:?}");
    user.wait_for_workers(1, WORKER_TIMEOUT).await?;

    // Claude Code stops its server with SIGINT, Codex with SIGTERM; stdin EOF is the third
    // way out.
    let claude = end(claude, Some(Signal::INT)).await?;
    assert_released(&relayd, 2).await?;
    assert_eq!(workers_status(&relayd).await?[0]["reference_count"], 2);
    let codex = end(codex, Some(Signal::TERM)).await?;
    assert_released(&relayd, 1).await?;
    assert_eq!(workers_status(&relayd).await?[0]["reference_count"], 1);
    let plain = end(plain, None).await?;
    assert_released(&relayd, 0).await?;

    // The last reference left: the worker drains and exits (drain_secs = 1).
    relayd
        .wait_for_log_event("worker_drain_started", EVENT_TIMEOUT)
        .await?;
    let removed = relayd
        .wait_for_log_event("worker_removed", WORKER_TIMEOUT)
        .await?;
    assert_eq!(
        field(&removed, "reason"),
        "drained",
        "{}",
        context(&relayd, &user, &[&claude, &codex, &plain])
    );
    user.wait_for_workers(0, WORKER_TIMEOUT).await?;
    assert!(workers_status(&relayd).await?.is_empty());
    Ok(())
}

/// Against a daemon started with `--pass-through`, relay-mcp says the route passes through
/// because the daemon is configured so (an `info`), not that a worker failed to start (a
/// warning every session of such a deployment would print).
#[tokio::test]
async fn against_a_pass_through_daemon_the_reason_logged_is_the_configuration() -> anyhow::Result<()>
{
    let stand_in = StandIn::start().await?;
    let relayd = Relayd::builder()?
        .config(upstream_config(&stand_in, ""))
        .arg("--pass-through")
        .start()
        .await?;
    let user = user_for(&stand_in)?;
    let mut mcp = spawn_mcp(&user, &relayd.origin(), &fresh_token()?, None)?;
    let answer = mcp.initialize("2025-11-25", INITIALIZE_TIMEOUT).await?;
    assert_eq!(
        answer["result"]["protocolVersion"], "2025-11-25",
        "{answer}"
    );
    let event = mcp
        .logs()
        .wait_for_event("daemon_mcp_pass_through", EVENT_TIMEOUT)
        .await?;
    assert_eq!(
        field(&event, "reason"),
        "configured_pass_through",
        "{event}"
    );
    assert_eq!(event["level"], "info", "{event}");
    Ok(())
}

/// With the daemon down, relay-mcp answers `initialize` at once, without holding the
/// harness for the registration wait, and says why it serves without a route.
#[tokio::test]
async fn with_the_daemon_down_initialize_is_answered_at_once_and_the_reason_logged()
-> anyhow::Result<()> {
    let stand_in = StandIn::start().await?;
    let user = user_for(&stand_in)?;
    // A loopback port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let mut mcp = spawn_mcp(
        &user,
        &format!("http://127.0.0.1:{port}"),
        &fresh_token()?,
        None,
    )?;
    let started = Instant::now();
    let answer = mcp.initialize("2025-11-25", INITIALIZE_TIMEOUT).await?;
    let took = started.elapsed();
    assert_eq!(
        answer["result"]["protocolVersion"], "2025-11-25",
        "{answer}"
    );
    // The registration wait is 5 s; a refused connection ends it.
    assert!(
        took < std::time::Duration::from_secs(4),
        "initialize took {took:?}\n{}",
        mcp.logs().text()
    );
    let event = mcp
        .logs()
        .wait_for_event("daemon_mcp_pass_through", EVENT_TIMEOUT)
        .await?;
    assert_eq!(field(&event, "reason"), "daemon_unreachable", "{event}");
    Ok(())
}

/// A daemon that keeps refusing the registration (here: the route's sessions are all
/// taken): when `initialize` stops waiting for it, relay-mcp answers and says why it serves
/// without a route, as for a daemon that is down.
#[tokio::test]
async fn a_registration_still_refused_when_initialize_stops_waiting_is_logged() -> anyhow::Result<()>
{
    let stand_in = StandIn::start().await?;
    let relayd = Relayd::builder()?
        .config(upstream_config(
            &stand_in,
            "\n[daemon]\nmax_sessions_per_route = 1\n",
        ))
        .start()
        .await?;
    let user = user_for(&stand_in)?;
    let token = fresh_token()?;
    let _first = ready_mcp(&user, &relayd.origin(), &token).await?;
    let mut second = spawn_mcp(&user, &relayd.origin(), &token, None)?;
    let answer = second.initialize("2025-11-25", INITIALIZE_TIMEOUT).await?;
    assert_eq!(
        answer["result"]["protocolVersion"], "2025-11-25",
        "{answer}"
    );
    let event = second
        .logs()
        .wait_for_event("daemon_mcp_pass_through", EVENT_TIMEOUT)
        .await?;
    assert_eq!(field(&event, "reason"), "daemon_unreachable", "{event}");
    Ok(())
}
