//! `relay-doctor --live` against a real relayd and a real relay-mcp with its worker (SPEC
//! §10.4): it reports `worker` for a session with a ready worker, and fails with the right
//! next step when the worker is gone, when the route passes through, and when the daemon's
//! key no longer matches the pin. Its output never contains the route token.

use std::process::Stdio;

use relay_e2e::{Mcp, Relayd, User};
use relay_identity::{Origin, SigningKey, format_pin};
use rustix::process::Signal;

use super::support::{
    CLI_TIMEOUT, INITIALIZE_TIMEOUT, STATUS_POLL, WORKER_TIMEOUT, fresh_token, report_check,
    route_status, user_for, wait_for_route_state, worker_config,
};

/// What one doctor run printed and how it exited.
struct Doctor {
    code: Option<i32>,
    json: serde_json::Value,
    raw: String,
}

impl Doctor {
    fn check(&self, id: &str) -> &serde_json::Value {
        report_check(&self.json, id)
    }
}

/// Runs `relay-doctor --live --daemon-address <relayd> --json` as `user` with `token`.
async fn doctor(relayd: &Relayd, user: &User, token: &str) -> anyhow::Result<Doctor> {
    let mut command = tokio::process::Command::new(relay_e2e::binary("relay-doctor")?);
    command
        .args(["--live", "--daemon-address", &relayd.origin(), "--json"])
        .env_clear()
        .env(relay_identity::names::HOME, user.home())
        .env(
            relay_identity::names::XDG_CONFIG_HOME,
            user.xdg_config_home(),
        )
        .env(
            relay_identity::names::RELAY_SYSTEM_CONFIG_DIR,
            user.system_config_dir(),
        )
        .env(relay_identity::names::RELAY_CLIENT_TOKEN, token)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    if let Some(path) = std::env::var_os("PATH") {
        command.env("PATH", path);
    }
    let output = tokio::time::timeout(CLI_TIMEOUT, command.output()).await??;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let raw = format!("{stdout}{stderr}");
    assert!(!raw.contains(token), "the doctor printed the route token");
    let json = serde_json::from_str(&stdout)
        .map_err(|e| anyhow::anyhow!("the doctor's stdout is not JSON ({e}): {raw}"))?;
    Ok(Doctor {
        code: output.status.code(),
        json,
        raw,
    })
}

/// relayd, a user whose relay-mcp holds a ready worker, and the token of that route.
async fn ready_session() -> anyhow::Result<(relay_testkit::StandIn, Relayd, User, Mcp, String)> {
    let stand_in = relay_testkit::StandIn::start().await?;
    let relayd = Relayd::builder()?
        .config(worker_config(&stand_in, ""))
        .start()
        .await?;
    let user = user_for(&stand_in)?;
    let token = fresh_token()?;
    let mut mcp = user.mcp(&relayd.origin())?.token(&token).spawn()?;
    mcp.initialize("2025-06-18", INITIALIZE_TIMEOUT).await?;
    wait_for_route_state(&relayd, &token, "ready", WORKER_TIMEOUT).await?;
    Ok((stand_in, relayd, user, mcp, token))
}

#[tokio::test]
async fn live_reports_worker_for_a_session_with_a_ready_worker() -> anyhow::Result<()> {
    let (_stand_in, relayd, user, _mcp, token) = ready_session().await?;
    let report = doctor(&relayd, &user, &token).await?;
    assert_eq!(report.code, Some(0), "{}", report.raw);
    assert_eq!(report.json["ok"], true, "{}", report.raw);
    assert_eq!(
        report.check("live.healthz")["status"],
        "ok",
        "{}",
        report.raw
    );
    assert_eq!(
        report.check("live.daemon_key")["status"],
        "ok",
        "{}",
        report.raw
    );
    assert_eq!(report.check("live.daemon_key")["details"]["pin"], "user");
    let route = report.check("live.route");
    assert_eq!(route["status"], "ok", "{}", report.raw);
    assert_eq!(route["details"]["route_mode"], "worker", "{}", report.raw);
    let worker = report.check("live.worker");
    assert_eq!(worker["status"], "ok", "{}", report.raw);
    assert_eq!(worker["details"]["state"], "ready");
    assert_eq!(worker["details"]["control_available"], true);
    assert_eq!(
        worker["details"]["worker_id"],
        route_status(&relayd, &token).await?["worker_id"]
    );
    Ok(())
}

