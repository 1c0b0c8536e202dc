//! Route credentials under pressure and after an administrator acts (SPEC §5.3, §5.4, §2.1):
//! the per-identity token limit evicts an idle token and refuses a fifth live one, bindings
//! survive a restart and stay bound to their machine identity, and `relayd bindings revoke`
//! ends a live route. In every case relay-mcp keeps serving MCP: a refused or revoked route
//! never breaks the harness session (§6).

use http::StatusCode;
use relay_e2e::http::fetch;
use relay_e2e::{Relayd, User};
use relay_identity::{RouteToken, SigningKey};
use relay_testkit::StandIn;

use super::support::{
    CLI_TIMEOUT, EVENT_TIMEOUT, INITIALIZE_TIMEOUT, WORKER_TIMEOUT, anthropic_request,
    assert_passed_through, assert_serves_mcp, context, event_with, fault_config, field,
    fresh_token, marker, ready_mcp, route_status, spawn_mcp, user_for,
};

/// The 12-hex-digit prefix relayd logs for a route token's digest.
fn digest_prefix(token: &str) -> anyhow::Result<String> {
    Ok(RouteToken::parse(token)?.digest().to_string()[..12].to_owned())
}

/// The full fingerprint of `user`'s machine identity (created by its first relay-mcp).
fn fingerprint(user: &User) -> anyhow::Result<String> {
    Ok(SigningKey::load(&user.machine_key_file())?
        .fingerprint()
        .to_string())
}

/// Starts a relay-mcp whose registration relayd refuses with `reason`, and checks it says
/// so and still serves MCP.
async fn assert_refused_but_serving(
    relayd: &Relayd,
    user: &User,
    token: &str,
    reason: &str,
) -> anyhow::Result<relay_e2e::Mcp> {
    // Other sessions may be refused meanwhile (a resume after a restart is
    // `session_unknown`), so only refusals with this reason count.
    let with_reason = |logs: &relay_e2e::Logs| -> Vec<serde_json::Value> {
        logs.events_named("control_registration_refused")
            .into_iter()
            .filter(|e| field(e, "reason") == reason)
            .collect()
    };
    let before = with_reason(relayd.logs()).len();
    let mut mcp = spawn_mcp(user, &relayd.origin(), token, None)?;
    let answer = mcp.initialize("2025-11-25", INITIALIZE_TIMEOUT).await?;
    assert_eq!(
        answer["result"]["protocolVersion"], "2025-11-25",
        "{answer}"
    );
    let refused = relayd
        .logs()
        .wait_for(&format!("a refusal {reason}"), EVENT_TIMEOUT, |logs| {
            with_reason(logs).get(before).cloned()
        })
        .await?;
    assert_eq!(field(&refused, "role"), "mcp", "{refused}");
    assert!(
        fingerprint(user)?.starts_with(field(&refused, "fingerprint")),
        "another identity was refused: {refused}"
    );
    let settled = mcp
        .logs()
        .wait_for_event("daemon_mcp_pass_through", EVENT_TIMEOUT)
        .await?;
    assert_eq!(
        field(&settled, "reason"),
        "credential_rejected",
        "{settled}"
    );
    // The user's own log says why, without the daemon's.
    assert_eq!(field(&settled, "refused"), reason, "{settled}");
    assert_serves_mcp(&mut mcp, 2).await?;
    assert!(
        mcp.try_status()?.is_none(),
        "relay-mcp exited after a refusal"
    );
    Ok(mcp)
}

#[tokio::test]
async fn the_token_limit_evicts_an_idle_token_refuses_a_fifth_live_one_and_bindings_outlive_a_restart()
-> anyhow::Result<()> {
    let stand_in = StandIn::start().await?;
    let mut relayd = Relayd::builder()?
        .config(fault_config(
            &stand_in,
            "max_tokens_per_identity = 4",
            "drain_secs = 1\nreconnect_grace_secs = 5\nretry_base_ms = 200",
        ))
        .keep_socket()
        .start()
        .await?;
    let user = user_for(&stand_in)?;
    let origin = relayd.origin();
    let tokens: Vec<String> = (0..6).map(|_| fresh_token()).collect::<Result<_, _>>()?;

    // The first token's session comes and goes: its binding stays, idle.
    let mut first = ready_mcp(&user, &origin, &tokens[0]).await?;
    first.close_stdin();
    assert_eq!(
        first.wait(super::support::MCP_EXIT_TIMEOUT).await?.code(),
        Some(0)
    );
    let mut live = Vec::new();
    for token in &tokens[1..4] {
        live.push(ready_mcp(&user, &origin, token).await?);
    }
    assert_eq!(
        route_status(&relayd, &tokens[0]).await?["route_mode"],
        "worker"
    );

    // A fifth token of the same identity: the idle one is evicted to make room.
    live.push(ready_mcp(&user, &origin, &tokens[4]).await?);
    let evicted = relayd
        .wait_for_log_event("route_credential_evicted", EVENT_TIMEOUT)
        .await?;
    assert_eq!(
        field(&evicted, "credential_digest"),
        digest_prefix(&tokens[0])?,
        "{evicted}"
    );
    assert_eq!(evicted["max_tokens_per_identity"], 4, "{evicted}");
    let route = route_status(&relayd, &tokens[0]).await?;
    assert_eq!(route["reason"], "unbound_credential", "{route}");
    assert_eq!(route["state"], "none", "{route}");

    // All four are live now: a sixth token is refused, and its session still works.
    let refused = assert_refused_but_serving(&relayd, &user, &tokens[5], "token_limit").await?;
    assert_eq!(
        relayd.logs().events_named("route_credential_evicted").len(),
        1,
        "a live token was evicted"
    );
    let route = route_status(&relayd, &tokens[5]).await?;
    assert_eq!(route["reason"], "unbound_credential", "{route}");
    for token in &tokens[1..5] {
        assert_eq!(route_status(&relayd, token).await?["route_mode"], "worker");
    }

    // After a restart the bindings hold: another machine identity (another user's key)
    // can take neither a bound token nor the evicted one, whose tombstone guards it.
    let status = relayd.stop().await?;
    assert_eq!(status.code(), Some(0), "{}", relayd.logs().text());
    relayd.start_again().await?;
    let other = user_for(&stand_in)?;
    let mut others = Vec::new();
    for token in [&tokens[1], &tokens[0]] {
        others.push(
            assert_refused_but_serving(&relayd, &other, token, "credential_bound_elsewhere")
                .await?,
        );
    }
    // The owner's sessions came back to their route.
    relayd
        .logs()
        .wait_for("mcp_added with 4 references", WORKER_TIMEOUT, |logs| {
            logs.events_named("mcp_added")
                .into_iter()
                .find(|e| e["references"] == 4)
        })
        .await?;
    assert_eq!(
        route_status(&relayd, &tokens[1]).await?["route_mode"],
        "worker",
        "{}",
        context(&relayd, &user, &[])
    );
    drop((live, refused, others));
    Ok(())
}

