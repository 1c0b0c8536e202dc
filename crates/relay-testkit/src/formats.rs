//! The answers of the three provider APIs: text and tool-call streams (SSE) and their non-streaming JSON counterparts.
//!
//! A text stream with one delta of [`DEFAULT_TEXT`] renders byte for byte as the captured fixture of its API (a unit test holds this), so every other stream mirrors an event sequence the real harnesses accepted.

use crate::json::{Doc, arr, obj, s};

/// The text of the default answer, as in the captured fixture streams.
pub const DEFAULT_TEXT: &str = "hi from mock";
/// The text answered once a request carries the tool result (`Behaviour::tool_round_trip`).
pub const TOOL_DONE_TEXT: &str = "tool round trip done";
/// The shell command of the tool call answered on the first turn (`Behaviour::tool_round_trip`).
pub const TOOL_COMMAND: &str = "echo relay-tool-ok";

// Identifiers and timestamp of the captured fixture streams.
const ANTHROPIC_MESSAGE_ID: &str = "msg_mock_651f7b64e8cb";
const RESPONSE_ID: &str = "resp_mock_19f3d5c9263e";
const RESPONSE_MESSAGE_ID: &str = "msg_mock_d2e88eea";
const CHAT_ID: &str = "chatcmpl-mockccb4ed379d";
const CREATED: u64 = 1_795_997_964;
const MODEL: &str = "m";

/// A provider wire format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Api {
    /// Anthropic Messages (`/v1/messages`).
    AnthropicMessages,
    /// OpenAI Responses (`/v1/responses`, `/responses`, `/backend-api/codex/responses`).
    OpenAiResponses,
    /// OpenAI Chat Completions (`/v1/chat/completions`, `/chat/completions`).
    OpenAiChat,
}

impl Api {
    pub const ALL: [Api; 3] = [
        Api::AnthropicMessages,
        Api::OpenAiResponses,
        Api::OpenAiChat,
    ];

    /// The captured fixture stream of this API, the stand-in's default streamed answer.
    pub fn fixture_stream(self) -> &'static [u8] {
        match self {
            Api::AnthropicMessages => crate::fixtures::ANTHROPIC_MESSAGES_SSE,
            Api::OpenAiResponses => crate::fixtures::OPENAI_RESPONSES_SSE,
            Api::OpenAiChat => crate::fixtures::OPENAI_CHAT_SSE,
        }
    }
}

/// The tool call a first turn is answered with, chosen from the tools the request offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ToolCall {
    pub(crate) name: String,
    /// The arguments as compact JSON text (what OpenAI puts in `arguments` and Anthropic streams as `partial_json`).
    pub(crate) arguments: String,
    /// `toolu_…` (Anthropic) or `call_…` (OpenAI): what the tool result refers to.
    pub(crate) call_id: String,
    /// The Responses output item id (`fc_…`).
    pub(crate) item_id: String,
}

// Tool names in order of preference per API; the first one the request offers is called.
const ANTHROPIC_TOOLS: [&str; 2] = ["Bash", "bash"];
const RESPONSES_TOOLS: [&str; 4] = ["exec_command", "shell_command", "shell", "bash"];
const CHAT_TOOLS: [&str; 5] = ["bash", "Bash", "exec_command", "shell_command", "shell"];

impl ToolCall {
    /// Picks the shell tool among `offered` (Claude Code's `Bash`, Codex's `exec_command`, pi's `bash`, …), or the API's usual one when none is offered.
    #[cfg(test)]
    pub(crate) fn choose(api: Api, offered: &[&str], request_id: u64) -> ToolCall {
        ToolCall::choose_running(api, offered, request_id, TOOL_COMMAND)
    }

