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

use std::path::{Path, PathBuf};
use std::process::Stdio;

use relay_e2e::{AGENT_TIMEOUT, AgentCommand, AgentOutput, Relayd, Tap, User};
use relay_testkit::{StandIn, TOOL_DONE_TEXT};
use tempfile::TempDir;

use super::support::{
    CLI_TIMEOUT, WORKER_TIMEOUT, field, fresh_token, pass_throughs, requests_to, upstream_config,
};

/// The test-only switch of `relayd managed-bundle` (bins/relayd/src/bundle.rs).
const ALLOW_TEMP_BIN_DIR: &str = "RELAY_DANGEROUS_TEST_ONLY_ALLOW_TEMP_BIN_DIR";

/// The Codex merge of docs/harnesses.md: the user's top-level keys (without their own
/// `model_provider`), the bundle's top-level keys, the user's tables, the bundle's tables.
const CODEX_MERGE: &str = r#"set -eu
bundle="$1"; user="$2"
top() { awk '/^[[:space:]]*\[/ { exit } { print }' "$1"; }
tables() { awk '/^[[:space:]]*\[/ { t = 1 } t { print }' "$1"; }
{
  top "$user" | grep -v '^[[:space:]]*model_provider[[:space:]]*=' || true
  top "$bundle"
  tables "$user"
  tables "$bundle"
} > "$user.relay-new"
mv "$user.relay-new" "$user"
"#;

/// A stand-in that asks for a shell tool once, relayd behind a tap, a machine-user, and a
/// bundle generated for the tap's origin.
struct Deployment {
    stand_in: StandIn,
    tap: Tap,
    relayd: Relayd,
    user: User,
    token: String,
    _bins: TempDir,
    bundle_dir: TempDir,
}

impl Deployment {
    async fn start() -> anyhow::Result<Deployment> {
        Deployment::start_with_hook(None).await
    }

