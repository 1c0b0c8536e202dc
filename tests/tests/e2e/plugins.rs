//! The worker's plugins with the real agents (issue 11): each CLI is launched from the
//! managed bundle (as in bundle.rs) with the issue's system `plugins.toml` (observability
//! with content capture and a file sink, the Bash `rm -rf` deny rule, e-mail and API key
//! redaction) plus an http sink and an OTLP exporter aimed at a collector stand-in. The
//! stand-in provider asks for `rm -rf <canary>`; the policy stops it, the model is told
//! why, and the ATOF file, the http collector and the OTLP spans agree on what happened
//! without the prompt's e-mail address or key.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use relay_e2e::AgentOutput;
use relay_testkit::{Recorded, TOOL_DONE_TEXT};
use serde_json::Value;
use tempfile::TempDir;

use super::collector::{Collector, KEY_HEADER};
use super::deployment::{COLLECTOR_KEY, COLLECTOR_KEY_VAR, CodexInstall, Deployment, Extras};
use super::support::{
    HOOK_EVENTS, WORKER_TIMEOUT, atof_dir, atof_records, contains, field, requests_to,
};

/// Written into every prompt: what the redactor must keep out of records and spans.
const EMAIL: &str = "alice.relay@example.com";
const API_KEY: &str = "sk-relaye2e0123456789abcdefXYZ";
/// A word of the prompt that content capture must keep.
const PROMPT_WORD: &str = "zanzibarquokka";
const DENY_REASON: &str = "destructive command";
/// The stand-in's tool call: delete the canary directory.
const RM_CANARY: &str = "rm -rf {canary}";

fn prompt() -> String {
    format!("{PROMPT_WORD}: clean the scratch directory, then mail {EMAIL} the key {API_KEY}")
}

/// The issue's `plugins.toml`, with the file sink in `atof_dir`, an http sink at
/// `atof_url` and the OTLP exporter at `otlp_url`.
fn plugins_toml(
    atof_dir: &Path,
    atof_url: &str,
    otlp_url: &str,
    extra_policy: &str,
    extra_redaction: &str,
) -> String {
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
[[components.config.sinks]]
type = "http"
url = {atof_url}
batch_max = 20
flush_ms = 50
timeout_ms = 1000
header_env = {{ "{KEY_HEADER}" = "{COLLECTOR_KEY_VAR}" }}
[components.config.otlp]
endpoint = {otlp_url}
header_env = {{ "{KEY_HEADER}" = "{COLLECTOR_KEY_VAR}" }}

[[components]]
kind = "policy"
enabled = true
[components.config]
{extra_policy}[[components.config.rules]]
event = "PreToolUse"
tool = "Bash"
input_field = "command"
regex = "rm -rf"
action = "deny"
reason = "{DENY_REASON}"

[[components]]
kind = "pii_redaction"
enabled = true
[components.config]
detectors = ["email", "api_key"]
action = "redact"
{extra_redaction}"#,
        dir = toml::Value::from(atof_dir.display().to_string()),
        atof_url = toml::Value::from(atof_url),
        otlp_url = toml::Value::from(otlp_url),
    )
}

/// A deployment with the plugins on, the canary directory the stand-in's tool call tries to
/// delete, the ATOF directory (0700) and the collector.
struct PluginRun {
    deployment: Deployment,
    collector: Collector,
    atof_dir: TempDir,
    canary: TempDir,
}

impl PluginRun {
    /// `command` is the tool call's shell command, with `{canary}` for the canary directory.
    /// `extra_policy` and `extra_redaction` are added to those components' tables.
    async fn start(
        extra_policy: &str,
        extra_redaction: &str,
        command: &str,
    ) -> anyhow::Result<PluginRun> {
        let collector = Collector::start().await?;
        let atof_dir = atof_dir()?;
        let canary = tempfile::Builder::new()
            .prefix("relay-e2e-canary-")
            .tempdir()?;
        std::fs::write(canary.path().join("keep-me"), "the policy keeps this file")?;
        let plugins = plugins_toml(
            atof_dir.path(),
            &collector.atof_url(),
            &collector.otlp_url(),
            extra_policy,
            extra_redaction,
        );
        let command = command.replace("{canary}", &canary.path().display().to_string());
        let deployment = Deployment::start_with(Extras {
            plugins_toml: Some(&plugins),
            tool_command: Some(&command),
            ..Extras::default()
        })
        .await?;
        Ok(PluginRun {
            deployment,
            collector,
            atof_dir,
            canary,
        })
    }

