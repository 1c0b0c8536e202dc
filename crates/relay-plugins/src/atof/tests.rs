//! Scenario scripts on a virtual clock: each step feeds one observation and the transcript of
//! the JSON lines it produced is compared with the expectation written beside it
//! (`UPDATE_EXPECT=1 cargo test -p relay-plugins` rewrites them). Uuids are shown as `#n` in
//! order of first appearance, so a transcript reads as its parent links.
//!
//! The hook payloads are the real ones captured from the harnesses (`tests/fixtures`, copied
//! from the shared fixture set). They were captured in several runs, so the script puts the
//! session id of the scenario into each.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use expect_test::{Expect, expect};
use serde_json::{Value, json};

use super::*;

mod properties;

/// Deterministic "randomness": the random bytes count up.
pub(super) struct Counter(u64);

impl Entropy for Counter {
    fn uuid_bytes(&mut self) -> [u8; 10] {
        self.0 += 1;
        let mut bytes = [0u8; 10];
        bytes[2..].copy_from_slice(&self.0.to_be_bytes());
        bytes
    }
}

/// A stand-in for the redaction component: replaces `sk-…` keys.
pub(super) struct KeyRedactor;

impl Redactor for KeyRedactor {
    fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        if !text.contains("sk-") {
            return Cow::Borrowed(text);
        }
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(at) = rest.find("sk-") {
            out.push_str(&rest[..at]);
            out.push_str("[REDACTED:api_key]");
            let tail = &rest[at + 3..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
                .unwrap_or(tail.len());
            rest = &tail[end..];
        }
        out.push_str(rest);
        Cow::Owned(out)
    }
}

/// 2026-12-01T10:00:00Z.
pub(super) fn epoch() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_796_119_200)
}

