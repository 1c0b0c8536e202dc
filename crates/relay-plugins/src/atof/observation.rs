//! What the recorder is told: plain data the worker builds from the requests it serves.

use serde_json::Value;

/// The harness a hook event or session belongs to; its name names the session scope.
pub use crate::policy::Agent;
use crate::{Cost, Usage, Usd};

/// The worker's own key for one model request, chosen by the caller and unique while the
/// request is in flight; it matches a [`ModelRequestEnd`] to its [`ModelRequestStart`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub u64);

/// One hook event as it reached the worker.
#[derive(Debug, Clone, PartialEq)]
pub struct HookEvent {
    pub agent: Agent,
    /// The harness's event name (`PreToolUse`, pi's `tool_call`, ...).
    pub event: String,
    /// The harness session id; `None` when the payload carries none.
    pub session_id: Option<String>,
    pub tool_name: Option<String>,
    /// Claude Code's and Codex's `tool_use_id`, pi's `toolCallId`.
    pub tool_use_id: Option<String>,
    /// The native payload. The recorder takes content from it only with `capture_content`.
    pub payload: Value,
}

impl HookEvent {
    /// Reads the fields the recorder keys on out of a native payload: top-level
    /// `hook_event_name`, `session_id`, `tool_name`, `tool_use_id` for Claude Code and Codex;
    /// pi's forwarded shape keeps the tool fields under `event` (`toolName`, `toolCallId`).
    /// A payload without an event name is recorded as event `unknown`.
    pub fn from_payload(agent: Agent, payload: Value) -> HookEvent {
        let text = |value: Option<&Value>| value.and_then(Value::as_str).map(str::to_owned);
        let event = text(payload.get("hook_event_name")).unwrap_or_else(|| "unknown".to_owned());
        let session_id = text(payload.get("session_id"));
        let (tool_name, tool_use_id) = match agent {
            Agent::ClaudeCode | Agent::Codex => (
                text(payload.get("tool_name")),
                text(payload.get("tool_use_id")),
            ),
            Agent::Pi => {
                let inner = payload.get("event");
                (
                    text(inner.and_then(|e| e.get("toolName"))),
                    text(inner.and_then(|e| e.get("toolCallId"))),
                )
            }
        };
        HookEvent {
            agent,
            event,
            session_id,
            tool_name,
            tool_use_id,
            payload,
        }
    }
}

/// A model request about to be forwarded.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelRequestStart {
    pub request_id: RequestId,
    /// From the request headers (see [`request_session_id`]).
    pub session_id: Option<String>,
    /// The route path, e.g. `/v1/messages`.
    pub route: String,
    pub model: Option<String>,
    pub stream: bool,
    pub request_bytes: u64,
    /// The prompt text, already redacted by the worker; used only with `capture_content`.
    pub prompt: Option<String>,
    /// Secrets the redaction component rewrote in the body sent to the provider (0 when it
    /// does not rewrite request bodies or found none).
    pub request_redactions: u64,
    /// The `traceparent` header the harness sent, as it came; the trace exporter joins the
    /// request's span to that trace.
    pub traceparent: Option<String>,
    /// The provider's host and port the request goes to (`server.address`, `server.port`).
    pub server: Option<(String, u16)>,
}

/// Usage of one model request, as the usage parser reports it (every count optional: not
/// every provider reports every figure).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UsageFacts {
    /// Input tokens that were neither read from nor written to a prompt cache.
    pub uncached_input_tokens: Option<u64>,
    pub cache_read_tokens: Option<u64>,
    pub cache_write_5m_tokens: Option<u64>,
    pub cache_write_1h_tokens: Option<u64>,
    /// The input total as the GenAI conventions define it for this provider.
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub reasoning_tokens: Option<u64>,
    /// Cost of this request, when a price table prices it; written as a decimal string.
    pub cost: Option<Usd>,
    /// Why a price table that is there gives this request no cost (a model it does not
    /// list, or a bucket with tokens and no price), so that a missing cost is not read as
    /// a free request.
    pub cost_error: Option<String>,
}

impl UsageFacts {
    /// The facts of one normalised usage, with its cost when it has one.
    pub fn new(usage: &Usage, cost: Option<&Cost>) -> UsageFacts {
        UsageFacts::new_totals(usage, cost.map(|c| c.total))
    }

