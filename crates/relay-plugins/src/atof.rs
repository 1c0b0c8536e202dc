//! The ATOF recorder (SPEC §8.2): a state machine that turns what the worker observes (hook
//! events, model requests, policy decisions) into ATOF 0.1 records with consistent parent
//! links.
//!
//! Like the broker it does no IO and reads no clock or randomness of its own: the time of
//! each observation is an argument, uuids are built from that time and bytes of the injected
//! [`Entropy`], and content passes through the injected [`Redactor`]. Its API is
//! [`Recorder::handle`] and [`Recorder::poll_record`]; every record an observation causes is
//! ready to poll when `handle` returns.
//!
//! The shape it keeps:
//! - a session is an `agent` scope named after the harness, from its first hook to its last;
//! - a turn is a `custom` scope named `turn` under its session;
//! - a model request is an `llm` scope under its session's open turn, else its session, else
//!   no parent; a tool call is a `tool` scope under the open turn, else the session;
//! - a policy decision is a `guardrail` mark, every other hook a `custom` mark;
//! - an end is never written without its start: an end nothing started either opens an
//!   implicit scope first (hooks) or is dropped (a model request end);
//! - memory is bounded: at most `max_sessions` sessions and `max_open_scopes` open tool and
//!   llm scopes per session; going over closes the least recently active one, saying so.
//!
//! The handlers stay in this one file, past the usual size, because they share the session
//! table and the open-scope bookkeeping and each rule above is easiest to check beside the
//! others; observations, records, content handling and emission have their own modules.

mod content;
mod emit;
mod observation;
mod record;

#[cfg(test)]
mod tests;

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::time::SystemTime;

use serde_json::{Map, Value, json};

use crate::{TraceParent, Usage, Usd};
use uuid::Uuid;

pub use content::{NoRedaction, Redactor};
pub use observation::{
    Agent, Decision, HookEvent, ModelRequestEnd, ModelRequestStart, Observation, PolicyDecision,
    PolicyTarget, RequestId, SESSION_ID_HEADERS, UsageFacts, request_session_id,
};
pub use record::{ATOF_VERSION, Category, DataSchema, Record, RecordKind, ScopeCategory};

use content::bounded_id;
use emit::{Emitter, OpenScope};

/// Randomness for uuids, injected so the recorder stays deterministic under test.
pub trait Entropy: Send {
    /// Ten fresh random bytes: the random part of a v7 uuid.
    fn uuid_bytes(&mut self) -> [u8; 10];
}

/// The recorder's settings (the observability component's options).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecorderConfig {
    /// Put prompts, tool input and output and response text into records (after redaction).
    pub capture_content: bool,
    /// Bound on each content field of a record; longer content is cut and the record marked
    /// `content_truncated`.
    pub max_content_bytes: usize,
    /// Sessions tracked at once; one more evicts the least recently active.
    pub max_sessions: usize,
    /// Open tool and llm scopes per session (and for model requests matched to no session);
    /// one more evicts the oldest.
    pub max_open_scopes: usize,
}

impl Default for RecorderConfig {
    fn default() -> Self {
        RecorderConfig {
            capture_content: false,
            max_content_bytes: 64 * 1024,
            max_sessions: 1024,
            max_open_scopes: 256,
        }
    }
}

const SESSION: DataSchema = schema("relay.session");
const TURN: DataSchema = schema("relay.turn");
const LLM: DataSchema = schema("relay.llm");
const TOOL: DataSchema = schema("relay.tool");
const GUARDRAIL: DataSchema = schema("relay.guardrail");
const HOOK: DataSchema = schema("relay.hook");

const fn schema(name: &'static str) -> DataSchema {
    DataSchema { name, version: "1" }
}

/// Why a scope was closed by something other than its own end event; written as the end
/// record's `closed_by`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClosedBy {
    SessionEnd,
    TurnEnd,
    /// A new turn began while this one was open.
    Superseded,
    Evicted,
    Shutdown,
    /// An enforced policy deny: the harness will not finish it.
    Policy,
}

impl ClosedBy {
    fn data(self) -> Value {
        let text = match self {
            ClosedBy::SessionEnd => "session_end",
            ClosedBy::TurnEnd => "turn_end",
            ClosedBy::Superseded => "superseded",
            ClosedBy::Evicted => "evicted",
            ClosedBy::Shutdown => "shutdown",
            ClosedBy::Policy => "policy",
        };
        json!({ "closed_by": text })
    }
}

/// What a hook event does to the scopes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    SessionStart,
    SessionEnd,
    TurnStart,
    /// Starts a turn only if none is open (pi's `agent_start` follows its `input`).
    TurnStartIfNone,
    TurnEnd,
    ToolStart,
    ToolEnd,
    Other,
}