    /// Claude Code on the prompt, allowed to run `rm` in the canary directory, so that only
    /// the policy can stop the command.
    async fn run_claude(&self) -> anyhow::Result<AgentOutput> {
        let permissions = serde_json::json!({
            "allow": ["Bash(echo:*)", "Bash(rm:*)"],
            "additionalDirectories": [self.canary.path().display().to_string()],
        });
        self.deployment.run_claude(&prompt(), permissions).await
    }

    fn model_requests(&self) -> Vec<Recorded> {
        self.deployment
            .stand_in
            .requests()
            .into_iter()
            .filter(|r| r.method == "POST")
            .collect()
    }

    /// The session ran to its end: the denied tool's reason went back to the model, which
    /// then finished; every model request went through the worker, which drained.
    async fn finished(&self, out: &AgentOutput, model_route: &str) -> anyhow::Result<()> {
        let d = &self.deployment;
        if !out.status.success() || !out.stdout.contains(TOOL_DONE_TEXT) {
            d.fail(out, "the CLI did not finish after the denied tool call");
        }
        let turns = self.model_requests();
        if turns.len() < 2 {
            d.fail(
                out,
                &format!("the stand-in saw {} model turns", turns.len()),
            );
        }
        let through_worker = requests_to(&d.relayd, model_route, "worker").await?;
        if through_worker != turns.len() as u64 {
            d.fail(
                out,
                &format!(
                    "{through_worker} of {} model requests went through the worker",
                    turns.len()
                ),
            );
        }
        d.relayd
            .wait_for_log_event("mcp_removed", WORKER_TIMEOUT)
            .await?;
        let removed = d
            .relayd
            .wait_for_log_event("worker_removed", WORKER_TIMEOUT)
            .await?;
        assert_eq!(field(&removed, "reason"), "drained", "{removed}");
        d.user.wait_for_workers(0, WORKER_TIMEOUT).await?;
        Ok(())
    }

    /// The ATOF file's records, in file order.
    fn file_records(&self) -> anyhow::Result<(String, Vec<Value>)> {
        atof_records(self.atof_dir.path())
    }