    /// The facts of a usage summed over requests, with their summed cost.
    pub fn new_totals(usage: &Usage, cost: Option<Usd>) -> UsageFacts {
        UsageFacts {
            uncached_input_tokens: Some(usage.uncached_input),
            cache_read_tokens: Some(usage.cache_read),
            cache_write_5m_tokens: Some(usage.cache_write_5m),
            cache_write_1h_tokens: Some(usage.cache_write_1h),
            input_tokens: Some(usage.genai_input_tokens()),
            output_tokens: Some(usage.genai_output_tokens()),
            reasoning_tokens: usage.reasoning,
            cost,
            cost_error: None,
        }
    }
}

/// A model request whose response ended (or failed).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelRequestEnd {
    pub request_id: RequestId,
    /// The HTTP status the harness received.
    pub status: u16,
    pub duration_ms: u64,
    pub time_to_first_byte_ms: Option<u64>,
    pub usage: Option<UsageFacts>,
    /// The model that answered, as the response body names it.
    pub response_model: Option<String>,
    /// The provider's id of the answer.
    pub response_id: Option<String>,
    /// Why generation stopped, per choice, as the provider words it.
    pub finish_reasons: Vec<String>,
    /// The side copy overflowed its bound, so usage may be incomplete.
    pub truncated: bool,
    /// What went wrong after a successful head: the error the stream reported (its type or
    /// code), or `response_body_failed` when the provider's body broke off.
    pub error: Option<String>,
    /// The response text, already redacted; used only with `capture_content`.
    pub response: Option<String>,
}

/// What a policy decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Deny,
}

impl Decision {
    fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Deny => "deny",
        }
    }
}

/// What a policy decision was about.
#[derive(Debug, Clone, PartialEq)]
pub enum PolicyTarget {
    /// A hook event (feed the [`HookEvent`] itself first, then its decision).
    Hook {
        agent: Agent,
        session_id: Option<String>,
        event: String,
        tool_use_id: Option<String>,
    },
    /// A model request (feed its [`ModelRequestStart`] first).
    ModelRequest { request_id: RequestId },
}

/// One policy decision, recorded as a `guardrail` mark.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyDecision {
    pub target: PolicyTarget,
    /// The rule that matched (its name or position); `None` when none did.
    pub rule: Option<String>,
    pub decision: Decision,
    pub reason: Option<String>,
    /// The component runs in `dry_run` mode: the decision was recorded and nothing blocked.
    pub dry_run: bool,
}

impl PolicyDecision {
    /// A deny that actually blocked something.
    pub fn is_enforced_deny(&self) -> bool {
        self.decision == Decision::Deny && !self.dry_run
    }

    pub(super) fn decision_str(&self) -> &'static str {
        self.decision.as_str()
    }
}

/// Everything the recorder can be told.
#[derive(Debug, Clone, PartialEq)]
pub enum Observation {
    Hook(HookEvent),
    ModelRequestStart(ModelRequestStart),
    ModelRequestEnd(ModelRequestEnd),
    PolicyDecision(PolicyDecision),
    /// The worker is stopping: every open scope is closed.
    Shutdown,
}

/// The request headers that carry a harness session id, in the order they are believed:
/// the pi extension's own header first, then Claude Code's, Codex's and pi's OpenAI client's.
pub const SESSION_ID_HEADERS: [&str; 4] = [
    "x-relay-session-id",
    "x-claude-code-session-id",
    "session-id",
    "session_id",
];

/// The harness session id of a model request, from its headers (names compared without
/// regard to case; a value that is not UTF-8 or is empty does not count).
pub fn request_session_id<'a, I>(headers: I) -> Option<&'a str>
where
    I: IntoIterator<Item = (&'a str, &'a [u8])>,
{
    let mut best: Option<(usize, &'a str)> = None;
    for (name, value) in headers {
        let Some(rank) = SESSION_ID_HEADERS
            .iter()
            .position(|known| known.eq_ignore_ascii_case(name))
        else {
            continue;
        };
        let Ok(value) = std::str::from_utf8(value) else {
            continue;
        };
        let value = value.trim();
        if value.is_empty() || best.is_some_and(|(r, _)| r <= rank) {
            continue;
        }
        best = Some((rank, value));
    }
    best.map(|(_, value)| value)
}
