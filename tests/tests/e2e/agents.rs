//! The real Claude Code and Codex CLIs, pinned and installed by `cargo xtask e2e`, talking
//! to the stand-in provider through relayd.
//!
//! Each CLI talks to a [`Tap`] in front of relayd, so the test holds both ends of the
//! evidence: the bytes the CLI put on the wire, and the request the stand-in received after
//! relayd. relayd is told the tap's origin (`--advertise-address`), so the `Host` the CLI
//! sends is one relayd accepts; the tap itself changes no byte.

use relay_e2e::{AGENT_TIMEOUT, AgentCommand, AgentOutput, Relayd, Tap, TappedRequest};
use relay_testkit::{DEFAULT_TEXT, Recorded, StandIn};

use super::support::{EVENT_TIMEOUT, field, fresh_token, passes_unchanged, upstream_config};

/// A stand-in, relayd in front of it, and a tap in front of relayd.
struct Chain {
    stand_in: StandIn,
    relayd: Relayd,
    tap: Tap,
}

impl Chain {
    async fn start() -> anyhow::Result<Chain> {
        let stand_in = StandIn::start().await?;
        let tap = Tap::bind().await?;
        let relayd = Relayd::builder()?
            .config(upstream_config(&stand_in, ""))
            .args(["--advertise-address", &tap.origin()])
            .start()
            .await?;
        let tap = tap.forward_to(relayd.addr());
        Ok(Chain {
            stand_in,
            relayd,
            tap,
        })
    }

    /// Panics with everything a reader needs: the CLI's output and relayd's log.
    fn fail(&self, out: &AgentOutput, why: &str) -> ! {
        panic!(
            "{why}\n{out}\n--- relayd stderr ---\n{}\n--- stand-in saw ---\n{:?}",
            self.relayd.logs().text(),
            self.stand_in
                .requests()
                .iter()
                .map(|r| format!("{} {}", r.method, r.path_and_query))
                .collect::<Vec<_>>()
        )
    }

    /// Every request the CLI sent that relayd forwards reached the stand-in in the same
    /// order with the same method, target and body bytes, and with every end-to-end header
    /// unchanged. `HEAD /` (Claude Code's probe) and upgrade attempts are answered by relayd
    /// itself (SPEC §3.2) and are left out.
    fn assert_forwarded_verbatim(&self, out: &AgentOutput) -> Vec<(TappedRequest, Recorded)> {
        let sent: Vec<TappedRequest> = self
            .tap
            .requests()
            .into_iter()
            .filter(|r| !(r.method == "HEAD" && r.target == "/"))
            .filter(|r| r.header_values("upgrade").is_empty())
            .collect();
        let received = self.stand_in.requests();
        if sent.len() != received.len() {
            self.fail(
                out,
                &format!(
                    "the CLI sent {} forwardable requests, the stand-in received {}: {:?}",
                    sent.len(),
                    received.len(),
                    sent.iter()
                        .map(|r| format!("{} {}", r.method, r.target))
                        .collect::<Vec<_>>()
                ),
            );
        }
        for (sent, received) in sent.iter().zip(&received) {
            let what = format!("{} {}", sent.method, sent.target);
            assert_eq!(received.method.as_str(), sent.method, "{what}");
            assert_eq!(received.path_and_query, sent.target, "{what}");
            assert!(sent.complete && received.body_complete, "{what}");
            assert!(
                received.body == sent.body,
                "{what}: the body the stand-in received differs from the one the CLI sent \
                 ({} vs {} bytes)",
                received.body.len(),
                sent.body.len()
            );
            for (name, _) in sent.headers.iter().filter(|(n, _)| passes_unchanged(n)) {
                assert_eq!(
                    received.header_values(name),
                    sent.header_values(name),
                    "{what}: header {name} changed"
                );
            }
            assert_eq!(
                received.header("x-relay-client-token"),
                None,
                "{what}: the route credential reached the provider"
            );
        }
        sent.into_iter().zip(received).collect()
    }
}

