//! The policy engine (SPEC §8.1 policy, §7.2): ordered rules, first match wins, no match
//! allows. Hook rules look at a hook event, the tool name and a field of the tool input;
//! model rules look at the model name and the route of a model request. The component's mode
//! decides whether a deny blocks (`enforce`) or is only recorded (`dry_run`).
//!
//! Evaluation allocates nothing unless a rule reads a non-string field of the tool input:
//! the worker calls [`Policy::evaluate_hook`] for every hook and [`Policy::evaluate_model`]
//! for every model request, before anything is forwarded.

use std::borrow::Cow;
use std::fmt;

use globset::{GlobBuilder, GlobMatcher};
use regex::Regex;
use serde_json::Value;

/// The harness a hook came from (its route `/hooks/<agent>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Agent {
    ClaudeCode,
    Codex,
    Pi,
}

impl Agent {
    pub const ALL: [Agent; 3] = [Agent::ClaudeCode, Agent::Codex, Agent::Pi];

    /// The name in hook routes and ATOF records: `claude-code`, `codex`, `pi`.
    pub fn as_str(self) -> &'static str {
        match self {
            Agent::ClaudeCode => "claude-code",
            Agent::Codex => "codex",
            Agent::Pi => "pi",
        }
    }

    pub fn parse(text: &str) -> Option<Agent> {
        Agent::ALL.into_iter().find(|a| a.as_str() == text)
    }

    /// The one API the harness speaks through Relay, if it has one: Claude Code Anthropic's
    /// Messages, Codex OpenAI's Responses; pi speaks to whichever provider it is given.
    pub fn wire_format(self) -> Option<crate::WireFormat> {
        match self {
            Agent::ClaudeCode => Some(crate::WireFormat::AnthropicMessages),
            Agent::Codex => Some(crate::WireFormat::OpenAiResponses),
            Agent::Pi => None,
        }
    }

    /// Whether a deny on `event` stops the harness (SPEC §7.1): Claude Code and Codex
    /// `PreToolUse`, `PermissionRequest`, `UserPromptSubmit`; pi `tool_call`, `user_bash`.
    pub fn is_blocking_event(self, event: &str) -> bool {
        match self {
            Agent::ClaudeCode | Agent::Codex => CLAUDE_BLOCKING.contains(&event),
            Agent::Pi => PI_BLOCKING.contains(&event),
        }
    }
}

impl fmt::Display for Agent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

const CLAUDE_BLOCKING: &[&str] = &["PreToolUse", "PermissionRequest", "UserPromptSubmit"];
const PI_BLOCKING: &[&str] = &["tool_call", "user_bash"];

/// Claude Code's and Codex's hook events (one vocabulary).
pub const CLAUDE_EVENTS: &[&str] = &[
    "SessionStart",
    "UserPromptSubmit",
    "PreToolUse",
    "PermissionRequest",
    "PostToolUse",
    "PostToolUseFailure",
    "PostToolBatch",
    "Notification",
    "MessageDisplay",
    "Stop",
    "SubagentStart",
    "SubagentStop",
    "PreCompact",
    "PostCompact",
    "SessionEnd",
];

/// pi's extension events, as the Relay pi extension forwards them.
pub const PI_EVENTS: &[&str] = &[
    "session_start",
    "input",
    "tool_call",
    "tool_result",
    "user_bash",
    "agent_start",
    "agent_end",
    "before_agent_start",
    "before_provider_request",
    "after_provider_response",
    "turn_start",
    "turn_end",
    "message_end",
    "tool_execution_start",
    "tool_execution_end",
    "session_shutdown",
];

/// Every hook event name a rule may name. A name outside these lists is a configuration
/// error, so a typo cannot silently disable a rule.
pub const HOOK_EVENTS: &[&[&str]] = &[CLAUDE_EVENTS, PI_EVENTS];

/// Whether `event` is a hook event name of some harness.
pub fn is_hook_event(event: &str) -> bool {
    HOOK_EVENTS.iter().any(|events| events.contains(&event))
}

/// Whether some harness can block on `event`, i.e. whether a deny rule may name it.
pub fn is_blocking_event_name(event: &str) -> bool {
    CLAUDE_BLOCKING.contains(&event) || PI_BLOCKING.contains(&event)
}

