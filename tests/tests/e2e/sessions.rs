//! Whole sessions of the real Claude Code and Codex CLIs on the worker path (SPEC §1, §6,
//! §7, §7.3): each CLI is wired by hand with `relay-mcp` as its MCP server, `relay-hook` as
//! its hook command and the route credential on its model requests, and runs a turn with a
//! tool call. A worker is ready during the session, the hooks and model requests go
//! through it, and after the CLI quits the worker drains and exits. Everything runs at
//! trace level, and no secret may appear in any log.
//!
//! Everything the CLI side sends to relayd (model requests, hooks, both control sessions)
//! goes through a [`Tap`], so the test learns the secrets the daemon handed out.

#![allow(
    clippy::disallowed_methods,
    reason = "a test's own lock: a panic fails the test, so a poisoned lock is read as is"
)]

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use relay_e2e::http::{fetch, request};
use relay_e2e::{AGENT_TIMEOUT, AgentCommand, AgentOutput, Relayd, Tap, User};
use relay_testkit::{StandIn, TOOL_DONE_TEXT};

use super::support::{
    EVENT_TIMEOUT, HOOK_EVENTS, STATUS_POLL, WORKER_TIMEOUT, all_logs, assert_no_leaks, field,
    fresh_token, pass_throughs, requests_to, run_secrets, user_for, worker_config,
};

/// A stand-in that answers with a tool call first, relayd at trace behind a tap, and a
/// machine-user.
struct Session {
    stand_in: StandIn,
    tap: Tap,
    relayd: Relayd,
    user: User,
    token: String,
}

impl Session {
    async fn start() -> anyhow::Result<Session> {
        let stand_in = StandIn::start().await?;
        stand_in.set_tool_round_trip(true);
        let tap = Tap::bind().await?;
        let relayd = Relayd::builder()?
            .config(worker_config(&stand_in, ""))
            .args(["--advertise-address", &tap.origin(), "--log-level", "trace"])
            .start()
            .await?;
        let tap = tap.forward_to(relayd.addr());
        let user = user_for(&stand_in)?;
        Ok(Session {
            stand_in,
            tap,
            relayd,
            user,
            token: fresh_token()?,
        })
    }

    /// Where relay-mcp's stderr goes: the CLIs keep an MCP server's stderr to themselves.
    fn mcp_log(&self) -> PathBuf {
        self.user.dir().join("relay-mcp.log")
    }

    /// The MCP server command, as (program, args): a shell that redirects stderr and
    /// `exec`s relay-mcp, so the CLI's signals reach relay-mcp itself.
    fn mcp_command(&self) -> anyhow::Result<(String, Vec<String>)> {
        let mcp = relay_e2e::binary("relay-mcp")?;
        let script = format!(
            "exec '{}' --daemon-address '{}' 2>>'{}'",
            mcp.display(),
            self.tap.origin(),
            self.mcp_log().display()
        );
        Ok(("/bin/sh".to_owned(), vec!["-c".to_owned(), script]))
    }

    fn hook_command(&self, agent: &str) -> anyhow::Result<String> {
        Ok(format!(
            "'{}' {agent} --daemon-address {}",
            relay_e2e::binary("relay-hook")?.display(),
            self.tap.origin()
        ))
    }

    /// The `hooks` object both CLIs read (Claude Code's settings, Codex's hooks.json).
    fn hooks(&self, agent: &str) -> anyhow::Result<serde_json::Value> {
        let command = self.hook_command(agent)?;
        let mut hooks = serde_json::Map::new();
        for event in HOOK_EVENTS {
            let mut entry = serde_json::json!({
                "hooks": [{"type": "command", "command": command, "timeout": 30}]
            });
            if event.ends_with("ToolUse") {
                entry["matcher"] = "*".into();
            }
            hooks.insert(event.to_owned(), serde_json::json!([entry]));
        }
        Ok(serde_json::Value::Object(hooks))
    }

    /// The variables the CLI, and through it relay-mcp and relay-hook, need.
    fn relay_env(&self) -> Vec<(&'static str, String)> {
        vec![
            (
                "XDG_CONFIG_HOME",
                self.user.xdg_config_home().display().to_string(),
            ),
            (
                "RELAY_SYSTEM_CONFIG_DIR",
                self.user.system_config_dir().display().to_string(),
            ),
            ("RELAY_CLIENT_TOKEN", self.token.clone()),
            ("RELAY_LOG", "trace".to_owned()),
            ("RELAY_LOG_FORMAT", "jsonl".to_owned()),
        ]
    }

    /// Runs `agent`, watching `/_relay/v1/workers/status` meanwhile; returns the output and
    /// the first status entry that showed a ready worker with control and a reference.
    async fn run(
        &self,
        agent: AgentCommand,
    ) -> anyhow::Result<(AgentOutput, Option<serde_json::Value>)> {
        let seen: Arc<Mutex<Option<serde_json::Value>>> = Arc::default();
        let watcher = tokio::spawn(watch_workers(self.relayd.addr(), seen.clone()));
        let out = agent.run(AGENT_TIMEOUT).await;
        watcher.abort();
        let seen = seen.lock().unwrap_or_else(PoisonError::into_inner).clone();
        Ok((out?, seen))
    }