    /// Everything the issue asks of one agent's session.
    async fn check(&self, out: &AgentOutput, model_route: &str) -> anyhow::Result<()> {
        self.finished(out, model_route).await?;
        let d = &self.deployment;

        // The policy stopped the command: the canary survives and the model was told why.
        if !self.canary.path().join("keep-me").exists() {
            let pre_tool: Vec<String> = d
                .tap
                .requests()
                .into_iter()
                .filter(|r| r.target.starts_with("/hooks/") && contains(&r.body, b"PreToolUse"))
                .map(|r| String::from_utf8_lossy(&r.body).into_owned())
                .collect();
            let answers: Vec<String> = d
                .tap
                .exchanges()
                .into_iter()
                .filter(|e| contains(&e.sent, b"PreToolUse"))
                .map(|e| String::from_utf8_lossy(&e.received).into_owned())
                .collect();
            let atof = self
                .file_records()
                .map(|(text, _)| text)
                .unwrap_or_default();
            d.fail(
                out,
                &format!("the denied rm -rf ran; PreToolUse: {pre_tool:?} answered {answers:?}\n--- ATOF ---\n{atof}"),
            );
        }
        let turns = self.model_requests();
        let last = turns.last().map(|r| r.body.clone()).unwrap_or_default();
        assert!(
            contains(&last, DENY_REASON.as_bytes()),
            "the model was not told why: {}",
            tail(&last)
        );

        // The provider got the prompt as written (no redact_requests).
        let first = &turns[0].body;
        assert!(
            contains(first, EMAIL.as_bytes()),
            "the provider lost the e-mail"
        );
        assert!(
            contains(first, API_KEY.as_bytes()),
            "the provider lost the key"
        );

        let (text, records) = self.file_records()?;
        let fail = |why: &str| -> ! { d.fail(out, &format!("{why}\n--- ATOF ---\n{text}")) };

        // Parent links: every parent is a scope started earlier in the file.
        let mut started = HashSet::new();
        for record in &records {
            if let Some(parent) = record["parent_uuid"].as_str()
                && !started.contains(parent)
            {
                fail(&format!("parent {parent} not started before {record}"));
            }
            if record["kind"] == "scope" && record["scope_category"] == "start" {
                started.insert(record["uuid"].as_str().unwrap_or_default().to_owned());
            }
        }

        let scopes = |category: &str, edge: &str| -> Vec<&Value> {
            records
                .iter()
                .filter(|r| {
                    r["kind"] == "scope" && r["category"] == category && r["scope_category"] == edge
                })
                .collect()
        };
        if scopes("agent", "start").len() != 1 || scopes("agent", "end").len() != 1 {
            fail("no single session scope with a start and an end");
        }
        let llm_ends = scopes("llm", "end");
        if scopes("llm", "start").len() != turns.len() || llm_ends.len() != turns.len() {
            fail(&format!(
                "not one llm scope per model request ({})",
                turns.len()
            ));
        }
        for end in &llm_ends {
            // The stand-in reports 10 input tokens on every answer, in every format.
            if end["data"]["usage"]["input_tokens"] != 10
                || !end["data"]["usage"]["output_tokens"].is_u64()
            {
                fail(&format!("an llm scope without the stand-in's usage: {end}"));
            }
        }
        if scopes("tool", "start").is_empty() || scopes("tool", "end").is_empty() {
            fail("no tool scope");
        }
        let denied = records.iter().any(|r| {
            r["kind"] == "mark"
                && r["category"] == "guardrail"
                && r["data"]["decision"] == "deny"
                && r["data"]["reason"] == DENY_REASON
        });
        if !denied {
            fail("no guardrail mark for the deny");
        }

        // Content capture keeps the prompt's words but never the secrets.
        if !text.contains(PROMPT_WORD) {
            fail("the prompt is not in the records");
        }
        if !text.contains("[REDACTED:email]") || !text.contains("[REDACTED:api_key]") {
            fail("the secrets were not replaced as the action says");
        }
        if text.contains(EMAIL) || text.contains(API_KEY) {
            fail("a secret reached the ATOF file");
        }

        // The http collector got the same records.
        let expected: HashSet<String> = records.iter().map(record_key).collect();
        self.collector
            .wait_until("the file's records", WORKER_TIMEOUT, |got, _| {
                got.iter().map(record_key).collect::<HashSet<_>>() == expected
            })
            .await?;
        let posted = serde_json::to_string(&self.collector.records())?;
        assert!(
            !posted.contains(EMAIL) && !posted.contains(API_KEY),
            "a secret reached the http collector"
        );

        // The OTLP receiver got a span per scope, named, attributed and linked as it.
        let scope_starts: Vec<&Value> = records
            .iter()
            .filter(|r| r["kind"] == "scope" && r["scope_category"] == "start")
            .collect();
        let wanted: HashSet<Vec<u8>> = scope_starts
            .iter()
            .map(|r| span_id_of(r["uuid"].as_str().unwrap_or_default()))
            .collect();
        self.collector
            .wait_until("a span per scope", WORKER_TIMEOUT, |_, spans| {
                let got: HashSet<Vec<u8>> = spans.iter().map(|s| s.span_id.clone()).collect();
                wanted.is_subset(&got)
            })
            .await?;
        assert!(
            self.collector.undecodable().is_empty(),
            "{:?}",
            self.collector.undecodable()
        );
        // Both exporters sent the secret that `header_env` names, which the worker could only
        // have from relay-mcp: the harness set it, and the worker's environment is cleared.
        let keys = self.collector.keys();
        assert!(
            keys.iter().all(|k| k.as_deref() == Some(COLLECTOR_KEY)),
            "{keys:?}"
        );
        // A secret the worker holds reaches no log.
        let d = &self.deployment;
        for (whose, text) in [
            ("relayd", d.relayd.logs().text()),
            ("the workers", d.user.worker_log_text()),
        ] {
            assert!(
                !text.contains(COLLECTOR_KEY),
                "the collector key is in the log of {whose}"
            );
        }
        let spans = self.collector.spans();
        let by_id: HashMap<Vec<u8>, &Span> = spans.iter().map(|s| (s.span_id.clone(), s)).collect();
        for start in scope_starts {
            let uuid = start["uuid"].as_str().unwrap_or_default();
            let Some(span) = by_id.get(&span_id_of(uuid)) else {
                fail(&format!("no span for {uuid}"));
            };
            check_span(span, start).unwrap_or_else(|why| fail(&why));
        }
        for span in &spans {
            for attribute in &span.attributes {
                let value = format!("{:?}", attribute.value);
                if value.contains(EMAIL) || value.contains(API_KEY) {
                    fail(&format!(
                        "a secret reached span {} in {}",
                        span.name, attribute.key
                    ));
                }
            }
        }
        Ok(())
    }
}

