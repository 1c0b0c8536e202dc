use serde_json::json;

use super::*;

#[test]
fn routes_follow_the_spec_table() {
    let anthropic = Route::Turn {
        api: Api::AnthropicMessages,
        always_stream: false,
    };
    let responses = Route::Turn {
        api: Api::OpenAiResponses,
        always_stream: false,
    };
    let chat = Route::Turn {
        api: Api::OpenAiChat,
        always_stream: false,
    };
    let cases = [
        (Method::HEAD, "/", Route::Probe),
        (Method::GET, "/v1/models", Route::Models),
        (Method::GET, "/models", Route::Models),
        (Method::HEAD, "/models", Route::Models),
        (Method::POST, "/v1/messages", anthropic),
        (
            Method::POST,
            "/v1/messages/count_tokens",
            Route::CountTokens,
        ),
        (Method::POST, "/v1/responses", responses),
        (Method::POST, "/responses", responses),
        (
            Method::POST,
            "/backend-api/codex/responses",
            Route::Turn {
                api: Api::OpenAiResponses,
                always_stream: true,
            },
        ),
        (Method::POST, "/v1/chat/completions", chat),
        (Method::POST, "/chat/completions", chat),
        (
            Method::GET,
            "/v1/messages",
            Route::WrongMethod { allow: "POST" },
        ),
        (Method::GET, "/", Route::WrongMethod { allow: "HEAD" }),
        (
            Method::POST,
            "/v1/models",
            Route::WrongMethod { allow: "GET, HEAD" },
        ),
        (Method::POST, "/v2/messages", Route::NotFound),
        (Method::POST, "/v1/messages/", Route::NotFound),
    ];
    for (method, path, expected) in cases {
        assert_eq!(route(&method, path), expected, "{method} {path}");
    }
}

#[test]
fn tool_results_are_found_in_each_api() {
    let anthropic_first = json!({"messages": [{"role": "user", "content": "run it"}]});
    let anthropic_second = json!({"messages": [
        {"role": "user", "content": [{"type": "text", "text": "run it"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]}
    ]});
    assert!(!carries_tool_result(
        Api::AnthropicMessages,
        &anthropic_first
    ));
    assert!(carries_tool_result(
        Api::AnthropicMessages,
        &anthropic_second
    ));

    let responses_first = json!({"input": [{"role": "user", "content": "run it"}]});
    let responses_second = json!({"input": [
        {"type": "function_call", "call_id": "call_1", "name": "exec_command", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "ok"}
    ]});
    assert!(!carries_tool_result(Api::OpenAiResponses, &responses_first));
    assert!(carries_tool_result(Api::OpenAiResponses, &responses_second));
    assert!(!carries_tool_result(
        Api::OpenAiResponses,
        &json!({"input": "a plain string"})
    ));

    let chat_first = json!({"messages": [{"role": "user", "content": "run it"}]});
    let chat_second = json!({"messages": [
        {"role": "assistant", "tool_calls": [{"id": "call_1"}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "ok"}
    ]});
    assert!(!carries_tool_result(Api::OpenAiChat, &chat_first));
    assert!(carries_tool_result(Api::OpenAiChat, &chat_second));
    assert!(!carries_tool_result(Api::OpenAiChat, &Value::Null));
}

#[test]
fn offered_tools_are_read_from_every_shape() {
    let request = json!({"tools": [
        {"name": "Bash", "input_schema": {}},
        {"type": "function", "name": "exec_command"},
        {"type": "function", "function": {"name": "bash"}},
        "read",
        {"type": "web_search"}
    ]});
    assert_eq!(
        offered_tools(&request),
        ["Bash", "exec_command", "bash", "read"]
    );
    assert!(offered_tools(&json!({})).is_empty());
}

#[test]
fn stream_events_renders_the_long_stream_once() {
    let default = Prepared::new(Behaviour::default());
    let one = Prepared::new(Behaviour {
        stream_events: Some(1),
        ..Behaviour::default()
    });
    let long = Prepared::new(Behaviour {
        stream_events: Some(3),
        ..Behaviour::default()
    });
    for api in Api::ALL {
        assert_eq!(default.text_stream(api), api.fixture_stream());
        assert_eq!(one.text_stream(api), api.fixture_stream());
        assert!(long.text_stream(api).len() > api.fixture_stream().len());
    }
}