    /// [`ToolCall::choose`] with `command` as the shell command (`Behaviour::tool_command`).
    pub(crate) fn choose_running(
        api: Api,
        offered: &[&str],
        request_id: u64,
        command: &str,
    ) -> ToolCall {
        let preference: &[&str] = match api {
            Api::AnthropicMessages => &ANTHROPIC_TOOLS,
            Api::OpenAiResponses => &RESPONSES_TOOLS,
            Api::OpenAiChat => &CHAT_TOOLS,
        };
        let name = preference
            .iter()
            .find(|name| offered.contains(name))
            .or_else(|| preference.first())
            .copied()
            .unwrap_or("bash");
        let arguments = match name {
            // Codex's unified exec tool takes `cmd`; its older `shell` tool an argv array.
            "exec_command" => serde_json::json!({"cmd": command}),
            "shell" => serde_json::json!({"command": ["bash", "-lc", command]}),
            _ => serde_json::json!({"command": command}),
        }
        .to_string();
        let call_id = match api {
            Api::AnthropicMessages => format!("toolu_mock_{request_id:012x}"),
            Api::OpenAiResponses | Api::OpenAiChat => format!("call_mock_{request_id:012x}"),
        };
        ToolCall {
            name: name.to_owned(),
            arguments,
            call_id,
            item_id: format!("fc_mock_{request_id:012x}"),
        }
    }
}

fn event(out: &mut String, name: &str, data: &Doc) {
    out.push_str("event: ");
    out.push_str(name);
    out.push_str("\ndata: ");
    data.write(out);
    out.push_str("\n\n");
}

fn data_only(out: &mut String, data: &Doc) {
    out.push_str("data: ");
    data.write(out);
    out.push_str("\n\n");
}

/// A text answer streamed as `deltas` content deltas of `delta` each.
pub(crate) fn text_stream(api: Api, delta: &str, deltas: usize) -> String {
    let mut out = String::new();
    match api {
        Api::AnthropicMessages => anthropic_text_stream(&mut out, delta, deltas),
        Api::OpenAiResponses => responses_text_stream(&mut out, delta, deltas),
        Api::OpenAiChat => chat_text_stream(&mut out, delta, deltas),
    }
    out
}

/// A tool call streamed in the API's format.
pub(crate) fn tool_stream(api: Api, call: &ToolCall, request_id: u64) -> String {
    let mut out = String::new();
    match api {
        Api::AnthropicMessages => anthropic_tool_stream(&mut out, call, request_id),
        Api::OpenAiResponses => responses_tool_stream(&mut out, call),
        Api::OpenAiChat => chat_tool_stream(&mut out, call),
    }
    out
}

/// A complete non-streaming text answer.
pub(crate) fn text_json(api: Api, text: &str, request_id: u64) -> String {
    match api {
        Api::AnthropicMessages => anthropic_message(
            request_id,
            obj([("type", s("text")), ("text", s(text))]),
            "end_turn",
        ),
        Api::OpenAiResponses => response_object(
            &request_id_response(request_id),
            message_item(text, "completed"),
        ),
        Api::OpenAiChat => chat_completion(
            request_id,
            obj([("role", s("assistant")), ("content", s(text))]),
            "stop",
        ),
    }
    .to_text()
}

/// A complete non-streaming tool-call answer.
pub(crate) fn tool_json(api: Api, call: &ToolCall, request_id: u64) -> String {
    match api {
        Api::AnthropicMessages => anthropic_message(
            request_id,
            obj([
                ("type", s("tool_use")),
                ("id", s(&call.call_id)),
                ("name", s(&call.name)),
                ("input", Doc::Raw(call.arguments.clone())),
            ]),
            "tool_use",
        ),
        Api::OpenAiResponses => response_object(
            &request_id_response(request_id),
            function_call_item(call, &call.arguments, "completed"),
        ),
        Api::OpenAiChat => chat_completion(
            request_id,
            obj([
                ("role", s("assistant")),
                ("content", Doc::Null),
                (
                    "tool_calls",
                    arr([obj([
                        ("id", s(&call.call_id)),
                        ("type", s("function")),
                        (
                            "function",
                            obj([("name", s(&call.name)), ("arguments", s(&call.arguments))]),
                        ),
                    ])]),
                ),
            ]),
            "tool_calls",
        ),
    }
    .to_text()
}

/// `POST /v1/messages/count_tokens`.
pub(crate) fn count_tokens_json() -> String {
    obj([("input_tokens", Doc::Int(10))]).to_text()
}

