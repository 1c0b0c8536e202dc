use std::time::Duration;

use relay_plugins::atof::{
    Agent, Entropy, HookEvent, ModelRequestEnd, ModelRequestStart, NoRedaction, Observation,
    PolicyDecision, PolicyTarget, Recorder, RecorderConfig, RequestId, UsageFacts,
};
use serde_json::json;

use super::*;

struct Counter(u64);

impl Entropy for Counter {
    fn uuid_bytes(&mut self) -> [u8; 10] {
        self.0 += 1;
        let mut bytes = [0u8; 10];
        bytes[2..].copy_from_slice(&self.0.to_be_bytes());
        bytes
    }
}

/// Runs a session through the recorder and maps every record.
fn spans_of(steps: Vec<Observation>) -> (Vec<Record>, Vec<SpanData>) {
    let mut recorder = Recorder::new(
        RecorderConfig::default(),
        Box::new(Counter(0)),
        Box::new(NoRedaction),
    );
    let mut mapper = SpanMapper::new();
    let mut records = Vec::new();
    let mut spans = Vec::new();
    let mut at = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    for step in steps {
        at += Duration::from_millis(10);
        recorder.handle(at, step);
        while let Some(record) = recorder.poll_record() {
            spans.extend(mapper.on_record(&record));
            records.push(record);
        }
    }
    (records, spans)
}

fn hook(event: &str, extra: serde_json::Value) -> Observation {
    let mut payload = json!({ "hook_event_name": event, "session_id": "s1" });
    if let (Some(p), Some(e)) = (payload.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    Observation::Hook(HookEvent::from_payload(Agent::ClaudeCode, payload))
}

fn request(traceparent: Option<&str>) -> Vec<Observation> {
    vec![
        Observation::ModelRequestStart(ModelRequestStart {
            request_id: RequestId(1),
            session_id: Some("s1".to_owned()),
            route: "/v1/messages".to_owned(),
            model: Some("claude-sonnet-4-5".to_owned()),
            stream: true,
            request_bytes: 100,
            prompt: None,
            request_redactions: 0,
            server: None,
            traceparent: traceparent.map(str::to_owned),
        }),
        Observation::ModelRequestEnd(ModelRequestEnd {
            request_id: RequestId(1),
            status: 200,
            duration_ms: 10,
            time_to_first_byte_ms: Some(3),
            usage: Some(UsageFacts::new(
                &Usage {
                    uncached_input: 10,
                    cache_read: 100,
                    cache_write_5m: 20,
                    cache_write_1h: 0,
                    output: 5,
                    reasoning: None,
                },
                None,
            )),
            response_model: Some("claude-sonnet-4-5-20250929".to_owned()),
            truncated: false,
            error: None,
            response_id: None,
            finish_reasons: Vec::new(),
            response: None,
        }),
    ]
}

fn attr<'s>(span: &'s SpanData, key: &str) -> Option<&'s AttrValue> {
    span.attributes
        .iter()
        .find(|a| a.key == key)
        .map(|a| &a.value)
}