fn fixture(agent: Agent, file: &str) -> Value {
    let path = format!(
        "{}/src/atof/tests/fixtures/{}/{file}.json",
        env!("CARGO_MANIFEST_DIR"),
        agent.as_str()
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

struct Scenario {
    recorder: Recorder,
    now: SystemTime,
    session: String,
    out: String,
    names: HashMap<String, usize>,
}

impl Scenario {
    fn new(session: &str) -> Scenario {
        Scenario::with(RecorderConfig::default(), session)
    }

    fn with(config: RecorderConfig, session: &str) -> Scenario {
        Scenario {
            recorder: Recorder::new(config, Box::new(Counter(0)), Box::new(KeyRedactor)),
            now: epoch(),
            session: session.to_owned(),
            out: String::new(),
            names: HashMap::new(),
        }
    }

    fn step(&mut self, label: &str, observation: Observation) -> &mut Self {
        self.now += Duration::from_millis(10);
        let _ = writeln!(self.out, "> {label}");
        self.recorder.handle(self.now, observation);
        while let Some(record) = self.recorder.poll_record() {
            let line = self.shorten(record.to_json_line());
            let _ = writeln!(self.out, "  {line}");
        }
        self
    }

    /// Replaces every uuid by `#n` and the common timestamp prefix by `…`.
    fn shorten(&mut self, line: String) -> String {
        let mut value: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        for key in ["uuid", "parent_uuid"] {
            if let Some(uuid) = value.get(key).and_then(Value::as_str) {
                let next = self.names.len() + 1;
                let n = *self.names.entry(uuid.to_owned()).or_insert(next);
                value[key] = json!(format!("#{n}"));
            }
        }
        if let Some(ts) = value.get("timestamp").and_then(Value::as_str) {
            value["timestamp"] = json!(ts.replace("2026-12-01T10:00:", "…"));
        }
        value.to_string()
    }

    /// A captured hook payload of `agent`, moved into this scenario's session.
    fn hook(&mut self, agent: Agent, file: &str) -> &mut Self {
        let mut payload = fixture(agent, file);
        payload["session_id"] = json!(self.session);
        self.hook_payload(agent, file, payload)
    }

    fn hook_payload(&mut self, agent: Agent, label: &str, payload: Value) -> &mut Self {
        let hook = HookEvent::from_payload(agent, payload);
        self.step(
            &format!("{} {label}", agent.as_str()),
            Observation::Hook(hook),
        )
    }

    fn request(&mut self, id: u64, model: &str, prompt: Option<&str>) -> &mut Self {
        let start = ModelRequestStart {
            request_id: RequestId(id),
            session_id: Some(self.session.clone()),
            route: "/v1/messages".to_owned(),
            model: Some(model.to_owned()),
            stream: true,
            request_bytes: 5506,
            prompt: prompt.map(str::to_owned),
            request_redactions: 0,
            server: None,
            traceparent: None,
        };
        self.step(
            &format!("request {id} starts"),
            Observation::ModelRequestStart(start),
        )
    }

    fn response(&mut self, id: u64, status: u16) -> &mut Self {
        let end = ModelRequestEnd {
            request_id: RequestId(id),
            status,
            duration_ms: 120,
            time_to_first_byte_ms: Some(40),
            usage: Some(UsageFacts {
                uncached_input_tokens: Some(10),
                cache_read_tokens: Some(0),
                input_tokens: Some(10),
                output_tokens: Some(5),
                ..UsageFacts::default()
            }),
            response_model: None,
            truncated: false,
            error: None,
            response_id: None,
            finish_reasons: Vec::new(),
            response: None,
        };
        self.step(
            &format!("request {id} ends {status}"),
            Observation::ModelRequestEnd(end),
        )
    }

    fn policy(
        &mut self,
        agent: Agent,
        event: &str,
        tool_use_id: Option<&str>,
        decision: Decision,
        dry_run: bool,
    ) -> &mut Self {
        let target = PolicyTarget::Hook {
            agent,
            session_id: Some(self.session.clone()),
            event: event.to_owned(),
            tool_use_id: tool_use_id.map(str::to_owned),
        };
        let reason = (decision == Decision::Deny).then(|| "destructive command".to_owned());
        self.step(
            &format!("policy {event}"),
            Observation::PolicyDecision(PolicyDecision {
                target,
                rule: Some("0".to_owned()),
                decision,
                reason,
                dry_run,
            }),
        )
    }

    fn check(&mut self, expect: Expect) {
        expect.assert_eq(&self.out);
        self.out.clear();
    }
}

#[test]
fn claude_code_session_with_a_bash_round_trip() {
    let mut s = Scenario::new("3bb17d1a-ca03-4829-9e16-6f6b5d84c7e3");
    let cc = Agent::ClaudeCode;
    s.hook(cc, "SessionStart")
        .hook(cc, "UserPromptSubmit")
        .request(1, "claude-sonnet-4-5", None)
        .response(1, 200)
        .hook(cc, "PreToolUse-Bash")
        .policy(
            cc,
            "PreToolUse",
            Some("toolu_mock_92cc951468cd"),
            Decision::Allow,
            false,
        )
        .hook(cc, "PostToolUse-Bash")
        .hook(cc, "PostToolBatch")
        .request(2, "claude-sonnet-4-5", None)
        .response(2, 200)
        .hook(cc, "Stop")
        .hook(cc, "SessionEnd");
    s.check(expect![[r##"
        > claude-code SessionStart
          {"atof_version":"0.1","attributes":[],"category":"agent","category_profile":null,"data":{"session_id":"3bb17d1a-ca03-4829-9e16-6f6b5d84c7e3","source":"startup"},"data_schema":{"name":"relay.session","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"3bb17d1a-ca03-4829-9e16-6f6b5d84c7e3"},"name":"claude-code","parent_uuid":null,"scope_category":"start","timestamp":"…00.010000Z","uuid":"#1"}
        > claude-code UserPromptSubmit
          {"atof_version":"0.1","attributes":[],"category":"custom","category_profile":null,"data":{},"data_schema":{"name":"relay.turn","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"3bb17d1a-ca03-4829-9e16-6f6b5d84c7e3"},"name":"turn","parent_uuid":"#1","scope_category":"start","timestamp":"…00.020000Z","uuid":"#2"}
          {"atof_version":"0.1","category":"custom","category_profile":null,"data":{},"data_schema":{"name":"relay.hook","version":"1"},"kind":"mark","metadata":{"harness":"claude-code","session_id":"3bb17d1a-ca03-4829-9e16-6f6b5d84c7e3"},"name":"UserPromptSubmit","parent_uuid":"#2","timestamp":"…00.020000Z","uuid":"#3"}
        > request 1 starts
          {"atof_version":"0.1","attributes":["streaming"],"category":"llm","category_profile":{"model_name":"claude-sonnet-4-5"},"data":{"model":"claude-sonnet-4-5","request_bytes":5506,"route":"/v1/messages","stream":true},"data_schema":{"name":"relay.llm","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"3bb17d1a-ca03-4829-9e16-6f6b5d84c7e3"},"name":"claude-sonnet-4-5","parent_uuid":"#2","scope_category":"start","timestamp":"…00.030000Z","uuid":"#4"}
        > request 1 ends 200
          {"atof_version":"0.1","attributes":["streaming"],"category":"llm","category_profile":{"model_name":"claude-sonnet-4-5"},"data":{"duration_ms":120,"status":200,"time_to_first_byte_ms":40,"truncated":false,"usage":{"cache_read_tokens":0,"input_tokens":10,"output_tokens":5,"uncached_input_tokens":10}},"data_schema":{"name":"relay.llm","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"3bb17d1a-ca03-4829-9e16-6f6b5d84c7e3"},"name":"claude-sonnet-4-5","parent_uuid":"#2","scope_category":"end","timestamp":"…00.040000Z","uuid":"#4"}
        > claude-code PreToolUse-Bash
          {"atof_version":"0.1","attributes":[],"category":"tool","category_profile":{"tool_call_id":"toolu_mock_92cc951468cd"},"data":{},"data_schema":{"name":"relay.tool","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"3bb17d1a-ca03-4829-9e16-6f6b5d84c7e3"},"name":"Bash","parent_uuid":"#2","scope_category":"start","timestamp":"…00.050000Z","uuid":"#5"}
        > policy PreToolUse
          {"atof_version":"0.1","category":"guardrail","category_profile":null,"data":{"decision":"allow","dry_run":false,"event":"PreToolUse","reason":null,"rule":"0"},"data_schema":{"name":"relay.guardrail","version":"1"},"kind":"mark","metadata":{"harness":"claude-code","session_id":"3bb17d1a-ca03-4829-9e16-6f6b5d84c7e3"},"name":"policy","parent_uuid":"#5","timestamp":"…00.060000Z","uuid":"#6"}
        > claude-code PostToolUse-Bash
          {"atof_version":"0.1","attributes":[],"category":"tool","category_profile":{"tool_call_id":"toolu_mock_92cc951468cd"},"data":{"duration_ms":881,"outcome":"success"},"data_schema":{"name":"relay.tool","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"3bb17d1a-ca03-4829-9e16-6f6b5d84c7e3"},"name":"Bash","parent_uuid":"#2","scope_category":"end","timestamp":"…00.070000Z","uuid":"#5"}
        > claude-code PostToolBatch
          {"atof_version":"0.1","category":"custom","category_profile":null,"data":{},"data_schema":{"name":"relay.hook","version":"1"},"kind":"mark","metadata":{"harness":"claude-code","session_id":"3bb17d1a-ca03-4829-9e16-6f6b5d84c7e3"},"name":"PostToolBatch","parent_uuid":"#2","timestamp":"…00.080000Z","uuid":"#7"}
        > request 2 starts
          {"atof_version":"0.1","attributes":["streaming"],"category":"llm","category_profile":{"model_name":"claude-sonnet-4-5"},"data":{"model":"claude-sonnet-4-5","request_bytes":5506,"route":"/v1/messages","stream":true},"data_schema":{"name":"relay.llm","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"3bb17d1a-ca03-4829-9e16-6f6b5d84c7e3"},"name":"claude-sonnet-4-5","parent_uuid":"#2","scope_category":"start","timestamp":"…00.090000Z","uuid":"#8"}
        > request 2 ends 200
          {"atof_version":"0.1","attributes":["streaming"],"category":"llm","category_profile":{"model_name":"claude-sonnet-4-5"},"data":{"duration_ms":120,"status":200,"time_to_first_byte_ms":40,"truncated":false,"usage":{"cache_read_tokens":0,"input_tokens":10,"output_tokens":5,"uncached_input_tokens":10}},"data_schema":{"name":"relay.llm","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"3bb17d1a-ca03-4829-9e16-6f6b5d84c7e3"},"name":"claude-sonnet-4-5","parent_uuid":"#2","scope_category":"end","timestamp":"…00.100000Z","uuid":"#8"}
        > claude-code Stop
          {"atof_version":"0.1","category":"custom","category_profile":null,"data":{},"data_schema":{"name":"relay.hook","version":"1"},"kind":"mark","metadata":{"harness":"claude-code","session_id":"3bb17d1a-ca03-4829-9e16-6f6b5d84c7e3"},"name":"Stop","parent_uuid":"#2","timestamp":"…00.110000Z","uuid":"#9"}
          {"atof_version":"0.1","attributes":[],"category":"custom","category_profile":null,"data":{},"data_schema":{"name":"relay.turn","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"3bb17d1a-ca03-4829-9e16-6f6b5d84c7e3"},"name":"turn","parent_uuid":"#1","scope_category":"end","timestamp":"…00.110000Z","uuid":"#2"}
        > claude-code SessionEnd
          {"atof_version":"0.1","attributes":[],"category":"agent","category_profile":null,"data":{"reason":"other","usage":{"cache_read_tokens":0,"cache_write_1h_tokens":0,"cache_write_5m_tokens":0,"input_tokens":20,"output_tokens":10,"priced_requests":0,"uncached_input_tokens":20,"unpriced_requests":2}},"data_schema":{"name":"relay.session","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"3bb17d1a-ca03-4829-9e16-6f6b5d84c7e3"},"name":"claude-code","parent_uuid":null,"scope_category":"end","timestamp":"…00.120000Z","uuid":"#1"}
    "##]]);
}

#[test]
fn codex_session_with_content_captured_and_redacted() {
    let config = RecorderConfig {
        capture_content: true,
        ..RecorderConfig::default()
    };
    let mut s = Scenario::with(config, "01a229cc-ffcf-7013-b162-1d4e94d6144b");
    let cx = Agent::Codex;
    let mut prompt = fixture(cx, "UserPromptSubmit");
    prompt["session_id"] = json!(s.session);
    prompt["prompt"] = json!("say hi, my key is sk-live1234");
    s.hook(cx, "SessionStart")
        .hook_payload(cx, "UserPromptSubmit", prompt)
        // The worker forgot to redact the prompt it passes: the recorder still does.
        .request(1, "mock-model", Some("say hi, my key is sk-live1234"))
        .response(1, 200)
        .hook(cx, "PreToolUse-Bash")
        .hook(cx, "PostToolUse-Bash")
        .hook(cx, "Stop")
        .hook(cx, "SessionEnd");
    assert!(!s.out.contains("sk-live1234"), "{}", s.out);
    s.check(expect![[r##"
        > codex SessionStart
          {"atof_version":"0.1","attributes":[],"category":"agent","category_profile":null,"data":{"session_id":"01a229cc-ffcf-7013-b162-1d4e94d6144b","source":"startup"},"data_schema":{"name":"relay.session","version":"1"},"kind":"scope","metadata":{"harness":"codex","session_id":"01a229cc-ffcf-7013-b162-1d4e94d6144b"},"name":"codex","parent_uuid":null,"scope_category":"start","timestamp":"…00.010000Z","uuid":"#1"}
        > codex UserPromptSubmit
          {"atof_version":"0.1","attributes":[],"category":"custom","category_profile":null,"data":{"prompt":"say hi, my key is [REDACTED:api_key]"},"data_schema":{"name":"relay.turn","version":"1"},"kind":"scope","metadata":{"harness":"codex","session_id":"01a229cc-ffcf-7013-b162-1d4e94d6144b"},"name":"turn","parent_uuid":"#1","scope_category":"start","timestamp":"…00.020000Z","uuid":"#2"}
          {"atof_version":"0.1","category":"custom","category_profile":null,"data":{"payload":{"cwd":"/home/dev/project","hook_event_name":"UserPromptSubmit","model":"mock-model","permission_mode":"bypassPermissions","prompt":"say hi, my key is [REDACTED:api_key]","session_id":"01a229cc-ffcf-7013-b162-1d4e94d6144b","transcript_path":"/home/dev/.codex/sessions/2026/11/30/rollout-2026-11-30T00-13-50-01a229cc-ffcf-7013-b162-1d4e94d6144b.jsonl","turn_id":"01a229cc-fff8-7360-8545-dc0dac636b26"}},"data_schema":{"name":"relay.hook","version":"1"},"kind":"mark","metadata":{"harness":"codex","session_id":"01a229cc-ffcf-7013-b162-1d4e94d6144b"},"name":"UserPromptSubmit","parent_uuid":"#2","timestamp":"…00.020000Z","uuid":"#3"}
        > request 1 starts
          {"atof_version":"0.1","attributes":["streaming"],"category":"llm","category_profile":{"model_name":"mock-model"},"data":{"model":"mock-model","prompt":"say hi, my key is [REDACTED:api_key]","request_bytes":5506,"route":"/v1/messages","stream":true},"data_schema":{"name":"relay.llm","version":"1"},"kind":"scope","metadata":{"harness":"codex","session_id":"01a229cc-ffcf-7013-b162-1d4e94d6144b"},"name":"mock-model","parent_uuid":"#2","scope_category":"start","timestamp":"…00.030000Z","uuid":"#4"}
        > request 1 ends 200
          {"atof_version":"0.1","attributes":["streaming"],"category":"llm","category_profile":{"model_name":"mock-model"},"data":{"duration_ms":120,"status":200,"time_to_first_byte_ms":40,"truncated":false,"usage":{"cache_read_tokens":0,"input_tokens":10,"output_tokens":5,"uncached_input_tokens":10}},"data_schema":{"name":"relay.llm","version":"1"},"kind":"scope","metadata":{"harness":"codex","session_id":"01a229cc-ffcf-7013-b162-1d4e94d6144b"},"name":"mock-model","parent_uuid":"#2","scope_category":"end","timestamp":"…00.040000Z","uuid":"#4"}
        > codex PreToolUse-Bash
          {"atof_version":"0.1","attributes":[],"category":"tool","category_profile":{"tool_call_id":"call_mock_78ab1bbe"},"data":{"input":{"command":"echo relay-mock-tool"}},"data_schema":{"name":"relay.tool","version":"1"},"kind":"scope","metadata":{"harness":"codex","session_id":"01a229cc-ffcf-7013-b162-1d4e94d6144b"},"name":"Bash","parent_uuid":"#2","scope_category":"start","timestamp":"…00.050000Z","uuid":"#5"}
        > codex PostToolUse-Bash
          {"atof_version":"0.1","attributes":[],"category":"tool","category_profile":{"tool_call_id":"call_mock_78ab1bbe"},"data":{"outcome":"success","output":"relay-mock-tool\n"},"data_schema":{"name":"relay.tool","version":"1"},"kind":"scope","metadata":{"harness":"codex","session_id":"01a229cc-ffcf-7013-b162-1d4e94d6144b"},"name":"Bash","parent_uuid":"#2","scope_category":"end","timestamp":"…00.060000Z","uuid":"#5"}
        > codex Stop
          {"atof_version":"0.1","category":"custom","category_profile":null,"data":{"payload":{"cwd":"/home/dev/project","hook_event_name":"Stop","last_assistant_message":"hi from mock","model":"mock-model","permission_mode":"bypassPermissions","session_id":"01a229cc-ffcf-7013-b162-1d4e94d6144b","stop_hook_active":false,"transcript_path":"/home/dev/.codex/sessions/2026/11/30/rollout-2026-11-30T00-13-50-01a229cc-ffcf-7013-b162-1d4e94d6144b.jsonl","turn_id":"01a229cc-fff8-7360-8545-dc0dac636b26"}},"data_schema":{"name":"relay.hook","version":"1"},"kind":"mark","metadata":{"harness":"codex","session_id":"01a229cc-ffcf-7013-b162-1d4e94d6144b"},"name":"Stop","parent_uuid":"#2","timestamp":"…00.070000Z","uuid":"#6"}
          {"atof_version":"0.1","attributes":[],"category":"custom","category_profile":null,"data":{"response":"hi from mock"},"data_schema":{"name":"relay.turn","version":"1"},"kind":"scope","metadata":{"harness":"codex","session_id":"01a229cc-ffcf-7013-b162-1d4e94d6144b"},"name":"turn","parent_uuid":"#1","scope_category":"end","timestamp":"…00.070000Z","uuid":"#2"}
        > codex SessionEnd
          {"atof_version":"0.1","attributes":[],"category":"agent","category_profile":null,"data":{"reason":"other","usage":{"cache_read_tokens":0,"cache_write_1h_tokens":0,"cache_write_5m_tokens":0,"input_tokens":10,"output_tokens":5,"priced_requests":0,"uncached_input_tokens":10,"unpriced_requests":1}},"data_schema":{"name":"relay.session","version":"1"},"kind":"scope","metadata":{"harness":"codex","session_id":"01a229cc-ffcf-7013-b162-1d4e94d6144b"},"name":"codex","parent_uuid":null,"scope_category":"end","timestamp":"…00.080000Z","uuid":"#1"}
    "##]]);
}

#[test]
fn pi_session_with_a_bash_round_trip() {
    let mut s = Scenario::new("01a229cd-d9fb-7121-974c-fddf1d21d473");
    let pi = Agent::Pi;
    s.hook(pi, "session_start")
        .hook(pi, "input")
        .hook(pi, "agent_start")
        .hook(pi, "turn_start")
        .hook(pi, "before_provider_request")
        .request(1, "mock-claude", None)
        .hook(pi, "after_provider_response")
        .response(1, 200)
        .hook(pi, "tool_call-bash")
        .policy(
            pi,
            "tool_call",
            Some("toolu_mock_eac7ca97655e"),
            Decision::Allow,
            false,
        )
        .hook(pi, "tool_result-bash")
        .hook(pi, "turn_end")
        .hook(pi, "agent_end")
        .hook(pi, "session_shutdown");
    s.check(expect![[r##"
        > pi session_start
          {"atof_version":"0.1","attributes":[],"category":"agent","category_profile":null,"data":{"session_id":"01a229cd-d9fb-7121-974c-fddf1d21d473","source":"startup"},"data_schema":{"name":"relay.session","version":"1"},"kind":"scope","metadata":{"harness":"pi","session_id":"01a229cd-d9fb-7121-974c-fddf1d21d473"},"name":"pi","parent_uuid":null,"scope_category":"start","timestamp":"…00.010000Z","uuid":"#1"}
        > pi input
          {"atof_version":"0.1","attributes":[],"category":"custom","category_profile":null,"data":{},"data_schema":{"name":"relay.turn","version":"1"},"kind":"scope","metadata":{"harness":"pi","session_id":"01a229cd-d9fb-7121-974c-fddf1d21d473"},"name":"turn","parent_uuid":"#1","scope_category":"start","timestamp":"…00.020000Z","uuid":"#2"}
          {"atof_version":"0.1","category":"custom","category_profile":null,"data":{},"data_schema":{"name":"relay.hook","version":"1"},"kind":"mark","metadata":{"harness":"pi","session_id":"01a229cd-d9fb-7121-974c-fddf1d21d473"},"name":"input","parent_uuid":"#2","timestamp":"…00.020000Z","uuid":"#3"}
        > pi agent_start
          {"atof_version":"0.1","category":"custom","category_profile":null,"data":{},"data_schema":{"name":"relay.hook","version":"1"},"kind":"mark","metadata":{"harness":"pi","session_id":"01a229cd-d9fb-7121-974c-fddf1d21d473"},"name":"agent_start","parent_uuid":"#2","timestamp":"…00.030000Z","uuid":"#4"}
        > pi turn_start
          {"atof_version":"0.1","category":"custom","category_profile":null,"data":{},"data_schema":{"name":"relay.hook","version":"1"},"kind":"mark","metadata":{"harness":"pi","session_id":"01a229cd-d9fb-7121-974c-fddf1d21d473"},"name":"turn_start","parent_uuid":"#2","timestamp":"…00.040000Z","uuid":"#5"}
        > pi before_provider_request
          {"atof_version":"0.1","category":"custom","category_profile":null,"data":{},"data_schema":{"name":"relay.hook","version":"1"},"kind":"mark","metadata":{"harness":"pi","session_id":"01a229cd-d9fb-7121-974c-fddf1d21d473"},"name":"before_provider_request","parent_uuid":"#2","timestamp":"…00.050000Z","uuid":"#6"}
        > request 1 starts
          {"atof_version":"0.1","attributes":["streaming"],"category":"llm","category_profile":{"model_name":"mock-claude"},"data":{"model":"mock-claude","request_bytes":5506,"route":"/v1/messages","stream":true},"data_schema":{"name":"relay.llm","version":"1"},"kind":"scope","metadata":{"harness":"pi","session_id":"01a229cd-d9fb-7121-974c-fddf1d21d473"},"name":"mock-claude","parent_uuid":"#2","scope_category":"start","timestamp":"…00.060000Z","uuid":"#7"}
        > pi after_provider_response
          {"atof_version":"0.1","category":"custom","category_profile":null,"data":{},"data_schema":{"name":"relay.hook","version":"1"},"kind":"mark","metadata":{"harness":"pi","session_id":"01a229cd-d9fb-7121-974c-fddf1d21d473"},"name":"after_provider_response","parent_uuid":"#2","timestamp":"…00.070000Z","uuid":"#8"}
        > request 1 ends 200
          {"atof_version":"0.1","attributes":["streaming"],"category":"llm","category_profile":{"model_name":"mock-claude"},"data":{"duration_ms":120,"status":200,"time_to_first_byte_ms":40,"truncated":false,"usage":{"cache_read_tokens":0,"input_tokens":10,"output_tokens":5,"uncached_input_tokens":10}},"data_schema":{"name":"relay.llm","version":"1"},"kind":"scope","metadata":{"harness":"pi","session_id":"01a229cd-d9fb-7121-974c-fddf1d21d473"},"name":"mock-claude","parent_uuid":"#2","scope_category":"end","timestamp":"…00.080000Z","uuid":"#7"}
        > pi tool_call-bash
          {"atof_version":"0.1","attributes":[],"category":"tool","category_profile":{"tool_call_id":"toolu_mock_eac7ca97655e"},"data":{},"data_schema":{"name":"relay.tool","version":"1"},"kind":"scope","metadata":{"harness":"pi","session_id":"01a229cd-d9fb-7121-974c-fddf1d21d473"},"name":"bash","parent_uuid":"#2","scope_category":"start","timestamp":"…00.090000Z","uuid":"#9"}
        > policy tool_call
          {"atof_version":"0.1","category":"guardrail","category_profile":null,"data":{"decision":"allow","dry_run":false,"event":"tool_call","reason":null,"rule":"0"},"data_schema":{"name":"relay.guardrail","version":"1"},"kind":"mark","metadata":{"harness":"pi","session_id":"01a229cd-d9fb-7121-974c-fddf1d21d473"},"name":"policy","parent_uuid":"#9","timestamp":"…00.100000Z","uuid":"#10"}
        > pi tool_result-bash
          {"atof_version":"0.1","attributes":[],"category":"tool","category_profile":{"tool_call_id":"toolu_mock_eac7ca97655e"},"data":{"outcome":"success"},"data_schema":{"name":"relay.tool","version":"1"},"kind":"scope","metadata":{"harness":"pi","session_id":"01a229cd-d9fb-7121-974c-fddf1d21d473"},"name":"bash","parent_uuid":"#2","scope_category":"end","timestamp":"…00.110000Z","uuid":"#9"}
        > pi turn_end
          {"atof_version":"0.1","category":"custom","category_profile":null,"data":{},"data_schema":{"name":"relay.hook","version":"1"},"kind":"mark","metadata":{"harness":"pi","session_id":"01a229cd-d9fb-7121-974c-fddf1d21d473"},"name":"turn_end","parent_uuid":"#2","timestamp":"…00.120000Z","uuid":"#11"}
        > pi agent_end
          {"atof_version":"0.1","category":"custom","category_profile":null,"data":{},"data_schema":{"name":"relay.hook","version":"1"},"kind":"mark","metadata":{"harness":"pi","session_id":"01a229cd-d9fb-7121-974c-fddf1d21d473"},"name":"agent_end","parent_uuid":"#2","timestamp":"…00.130000Z","uuid":"#12"}
          {"atof_version":"0.1","attributes":[],"category":"custom","category_profile":null,"data":{},"data_schema":{"name":"relay.turn","version":"1"},"kind":"scope","metadata":{"harness":"pi","session_id":"01a229cd-d9fb-7121-974c-fddf1d21d473"},"name":"turn","parent_uuid":"#1","scope_category":"end","timestamp":"…00.130000Z","uuid":"#2"}
        > pi session_shutdown
          {"atof_version":"0.1","attributes":[],"category":"agent","category_profile":null,"data":{"reason":"quit","usage":{"cache_read_tokens":0,"cache_write_1h_tokens":0,"cache_write_5m_tokens":0,"input_tokens":10,"output_tokens":5,"priced_requests":0,"uncached_input_tokens":10,"unpriced_requests":1}},"data_schema":{"name":"relay.session","version":"1"},"kind":"scope","metadata":{"harness":"pi","session_id":"01a229cd-d9fb-7121-974c-fddf1d21d473"},"name":"pi","parent_uuid":null,"scope_category":"end","timestamp":"…00.140000Z","uuid":"#1"}
    "##]]);
}

#[test]
fn an_enforced_deny_closes_the_tool_and_a_dry_run_does_not() {
    let mut s = Scenario::new("s1");
    let cc = Agent::ClaudeCode;
    let id = Some("toolu_mock_92cc951468cd");
    s.hook(cc, "SessionStart")
        .hook(cc, "UserPromptSubmit")
        .hook(cc, "PreToolUse-Bash")
        .policy(cc, "PreToolUse", id, Decision::Deny, false);
    s.check(expect![[r##"
        > claude-code SessionStart
          {"atof_version":"0.1","attributes":[],"category":"agent","category_profile":null,"data":{"session_id":"s1","source":"startup"},"data_schema":{"name":"relay.session","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"s1"},"name":"claude-code","parent_uuid":null,"scope_category":"start","timestamp":"…00.010000Z","uuid":"#1"}
        > claude-code UserPromptSubmit
          {"atof_version":"0.1","attributes":[],"category":"custom","category_profile":null,"data":{},"data_schema":{"name":"relay.turn","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"s1"},"name":"turn","parent_uuid":"#1","scope_category":"start","timestamp":"…00.020000Z","uuid":"#2"}
          {"atof_version":"0.1","category":"custom","category_profile":null,"data":{},"data_schema":{"name":"relay.hook","version":"1"},"kind":"mark","metadata":{"harness":"claude-code","session_id":"s1"},"name":"UserPromptSubmit","parent_uuid":"#2","timestamp":"…00.020000Z","uuid":"#3"}
        > claude-code PreToolUse-Bash
          {"atof_version":"0.1","attributes":[],"category":"tool","category_profile":{"tool_call_id":"toolu_mock_92cc951468cd"},"data":{},"data_schema":{"name":"relay.tool","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"s1"},"name":"Bash","parent_uuid":"#2","scope_category":"start","timestamp":"…00.030000Z","uuid":"#4"}
        > policy PreToolUse
          {"atof_version":"0.1","category":"guardrail","category_profile":null,"data":{"decision":"deny","dry_run":false,"event":"PreToolUse","reason":"destructive command","rule":"0"},"data_schema":{"name":"relay.guardrail","version":"1"},"kind":"mark","metadata":{"harness":"claude-code","session_id":"s1"},"name":"policy","parent_uuid":"#4","timestamp":"…00.040000Z","uuid":"#5"}
          {"atof_version":"0.1","attributes":[],"category":"tool","category_profile":{"tool_call_id":"toolu_mock_92cc951468cd"},"data":{"closed_by":"policy"},"data_schema":{"name":"relay.tool","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"s1"},"name":"Bash","parent_uuid":"#2","scope_category":"end","timestamp":"…00.040000Z","uuid":"#4"}
    "##]]);
    // The harness never runs the tool, so a late PostToolUse has no open scope: it gets an
    // implicit one rather than an end without a start.
    s.hook(cc, "PreToolUse-Bash")
        .policy(cc, "PreToolUse", id, Decision::Deny, true)
        .hook(cc, "PostToolUse-Bash");
    s.check(expect![[r##"
        > claude-code PreToolUse-Bash
          {"atof_version":"0.1","attributes":[],"category":"tool","category_profile":{"tool_call_id":"toolu_mock_92cc951468cd"},"data":{},"data_schema":{"name":"relay.tool","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"s1"},"name":"Bash","parent_uuid":"#2","scope_category":"start","timestamp":"…00.050000Z","uuid":"#6"}
        > policy PreToolUse
          {"atof_version":"0.1","category":"guardrail","category_profile":null,"data":{"decision":"deny","dry_run":true,"event":"PreToolUse","reason":"destructive command","rule":"0"},"data_schema":{"name":"relay.guardrail","version":"1"},"kind":"mark","metadata":{"harness":"claude-code","session_id":"s1"},"name":"policy","parent_uuid":"#6","timestamp":"…00.060000Z","uuid":"#7"}
        > claude-code PostToolUse-Bash
          {"atof_version":"0.1","attributes":[],"category":"tool","category_profile":{"tool_call_id":"toolu_mock_92cc951468cd"},"data":{"duration_ms":881,"outcome":"success"},"data_schema":{"name":"relay.tool","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"s1"},"name":"Bash","parent_uuid":"#2","scope_category":"end","timestamp":"…00.070000Z","uuid":"#6"}
    "##]]);
}

#[test]
fn a_denied_prompt_closes_its_turn_and_a_denied_model_request_its_llm_scope() {
    let mut s = Scenario::new("s1");
    let cc = Agent::ClaudeCode;
    s.hook(cc, "SessionStart")
        .hook(cc, "UserPromptSubmit")
        .policy(cc, "UserPromptSubmit", None, Decision::Deny, false)
        .request(7, "gpt-unlisted", None)
        .step(
            "policy model request",
            Observation::PolicyDecision(PolicyDecision {
                target: PolicyTarget::ModelRequest {
                    request_id: RequestId(7),
                },
                rule: None,
                decision: Decision::Deny,
                reason: Some("model not allowed".to_owned()),
                dry_run: false,
            }),
        )
        // The 403 the worker answered ends nothing: the scope is already closed.
        .response(7, 403);
    s.check(expect![[r##"
        > claude-code SessionStart
          {"atof_version":"0.1","attributes":[],"category":"agent","category_profile":null,"data":{"session_id":"s1","source":"startup"},"data_schema":{"name":"relay.session","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"s1"},"name":"claude-code","parent_uuid":null,"scope_category":"start","timestamp":"…00.010000Z","uuid":"#1"}
        > claude-code UserPromptSubmit
          {"atof_version":"0.1","attributes":[],"category":"custom","category_profile":null,"data":{},"data_schema":{"name":"relay.turn","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"s1"},"name":"turn","parent_uuid":"#1","scope_category":"start","timestamp":"…00.020000Z","uuid":"#2"}
          {"atof_version":"0.1","category":"custom","category_profile":null,"data":{},"data_schema":{"name":"relay.hook","version":"1"},"kind":"mark","metadata":{"harness":"claude-code","session_id":"s1"},"name":"UserPromptSubmit","parent_uuid":"#2","timestamp":"…00.020000Z","uuid":"#3"}
        > policy UserPromptSubmit
          {"atof_version":"0.1","category":"guardrail","category_profile":null,"data":{"decision":"deny","dry_run":false,"event":"UserPromptSubmit","reason":"destructive command","rule":"0"},"data_schema":{"name":"relay.guardrail","version":"1"},"kind":"mark","metadata":{"harness":"claude-code","session_id":"s1"},"name":"policy","parent_uuid":"#2","timestamp":"…00.030000Z","uuid":"#4"}
          {"atof_version":"0.1","attributes":[],"category":"custom","category_profile":null,"data":{"closed_by":"policy"},"data_schema":{"name":"relay.turn","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"s1"},"name":"turn","parent_uuid":"#1","scope_category":"end","timestamp":"…00.030000Z","uuid":"#2"}
        > request 7 starts
          {"atof_version":"0.1","attributes":["streaming"],"category":"llm","category_profile":{"model_name":"gpt-unlisted"},"data":{"model":"gpt-unlisted","request_bytes":5506,"route":"/v1/messages","stream":true},"data_schema":{"name":"relay.llm","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"s1"},"name":"gpt-unlisted","parent_uuid":"#1","scope_category":"start","timestamp":"…00.040000Z","uuid":"#5"}
        > policy model request
          {"atof_version":"0.1","category":"guardrail","category_profile":null,"data":{"decision":"deny","dry_run":false,"event":"model_request","reason":"model not allowed","rule":null},"data_schema":{"name":"relay.guardrail","version":"1"},"kind":"mark","metadata":{"harness":"claude-code","session_id":"s1"},"name":"policy","parent_uuid":"#5","timestamp":"…00.050000Z","uuid":"#6"}
          {"atof_version":"0.1","attributes":["streaming"],"category":"llm","category_profile":{"model_name":"gpt-unlisted"},"data":{"closed_by":"policy","status":403},"data_schema":{"name":"relay.llm","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"s1"},"name":"gpt-unlisted","parent_uuid":"#1","scope_category":"end","timestamp":"…00.050000Z","uuid":"#5"}
        > request 7 ends 403
    "##]]);
}

#[test]
fn unknown_sessions_start_implicitly_and_open_scopes_close_at_session_end() {
    let mut s = Scenario::new("late");
    let cc = Agent::ClaudeCode;
    s.hook(cc, "UserPromptSubmit")
        .hook(cc, "PreToolUse-Bash")
        .request(1, "claude-sonnet-4-5", None)
        .hook(cc, "SessionEnd")
        // Its scope was closed by the session's end; this end is dropped.
        .response(1, 200)
        // A model request of a session nobody announced has no parent.
        .step(
            "request 2 of an unknown session starts",
            Observation::ModelRequestStart(ModelRequestStart {
                request_id: RequestId(2),
                session_id: Some("nobody".to_owned()),
                route: "/v1/responses".to_owned(),
                model: None,
                stream: false,
                request_bytes: 10,
                prompt: None,
                request_redactions: 0,
                server: None,
                traceparent: None,
            }),
        )
        .response(2, 200)
        .response(3, 200);
    s.check(expect![[r##"
        > claude-code UserPromptSubmit
          {"atof_version":"0.1","attributes":[],"category":"agent","category_profile":null,"data":{"implicit":true,"session_id":"late"},"data_schema":{"name":"relay.session","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"late"},"name":"claude-code","parent_uuid":null,"scope_category":"start","timestamp":"…00.010000Z","uuid":"#1"}
          {"atof_version":"0.1","attributes":[],"category":"custom","category_profile":null,"data":{},"data_schema":{"name":"relay.turn","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"late"},"name":"turn","parent_uuid":"#1","scope_category":"start","timestamp":"…00.010000Z","uuid":"#2"}
          {"atof_version":"0.1","category":"custom","category_profile":null,"data":{},"data_schema":{"name":"relay.hook","version":"1"},"kind":"mark","metadata":{"harness":"claude-code","session_id":"late"},"name":"UserPromptSubmit","parent_uuid":"#2","timestamp":"…00.010000Z","uuid":"#3"}
        > claude-code PreToolUse-Bash
          {"atof_version":"0.1","attributes":[],"category":"tool","category_profile":{"tool_call_id":"toolu_mock_92cc951468cd"},"data":{},"data_schema":{"name":"relay.tool","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"late"},"name":"Bash","parent_uuid":"#2","scope_category":"start","timestamp":"…00.020000Z","uuid":"#4"}
        > request 1 starts
          {"atof_version":"0.1","attributes":["streaming"],"category":"llm","category_profile":{"model_name":"claude-sonnet-4-5"},"data":{"model":"claude-sonnet-4-5","request_bytes":5506,"route":"/v1/messages","stream":true},"data_schema":{"name":"relay.llm","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"late"},"name":"claude-sonnet-4-5","parent_uuid":"#2","scope_category":"start","timestamp":"…00.030000Z","uuid":"#5"}
        > claude-code SessionEnd
          {"atof_version":"0.1","attributes":[],"category":"tool","category_profile":{"tool_call_id":"toolu_mock_92cc951468cd"},"data":{"closed_by":"session_end"},"data_schema":{"name":"relay.tool","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"late"},"name":"Bash","parent_uuid":"#2","scope_category":"end","timestamp":"…00.040000Z","uuid":"#4"}
          {"atof_version":"0.1","attributes":["streaming"],"category":"llm","category_profile":{"model_name":"claude-sonnet-4-5"},"data":{"closed_by":"session_end"},"data_schema":{"name":"relay.llm","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"late"},"name":"claude-sonnet-4-5","parent_uuid":"#2","scope_category":"end","timestamp":"…00.040000Z","uuid":"#5"}
          {"atof_version":"0.1","attributes":[],"category":"custom","category_profile":null,"data":{"closed_by":"session_end"},"data_schema":{"name":"relay.turn","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"late"},"name":"turn","parent_uuid":"#1","scope_category":"end","timestamp":"…00.040000Z","uuid":"#2"}
          {"atof_version":"0.1","attributes":[],"category":"agent","category_profile":null,"data":{"reason":"other"},"data_schema":{"name":"relay.session","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"late"},"name":"claude-code","parent_uuid":null,"scope_category":"end","timestamp":"…00.040000Z","uuid":"#1"}
        > request 1 ends 200
        > request 2 of an unknown session starts
          {"atof_version":"0.1","attributes":[],"category":"llm","category_profile":null,"data":{"model":null,"request_bytes":10,"route":"/v1/responses","stream":false},"data_schema":{"name":"relay.llm","version":"1"},"kind":"scope","metadata":{"session_id":"nobody"},"name":"unknown","parent_uuid":null,"scope_category":"start","timestamp":"…00.060000Z","uuid":"#6"}
        > request 2 ends 200
          {"atof_version":"0.1","attributes":[],"category":"llm","category_profile":null,"data":{"duration_ms":120,"status":200,"time_to_first_byte_ms":40,"truncated":false,"usage":{"cache_read_tokens":0,"input_tokens":10,"output_tokens":5,"uncached_input_tokens":10}},"data_schema":{"name":"relay.llm","version":"1"},"kind":"scope","metadata":{"session_id":"nobody"},"name":"unknown","parent_uuid":null,"scope_category":"end","timestamp":"…00.070000Z","uuid":"#6"}
        > request 3 ends 200
    "##]]);
}

#[test]
fn bounded_state_evicts_the_least_recently_active_with_an_end_record() {
    let config = RecorderConfig {
        max_sessions: 1,
        max_open_scopes: 1,
        ..RecorderConfig::default()
    };
    let mut s = Scenario::with(config, "a");
    let cc = Agent::ClaudeCode;
    s.hook(cc, "SessionStart")
        .request(1, "m", None)
        .request(2, "m", None);
    s.session = "b".to_owned();
    s.hook(cc, "SessionStart");
    s.check(expect![[r##"
        > claude-code SessionStart
          {"atof_version":"0.1","attributes":[],"category":"agent","category_profile":null,"data":{"session_id":"a","source":"startup"},"data_schema":{"name":"relay.session","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"a"},"name":"claude-code","parent_uuid":null,"scope_category":"start","timestamp":"…00.010000Z","uuid":"#1"}
        > request 1 starts
          {"atof_version":"0.1","attributes":["streaming"],"category":"llm","category_profile":{"model_name":"m"},"data":{"model":"m","request_bytes":5506,"route":"/v1/messages","stream":true},"data_schema":{"name":"relay.llm","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"a"},"name":"m","parent_uuid":"#1","scope_category":"start","timestamp":"…00.020000Z","uuid":"#2"}
        > request 2 starts
          {"atof_version":"0.1","attributes":["streaming"],"category":"llm","category_profile":{"model_name":"m"},"data":{"closed_by":"evicted"},"data_schema":{"name":"relay.llm","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"a"},"name":"m","parent_uuid":"#1","scope_category":"end","timestamp":"…00.030000Z","uuid":"#2"}
          {"atof_version":"0.1","attributes":["streaming"],"category":"llm","category_profile":{"model_name":"m"},"data":{"model":"m","request_bytes":5506,"route":"/v1/messages","stream":true},"data_schema":{"name":"relay.llm","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"a"},"name":"m","parent_uuid":"#1","scope_category":"start","timestamp":"…00.030000Z","uuid":"#3"}
        > claude-code SessionStart
          {"atof_version":"0.1","attributes":["streaming"],"category":"llm","category_profile":{"model_name":"m"},"data":{"closed_by":"evicted"},"data_schema":{"name":"relay.llm","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"a"},"name":"m","parent_uuid":"#1","scope_category":"end","timestamp":"…00.040000Z","uuid":"#3"}
          {"atof_version":"0.1","attributes":[],"category":"agent","category_profile":null,"data":{"closed_by":"evicted"},"data_schema":{"name":"relay.session","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"a"},"name":"claude-code","parent_uuid":null,"scope_category":"end","timestamp":"…00.040000Z","uuid":"#1"}
          {"atof_version":"0.1","attributes":[],"category":"agent","category_profile":null,"data":{"session_id":"b","source":"startup"},"data_schema":{"name":"relay.session","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"b"},"name":"claude-code","parent_uuid":null,"scope_category":"start","timestamp":"…00.040000Z","uuid":"#4"}
    "##]]);
    assert_eq!(s.recorder.open_sessions(), 1);
}

#[test]
fn content_is_cut_at_the_bound_on_a_character_boundary_and_marked() {
    let config = RecorderConfig {
        capture_content: true,
        max_content_bytes: 8,
        ..RecorderConfig::default()
    };
    let mut s = Scenario::with(config, "s1");
    let cc = Agent::ClaudeCode;
    let mut prompt = fixture(cc, "UserPromptSubmit");
    prompt["session_id"] = json!("s1");
    prompt["prompt"] = json!([r##"
        > claude-code SessionStart
          {"atof_version":"0.1","attributes":[],"category":"agent","category_profile":null,"data":{"session_id":"s1","source":"startup"},"data_schema":{"name":"relay.session","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"s1"},"name":"claude-code","parent_uuid":null,"scope_category":"start","timestamp":"…00.010000Z","uuid":"#1"}
        > claude-code UserPromptSubmit
          {"atof_version":"0.1","attributes":[],"category":"custom","category_profile":null,"data":{"content_truncated":true,"prompt":"héhéh"},"data_schema":{"name":"relay.turn","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"s1"},"name":"turn","parent_uuid":"#1","scope_category":"start","timestamp":"…00.020000Z","uuid":"#2"}
          {"atof_version":"0.1","category":"custom","category_profile":null,"data":{"content_truncated":true,"payload":"{\"cwd\":\""},"data_schema":{"name":"relay.hook","version":"1"},"kind":"mark","metadata":{"harness":"claude-code","session_id":"s1"},"name":"UserPromptSubmit","parent_uuid":"#2","timestamp":"…00.020000Z","uuid":"#3"}
        > claude-code PreToolUse-Bash
          {"atof_version":"0.1","attributes":[],"category":"tool","category_profile":{"tool_call_id":"toolu_mock_92cc951468cd"},"data":{"content_truncated":true,"input":"{\"comman"},"data_schema":{"name":"relay.tool","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"s1"},"name":"Bash","parent_uuid":"#2","scope_category":"start","timestamp":"…00.030000Z","uuid":"#4"}
    "##]);
    s.hook(cc, "SessionStart")
        .hook_payload(cc, "UserPromptSubmit", prompt)
        .hook(cc, "PreToolUse-Bash");
    s.check(expect![[r##"
        > claude-code SessionStart
          {"atof_version":"0.1","attributes":[],"category":"agent","category_profile":null,"data":{"session_id":"s1","source":"startup"},"data_schema":{"name":"relay.session","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"s1"},"name":"claude-code","parent_uuid":null,"scope_category":"start","timestamp":"…00.010000Z","uuid":"#1"}
        > claude-code UserPromptSubmit
          {"atof_version":"0.1","attributes":[],"category":"custom","category_profile":null,"data":{},"data_schema":{"name":"relay.turn","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"s1"},"name":"turn","parent_uuid":"#1","scope_category":"start","timestamp":"…00.020000Z","uuid":"#2"}
          {"atof_version":"0.1","category":"custom","category_profile":null,"data":{"content_truncated":true,"payload":"{\"cwd\":\""},"data_schema":{"name":"relay.hook","version":"1"},"kind":"mark","metadata":{"harness":"claude-code","session_id":"s1"},"name":"UserPromptSubmit","parent_uuid":"#2","timestamp":"…00.020000Z","uuid":"#3"}
        > claude-code PreToolUse-Bash
          {"atof_version":"0.1","attributes":[],"category":"tool","category_profile":{"tool_call_id":"toolu_mock_92cc951468cd"},"data":{"content_truncated":true,"input":"{\"comman"},"data_schema":{"name":"relay.tool","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"s1"},"name":"Bash","parent_uuid":"#2","scope_category":"start","timestamp":"…00.030000Z","uuid":"#4"}
    "##]]);
}

#[test]
fn without_capture_no_content_reaches_a_record() {
    let mut s = Scenario::new("s1");
    let cc = Agent::ClaudeCode;
    s.hook(cc, "SessionStart")
        .hook(cc, "UserPromptSubmit")
        .request(1, "m", Some("say hi"))
        .hook(cc, "PreToolUse-Bash")
        .hook(cc, "PostToolUse-Bash")
        .hook(cc, "Stop")
        .hook(cc, "MessageDisplay");
    for word in ["say hi", "relay-mock-tool", "hi from mock", "/home/dev"] {
        assert!(!s.out.contains(word), "{word} in {}", s.out);
    }
}

#[test]
fn shutdown_closes_every_open_scope_innermost_first() {
    let mut s = Scenario::new("s1");
    let cc = Agent::ClaudeCode;
    s.hook(cc, "SessionStart")
        .hook(cc, "UserPromptSubmit")
        .hook(cc, "PreToolUse-Bash")
        .request(1, "m", None)
        .step("shutdown", Observation::Shutdown);
    s.check(expect![[r##"
        > claude-code SessionStart
          {"atof_version":"0.1","attributes":[],"category":"agent","category_profile":null,"data":{"session_id":"s1","source":"startup"},"data_schema":{"name":"relay.session","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"s1"},"name":"claude-code","parent_uuid":null,"scope_category":"start","timestamp":"…00.010000Z","uuid":"#1"}
        > claude-code UserPromptSubmit
          {"atof_version":"0.1","attributes":[],"category":"custom","category_profile":null,"data":{},"data_schema":{"name":"relay.turn","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"s1"},"name":"turn","parent_uuid":"#1","scope_category":"start","timestamp":"…00.020000Z","uuid":"#2"}
          {"atof_version":"0.1","category":"custom","category_profile":null,"data":{},"data_schema":{"name":"relay.hook","version":"1"},"kind":"mark","metadata":{"harness":"claude-code","session_id":"s1"},"name":"UserPromptSubmit","parent_uuid":"#2","timestamp":"…00.020000Z","uuid":"#3"}
        > claude-code PreToolUse-Bash
          {"atof_version":"0.1","attributes":[],"category":"tool","category_profile":{"tool_call_id":"toolu_mock_92cc951468cd"},"data":{},"data_schema":{"name":"relay.tool","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"s1"},"name":"Bash","parent_uuid":"#2","scope_category":"start","timestamp":"…00.030000Z","uuid":"#4"}
        > request 1 starts
          {"atof_version":"0.1","attributes":["streaming"],"category":"llm","category_profile":{"model_name":"m"},"data":{"model":"m","request_bytes":5506,"route":"/v1/messages","stream":true},"data_schema":{"name":"relay.llm","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"s1"},"name":"m","parent_uuid":"#2","scope_category":"start","timestamp":"…00.040000Z","uuid":"#5"}
        > shutdown
          {"atof_version":"0.1","attributes":[],"category":"tool","category_profile":{"tool_call_id":"toolu_mock_92cc951468cd"},"data":{"closed_by":"shutdown"},"data_schema":{"name":"relay.tool","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"s1"},"name":"Bash","parent_uuid":"#2","scope_category":"end","timestamp":"…00.050000Z","uuid":"#4"}
          {"atof_version":"0.1","attributes":["streaming"],"category":"llm","category_profile":{"model_name":"m"},"data":{"closed_by":"shutdown"},"data_schema":{"name":"relay.llm","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"s1"},"name":"m","parent_uuid":"#2","scope_category":"end","timestamp":"…00.050000Z","uuid":"#5"}
          {"atof_version":"0.1","attributes":[],"category":"custom","category_profile":null,"data":{"closed_by":"shutdown"},"data_schema":{"name":"relay.turn","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"s1"},"name":"turn","parent_uuid":"#1","scope_category":"end","timestamp":"…00.050000Z","uuid":"#2"}
          {"atof_version":"0.1","attributes":[],"category":"agent","category_profile":null,"data":{"closed_by":"shutdown"},"data_schema":{"name":"relay.session","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"s1"},"name":"claude-code","parent_uuid":null,"scope_category":"end","timestamp":"…00.050000Z","uuid":"#1"}
    "##]]);
    assert_eq!(s.recorder.open_sessions(), 0);
}

/// A streamed Messages request of no session, with the given `traceparent`.
fn lone_start(traceparent: Option<String>) -> ModelRequestStart {
    ModelRequestStart {
        request_id: RequestId(1),
        session_id: None,
        route: "/v1/messages".to_owned(),
        model: Some("claude-sonnet-4-5".to_owned()),
        stream: true,
        request_bytes: 42,
        prompt: None,
        request_redactions: 0,
        server: None,
        traceparent,
    }
}

#[test]
fn a_record_on_the_wire() {
    let mut recorder = Recorder::new(
        RecorderConfig::default(),
        Box::new(Counter(0x0102_0304)),
        Box::new(NoRedaction),
    );
    let at = epoch() + Duration::from_micros(123_456_789);
    recorder.handle(at, Observation::ModelRequestStart(lone_start(None)));
    let record = recorder.poll_record();
    let line = record
        .as_ref()
        .map(Record::to_json_line)
        .unwrap_or_default();
    expect![[r#"{"kind":"scope","atof_version":"0.1","uuid":"01a2310d-e340-7000-8000-000001020305","parent_uuid":null,"timestamp":"2026-12-01T10:02:03.456789Z","name":"claude-sonnet-4-5","scope_category":"start","category":"llm","attributes":["streaming"],"category_profile":{"model_name":"claude-sonnet-4-5"},"data":{"model":"claude-sonnet-4-5","request_bytes":42,"route":"/v1/messages","stream":true},"data_schema":{"name":"relay.llm","version":"1"},"metadata":null}"#]].assert_eq(&line);
    let mut buf = Vec::new();
    if let Some(record) = &record {
        record.write_json_line(&mut buf);
    }
    assert_eq!(buf, format!("{line}\n").into_bytes());
    let uuid = record.map(|r| r.uuid).unwrap_or_default();
    assert_eq!(uuid.get_version_num(), 7);
}

/// The `traceparent` a caller sent is text it chose: a record keeps it only when it is a
/// valid header (the trace it joins), and never a value that is not, which could hold
/// anything, a credential among it.
#[test]
fn a_record_keeps_only_a_valid_traceparent() {
    let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    for (sent, kept) in [
        (good.to_owned(), Some(good)),
        (format!(" {good}\t"), Some(good)),
        ("Bearer sk-ant-api03-AUDITtraceparentKEY99".to_owned(), None),
        (good.to_uppercase(), None),
        (format!("{good}-x"), None),
        // A later version may append fields; the record keeps only the four it knows.
        (
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-wn2G2ouuKx7d0Qm3VbXc9TzLp4rS8yH1eJfNaUoIgMA"
                .to_owned(),
            Some("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        ),
        (
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01".to_owned(),
            None,
        ),
    ] {
        let mut recorder = Recorder::new(
            RecorderConfig::default(),
            Box::new(Counter(1)),
            Box::new(NoRedaction),
        );
        recorder.handle(
            epoch(),
            Observation::ModelRequestStart(lone_start(Some(sent.clone()))),
        );
        let record = recorder.poll_record().expect("the llm start");
        assert_eq!(
            record.data.get("traceparent").and_then(Value::as_str),
            kept,
            "{sent:?}"
        );
    }
}

#[test]
fn the_session_id_of_a_model_request_comes_from_the_harness_headers() {
    let claude: [(&str, &[u8]); 2] = [
        ("Content-Type", b"application/json"),
        ("X-Claude-Code-Session-Id", b"3bb17d1a"),
    ];
    assert_eq!(request_session_id(claude), Some("3bb17d1a"));
    let codex: [(&str, &[u8]); 1] = [("session-id", b"01a229cc")];
    assert_eq!(request_session_id(codex), Some("01a229cc"));
    let pi_openai: [(&str, &[u8]); 1] = [("session_id", b"01a229cd")];
    assert_eq!(request_session_id(pi_openai), Some("01a229cd"));
    // The pi extension's own header wins over whatever the client sent.
    let pi: [(&str, &[u8]); 2] = [("session_id", b"client"), ("x-relay-session-id", b"ours")];
    assert_eq!(request_session_id(pi), Some("ours"));
    let none: [(&str, &[u8]); 2] = [("session-id", b""), ("x-relay-session-id", b"\xff")];
    assert_eq!(request_session_id(none), None);
}

#[test]
fn hook_fields_come_from_each_harness_payload_shape() {
    let pi = HookEvent::from_payload(Agent::Pi, fixture(Agent::Pi, "tool_call-bash"));
    assert_eq!(pi.event, "tool_call");
    assert_eq!(pi.tool_name.as_deref(), Some("bash"));
    assert_eq!(pi.tool_use_id.as_deref(), Some("toolu_mock_eac7ca97655e"));
    let cc = HookEvent::from_payload(
        Agent::ClaudeCode,
        fixture(Agent::ClaudeCode, "PreToolUse-mcp_relayprobe_relay_echo"),
    );
    assert_eq!(cc.tool_name.as_deref(), Some("mcp__relayprobe__relay_echo"));
    assert_eq!(cc.tool_use_id.as_deref(), Some("toolu_mock_e56546692f0f"));
    let bare = HookEvent::from_payload(Agent::Codex, json!({}));
    assert_eq!((bare.event.as_str(), bare.session_id), ("unknown", None));
}

#[test]
fn timestamps_have_exactly_six_fractional_digits() {
    assert_eq!(
        record::rfc3339_micros(epoch()),
        "2026-12-01T10:00:00.000000Z"
    );
    assert_eq!(
        record::rfc3339_micros(epoch() + Duration::from_nanos(1_999)),
        "2026-12-01T10:00:00.000001Z"
    );
    assert_eq!(
        record::rfc3339_micros(UNIX_EPOCH - Duration::from_secs(1)),
        "1969-12-31T23:59:59.000000Z"
    );
}

#[test]
fn an_mcp_tool_is_attributed_and_a_failed_tool_says_so() {
    let config = RecorderConfig {
        capture_content: true,
        ..RecorderConfig::default()
    };
    let mut s = Scenario::with(config, "s1");
    let cc = Agent::ClaudeCode;
    let mut failure = fixture(cc, "PostToolUse-Bash");
    failure["session_id"] = json!("s1");
    failure["hook_event_name"] = json!("PostToolUseFailure");
    failure["error"] = json!("exit status 1");
    let pi = Agent::Pi;
    let mut pi_failure = fixture(pi, "tool_result-bash");
    pi_failure["session_id"] = json!("s2");
    pi_failure["event"]["isError"] = json!(true);
    s.hook(cc, "PreToolUse-mcp_relayprobe_relay_echo")
        .hook(cc, "PostToolUse-mcp_relayprobe_relay_echo")
        .hook(cc, "PreToolUse-Bash")
        .hook_payload(cc, "PostToolUseFailure", failure);
    s.session = "s2".to_owned();
    s.hook(pi, "tool_call-bash")
        .hook_payload(pi, "tool_result-bash failing", pi_failure);
    s.check(expect![[r##"
        > claude-code PreToolUse-mcp_relayprobe_relay_echo
          {"atof_version":"0.1","attributes":[],"category":"agent","category_profile":null,"data":{"implicit":true,"session_id":"s1"},"data_schema":{"name":"relay.session","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"s1"},"name":"claude-code","parent_uuid":null,"scope_category":"start","timestamp":"…00.010000Z","uuid":"#1"}
          {"atof_version":"0.1","attributes":["mcp"],"category":"tool","category_profile":{"tool_call_id":"toolu_mock_e56546692f0f"},"data":{"input":{"text":"ping"}},"data_schema":{"name":"relay.tool","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"s1"},"name":"mcp__relayprobe__relay_echo","parent_uuid":"#1","scope_category":"start","timestamp":"…00.010000Z","uuid":"#2"}
        > claude-code PostToolUse-mcp_relayprobe_relay_echo
          {"atof_version":"0.1","attributes":["mcp"],"category":"tool","category_profile":{"tool_call_id":"toolu_mock_e56546692f0f"},"data":{"duration_ms":8,"outcome":"success","output":[{"text":"echo: ping","type":"text"}]},"data_schema":{"name":"relay.tool","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"s1"},"name":"mcp__relayprobe__relay_echo","parent_uuid":"#1","scope_category":"end","timestamp":"…00.020000Z","uuid":"#2"}
        > claude-code PreToolUse-Bash
          {"atof_version":"0.1","attributes":[],"category":"tool","category_profile":{"tool_call_id":"toolu_mock_92cc951468cd"},"data":{"input":{"command":"echo relay-mock-tool","description":"mock tool call"}},"data_schema":{"name":"relay.tool","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"s1"},"name":"Bash","parent_uuid":"#1","scope_category":"start","timestamp":"…00.030000Z","uuid":"#3"}
        > claude-code PostToolUseFailure
          {"atof_version":"0.1","attributes":[],"category":"tool","category_profile":{"tool_call_id":"toolu_mock_92cc951468cd"},"data":{"duration_ms":881,"outcome":"failure","output":"exit status 1"},"data_schema":{"name":"relay.tool","version":"1"},"kind":"scope","metadata":{"harness":"claude-code","session_id":"s1"},"name":"Bash","parent_uuid":"#1","scope_category":"end","timestamp":"…00.040000Z","uuid":"#3"}
        > pi tool_call-bash
          {"atof_version":"0.1","attributes":[],"category":"agent","category_profile":null,"data":{"implicit":true,"session_id":"s2"},"data_schema":{"name":"relay.session","version":"1"},"kind":"scope","metadata":{"harness":"pi","session_id":"s2"},"name":"pi","parent_uuid":null,"scope_category":"start","timestamp":"…00.050000Z","uuid":"#4"}
          {"atof_version":"0.1","attributes":[],"category":"tool","category_profile":{"tool_call_id":"toolu_mock_eac7ca97655e"},"data":{"input":{"command":"echo relay-mock-tool"}},"data_schema":{"name":"relay.tool","version":"1"},"kind":"scope","metadata":{"harness":"pi","session_id":"s2"},"name":"bash","parent_uuid":"#4","scope_category":"start","timestamp":"…00.050000Z","uuid":"#5"}
        > pi tool_result-bash failing
          {"atof_version":"0.1","attributes":[],"category":"tool","category_profile":{"tool_call_id":"toolu_mock_eac7ca97655e"},"data":{"outcome":"failure","output":[{"text":"relay-mock-tool\n","type":"text"}]},"data_schema":{"name":"relay.tool","version":"1"},"kind":"scope","metadata":{"harness":"pi","session_id":"s2"},"name":"bash","parent_uuid":"#4","scope_category":"end","timestamp":"…00.060000Z","uuid":"#5"}
    "##]]);
}

/// A plain function is a redactor too, and the recorder can move to the worker's threads.
#[test]
fn a_function_redacts_and_the_recorder_is_send() {
    fn hide_hi(text: &str) -> Cow<'_, str> {
        if text.contains("hi") {
            Cow::Owned(text.replace("hi", "**"))
        } else {
            Cow::Borrowed(text)
        }
    }
    fn is_send<T: Send>(_: &T) {}
    let config = RecorderConfig {
        capture_content: true,
        ..RecorderConfig::default()
    };
    let mut recorder = Recorder::new(config, Box::new(Counter(0)), Box::new(hide_hi));
    is_send(&recorder);
    assert!(recorder.captures_content());
    let mut payload = fixture(Agent::ClaudeCode, "UserPromptSubmit");
    payload["prompt"] = json!("say hi");
    recorder.handle(
        epoch(),
        Observation::Hook(HookEvent::from_payload(Agent::ClaudeCode, payload)),
    );
    let mut lines = Vec::new();
    while let Some(record) = recorder.poll_record() {
        record.write_json_line(&mut lines);
    }
    let lines = String::from_utf8(lines).unwrap_or_default();
    assert!(lines.contains(r#""prompt":"say **""#), "{lines}");
    assert!(!lines.contains("say hi"), "{lines}");
    // The session, the turn, and the mark named after the event.
    assert_eq!(lines.lines().count(), 3, "{lines}");
}

#[test]
fn a_session_end_carries_its_requests_usage_and_exact_cost() {
    let mut s = Scenario::new("s-cost");
    s.hook(Agent::ClaudeCode, "SessionStart");
    for (id, picos) in [(1, Some(47_610_000_000u128)), (2, Some(3)), (3, None)] {
        s.request(id, "claude-sonnet-4-5", None);
        let usage = Usage {
            uncached_input: 10,
            cache_read: 100,
            cache_write_5m: 20,
            cache_write_1h: 40,
            output: 5,
            reasoning: None,
        };
        let mut facts = UsageFacts::new_totals(&usage, picos.map(crate::Usd::from_picos));
        if picos.is_none() {
            facts.cost_error = Some("no price for model claude-sonnet-4-5".to_owned());
        }
        s.step(
            "end",
            Observation::ModelRequestEnd(ModelRequestEnd {
                request_id: RequestId(id),
                status: 200,
                duration_ms: 1,
                time_to_first_byte_ms: Some(1),
                usage: Some(facts),
                response_model: None,
                truncated: false,
                error: None,
                response_id: None,
                finish_reasons: Vec::new(),
                response: None,
            }),
        );
    }
    // The unpriced request's own end says why it has no cost.
    let unpriced: Vec<&str> = s.out.lines().filter(|l| l.contains("cost_error")).collect();
    assert_eq!(unpriced.len(), 1, "{}", s.out);
    assert!(
        unpriced[0].contains(r#""cost_error":"no price for model claude-sonnet-4-5""#),
        "{}",
        unpriced[0]
    );
    s.hook(Agent::ClaudeCode, "SessionEnd");
    let last = s.out.lines().last().unwrap().trim();
    let end: Value = serde_json::from_str(last).unwrap();
    let usage = &end["data"]["usage"];
    assert_eq!(usage["uncached_input_tokens"], 30);
    assert_eq!(usage["cache_read_tokens"], 300);
    assert_eq!(usage["cache_write_5m_tokens"], 60);
    assert_eq!(usage["cache_write_1h_tokens"], 120);
    assert_eq!(
        usage["input_tokens"], 510,
        "every input token, cached ones included"
    );
    assert_eq!(usage["output_tokens"], 15);
    // 0.04761 + 0.000000000003 dollars, exactly; the unpriced request is counted apart.
    assert_eq!(usage["cost_usd"], "0.047610000003");
    assert_eq!(usage["priced_requests"], 2);
    assert_eq!(usage["unpriced_requests"], 1);
}

#[test]
fn a_hook_after_its_sessions_end_is_a_mark_of_that_session_not_a_new_one() {
    let mut s = Scenario::new("late");
    s.hook(Agent::Pi, "session_start");
    s.hook(Agent::Pi, "session_shutdown");
    // pi forwards events without waiting: agent_end can reach the worker after the end.
    s.hook(Agent::Pi, "agent_end");
    let lines: Vec<Value> = s
        .out
        .lines()
        .filter(|l| l.starts_with("  "))
        .map(|l| serde_json::from_str(l.trim()).unwrap())
        .collect();
    let starts = lines
        .iter()
        .filter(|r| r["category"] == "agent" && r["scope_category"] == "start")
        .count();
    assert_eq!(starts, 1, "{}", s.out);
    let late = lines.last().unwrap();
    assert_eq!(late["kind"], "mark");
    assert_eq!(late["name"], "agent_end");
    assert_eq!(late["parent_uuid"], Value::Null, "its session is closed");
    assert_eq!(late["metadata"]["session_id"], "late");
    // A new SessionStart with the same id opens a new session again.
    s.hook(Agent::Pi, "session_start");
    assert!(
        s.out
            .lines()
            .last()
            .unwrap()
            .contains("\"scope_category\":\"start\"")
    );
}

/// A text field named for a credential (a header in a pi payload, a setting in a tool's
/// input, an environment variable) is redacted whatever its text looks like, arrays and
/// objects under it too, and so is the value of a `{name, value}` header named for one;
/// other fields keep theirs, and a count under a name like one keeps its number.
#[test]
fn fields_named_for_credentials_never_reach_a_record() {
    let raw = json!({
        "headers": {
            "Authorization": "Basic dXNlcjpTRUNSRVRQQVNTV09SRA==",
            "x-api-key": "AZUREKEYSECRET0123",
            "Set-Cookie": ["session=COOKIESECRET123", "other=COOKIE2SECRET"],
            "x-relay-client-token": "ROUTETOKENSECRETROUTETOKENSECRET0123456789a",
            "anthropic-api-key": "ANTHROPICKEYSECRET",
            "content-type": "application/json",
        },
        "env": { "OPENAI_API_KEY": "ENVKEYSECRET", "AWS_SECRET_ACCESS_KEY": "AWSSECRET", "DB_PASSWORD": "DBSECRET", "GITHUB_TOKEN": "GHSECRET", "HOME": "/home/bob" },
        "list": [{ "name": "Proxy-Authorization", "value": "PROXYSECRET" }, { "name": "Accept", "value": "*/*" }],
        "config": [{ "client_secret": { "v": "s3cr3t" }, "PASSWORD": "hunter2", "user": "bob", "api_keys": ["LISTSECRET"] }],
        "nested": { "password": { "value": "NESTEDPW" }, "token": { "access": "NESTEDACCESS", "refresh": "NESTEDREFRESH" }, "cookie": { "sessionid": "NESTEDCOOKIE" }, "Authorization": { "Bearer": "NESTEDBEARER" }, "secrets": { "DB": "NESTEDDB" } },
        "js": { "accessToken": "JSACCESS", "clientSecret": "JSCLIENT", "Credentials": { "AccessKeyId": "AKID", "SecretAccessKey": "STSSECRET", "SessionToken": "STSSESSION" } },
        "more": { "PGPASSWORD": "PGSECRET", "DB_PASS": "DBPASS", "Ocp-Apim-Subscription-Key": "APIMSECRET", "x-functions-key": "FUNCSECRET" },
        "vars": [{ "Key": "STRIPE_SECRET_KEY", "Value": "STRIPESECRET" }],
        "schema": { "properties": { "api_key": { "type": "string", "description": "the key" } } },
        "prompt_cache_key": "cache-1",
        "usage": { "access_token": 12, "input_tokens": 5, "max_tokens": 100 },
    });
    let (kept, cut) = content::json(&content::NoRedaction, &raw, 1 << 20);
    assert!(!cut);
    let text = kept.to_string();
    for secret in [
        "dXNlcjpT",
        "AZUREKEYSECRET",
        "COOKIESECRET",
        "COOKIE2SECRET",
        "ROUTETOKENSECRET",
        "ANTHROPICKEYSECRET",
        "ENVKEYSECRET",
        "AWSSECRET",
        "DBSECRET",
        "GHSECRET",
        "PROXYSECRET",
        "s3cr3t",
        "hunter2",
        "LISTSECRET",
        "NESTEDPW",
        "NESTEDACCESS",
        "NESTEDREFRESH",
        "NESTEDCOOKIE",
        "NESTEDBEARER",
        "NESTEDDB",
        "JSACCESS",
        "JSCLIENT",
        "STSSECRET",
        "STSSESSION",
        "PGSECRET",
        "DBPASS",
        "APIMSECRET",
        "FUNCSECRET",
        "STRIPESECRET",
    ] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }
    assert_eq!(kept["headers"]["x-api-key"], "[REDACTED:credential]");
    assert_eq!(kept["headers"]["content-type"], "application/json");
    assert_eq!(kept["env"]["HOME"], "/home/bob");
    assert_eq!(kept["list"][1]["value"], "*/*");
    assert_eq!(kept["config"][0]["user"], "bob");
    assert_eq!(kept["usage"], raw["usage"]);
    // A JSON Schema under such a name describes a field and keeps its shape.
    assert_eq!(kept["schema"], raw["schema"]);
    assert_eq!(kept["prompt_cache_key"], "cache-1");
    // Redacting a record's content again leaves it as it is.
    assert_eq!(content::json(&content::NoRedaction, &kept, 1 << 20).0, kept);
}

/// Credential names in the spellings real configurations use are hidden; names that only
/// look alike keep their text.
#[test]
fn credential_names_are_read_in_words() {
    for name in [
        "SECRET_KEY",
        "secretKey",
        "private_key",
        "PRIVATE_KEY",
        "access_key",
        "signing_key",
        "AWSSecretKey",
        "IDToken",
        "APIToken",
        "API_KEY_1",
        "api_key2",
        "TOKEN2",
        "token_v2",
        "Password1",
        "authtoken",
        "apitoken",
        "accesstoken",
        "secretkey",
        "passphrase",
        "GPG_PASSPHRASE",
        "X-Auth-Key",
        "AccountKey",
        "SECRET_KEY_BASE",
        "ENCRYPTION_KEY",
        "ConnectionString",
        "x-relay-client-token",
        "Ocp-Apim-Subscription-Key",
    ] {
        let raw = json!({ name: "S3CRETVALUE" });
        let (kept, _) = content::json(&content::NoRedaction, &raw, 1 << 20);
        assert_eq!(kept[name], "[REDACTED:credential]", "{name}");
    }
    for name in [
        "prompt_cache_key",
        "tool_use_id",
        "session_id",
        "max_tokens",
        "bypass",
        "compass",
        "keyboard",
        "author",
        "v2",
        "model",
    ] {
        let raw = json!({ name: "plain" });
        let (kept, _) = content::json(&content::NoRedaction, &raw, 1 << 20);
        assert_eq!(kept[name], "plain", "{name}");
    }
}

/// The redactor's `hash` action leaves `[HASH:<detector>:<hex>]`; a detector named for a
/// credential (`api_key`, `bearer_token`, `private_key`) must not make the hash itself look
/// like a named credential's value: equal values must still correlate in records.
#[test]
fn a_hash_left_by_the_redactor_stays_whole() {
    for left in [
        "echo [HASH:api_key:0123456789ab] done",
        "echo Bearer [HASH:bearer_token:0123456789ab]",
        "key [HASH:private_key:0123456789ab]",
    ] {
        let (kept, _) = content::text(&content::NoRedaction, left, 1 << 20);
        assert_eq!(kept.as_str().unwrap(), left);
    }
    // Text cannot borrow the shape to keep a value.
    let (kept, _) = content::text(
        &content::NoRedaction,
        "[HASH:password:hunter2pass]",
        1 << 20,
    );
    assert!(!kept.as_str().unwrap().contains("hunter2pass"), "{kept}");
}

/// Free text names credentials too (a tool's output of `env`, a command line, a header
/// block): what a name says is one is hidden as a field of that name would be, with or
/// without a redaction component, and text that only looks alike keeps its words.
#[test]
fn credentials_named_in_free_text_are_hidden() {
    let token = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
    let env = format!(
        "HOME=/home/dev\nRELAY_CLIENT_TOKEN={token}\nANTHROPIC_CUSTOM_HEADERS=x-relay-client-token: {token}\nGITHUB_TOKEN=plaintoken999\nDATABASE_URL=postgres://app:dbpassw0rd@db:5432/app\nmax_tokens=4096\n"
    );
    let (kept, _) = content::text(&content::NoRedaction, &env, 1 << 20);
    let kept = kept.as_str().unwrap();
    for secret in [token, "plaintoken999", "dbpassw0rd"] {
        assert!(!kept.contains(secret), "{secret} in {kept}");
    }
    for plain in [
        "HOME=/home/dev",
        "max_tokens=4096",
        "postgres://app:",
        "@db:5432/app",
    ] {
        assert!(kept.contains(plain), "{plain} lost from {kept}");
    }
    for (raw, hidden) in [
        ("PGPASSWORD=S3cretPw!! psql -h db", "S3cretPw!!"),
        ("export API_KEY=\"a b c\" && run", "a b c"),
        ("curl -u user:hunter2pass https://x", "hunter2pass"),
        ("curl --user=user:hunter2pass https://x", "hunter2pass"),
        ("mysql --password=hunter2 -u root", "hunter2"),
        (
            "Authorization: Basic dXNlcjpwYXNz\r\nHost: x",
            "dXNlcjpwYXNz",
        ),
        ("my password: hunter2 now", "hunter2"),
        ("{\"access_token\": \"abc123\", \"n\": 1}", "abc123"),
        ("REDIS_URL=redis://:s3cretpw@redis:6379", "s3cretpw"),
        ("mysql --password s3cretpw -h db", "s3cretpw"),
        ("curl -uuser:hunter2pass https://x", "hunter2pass"),
        (
            "machine api.github.com login me password ghp_netrc123",
            "ghp_netrc123",
        ),
        ("DB_PASSWORD=Pa55;word,more", ";word,more"),
        ("DB_PASSWORD=Pa55&word", "&word"),
        ("PASSWORD=ab\"cd", "cd"),
        (
            "curl -H \"Authorization: Basic dXNlcjpwYXNz\" https://x",
            "dXNlcjpwYXNz",
        ),
        ("> Authorization: Bearer abc.def.ghi", "abc.def.ghi"),
        ("curl -u token:p4ss&w0rd https://x", "w0rd"),
        ("mysql --password \"s3cret pw\" -h db", "pw"),
        ("  login me password ghp_netrc456", "ghp_netrc456"),
        ("{\"password\": \"ab\\\"cdtail\"}", "cdtail"),
        // A quoted value runs to its closing quote, over lines.
        ("DB_PASSWORD=\"first\nsecondline\"\nHOME=/h", "secondline"),
        // Ruby's, PHP's and Perl's `=>`, Go's `:=`, an index into the environment.
        ("config.password => 'hunter2xx'", "hunter2xx"),
        ("['api_key' => \"hunter2xx\",", "hunter2xx"),
        ("{\"password\"=>\"hunter2xx\"}", "hunter2xx"),
        ("ENV[\"API_KEY\"] ||= \"hunter2xx\"", "hunter2xx"),
        ("TOKEN ?= hunter2xx", "hunter2xx"),
        // Heredocs, bounded as quoted values are.
        ("private_key = <<EOF\nhunter2xx\nmore\nEOF\nx = 1", "more"),
        // A name and a value given apart: the arguments of a call, Kubernetes' and
        // Terraform's name and value.
        ("define('DB_PASSWORD', 'hunter2xx');", "hunter2xx"),
        (
            "os.environ.setdefault(\"API_KEY\", \"hunter2xx\")",
            "hunter2xx",
        ),
        (
            "env:\n  - name: DB_PASSWORD\n    value: hunter2xx\n",
            "hunter2xx",
        ),
        (
            "set {\n  name  = \"auth.password\"\n  value = \"hunter2xx\"\n}",
            "hunter2xx",
        ),
        (
            "[{\"name\":\"Authorization\",\"value\":\"hunter2xx\"}]",
            "hunter2xx",
        ),
        ("password := \"hunter2xx\"", "hunter2xx"),
        ("os.environ[\"API_KEY\"] = \"hunter2xx\"", "hunter2xx"),
        // `key` and `sig` in a URL's query.
        (
            "GET https://maps.example/api?key=hunter2xx HTTP/1.1",
            "hunter2xx",
        ),
        (
            "https://acct.blob.example/c/b?sv=2024&sig=hunter2xx%3D",
            "hunter2xx",
        ),
        (
            "{\"u\":\"https://x.example/?a=1\\u0026sig=hunter2xx\"}",
            "hunter2xx",
        ),
        ("<a href=\"/api?a=1&amp;key=hunter2xx\">", "hunter2xx"),
        // XML settings.
        (
            "<server><password>hunter2xx</password></server>",
            "hunter2xx",
        ),
        (
            "<ns:password enc=\"no\">hunter2xx</ns:password>",
            "hunter2xx",
        ),
        (
            "<add key=\"ClearTextPassword\" value=\"hunter2xx\" />",
            "hunter2xx",
        ),
        ("<add key='ApiKey'\n     value='hunter2xx' />", "hunter2xx"),
        ("<password><![CDATA[hunter2xx]]></password >", "hunter2xx"),
        // Commands that take a password after `-p`.
        ("sshpass -p hunter2xx ssh deploy@host", "hunter2xx"),
        ("sshpass -p'hunter2 xx' ssh host", "2 xx"),
        (
            "docker login -u me -p hunter2xx registry.example",
            "hunter2xx",
        ),
        ("mysql -u root -phunter2xx appdb", "hunter2xx"),
        (
            "oc login -u dev -p hunter2xx https://api.example:6443",
            "hunter2xx",
        ),
        ("mongosh -u admin -p hunter2xx --host db", "hunter2xx"),
        ("redis-cli -h cache -a hunter2xx ping", "hunter2xx"),
        ("sshpass -f ~/.pw -v -p hunter2xx ssh host", "hunter2xx"),
        // A YAML block scalar: the lines below its header.
        (
            "stringData:\n  db-password: |\n    hunter2xx\n    more\n\n  user: me\n",
            "more",
        ),
        // Also in a diff, a list item, under a quoted key, and with a comment.
        ("+  password: |\n+    hunter2xx\n   user: me", "hunter2xx"),
        ("- password: |\n    hunter2xx\n- user: me", "hunter2xx"),
        ("\"db-password\": |\n  hunter2xx\nuser: me", "hunter2xx"),
        ("password: | # base64\n  hunter2xx\nuser: me", "hunter2xx"),
    ] {
        let (kept, _) = content::text(&content::NoRedaction, raw, 1 << 20);
        let kept = kept.as_str().unwrap();
        assert!(!kept.contains(hidden), "{hidden} in {kept}");
        assert!(kept.contains("[REDACTED:credential]"), "{kept}");
        // Hiding again changes nothing more.
        let (again, _) = content::text(&content::NoRedaction, kept, 1 << 20);
        assert_eq!(again.as_str().unwrap(), kept);
    }
    for plain in [
        "see https://example.com/a:b and ratio 3:4",
        "Input tokens: 1234, max_tokens: 100, the tokenizer: fast",
        "git push -u origin main",
        "key: value, keyboard: yes",
        "curl http://localhost:8080/v1 and https://example.com:443/x",
        "if token == expected { go() }",
        "ssh -p 2222 host && mkdir -p build/out",
        "mysql -u root -p appdb",
        "<add key=\"Username\" value=\"me\" />",
        "<password>mismatched</passwd>",
        "map.get(key) => value; https://x.example/?q=key",
        // An arrow function and a match arm, an index by a variable.
        "const ids = tokens.map(token => token.id);",
        "Kind::Token => lex(input),",
        "vocab[token] = len(vocab)",
        "<usage><tokens>1234</tokens></usage>",
        "SSHPASS=x sshpass -e ssh -p 2222 deploy@host",
        "After docker login, run it with -p 8080:80 to expose the port.",
        "headers.get(\"authorization\", \"\")",
    ] {
        let (kept, _) = content::text(&content::NoRedaction, plain, 1 << 20);
        assert_eq!(kept.as_str().unwrap(), plain);
    }
    // A value ends where the text around it says: the quote that opened before its name,
    // or the next parameter of a query string.
    for (raw, kept_after) in [
        ("{\"cmd\":\"PASSWORD=abc\",\"x\":1}", "\",\"x\":1}"),
        ("GET /cb?token=abc&user=me HTTP/1.1", "&user=me HTTP/1.1"),
        (
            "{\"photo\":\"https://maps.example/photo?key=abc\",\"name\":\"Cafe\"}",
            "\",\"name\":\"Cafe\"}",
        ),
    ] {
        let (kept, _) = content::text(&content::NoRedaction, raw, 1 << 20);
        let kept = kept.as_str().unwrap();
        assert!(!kept.contains("abc"), "{kept}");
        assert!(kept.ends_with(kept_after), "{kept}");
    }
    // A quote that never closes hides the rest of its line only; the lines after it stay.
    let (kept, _) = content::text(
        &content::NoRedaction,
        "API_KEY=\"unclosed value\nHOME=/home/dev\nPATH=/bin",
        1 << 20,
    );
    assert_eq!(
        kept.as_str().unwrap(),
        "API_KEY=[REDACTED:credential]\nHOME=/home/dev\nPATH=/bin"
    );
    // Source code keeps its words, past the name's own value.
    let (kept, _) = content::text(
        &content::NoRedaction,
        "fn connect(password: &str, host: &str) -> Conn",
        1 << 20,
    );
    assert!(
        kept.as_str().unwrap().contains("host: &str) -> Conn"),
        "{kept}"
    );
    // A block scalar ends at the first line indented no further than its name, and the
    // lines after it stay.
    let (kept, _) = content::text(
        &content::NoRedaction,
        "data:\n  password: >-\n    folded\n    secret\n  user: me\nkind: Secret\n",
        1 << 20,
    );
    assert_eq!(
        kept.as_str().unwrap(),
        "data:\n  password: [REDACTED:credential]\n  user: me\nkind: Secret\n"
    );
    // Linear in the text, however many names it repeats: read again from each one, these
    // would take minutes.
    for unit in [
        "token=",
        "password:",
        "\"auth\":1,",
        "password=\"x\n",
        "password: |\n\n",
        "<password>x</password><a ",
        "mysql -p sshpass -p ",
        "key=\"token\" value=\"",
        "a[\"token\"] = ",
        "- name: password\n  value: ",
        "define('password', '",
        "token = <<EOF\n",
        "+ password: | # c\n",
    ] {
        let long = unit.repeat(400_000 / unit.len());
        let (kept, _) = content::text(&content::NoRedaction, &long, 1 << 20);
        assert!(
            kept.as_str().unwrap().contains("[REDACTED:credential]"),
            "{unit}"
        );
    }
    // Hiding again changes nothing more, whatever the pieces the rules look for are mixed
    // into: a placeholder left by one rule is never read as a name or a value by another.
    let pieces = [
        "password",
        "token",
        "key",
        "sig",
        "tokens",
        ": ",
        "=",
        "=>",
        ":=",
        " ",
        "\n",
        "|",
        "\"",
        "'",
        "[",
        "]",
        "?",
        "&",
        "<password>",
        "</password>",
        "<<EOF",
        "EOF",
        "name: ",
        "value: ",
        "(\"token\", ",
        "sshpass -p ",
        "mysql -p",
        "-p",
        "é",
        "x",
        "#",
        ",",
        "@",
        "[REDACTED:credential]",
        "[REDACTED:api_key]",
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "--admin-password ",
        " --value ",
        "config set ",
        "Key   Value\n---   -----\n",
        "[",
        "]",
        ";Password=",
        "keyName: ",
        "sensitive: true\n",
        ".vault.azure.net/secrets/",
        "curl -b ",
        "-storepass ",
        "APP_KEY=",
        "arn:",
        "\u{a0}",
        "\\",
        "h:5432:d:u:",
        "*:*:*:",
        "||  ",
        "  |  ",
        "  ||",
        "Type",
        "SecureString",
        "\t",
        "arn:aws:secretsmanager:r:1:secret:s\t1\tn\t",
        "\t0123456789abcdef0123456789abcdef",
        "s://u:a/b",
        "Password=a b",
        ";Server=",
        "PASSWORD '",
        "IDENTIFIED BY ",
        "> Cookie: ",
        "auth=(",
        ": &str = ",
        "CREDENTIALS\t",
        "ACCESSKEY\t",
        "kind: Secret\n",
        "data:\n  ",
        "\"data\":{\"",
        "API key: ",
        "\"\"\"",
        "::",
        "null",
        "true,",
        "<T>",
        "(sensitive value)",
        "=",
        "setx DB_PASSWORD ",
        "secrets set ",
        "@tcp(",
        "sqlplus a/",
        "Password={",
        "}",
        " || '",
        " or \"",
        "Authorization: Bot ",
        "USER x ",
        " PASSWORD ",
        " IDENTIFIED BY ",
        "SET PASSWORD FOR a = ",
        "AWS Secret Access Key [None]: ",
        "Config::",
        "db:5432:",
        "\\:",
        "-[ RECORD 1 ]-+-\n",
        " | token\n---+---\n",
    ];
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..20_000 {
        let mut text = String::new();
        for _ in 0..12 {
            // xorshift: the same pieces on every run.
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            text.push_str(pieces[(state % pieces.len() as u64) as usize]);
        }
        let (once, _) = content::text(&content::NoRedaction, &text, 1 << 20);
        let (twice, _) = content::text(&content::NoRedaction, once.as_str().unwrap(), 1 << 20);
        assert_eq!(once, twice, "{text:?}");
    }
    let odd = "\",:// -u password=/x,password://\"";
    let (once, _) = content::text(&content::NoRedaction, odd, 1 << 20);
    let (twice, _) = content::text(&content::NoRedaction, once.as_str().unwrap(), 1 << 20);
    assert_eq!(once, twice);
    // Inside JSON content, in a string of any field.
    let raw = json!({ "tool_response": { "stdout": format!("GITHUB_TOKEN=plaintoken999\nRELAY_CLIENT_TOKEN={token}") } });
    let (kept, _) = content::json(&content::NoRedaction, &raw, 1 << 20);
    let text = kept.to_string();
    assert!(
        !text.contains("plaintoken999") && !text.contains(token),
        "{text}"
    );
}

/// A route token printed on its own (`echo $RELAY_CLIENT_TOKEN`, `cat` of the token file, a
/// tool's output that quotes it) has no name before it; its shape alone keeps it out of a
/// record, in free text and in JSON content, while words, identifiers, digests and ids of
/// other shapes keep theirs.
#[test]
fn a_route_token_on_its_own_is_hidden_by_its_shape() {
    use base64::Engine as _;
    let token = |seed: u8| {
        let digest = ring::digest::digest(&ring::digest::SHA256, &[seed]);
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest.as_ref())
    };
    for seed in 0..=255 {
        let token = token(seed);
        for raw in [
            token.clone(),
            format!("bare:{token}\n"),
            format!("$ cat ~/.local/share/relay/.client-token\n{token}\n$ "),
            format!("the token is \"{token}\", keep it"),
        ] {
            let (kept, _) = content::text(&content::NoRedaction, &raw, 1 << 20);
            let kept = kept.as_str().unwrap();
            assert!(!kept.contains(&token), "{token} in {kept}");
            assert!(kept.contains("[REDACTED:credential]"), "{kept}");
            let (again, _) = content::text(&content::NoRedaction, kept, 1 << 20);
            assert_eq!(again.as_str().unwrap(), kept);
        }
        let raw = json!({ "tool_result": [{ "type": "text", "text": format!("{token}\n") }] });
        let (kept, _) = content::json(&content::NoRedaction, &raw, 1 << 20);
        assert!(!kept.to_string().contains(&token), "{kept}");
    }
    for plain in [
        // Identifiers of 43 characters in one case, a hex SHA-256, a git id, a UUID.
        "THE_LONGEST_CONSTANT_NAME_IN_ALL_THIS_CODE_",
        "averylongsnakecaseidentifierthatgoesonandon",
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "da39a3ee5e6b4b0d3255bfef95601890afd80709",
        "0192f0c4-7a3e-7c1d-9b2a-3f4e5d6c7b8a",
        // 43 characters whose last could not end 32 bytes, and 42 and 44 of a token's.
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAzB",
        "Wn2G2ouuKx7d0Qm3VbXc9TzLp4rS8yH1eJfNaUoIgM",
        "Wn2G2ouuKx7d0Qm3VbXc9TzLp4rS8yH1eJfNaUoIgMwA",
    ] {
        let (kept, _) = content::text(&content::NoRedaction, plain, 1 << 20);
        assert_eq!(kept.as_str().unwrap(), plain);
    }
}

/// The quick look that passes most names over must let every credential word through.
#[test]
fn every_credential_word_gets_past_the_quick_look() {
    for word in content::CREDENTIAL_WORDS
        .iter()
        .chain(&content::CREDENTIAL_ENDINGS)
    {
        let raw = json!({ word.to_ascii_uppercase(): "S3CRETVALUE" });
        let (kept, _) = content::json(&content::NoRedaction, &raw, 1 << 20);
        assert!(!kept.to_string().contains("S3CRETVALUE"), "{word}");
    }
}

/// Identifiers are the caller's text too: a key used as a session id or a model name (or
/// inside a tool name) is hidden as content is, the same way each time, so the records stay
/// tied together and hold no credential.
#[test]
fn credentials_in_identifiers_are_hidden_and_correlation_holds() {
    let mut s = Scenario::new("sk-session-key-123");
    s.hook(Agent::ClaudeCode, "SessionStart");
    let mut pre = fixture(Agent::ClaudeCode, "PreToolUse-Bash");
    pre["session_id"] = json!("sk-session-key-123");
    pre["tool_name"] = json!("mcp__srv__sk-tool-key-456");
    s.hook_payload(Agent::ClaudeCode, "PreToolUse", pre)
        .request(1, "sk-model-key-789", None)
        .response(1, 200)
        .hook(Agent::ClaudeCode, "SessionEnd");
    for secret in ["sk-session-key-123", "sk-tool-key-456", "sk-model-key-789"] {
        assert!(!s.out.contains(secret), "{secret} in {}", s.out);
    }
    // One session from start to end: the request and the tool call sit inside it.
    assert_eq!(
        s.out.matches(r#""category":"agent""#).count(),
        2,
        "{}",
        s.out
    );
}

/// Two session ids longer than the id bound that share their start stay two sessions, and
/// the cut shows: the start, `…` and a digest of the whole, within the bound.
#[test]
fn long_ids_that_share_a_start_stay_apart() {
    let long = |tail: &str| format!("{}{tail}", "S".repeat(300));
    let mut first = Scenario::new(&long("END"));
    first.hook(Agent::ClaudeCode, "SessionStart");
    first.session = long("OTHER");
    first.hook(Agent::ClaudeCode, "SessionStart");
    // Each SessionStart opened an agent scope of its own.
    assert_eq!(
        first.out.matches(r#""category":"agent""#).count(),
        2,
        "{}",
        first.out
    );
    let ids: std::collections::BTreeSet<String> = first
        .out
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line.trim()).ok())
        .filter_map(|record| record["metadata"]["session_id"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(ids.len(), 2, "{ids:?}");
    for id in &ids {
        assert!(id.len() <= 256, "{id}");
        assert!(id.starts_with("SSSS") && id.contains('…'), "{id}");
    }
}

/// The redaction component with its default detectors, `email` among them, as a worker with
/// a `pii_redaction` component runs it before the credentials free text names are hidden.
struct DefaultDetectors(crate::redact::Redactor);

impl DefaultDetectors {
    fn new() -> DefaultDetectors {
        let config = crate::redact::RedactionConfig::default();
        DefaultDetectors(crate::redact::Redactor::new(&config, &[7; 32]))
    }
}

impl Redactor for DefaultDetectors {
    fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        self.0.redact_str(text)
    }
}

/// Asserts that `raw`, as a record holds it, has none of `secrets` and all of `kept`, that
/// something in it was hidden, and that hiding it again changes nothing.
fn assert_hidden(redactor: &dyn Redactor, raw: &str, secrets: &[&str], kept: &[&str]) {
    let (out, _) = content::text(redactor, raw, 1 << 20);
    let out = out.as_str().unwrap();
    for secret in secrets {
        assert!(!out.contains(secret), "{secret} in {out}");
    }
    for kept in kept {
        assert!(out.contains(kept), "{kept} lost from {out}");
    }
    assert!(out.contains("[REDACTED:credential]"), "{out}");
    let (again, _) = content::text(redactor, out, 1 << 20);
    assert_eq!(again.as_str().unwrap(), out);
}

/// Shapes a black-box test found leaking into records, with and without the detectors: a
/// name/value pair printed as indented JSON or with AWS's capitalised keys, a URL's password
/// before a host with a dot (which the `email` detector used to take half of), and JSON
/// with escaped quotes inside a string, a command line or source code. Each record keeps
/// the words around the secret, and text that only looks alike keeps all of its own.
#[test]
fn credentials_in_indented_escaped_json_and_dotted_urls_are_hidden() {
    let detectors = DefaultDetectors::new();
    let redactors: [&dyn Redactor; 2] = [&content::NoRedaction, &detectors];
    // `json.dumps({"env":[{"name":"DB_PASSWORD","value":"Qz7VmW2pLk9Rt"}]}, indent=4)`, as
    // `kubectl get pod -o json` prints a container's environment.
    let indented = "{\n    \"env\": [\n        {\n            \"name\": \"DB_PASSWORD\",\n            \"value\": \"Qz7VmW2pLk9Rt\"\n        }\n    ]\n}";
    for redactor in redactors {
        for (raw, secrets, kept) in [
            (
                indented,
                &["Qz7VmW2pLk9Rt"][..],
                &["\"name\": \"DB_PASSWORD\",\n"][..],
            ),
            (
                &indented.replace('\n', "\r\n"),
                &["Qz7VmW2pLk9Rt"],
                &["\"name\": \"DB_PASSWORD\",\r\n"],
            ),
            (
                "[{\"name\": \"API_TOKEN\",\n  \"value\": \"Qz7VmW2pLk9Rt\"}]",
                &["Qz7VmW2pLk9Rt"],
                &["\"name\": \"API_TOKEN\",\n  \"value\": "],
            ),
            // AWS SSM's shape, compact and indented.
            (
                "{\"Name\": \"DB_PASSWORD\", \"Value\": \"Qz7VmW2pLk9Rt\"}",
                &["Qz7VmW2pLk9Rt"],
                &["{\"Name\": \"DB_PASSWORD\", \"Value\": "],
            ),
            (
                "{\n  \"Name\": \"DB_PASSWORD\",\n  \"Value\": \"Qz7VmW2pLk9Rt\"\n}",
                &["Qz7VmW2pLk9Rt"],
                &["\"Name\": \"DB_PASSWORD\",\n  \"Value\": "],
            ),
            // A URL's password before a host with a dot.
            (
                "psql postgres://app:Secret!Passw0rd@db.example.com/app",
                &["Secret!", "Passw0rd"],
                &["psql postgres://app:", "@db.example.com/app"],
            ),
            (
                "git clone https://user:Tr0ub4dor&3horse@github.com/x",
                &["Tr0ub4dor", "3horse"],
                &["git clone https://user:", "@github.com/x"],
            ),
            (
                "DATABASE_URL=mysql://root:pa$$word@host.example.com:3306/db",
                &["pa$$", "word"],
                &["DATABASE_URL=mysql://root:", "@host.example.com:3306/db"],
            ),
            // JSON with escaped quotes inside a command line, a log line and source code.
            (
                "curl -d \"{\\\"password\\\": \\\"Tr0ub4dorXhorse9\\\"}\" http://x",
                &["Tr0ub4dorXhorse9"],
                &["curl -d \"{\\\"password\\\": ", "}\" http://x"],
            ),
            (
                "{\"msg\":\"{\\\"password\\\":\\\"s3cr3tValue9\\\"}\"}",
                &["s3cr3tValue9"],
                &["{\"msg\":\"{\\\"password\\\":", "}\"}"],
            ),
            (
                "payload = \"{\\\"api_key\\\": \\\"abcDEF123456\\\"}\"",
                &["abcDEF123456"],
                &["payload = \"{\\\"api_key\\\": ", "}\""],
            ),
            // A quote escaped inside the inner string does not close the value.
            (
                "{\"msg\":\"{\\\"password\\\":\\\"ab\\\\\\\"cdTail\\\",\\\"n\\\":1}\"}",
                &["cdTail"],
                &["{\"msg\":\"{\\\"password\\\":", ",\\\"n\\\":1}\"}"],
            ),
            // A value opened by an escaped quote ends where the string around it does...
            (
                "{\"msg\":\"x \\\"password\\\": \\\"s3cr3tCut\",\"n\":1}",
                &["s3cr3tCut"],
                &["{\"msg\":\"x \\\"password\\\": ", "\",\"n\":1}"],
            ),
            // ...and, unclosed, at the end of its line.
            (
                "curl -d \"{\\\"password\\\": \\\"s3cr3tLine\nnext line kept",
                &["s3cr3tLine"],
                &["curl -d \"{\\\"password\\\": ", "\nnext line kept"],
            ),
            // A name/value pair in JSON inside a string (a log line's message).
            (
                "{\"msg\":\"[{\\\"name\\\":\\\"DB_PASSWORD\\\",\\\"value\\\":\\\"Qz7VmW2pLk9Rt\\\"}]\"}",
                &["Qz7VmW2pLk9Rt"],
                &[
                    "{\"msg\":\"[{\\\"name\\\":\\\"DB_PASSWORD\\\",\\\"value\\\":",
                    "}]\"}",
                ],
            ),
            // The same in single quotes, in Python.
            (
                "payload = '{\\'api_key\\': \\'abcDEF123456\\'}'",
                &["abcDEF123456"],
                &["payload = '{\\'api_key\\': ", "}'"],
            ),
        ] {
            assert_hidden(redactor, raw, secrets, kept);
        }
        // Exactly what a record holds.
        for (raw, hidden) in [
            (
                "psql postgres://app:Secret!Passw0rd@db.example.com/app",
                "psql postgres://app:[REDACTED:credential]@db.example.com/app",
            ),
            (
                "curl -d \"{\\\"password\\\": \\\"Tr0ub4dorXhorse9\\\"}\" http://x",
                "curl -d \"{\\\"password\\\": [REDACTED:credential]}\" http://x",
            ),
            (
                "{\"msg\":\"{\\\"password\\\":\\\"s3cr3tValue9\\\"}\"}",
                "{\"msg\":\"{\\\"password\\\":[REDACTED:credential]}\"}",
            ),
        ] {
            let (out, _) = content::text(redactor, raw, 1 << 20);
            assert_eq!(out.as_str().unwrap(), hidden);
        }
        // Text that only looks alike keeps its words.
        for plain in [
            "Give each variable a name and a value, then press Save.",
            "The name, value and type of each field are shown.",
            "Name: Region, Value: eu-west-1",
            "{\n    \"Name\": \"Region\",\n    \"Value\": \"eu-west-1\"\n}",
            "{\n  \"name\": \"LOG_LEVEL\",\n  \"value\": \"debug\"\n}",
            "{\\\"tokens\\\": 1234, \\\"max_tokens\\\": 100}",
            "{\\\"name\\\": \\\"token\\\"}",
            "{\"msg\":\"{\\\"name\\\":\\\"LOG_LEVEL\\\",\\\"value\\\":\\\"debug\\\"}\"}",
            "see https://docs.example.com/a:b@c and ratio 3:4",
        ] {
            let (out, _) = content::text(redactor, plain, 1 << 20);
            assert_eq!(out.as_str().unwrap(), plain);
        }
    }
    // An e-mail address outside a URL's password is still the `email` detector's.
    for (raw, redacted) in [
        (
            "mail alice@example.com about it",
            "mail [REDACTED:email] about it",
        ),
        (
            "git clone ssh://git@github.com/org/repo",
            "git clone ssh://[REDACTED:email]/org/repo",
        ),
        (
            "https://alice@example.com/dashboard",
            "https://[REDACTED:email]/dashboard",
        ),
    ] {
        let (out, _) = content::text(&detectors, raw, 1 << 20);
        assert_eq!(out.as_str().unwrap(), redacted);
        let (out, _) = content::text(&content::NoRedaction, raw, 1 << 20);
        assert_eq!(out.as_str().unwrap(), raw);
    }
    // Linear in the text, however many times it repeats a shape: read again from each one,
    // these would take minutes.
    for unit in [
        "{\n  \"Name\": \"password\",\n  \"Value\": ",
        "{\\\"password\\\": \\\"",
        "{\\\"password\\\": \\\"\\\\",
        "x://u:p@a.b ",
        "{\\\"name\\\":\\\"password\\\",\\\"value\\\":\\\"",
    ] {
        let long = unit.repeat(400_000 / unit.len());
        let (kept, _) = content::text(&detectors, &long, 1 << 20);
        assert!(
            kept.as_str().unwrap().contains("[REDACTED:credential]"),
            "{unit}"
        );
    }
}

/// More shapes a black-box test found leaking: a parameter as `aws ssm get-parameter` prints
/// it (a `Type` between its name and its value, a path for a name), a setting whose value
/// comes before its name, JSON escaped twice (a log line inside a log line), a URL's
/// password holding an unescaped `@`, and AWS Secrets Manager's `SecretString`.
#[test]
fn credentials_in_parameters_reordered_settings_and_deeper_escapes_are_hidden() {
    let detectors = DefaultDetectors::new();
    let redactors: [&dyn Redactor; 2] = [&content::NoRedaction, &detectors];
    let ssm = |name: &str, kind: &str, value: &str| {
        format!(
            "{{\n    \"Parameter\": {{\n        \"Name\": \"{name}\",\n        \"Type\": \"{kind}\",\n        \"Value\": \"{value}\",\n        \"Version\": 3,\n        \"LastModifiedDate\": \"2026-11-02T10:14:55.123000+00:00\",\n        \"ARN\": \"arn:aws:ssm:eu-west-1:123456789012:parameter{name}\",\n        \"DataType\": \"text\"\n    }}\n}}"
        )
    };
    for redactor in redactors {
        for (raw, secrets, kept) in [
            (
                ssm("/prod/db/password", "SecureString", "Qz7VmW2pLk9Rt"),
                &["Qz7VmW2pLk9Rt"][..],
                &["\"Type\": \"SecureString\",\n        \"Value\": ", "\"Version\": 3"][..],
            ),
            // Kept encrypted, the parameter is a secret whatever its name...
            (
                ssm("/prod/app/config", "SecureString", "Qz7VmW2pLk9Rt"),
                &["Qz7VmW2pLk9Rt"],
                &["\"Name\": \"/prod/app/config\""],
            ),
            // ...and a plain one is when its name's last segment names one.
            (
                ssm("/prod/app/api-key", "String", "Qz7VmW2pLk9Rt"),
                &["Qz7VmW2pLk9Rt"],
                &["\"Name\": \"/prod/app/api-key\""],
            ),
            // `az webapp config appsettings list`.
            (
                "[\n  {\n    \"name\": \"DB_PASSWORD\",\n    \"slotSetting\": false,\n    \"value\": \"Qz7VmW2pLk9Rt\"\n  }\n]".to_owned(),
                &["Qz7VmW2pLk9Rt"],
                &["\"slotSetting\": false,\n    \"value\": "],
            ),
            // The value before its name, compact, in YAML and escaped.
            (
                "{\"value\": \"Qz7VmW2pLk9Rt\", \"name\": \"DB_PASSWORD\"}".to_owned(),
                &["Qz7VmW2pLk9Rt"],
                &["{\"value\": ", ", \"name\": \"DB_PASSWORD\"}"],
            ),
            (
                "env:\n- value: Qz7VmW2pLk9Rt\n  name: API_TOKEN\n".to_owned(),
                &["Qz7VmW2pLk9Rt"],
                &["env:\n- value: ", "\n  name: API_TOKEN\n"],
            ),
            (
                "{\"msg\":\"{\\\"value\\\":\\\"Qz7VmW2pLk9Rt\\\",\\\"name\\\":\\\"DB_PASSWORD\\\"}\"}"
                    .to_owned(),
                &["Qz7VmW2pLk9Rt"],
                &["{\"msg\":\"{\\\"value\\\":", ",\\\"name\\\":\\\"DB_PASSWORD\\\"}\"}"],
            ),
            // JSON escaped twice: a request body inside a message inside a log line.
            (
                "{\"msg\":\"{\\\"body\\\":\\\"{\\\\\\\"password\\\\\\\":\\\\\\\"s3cr3tDeep9\\\\\\\"}\\\"}\"}"
                    .to_owned(),
                &["s3cr3tDeep9"],
                &[
                    "{\"msg\":\"{\\\"body\\\":\\\"{\\\\\\\"password\\\\\\\":",
                    "}\\\"}\"}",
                ],
            ),
            // A quote escaped once more inside it is part of the value.
            (
                "{\"msg\":\"{\\\\\\\"password\\\\\\\":\\\\\\\"ab\\\\\\\\\\\\\\\"cdTail\\\\\\\",\\\\\\\"n\\\\\\\":1}\"}"
                    .to_owned(),
                &["cdTail"],
                &[",\\\\\\\"n\\\\\\\":1}\"}"],
            ),
            // A URL's password with its own `@`.
            (
                "psql postgres://app:p@ssW0rdX@db.example.com/app".to_owned(),
                &["ssW0rdX", "p@ss"],
                &["psql postgres://app:", "@db.example.com/app"],
            ),
            (
                "redis-cli -u redis://:s3cr@tKey@cache.internal:6379/0".to_owned(),
                &["s3cr", "tKey"],
                &["redis://:", "@cache.internal:6379/0"],
            ),
            // `aws secretsmanager get-secret-value`.
            (
                "{\n    \"Name\": \"prod/db\",\n    \"SecretString\": \"Qz7VmW2pLk9Rt\",\n    \"VersionStages\": [\"AWSCURRENT\"]\n}".to_owned(),
                &["Qz7VmW2pLk9Rt"],
                &["\"Name\": \"prod/db\"", "\"VersionStages\""],
            ),
        ] {
            assert_hidden(redactor, &raw, secrets, kept);
        }
        // Exactly what a record holds.
        for (raw, hidden) in [
            (
                "{\"value\": \"Qz7VmW2pLk9Rt\", \"name\": \"DB_PASSWORD\"}",
                "{\"value\": [REDACTED:credential], \"name\": \"DB_PASSWORD\"}",
            ),
            (
                "psql postgres://app:p@ssW0rdX@db.example.com/app",
                "psql postgres://app:[REDACTED:credential]@db.example.com/app",
            ),
        ] {
            let (out, _) = content::text(redactor, raw, 1 << 20);
            assert_eq!(out.as_str().unwrap(), hidden);
        }
        // Each setting keeps its own value: one that names no credential keeps it, before or
        // after one that does, and in either order of its fields.
        for (raw, kept, secret) in [
            (
                "- name: LOG_LEVEL\n  value: debug\n- name: DB_PASSWORD\n  value: Qz7VmW2pLk9Rt\n",
                "value: debug\n",
                "Qz7VmW2pLk9Rt",
            ),
            (
                "- value: debug\n  name: LOG_LEVEL\n- value: Qz7VmW2pLk9Rt\n  name: DB_PASSWORD\n",
                "- value: debug\n",
                "Qz7VmW2pLk9Rt",
            ),
            (
                "- name: DB_PASSWORD\n  value: Qz7VmW2pLk9Rt\n- value: debug\n  name: LOG_LEVEL\n",
                "- value: debug\n",
                "Qz7VmW2pLk9Rt",
            ),
        ] {
            let (out, _) = content::text(redactor, raw, 1 << 20);
            let out = out.as_str().unwrap();
            assert!(out.contains(kept), "{kept} lost from {out}");
            assert!(!out.contains(secret), "{secret} in {out}");
        }
        // Text that only looks alike keeps its words.
        for plain in [
            ssm("/prod/app/region", "String", "eu-west-1"),
            "[{\"value\": \"eu-west-1\", \"name\": \"Region\"}]".to_owned(),
            "{\"name\": \"DB_PASSWORD\", \"a\": 1, \"b\": 2, \"c\": 3, \"value\": \"x\"}"
                .to_owned(),
            "{\"name\": \"password\", \"valueFrom\": \"arn:aws:ssm:eu-west-1:1:parameter/p\"}"
                .to_owned(),
            "{\\\\\\\"tokens\\\\\\\": 1234, \\\\\\\"max_tokens\\\\\\\": 100}".to_owned(),
            "https://example.com/a@b and mailto:x".to_owned(),
        ] {
            let (out, _) = content::text(redactor, &plain, 1 << 20);
            assert_eq!(out.as_str().unwrap(), plain);
        }
    }
    // Linear in the text, however many times it repeats a shape: read again from each one,
    // these would take minutes.
    for (unit, hides) in [
        (
            "\"Name\": \"password\", \"Type\": \"SecureString\", ",
            false,
        ),
        ("value: x\n  type: y\n", false),
        ("- name: password\n  value: ", true),
        ("{\\\\\\\"password\\\\\\\": \\\\\\\"", true),
        ("x://u:p@a@b ", true),
    ] {
        let long = unit.repeat(200_000 / unit.len());
        let (out, _) = content::text(&detectors, &long, 1 << 20);
        let out = out.as_str().unwrap();
        assert_eq!(out.contains("[REDACTED:credential]"), hides, "{unit}");
    }
}

/// What a second sweep over the shapes real tools print found leaking: credentials given
/// as a flag's value, set through a `config set` command, printed in a table of names and
/// values, under a Kubernetes secret's or a kubeconfig's keys, in Azure's and Terraform's
/// JSON, in YAML with comments or another field between, in a connection string, and in a
/// URL in JSON with its slashes escaped. Also what it found destroyed (a URL's port through
/// an e-mail address later in the JSON, an ARN's name) and a second pass that changed a
/// hidden value again.
#[test]
fn credentials_in_flags_tables_and_tool_outputs_are_hidden() {
    let detectors = DefaultDetectors::new();
    let redactors: [&dyn Redactor; 2] = [&content::NoRedaction, &detectors];
    for redactor in redactors {
        for (raw, secrets, kept) in [
            // Flags named for a credential, and a secret's `--value`.
            (
                "az sql server create -g rg -n srv --admin-user sqladmin --admin-password 'Hunter2AzSql!'",
                &["Hunter2AzSql"][..],
                &["--admin-user sqladmin --admin-password "][..],
            ),
            (
                "aws rds create-db-instance --master-username admin --master-user-password Hunter2Rds --engine postgres",
                &["Hunter2Rds"],
                &[" --engine postgres"],
            ),
            (
                "aws secretsmanager put-secret-value --secret-id prod/stripe --secret-string Hunter2SmPlain",
                &["Hunter2SmPlain"],
                &["aws secretsmanager put-secret-value --secret-id "],
            ),
            (
                "aws ssm put-parameter --name /prod/app/config --value Hunter2Ssm --type SecureString",
                &["Hunter2Ssm"],
                &["--type SecureString"],
            ),
            (
                "aws ssm put-parameter --name /prod/db/password --value Hunter2SsmName --overwrite",
                &["Hunter2SsmName"],
                &["--overwrite"],
            ),
            (
                "az keyvault secret set --vault-name kv --name stripe --value 'rk_Hunter2Kv2'",
                &["Hunter2Kv2"],
                &["--vault-name kv --name stripe"],
            ),
            (
                "az storage blob upload --account-name acct --account-key Zm9vSHVudGVyMg== -f x",
                &["Zm9vSHVudGVyMg=="],
                &["--account-name acct", " -f x"],
            ),
            (
                "gh secret set API_TOKEN --body \"Hunter2Gh\" && gh secret set B -b Hunter2GhB",
                &["Hunter2Gh\"", "Hunter2GhB"],
                &["gh secret set API_TOKEN --body "],
            ),
            (
                "keytool -genkey -alias x -keystore ks.jks -storepass Hunter2Ks -keypass Hunter2Kp",
                &["Hunter2Ks", "Hunter2Kp"],
                &["-keystore ks.jks"],
            ),
            // `config set` commands.
            (
                "aws configure set aws_secret_access_key wJalrXUtnFEMI/K7MDENG/Hunter2Cfg",
                &["Hunter2Cfg"],
                &["aws configure set aws_secret_access_key "],
            ),
            (
                "yarn config set npmAuthToken Hunter2Yarn; git config --global github.token ghx_Hunter2GitCfg",
                &["Hunter2Yarn", "Hunter2GitCfg"],
                &["git config --global github.token "],
            ),
            // `vault kv get` and `vault token create`.
            (
                "Key            Value\n---            -----\napi_key        AbCdEf123456SecretApiKey\ndb_password    Hunter2DbPass\nttl            768h",
                &["AbCdEf123456SecretApiKey", "Hunter2DbPass"],
                &["Key            Value\n", "ttl            768h"],
            ),
            (
                "Key                  Value\n---                  -----\ntoken                hvs_Hunter2VaultTok\ntoken_accessor       8PZtGvH4DxJ4Sg9vQpLxJqXn",
                &["Hunter2VaultTok"],
                &["token_accessor       8PZtGvH4DxJ4Sg9vQpLxJqXn"],
            ),
            // A Kubernetes secret's, a kubeconfig's and Azure's keys.
            (
                "data:\n  tls.crt: Y2VydGlmaWNhdGU=\n  tls.key: S2V5SHVudGVyMg==\n",
                &["S2V5SHVudGVyMg=="],
                &["tls.crt: Y2VydGlmaWNhdGU=\n"],
            ),
            (
                "users:\n- name: admin\n  user:\n    client-key-data: LS0tS2V5SHVudGVyMg==\n",
                &["LS0tS2V5SHVudGVyMg=="],
                &["- name: admin\n"],
            ),
            (
                "  .dockerconfigjson: eyJhdXRoc0h1bnRlcjIifQ==\n  ssh-privatekey: U3NoSHVudGVyMg==\n",
                &["eyJhdXRoc0h1bnRlcjIifQ==", "U3NoSHVudGVyMg=="],
                &[],
            ),
            (
                "[\n  {\n    \"creationTime\": \"2026-01-01T00:00:00Z\",\n    \"keyName\": \"key1\",\n    \"permissions\": \"FULL\",\n    \"value\": \"Zm9vYmFySHVudGVyMg==\"\n  }\n]",
                &["Zm9vYmFySHVudGVyMg=="],
                &["\"keyName\": \"key1\""],
            ),
            (
                "{\"primaryMasterKey\": \"C2y6yHunter2Cosmos==\", \"secureValue\": \"rk_Hunter2Aci\"}",
                &["Hunter2Cosmos", "Hunter2Aci"],
                &[],
            ),
            // `terraform output -json`: the secret hidden, the object's brackets kept.
            (
                "{\n  \"db_password\": {\n    \"sensitive\": true,\n    \"type\": \"string\",\n    \"value\": \"Hunter2DbPass!\"\n  },\n  \"region\": {\n    \"sensitive\": false,\n    \"type\": \"string\",\n    \"value\": \"eu-west-1\"\n  }\n}",
                &["Hunter2DbPass"],
                &["\"db_password\": {\n", "\"value\": \"eu-west-1\""],
            ),
            (
                "\"api_keys\": [\"k1Hunter2\", \"k2Hunter2\"], \"n\": 1",
                &["Hunter2"],
                &["\"api_keys\": [", "], \"n\": 1"],
            ),
            // YAML with another field, a comment or a blank line between, or a folded value.
            (
                "- name: DB_PASSWORD\n  description: Database password\n  value: Hunter2Desc\n",
                &["Hunter2Desc"],
                &["description: Database password\n"],
            ),
            (
                "- name: API_TOKEN # used by the worker\n  value: Hunter2TrailComment\n",
                &["Hunter2TrailComment"],
                &["# used by the worker\n"],
            ),
            (
                "- name: GITHUB_TOKEN\n  # from the secret\n\n  value: ghx_Hunter2Comment\n",
                &["Hunter2Comment"],
                &["# from the secret\n"],
            ),
            (
                "  - name: DB_PASSWORD\n    value: >-\n      Hunter2Folded\n  - name: LOG_LEVEL\n    value: debug\n",
                &["Hunter2Folded"],
                &["value: debug\n"],
            ),
            // A connection string keeps what follows its password, and the quote closing it.
            (
                "\"DefaultConnection\": \"Server=db;Database=app;Password=Hunter2Mssql;TrustServerCertificate=True\"",
                &["Hunter2Mssql"],
                &[";TrustServerCertificate=True\""],
            ),
            // A URL in JSON with its slashes escaped (PHP's `json_encode`).
            (
                "{\"url\":\"mysql:\\/\\/root:Hunter2Lara@127.0.0.1\\/app\"}",
                &["Hunter2Lara"],
                &["{\"url\":\"mysql:\\/\\/root:", "\\/app\"}"],
            ),
            (
                "Server=db;User Id=app;Password=My Pa55word!;Encrypt=True",
                &["My Pa55word!", "Pa55word"],
                &["User Id=app;Password=", ";Encrypt=True"],
            ),
            // `az keyvault secret show`, whose secret's name names no credential.
            (
                "{\n  \"id\": \"https://kv1.vault.azure.net/secrets/stripe/0123abcd\",\n  \"managed\": null,\n  \"name\": \"stripe\",\n  \"tags\": {},\n  \"value\": \"rk_Hunter2Kv\"\n}",
                &["Hunter2Kv"],
                &["\"name\": \"stripe\""],
            ),
            // Cookies given to curl.
            (
                "curl -b \"sessionid=Hunter2Sess; csrftoken=Hunter2Csrf\" https://x && curl --cookie sid=Hunter2Sid https://y",
                &["Hunter2Sess", "Hunter2Csrf", "Hunter2Sid"],
                &[" https://x && curl --cookie ", " https://y"],
            ),
            // A name after a blank of more than one byte.
            (
                "a\u{a0}b:password=Hunter2Nbsp x\u{3000}arn:aws:secretsmanager:us-east-1:1:secret:password:Hunter2Arn",
                &["Hunter2Nbsp"],
                &["a\u{a0}b:password="],
            ),
            // A presigned URL's signature and an environment's `_KEY`.
            (
                "https://b.s3.amazonaws.com/o?X-Amz-Credential=AKID&X-Amz-Signature=abcdef0123456789hunter&x=1",
                &["abcdef0123456789hunter"],
                &["&x=1"],
            ),
            (
                "APP_KEY=base64:SHVudGVyMkxhcmF2ZWw=\nRAILS_MASTER_KEY=Hunter2Rails\nSTRIPE_PUBLISHABLE_KEY=pk_live_visible",
                &["SHVudGVyMkxhcmF2ZWw=", "Hunter2Rails"],
                &["STRIPE_PUBLISHABLE_KEY=pk_live_visible"],
            ),
        ] {
            assert_hidden(redactor, raw, secrets, kept);
        }
        // Text that only looks alike keeps its words.
        for plain in [
            "{\"homepage\":\"https://example.com:8443\",\"maintainers\":[{\"email\":\"bob\"}]}",
            "\"Resource\": \"arn:aws:secretsmanager:us-east-1:123456789012:secret:prod/db-AbCdEf\",",
            "git config --global user.email me && npm config set registry https://r.example",
            "aws ssm put-parameter --name /prod/app/region --value eu-west-1 --type String",
            "NAME          TYPE     DATA   AGE\ndb-password   Opaque   1      3d",
            "  --token-file PATH     where the token is read from",
            "Options:\n  token        TOKEN\n  api_key      KEY",
            "CACHE_KEY_PREFIX=app SSH_PUBLIC_KEY=ssh-ed25519",
            "{\"db_password\": {\"sensitive\": true}}",
            // Help texts, prose, tables and source code.
            "  -W, --password           force password prompt\n  -w, --no-password        never prompt for password",
            "      --with-token           Read token from standard input",
            "  -k, --ask-pass        ask for connection password",
            "Options:\n  --token TOKEN   API token to use",
            "| --token | string | API token |",
            "ansible-playbook --ask-pass site.yml",
            "aws secretsmanager get-secret-value --secret-id prod/db/app --region us-east-1",
            "const STORAGE_KEY = 'todos-vuejs';\nconst ENTER_KEY = 13;\nPRIMARY_KEY = \"id\"",
            "GPG_KEY=7169605F62C751356D054A26A821E680E5FA6305",
            "The config auth settings are read at startup.",
            "kubectl config set-credentials cluster-admin --username=admin",
        ] {
            let (out, _) = content::text(redactor, plain, 1 << 20);
            assert_eq!(out.as_str().unwrap(), plain);
        }
        // A list that does not close is not closed by what a later step hides.
        let open = "apikey:[\n\\Passwordapi_keyssk-abcdefghijklmnopapi_keys";
        let (once, _) = content::text(redactor, open, 1 << 20);
        let (twice, _) = content::text(redactor, once.as_str().unwrap(), 1 << 20);
        assert_eq!(once, twice);
        // A hidden value is not read again as a user and a password.
        let hidden = "curl -u bob[REDACTED:credential] https://x";
        let (out, _) = content::text(redactor, hidden, 1 << 20);
        assert_eq!(out.as_str().unwrap(), hidden);
    }
    // Linear in the text, however many times it repeats a shape: a line of keys once took
    // seconds at 20 KB and minutes at 80.
    for (unit, hides) in [
        ("name=a&value=b&", false),
        ("value:", false),
        ("name=.", false),
        ("- value: a # b\n\n", false),
        (" --value x --type SecureString", true),
        ("a:password:b", true),
        ("name: password, value: | ", true),
        ("a:token:{", false),
        ("arn:aws:x:password:", true),
        ("--name x --value a ", false),
        ("\"keyName\": \"k\", \"value\": \"x\", ", true),
        ("db:5432:b:c:d\n", true),
        ("||  Type  |  SecureString  ||\n||  Value  |  x  ||\n", true),
        ("||  Value  |  x  ||\n", false),
        ("\tn\tSecureString\tx\n", true),
        ("s://u:a/b?c#d", false),
        ("Password=a b;", true),
        ("a key:", false),
        ("\"data\":{\"kind\": \"Secret\" ", false),
        ("CREATE USER x PASSWORD '", true),
        ("token: &str = ", true),
        ("password = \"\"\"", true),
        ("setx API_TOKEN ", true),
        ("a:b@tcp(", true),
        ("Password={a", false),
        ("token = x || ", true),
        (" a | api_token\n---+---\n", true),
        ("-[ RECORD 1 ]-+-\napi_token | x\n", true),
        (
            "\"password\": x                                      y",
            true,
        ),
        ("\"Cookie\": a=1; b=2; ", true),
        ("alter user x identified by ", true),
        ("\"data\":{\"k\":\"YWJjZGVm\",", false),
    ] {
        let long = unit.repeat(200_000 / unit.len());
        let (out, _) = content::text(&detectors, &long, 1 << 20);
        let out = out.as_str().unwrap();
        assert_eq!(out.contains("[REDACTED:credential]"), hides, "{unit}");
    }
}

/// Records printed a line at a time, where no name stands right before the value: a
/// PostgreSQL password file, the AWS CLI's `text` and `table` outputs of a parameter and a
/// secret; a URL whose password holds `/`, `?` or `#`, or whose slashes JSON escaped (the
/// `email` detector took the end of its password when nothing else had read it first); and
/// a connection string whose first setting is a password with a blank. What only looks
/// alike keeps its words.
#[test]
fn credentials_in_printed_records_and_unescaped_urls_are_hidden() {
    let detectors = DefaultDetectors::new();
    let redactors: [&dyn Redactor; 2] = [&content::NoRedaction, &detectors];
    let table = "|+----------+---------------------------+|\n\
                 ||  ARN     |  arn:aws:ssm:us-east-1:1:parameter/prod/app/conf  ||\n\
                 ||  Name    |  /prod/app/conf           ||\n\
                 ||  Type    |  SecureString             ||\n\
                 ||  Value   |  Hunter2Table             ||\n\
                 ||  Version |  3                        ||\n\
                 |+----------+---------------------------+|\n\
                 ||  Name    |  /prod/db/password        ||\n\
                 ||  Type    |  String                   ||\n\
                 ||  Value   |  Hunter2TableName         ||\n\
                 |+----------+---------------------------+|\n\
                 ||  Name    |  /prod/app/region         ||\n\
                 ||  Type    |  String                   ||\n\
                 ||  Value   |  eu-west-1                ||";
    for redactor in redactors {
        for (raw, secrets, kept) in [
            (
                "db.example.com:5432:app:appuser:Hunter2Pg\n*:*:*:replicator:Hunter2 Pg\\:x\r\n",
                &["Hunter2Pg", "Hunter2 Pg"][..],
                &["db.example.com:5432:app:appuser:", "*:*:*:replicator:"][..],
            ),
            (
                "PARAMETER\tarn:aws:ssm:us-east-1:1:parameter/prod/app/conf\ttext\t1700000000.0\t/prod/app/conf\tSecureString\tHunter2Text\t1\n\
                 PARAMETERS\tarn:aws:ssm:us-east-1:1:parameter/app/api-key\ttext\t1700000000.0\t/app/api-key\tString\tHunter2TextName\t1\n\
                 PARAMETERS\tarn:aws:ssm:us-east-1:1:parameter/app/region\ttext\t1700000000.0\t/app/region\tString\teu-west-1\t1",
                &["Hunter2Text"],
                &["/prod/app/conf\tSecureString\t", "\t1\n", "\teu-west-1\t1"],
            ),
            (
                "arn:aws:secretsmanager:us-east-1:1:secret:prod/db-AbCdEf\t1700000000.0\tprod/db\tHunter2 Sm\ta1b2c3d4-5678-90ab-cdef-000000000000\nVERSIONSTAGES\tAWSCURRENT",
                &["Hunter2 Sm"],
                &[
                    "\tprod/db\t",
                    "\ta1b2c3d4-5678-90ab-cdef-000000000000\nVERSIONSTAGES",
                ],
            ),
            (
                table,
                &["Hunter2Table"],
                &["||  Version |  3 ", "  eu-west-1  ", "/prod/db/password"],
            ),
            (
                "||  SecretString  |  Hunter2 TableSm  ||",
                &["Hunter2 TableSm"],
                &["||  SecretString  |  "],
            ),
            (
                "postgres://app:Hunter2/Url?x#y@db.example.com:5432/app redis://:Hunter2/Redis@cache:6379",
                &["Hunter2/Url", "x#y", "Hunter2/Redis"],
                &["@db.example.com:5432/app", "@cache:6379"],
            ),
            (
                "{\"url\":\"mysql:\\/\\/root:Hun!ter2Esc@db.example.com:3306\\/app\"}",
                &["Hun!", "ter2Esc"],
                &["mysql:\\/\\/root:", "@db.example.com:3306\\/app"],
            ),
            (
                "\"Password=Hunter2 Conn;Server=db;Database=app\"",
                &["Hunter2 Conn", "Conn;"],
                &[";Server=db;Database=app\""],
            ),
        ] {
            assert_hidden(redactor, raw, secrets, kept);
        }
        for plain in [
            "https://example.com:8443/users/@bob and https://host:8080/a/b@c",
            "src/main.rs:12:5: warning: unused variable\nREADME.md:10:https://example.com:8080",
            "| Option | Description |\n| token | The access token used for authentication |",
            "PARAMETERS\tarn:aws:ssm:us-east-1:1:parameter/app/region\ttext\t1700000000.0\t/app/region\tString\teu-west-1\t1",
            "PASSWORD_FILE=/run/pw make build; CI=1 make",
        ] {
            let (out, _) = content::text(redactor, plain, 1 << 20);
            assert_eq!(out.as_str().unwrap(), plain);
        }
        // A shell's next assignment does not make a command's words a connection string's.
        let (out, _) = content::text(
            redactor,
            "PASSWORD=Hunter2Sh make build; CI=1 make",
            1 << 20,
        );
        assert_eq!(
            out.as_str().unwrap(),
            "PASSWORD=[REDACTED:credential] make build; CI=1 make"
        );
    }
}

/// What a third sweep over the content agents see found: credentials SQL sets, a cookie
/// header after curl's `> `, a tuple's password, a typed constant's value, the AWS CLI's
/// `CREDENTIALS` and `ACCESSKEY` lines, a Kubernetes secret's data under keys of any name,
/// two-word names (`API key:`), Stripe's webhook secret, a PGP private key, Python's triple
/// quotes; and ordinary text it destroyed: Rust paths, JSON's literals (and the comma after
/// them), placeholders, a prompt's closing quote, a list of objects, Terraform's
/// `(sensitive value)`, timestamps and zeros read as card numbers, `go.sum` hashes.
#[test]
fn credentials_a_third_sweep_found_are_hidden_and_code_keeps_its_words() {
    let detectors = DefaultDetectors::new();
    let redactors: [&dyn Redactor; 2] = [&content::NoRedaction, &detectors];
    for redactor in redactors {
        for (raw, secrets, kept) in [
            (
                "CREATE USER app WITH PASSWORD 'Hunter2Sql1';\nCREATE USER 'app'@'%' IDENTIFIED BY 'Hunter2Sql2';\n\
                 ALTER USER 'a'@'%' IDENTIFIED WITH mysql_native_password BY 'Hunter2Sql3';\nCREATE USER scott IDENTIFIED BY Hunter2Sql4;",
                &["Hunter2Sql"][..],
                &[
                    "CREATE USER app WITH PASSWORD ",
                    "IDENTIFIED WITH mysql_native_password BY ",
                    ";\nCREATE USER scott",
                ][..],
            ),
            (
                "> Cookie: theme=dark; session=Hunter2Sess\ncurl -H \"Cookie: theme=dark; sid=Hunter2Sid\" https://x",
                &["Hunter2Sess", "Hunter2Sid"],
                &["> Cookie: ", "\" https://x"],
            ),
            (
                "requests.get(url, auth=(\"bob\", \"Hunter2Tuple\"))",
                &["Hunter2Tuple"],
                &["requests.get(url, auth=(", "))"],
            ),
            (
                "const API_TOKEN: &str = \"Hunter2Const\";\nconst secret: string = 'Hunter2Ts';",
                &["Hunter2Const", "Hunter2Ts"],
                &["const API_TOKEN: &str = ", "const secret: string = "],
            ),
            (
                "CREDENTIALS\tASIAIOSFODNN7EXAMPLE\t2024-01-01T00:00:00Z\twJalrXUtnFEMIHunter2Key\tIQoJb3JpZ2luHunter2Tok\n\
                 ACCESSKEY\tAKIAIOSFODNN7EXAMPLE\t2015-03-09T18:39:23.411Z\twJalrXUtnFEMIHunter2Acc\tActive\tBob",
                &["Hunter2Key", "Hunter2Tok", "Hunter2Acc"],
                &["\t2024-01-01T00:00:00Z\t", "\tActive\tBob"],
            ),
            (
                "apiVersion: v1\ndata:\n  DATABASE_URL: SHVudGVyMkRhdGFiYXNl\n  config.json: eyJIdW50ZXIyIjoxfQ==\n\
                 kind: Secret\nstringData:\n  STRIPE: Hunter2 Plain\ntype: Opaque",
                &[
                    "SHVudGVyMkRhdGFiYXNl",
                    "eyJIdW50ZXIyIjoxfQ==",
                    "Hunter2 Plain",
                ],
                &[
                    "  DATABASE_URL: ",
                    "  config.json: ",
                    "kind: Secret",
                    "type: Opaque",
                ],
            ),
            (
                "{\"data\":{\"DATABASE_URL\":\"SHVudGVyMkRhdGFiYXNl\",\"note\":\"plain words\"},\"kind\":\"Secret\"}",
                &["SHVudGVyMkRhdGFiYXNl"],
                &["\"note\":\"plain words\"", "\"kind\":\"Secret\""],
            ),
            (
                "API key: Hunter2Api\nSecret Access Key: wJalrHunter2Sak\n   S3 Secret Key: 8501Hunter2S3",
                &["Hunter2Api", "Hunter2Sak", "Hunter2S3"],
                &["API key: ", "Secret Access Key: ", "   S3 Secret Key: "],
            ),
            (
                "password = \"\"\"Hunter2Triple\"\"\"\nuser = 'bob'",
                &["Hunter2Triple"],
                &["password = ", "\nuser = 'bob'"],
            ),
            (
                "curl -u \"admin:Hunter2CurlQ\" https://x",
                &["Hunter2CurlQ"],
                &["curl -u \"admin:", "\" https://x"],
            ),
        ] {
            assert_hidden(redactor, raw, secrets, kept);
        }
        for plain in [
            "use crate::auth::{Token, verify};\nlet t = Token::new(claims);\nINFO app::auth: password changed",
            "{\"token\":null,\"secret\":false,\"auth\":true,\"x\":1}",
            "      --token <TOKEN>  API token\n      --password string   registry password\n  [env: API_TOKEN=]",
            "read -s -p \"Password: \" PASSWORD",
            "  + password = (sensitive value)\npassword:  16 bytes",
            "{\"secrets\":[{\"name\":\"API_TOKEN\",\"created_at\":\"2024\"}]}",
            "The password is stored in the vault.",
            "apiVersion: v1\ndata:\n  greeting: hello world\nkind: Secret",
            "pub struct Config {\n    pub token: String,\n    password: Option<String>,\n}",
            "interface A { secret: string; }\nclass S(BaseModel):\n    password: SecretStr",
        ] {
            let (out, _) = content::text(redactor, plain, 1 << 20);
            assert_eq!(out.as_str().unwrap(), plain);
        }
    }
    // The detectors: a PGP key block and Stripe's webhook secret go; zeros, millisecond
    // timestamps and padded base64 hashes stay.
    let (out, _) = content::text(
        &detectors,
        "-----BEGIN PGP PRIVATE KEY BLOCK-----\nlQOYBF0Hunter2Pgp\n-----END PGP PRIVATE KEY BLOCK-----\n\
         Your webhook signing secret is whsec_Hunter2abcdefghijklmnopqrstuv (^C to quit)",
        1 << 20,
    );
    assert_eq!(
        out.as_str().unwrap(),
        "[REDACTED:private_key]\nYour webhook signing secret is [REDACTED:api_key] (^C to quit)"
    );
    let plain = "00000000-0000-0000-0000-000000000000 {\"ts\":1714567890129}\n\
                 github.com/pkg/mod5 v1.2.5 h1:7y0SfeN7lCuq0GFF5UsMYZofIjJ7LrvPvsePVWSv450=";
    let (out, _) = content::text(&detectors, plain, 1 << 20);
    assert_eq!(out.as_str().unwrap(), plain);
}

/// The rest of the third sweep's leaks: a variable set apart from its value (`setx`, fish,
/// csh, a Dockerfile's `ENV`), secrets managers' `secrets set`, commands that take a
/// password or token after their own flag or word, data source names without a scheme, a
/// braced connection-string password, a default after `||` or `or`, other authorization
/// schemes, a registry's `identitytoken`, and tables with a column named for a credential.
#[test]
fn credentials_set_apart_and_in_data_source_names_are_hidden() {
    let detectors = DefaultDetectors::new();
    let redactors: [&dyn Redactor; 2] = [&content::NoRedaction, &detectors];
    for redactor in redactors {
        for (raw, secrets, kept) in [
            (
                "setx API_TOKEN \"Hunter2Setx\"\nsetx /M DB_PASSWORD Hunter2SetxM\nset -gx GITHUB_TOKEN Hunter2Fish\n\
                 setenv DB_PASSWORD Hunter2Csh\nENV API_KEY Hunter2Env\nENV PATH /usr/local/bin",
                &["Hunter2Setx", "Hunter2Fish", "Hunter2Csh", "Hunter2Env"][..],
                &[
                    "setx /M DB_PASSWORD ",
                    "set -gx GITHUB_TOKEN ",
                    "ENV PATH /usr/local/bin",
                ][..],
            ),
            (
                "dotnet user-secrets set \"Stripe:SecretKey\" \"Hunter2Dotnet\"\n\
                 doppler secrets set API_TOKEN Hunter2Doppler\nnetlify env:set API_TOKEN Hunter2Netlify",
                &["Hunter2Dotnet", "Hunter2Doppler", "Hunter2Netlify"],
                &[
                    "dotnet user-secrets set \"Stripe:SecretKey\" ",
                    "netlify env:set API_TOKEN ",
                ],
            ),
            (
                "redis-server --requirepass Hunter2Redis\nsqlcmd -S db -U sa -P Hunter2Sqlcmd -Q \"select 1\"\n\
                 ldapsearch -x -D cn=admin -w Hunter2Ldap -b dc=x\ncargo login Hunter2CargoToken1\n\
                 ngrok config add-authtoken Hunter2NgrokToken1\n$pw = ConvertTo-SecureString \"Hunter2Ps\" -AsPlainText\n\
                 [Server] A temporary password is generated for root@localhost: Hunter2Tmp",
                &[
                    "Hunter2Redis",
                    "Hunter2Sqlcmd",
                    "Hunter2Ldap",
                    "Hunter2Cargo",
                    "Hunter2Ngrok",
                    "Hunter2Ps",
                    "Hunter2Tmp",
                ],
                &[
                    " -Q \"select 1\"",
                    " -b dc=x",
                    " -AsPlainText",
                    "generated for root@localhost: ",
                ],
            ),
            (
                "dsn := \"root:Hunter2Go@tcp(db:3306)/app\"\nsqlplus system/Hunter2Ora@//db:1521/ORCL\n\
                 jdbc:oracle:thin:app/Hunter2Jdbc@db:1521:orcl\nServer=db;Password={Hunter2;Brace}};x};Encrypt=True",
                &[
                    "Hunter2Go",
                    "Hunter2Ora",
                    "Hunter2Jdbc",
                    "Hunter2;Brace",
                    "x}",
                ],
                &[
                    "\"root:",
                    "@tcp(db:3306)/app\"",
                    "@//db:1521/ORCL",
                    ";Encrypt=True",
                ],
            ),
            (
                "const secret = process.env.JWT_SECRET || 'Hunter2Or';\ntoken = os.getenv(\"T\") or \"Hunter2Py\"",
                &["Hunter2Or", "Hunter2Py"],
                &["const secret = ", ";\ntoken = "],
            ),
            (
                "curl -H \"Authorization: Bot Hunter2Bot\" https://x\n{\"auths\":{\"r\":{\"identitytoken\":\"Hunter2Id\"}}}\n\
                 npmAuthIdent: \"bob:Hunter2Yarn\"\nenv:\n  - password: Hunter2Item",
                &["Hunter2Bot", "Hunter2Id", "Hunter2Yarn", "Hunter2Item"],
                &[
                    "\" https://x",
                    "{\"auths\":{\"r\":{\"identitytoken\":",
                    "  - password: ",
                ],
            ),
            // Tables with a column named for a credential, and psql's expanded records.
            (
                " id | name  | api_token\n----+-------+-----------\n  1 | alice | Hunter2Psql\n(1 row)\n\
                 +----+------------+\n| id | auth_token |\n+----+------------+\n|  1 | Hunter2Box |\n+----+------------+\n\
                 -[ RECORD 1 ]-+------\nid            | 1\nsecret_key    | Hunter2Expanded",
                &["Hunter2Psql", "Hunter2Box", "Hunter2Expanded"],
                &["  1 | alice | ", "(1 row)", "|  1 | ", "id            | 1"],
            ),
        ] {
            assert_hidden(redactor, raw, secrets, kept);
        }
        for plain in [
            "set the token expiry to 5",
            "password: {{ .Values.password }}",
            "helm install x --set image.tag=1.2",
            "| Option | Description |\n|--------|-------------|\n| token  | The access token |",
            " id | name\n----+------\n  1 | password",
        ] {
            let (out, _) = content::text(redactor, plain, 1 << 20);
            assert_eq!(out.as_str().unwrap(), plain);
        }
    }
}

/// What an adversarial review of the third sweep's rules found: values they let through
/// that were hidden before (an assignment to a path, an unclosed triple quote, a password
/// opening with a bracket, a quoted name joined to its value, the tail of a JSON value),
/// close variants they missed, and text they destroyed (prose saying "identified by" or
/// "API key:", a string ending in "password ", `/etc/passwd` and MAC addresses read as a
/// password file, a URL whose host is an address, a log's cookie, a ConfigMap beside a
/// secret).
#[test]
fn what_a_review_of_the_third_sweep_found_is_mended() {
    let detectors = DefaultDetectors::new();
    let redactors: [&dyn Redactor; 2] = [&content::NoRedaction, &detectors];
    for redactor in redactors {
        for (raw, secrets, kept) in [
            (
                "std::string Config::password = \"Hunter2Path\";\nSettings::API_TOKEN = \"Hunter2Path2\"",
                &["Hunter2Path"][..],
                &["std::string Config::password = ", "Settings::API_TOKEN = "][..],
            ),
            (
                "password = \"\"\"Hunter2Open",
                &["Hunter2Open"],
                &["password = "],
            ),
            (
                "DB_PASSWORD=)k9Hunter2 password=<Hunter2Angle>",
                &["k9Hunter2", "Hunter2Angle"],
                &["DB_PASSWORD="],
            ),
            (
                "curl -d \"password=\"Hunter2Joined\n\"password\": Hunter2,Tail",
                &["Hunter2Joined", "Tail"],
                &["curl -d \"password="],
            ),
            (
                "ALTER USER 'a'@'%' IDENTIFIED WITH caching_sha2_password BY 'Hunter2Sha';\n\
                 SET PASSWORD FOR 'bob'@'localhost' = 'Hunter2SetPw';\nAWS Secret Access Key [None]: wJalrHunter2",
                &["Hunter2Sha", "Hunter2SetPw", "wJalrHunter2"],
                &[
                    "caching_sha2_password BY ",
                    "SET PASSWORD FOR 'bob'@'localhost' = ",
                ],
            ),
            (
                "static PASSWORD: &str =\n    \"Hunter2Wrapped\";\nPWD=My Pa55 Hunter2;UID=sa",
                &["Hunter2Wrapped", "Pa55 Hunter2"],
                &["static PASSWORD: &str =\n    ", ";UID=sa"],
            ),
            (
                "arn:aws:secretsmanager:us-east-1:1:secret:prod/db-AbCdEf\t2024-05-01T10:00:00.123000+00:00\tprod/db\tHunter2Iso\ta1b2c3d4-5678-90ab-cdef-000000000000",
                &["Hunter2Iso"],
                &["\tprod/db\t"],
            ),
            (
                "db_primary:5432:app:app:Hunter2Pg\nkind: Secret\ndata:\n  config: \"SHVudGVyMlF1b3RlZA==\"",
                &["Hunter2Pg", "SHVudGVyMlF1b3RlZA=="],
                &["db_primary:5432:app:app:", "  config: "],
            ),
        ] {
            assert_hidden(redactor, raw, secrets, kept);
        }
        for plain in [
            "INFO app::auth: password changed",
            "print(\"Wrong password \" + user)\n    retries += 1\nreturn \"done\"",
            "git commit -m \"fix password 'reset' flow\"",
            "/// Returns the row identified by `id`.\nThe process identified by PID 1234",
            "1. Create an API key: go to Settings\nRemember the API key: you will need it",
            "root:*:0:0:System Administrator:/var/root:/bin/sh\n02:42:ac:11:00:02\nuser:1000:profile:name:Alice",
            "http://[::1]:8080/users/@bob",
            "kind: Secret\n---\nkind: ConfigMap\ndata:\n  mode: prod\n  enabled: true",
            "kind: SecretProviderClass\ndata:\n  objectName: SHVudGVyMk5hbWU=",
            "read -s -p \"Password: \" PASSWORD",
        ] {
            let (out, _) = content::text(redactor, plain, 1 << 20);
            assert_eq!(out.as_str().unwrap(), plain);
        }
    }
    // The address's marker stays whole, and the path after the port keeps its `@`.
    let (out, _) = content::text(
        &detectors,
        "http://127.0.0.1:5173/@id/__x00__react",
        1 << 20,
    );
    assert_eq!(
        out.as_str().unwrap(),
        "http://[REDACTED:ip_address]:5173/@id/__x00__react"
    );
    let (out, _) = content::text(
        &detectors,
        "-----BEGIN PGP SECRET KEY BLOCK-----\nlQOYHunter2Pgp\n-----END PGP SECRET KEY BLOCK-----",
        1 << 20,
    );
    assert_eq!(out.as_str().unwrap(), "[REDACTED:private_key]");
}

/// What a second review found: a panic and a quadratic reading in the JSON value's end,
/// SQL over several lines or far from its user's word, two-word labels mid-line before a
/// secret, cookie headers anywhere, a secret's `kind` with a comment, password files of
/// other hosts and ports; and columns, match arms, format placeholders and prose that lost
/// their words.
#[test]
fn what_a_second_review_found_is_mended() {
    let detectors = DefaultDetectors::new();
    let redactors: [&dyn Redactor; 2] = [&content::NoRedaction, &detectors];
    for redactor in redactors {
        for raw in [
            "{\"api_key\": é}",
            "\"token\": \u{2018}abc\u{2019}",
            "{\"api_key\": 日本,\"a\":1}",
        ] {
            let (out, _) = content::text(redactor, raw, 1 << 20);
            assert!(
                out.as_str().unwrap().contains("[REDACTED:credential]"),
                "{out}"
            );
        }
        for (raw, secrets, kept) in [
            (
                "CREATE USER bob\n  WITH PASSWORD 'Hunter2Ml';\nALTER USER bob\n  IDENTIFIED BY Hunter2Ml2;\n\
                 CREATE DATABASE LINK remote CONNECT TO bob IDENTIFIED BY Hunter2Link USING 'orcl';\n\
                 CREATE SERVER s FOREIGN DATA WRAPPER x OPTIONS (host 'h', password 'Hunter2Srv');\n\
                 CREATE ROLE app_rw WITH NOSUPERUSER INHERIT NOCREATEDB NOCREATEROLE NOREPLICATION CONNECTION LIMIT 10 VALID UNTIL 'infinity' ENCRYPTED PASSWORD 'Hunter2Far';",
                &["Hunter2Ml", "Hunter2Link", "Hunter2Srv", "Hunter2Far"][..],
                &[" USING 'orcl';", "OPTIONS (host 'h', password "][..],
            ),
            (
                "Here is your API key: 9f8e7d6c5b4a39281706\n2024-05-01 INFO API key: 8e7d6c5b4a3928170655",
                &["9f8e7d6c5b4a39281706", "8e7d6c5b4a3928170655"],
                &["Here is your API key: ", "2024-05-01 INFO API key: "],
            ),
            (
                "GET / Cookie: a=1; session=Hunter2Get\nDEBUG headers={Cookie: a=1; sessionid=Hunter2Dbg}\n\
                 Set-Cookie: session=Hunter2Set; Path=/; HttpOnly",
                &["Hunter2Get", "Hunter2Dbg", "Hunter2Set"],
                &[
                    "GET / Cookie: ",
                    "DEBUG headers={Cookie: ",
                    "}\nSet-Cookie: ",
                ],
            ),
            (
                "kind: Secret # app\ndata:\n  pin: SHVudGVyMlBpbg==\n",
                &["SHVudGVyMlBpbg=="],
                &["kind: Secret # app", "  pin: "],
            ),
            (
                "db:6543:*:app:Hunter2Pg1\nprod-db:5440:app:app:Hunter2Pg2",
                &["Hunter2Pg1", "Hunter2Pg2"],
                &["db:6543:*:app:", "prod-db:5440:app:app:"],
            ),
            (
                " name | password \n------+----------\n alice | Hunter2Col",
                &["Hunter2Col"],
                &[" alice | "],
            ),
        ] {
            assert_hidden(redactor, raw, secrets, kept);
        }
        for plain in [
            "user = get()\nprint(\"Wrong password \" + x)",
            "1. Create an API key: go to Settings",
            "| Suite | Pass | Fail |\n|---|---|---|\n| unit | 120 | 0 |",
            "| Endpoint | Method | Auth |\n|---|---|---|\n| /users | GET | Required |",
            "| Secret | Description |\n|---|---|\n| `NPM_TOKEN` | Used to publish |",
            " name | auth \n------+------\n alice | ldap",
            "Credential::Password => \"password\",",
            "f\"token={token} expires={exp}\"\nprintln!(\"password={password}\")",
            "Run cargo login first, then publish.\nset -x token here",
            "user:1000:profile:name:Alice",
        ] {
            let (out, _) = content::text(redactor, plain, 1 << 20);
            assert_eq!(out.as_str().unwrap(), plain);
        }
    }
}

/// The same shapes through the recorder, as a Bash tool's command and its output reach a
/// record with `capture_content` on.
#[test]
fn a_bash_round_trip_records_no_secret_in_indented_or_escaped_json() {
    let config = RecorderConfig {
        capture_content: true,
        ..RecorderConfig::default()
    };
    let mut s = Scenario::new("01a229cc-ffcf-7013-b162-1d4e94d6144b");
    s.recorder = Recorder::new(
        config,
        Box::new(Counter(0)),
        Box::new(DefaultDetectors::new()),
    );
    let cx = Agent::Codex;
    let command = "curl -d \"{\\\"password\\\": \\\"Tr0ub4dorXhorse9\\\"}\" http://x && psql postgres://app:Secret!Passw0rd@db.example.com/app && kubectl get pod web -o json";
    let output = "{\n    \"env\": [\n        {\n            \"name\": \"DB_PASSWORD\",\n            \"value\": \"Qz7VmW2pLk9Rt\"\n        }\n    ]\n}\n";
    let mut pre = fixture(cx, "PreToolUse-Bash");
    pre["session_id"] = json!(s.session);
    pre["tool_input"]["command"] = json!(command);
    let mut post = fixture(cx, "PostToolUse-Bash");
    post["session_id"] = json!(s.session);
    post["tool_input"]["command"] = json!(command);
    post["tool_response"] = json!(output);
    s.hook(cx, "SessionStart")
        .hook_payload(cx, "PreToolUse-Bash", pre)
        .hook_payload(cx, "PostToolUse-Bash", post)
        .hook(cx, "SessionEnd");
    for secret in ["Tr0ub4dorXhorse9", "Secret!", "Passw0rd", "Qz7VmW2pLk9Rt"] {
        assert!(!s.out.contains(secret), "{secret} in {}", s.out);
    }
    for kept in [
        "curl -d ",
        "postgres://app:",
        "DB_PASSWORD",
        "kubectl get pod web",
    ] {
        assert!(s.out.contains(kept), "{kept} lost from {}", s.out);
    }
}

/// The short texts a record takes from a provider or a harness pass the filter the ids
/// pass: a key sent as the model name is not repeated by the cost error, a provider's
/// finish reason and a harness's session `source` or end `reason` are filtered too, while
/// the ordinary values come through exactly as they were.
#[test]
fn caller_text_in_costs_finish_reasons_and_session_reasons_is_filtered() {
    const KEY: &str = "sk-ant-api03-ReqModelSecretYYYYYYYYYYYYYYYY";
    let end = |id, model: &str, finish: &str, cost_error: String| {
        Observation::ModelRequestEnd(ModelRequestEnd {
            request_id: RequestId(id),
            status: 200,
            duration_ms: 1,
            time_to_first_byte_ms: Some(1),
            usage: Some(UsageFacts {
                output_tokens: Some(5),
                cost_error: Some(cost_error),
                ..UsageFacts::default()
            }),
            response_model: Some(model.to_owned()),
            truncated: false,
            error: None,
            response_id: None,
            finish_reasons: vec![finish.to_owned()],
            response: None,
        })
    };
    // The cost error as the worker words it, from the model names as they came.
    let no_price = |model: &str| {
        crate::CostError::UnknownModel {
            model: model.to_owned(),
        }
        .to_string()
    };

    let mut secret = Scenario::new("s-secret");
    let mut start = fixture(Agent::ClaudeCode, "SessionStart");
    start["session_id"] = json!("s-secret");
    start["source"] = json!(format!("startup {KEY}"));
    secret.hook_payload(Agent::ClaudeCode, "SessionStart", start);
    secret.request(1, KEY, None);
    secret.step(
        "end",
        end(1, KEY, &format!("end_turn {KEY}"), no_price(KEY)),
    );
    let mut session_end = fixture(Agent::ClaudeCode, "SessionEnd");
    session_end["session_id"] = json!("s-secret");
    session_end["reason"] = json!("password=ZebraCactus77!x");
    secret.hook_payload(Agent::ClaudeCode, "SessionEnd", session_end);
    for leak in ["ReqModelSecret", "ZebraCactus77"] {
        assert!(!secret.out.contains(leak), "{leak} in {}", secret.out);
    }
    assert!(
        secret
            .out
            .contains(r#""cost_error":"no price for model \"[REDACTED"#),
        "{}",
        secret.out
    );
    // pi's end reason, under `event`.
    let mut pi = Scenario::new("s-pi");
    pi.hook(Agent::Pi, "session_start");
    let mut shutdown = fixture(Agent::Pi, "session_shutdown");
    shutdown["session_id"] = json!("s-pi");
    shutdown["event"]["reason"] = json!("password=ZebraCactus77!x");
    pi.hook_payload(Agent::Pi, "session_shutdown", shutdown);
    assert!(!pi.out.contains("ZebraCactus77"), "{}", pi.out);
    assert!(pi.out.contains(r#""reason":"#), "{}", pi.out);

    let mut plain = Scenario::new("s-plain");
    let mut start = fixture(Agent::ClaudeCode, "SessionStart");
    start["session_id"] = json!("s-plain");
    start["source"] = json!("startup");
    plain.hook_payload(Agent::ClaudeCode, "SessionStart", start);
    plain.request(1, "claude-x", None);
    plain.step("end", end(1, "claude-x", "end_turn", no_price("claude-x")));
    plain.hook(Agent::ClaudeCode, "SessionEnd");
    for kept in [
        r#""source":"startup""#,
        r#""finish_reasons":["end_turn"]"#,
        r#""cost_error":"no price for model \"claude-x\"""#,
        r#""response_model":"claude-x""#,
        r#""reason":"other""#,
    ] {
        assert!(plain.out.contains(kept), "{kept} not in {}", plain.out);
    }
}