/// `GET /v1/models` in the OpenAI shape, or the Anthropic one.
pub(crate) fn models_json(anthropic: bool) -> String {
    if anthropic {
        let model = |id: &str, name: &str| {
            obj([
                ("type", s("model")),
                ("id", s(id)),
                ("display_name", s(name)),
                ("created_at", s("2026-01-01T00:00:00Z")),
            ])
        };
        obj([
            (
                "data",
                arr([model("mock-claude", "Mock Claude"), model("m", "Mock")]),
            ),
            ("has_more", Doc::Raw("false".to_owned())),
            ("first_id", s("mock-claude")),
            ("last_id", s("m")),
        ])
        .to_text()
    } else {
        let model = |id: &str| {
            obj([
                ("id", s(id)),
                ("object", s("model")),
                ("created", Doc::Int(CREATED)),
                ("owned_by", s("relay-testkit")),
            ])
        };
        obj([
            ("object", s("list")),
            (
                "data",
                arr([model("mock-model"), model("mock-gpt"), model("m")]),
            ),
        ])
        .to_text()
    }
}

/// An error body in the providers' shape, for unknown routes and wrong methods.
pub(crate) fn error_json(kind: &str, message: &str) -> String {
    obj([
        ("type", s("error")),
        ("error", obj([("type", s(kind)), ("message", s(message))])),
    ])
    .to_text()
}

// Anthropic Messages.

fn anthropic_message_start(id: &str) -> Doc {
    obj([
        ("type", s("message_start")),
        (
            "message",
            obj([
                ("id", s(id)),
                ("type", s("message")),
                ("role", s("assistant")),
                ("model", s(MODEL)),
                ("content", arr([])),
                ("stop_reason", Doc::Null),
                ("stop_sequence", Doc::Null),
                (
                    "usage",
                    obj([
                        ("input_tokens", Doc::Int(10)),
                        ("output_tokens", Doc::Int(1)),
                        ("cache_creation_input_tokens", Doc::Int(0)),
                        ("cache_read_input_tokens", Doc::Int(0)),
                    ]),
                ),
            ]),
        ),
    ])
}

fn anthropic_block_start(block: Doc) -> Doc {
    obj([
        ("type", s("content_block_start")),
        ("index", Doc::Int(0)),
        ("content_block", block),
    ])
}

fn anthropic_block_delta(delta: Doc) -> Doc {
    obj([
        ("type", s("content_block_delta")),
        ("index", Doc::Int(0)),
        ("delta", delta),
    ])
}

fn anthropic_tail(out: &mut String, stop_reason: &str, output_tokens: u64) {
    event(
        out,
        "content_block_stop",
        &obj([("type", s("content_block_stop")), ("index", Doc::Int(0))]),
    );
    event(
        out,
        "message_delta",
        &obj([
            ("type", s("message_delta")),
            (
                "delta",
                obj([
                    ("stop_reason", s(stop_reason)),
                    ("stop_sequence", Doc::Null),
                ]),
            ),
            ("usage", obj([("output_tokens", Doc::Int(output_tokens))])),
        ]),
    );
    event(out, "message_stop", &obj([("type", s("message_stop"))]));
}

fn anthropic_ping(out: &mut String) {
    event(out, "ping", &obj([("type", s("ping"))]));
}

fn anthropic_text_stream(out: &mut String, delta: &str, deltas: usize) {
    event(
        out,
        "message_start",
        &anthropic_message_start(ANTHROPIC_MESSAGE_ID),
    );
    event(
        out,
        "content_block_start",
        &anthropic_block_start(obj([("type", s("text")), ("text", s(""))])),
    );
    anthropic_ping(out);
    let delta = anthropic_block_delta(obj([("type", s("text_delta")), ("text", s(delta))]));
    for _ in 0..deltas {
        event(out, "content_block_delta", &delta);
    }
    anthropic_tail(out, "end_turn", 5 * deltas.max(1) as u64);
}

fn anthropic_tool_stream(out: &mut String, call: &ToolCall, request_id: u64) {
    event(
        out,
        "message_start",
        &anthropic_message_start(&format!("msg_mock_{request_id:012x}")),
    );
    event(
        out,
        "content_block_start",
        &anthropic_block_start(obj([
            ("type", s("tool_use")),
            ("id", s(&call.call_id)),
            ("name", s(&call.name)),
            ("input", obj([])),
        ])),
    );
    anthropic_ping(out);
    event(
        out,
        "content_block_delta",
        &anthropic_block_delta(obj([
            ("type", s("input_json_delta")),
            ("partial_json", s(&call.arguments)),
        ])),
    );
    anthropic_tail(out, "tool_use", 5);
}