/// `claude -p "say hi"` against `chain`, as the fixtures README runs it, with `extra` env.
async fn run_claude(chain: &Chain, extra: &[(&str, &str)]) -> anyhow::Result<AgentOutput> {
    let claude = AgentCommand::new("claude")?;
    let config_dir = claude.make_dir("claude-config")?;
    let mut claude = claude
        .env("ANTHROPIC_BASE_URL", chain.tap.origin())
        .env("CLAUDE_CONFIG_DIR", config_dir)
        .env("ANTHROPIC_API_KEY", "sk-ant-test")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .args(["-p", "say hi"]);
    for (key, value) in extra {
        claude = claude.env(key, value);
    }
    Ok(claude.run(AGENT_TIMEOUT).await?)
}

fn assert_answered(chain: &Chain, out: &AgentOutput) {
    if !out.status.success() {
        chain.fail(out, "the CLI failed");
    }
    if !out.stdout.contains(DEFAULT_TEXT) {
        chain.fail(out, &format!("the CLI did not print {DEFAULT_TEXT:?}"));
    }
}

#[tokio::test]
async fn claude_code_answers_through_relayd() -> anyhow::Result<()> {
    let chain = Chain::start().await?;
    let out = run_claude(&chain, &[]).await?;
    assert_answered(&chain, &out);
    let pairs = chain.assert_forwarded_verbatim(&out);
    let turn = pairs
        .iter()
        .map(|(_, received)| received)
        .find(|r| r.method == "POST" && r.path_and_query == "/v1/messages?beta=true")
        .unwrap_or_else(|| chain.fail(&out, "no POST /v1/messages?beta=true reached the stand-in"));
    assert_eq!(turn.header_str("x-api-key"), Some("sk-ant-test"));
    assert!(
        !chain.stand_in.requests().iter().any(|r| r.method == "HEAD"),
        "relayd answers Claude Code's HEAD / itself"
    );
    Ok(())
}

#[tokio::test]
async fn claude_code_route_token_stops_at_relayd() -> anyhow::Result<()> {
    let chain = Chain::start().await?;
    let token = fresh_token()?;
    let header = format!("x-relay-client-token: {token}");
    let out = run_claude(&chain, &[("ANTHROPIC_CUSTOM_HEADERS", &header)]).await?;
    assert_answered(&chain, &out);
    let pairs = chain.assert_forwarded_verbatim(&out);
    let (sent, _) = pairs
        .iter()
        .find(|(sent, _)| sent.target == "/v1/messages?beta=true")
        .unwrap_or_else(|| chain.fail(&out, "no POST /v1/messages?beta=true reached the stand-in"));
    // The CLI did send the credential; `assert_forwarded_verbatim` showed it went no further.
    assert_eq!(
        sent.header_str("x-relay-client-token"),
        Some(token.as_str())
    );

    let passed = chain
        .relayd
        .wait_for_log_event("public_request_pass_through", EVENT_TIMEOUT)
        .await?;
    assert_eq!(field(&passed, "route"), "anthropic", "{passed}");
    assert_eq!(field(&passed, "route_mode"), "pass_through", "{passed}");
    assert_eq!(field(&passed, "reason"), "unbound_credential", "{passed}");
    assert!(!chain.relayd.logs().contains(token.as_bytes()));
    Ok(())
}

#[tokio::test]
async fn codex_answers_through_relayd() -> anyhow::Result<()> {
    let chain = Chain::start().await?;
    let codex = AgentCommand::new("codex")?;
    let codex_home = codex.make_dir("codex-home")?;
    codex.write_file(
        "codex-home/config.toml",
        &format!(
            r#"model = "mock-model"
model_provider = "relay"
approval_policy = "never"
sandbox_mode = "read-only"

[model_providers.relay]
name = "Relay"
base_url = "{}/v1"
env_key = "RELAY_E2E_OPENAI_KEY"
wire_api = "responses"
"#,
            chain.tap.origin()
        ),
    )?;
    let out = codex
        .env("CODEX_HOME", codex_home)
        .env("RELAY_E2E_OPENAI_KEY", "sk-test-openai")
        .args(["exec", "--skip-git-repo-check", "say hi"])
        .run(AGENT_TIMEOUT)
        .await?;
    assert_answered(&chain, &out);
    let pairs = chain.assert_forwarded_verbatim(&out);
    let turn = pairs
        .iter()
        .map(|(_, received)| received)
        .find(|r| r.method == "POST" && r.path_and_query == "/v1/responses")
        .unwrap_or_else(|| chain.fail(&out, "no POST /v1/responses reached the stand-in"));
    assert_eq!(
        turn.header_str("authorization"),
        Some("Bearer sk-test-openai")
    );
    Ok(())
}