    /// `hook_script`, when given, is installed as the bin directory's `relay-hook` in
    /// place of the link to the real one; it gets the real one's path as `$RELAY_HOOK`.
    async fn start_with_hook(hook_script: Option<&str>) -> anyhow::Result<Deployment> {
        let stand_in = StandIn::start().await?;
        stand_in.set_tool_round_trip(true);
        let base = stand_in.base_url();
        // pi selects its provider's base itself; the daemon and the worker must allow it.
        let allowed = format!("allowed_base_urls = [\"{base}\", \"{base}/v1\"]\n");
        let tap = Tap::bind().await?;
        let relayd = Relayd::builder()?
            .config(upstream_config(
                &stand_in,
                &format!(
                    "{allowed}\n[daemon]\n[daemon.timers]\ndrain_secs = 1\nreconnect_grace_secs = 2\nretry_base_ms = 200\n"
                ),
            ))
            .args(["--advertise-address", &tap.origin()])
            .start()
            .await?;
        let tap = tap.forward_to(relayd.addr());
        let user = User::new()?;
        let user_config = upstream_config(&stand_in, &allowed);
        user.write_system_config(&user_config)?;
        // Codex passes the MCP server XDG_CONFIG_HOME but not RELAY_SYSTEM_CONFIG_DIR.
        user.write_file(
            &user.xdg_config_home().join("relay").join("config.toml"),
            &user_config,
            0o600,
        )?;

        let bins = tempfile::Builder::new()
            .prefix("relay-e2e-bin-")
            .tempdir()?;
        for name in ["relay-mcp", "relay-hook", "relay-worker"] {
            std::os::unix::fs::symlink(relay_e2e::binary(name)?, bins.path().join(name))?;
        }
        if let Some(script) = hook_script {
            use std::os::unix::fs::PermissionsExt as _;
            let hook = bins.path().join("relay-hook");
            std::fs::remove_file(&hook)?;
            let real = relay_e2e::binary("relay-hook")?;
            std::fs::write(
                &hook,
                format!("#!/bin/sh\nRELAY_HOOK='{}'\n{script}", real.display()),
            )?;
            std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755))?;
        }
        let bundle_dir = tempfile::Builder::new()
            .prefix("relay-e2e-bundle-")
            .tempdir()?;
        let deployment = Deployment {
            stand_in,
            tap,
            relayd,
            user,
            token: fresh_token()?,
            _bins: bins,
            bundle_dir,
        };
        deployment.generate().await?;
        Ok(deployment)
    }

    fn bundle(&self) -> PathBuf {
        self.bundle_dir.path().join("bundle")
    }

    /// `relayd managed-bundle` for all three agents, then `relay-doctor --managed-bundle`
    /// on the result.
    async fn generate(&self) -> anyhow::Result<()> {
        let bundle = self.bundle();
        let out = tokio::process::Command::new(relay_e2e::binary("relayd")?)
            .args(["managed-bundle", "--output"])
            .arg(&bundle)
            .args(["--daemon-address", &self.tap.origin(), "--bin-dir"])
            .arg(self._bins.path())
            .args(["--platform", "linux"])
            .args(["--agent", "claude", "--agent", "codex", "--agent", "pi"])
            .env_clear()
            .env("HOME", self.user.home())
            .env(ALLOW_TEMP_BIN_DIR, "1")
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(CLI_TIMEOUT, out).await??;
        let digest = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "managed-bundle failed: {out:?}");
        let digest = digest.trim_end();
        assert_eq!(digest.len(), 64, "{digest:?}");

        let check = tokio::process::Command::new(relay_e2e::binary("relay-doctor")?)
            .arg("--managed-bundle")
            .arg(&bundle)
            .args(["--managed-bundle-sha256", digest])
            .env_clear()
            .env("HOME", self.user.home())
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output();
        let check = tokio::time::timeout(CLI_TIMEOUT, check).await??;
        assert!(check.status.success(), "relay-doctor disagrees: {check:?}");
        Ok(())
    }

    /// What the harness environment gets: the token, and where this machine-user's Relay
    /// state and config live (a real user has them in the default places).
    fn relay_env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("RELAY_CLIENT_TOKEN", self.token.clone()),
            (
                "XDG_CONFIG_HOME",
                self.user.xdg_config_home().display().to_string(),
            ),
            (
                "RELAY_SYSTEM_CONFIG_DIR",
                self.user.system_config_dir().display().to_string(),
            ),
        ]
    }

    fn fail(&self, out: &AgentOutput, why: &str) -> ! {
        panic!(
            "{why}\n{out}\n--- relayd ---\n{}\n--- workers ---\n{}\n--- stand-in saw ---\n{:?}",
            self.relayd.logs().text(),
            self.user.worker_log_text(),
            self.stand_in
                .requests()
                .iter()
                .map(|r| format!("{} {}", r.method, r.path_and_query))
                .collect::<Vec<_>>()
        )
    }

    /// The hook events the CLI posted to `path`, in the tap's order.
    fn hooks_sent(&self, path: &str) -> Vec<String> {
        self.tap
            .requests()
            .into_iter()
            .filter(|req| req.method == "POST" && req.target == path)
            .map(|req| {
                let body: serde_json::Value = serde_json::from_slice(&req.body).unwrap_or_default();
                body["hook_event_name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect()
    }

    /// Everything a bundle-launched session must show after the CLI exited.
    async fn check(
        &self,
        out: &AgentOutput,
        model_route: &str,
        hook_path: &str,
        expected_hooks: &[&str],
    ) -> anyhow::Result<()> {
        if !out.status.success() || !out.stdout.contains(TOOL_DONE_TEXT) {
            self.fail(out, "the CLI did not finish its tool round trip");
        }
        let turns = self
            .stand_in
            .requests()
            .into_iter()
            .filter(|r| r.method == "POST")
            .count() as u64;
        if turns < 2 {
            self.fail(out, &format!("the stand-in saw {turns} model turns"));
        }
        let through_worker = requests_to(&self.relayd, model_route, "worker").await?;
        if through_worker != turns {
            self.fail(
                out,
                &format!("{through_worker} of {turns} model requests went through the worker"),
            );
        }
        let sent = self.hooks_sent(hook_path);
        for event in expected_hooks {
            if !sent.iter().any(|e| e == event) {
                self.fail(out, &format!("no {event} hook: {sent:?}"));
            }
        }
        let hooks = requests_to(&self.relayd, "hook", "worker").await?;
        if hooks != sent.len() as u64 {
            self.fail(
                out,
                &format!(
                    "{hooks} of {} hook events reached the worker: {sent:?}",
                    sent.len()
                ),
            );
        }
        let passed = pass_throughs(&self.relayd);
        if !passed.is_empty() {
            self.fail(out, &format!("relayd passed requests through: {passed:?}"));
        }
        for request in self.stand_in.requests() {
            for (name, value) in &request.headers {
                assert!(
                    !name.starts_with("x-relay-"),
                    "{} {}: the provider saw {name}",
                    request.method,
                    request.path_and_query
                );
                assert!(
                    !super::support::contains(value, self.token.as_bytes()),
                    "the provider saw the route token in {name}"
                );
            }
            assert!(
                !super::support::contains(&request.body, self.token.as_bytes()),
                "the provider saw the route token in a body"
            );
        }

        // The agent stopped relay-mcp: its session ends, the worker drains and exits.
        self.relayd
            .wait_for_log_event("mcp_removed", WORKER_TIMEOUT)
            .await?;
        let removed = self
            .relayd
            .wait_for_log_event("worker_removed", WORKER_TIMEOUT)
            .await?;
        assert_eq!(field(&removed, "reason"), "drained", "{removed}");
        self.user.wait_for_workers(0, WORKER_TIMEOUT).await?;
        assert!(
            !self.relayd.logs().contains(self.token.as_bytes()),
            "the token reached relayd's log"
        );
        Ok(())
    }
}

fn path(path: &Path) -> String {
    path.display().to_string()
}

#[tokio::test]
async fn claude_code_runs_from_the_bundle() -> anyhow::Result<()> {
    let deployment = Deployment::start().await?;
    let bundle = deployment.bundle();
    let claude = AgentCommand::new("claude")?;
    // The user's own Claude Code settings: the echo tool is allowed in -p mode.
    let config_dir = claude.make_dir("claude-config")?;
    claude.write_file(
        "claude-config/settings.json",
        r#"{"permissions":{"allow":["Bash(echo:*)"]}}"#,
    )?;
    let mut claude = claude
        .env("CLAUDE_CONFIG_DIR", config_dir)
        .env("ANTHROPIC_API_KEY", "sk-ant-test")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env(
            "ANTHROPIC_CUSTOM_HEADERS",
            format!("x-relay-client-token: {}", deployment.token),
        )
        .arg("-p")
        .arg("run echo")
        .arg("--plugin-dir")
        .arg(path(&bundle.join("claude-code/plugin-v1")))
        .arg("--settings")
        .arg(path(
            &bundle.join("claude-code/settings-v1/managed-settings.json"),
        ));
    for (key, value) in deployment.relay_env() {
        claude = claude.env(key, value);
    }
    let out = claude.run(AGENT_TIMEOUT).await?;
    deployment
        .check(
            &out,
            "anthropic",
            "/hooks/claude-code",
            &[
                "SessionStart",
                "UserPromptSubmit",
                "PreToolUse",
                "PostToolUse",
                "Stop",
            ],
        )
        .await
}

#[tokio::test]
async fn codex_runs_from_the_bundle() -> anyhow::Result<()> {
    let deployment = Deployment::start().await?;
    let bundle = deployment.bundle();
    let codex = AgentCommand::new("codex")?;
    let codex_home = codex.make_dir("codex-home")?;
    // The user's own config.toml: model and approval lines, and their trusted project.
    codex.write_file(
        "codex-home/config.toml",
        &format!(
            "model = \"mock-model\"\napproval_policy = \"never\"\nsandbox_mode = \"workspace-write\"\n\n[projects.{}]\ntrust_level = \"trusted\"\n",
            toml::Value::from(path(&codex.work_dir()))
        ),
    )?;
    let script = codex.write_file("merge-codex-config.sh", CODEX_MERGE)?;
    let merged = tokio::process::Command::new("/bin/sh")
        .arg(&script)
        .arg(bundle.join("codex/settings-v1/config.toml"))
        .arg(codex_home.join("config.toml"))
        .stdin(Stdio::null())
        .output()
        .await?;
    assert!(merged.status.success(), "{merged:?}");
    let config = std::fs::read_to_string(codex_home.join("config.toml"))?;
    let parsed: toml::Value = toml::from_str(&config)?;
    assert_eq!(parsed["model_provider"].as_str(), Some("relay"), "{config}");
    assert_eq!(parsed["model"].as_str(), Some("mock-model"), "{config}");
    std::fs::copy(
        bundle.join("codex/settings-v1/hooks.json"),
        codex_home.join("hooks.json"),
    )?;

    // The user's own OpenAI key, as `codex login --with-api-key` stores it.
    let mut login = tokio::process::Command::new(relay_e2e::agent_binary("codex")?)
        .args(["login", "--with-api-key"])
        .env_clear()
        .env("HOME", codex.dir().join("home"))
        .env("CODEX_HOME", &codex_home)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    if let Some(mut stdin) = login.stdin.take() {
        tokio::io::AsyncWriteExt::write_all(&mut stdin, b"sk-test-openai\n").await?;
    }
    let login = tokio::time::timeout(AGENT_TIMEOUT, login.wait_with_output()).await??;
    assert!(login.status.success(), "codex login failed: {login:?}");

    let mut codex = codex.env("CODEX_HOME", &codex_home).args([
        "exec",
        "--skip-git-repo-check",
        "--dangerously-bypass-hook-trust",
        "run echo",
    ]);
    for (key, value) in deployment.relay_env() {
        codex = codex.env(key, value);
    }
    let out = codex.run(AGENT_TIMEOUT).await?;
    deployment
        .check(
            &out,
            "openai",
            "/hooks/codex",
            &[
                "SessionStart",
                "UserPromptSubmit",
                "PreToolUse",
                "PostToolUse",
                "Stop",
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
        turn.header_str("authorization"),
        Some("Bearer sk-test-openai"),
        "the user's own key reaches the provider"
    );
    Ok(())
}

#[tokio::test]
async fn pi_runs_from_the_bundle() -> anyhow::Result<()> {
    let deployment = Deployment::start().await?;
    let bundle = deployment.bundle();
    let pi = AgentCommand::new("pi")?;
    let agent_dir = pi.make_dir("pi-agent")?;
    let base = deployment.stand_in.base_url();
    // The user's own providers: one Relay serves, and one whose API it does not.
    let models = serde_json::json!({"providers": {
        "mock": {"baseUrl": base, "api": "anthropic-messages", "apiKey": "RELAY_E2E_PI_KEY",
                 "models": [{"id": "mock-claude"}]},
        "other": {"baseUrl": base, "api": "google-generative-ai", "apiKey": "RELAY_E2E_PI_KEY",
                  "models": [{"id": "mock-gemini"}]},
    }});
    pi.write_file("pi-agent/models.json", &models.to_string())?;
    let mut pi = pi
        .env("PI_CODING_AGENT_DIR", &agent_dir)
        .env("PI_OFFLINE", "1")
        .env("RELAY_E2E_PI_KEY", "sk-ant-pi-test")
        .args(["-p", "--no-extensions", "-e"])
        .arg(path(&bundle.join("pi/extension-v1/index.ts")))
        .args(["--model", "mock/mock-claude", "run echo"]);
    for (key, value) in deployment.relay_env() {
        pi = pi.env(key, value);
    }
    let out = pi.run(AGENT_TIMEOUT).await?;
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
    let bundle = deployment.bundle();
    let pi = AgentCommand::new("pi")?;
    let agent_dir = pi.make_dir("pi-agent")?;
    let models = serde_json::json!({"providers": {
        "mock": {"baseUrl": deployment.stand_in.base_url(), "api": "anthropic-messages",
                 "apiKey": "RELAY_E2E_PI_KEY", "models": [{"id": "mock-claude"}]},
    }});
    pi.write_file("pi-agent/models.json", &models.to_string())?;
    let mut pi = pi
        .env("PI_CODING_AGENT_DIR", &agent_dir)
        .env("PI_OFFLINE", "1")
        .env("RELAY_E2E_PI_KEY", "sk-ant-pi-test")
        .args(["-p", "--no-extensions", "-e"])
        .arg(path(&bundle.join("pi/extension-v1/index.ts")))
        .args(["--model", "mock/mock-claude", "run echo"]);
    for (key, value) in deployment.relay_env() {
        pi = pi.env(key, value);
    }
    let out = pi.run(AGENT_TIMEOUT).await?;
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