fn anthropic_message(request_id: u64, block: Doc, stop_reason: &str) -> Doc {
    obj([
        ("id", s(&format!("msg_mock_{request_id:012x}"))),
        ("type", s("message")),
        ("role", s("assistant")),
        ("model", s(MODEL)),
        ("content", arr([block])),
        ("stop_reason", s(stop_reason)),
        ("stop_sequence", Doc::Null),
        (
            "usage",
            obj([
                ("input_tokens", Doc::Int(10)),
                ("output_tokens", Doc::Int(5)),
            ]),
        ),
    ])
}

// OpenAI Responses.

fn request_id_response(request_id: u64) -> String {
    format!("resp_mock_{request_id:012x}")
}

fn responses_usage() -> Doc {
    obj([
        ("input_tokens", Doc::Int(10)),
        (
            "input_tokens_details",
            obj([("cached_tokens", Doc::Int(0))]),
        ),
        ("output_tokens", Doc::Int(5)),
        (
            "output_tokens_details",
            obj([("reasoning_tokens", Doc::Int(0))]),
        ),
        ("total_tokens", Doc::Int(15)),
    ])
}

fn response_header(id: &str, output: Vec<Doc>, status: &str) -> Vec<(&'static str, Doc)> {
    vec![
        ("id", s(id)),
        ("object", s("response")),
        ("created_at", Doc::Int(CREATED)),
        ("model", s(MODEL)),
        ("output", Doc::Arr(output)),
        ("status", s(status)),
    ]
}

fn response_object(id: &str, item: Doc) -> Doc {
    let mut fields = response_header(id, vec![item], "completed");
    fields.push(("usage", responses_usage()));
    Doc::Obj(fields)
}

fn output_text(text: &str) -> Doc {
    obj([
        ("type", s("output_text")),
        ("text", s(text)),
        ("annotations", arr([])),
    ])
}

fn message_item(text: &str, status: &str) -> Doc {
    let content = if status == "completed" {
        arr([output_text(text)])
    } else {
        arr([])
    };
    obj([
        ("type", s("message")),
        ("id", s(RESPONSE_MESSAGE_ID)),
        ("role", s("assistant")),
        ("status", s(status)),
        ("content", content),
    ])
}

fn function_call_item(call: &ToolCall, arguments: &str, status: &str) -> Doc {
    obj([
        ("type", s("function_call")),
        ("id", s(&call.item_id)),
        ("call_id", s(&call.call_id)),
        ("name", s(&call.name)),
        ("arguments", s(arguments)),
        ("status", s(status)),
    ])
}

/// Writes Responses events, numbering them in order.
struct ResponsesWriter<'a> {
    out: &'a mut String,
    sequence: u64,
}

impl ResponsesWriter<'_> {
    fn emit(&mut self, kind: &'static str, mut fields: Vec<(&'static str, Doc)>) {
        fields.push(("type", s(kind)));
        fields.push(("sequence_number", Doc::Int(self.sequence)));
        self.sequence += 1;
        event(self.out, kind, &Doc::Obj(fields));
    }

    fn open(&mut self, id: &str) {
        for kind in ["response.created", "response.in_progress"] {
            let response = Doc::Obj(response_header(id, Vec::new(), "in_progress"));
            self.emit(kind, vec![("response", response)]);
        }
    }

    fn close(&mut self, id: &str, item: Doc) {
        let mut response = response_header(id, vec![item], "completed");
        response.push(("usage", responses_usage()));
        self.emit("response.completed", vec![("response", Doc::Obj(response))]);
    }
}

