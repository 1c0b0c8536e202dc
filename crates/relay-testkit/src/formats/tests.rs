use serde_json::{Value, json};

use super::*;
use crate::test_support::{SseEvent, sse_events};

#[test]
fn one_default_delta_renders_each_fixture_byte_for_byte() {
    for api in Api::ALL {
        let rendered = text_stream(api, DEFAULT_TEXT, 1);
        assert_eq!(
            rendered.as_bytes(),
            api.fixture_stream(),
            "{api:?} stream differs from its fixture"
        );
    }
}

/// Named events carry their name as `type` too; Responses events are numbered from 0 without gaps.
fn assert_well_formed(api: Api, events: &[SseEvent]) {
    let mut sequence = 0;
    for event in events {
        if event.data == "[DONE]" {
            continue;
        }
        let data = event.json();
        match api {
            Api::AnthropicMessages => {
                assert_eq!(event.name.as_deref(), data["type"].as_str());
            }
            Api::OpenAiResponses => {
                assert_eq!(event.name.as_deref(), data["type"].as_str());
                assert_eq!(data["sequence_number"], json!(sequence));
                sequence += 1;
            }
            Api::OpenAiChat => {
                assert_eq!(event.name, None);
                assert_eq!(data["object"], "chat.completion.chunk");
            }
        }
    }
    if api == Api::OpenAiChat {
        assert_eq!(events.last().map(|e| e.data.as_str()), Some("[DONE]"));
    }
}

fn streamed_text(api: Api, events: &[SseEvent]) -> String {
    events
        .iter()
        .filter(|e| e.data != "[DONE]")
        .filter_map(|e| {
            let data = e.json();
            match api {
                Api::AnthropicMessages => data["delta"]["text"].as_str().map(str::to_owned),
                Api::OpenAiResponses => (data["type"] == "response.output_text.delta")
                    .then(|| data["delta"].as_str().map(str::to_owned))
                    .flatten(),
                Api::OpenAiChat => data["choices"][0]["delta"]["content"]
                    .as_str()
                    .map(str::to_owned),
            }
        })
        .collect()
}

#[test]
fn long_text_streams_repeat_the_delta_and_stay_consistent() {
    for api in Api::ALL {
        let events = sse_events(text_stream(api, DEFAULT_TEXT, 40).as_bytes());
        assert_well_formed(api, &events);
        assert_eq!(
            streamed_text(api, &events),
            DEFAULT_TEXT.repeat(40),
            "{api:?}"
        );
    }
    let events = sse_events(text_stream(Api::OpenAiResponses, "ab", 3).as_bytes());
    let done = events
        .iter()
        .find(|e| e.name.as_deref() == Some("response.output_text.done"))
        .unwrap()
        .json();
    assert_eq!(done["text"], "ababab");
    let completed = events.last().unwrap().json();
    assert_eq!(
        completed["response"]["output"][0]["content"][0]["text"],
        "ababab"
    );
}

#[test]
fn text_is_escaped_in_streams() {
    let events =
        sse_events(text_stream(Api::AnthropicMessages, "a \"quoted\"\nline", 1).as_bytes());
    assert_eq!(
        streamed_text(Api::AnthropicMessages, &events),
        "a \"quoted\"\nline"
    );
}

fn arguments_of(call: &ToolCall) -> Value {
    serde_json::from_str(&call.arguments).unwrap()
}

#[test]
fn every_variant_of_the_tool_call_carries_the_chosen_command() {
    let command = "rm -rf '/tmp/canary \"x\"'";
    let codex = ToolCall::choose_running(Api::OpenAiResponses, &["exec_command"], 1, command);
    assert_eq!(arguments_of(&codex), json!({"cmd": command}));
    let old_codex = ToolCall::choose_running(Api::OpenAiResponses, &["shell"], 1, command);
    assert_eq!(
        arguments_of(&old_codex),
        json!({"command": ["bash", "-lc", command]})
    );
    let claude = ToolCall::choose_running(Api::AnthropicMessages, &["Bash"], 1, command);
    assert_eq!(arguments_of(&claude), json!({"command": command}));
    let pi = ToolCall::choose_running(Api::OpenAiChat, &["bash"], 1, command);
    assert_eq!(arguments_of(&pi), json!({"command": command}));
}

#[test]
fn tool_choice_follows_the_offered_tools() {
    let codex = ToolCall::choose(Api::OpenAiResponses, &["write_stdin", "exec_command"], 7);
    assert_eq!(codex.name, "exec_command");
    assert_eq!(arguments_of(&codex), json!({"cmd": TOOL_COMMAND}));
    assert_eq!(codex.call_id, "call_mock_000000000007");

    let pi_responses = ToolCall::choose(Api::OpenAiResponses, &["read", "bash"], 1);
    assert_eq!(pi_responses.name, "bash");
    assert_eq!(
        arguments_of(&pi_responses),
        json!({"command": TOOL_COMMAND})
    );

    let old_codex = ToolCall::choose(Api::OpenAiResponses, &["shell"], 1);
    assert_eq!(
        arguments_of(&old_codex),
        json!({"command": ["bash", "-lc", TOOL_COMMAND]})
    );

    let claude = ToolCall::choose(Api::AnthropicMessages, &["Agent", "Bash"], 1);
    assert_eq!(claude.name, "Bash");
    assert!(claude.call_id.starts_with("toolu_"));
    let pi_anthropic = ToolCall::choose(Api::AnthropicMessages, &["read", "bash"], 1);
    assert_eq!(pi_anthropic.name, "bash");

    assert_eq!(
        ToolCall::choose(Api::AnthropicMessages, &[], 1).name,
        "Bash"
    );
    assert_eq!(
        ToolCall::choose(Api::OpenAiResponses, &[], 1).name,
        "exec_command"
    );
    assert_eq!(ToolCall::choose(Api::OpenAiChat, &[], 1).name, "bash");
}