    fn fail(&self, out: &AgentOutput, why: &str) -> ! {
        panic!(
            "{why}\n{out}\n--- relayd ---\n{}\n--- relay-mcp ---\n{}\n{}",
            self.relayd.logs().text(),
            std::fs::read_to_string(self.mcp_log()).unwrap_or_default(),
            self.user.worker_log_text()
        )
    }

    /// What every session must show once the CLI has exited: it answered after the tool
    /// round trip, a worker was ready during it, the model requests and the hook events
    /// went through the worker, the worker drained and exited, and no log holds a secret.
    ///
    /// The one exception allowed: a hook the CLI posted before its relay-mcp had even
    /// opened a control session (in the tap's accept order) finds its credential unbound
    /// and passes through; those events are returned.
    async fn check(
        &self,
        out: &AgentOutput,
        seen: Option<serde_json::Value>,
        model_route: &str,
        hook_path: &str,
    ) -> anyhow::Result<Vec<String>> {
        if !out.status.success() || !out.stdout.contains(TOOL_DONE_TEXT) {
            self.fail(out, "the CLI did not finish its tool round trip");
        }
        let Some(seen) = seen else {
            self.fail(out, "no ready worker was seen during the session");
        };
        assert_eq!(seen["control_available"], true, "{seen}");

        // The model turns (the tool call, then its result) all went through the worker.
        let turns = self
            .stand_in
            .requests()
            .into_iter()
            .filter(|r| r.method == "POST")
            .count() as u64;
        assert!(turns >= 2, "the stand-in saw {turns} model turns");
        let through_worker = requests_to(&self.relayd, model_route, "worker").await?;
        if through_worker != turns {
            self.fail(
                out,
                &format!("{through_worker} of {turns} model requests went through the worker"),
            );
        }
        let model_pass_through: Vec<_> = pass_throughs(&self.relayd)
            .into_iter()
            .filter(|event| field(event, "route") != "hook")
            .collect();
        assert!(model_pass_through.is_empty(), "{model_pass_through:?}");

        // Every wired hook fired and reached the worker, also those posted before the
        // MCP server opened its control session: the daemon holds an opening hook until
        // the session's worker is ready (§3.5).
        let (sent, early) = self.hooks_sent(hook_path);
        for event in HOOK_EVENTS {
            assert!(sent.iter().any(|e| e == event), "no {event} hook: {sent:?}");
        }
        let hooks = requests_to(&self.relayd, "hook", "worker").await?;
        if hooks != sent.len() as u64 {
            self.fail(
                out,
                &format!(
                    "{hooks} of {} hook events reached the worker ({sent:?}, early: {early:?})",
                    sent.len()
                ),
            );
        }
        let hook_pass_through: Vec<_> = pass_throughs(&self.relayd)
            .into_iter()
            .filter(|event| field(event, "route") == "hook")
            .collect();
        assert!(hook_pass_through.is_empty(), "{hook_pass_through:?}");

        // The CLI stopped its MCP server: the worker drains and exits.
        let removed = self
            .relayd
            .wait_for_log_event("worker_removed", WORKER_TIMEOUT)
            .await?;
        assert_eq!(field(&removed, "reason"), "drained", "{removed}");
        self.relayd
            .wait_for_log_event("mcp_removed", EVENT_TIMEOUT)
            .await?;
        self.user.wait_for_workers(0, WORKER_TIMEOUT).await?;

        let (secrets, kinds) =
            run_secrets(&self.relayd, &self.user, &[&self.token], Some(&self.tap))?;
        assert!(kinds.contains(&"generation secret"), "{kinds:?}");
        let mut logs = all_logs(&self.relayd, &self.user, &[]);
        logs.push((
            "relay-mcp stderr".to_owned(),
            std::fs::read(self.mcp_log())?,
        ));
        assert_no_leaks(&secrets, &logs);
        Ok(early)
    }