fn text_part_fields(extra: (&'static str, Doc)) -> Vec<(&'static str, Doc)> {
    vec![
        ("output_index", Doc::Int(0)),
        ("item_id", s(RESPONSE_MESSAGE_ID)),
        ("content_index", Doc::Int(0)),
        extra,
    ]
}

fn responses_text_stream(out: &mut String, delta: &str, deltas: usize) {
    let text = delta.repeat(deltas);
    let mut w = ResponsesWriter { out, sequence: 0 };
    w.open(RESPONSE_ID);
    w.emit(
        "response.output_item.added",
        vec![
            ("output_index", Doc::Int(0)),
            ("item", message_item("", "in_progress")),
        ],
    );
    w.emit(
        "response.content_part.added",
        text_part_fields(("part", output_text(""))),
    );
    for _ in 0..deltas {
        w.emit(
            "response.output_text.delta",
            text_part_fields(("delta", s(delta))),
        );
    }
    w.emit(
        "response.output_text.done",
        text_part_fields(("text", s(&text))),
    );
    w.emit(
        "response.content_part.done",
        text_part_fields(("part", output_text(&text))),
    );
    w.emit(
        "response.output_item.done",
        vec![
            ("output_index", Doc::Int(0)),
            ("item", message_item(&text, "completed")),
        ],
    );
    w.close(RESPONSE_ID, message_item(&text, "completed"));
}

fn responses_tool_stream(out: &mut String, call: &ToolCall) {
    let mut w = ResponsesWriter { out, sequence: 0 };
    let id = RESPONSE_ID;
    w.open(id);
    w.emit(
        "response.output_item.added",
        vec![
            ("output_index", Doc::Int(0)),
            ("item", function_call_item(call, "", "in_progress")),
        ],
    );
    w.emit(
        "response.function_call_arguments.delta",
        vec![
            ("output_index", Doc::Int(0)),
            ("item_id", s(&call.item_id)),
            ("delta", s(&call.arguments)),
        ],
    );
    w.emit(
        "response.function_call_arguments.done",
        vec![
            ("output_index", Doc::Int(0)),
            ("item_id", s(&call.item_id)),
            ("name", s(&call.name)),
            ("arguments", s(&call.arguments)),
        ],
    );
    w.emit(
        "response.output_item.done",
        vec![
            ("output_index", Doc::Int(0)),
            (
                "item",
                function_call_item(call, &call.arguments, "completed"),
            ),
        ],
    );
    w.close(id, function_call_item(call, &call.arguments, "completed"));
}

// OpenAI Chat Completions.

fn chat_chunk(delta: Doc, finish_reason: Option<&str>) -> Doc {
    obj([
        ("id", s(CHAT_ID)),
        ("object", s("chat.completion.chunk")),
        ("created", Doc::Int(CREATED)),
        ("model", s(MODEL)),
        (
            "choices",
            arr([obj([
                ("index", Doc::Int(0)),
                ("delta", delta),
                ("finish_reason", finish_reason.map_or(Doc::Null, s)),
            ])]),
        ),
    ])
}

fn chat_done(out: &mut String) {
    out.push_str("data: [DONE]\n\n");
}

fn chat_text_stream(out: &mut String, delta: &str, deltas: usize) {
    data_only(
        out,
        &chat_chunk(obj([("role", s("assistant")), ("content", s(""))]), None),
    );
    let chunk = chat_chunk(obj([("content", s(delta))]), None);
    for _ in 0..deltas {
        data_only(out, &chunk);
    }
    data_only(out, &chat_chunk(obj([]), Some("stop")));
    chat_done(out);
}

fn chat_tool_stream(out: &mut String, call: &ToolCall) {
    let opening = obj([
        ("role", s("assistant")),
        ("content", Doc::Null),
        (
            "tool_calls",
            arr([obj([
                ("index", Doc::Int(0)),
                ("id", s(&call.call_id)),
                ("type", s("function")),
                (
                    "function",
                    obj([("name", s(&call.name)), ("arguments", s(""))]),
                ),
            ])]),
        ),
    ]);
    data_only(out, &chat_chunk(opening, None));
    let arguments = obj([(
        "tool_calls",
        arr([obj([
            ("index", Doc::Int(0)),
            ("function", obj([("arguments", s(&call.arguments))])),
        ])]),
    )]);
    data_only(out, &chat_chunk(arguments, None));
    data_only(out, &chat_chunk(obj([]), Some("tool_calls")));
    chat_done(out);
}

fn chat_completion(request_id: u64, message: Doc, finish_reason: &str) -> Doc {
    obj([
        ("id", s(&format!("chatcmpl-mock{request_id:012x}"))),
        ("object", s("chat.completion")),
        ("created", Doc::Int(CREATED)),
        ("model", s(MODEL)),
        (
            "choices",
            arr([obj([
                ("index", Doc::Int(0)),
                ("message", message),
                ("finish_reason", s(finish_reason)),
            ])]),
        ),
        (
            "usage",
            obj([
                ("prompt_tokens", Doc::Int(10)),
                ("completion_tokens", Doc::Int(5)),
                ("total_tokens", Doc::Int(15)),
            ]),
        ),
    ])
}

#[cfg(test)]
mod tests;
