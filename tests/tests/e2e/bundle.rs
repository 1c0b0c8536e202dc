//! The three agents as an administrator deploys them (SPEC §7.3, §10.2): `relayd
//! managed-bundle` writes the bundle, `relay-doctor --managed-bundle` checks it, and each
//! real CLI is launched from it with no other Relay configuration than the route token in
//! its environment (the commands of docs/harnesses.md). A tool round trip completes, every
//! model request and hook event goes through the ready worker, the provider sees no Relay
//! header, and the worker drains once the agent has gone.
//!
//! The binaries are the test build's, reached through symbolic links in a temporary bin
//! directory; the bundle allows that only because the test sets relayd's test-only switch
//! `RELAY_DANGEROUS_TEST_ONLY_ALLOW_TEMP_BIN_DIR` (a deployed bin directory is never
//! temporary).

use relay_testkit::TOOL_DONE_TEXT;

use super::deployment::{ClaudeInstall, CodexInstall, Deployment};
use super::support::HOOK_EVENTS;

/// As an administrator installs it: the bundle's two managed files in `/etc/claude-code`,
/// and Claude Code started with no flag.
#[tokio::test]
async fn claude_code_runs_from_the_bundle() -> anyhow::Result<()> {
    let deployment = Deployment::start().await?;
    let out = deployment
        .run_claude("run echo", serde_json::json!({"allow": ["Bash(echo:*)"]}))
        .await?;
    deployment
        .check(&out, "anthropic", "/hooks/claude-code", &HOOK_EVENTS)
        .await?;
    // relay-doctor sees that install as complete.
    let check = deployment.doctor_claude_code().await?;
    assert_eq!(check["status"], "ok", "{check}");
    Ok(())
}

/// As one user without root launches it: the same two files as `--settings` and
/// `--mcp-config`.
#[tokio::test]
async fn claude_code_runs_from_a_users_own_launch() -> anyhow::Result<()> {
    let deployment = Deployment::start().await?;
    let out = deployment
        .run_claude_as(
            ClaudeInstall::User,
            "run echo",
            serde_json::json!({"allow": ["Bash(echo:*)"]}),
        )
        .await?;
    deployment
        .check(&out, "anthropic", "/hooks/claude-code", &HOOK_EVENTS)
        .await
}

/// As an administrator installs it: the bundle's files in `/etc/codex`, where Codex runs
/// the hooks without asking the user to trust them first.
#[tokio::test]
async fn codex_runs_from_the_bundle() -> anyhow::Result<()> {
    let deployment = Deployment::start().await?;
    let out = deployment
        .run_codex("run echo", CodexInstall::System)
        .await?;
    deployment
        .check(&out, "openai", "/hooks/codex", &HOOK_EVENTS)
        .await?;
    let turn = deployment
        .stand_in
        .requests()
        .into_iter()
        .find(|r| r.method == "POST")
        .unwrap_or_else(|| deployment.fail(&out, "no model request"));
    assert_eq!(
        turn.header_str("authorization"),
        Some("Bearer sk-test-openai"),
        "the user's own key reaches the provider"
    );
    Ok(())
}

/// As one user installs it without root: the bundle merged into their own `config.toml`,
/// its hooks beside it and trusted by that user.
#[tokio::test]
async fn codex_runs_from_a_users_own_install() -> anyhow::Result<()> {
    let deployment = Deployment::start().await?;
    let out = deployment.run_codex("run echo", CodexInstall::User).await?;
    deployment
        .check(&out, "openai", "/hooks/codex", &HOOK_EVENTS)
        .await
}

#[tokio::test]
async fn pi_runs_from_the_bundle() -> anyhow::Result<()> {
    let deployment = Deployment::start().await?;
    let out = deployment.run_pi("run echo", true).await?;
    deployment
        .check(
            &out,
            "anthropic",
            "/hooks/pi",
            &[
                "session_start",
                "input",
                "agent_start",
                "before_provider_request",
                "after_provider_response",
                "tool_call",
                "tool_result",
                "agent_end",
                "session_shutdown",
            ],
        )
        .await?;
    let turn = deployment
        .stand_in
        .requests()
        .into_iter()
        .find(|r| r.method == "POST")
        .unwrap_or_else(|| deployment.fail(&out, "no model request"));
    assert_eq!(
        turn.header_str("x-api-key"),
        Some("sk-ant-pi-test"),
        "the user's own key reaches the provider"
    );
    assert_eq!(
        out.stderr.matches("not routed through Relay").count(),
        1,
        "{out}"
    );
    assert!(out.stderr.contains("other"), "{out}");
    // relay-doctor finds the extension where pi loaded it from, whole.
    let check = deployment.doctor_pi().await?;
    assert_eq!(check["status"], "ok", "{check}");
    Ok(())
}

/// A policy refusal of pi's `tool_call` (relay-hook exit 2 with the reason on stderr, as
/// relay-hook answers a 403 `relay_policy_rejected`) stops the tool: pi hands the model the
/// reason instead of the command's output.
#[tokio::test]
async fn pi_blocks_a_tool_call_relay_hook_refuses() -> anyhow::Result<()> {
    // Refuses tool_call, forwards everything else to the real relay-hook.
    let script = r#"body=$(cat)
case "$body" in
  *'"hook_event_name":"tool_call"'*) echo "denied by the test policy" >&2; exit 2 ;;
esac
printf '%s' "$body" | exec "$RELAY_HOOK" "$@"
"#;
    let deployment = Deployment::start_with_hook(Some(script)).await?;
    let out = deployment.run_pi("run echo", false).await?;
    if !out.status.success() || !out.stdout.contains(TOOL_DONE_TEXT) {
        deployment.fail(&out, "pi did not finish after the refused tool call");
    }
    let turns: Vec<_> = deployment
        .stand_in
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST")
        .collect();
    let Some(last) = turns.last().filter(|_| turns.len() >= 2) else {
        deployment.fail(&out, "no second model turn carried the tool result");
    };
    let body = String::from_utf8_lossy(&last.body);
    assert!(
        body.contains("denied by the test policy"),
        "the model did not get the refusal: {body}"
    );
    assert!(
        !body.contains("\"relay-tool-ok"),
        "the tool ran although relay-hook refused it: {body}"
    );
    Ok(())
}