#[test]
fn anthropic_tool_stream_is_a_tool_use_turn() {
    let call = ToolCall::choose(Api::AnthropicMessages, &["Bash"], 3);
    let events = sse_events(tool_stream(Api::AnthropicMessages, &call, 3).as_bytes());
    assert_well_formed(Api::AnthropicMessages, &events);
    let names: Vec<_> = events.iter().map(|e| e.name.clone().unwrap()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "ping",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    let block = events[1].json();
    assert_eq!(block["content_block"]["type"], "tool_use");
    assert_eq!(block["content_block"]["name"], "Bash");
    assert_eq!(block["content_block"]["id"], call.call_id.as_str());
    assert_eq!(block["content_block"]["input"], json!({}));
    let delta = events[3].json();
    assert_eq!(delta["delta"]["type"], "input_json_delta");
    let input: Value =
        serde_json::from_str(delta["delta"]["partial_json"].as_str().unwrap()).unwrap();
    assert_eq!(input, json!({"command": TOOL_COMMAND}));
    assert_eq!(events[5].json()["delta"]["stop_reason"], "tool_use");
}

#[test]
fn responses_tool_stream_is_a_function_call_turn() {
    let call = ToolCall::choose(Api::OpenAiResponses, &["exec_command"], 3);
    let events = sse_events(tool_stream(Api::OpenAiResponses, &call, 3).as_bytes());
    assert_well_formed(Api::OpenAiResponses, &events);
    let names: Vec<_> = events.iter().map(|e| e.name.clone().unwrap()).collect();
    assert_eq!(
        names,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed"
        ]
    );
    let item = &events[5].json()["item"];
    assert_eq!(item["type"], "function_call");
    assert_eq!(item["name"], "exec_command");
    assert_eq!(item["call_id"], call.call_id.as_str());
    let arguments: Value = serde_json::from_str(item["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(arguments, json!({"cmd": TOOL_COMMAND}));
    let completed = events[6].json();
    assert_eq!(completed["response"]["status"], "completed");
    assert_eq!(completed["response"]["output"][0], *item);
}

#[test]
fn chat_tool_stream_is_a_tool_calls_turn() {
    let call = ToolCall::choose(Api::OpenAiChat, &["read", "bash"], 3);
    let events = sse_events(tool_stream(Api::OpenAiChat, &call, 3).as_bytes());
    assert_well_formed(Api::OpenAiChat, &events);
    let first = events[0].json();
    let opening = &first["choices"][0]["delta"]["tool_calls"][0];
    assert_eq!(opening["function"]["name"], "bash");
    assert_eq!(opening["id"], call.call_id.as_str());
    let second = events[1].json();
    let arguments = second["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"]
        .as_str()
        .unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(arguments).unwrap(),
        json!({"command": TOOL_COMMAND})
    );
    assert_eq!(
        events[2].json()["choices"][0]["finish_reason"],
        "tool_calls"
    );
}

#[test]
fn json_answers_have_each_api_shape() {
    let anthropic: Value =
        serde_json::from_str(&text_json(Api::AnthropicMessages, "x", 1)).unwrap();
    assert_eq!(anthropic["type"], "message");
    assert_eq!(
        anthropic["content"][0],
        json!({"type": "text", "text": "x"})
    );
    assert_eq!(anthropic["stop_reason"], "end_turn");

    let responses: Value = serde_json::from_str(&text_json(Api::OpenAiResponses, "x", 1)).unwrap();
    assert_eq!(responses["object"], "response");
    assert_eq!(responses["status"], "completed");
    assert_eq!(responses["output"][0]["content"][0]["text"], "x");

    let chat: Value = serde_json::from_str(&text_json(Api::OpenAiChat, "x", 1)).unwrap();
    assert_eq!(chat["object"], "chat.completion");
    assert_eq!(chat["choices"][0]["message"]["content"], "x");
    assert_eq!(chat["choices"][0]["finish_reason"], "stop");

    let call = ToolCall::choose(Api::AnthropicMessages, &[], 2);
    let tool: Value = serde_json::from_str(&tool_json(Api::AnthropicMessages, &call, 2)).unwrap();
    assert_eq!(
        tool["content"][0]["input"],
        json!({"command": TOOL_COMMAND})
    );
    assert_eq!(tool["stop_reason"], "tool_use");

    let call = ToolCall::choose(Api::OpenAiResponses, &[], 2);
    let tool: Value = serde_json::from_str(&tool_json(Api::OpenAiResponses, &call, 2)).unwrap();
    assert_eq!(tool["output"][0]["type"], "function_call");
    assert_eq!(tool["output"][0]["name"], "exec_command");

    let call = ToolCall::choose(Api::OpenAiChat, &[], 2);
    let tool: Value = serde_json::from_str(&tool_json(Api::OpenAiChat, &call, 2)).unwrap();
    assert_eq!(
        tool["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
        "bash"
    );
    assert_eq!(tool["choices"][0]["finish_reason"], "tool_calls");

    let models: Value = serde_json::from_str(&models_json(false)).unwrap();
    assert_eq!(models["object"], "list");
    let models: Value = serde_json::from_str(&models_json(true)).unwrap();
    assert_eq!(models["data"][0]["type"], "model");
    assert_eq!(models["has_more"], false);
}