/// The tool results of a request body (Anthropic `tool_result` blocks, OpenAI
/// `function_call_output` items), or the whole body when it has none.
fn tail(body: &[u8]) -> String {
    let Ok(request) = serde_json::from_slice::<Value>(body) else {
        return String::from_utf8_lossy(body).into_owned();
    };
    let mut results = Vec::new();
    for item in request["input"].as_array().into_iter().flatten() {
        if item["type"] == "function_call_output" {
            results.push(item.to_string());
        }
    }
    for message in request["messages"].as_array().into_iter().flatten() {
        for block in message["content"].as_array().into_iter().flatten() {
            if block["type"] == "tool_result" {
                results.push(block.to_string());
            }
        }
    }
    if results.is_empty() {
        return String::from_utf8_lossy(body).into_owned();
    }
    results.join("\n")
}

/// What makes a record itself: its uuid and which edge of its scope it is.
fn record_key(record: &Value) -> String {
    format!(
        "{} {} {}",
        record["uuid"].as_str().unwrap_or_default(),
        record["kind"].as_str().unwrap_or_default(),
        record["scope_category"].as_str().unwrap_or_default()
    )
}

/// The span id of a scope: the last 8 bytes of its uuid (relay_sinks::span_id).
fn span_id_of(uuid: &str) -> Vec<u8> {
    uuid::Uuid::parse_str(uuid)
        .map(|u| u.as_bytes()[8..].to_vec())
        .unwrap_or_default()
}

fn attribute<'a>(span: &'a Span, key: &str) -> Option<&'a AnyValue> {
    span.attributes
        .iter()
        .find(|a| a.key == key)
        .and_then(|a| a.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

fn str_attribute<'a>(span: &'a Span, key: &str) -> Option<&'a str> {
    match attribute(span, key) {
        Some(AnyValue::StringValue(text)) => Some(text),
        _ => None,
    }
}

fn int_attribute(span: &Span, key: &str) -> Option<i64> {
    match attribute(span, key) {
        Some(AnyValue::IntValue(n)) => Some(*n),
        _ => None,
    }
}

/// A span agrees with its ATOF scope start: name, GenAI operation, model and usage, parent.
fn check_span(span: &Span, start: &Value) -> Result<(), String> {
    let name = start["name"].as_str().unwrap_or_default();
    let (expected_name, operation) = match start["category"].as_str().unwrap_or_default() {
        "agent" => (format!("invoke_agent {name}"), Some("invoke_agent")),
        "llm" => (
            format!("chat {}", start["data"]["model"].as_str().unwrap_or(name)),
            Some("chat"),
        ),
        "tool" => (format!("execute_tool {name}"), Some("execute_tool")),
        _ => (span.name.clone(), None),
    };
    if span.name != expected_name {
        return Err(format!("span {} for scope {start}", span.name));
    }
    if str_attribute(span, "gen_ai.operation.name") != operation {
        return Err(format!(
            "span {} has the wrong gen_ai.operation.name",
            span.name
        ));
    }
    if start["category"] == "llm" {
        if str_attribute(span, "gen_ai.request.model") != start["data"]["model"].as_str() {
            return Err(format!(
                "span {} has the wrong gen_ai.request.model",
                span.name
            ));
        }
        if int_attribute(span, "gen_ai.usage.input_tokens") != Some(10)
            || int_attribute(span, "gen_ai.usage.output_tokens").is_none()
        {
            return Err(format!("span {} lacks the stand-in's usage", span.name));
        }
    }
    if let Some(parent) = start["parent_uuid"].as_str() {
        // A request that carried the harness's traceparent hangs under the harness's span
        // and keeps its ATOF parent in an attribute.
        let linked = span.parent_span_id == span_id_of(parent)
            || str_attribute(span, "relay.atof.parent_uuid") == Some(parent);
        if !linked {
            return Err(format!(
                "span {} is not under its scope's parent",
                span.name
            ));
        }
    }
    Ok(())
}