/// Whether a rule naming `rule` covers `event` from `agent`. Claude Code's and Codex's
/// `PreToolUse` is pi's `tool_call`: a rule naming either covers all three harnesses, so
/// one rule guards every agent's tools. An event outside the agent's own vocabulary never
/// matches, so a payload cannot claim another harness's event.
fn same_event(rule: &str, agent: Agent, event: &str) -> bool {
    let (own, rule) = match (agent, rule) {
        (Agent::ClaudeCode | Agent::Codex, "tool_call") => (CLAUDE_EVENTS, "PreToolUse"),
        (Agent::ClaudeCode | Agent::Codex, rule) => (CLAUDE_EVENTS, rule),
        (Agent::Pi, "PreToolUse") => (PI_EVENTS, "tool_call"),
        (Agent::Pi, rule) => (PI_EVENTS, rule),
    };
    rule == event && own.contains(&event)
}

/// Whether a deny blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// A deny is answered 403 `relay_policy_rejected`.
    #[default]
    Enforce,
    /// Decisions are recorded and nothing is blocked.
    DryRun,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::DryRun => "dry_run",
        }
    }
}

/// What a matching rule decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Allow,
    Deny,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::Deny => "deny",
        }
    }
}

/// The provider family of a model request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Route {
    /// Anthropic Messages (`/v1/messages`).
    Anthropic,
    /// OpenAI Responses and Chat Completions (`/v1/responses`, `/v1/chat/completions`).
    OpenAi,
}

impl Route {
    pub fn as_str(self) -> &'static str {
        match self {
            Route::Anthropic => "anthropic",
            Route::OpenAi => "openai",
        }
    }

    pub fn parse(text: &str) -> Option<Route> {
        match text {
            "anthropic" => Some(Route::Anthropic),
            "openai" => Some(Route::OpenAi),
            _ => None,
        }
    }
}

/// A tool or model name pattern: exact, or a glob when it holds `*`, `?`, `[` or `{`.
/// Both compare ignoring ASCII case, so `Bash` also matches pi's `bash`.
#[derive(Debug, Clone)]
pub struct NamePattern {
    source: String,
    glob: Option<GlobMatcher>,
}

impl NamePattern {
    pub fn parse(source: &str) -> Result<NamePattern, globset::Error> {
        let glob = if source.contains(['*', '?', '[', '{']) {
            let glob = GlobBuilder::new(source)
                .case_insensitive(true)
                .literal_separator(false)
                .build()?;
            Some(glob.compile_matcher())
        } else {
            None
        };
        Ok(NamePattern {
            source: source.to_owned(),
            glob,
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    pub fn is_glob(&self) -> bool {
        self.glob.is_some()
    }

    pub fn matches(&self, name: &str) -> bool {
        match &self.glob {
            Some(glob) => glob.is_match(name),
            None => self.source.eq_ignore_ascii_case(name),
        }
    }
}

impl PartialEq for NamePattern {
    fn eq(&self, other: &NamePattern) -> bool {
        self.source == other.source
    }
}

/// Which field of the tool input a regex reads: a JSON pointer (`/a/b`) or a top-level key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InputField {
    Key(String),
    Pointer(String),
}

impl InputField {
    pub fn parse(text: &str) -> InputField {
        if text.starts_with('/') {
            InputField::Pointer(text.to_owned())
        } else {
            InputField::Key(text.to_owned())
        }
    }

    fn lookup<'v>(&self, input: &'v Value) -> Option<&'v Value> {
        match self {
            InputField::Key(key) => input.get(key),
            InputField::Pointer(pointer) => input.pointer(pointer),
        }
    }
}

/// A regex over one field of the tool input. A string field is matched as it is, any other
/// value as its JSON text; a missing or null field does not match.
#[derive(Debug, Clone)]
pub struct InputMatch {
    pub field: InputField,
    pub regex: Regex,
}

impl InputMatch {
    fn matches(&self, input: &Value) -> bool {
        let text: Cow<'_, str> = match self.field.lookup(input) {
            None | Some(Value::Null) => return false,
            Some(Value::String(text)) => Cow::Borrowed(text),
            Some(other) => Cow::Owned(other.to_string()),
        };
        self.regex.is_match(&text)
    }
}

impl PartialEq for InputMatch {
    fn eq(&self, other: &InputMatch) -> bool {
        self.field == other.field && self.regex.as_str() == other.regex.as_str()
    }
}

/// What a hook rule looks at; every part that is set must match.
#[derive(Debug, Clone, PartialEq)]
pub struct HookMatch {
    /// The event as written (`PreToolUse` also covers pi's `tool_call` and back).
    pub event: String,
    /// Only this harness, when set.
    pub agent: Option<Agent>,
    pub tool: Option<NamePattern>,
    pub input: Option<InputMatch>,
}

/// What a model rule looks at; every part that is set, and at least one is, must match.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelMatch {
    pub model: Option<NamePattern>,
    pub route: Option<Route>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Matcher {
    Hook(HookMatch),
    Model(ModelMatch),
}