    /// The hook events the CLI posted to `path`, in the tap's accept order, and those among
    /// them posted before the first MCP control session was opened.
    fn hooks_sent(&self, path: &str) -> (Vec<String>, Vec<String>) {
        let mut sent = Vec::new();
        let mut early = Vec::new();
        let mut mcp_seen = false;
        for exchange in self.tap.exchanges() {
            for req in exchange.requests() {
                if req.target == relay_proxy::control::MCP_PATH {
                    mcp_seen = true;
                }
                if req.method == "POST" && req.target == path {
                    let body: serde_json::Value =
                        serde_json::from_slice(&req.body).unwrap_or_default();
                    let event = body["hook_event_name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned();
                    if !mcp_seen {
                        early.push(event.clone());
                    }
                    sent.push(event);
                }
            }
        }
        (sent, early)
    }
}

/// Polls the worker status until aborted, keeping the first ready worker with a reference.
async fn watch_workers(addr: std::net::SocketAddr, seen: Arc<Mutex<Option<serde_json::Value>>>) {
    let mut poll = tokio::time::interval(STATUS_POLL);
    loop {
        poll.tick().await;
        let Ok(req) = request(
            http::Method::GET,
            "/_relay/v1/workers/status",
            &[],
            bytes::Bytes::new(),
        ) else {
            return;
        };
        let Ok((_, _, body)) = fetch(addr, req).await else {
            continue;
        };
        let Ok(status) = serde_json::from_slice::<serde_json::Value>(&body) else {
            continue;
        };
        let ready = status["workers"].as_array().and_then(|workers| {
            workers
                .iter()
                .find(|w| w["state"] == "ready" && w["reference_count"].as_u64() >= Some(1))
                .cloned()
        });
        if let Some(worker) = ready {
            *seen.lock().unwrap_or_else(PoisonError::into_inner) = Some(worker);
            return;
        }
    }
}

#[tokio::test]
async fn a_claude_code_session_runs_through_its_worker() -> anyhow::Result<()> {
    let session = Session::start().await?;
    let claude = AgentCommand::new("claude")?;
    let config_dir = claude.make_dir("claude-config")?;
    let settings = serde_json::json!({
        "permissions": {"allow": ["Bash(echo:*)"]},
        "hooks": session.hooks("claude")?,
    });
    claude.write_file("claude-config/settings.json", &settings.to_string())?;
    let (program, args) = session.mcp_command()?;
    let mcp_config = serde_json::json!({
        "mcpServers": {"relay": {"type": "stdio", "command": program, "args": args}}
    });
    let mcp_json = claude.write_file("mcp.json", &mcp_config.to_string())?;
    let mut claude = claude
        .env("ANTHROPIC_BASE_URL", session.tap.origin())
        .env("CLAUDE_CONFIG_DIR", config_dir)
        .env("ANTHROPIC_API_KEY", "sk-ant-test")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env(
            "ANTHROPIC_CUSTOM_HEADERS",
            format!("x-relay-client-token: {}", session.token),
        )
        .arg("-p")
        .arg("run echo")
        .arg("--mcp-config")
        .arg(mcp_json)
        .arg("--strict-mcp-config");
    for (key, value) in session.relay_env() {
        claude = claude.env(key, value);
    }
    let (out, seen) = session.run(claude).await?;
    let early = session
        .check(&out, seen, "anthropic", "/hooks/claude-code")
        .await?;
    // Claude Code posts SessionStart before it has even started its MCP server; on a
    // machine identity's first session its credential is not bound yet, and the daemon
    // waits for the registration instead of passing it through (checked above).
    assert!(
        early.iter().all(|event| event == "SessionStart"),
        "{early:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_codex_session_runs_through_its_worker() -> anyhow::Result<()> {
    let session = Session::start().await?;
    let codex = AgentCommand::new("codex")?;
    let codex_home = codex.make_dir("codex-home")?;
    let (program, args) = session.mcp_command()?;
    let config = format!(
        r#"model = "mock-model"
model_provider = "relay"
approval_policy = "never"
sandbox_mode = "workspace-write"

[model_providers.relay]
name = "Relay"
base_url = "{origin}/v1"
env_key = "RELAY_E2E_OPENAI_KEY"
wire_api = "responses"
env_http_headers = {{ "x-relay-client-token" = "RELAY_CLIENT_TOKEN" }}

[mcp_servers.relay]
command = {program}
args = {args}
startup_timeout_sec = 20
env_vars = ["HOME", "XDG_CONFIG_HOME", "RELAY_CLIENT_TOKEN", "RELAY_SYSTEM_CONFIG_DIR", "RELAY_LOG", "RELAY_LOG_FORMAT"]

[projects.{work}]
trust_level = "trusted"
"#,
        origin = session.tap.origin(),
        program = toml::Value::from(program),
        args = toml::Value::from(args),
        work = toml::Value::from(codex.work_dir().display().to_string()),
    );
    codex.write_file("codex-home/config.toml", &config)?;
    let hooks = serde_json::json!({"hooks": session.hooks("codex")?});
    codex.write_file("codex-home/hooks.json", &hooks.to_string())?;
    let mut codex = codex
        .env("CODEX_HOME", codex_home)
        .env("RELAY_E2E_OPENAI_KEY", "sk-test-openai")
        .args([
            "exec",
            "--skip-git-repo-check",
            "--dangerously-bypass-hook-trust",
            "run echo",
        ]);
    for (key, value) in session.relay_env() {
        codex = codex.env(key, value);
    }
    let (out, seen) = session.run(codex).await?;
    // Codex starts its MCP servers before the session, so every hook, SessionStart
    // included, reaches the worker.
    let early = session.check(&out, seen, "openai", "/hooks/codex").await?;
    assert!(early.is_empty(), "{early:?}");
    assert!(pass_throughs(&session.relayd).is_empty());
    Ok(())
}