fn role(agent: Agent, event: &str) -> Role {
    match (agent, event) {
        (Agent::ClaudeCode | Agent::Codex, "SessionStart") | (Agent::Pi, "session_start") => {
            Role::SessionStart
        }
        (Agent::ClaudeCode | Agent::Codex, "SessionEnd") | (Agent::Pi, "session_shutdown") => {
            Role::SessionEnd
        }
        (Agent::ClaudeCode | Agent::Codex, "UserPromptSubmit") | (Agent::Pi, "input") => {
            Role::TurnStart
        }
        (Agent::Pi, "agent_start") => Role::TurnStartIfNone,
        (Agent::ClaudeCode | Agent::Codex, "Stop") | (Agent::Pi, "agent_end") => Role::TurnEnd,
        (Agent::ClaudeCode | Agent::Codex, "PreToolUse") | (Agent::Pi, "tool_call") => {
            Role::ToolStart
        }
        (Agent::ClaudeCode | Agent::Codex, "PostToolUse" | "PostToolUseFailure")
        | (Agent::Pi, "tool_result") => Role::ToolEnd,
        _ => Role::Other,
    }
}

#[derive(Debug)]
struct Session {
    scope: OpenScope,
    turn: Option<OpenScope>,
    /// Open tool scopes by tool use id, oldest first.
    tools: Vec<(String, OpenScope)>,
    open_llms: usize,
    last_active: u64,
    /// The usage and cost of its model requests so far.
    totals: Totals,
}

/// A session's running totals: written into its end record as `usage`, in the shape of an
/// `llm` end's usage plus how many requests were priced and how many could not be.
#[derive(Debug, Default)]
struct Totals {
    usage: Usage,
    cost: Usd,
    priced: u64,
    unpriced: u64,
}

impl Totals {
    fn add(&mut self, facts: &UsageFacts) {
        let n = |count: Option<u64>| count.unwrap_or(0);
        self.usage.add(&Usage {
            uncached_input: n(facts.uncached_input_tokens),
            cache_read: n(facts.cache_read_tokens),
            cache_write_5m: n(facts.cache_write_5m_tokens),
            cache_write_1h: n(facts.cache_write_1h_tokens),
            output: n(facts.output_tokens),
            reasoning: facts.reasoning_tokens,
        });
        match facts.cost {
            Some(cost) => {
                self.cost = self.cost.saturating_add(cost);
                self.priced += 1;
            }
            None => self.unpriced += 1,
        }
    }

    /// Adds `usage` to an end record's data when any request reported usage.
    fn write_into(&self, data: &mut Value) {
        if self.priced + self.unpriced == 0 {
            return;
        }
        let cost = (self.priced > 0).then_some(self.cost);
        let mut usage = usage_json(&UsageFacts::new_totals(&self.usage, cost));
        usage["priced_requests"] = json!(self.priced);
        usage["unpriced_requests"] = json!(self.unpriced);
        if let Value::Object(fields) = data {
            fields.insert("usage".to_owned(), usage);
        }
    }
}

impl Session {
    /// Where a new tool or llm scope goes: the open turn, else the session.
    fn current_parent(&self) -> Uuid {
        self.turn.as_ref().map_or(self.scope.uuid, |turn| turn.uuid)
    }
}

#[derive(Debug)]
struct OpenLlm {
    scope: OpenScope,
    session: Option<String>,
}

/// The ATOF recorder. Feed it observations in the order they happened with
/// [`Recorder::handle`], then drain [`Recorder::poll_record`] into the sinks after each one:
/// one observation queues a bounded number of records, but the queue itself is only emptied
/// by polling.
pub struct Recorder {
    config: RecorderConfig,
    redactor: Box<dyn Redactor>,
    emit: Emitter,
    sessions: HashMap<String, Session>,
    /// Sessions that ended by their own last hook, newest last: a hook the harness sends
    /// after its session's end (pi forwards events without waiting) is a mark with that
    /// session's metadata and no parent (its session is closed, and a child never names a
    /// closed parent), instead of a second, implicit session.
    ended: VecDeque<(String, Option<Value>)>,
    requests: HashMap<RequestId, OpenLlm>,
    /// Open llm scopes matched to no session.
    orphan_llms: usize,
}

impl fmt::Debug for Recorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recorder")
            .field("config", &self.config)
            .field("sessions", &self.sessions.len())
            .field("requests", &self.requests.len())
            .field("queued", &self.emit.out.len())
            .finish_non_exhaustive()
    }
}

/// Content fields gathered for one record's data.
struct ContentData<'r> {
    recorder: &'r Recorder,
    data: Map<String, Value>,
    truncated: bool,
}