/// One `[[components.config.rules]]` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    pub matcher: Matcher,
    pub action: Action,
    /// Required for a deny; shown to the user and to the model.
    pub reason: Option<String>,
}

/// A policy component's configuration, validated.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PolicyConfig {
    pub mode: Mode,
    pub rules: Vec<Rule>,
}

/// The outcome of one evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision<'p> {
    pub action: Action,
    /// The matching rule's reason.
    pub reason: Option<&'p str>,
    /// The matching rule's position among the rules, counted from 1; `None` when no rule
    /// matched (which allows).
    pub rule: Option<usize>,
    pub mode: Mode,
}

impl Decision<'_> {
    /// Whether the worker must refuse: a deny in enforce mode. A dry-run deny is recorded as
    /// a guardrail mark and lets the request through.
    pub fn blocks(&self) -> bool {
        self.action == Action::Deny && self.mode == Mode::Enforce
    }

    /// Whether a rule matched (and so whether there is a decision worth a guardrail mark).
    pub fn is_match(&self) -> bool {
        self.rule.is_some()
    }
}

/// The policy engine over a validated configuration.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Policy {
    config: PolicyConfig,
}

impl Policy {
    pub fn new(config: PolicyConfig) -> Policy {
        Policy { config }
    }

    pub fn config(&self) -> &PolicyConfig {
        &self.config
    }

    /// Whether any rule looks at model requests: without one the worker need not read the
    /// model name out of a request body at all.
    pub fn has_model_rules(&self) -> bool {
        self.config
            .rules
            .iter()
            .any(|r| matches!(r.matcher, Matcher::Model(_)))
    }

    /// Whether a model rule can block: in `dry_run` nothing is refused, so a body whose
    /// model is unclear goes on like any other.
    pub fn enforces_model_rules(&self) -> bool {
        self.config.mode == Mode::Enforce && self.has_model_rules()
    }

    /// Whether any rule looks at hooks.
    pub fn has_hook_rules(&self) -> bool {
        self.config
            .rules
            .iter()
            .any(|r| matches!(r.matcher, Matcher::Hook(_)))
    }

    /// Decides a hook. `event` is the hook's event name (`hook_event_name`), `payload` the
    /// JSON the harness sent. Claude Code and Codex carry `tool_name` and `tool_input` at
    /// the top; pi carries `event.toolName` and `event.input`. For events without a tool
    /// input (a prompt, pi's `user_bash`) a rule's field is read from the payload itself
    /// (for pi, from `event`).
    pub fn evaluate_hook(&self, agent: Agent, event: &str, payload: &Value) -> Decision<'_> {
        let (tool, input) = tool_and_input(agent, payload);
        self.first_match(|matcher| match matcher {
            Matcher::Hook(rule) => {
                same_event(&rule.event, agent, event)
                    && rule.agent.is_none_or(|a| a == agent)
                    && rule
                        .tool
                        .as_ref()
                        .is_none_or(|pattern| tool.is_some_and(|t| pattern.matches(t)))
                    && rule.input.as_ref().is_none_or(|m| m.matches(input))
            }
            Matcher::Model(_) => false,
        })
    }

    /// Decides a model request by its route and the model it names.
    pub fn evaluate_model(&self, route: Route, model: &str) -> Decision<'_> {
        self.first_match(|matcher| match matcher {
            Matcher::Model(rule) => {
                rule.route.is_none_or(|r| r == route)
                    && rule.model.as_ref().is_none_or(|m| m.matches(model))
            }
            Matcher::Hook(_) => false,
        })
    }

    fn first_match(&self, mut matches: impl FnMut(&Matcher) -> bool) -> Decision<'_> {
        let mode = self.config.mode;
        for (index, rule) in self.config.rules.iter().enumerate() {
            if matches(&rule.matcher) {
                return Decision {
                    action: rule.action,
                    reason: rule.reason.as_deref(),
                    rule: Some(index + 1),
                    mode,
                };
            }
        }
        Decision {
            action: Action::Allow,
            reason: None,
            rule: None,
            mode,
        }
    }
}

/// The tool name and the object a rule's `input_field` reads, per harness payload shape.
fn tool_and_input(agent: Agent, payload: &Value) -> (Option<&str>, &Value) {
    match agent {
        Agent::ClaudeCode | Agent::Codex => (
            payload.get("tool_name").and_then(Value::as_str),
            payload.get("tool_input").unwrap_or(payload),
        ),
        Agent::Pi => {
            let event = payload.get("event").unwrap_or(payload);
            (
                event.get("toolName").and_then(Value::as_str),
                event.get("input").unwrap_or(event),
            )
        }
    }
}

#[cfg(test)]
mod tests;