#[test]
fn every_scope_is_one_span_with_the_scopes_parent_links_in_one_trace() {
    let mut steps = vec![
        hook("SessionStart", json!({})),
        hook("UserPromptSubmit", json!({ "prompt": "hi" })),
        hook(
            "PreToolUse",
            json!({ "tool_name": "Bash", "tool_use_id": "t1", "tool_input": { "command": "rm -rf /" } }),
        ),
        Observation::PolicyDecision(PolicyDecision {
            target: PolicyTarget::Hook {
                agent: Agent::ClaudeCode,
                session_id: Some("s1".to_owned()),
                event: "PreToolUse".to_owned(),
                tool_use_id: Some("t1".to_owned()),
            },
            rule: Some("1".to_owned()),
            decision: relay_plugins::atof::Decision::Deny,
            reason: Some("destructive command".to_owned()),
            dry_run: false,
        }),
    ];
    steps.extend(request(None));
    steps.push(hook("Stop", json!({})));
    steps.push(hook("SessionEnd", json!({})));
    let (records, spans) = spans_of(steps);
    let scopes: Vec<&Record> = records.iter().filter(|r| r.is_start()).collect();
    let guardrails = records
        .iter()
        .filter(|r| {
            matches!(
                r.kind,
                RecordKind::Mark {
                    category: Category::Guardrail,
                    ..
                }
            )
        })
        .count();
    assert_eq!(spans.len(), scopes.len() + guardrails);
    let trace = spans[0].trace_id;
    for scope in scopes {
        let span = spans
            .iter()
            .find(|s| s.span_id == span_id(&scope.uuid))
            .unwrap_or_else(|| panic!("no span for {}", scope.name));
        assert_eq!(span.trace_id, trace, "{}", scope.name);
        assert_eq!(
            span.parent_span_id,
            scope.parent_uuid.map(|p| span_id(&p)),
            "{}",
            scope.name
        );
        assert!(span.end_unix_nanos >= span.start_unix_nanos);
    }
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    assert!(names.contains(&"invoke_agent claude-code"), "{names:?}");
    assert!(names.contains(&"execute_tool Bash"), "{names:?}");
    assert!(names.contains(&"chat claude-sonnet-4-5"), "{names:?}");
    assert!(names.contains(&"guardrail"), "{names:?}");
    let chat = spans.iter().find(|s| s.name.starts_with("chat")).unwrap();
    assert_eq!(chat.kind, SpanKind::Client);
    assert_eq!(
        attr(chat, "gen_ai.provider.name"),
        Some(&AttrValue::Str("anthropic".to_owned()))
    );
    assert_eq!(
        attr(chat, "gen_ai.response.model"),
        Some(&AttrValue::Str("claude-sonnet-4-5-20250929".to_owned()))
    );
    // Every input token, cached ones included, as the conventions define it for Anthropic.
    assert_eq!(
        attr(chat, "gen_ai.usage.input_tokens"),
        Some(&AttrValue::Int(130))
    );
    assert_eq!(
        attr(chat, "gen_ai.usage.cache_read.input_tokens"),
        Some(&AttrValue::Int(100))
    );
    assert_eq!(
        attr(chat, "gen_ai.usage.cache_creation.input_tokens"),
        Some(&AttrValue::Int(20))
    );
    assert_eq!(
        attr(chat, "gen_ai.conversation.id"),
        Some(&AttrValue::Str("s1".to_owned()))
    );
    assert_eq!(
        attr(chat, "session.id"),
        Some(&AttrValue::Str("s1".to_owned()))
    );
    assert_eq!(
        attr(chat, "openinference.span.kind"),
        Some(&AttrValue::Str("LLM".to_owned()))
    );
    // A streamed request says so, with the time to its first chunk in seconds.
    assert_eq!(
        attr(chat, "gen_ai.request.stream"),
        Some(&AttrValue::Bool(true))
    );
    assert_eq!(
        attr(chat, "gen_ai.response.time_to_first_chunk"),
        Some(&AttrValue::Float(0.003))
    );
    // The session's span names its harness's provider.
    let agent = spans
        .iter()
        .find(|s| s.name == "invoke_agent claude-code")
        .unwrap();
    assert_eq!(
        attr(agent, "gen_ai.provider.name"),
        Some(&AttrValue::Str("anthropic".to_owned()))
    );
    let tool = spans
        .iter()
        .find(|s| s.name == "execute_tool Bash")
        .unwrap();
    assert_eq!(
        attr(tool, "gen_ai.tool.call.id"),
        Some(&AttrValue::Str("t1".to_owned()))
    );
}

#[test]
fn an_inbound_traceparent_puts_the_llm_span_in_the_harness_trace() {
    let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let mut steps = vec![hook("SessionStart", json!({}))];
    steps.extend(request(Some(tp)));
    steps.push(hook("SessionEnd", json!({})));
    let (_, spans) = spans_of(steps);
    let chat = spans.iter().find(|s| s.name.starts_with("chat")).unwrap();
    assert_eq!(chat.trace_id.0[..4], [0x0a, 0xf7, 0x65, 0x19]);
    assert_eq!(chat.parent_span_id.unwrap().0[..2], [0xb7, 0xad]);
    assert!(attr(chat, "relay.atof.parent_uuid").is_some());
    // A malformed one is ignored.
    let mut steps = vec![hook("SessionStart", json!({}))];
    steps.extend(request(Some("00-zz-yy-01")));
    let (records, spans) = spans_of(steps);
    let chat = spans.iter().find(|s| s.name.starts_with("chat")).unwrap();
    let session = records.iter().find(|r| r.is_start()).unwrap();
    assert_eq!(chat.parent_span_id, Some(span_id(&session.uuid)));
}

#[test]
fn a_failed_request_is_an_error_span() {
    let mut steps = request(None);
    if let Observation::ModelRequestEnd(end) = &mut steps[1] {
        end.status = 502;
    }
    let (_, spans) = spans_of(steps);
    // The status says error; the type says which, and the description does not repeat it.
    assert_eq!(spans[0].status, SpanStatus::Error(String::new()));
    assert_eq!(spans[0].parent_span_id, None);
    assert_eq!(
        attr(&spans[0], "error.type"),
        Some(&AttrValue::Str("502".to_owned()))
    );
    // A success has no error type and leaves the status unset.
    let (_, spans) = spans_of(request(None));
    assert_eq!(spans[0].status, SpanStatus::Unset);
    assert_eq!(attr(&spans[0], "error.type"), None);
}