#[tokio::test]
async fn claude_code_runs_with_the_plugins() -> anyhow::Result<()> {
    let run = PluginRun::start("", "", RM_CANARY).await?;
    let out = run.run_claude().await?;
    run.check(&out, "anthropic").await?;
    // It was the policy, not Claude Code's permission prompt, that stopped the command.
    let refused = run
        .deployment
        .tap
        .exchanges()
        .iter()
        .any(|e| contains(&e.received, b"relay_policy_rejected"));
    assert!(
        refused,
        "relayd never answered a hook with the policy's refusal\n{out}"
    );
    Ok(())
}

#[tokio::test]
async fn codex_runs_with_the_plugins() -> anyhow::Result<()> {
    let run = PluginRun::start("", "", "echo {canary} | xargs rm -rf").await?;
    let out = run
        .deployment
        .run_codex(&prompt(), CodexInstall::System)
        .await?;
    run.check(&out, "openai").await
}

#[tokio::test]
async fn pi_runs_with_the_plugins() -> anyhow::Result<()> {
    let run = PluginRun::start("", "", RM_CANARY).await?;
    let out = run.deployment.run_pi(&prompt(), false).await?;
    run.check(&out, "anthropic").await
}

/// With `redact_requests = true` the provider never sees the secrets either.
#[tokio::test]
async fn claude_code_requests_are_redacted_when_asked() -> anyhow::Result<()> {
    let run = PluginRun::start("", "redact_requests = true\n", RM_CANARY).await?;
    let out = run.run_claude().await?;
    run.finished(&out, "anthropic").await?;
    assert!(
        run.canary.path().join("keep-me").exists(),
        "the denied rm -rf ran"
    );
    let turns = run.model_requests();
    for turn in &turns {
        assert!(
            !contains(&turn.body, EMAIL.as_bytes()) && !contains(&turn.body, API_KEY.as_bytes()),
            "the provider saw a secret: {}",
            String::from_utf8_lossy(&turn.body)
        );
    }
    assert!(
        contains(&turns[0].body, b"[REDACTED:email]")
            && contains(&turns[0].body, PROMPT_WORD.as_bytes()),
        "the prompt was not redacted in place: {}",
        String::from_utf8_lossy(&turns[0].body)
    );
    let (text, _) = run.file_records()?;
    assert!(
        !text.contains(EMAIL) && !text.contains(API_KEY),
        "a secret reached the ATOF file"
    );
    Ok(())
}

/// In dry run the same rule is recorded as a deny and blocks nothing: the command runs.
#[tokio::test]
async fn claude_code_dry_run_records_the_deny_and_blocks_nothing() -> anyhow::Result<()> {
    let run = PluginRun::start("mode = \"dry_run\"\n", "", RM_CANARY).await?;
    let out = run.run_claude().await?;
    run.finished(&out, "anthropic").await?;
    let last = run
        .model_requests()
        .last()
        .map(|r| tail(&r.body))
        .unwrap_or_default();
    assert!(
        !run.canary.path().exists(),
        "the dry-run policy blocked the command\n{out}\ntool result: {last}"
    );
    let refused = run
        .deployment
        .tap
        .exchanges()
        .iter()
        .any(|e| contains(&e.received, b"relay_policy_rejected"));
    assert!(!refused, "a dry run refused a hook\n{out}");
    let (text, records) = run.file_records()?;
    let recorded = records.iter().any(|r| {
        r["category"] == "guardrail"
            && r["data"]["decision"] == "deny"
            && r["data"]["reason"] == DENY_REASON
            && r["data"]["dry_run"] == true
    });
    assert!(recorded, "no dry-run guardrail mark: {text}");
    Ok(())
}

