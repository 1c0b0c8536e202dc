//! The official Anthropic and OpenAI SDKs for Node, pinned by `cargo xtask e2e`, as an
//! application drives them through relayd (`tests/sdk/calls.js`): a message, a message
//! stream, token counting and the model list; Chat Completions and Responses, plain and
//! streamed. Every call answers as it would from the provider, in pass-through and through
//! a worker that runs the redaction and observability plugins, and each request reaches
//! the provider from the process the route says.

use std::path::{Path, PathBuf};
use std::time::Duration;

use relay_e2e::{AgentCommand, Relayd, User};
use relay_testkit::{Recorded, StandIn};
use serde_json::Value;

use super::support::{
    WORKER_TIMEOUT, WORKER_TIMERS, atof_dir, atof_records, contains, families_config, fresh_token,
    marker, ready_mcp, recorded_with,
};

/// Long enough for nine calls on a loaded machine; they take well under a second.
const SDK_TIMEOUT: Duration = Duration::from_secs(60);
/// The stand-in's answer text, which every SDK must hand back whole.
const ANSWER: &str = "hi from mock";
/// A key in the conversation, which the redaction plugin keeps from the provider.
const API_KEY: &str = "sk-relaye2e0123456789abcdefXYZ";

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("sdk/calls.js")
}

/// Runs the SDK calls against `origin` (with `token` as the route credential) and returns
/// each call's line, by name. `text` goes into every conversation.
async fn run_sdks(
    origin: &str,
    token: Option<&str>,
    text: &str,
) -> anyhow::Result<Vec<(String, Value)>> {
    let output = AgentCommand::on_path("node")?
        .arg(script())
        .arg(origin)
        .env("NODE_PATH", relay_e2e::sdk_dir()?)
        .env("RELAY_E2E_MARKER", text)
        .env("RELAY_E2E_TOKEN", token.unwrap_or_default())
        .run(SDK_TIMEOUT)
        .await?;
    anyhow::ensure!(output.status.success(), "{output}");
    let (stdout, stderr) = (&output.stdout, &output.stderr);
    let mut calls = Vec::new();
    for line in stdout.lines() {
        let call: Value = serde_json::from_str(line)
            .map_err(|e| anyhow::anyhow!("not a JSON line ({e}): {line}\n{stderr}"))?;
        let name = call["name"].as_str().unwrap_or_default().to_owned();
        calls.push((name, call));
    }
    Ok(calls)
}

/// Every call succeeded and handed back what the stand-in answered.
fn assert_answered(calls: &[(String, Value)], context: &str) {
    let names: Vec<&str> = calls.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        [
            "anthropic.messages.create",
            "anthropic.messages.stream",
            "anthropic.messages.countTokens",
            "anthropic.models.list",
            "openai.chat.completions.create",
            "openai.chat.completions.stream",
            "openai.responses.create",
            "openai.responses.stream",
            "openai.models.list",
        ],
        "{context}"
    );
    for (name, call) in calls {
        assert_eq!(call["ok"], true, "{name}: {call}\n{context}");
        let result = &call["result"];
        match name.as_str() {
            "anthropic.messages.create" | "anthropic.messages.stream" => {
                assert_eq!(result["stop_reason"], "end_turn", "{name}: {call}");
                assert_eq!(result["text"], ANSWER, "{name}: {call}");
            }
            "anthropic.messages.countTokens" => {
                assert!(result["input_tokens"].as_u64() > Some(0), "{name}: {call}");
            }
            "anthropic.models.list" | "openai.models.list" => {
                assert!(
                    result["ids"].as_array().is_some_and(|ids| !ids.is_empty()),
                    "{name}: {call}"
                );
            }
            "openai.chat.completions.create" => {
                assert_eq!(result["finish_reason"], "stop", "{name}: {call}");
                assert_eq!(result["text"], ANSWER, "{name}: {call}");
            }
            "openai.chat.completions.stream" => {
                assert!(result["chunks"].as_u64() > Some(1), "{name}: {call}");
                assert_eq!(result["text"], ANSWER, "{name}: {call}");
            }
            "openai.responses.create" => {
                assert_eq!(result["status"], "completed", "{name}: {call}");
                assert_eq!(result["text"], ANSWER, "{name}: {call}");
            }
            "openai.responses.stream" => {
                assert_eq!(result["last"], "response.completed", "{name}: {call}");
            }
            other => panic!("an unexpected call {other}"),
        }
    }
}

/// One stand-in per provider family, so each request shows which family it was routed to
/// (a model list goes to Anthropic only when it carries `anthropic-version`).
struct Providers {
    anthropic: StandIn,
    openai: StandIn,
}

impl Providers {
    async fn start() -> anyhow::Result<Providers> {
        Ok(Providers {
            anthropic: StandIn::start().await?,
            openai: StandIn::start().await?,
        })
    }

    /// The `[upstream]` table that sends each family to its stand-in, then `extra`.
    fn config(&self, extra: &str) -> String {
        families_config(&self.anthropic, &self.openai, extra)
    }

