use expect_test::{Expect, expect};
use relay_plugins::Usage;

use super::{GenAiFacts, Operation, genai_attributes, span_name};
use crate::otlp::AttrValue;

fn check(facts: &GenAiFacts<'_>, expect: Expect) {
    let mut out = format!("name: {}\n", span_name(facts));
    for attribute in genai_attributes(facts) {
        let value = match attribute.value {
            AttrValue::Str(s) => format!("{s:?}"),
            AttrValue::Int(i) => i.to_string(),
            AttrValue::Float(f) => f.to_string(),
            AttrValue::Bool(b) => b.to_string(),
            AttrValue::StrArray(items) => format!("{items:?}"),
        };
        out.push_str(&format!("{} = {value}\n", attribute.key));
    }
    expect.assert_eq(&out);
}

#[test]
fn a_model_request_with_cached_usage() {
    let usage = Usage {
        uncached_input: 10,
        cache_read: 1000,
        cache_write_5m: 200,
        cache_write_1h: 50,
        output: 300,
        reasoning: Some(120),
    };
    let facts = GenAiFacts {
        provider: Some("anthropic"),
        request_model: Some("claude-sonnet-4-5"),
        response_model: Some("claude-sonnet-4-5-20250929"),
        response_id: Some("msg_01"),
        finish_reasons: &["tool_use"],
        usage: Some(&usage),
        conversation_id: Some("sess-1"),
        ..GenAiFacts::new(Operation::Chat)
    };
    check(
        &facts,
        expect![[r#"
            name: chat claude-sonnet-4-5
            gen_ai.operation.name = "chat"
            gen_ai.provider.name = "anthropic"
            gen_ai.request.model = "claude-sonnet-4-5"
            gen_ai.response.model = "claude-sonnet-4-5-20250929"
            gen_ai.response.id = "msg_01"
            gen_ai.conversation.id = "sess-1"
            gen_ai.response.finish_reasons = ["tool_use"]
            gen_ai.usage.input_tokens = 1260
            gen_ai.usage.output_tokens = 300
            gen_ai.usage.cache_read.input_tokens = 1000
            gen_ai.usage.cache_creation.input_tokens = 250
            gen_ai.usage.reasoning.output_tokens = 120
            openinference.span.kind = "LLM"
            llm.model_name = "claude-sonnet-4-5-20250929"
            llm.provider = "anthropic"
            llm.token_count.prompt = 1260
            llm.token_count.completion = 300
            llm.token_count.total = 1560
            llm.token_count.prompt_details.cache_read = 1000
            llm.token_count.prompt_details.cache_write = 250
            llm.token_count.completion_details.reasoning = 120
            session.id = "sess-1"
        "#]],
    );
}

#[test]
fn a_tool_call() {
    let facts = GenAiFacts {
        tool_name: Some("mcp__github__create_issue"),
        tool_call_id: Some("toolu_01"),
        conversation_id: Some("sess-1"),
        ..GenAiFacts::new(Operation::ExecuteTool)
    };
    check(
        &facts,
        expect![[r#"
            name: execute_tool mcp__github__create_issue
            gen_ai.operation.name = "execute_tool"
            gen_ai.conversation.id = "sess-1"
            gen_ai.tool.name = "mcp__github__create_issue"
            gen_ai.tool.call.id = "toolu_01"
            openinference.span.kind = "TOOL"
            tool.name = "mcp__github__create_issue"
            session.id = "sess-1"
        "#]],
    );
}

#[test]
fn a_session_and_the_bare_operation_when_details_are_unknown() {
    let session = GenAiFacts {
        agent_name: Some("claude-code"),
        conversation_id: Some("sess-1"),
        ..GenAiFacts::new(Operation::InvokeAgent)
    };
    check(
        &session,
        expect![[r#"
            name: invoke_agent claude-code
            gen_ai.operation.name = "invoke_agent"
            gen_ai.conversation.id = "sess-1"
            gen_ai.agent.name = "claude-code"
            openinference.span.kind = "AGENT"
            session.id = "sess-1"
        "#]],
    );
    assert_eq!(span_name(&GenAiFacts::new(Operation::Chat)), "chat");
}
