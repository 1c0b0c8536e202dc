//! Random observation sequences, with the record stream's invariants checked after every
//! step: every end has an earlier start with the same uuid, every parent was started and not
//! yet ended when its child started, every uuid is used by one start (or mark) only; and
//! after a shutdown nothing is left open.

use std::collections::HashSet;
use std::time::Duration;

use proptest::prelude::*;
use serde_json::{Value, json};

use super::super::*;
use super::{Counter, KeyRedactor, epoch};

#[derive(Debug, Clone)]
enum Step {
    Hook {
        pi: bool,
        session: u8,
        event: u8,
        tool: u8,
    },
    RequestStart {
        id: u8,
        session: u8,
        stream: bool,
    },
    RequestEnd {
        id: u8,
    },
    HookPolicy {
        pi: bool,
        session: u8,
        event: u8,
        tool: u8,
        deny: bool,
        dry_run: bool,
    },
    ModelPolicy {
        id: u8,
        deny: bool,
        dry_run: bool,
    },
    Shutdown,
}

const CLAUDE_EVENTS: [&str; 9] = [
    "SessionStart",
    "SessionEnd",
    "UserPromptSubmit",
    "Stop",
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "Notification",
    "PermissionRequest",
];

const PI_EVENTS: [&str; 9] = [
    "session_start",
    "session_shutdown",
    "input",
    "agent_start",
    "agent_end",
    "tool_call",
    "tool_result",
    "turn_start",
    "user_bash",
];

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (any::<bool>(), 0..4u8, 0..9u8, 0..3u8)
            .prop_map(|(pi, session, event, tool)| Step::Hook { pi, session, event, tool }),
        2 => (0..4u8, 0..4u8, any::<bool>())
            .prop_map(|(id, session, stream)| Step::RequestStart { id, session, stream }),
        2 => (0..4u8).prop_map(|id| Step::RequestEnd { id }),
        1 => (any::<bool>(), 0..4u8, 0..9u8, 0..3u8, any::<bool>(), any::<bool>()).prop_map(
            |(pi, session, event, tool, deny, dry_run)| Step::HookPolicy {
                pi, session, event, tool, deny, dry_run
            }
        ),
        1 => (0..4u8, any::<bool>(), any::<bool>())
            .prop_map(|(id, deny, dry_run)| Step::ModelPolicy { id, deny, dry_run }),
        1 => Just(Step::Shutdown),
    ]
}

/// Session 3 stands for "no session id".
fn session_id(session: u8) -> Option<String> {
    (session < 3).then(|| format!("s{session}"))
}

fn event_name(pi: bool, event: u8) -> &'static str {
    let events = if pi { PI_EVENTS } else { CLAUDE_EVENTS };
    events[usize::from(event) % events.len()]
}

fn agent(pi: bool) -> Agent {
    if pi { Agent::Pi } else { Agent::ClaudeCode }
}