    /// Each family's requests reached its own stand-in once and in order, on a connection
    /// `pid` holds, the conversations carrying `text` (three Anthropic, four OpenAI; the
    /// model lists carry none). Query strings are left out: they are the SDKs' to choose.
    fn assert_requests_from(&self, pid: u32, text: &str) -> Vec<Recorded> {
        let families = [
            (
                &self.anthropic,
                &[
                    "/v1/messages",
                    "/v1/messages",
                    "/v1/messages/count_tokens",
                    "/v1/models",
                ][..],
                3,
            ),
            (
                &self.openai,
                &[
                    "/v1/chat/completions",
                    "/v1/chat/completions",
                    "/v1/responses",
                    "/v1/responses",
                    "/v1/models",
                ][..],
                4,
            ),
        ];
        let mut all = Vec::new();
        for (stand_in, expected, conversations) in families {
            let requests = stand_in.requests();
            let paths: Vec<&str> = requests
                .iter()
                .map(|r| r.path_and_query.split('?').next().unwrap_or_default())
                .collect();
            assert_eq!(
                paths, expected,
                "each call reached its provider once, in order"
            );
            for request in &requests {
                assert!(
                    relay_e2e::procfs::owns_connection(pid, request.peer, stand_in.addr()),
                    "{} {} came from {}, not a socket of pid {pid}",
                    request.method,
                    request.path_and_query,
                    request.peer
                );
            }
            assert_eq!(
                recorded_with(stand_in, text).len(),
                conversations,
                "the conversations reached the provider"
            );
            all.extend(requests);
        }
        all
    }
}

#[tokio::test]
async fn the_official_sdks_answer_through_relayd_in_pass_through() -> anyhow::Result<()> {
    let providers = Providers::start().await?;
    let relayd = Relayd::builder()?
        .config(providers.config(""))
        .start()
        .await?;
    let text = marker("sdk-pass-through")?;
    let calls = run_sdks(&relayd.origin(), None, &text).await?;
    assert_answered(&calls, &relayd.logs().text());
    providers.assert_requests_from(relayd.pid()?, &text);
    Ok(())
}

/// The plugins the worker runs: records with their content to a file, and keys redacted
/// from the requests too.
fn plugins_toml(records: &Path) -> String {
    format!(
        r#"version = 1

[[components]]
kind = "observability"
enabled = true
[components.config]
capture_content = true
[[components.config.sinks]]
type = "file"
directory = {dir}
filename = "events-{{user}}.jsonl"

[[components]]
kind = "pii_redaction"
enabled = true
[components.config]
detectors = ["api_key"]
action = "redact"
redact_requests = true
"#,
        dir = toml::Value::from(records.display().to_string()),
    )
}

#[tokio::test]
async fn the_official_sdks_answer_through_a_worker_with_the_plugins_on() -> anyhow::Result<()> {
    let providers = Providers::start().await?;
    let relayd = Relayd::builder()?
        .config(providers.config(&format!("\n{WORKER_TIMERS}")))
        .start()
        .await?;
    // The worker reads its upstreams from the system config too.
    let user = User::new()?;
    user.write_system_config(&providers.config(""))?;
    let records = atof_dir()?;
    user.write_file(
        &user.system_config_dir().join("plugins.toml"),
        &plugins_toml(records.path()),
        0o644,
    )?;
    let token = fresh_token()?;
    let _mcp = ready_mcp(&user, &relayd.origin(), &token).await?;
    let workers = user.wait_for_workers(1, WORKER_TIMEOUT).await?;

    let text = marker("sdk-worker")?;
    let calls = run_sdks(
        &relayd.origin(),
        Some(&token),
        &format!("{text} with the key {API_KEY}"),
    )
    .await?;
    let context = format!("{}\n{}", relayd.logs().text(), user.worker_log_text());
    assert_answered(&calls, &context);
    let requests = providers.assert_requests_from(workers[0], &text);
    for request in &requests {
        assert!(
            !contains(&request.body, API_KEY.as_bytes()),
            "the key reached the provider in {}",
            request.path_and_query
        );
    }
    // Each conversation was recorded, start and end, with its key counted and not kept.
    // The file sink writes in the background: wait for all fourteen.
    let fourteen = || atof_records(records.path()).is_ok_and(|(_, scopes)| scopes.len() >= 14);
    assert!(
        relay_testkit::eventually(WORKER_TIMEOUT, fourteen).await,
        "fewer than fourteen records: {:?}",
        atof_records(records.path())
    );
    let (written, scopes) = atof_records(records.path())?;
    assert!(!written.contains(API_KEY), "the key reached the records");
    assert!(
        written.contains(&text),
        "the records hold no content: {written}"
    );
    let started: Vec<(&str, &Value)> = scopes
        .iter()
        .filter(|r| r["category"] == "llm" && r["scope_category"] == "start")
        .map(|r| {
            (
                r["data"]["route"].as_str().unwrap_or_default(),
                &r["data"]["request_redactions"],
            )
        })
        .collect();
    let one = Value::from(1);
    assert_eq!(
        started,
        [
            ("/v1/messages", &one),
            ("/v1/messages", &one),
            ("/v1/messages/count_tokens", &one),
            ("/v1/chat/completions", &one),
            ("/v1/chat/completions", &one),
            ("/v1/responses", &one),
            ("/v1/responses", &one),
        ],
        "{written}"
    );
    let ended: Vec<&Value> = scopes
        .iter()
        .filter(|r| r["category"] == "llm" && r["scope_category"] == "end")
        .map(|r| &r["data"]["status"])
        .collect();
    assert_eq!(ended, [&Value::from(200); 7], "{written}");
    Ok(())
}