impl ContentData<'_> {
    fn text(&mut self, key: &str, raw: Option<&str>) {
        let Some(raw) = raw.filter(|_| self.recorder.config.capture_content) else {
            return;
        };
        let (value, cut) = content::text(
            &*self.recorder.redactor,
            raw,
            self.recorder.config.max_content_bytes,
        );
        self.data.insert(key.to_owned(), value);
        self.truncated |= cut;
    }

    fn json(&mut self, key: &str, raw: Option<&Value>) {
        let Some(raw) = raw.filter(|_| self.recorder.config.capture_content) else {
            return;
        };
        let (value, cut) = content::json(
            &*self.recorder.redactor,
            raw,
            self.recorder.config.max_content_bytes,
        );
        self.data.insert(key.to_owned(), value);
        self.truncated |= cut;
    }

    fn finish(mut self) -> Value {
        if self.truncated {
            self.data
                .insert("content_truncated".to_owned(), Value::Bool(true));
        }
        Value::Object(self.data)
    }
}

impl Recorder {
    /// A recorder with no open scope. Zero limits are raised to one.
    pub fn new(
        mut config: RecorderConfig,
        entropy: Box<dyn Entropy>,
        redactor: Box<dyn Redactor>,
    ) -> Recorder {
        config.max_sessions = config.max_sessions.max(1);
        config.max_open_scopes = config.max_open_scopes.max(1);
        Recorder {
            config,
            redactor,
            emit: Emitter {
                entropy,
                out: VecDeque::new(),
                tick: 0,
            },
            sessions: HashMap::new(),
            ended: VecDeque::new(),
            requests: HashMap::new(),
            orphan_llms: 0,
        }
    }

    /// Records one observation made at `at` (wall-clock time: it becomes the timestamps and
    /// the time part of new uuids).
    pub fn handle(&mut self, at: SystemTime, mut observation: Observation) {
        self.emit.tick += 1;
        self.hide_credentials_in_ids(&mut observation);
        match observation {
            Observation::Hook(hook) => self.on_hook(at, &hook),
            Observation::ModelRequestStart(start) => self.on_request_start(at, &start),
            Observation::ModelRequestEnd(end) => self.on_request_end(at, &end),
            Observation::PolicyDecision(decision) => self.on_policy(at, &decision),
            Observation::Shutdown => self.close_everything(at, ClosedBy::Shutdown),
        }
    }

    /// The identifiers an observation carries (session and tool ids, tool and model names)
    /// pass the same filter as content before anything keys on them: they are the caller's
    /// text, and records never hold a credential. Ids of the usual shapes (UUIDs, `toolu_…`,
    /// model names) come through unchanged, so correlation holds; the same id is always
    /// hidden the same way, and a long one is cut with a digest of the whole
    /// ([`content::id_text`]). The other short texts a record takes from a caller pass the
    /// same filter here too: a provider's finish reasons, the cost error (which quotes the
    /// model names as the request and the answer gave them) and a session's `source` or
    /// end `reason` (the harness's words).
    fn hide_credentials_in_ids(&self, observation: &mut Observation) {
        let hide_text = |text: &mut String| {
            if let std::borrow::Cow::Owned(hidden) = content::id_text(&*self.redactor, text) {
                *text = hidden;
            }
        };
        let hide = |id: &mut Option<String>| {
            if let Some(text) = id.as_mut() {
                hide_text(text);
            }
        };
        match observation {
            Observation::Hook(hook) => {
                hide(&mut hook.session_id);
                hide(&mut hook.tool_name);
                hide(&mut hook.tool_use_id);
                if matches!(
                    role(hook.agent, &hook.event),
                    Role::SessionStart | Role::SessionEnd
                ) && let Some(pointer) = hook_reason_pointer(hook)
                    && let Some(Value::String(reason)) = hook.payload.pointer_mut(pointer)
                {
                    hide_text(reason);
                }
            }
            Observation::ModelRequestStart(start) => {
                hide(&mut start.session_id);
                hide(&mut start.model);
            }
            Observation::ModelRequestEnd(end) => {
                hide(&mut end.response_model);
                hide(&mut end.response_id);
                end.finish_reasons.iter_mut().for_each(hide_text);
                if let Some(usage) = end.usage.as_mut() {
                    hide(&mut usage.cost_error);
                }
            }
            Observation::PolicyDecision(PolicyDecision {
                target:
                    PolicyTarget::Hook {
                        session_id,
                        tool_use_id,
                        ..
                    },
                ..
            }) => {
                hide(session_id);
                hide(tool_use_id);
            }
            Observation::PolicyDecision(_) | Observation::Shutdown => {}
        }
    }

    /// The next record, oldest first.
    pub fn poll_record(&mut self) -> Option<Record> {
        self.emit.out.pop_front()
    }

    /// Whether content goes into records: a caller can skip extracting prompt and response
    /// text when it does not.
    pub fn captures_content(&self) -> bool {
        self.config.capture_content
    }

    /// Sessions currently open.
    pub fn open_sessions(&self) -> usize {
        self.sessions.len()
    }