#[tokio::test]
async fn bindings_revoke_ends_a_live_route_and_its_worker() -> anyhow::Result<()> {
    let stand_in = StandIn::start().await?;
    let relayd = Relayd::builder()?
        .config(fault_config(
            &stand_in,
            "",
            "drain_secs = 1\nreconnect_grace_secs = 2\nretry_base_ms = 200",
        ))
        .start()
        .await?;
    let user = user_for(&stand_in)?;
    let token = fresh_token()?;
    let mut mcp = ready_mcp(&user, &relayd.origin(), &token).await?;
    let added = relayd
        .wait_for_log_event("worker_added", WORKER_TIMEOUT)
        .await?;
    let worker_id = field(&added, "worker_id").to_owned();
    let worker_pid = user.wait_for_workers(1, WORKER_TIMEOUT).await?[0];

    let fp = fingerprint(&user)?;
    let listed = relayd.cli(["bindings", "list"], CLI_TIMEOUT).await?;
    assert_eq!(listed.status.code(), Some(0), "{listed:?}");
    assert!(listed.stdout.starts_with(&fp), "{listed:?}");
    let revoked = relayd.cli(["bindings", "revoke", &fp], CLI_TIMEOUT).await?;
    assert_eq!(revoked.status.code(), Some(0), "{revoked:?}");
    assert!(revoked.stdout.contains("revoked"), "{revoked:?}");

    // The session is closed with `Refused { revoked }`; relay-mcp says so and keeps
    // serving MCP without a route.
    let settled = mcp
        .logs()
        .wait_for_event("daemon_mcp_pass_through", EVENT_TIMEOUT)
        .await?;
    assert_eq!(
        field(&settled, "reason"),
        "credential_rejected",
        "{settled}"
    );
    assert_eq!(field(&settled, "refused"), "revoked", "{settled}");
    assert!(
        mcp.logs().text().contains("revoked"),
        "{}",
        mcp.logs().text()
    );
    assert_serves_mcp(&mut mcp, 5).await?;
    assert!(
        mcp.try_status()?.is_none(),
        "relay-mcp exited after the revoke"
    );
    let removed = event_with(
        relayd.logs(),
        "mcp_removed",
        "reason",
        "revoked",
        EVENT_TIMEOUT,
    )
    .await?;
    assert_eq!(removed["references"], 0, "{removed}");

    // The worker is retired: it drains, leaves the status and exits.
    let gone = event_with(
        relayd.logs(),
        "worker_removed",
        "worker_id",
        &worker_id,
        EVENT_TIMEOUT,
    )
    .await?;
    assert_eq!(field(&gone, "reason"), "revoked", "{gone}");
    user.wait_for_exit(worker_pid, WORKER_TIMEOUT).await?;
    // relay-mcp reaps it then, rather than leaving a zombie until the harness session ends.
    mcp.logs()
        .wait_for_event("worker_stopped", EVENT_TIMEOUT)
        .await?;
    assert!(
        !std::path::Path::new(&format!("/proc/{worker_pid}")).exists(),
        "the retired worker was not reaped"
    );
    assert!(super::support::workers_status(&relayd).await?.is_empty());

    // The credential routes nowhere now: it counts as unbound and passes through.
    let route = route_status(&relayd, &token).await?;
    assert_eq!(route["route_mode"], "pass_through", "{route}");
    assert_eq!(route["reason"], "unbound_credential", "{route}");
    assert_passed_through(
        &relayd,
        &stand_in,
        anthropic_request(&token, &marker("revoked")?)?,
        "unbound_credential",
    )
    .await?;
    // A hook with it gets the pass-through answer, not the worker's.
    let (status, _, body) = fetch(
        relayd.addr(),
        relay_e2e::http::post_json(
            "/hooks/claude-code",
            &[("x-relay-client-token", &token)],
            r#"{"hook_event_name":"PreToolUse","tool_name":"Bash"}"#,
        )?,
    )
    .await?;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(&body[..], br#"{"continue":true}"#);
    Ok(())
}
