//! Which route a request takes and what it is answered, before any fault injection.

use bytes::Bytes;
use http::header::{ALLOW, CACHE_CONTROL, CONTENT_TYPE, HeaderValue};
use http::{HeaderMap, Method, StatusCode};
use serde::Deserialize;
use serde_json::Value;

use crate::behaviour::{Behaviour, CannedResponse};
use crate::formats::{self, Api, DEFAULT_TEXT, TOOL_DONE_TEXT, ToolCall};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// `HEAD /`, Claude Code's probe.
    Probe,
    /// `GET /v1/models`, `GET /models`.
    Models,
    /// `POST /v1/messages/count_tokens`.
    CountTokens,
    /// A model turn; the Codex ChatGPT path always streams.
    Turn {
        api: Api,
        always_stream: bool,
    },
    NotFound,
    WrongMethod {
        allow: &'static str,
    },
}

pub(crate) fn route(method: &Method, path: &str) -> Route {
    let (expected, found) = match path {
        "/" => (Method::HEAD, Route::Probe),
        "/v1/models" | "/models" => (Method::GET, Route::Models),
        "/v1/messages/count_tokens" => (Method::POST, Route::CountTokens),
        "/v1/messages" => (
            Method::POST,
            Route::Turn {
                api: Api::AnthropicMessages,
                always_stream: false,
            },
        ),
        "/v1/responses" | "/responses" => (
            Method::POST,
            Route::Turn {
                api: Api::OpenAiResponses,
                always_stream: false,
            },
        ),
        "/backend-api/codex/responses" => (
            Method::POST,
            Route::Turn {
                api: Api::OpenAiResponses,
                always_stream: true,
            },
        ),
        "/v1/chat/completions" | "/chat/completions" => (
            Method::POST,
            Route::Turn {
                api: Api::OpenAiChat,
                always_stream: false,
            },
        ),
        _ => return Route::NotFound,
    };
    let head_of_get = expected == Method::GET && *method == Method::HEAD;
    if *method == expected || head_of_get {
        found
    } else {
        let allow = if expected == Method::HEAD {
            "HEAD"
        } else if expected == Method::GET {
            "GET, HEAD"
        } else {
            "POST"
        };
        Route::WrongMethod { allow }
    }
}

/// A behaviour with its long text streams rendered once, when it is set, rather than per request.
#[derive(Debug)]
pub(crate) struct Prepared {
    pub(crate) behaviour: Behaviour,
    text_streams: [Bytes; 3],
}

impl Prepared {
    pub(crate) fn new(behaviour: Behaviour) -> Prepared {
        let stream = |api: Api| match behaviour.stream_events {
            None | Some(1) => Bytes::from_static(api.fixture_stream()),
            Some(deltas) => Bytes::from(formats::text_stream(api, DEFAULT_TEXT, deltas)),
        };
        let text_streams = Api::ALL.map(stream);
        Prepared {
            behaviour,
            text_streams,
        }
    }

    fn text_stream(&self, api: Api) -> Bytes {
        let index = Api::ALL.iter().position(|a| *a == api).unwrap_or(0);
        self.text_streams[index].clone()
    }
}

/// An answer before it is framed, paced or cut.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
    /// An event stream: written one event per frame unless chunked.
    pub(crate) sse: bool,
}