/// A closed port: the http collector of the next test is down.
async fn closed_port() -> anyhow::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    drop(listener);
    Ok(format!("http://{addr}/atof"))
}

/// The http collector is down: Claude Code's session runs as usual, the file sink still
/// gets every record. A model the allow-list does not name is refused with 403 before
/// anything reaches the provider, and the refusal is a guardrail mark.
#[tokio::test]
async fn a_down_collector_slows_nothing_and_the_model_allow_list_holds() -> anyhow::Result<()> {
    let atof_dir = atof_dir()?;
    let plugins = format!(
        r#"version = 1

[[components]]
kind = "observability"
enabled = true
[components.config]
[[components.config.sinks]]
type = "file"
directory = {dir}
filename = "events-{{user}}.jsonl"
[[components.config.sinks]]
type = "http"
url = {url}
flush_ms = 50
timeout_ms = 500

[[components]]
kind = "policy"
enabled = true
[components.config]
[[components.config.rules]]
model = "claude-*"
action = "allow"
[[components.config.rules]]
model = "*"
action = "deny"
reason = "only the approved models"
"#,
        dir = toml::Value::from(atof_dir.path().display().to_string()),
        url = toml::Value::from(closed_port().await?),
    );
    let deployment = Deployment::start_with(Extras {
        plugins_toml: Some(&plugins),
        ..Extras::default()
    })
    .await?;
    let started = tokio::time::Instant::now();
    let out = deployment
        .run_claude("run echo", serde_json::json!({"allow": ["Bash(echo:*)"]}))
        .await?;
    let took = started.elapsed();
    deployment
        .check(&out, "anthropic", "/hooks/claude-code", &HOOK_EVENTS)
        .await?;
    // Stop and SessionEnd wait at most 2 s each for the sinks; a run that waited out
    // every retry of the down collector would take far longer than the agent's timeout.
    assert!(took < relay_e2e::AGENT_TIMEOUT, "the session took {took:?}");

    // A worker for a direct request with a model the allow-list does not name.
    let mut mcp = super::support::ready_mcp(
        &deployment.user,
        &deployment.tap.origin(),
        &deployment.token,
    )
    .await?;
    let before = deployment.stand_in.request_count();
    let marker = super::support::marker("allow-list")?;
    let (status, _, body) = relay_e2e::http::fetch(
        deployment.relayd.addr(),
        super::support::anthropic_request(&deployment.token, &marker)?,
    )
    .await?;
    let body = String::from_utf8_lossy(&body).into_owned();
    assert_eq!(status, http::StatusCode::FORBIDDEN, "{body}");
    assert!(body.contains("relay_policy_rejected"), "{body}");
    assert!(body.contains("only the approved models"), "{body}");
    assert_eq!(
        deployment.stand_in.request_count(),
        before,
        "the refused request reached the provider"
    );
    assert!(super::support::recorded_with(&deployment.stand_in, &marker).is_empty());
    mcp.close_stdin();
    deployment.user.wait_for_workers(0, WORKER_TIMEOUT).await?;

    let (text, records) = atof_records(atof_dir.path())?;
    let model_turns = deployment
        .stand_in
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST")
        .count();
    let llm_ends = records
        .iter()
        .filter(|r| r["category"] == "llm" && r["scope_category"] == "end")
        .count();
    assert!(
        llm_ends >= model_turns,
        "the file sink lost records while the collector was down: {text}"
    );
    let refused = records.iter().any(|r| {
        r["category"] == "guardrail"
            && r["data"]["decision"] == "deny"
            && r["data"]["event"] == "model_request"
    });
    assert!(refused, "no guardrail mark for the refused model: {text}");
    assert!(
        !text.contains(&deployment.token),
        "the route token reached a record"
    );
    Ok(())
}