#[tokio::test]
async fn live_fails_with_the_next_step_when_the_worker_is_gone() -> anyhow::Result<()> {
    let (_stand_in, relayd, user, mcp, token) = ready_session().await?;
    // The MCP is held still so that it cannot start the next worker: the route stays
    // without one while the doctor looks.
    mcp.signal(Signal::STOP)?;
    let workers = user.wait_for_workers(1, WORKER_TIMEOUT).await?;
    user.signal_worker(workers[0], Signal::KILL)?;
    // The daemon revokes the dead generation and asks the (held) MCP for a new worker.
    let route = wait_for_route_state(&relayd, &token, "activating", WORKER_TIMEOUT).await?;
    assert_eq!(route["route_mode"], "pass_through", "{route}");
    let report = doctor(&relayd, &user, &token).await?;
    mcp.signal(Signal::CONT)?;
    assert_eq!(report.code, Some(1), "{}", report.raw);
    let route = report.check("live.route");
    assert_eq!(route["status"], "fail", "{}", report.raw);
    assert_eq!(
        route["details"]["reason"], "worker_unavailable",
        "{}",
        report.raw
    );
    let next = route["next_step"].as_str().unwrap_or_default();
    assert!(next.contains("the worker is gone"), "{}", report.raw);
    // The daemon key still matches: only the worker is missing.
    assert_eq!(
        report.check("live.daemon_key")["status"],
        "ok",
        "{}",
        report.raw
    );
    Ok(())
}

#[tokio::test]
async fn live_fails_with_the_next_step_when_the_route_passes_through() -> anyhow::Result<()> {
    let (_stand_in, relayd, user, mut mcp, token) = ready_session().await?;
    // The session ends: the route keeps its binding but has no live MCP any more.
    mcp.close_stdin();
    mcp.wait(super::support::MCP_EXIT_TIMEOUT).await?;
    let deadline = tokio::time::Instant::now() + WORKER_TIMEOUT;
    let mut poll = tokio::time::interval(STATUS_POLL);
    loop {
        poll.tick().await;
        let route = route_status(&relayd, &token).await?;
        if route["reason"] == "no_live_session" {
            break;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the route did not lose its session: {route}"
        );
    }
    let report = doctor(&relayd, &user, &token).await?;
    assert_eq!(report.code, Some(1), "{}", report.raw);
    let route = report.check("live.route");
    assert_eq!(route["status"], "fail", "{}", report.raw);
    assert_eq!(route["details"]["route_mode"], "pass_through");
    assert_eq!(route["details"]["reason"], "no_live_session");
    assert!(
        route["summary"]
            .as_str()
            .unwrap_or_default()
            .contains("passes through because no_live_session"),
        "{}",
        report.raw
    );
    assert!(
        route["next_step"]
            .as_str()
            .unwrap_or_default()
            .contains("start a harness session so relay-mcp registers"),
        "{}",
        report.raw
    );
    Ok(())
}

#[tokio::test]
async fn live_fails_with_the_next_step_when_the_daemon_key_no_longer_matches_the_pin()
-> anyhow::Result<()> {
    let (_stand_in, relayd, user, _mcp, token) = ready_session().await?;
    let origin = Origin::parse(&relayd.origin())?;
    let pins: Vec<_> = std::fs::read_dir(user.pins_dir())?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .collect();
    assert_eq!(pins.len(), 1, "one pin after one session: {pins:?}");
    let other = SigningKey::generate()?.public_key();
    std::fs::write(&pins[0], format_pin(&origin, &other))?;

    let report = doctor(&relayd, &user, &token).await?;
    assert_eq!(report.code, Some(1), "{}", report.raw);
    let key = report.check("live.daemon_key");
    assert_eq!(key["status"], "fail", "{}", report.raw);
    assert_eq!(key["details"]["matches"], false);
    let next = key["next_step"].as_str().unwrap_or_default();
    assert!(next.contains("the daemon key changed"), "{}", report.raw);
    assert!(
        next.contains(&pins[0].display().to_string()),
        "the next step names the pin file: {}",
        report.raw
    );
    // The pin file was not touched by the doctor.
    assert_eq!(
        std::fs::read_to_string(&pins[0])?,
        format_pin(&origin, &other)
    );
    Ok(())
}