impl Answer {
    fn new(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Answer {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        Answer {
            status,
            headers,
            body: body.into(),
            sse: false,
        }
    }

    fn json(body: String) -> Answer {
        Answer::new(StatusCode::OK, "application/json", body)
    }

    fn sse(body: impl Into<Bytes>) -> Answer {
        let mut answer = Answer::new(StatusCode::OK, "text/event-stream", body);
        answer
            .headers
            .insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        answer.sse = true;
        answer
    }

    fn empty(status: StatusCode) -> Answer {
        Answer {
            status,
            headers: HeaderMap::new(),
            body: Bytes::new(),
            sse: false,
        }
    }

    pub(crate) fn canned(canned: &CannedResponse) -> Answer {
        let sse = canned
            .headers
            .get(CONTENT_TYPE)
            .is_some_and(|value| value.as_bytes().starts_with(b"text/event-stream"));
        Answer {
            status: canned.status,
            headers: canned.headers.clone(),
            body: canned.body.clone(),
            sse,
        }
    }
}

/// The few request fields the default answers depend on.
#[derive(Deserialize)]
struct StreamFlag {
    #[serde(default)]
    stream: Option<Value>,
}

pub(crate) fn answer(
    route: Route,
    path: &str,
    headers: &HeaderMap,
    body: &[u8],
    prepared: &Prepared,
    request_id: u64,
) -> Answer {
    match route {
        Route::Probe => Answer::empty(StatusCode::OK),
        Route::Models => {
            let anthropic = headers.contains_key("anthropic-version");
            let mut answer = Answer::json(formats::models_json(anthropic));
            answer
                .headers
                .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
            answer
        }
        Route::CountTokens => Answer::json(formats::count_tokens_json()),
        Route::Turn { api, always_stream } => turn(api, always_stream, body, prepared, request_id),
        Route::NotFound => Answer::new(
            StatusCode::NOT_FOUND,
            "application/json",
            formats::error_json(
                "not_found_error",
                &format!("relay-testkit has no route for {path}"),
            ),
        ),
        Route::WrongMethod { allow } => {
            let mut answer = Answer::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "application/json",
                formats::error_json("invalid_request_error", "method not allowed"),
            );
            answer
                .headers
                .insert(ALLOW, HeaderValue::from_static(allow));
            answer
        }
    }
}

fn turn(
    api: Api,
    always_stream: bool,
    body: &[u8],
    prepared: &Prepared,
    request_id: u64,
) -> Answer {
    if !prepared.behaviour.tool_round_trip {
        // Only `stream` matters here; a body that is not JSON (compressed, say) gets the JSON answer.
        let stream = always_stream
            || serde_json::from_slice::<StreamFlag>(body)
                .is_ok_and(|flag| flag.stream == Some(Value::Bool(true)));
        return if stream {
            Answer::sse(prepared.text_stream(api))
        } else {
            Answer::json(formats::text_json(api, DEFAULT_TEXT, request_id))
        };
    }
    let request = serde_json::from_slice::<Value>(body).unwrap_or(Value::Null);
    let stream = always_stream || request.get("stream") == Some(&Value::Bool(true));
    if carries_tool_result(api, &request) {
        return if stream {
            Answer::sse(formats::text_stream(api, TOOL_DONE_TEXT, 1))
        } else {
            Answer::json(formats::text_json(api, TOOL_DONE_TEXT, request_id))
        };
    }
    let command = prepared
        .behaviour
        .tool_command
        .as_deref()
        .unwrap_or(formats::TOOL_COMMAND);
    let call = ToolCall::choose_running(api, &offered_tools(&request), request_id, command);
    if stream {
        Answer::sse(formats::tool_stream(api, &call, request_id))
    } else {
        Answer::json(formats::tool_json(api, &call, request_id))
    }
}

fn array<'a>(value: &'a Value, key: &str) -> &'a [Value] {
    value
        .get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn str_at<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str)
}

/// Whether the conversation already holds a tool result: an Anthropic `tool_result` block, a Responses `*_call_output` item, or a Chat `tool` message.
pub(crate) fn carries_tool_result(api: Api, request: &Value) -> bool {
    match api {
        Api::AnthropicMessages => array(request, "messages").iter().any(|message| {
            array(message, "content")
                .iter()
                .any(|block| str_at(block, "type") == Some("tool_result"))
        }),
        Api::OpenAiResponses => array(request, "input")
            .iter()
            .any(|item| str_at(item, "type").is_some_and(|kind| kind.ends_with("_call_output"))),
        Api::OpenAiChat => array(request, "messages")
            .iter()
            .any(|message| str_at(message, "role") == Some("tool")),
    }
}

/// The names of the tools a request offers (Anthropic and Responses `name`, Chat `function.name`, or a bare string in trimmed fixtures).
pub(crate) fn offered_tools(request: &Value) -> Vec<&str> {
    array(request, "tools")
        .iter()
        .filter_map(|tool| {
            tool.as_str()
                .or_else(|| str_at(tool, "name"))
                .or_else(|| tool.get("function").and_then(|f| str_at(f, "name")))
        })
        .collect()
}

#[cfg(test)]
mod tests;