fn observation(step: &Step) -> Observation {
    match *step {
        Step::Hook {
            pi,
            session,
            event,
            tool,
        } => {
            let name = event_name(pi, event);
            let tool_id = format!("t{tool}");
            let mut payload = if pi {
                json!({
                    "hook_event_name": name,
                    "event": { "type": name, "toolName": "bash", "toolCallId": tool_id,
                               "input": { "command": "echo sk-secret" }, "isError": tool == 2 },
                })
            } else {
                json!({
                    "hook_event_name": name, "tool_name": "Bash", "tool_use_id": tool_id,
                    "tool_input": { "command": "echo sk-secret" }, "prompt": "hi sk-secret",
                })
            };
            if let Some(sid) = session_id(session) {
                payload["session_id"] = json!(sid);
            }
            Observation::Hook(HookEvent::from_payload(agent(pi), payload))
        }
        Step::RequestStart {
            id,
            session,
            stream,
        } => Observation::ModelRequestStart(ModelRequestStart {
            request_id: RequestId(u64::from(id)),
            session_id: session_id(session),
            route: "/v1/messages".to_owned(),
            model: Some("m".to_owned()),
            stream,
            request_bytes: 1,
            prompt: Some("hi sk-secret".to_owned()),
            request_redactions: 0,
            server: None,
            traceparent: None,
        }),
        Step::RequestEnd { id } => Observation::ModelRequestEnd(ModelRequestEnd {
            request_id: RequestId(u64::from(id)),
            status: 200,
            duration_ms: 1,
            time_to_first_byte_ms: None,
            usage: None,
            response_model: None,
            truncated: false,
            error: None,
            response_id: None,
            finish_reasons: Vec::new(),
            response: Some("sk-secret".to_owned()),
        }),
        Step::HookPolicy {
            pi,
            session,
            event,
            tool,
            deny,
            dry_run,
        } => Observation::PolicyDecision(PolicyDecision {
            target: PolicyTarget::Hook {
                agent: agent(pi),
                session_id: session_id(session),
                event: event_name(pi, event).to_owned(),
                tool_use_id: Some(format!("t{tool}")),
            },
            rule: None,
            decision: if deny {
                Decision::Deny
            } else {
                Decision::Allow
            },
            reason: None,
            dry_run,
        }),
        Step::ModelPolicy { id, deny, dry_run } => Observation::PolicyDecision(PolicyDecision {
            target: PolicyTarget::ModelRequest {
                request_id: RequestId(u64::from(id)),
            },
            rule: None,
            decision: if deny {
                Decision::Deny
            } else {
                Decision::Allow
            },
            reason: None,
            dry_run,
        }),
        Step::Shutdown => Observation::Shutdown,
    }
}

/// What the stream has shown so far.
#[derive(Default)]
struct Seen {
    used: HashSet<String>,
    open: HashSet<String>,
}

impl Seen {
    fn check(&mut self, record: &Record) -> Result<(), TestCaseError> {
        let line = record.to_json_line();
        prop_assert!(!line.contains("sk-secret"), "unredacted: {line}");
        let value: Value =
            serde_json::from_str(&line).map_err(|e| TestCaseError::fail(format!("{e}: {line}")))?;
        prop_assert_eq!(&value["atof_version"], "0.1");
        let uuid = value["uuid"].as_str().unwrap_or_default().to_owned();
        // An end repeats its start's parent, which may have ended since (a model request
        // outlives its turn), so only starts and marks are held to an open parent.
        if let Some(parent) = value["parent_uuid"].as_str()
            && value["scope_category"] != "end"
        {
            prop_assert!(self.open.contains(parent), "parent not open: {line}");
        }
        match value["scope_category"].as_str() {
            Some("end") => {
                prop_assert!(self.open.remove(&uuid), "end without start: {line}");
            }
            _ => {
                prop_assert!(self.used.insert(uuid.clone()), "uuid reused: {line}");
                if value["scope_category"] == "start" {
                    self.open.insert(uuid);
                }
            }
        }
        Ok(())
    }
}

proptest! {
    #[test]
    fn every_record_stream_has_consistent_scopes(
        steps in prop::collection::vec((step(), 0..3u64), 1..80),
        capture_content in any::<bool>(),
    ) {
        let config = RecorderConfig {
            capture_content,
            max_content_bytes: 16,
            max_sessions: 2,
            max_open_scopes: 2,
        };
        let mut recorder = Recorder::new(config, Box::new(Counter(0)), Box::new(KeyRedactor));
        let mut seen = Seen::default();
        let mut now = epoch();
        for (step, advance_ms) in &steps {
            now += Duration::from_millis(*advance_ms);
            recorder.handle(now, observation(step));
            while let Some(record) = recorder.poll_record() {
                seen.check(&record)?;
            }
        }
        recorder.handle(now, Observation::Shutdown);
        while let Some(record) = recorder.poll_record() {
            seen.check(&record)?;
        }
        prop_assert!(seen.open.is_empty(), "left open after shutdown: {:?}", seen.open);
        prop_assert_eq!(recorder.open_sessions(), 0);
    }
}