    fn content(&self) -> ContentData<'_> {
        ContentData {
            recorder: self,
            data: Map::new(),
            truncated: false,
        }
    }

    // ----- hooks -----

    fn on_hook(&mut self, at: SystemTime, hook: &HookEvent) {
        let role = role(hook.agent, &hook.event);
        let Some(sid) = hook.session_id.as_deref().map(bounded_id) else {
            // Nothing to tie it to: a mark with no parent.
            let data = self.hook_mark_data(hook);
            self.emit.mark(
                at,
                None,
                bounded_id(&hook.event).to_owned(),
                Category::Custom,
                HOOK,
                Some(json!({ "harness": hook.agent.as_str() })),
                data,
            );
            return;
        };
        let sid = sid.to_owned();
        if role != Role::SessionStart
            && !self.sessions.contains_key(&sid)
            && let Some((_, metadata)) = self.ended.iter().find(|(id, _)| *id == sid)
        {
            let metadata = metadata.clone();
            let data = self.hook_mark_data(hook);
            let name = bounded_id(&hook.event).to_owned();
            self.emit
                .mark(at, None, name, Category::Custom, HOOK, metadata, data);
            return;
        }
        if role == Role::SessionStart {
            self.ended.retain(|(id, _)| *id != sid);
        }
        if role == Role::SessionStart && !self.sessions.contains_key(&sid) {
            self.begin_session(at, hook.agent, &sid, Some(hook));
            return;
        }
        self.ensure_session(at, hook.agent, &sid);
        match role {
            Role::SessionEnd => {
                let reason = hook_reason(hook).map(|r| json!({ "reason": r }));
                self.end_session(at, &sid, reason.unwrap_or_else(|| json!({})));
            }
            // A turn's hooks are marks named after their event too, like every hook that
            // is not a session's or a tool's, under the turn they open or close.
            Role::TurnStart => {
                self.finish_turn(at, &sid, ClosedBy::Superseded.data(), ClosedBy::Superseded);
                self.open_turn(at, &sid, hook);
                self.hook_mark(at, &sid, hook);
            }
            Role::TurnStartIfNone if !self.has_turn(&sid) => {
                self.open_turn(at, &sid, hook);
                self.hook_mark(at, &sid, hook);
            }
            Role::TurnEnd if self.has_turn(&sid) => {
                self.hook_mark(at, &sid, hook);
                let mut data = self.content();
                data.text(
                    "response",
                    hook.payload
                        .get("last_assistant_message")
                        .and_then(Value::as_str),
                );
                let data = data.finish();
                self.finish_turn(at, &sid, data, ClosedBy::TurnEnd);
            }
            Role::ToolStart => self.tool_start(at, &sid, hook),
            Role::ToolEnd => self.tool_end(at, &sid, hook),
            Role::SessionStart | Role::TurnStartIfNone | Role::TurnEnd | Role::Other => {
                self.hook_mark(at, &sid, hook);
            }
        }
    }

    fn has_turn(&self, sid: &str) -> bool {
        self.sessions.get(sid).is_some_and(|s| s.turn.is_some())
    }

    /// A `custom` mark named after the event, under the tool it concerns, else the turn,
    /// else the session.
    fn hook_mark(&mut self, at: SystemTime, sid: &str, hook: &HookEvent) {
        let data = self.hook_mark_data(hook);
        let Some(session) = self.sessions.get(sid) else {
            return;
        };
        let parent = hook
            .tool_use_id
            .as_deref()
            .and_then(|id| session.tools.iter().find(|(key, _)| key == bounded_id(id)))
            .map_or_else(|| session.current_parent(), |(_, tool)| tool.uuid);
        let metadata = session.scope.metadata.clone();
        self.emit.mark(
            at,
            Some(parent),
            bounded_id(&hook.event).to_owned(),
            Category::Custom,
            HOOK,
            metadata,
            data,
        );
    }

    fn hook_mark_data(&self, hook: &HookEvent) -> Value {
        let mut data = self.content();
        if let Some(tool) = &hook.tool_name {
            data.data
                .insert("tool_name".to_owned(), json!(bounded_id(tool)));
        }
        data.json("payload", Some(&hook.payload));
        data.finish()
    }

    // ----- sessions -----

    fn ensure_session(&mut self, at: SystemTime, agent: Agent, sid: &str) {
        if let Some(session) = self.sessions.get_mut(sid) {
            session.last_active = self.emit.tick;
        } else {
            self.begin_session(at, agent, sid, None);
        }
    }

    /// Opens a session scope; `hook` is its SessionStart, `None` for an implicit session (a
    /// hook of a session whose start the worker never saw).
    fn begin_session(&mut self, at: SystemTime, agent: Agent, sid: &str, hook: Option<&HookEvent>) {
        if self.sessions.len() >= self.config.max_sessions {
            let oldest = self
                .sessions
                .iter()
                .min_by_key(|(_, s)| s.last_active)
                .map(|(key, _)| key.clone());
            if let Some(oldest) = oldest {
                self.close_session(at, &oldest, ClosedBy::Evicted);
            }
        }
        let mut data = json!({ "session_id": sid });
        match hook {
            Some(hook) => {
                if let Some(source) = hook_reason(hook) {
                    data["source"] = json!(source);
                }
            }
            None => data["implicit"] = json!(true),
        }
        let metadata = json!({ "harness": agent.as_str(), "session_id": sid });
        let scope = self.emit.open(
            at,
            None,
            agent.as_str().to_owned(),
            Category::Agent,
            Vec::new(),
            None,
            SESSION,
            Some(metadata),
            data,
        );
        self.sessions.insert(
            sid.to_owned(),
            Session {
                scope,
                turn: None,
                tools: Vec::new(),
                open_llms: 0,
                last_active: self.emit.tick,
                totals: Totals::default(),
            },
        );
    }

    /// Ends a session normally (its last hook).
    fn end_session(&mut self, at: SystemTime, sid: &str, mut data: Value) {
        self.close_children(at, sid, ClosedBy::SessionEnd);
        if let Some(session) = self.sessions.remove(sid) {
            session.totals.write_into(&mut data);
            if self.ended.len() >= self.config.max_sessions {
                self.ended.pop_front();
            }
            self.ended
                .push_back((sid.to_owned(), session.scope.metadata.clone()));
            self.emit.close(at, session.scope, data);
        }
    }

    /// Closes a session and everything in it for a reason other than its end event.
    fn close_session(&mut self, at: SystemTime, sid: &str, why: ClosedBy) {
        self.close_children(at, sid, why);
        if let Some(session) = self.sessions.remove(sid) {
            let mut data = why.data();
            session.totals.write_into(&mut data);
            self.emit.close(at, session.scope, data);
        }
    }

    /// Closes a session's tools, model requests and turn, innermost first.
    fn close_children(&mut self, at: SystemTime, sid: &str, why: ClosedBy) {
        let Some(session) = self.sessions.get_mut(sid) else {
            return;
        };
        let tools = std::mem::take(&mut session.tools);
        let turn = session.turn.take();
        session.open_llms = 0;
        for (_, tool) in tools {
            self.emit.close(at, tool, why.data());
        }
        let mut llms: Vec<RequestId> = self
            .requests
            .iter()
            .filter(|(_, llm)| llm.session.as_deref() == Some(sid))
            .map(|(id, _)| *id)
            .collect();
        llms.sort_by_key(|id| self.requests.get(id).map(|llm| llm.scope.opened));
        for id in llms {
            if let Some(llm) = self.requests.remove(&id) {
                self.emit.close(at, llm.scope, why.data());
            }
        }
        if let Some(turn) = turn {
            self.emit.close(at, turn, why.data());
        }
    }

    fn close_everything(&mut self, at: SystemTime, why: ClosedBy) {
        let mut sids: Vec<(u64, String)> = self
            .sessions
            .iter()
            .map(|(key, s)| (s.scope.opened, key.clone()))
            .collect();
        sids.sort();
        for (_, sid) in sids {
            self.close_session(at, &sid, why);
        }
        let mut orphans: Vec<(u64, RequestId)> = self
            .requests
            .iter()
            .map(|(id, llm)| (llm.scope.opened, *id))
            .collect();
        orphans.sort();
        for (_, id) in orphans {
            if let Some(llm) = self.requests.remove(&id) {
                self.emit.close(at, llm.scope, why.data());
            }
        }
        self.orphan_llms = 0;
    }

    // ----- turns -----

    fn open_turn(&mut self, at: SystemTime, sid: &str, hook: &HookEvent) {
        let prompt = match hook.agent {
            Agent::ClaudeCode | Agent::Codex => hook.payload.get("prompt"),
            Agent::Pi => hook.payload.get("event").and_then(|e| e.get("text")),
        };
        let mut data = self.content();
        data.text("prompt", prompt.and_then(Value::as_str));
        let data = data.finish();
        let Some(session) = self.sessions.get_mut(sid) else {
            return;
        };
        let turn = self.emit.open(
            at,
            Some(session.scope.uuid),
            "turn".to_owned(),
            Category::Custom,
            Vec::new(),
            None,
            TURN,
            session.scope.metadata.clone(),
            data,
        );
        session.turn = Some(turn);
    }

    /// Ends the open turn with `data`, closing its open tools first (`tools_closed_by`). Model
    /// requests under it stay open: their usage arrives with their own end, which may come
    /// after the harness has already reported the turn finished.
    fn finish_turn(&mut self, at: SystemTime, sid: &str, data: Value, tools_closed_by: ClosedBy) {
        let Some(session) = self.sessions.get_mut(sid) else {
            return;
        };
        let Some(turn) = session.turn.take() else {
            return;
        };
        let (under_turn, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut session.tools)
            .into_iter()
            .partition(|(_, tool)| tool.parent == Some(turn.uuid));
        session.tools = rest;
        for (_, tool) in under_turn {
            self.emit.close(at, tool, tools_closed_by.data());
        }
        self.emit.close(at, turn, data);
    }

    // ----- tools -----

    fn tool_start(&mut self, at: SystemTime, sid: &str, hook: &HookEvent) {
        let Some(id) = hook.tool_use_id.as_deref().map(bounded_id) else {
            self.hook_mark(at, sid, hook);
            return;
        };
        let duplicate = self
            .sessions
            .get(sid)
            .is_some_and(|s| s.tools.iter().any(|(key, _)| key == id));
        if duplicate {
            self.hook_mark(at, sid, hook);
            return;
        }
        let input = match hook.agent {
            Agent::ClaudeCode | Agent::Codex => hook.payload.get("tool_input"),
            Agent::Pi => hook.payload.get("event").and_then(|e| e.get("input")),
        };
        let mut data = self.content();
        data.json("input", input);
        let data = data.finish();
        self.open_tool(at, sid, hook, id, data);
    }

    fn open_tool(&mut self, at: SystemTime, sid: &str, hook: &HookEvent, id: &str, data: Value) {
        self.make_room(at, Some(sid));
        let Some(session) = self.sessions.get_mut(sid) else {
            return;
        };
        let name = hook
            .tool_name
            .as_deref()
            .map_or("unknown", bounded_id)
            .to_owned();
        let attributes = if name.starts_with("mcp__") {
            vec!["mcp"]
        } else {
            Vec::new()
        };
        let scope = self.emit.open(
            at,
            Some(session.current_parent()),
            name,
            Category::Tool,
            attributes,
            Some(json!({ "tool_call_id": id })),
            TOOL,
            session.scope.metadata.clone(),
            data,
        );
        session.tools.push((id.to_owned(), scope));
    }

    fn tool_end(&mut self, at: SystemTime, sid: &str, hook: &HookEvent) {
        let Some(id) = hook.tool_use_id.as_deref().map(bounded_id) else {
            self.hook_mark(at, sid, hook);
            return;
        };
        let (failed, output) = match hook.agent {
            Agent::ClaudeCode | Agent::Codex => {
                let failed = hook.event == "PostToolUseFailure";
                let output = if failed {
                    hook.payload.get("error")
                } else {
                    hook.payload.get("tool_response")
                };
                (failed, output)
            }
            Agent::Pi => {
                let event = hook.payload.get("event");
                let failed = event
                    .and_then(|e| e.get("isError"))
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                (failed, event.and_then(|e| e.get("content")))
            }
        };
        let mut data = self.content();
        data.data.insert(
            "outcome".to_owned(),
            json!(if failed { "failure" } else { "success" }),
        );
        if let Some(ms) = hook.payload.get("duration_ms").and_then(Value::as_u64) {
            data.data.insert("duration_ms".to_owned(), json!(ms));
        }
        data.json("output", output);
        let data = data.finish();
        let open = self
            .sessions
            .get(sid)
            .is_some_and(|s| s.tools.iter().any(|(key, _)| key == id));
        if !open {
            // An end whose start the worker never saw: open it here so the end has a start.
            self.open_tool(at, sid, hook, id, json!({ "implicit": true }));
        }
        let Some(session) = self.sessions.get_mut(sid) else {
            return;
        };
        if let Some(index) = session.tools.iter().position(|(key, _)| key == id) {
            let (_, scope) = session.tools.remove(index);
            self.emit.close(at, scope, data);
        }
    }

    // ----- model requests -----

    fn on_request_start(&mut self, at: SystemTime, start: &ModelRequestStart) {
        if self.requests.contains_key(&start.request_id) {
            // The caller reused a live key: the first request keeps it.
            return;
        }
        let header_sid = start.session_id.as_deref().map(bounded_id);
        let sid = header_sid
            .filter(|sid| self.sessions.contains_key(*sid))
            .map(str::to_owned);
        self.make_room(at, sid.as_deref());
        let model = start.model.as_deref().map(bounded_id);
        let mut data = self.content();
        data.data
            .insert("route".to_owned(), json!(bounded_id(&start.route)));
        data.data.insert("model".to_owned(), json!(model));
        data.data.insert("stream".to_owned(), json!(start.stream));
        data.data
            .insert("request_bytes".to_owned(), json!(start.request_bytes));
        if start.request_redactions > 0 {
            data.data.insert(
                "request_redactions".to_owned(),
                json!(start.request_redactions),
            );
        }
        // Only a valid header is kept, and only its four fields (a later version may append
        // more): the rest is text the caller chose, which could hold anything, a credential
        // among it.
        if let Some(traceparent) = start
            .traceparent
            .as_deref()
            .map(|header| header.trim_matches([' ', '\t']))
            .filter(|header| TraceParent::parse(header).is_some())
        {
            data.data.insert(
                "traceparent".to_owned(),
                json!(traceparent.get(..TraceParent::LEN).unwrap_or(traceparent)),
            );
        }
        if let Some((address, port)) = &start.server {
            data.data
                .insert("server_address".to_owned(), json!(bounded_id(address)));
            data.data.insert("server_port".to_owned(), json!(port));
        }
        data.text("prompt", start.prompt.as_deref());
        let data = data.finish();
        let (parent, metadata) = match sid.as_deref().and_then(|sid| self.sessions.get_mut(sid)) {
            Some(session) => {
                session.last_active = self.emit.tick;
                session.open_llms += 1;
                (
                    Some(session.current_parent()),
                    session.scope.metadata.clone(),
                )
            }
            None => {
                self.orphan_llms += 1;
                (None, header_sid.map(|sid| json!({ "session_id": sid })))
            }
        };
        let attributes = if start.stream {
            vec!["streaming"]
        } else {
            Vec::new()
        };
        let scope = self.emit.open(
            at,
            parent,
            model.unwrap_or("unknown").to_owned(),
            Category::Llm,
            attributes,
            model.map(|m| json!({ "model_name": m })),
            LLM,
            metadata,
            data,
        );
        self.requests.insert(
            start.request_id,
            OpenLlm {
                scope,
                session: sid,
            },
        );
    }

    fn on_request_end(&mut self, at: SystemTime, end: &ModelRequestEnd) {
        let mut data = self.content();
        data.data.insert("status".to_owned(), json!(end.status));
        data.data
            .insert("duration_ms".to_owned(), json!(end.duration_ms));
        data.data.insert(
            "time_to_first_byte_ms".to_owned(),
            json!(end.time_to_first_byte_ms),
        );
        data.data.insert(
            "usage".to_owned(),
            end.usage.as_ref().map_or(Value::Null, usage_json),
        );
        if let Some(model) = end.response_model.as_deref() {
            data.data
                .insert("response_model".to_owned(), json!(bounded_id(model)));
        }
        if let Some(id) = end.response_id.as_deref() {
            data.data
                .insert("response_id".to_owned(), json!(bounded_id(id)));
        }
        if !end.finish_reasons.is_empty() {
            let reasons: Vec<&str> = end.finish_reasons.iter().map(|r| bounded_id(r)).collect();
            data.data
                .insert("finish_reasons".to_owned(), json!(reasons));
        }
        data.data
            .insert("truncated".to_owned(), json!(end.truncated));
        if let Some(error) = end.error.as_deref() {
            data.data
                .insert("error".to_owned(), json!(bounded_id(error)));
        }
        data.text("response", end.response.as_deref());
        let data = data.finish();
        // An end whose start was never seen (or was already closed by its session's end, an
        // eviction or a policy deny) is dropped: an end never goes out without its start.
        if let Some(llm) = self.take_request(end.request_id) {
            if let Some(usage) = &end.usage
                && let Some(session) = llm
                    .session
                    .as_deref()
                    .and_then(|s| self.sessions.get_mut(s))
            {
                session.totals.add(usage);
            }
            self.emit.close(at, llm.scope, data);
        }
    }

    fn take_request(&mut self, id: RequestId) -> Option<OpenLlm> {
        let llm = self.requests.remove(&id)?;
        match llm
            .session
            .as_deref()
            .and_then(|sid| self.sessions.get_mut(sid))
        {
            Some(session) => {
                session.open_llms = session.open_llms.saturating_sub(1);
                session.last_active = self.emit.tick;
            }
            None => self.orphan_llms = self.orphan_llms.saturating_sub(1),
        }
        Some(llm)
    }

    /// Keeps the open tool and llm scopes of a session (or of no session) under the bound by
    /// closing the oldest.
    fn make_room(&mut self, at: SystemTime, sid: Option<&str>) {
        loop {
            let open = match sid.and_then(|sid| self.sessions.get(sid)) {
                Some(session) => session.tools.len() + session.open_llms,
                None => self.orphan_llms,
            };
            if open < self.config.max_open_scopes {
                return;
            }
            let oldest_tool = sid
                .and_then(|sid| self.sessions.get(sid))
                .and_then(|s| s.tools.first())
                .map(|(_, tool)| tool.opened);
            let oldest_llm = self
                .requests
                .iter()
                .filter(|(_, llm)| llm.session.as_deref() == sid)
                .min_by_key(|(_, llm)| llm.scope.opened)
                .map(|(id, llm)| (llm.scope.opened, *id));
            let evict_tool = match (oldest_tool, oldest_llm) {
                (Some(tool), Some((llm, _))) => tool < llm,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                // The counts said full but nothing is open: stop rather than loop.
                (None, None) => return,
            };
            if evict_tool {
                if let Some(session) = sid.and_then(|sid| self.sessions.get_mut(sid)) {
                    let (_, scope) = session.tools.remove(0);
                    self.emit.close(at, scope, ClosedBy::Evicted.data());
                }
            } else if let Some((_, id)) = oldest_llm
                && let Some(llm) = self.take_request(id)
            {
                self.emit.close(at, llm.scope, ClosedBy::Evicted.data());
            }
        }
    }

    // ----- policy -----

    fn on_policy(&mut self, at: SystemTime, decision: &PolicyDecision) {
        let mut data = Map::new();
        data.insert("decision".to_owned(), json!(decision.decision_str()));
        data.insert(
            "rule".to_owned(),
            json!(decision.rule.as_deref().map(bounded_id)),
        );
        data.insert("reason".to_owned(), json!(decision.reason));
        data.insert("dry_run".to_owned(), json!(decision.dry_run));
        match &decision.target {
            PolicyTarget::Hook {
                agent,
                session_id,
                event,
                tool_use_id,
            } => {
                data.insert("event".to_owned(), json!(bounded_id(event)));
                let Some(sid) = session_id.as_deref().map(bounded_id).map(str::to_owned) else {
                    self.emit.mark(
                        at,
                        None,
                        "policy".to_owned(),
                        Category::Guardrail,
                        GUARDRAIL,
                        Some(json!({ "harness": agent.as_str() })),
                        Value::Object(data),
                    );
                    return;
                };
                self.ensure_session(at, *agent, &sid);
                let Some(session) = self.sessions.get(&sid) else {
                    return;
                };
                let tool = tool_use_id
                    .as_deref()
                    .map(bounded_id)
                    .and_then(|id| session.tools.iter().position(|(key, _)| key == id));
                let parent =
                    tool.map_or_else(|| session.current_parent(), |i| session.tools[i].1.uuid);
                let metadata = session.scope.metadata.clone();
                self.emit.mark(
                    at,
                    Some(parent),
                    "policy".to_owned(),
                    Category::Guardrail,
                    GUARDRAIL,
                    metadata,
                    Value::Object(data),
                );
                if !decision.is_enforced_deny() {
                    return;
                }
                // The harness will not run what was denied, so nothing will end its scope.
                if let Some(index) = tool {
                    if let Some(session) = self.sessions.get_mut(&sid) {
                        let (_, scope) = session.tools.remove(index);
                        self.emit.close(at, scope, ClosedBy::Policy.data());
                    }
                } else if role(*agent, event) == Role::TurnStart {
                    self.finish_turn(at, &sid, ClosedBy::Policy.data(), ClosedBy::Policy);
                }
            }
            PolicyTarget::ModelRequest { request_id } => {
                data.insert("event".to_owned(), json!("model_request"));
                let (parent, metadata) = match self.requests.get(request_id) {
                    Some(llm) => (Some(llm.scope.uuid), llm.scope.metadata.clone()),
                    None => (None, None),
                };
                self.emit.mark(
                    at,
                    parent,
                    "policy".to_owned(),
                    Category::Guardrail,
                    GUARDRAIL,
                    metadata,
                    Value::Object(data),
                );
                if decision.is_enforced_deny()
                    && let Some(llm) = self.take_request(*request_id)
                {
                    // The harness received the worker's 403 for it, as for any answer.
                    let mut data = ClosedBy::Policy.data();
                    data["status"] = json!(403);
                    self.emit.close(at, llm.scope, data);
                }
            }
        }
    }
}