/// The provider's address from the start record, and the answer's id and finish reasons
/// from the end record, go to the span's attributes.
#[test]
fn the_server_and_the_answers_id_and_finish_reasons_reach_the_span() {
    let mut steps = request(None);
    if let Observation::ModelRequestStart(start) = &mut steps[0] {
        start.server = Some(("api.anthropic.com".to_owned(), 443));
    }
    if let Observation::ModelRequestEnd(end) = &mut steps[1] {
        end.response_id = Some("msg_01".to_owned());
        end.finish_reasons = vec!["tool_use".to_owned()];
    }
    let (records, spans) = spans_of(steps);
    assert_eq!(records[1].data["response_id"], "msg_01");
    assert_eq!(
        attr(&spans[0], "gen_ai.response.id"),
        Some(&AttrValue::Str("msg_01".to_owned()))
    );
    assert_eq!(
        attr(&spans[0], "gen_ai.response.finish_reasons"),
        Some(&AttrValue::StrArray(vec!["tool_use".to_owned()]))
    );
    assert_eq!(
        attr(&spans[0], "server.address"),
        Some(&AttrValue::Str("api.anthropic.com".to_owned()))
    );
    assert_eq!(attr(&spans[0], "server.port"), Some(&AttrValue::Int(443)));
}

/// A request to one of OpenAI's APIs says which (`openai.api.type`); Anthropic's and a
/// Codex session's span carry none.
#[test]
fn an_openai_request_names_its_api() {
    for (route, provider, api) in [
        ("/v1/responses", "openai", Some("responses")),
        ("/backend-api/codex/responses", "openai", Some("responses")),
        ("/v1/chat/completions", "openai", Some("chat_completions")),
        ("/v1/messages", "anthropic", None),
    ] {
        let mut steps = request(None);
        if let Observation::ModelRequestStart(start) = &mut steps[0] {
            start.route = route.to_owned();
        }
        let (_, spans) = spans_of(steps);
        assert_eq!(
            attr(&spans[0], "gen_ai.provider.name"),
            Some(&AttrValue::Str(provider.to_owned())),
            "{route}"
        );
        assert_eq!(
            attr(&spans[0], "openai.api.type"),
            api.map(|api| AttrValue::Str(api.to_owned())).as_ref(),
            "{route}"
        );
    }
    let session = vec![
        Observation::Hook(HookEvent::from_payload(
            Agent::Codex,
            json!({ "hook_event_name": "SessionStart", "session_id": "s1" }),
        )),
        Observation::Hook(HookEvent::from_payload(
            Agent::Codex,
            json!({ "hook_event_name": "SessionEnd", "session_id": "s1" }),
        )),
    ];
    let (_, spans) = spans_of(session);
    let agent = spans
        .iter()
        .find(|span| span.name.starts_with("invoke_agent"))
        .expect("the session's span");
    assert_eq!(attr(agent, "openai.api.type"), None);
}

/// A stream that failed after its 200 head (an error event, or a body that broke off) is
/// an error span typed by that failure, not a success.
#[test]
fn a_stream_that_failed_after_its_head_is_an_error_span() {
    for error in ["overloaded_error", "response_body_failed"] {
        let mut steps = request(None);
        if let Observation::ModelRequestEnd(end) = &mut steps[1] {
            end.error = Some(error.to_owned());
        }
        let (records, spans) = spans_of(steps);
        assert_eq!(records[1].data["error"], error);
        assert_eq!(records[1].data["status"], 200);
        assert_eq!(
            spans[0].status,
            SpanStatus::Error("the response failed after its head".to_owned()),
            "{error}"
        );
        assert_eq!(
            attr(&spans[0], "error.type"),
            Some(&AttrValue::Str(error.to_owned()))
        );
    }
}

/// A request's cost reaches its span, and so does the reason a price table gave it none.
#[test]
fn the_cost_or_why_there_is_none_reaches_the_span() {
    for (cost, error) in [
        (Some(relay_plugins::Usd::from_picos(47_610_000_000)), None),
        (None, Some("no price for model \"claude-sonnet-4-5\"")),
    ] {
        let mut steps = request(None);
        if let Some(Observation::ModelRequestEnd(end)) = steps.last_mut()
            && let Some(usage) = &mut end.usage
        {
            usage.cost = cost;
            usage.cost_error = error.map(str::to_owned);
        }
        let (_, spans) = spans_of(steps);
        let chat = spans.iter().find(|s| s.name.starts_with("chat")).unwrap();
        assert_eq!(
            attr(chat, "relay.cost_usd"),
            cost.map(|c| AttrValue::Str(c.to_string())).as_ref()
        );
        assert_eq!(
            attr(chat, "relay.cost_error"),
            error.map(|e| AttrValue::Str(e.to_owned())).as_ref()
        );
    }
}