/// The `source` of a SessionStart or `reason` of a SessionEnd (pi keeps it under `event`),
/// kept short: it names a cause, it is not content. It was filtered as an id when the
/// observation came in ([`Recorder::hide_credentials_in_ids`]).
fn hook_reason(hook: &HookEvent) -> Option<&str> {
    hook.payload
        .pointer(hook_reason_pointer(hook)?)
        .and_then(Value::as_str)
        .map(|text| content::truncate(text, 64).0)
}

/// Where [`hook_reason`] is in the payload: `source`, else `reason`, at its top (pi: under
/// `event`).
fn hook_reason_pointer(hook: &HookEvent) -> Option<&'static str> {
    let pointers = match hook.agent {
        Agent::ClaudeCode | Agent::Codex => ["/source", "/reason"],
        Agent::Pi => ["/event/source", "/event/reason"],
    };
    pointers
        .into_iter()
        .find(|pointer| hook.payload.pointer(pointer).is_some())
}

fn usage_json(usage: &UsageFacts) -> Value {
    let mut out = Map::new();
    let counts = [
        ("uncached_input_tokens", usage.uncached_input_tokens),
        ("cache_read_tokens", usage.cache_read_tokens),
        ("cache_write_5m_tokens", usage.cache_write_5m_tokens),
        ("cache_write_1h_tokens", usage.cache_write_1h_tokens),
        ("input_tokens", usage.input_tokens),
        ("output_tokens", usage.output_tokens),
        ("reasoning_tokens", usage.reasoning_tokens),
    ];
    for (key, value) in counts {
        if let Some(value) = value {
            out.insert(key.to_owned(), json!(value));
        }
    }
    if let Some(cost) = usage.cost {
        out.insert("cost_usd".to_owned(), json!(cost.to_string()));
    }
    if let Some(error) = &usage.cost_error {
        out.insert("cost_error".to_owned(), json!(bounded_id(error)));
    }
    Value::Object(out)
}
