//! What the worker reads out of a model request body before forwarding it: the model, whether
//! it streams, and (only when records carry content) the text of the last user message.
//!
//! The body is the client's JSON; a body that is not JSON, or lacks a field, gives `None`
//! for that field and is still forwarded: the provider, not the worker, answers bad requests.

use serde::Deserialize;
use serde_json::Value;

use crate::WireFormat;

/// The fields of a request body that records and policy use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestFacts {
    /// The top-level `model`.
    pub model: Option<String>,
    /// The top-level `stream` (absent is false).
    pub stream: bool,
}

#[derive(Deserialize)]
struct Head {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    stream: Option<bool>,
}

impl RequestFacts {
    /// Reads `model` and `stream` without building the rest of the document.
    pub fn read(body: &[u8]) -> RequestFacts {
        match serde_json::from_slice::<Head>(body) {
            Ok(head) => RequestFacts {
                model: head.model,
                stream: head.stream.unwrap_or(false),
            },
            Err(_) => RequestFacts::default(),
        }
    }
}

/// The text of the last user message of a request, in the request's wire format: Anthropic
/// `messages` (a string, or its `text` and `tool_result` blocks), OpenAI Responses `input` (a
/// string, or the last user item's `input_text` parts and function call outputs), OpenAI Chat
/// `messages`. Blocks are joined with a newline; `None` when there is no such text.
pub fn last_user_text(format: WireFormat, body: &[u8]) -> Option<String> {
    let doc: Value = serde_json::from_slice(body).ok()?;
    let item = match format {
        WireFormat::AnthropicMessages | WireFormat::OpenAiChatCompletions => doc
            .get("messages")?
            .as_array()?
            .iter()
            .rev()
            .find(|m| is_user_turn(m))?,
        WireFormat::OpenAiResponses => match doc.get("input")? {
            Value::String(text) => return non_empty(text.clone()),
            Value::Array(items) => items.iter().rev().find(|m| is_user_turn(m))?,
            _ => return None,
        },
    };
    let mut parts = Vec::new();
    match item {
        Value::Object(fields)
            if fields.get("type").and_then(Value::as_str) == Some("function_call_output") =>
        {
            collect_text(fields.get("output")?, &mut parts);
        }
        other => collect_text(other.get("content")?, &mut parts),
    }
    non_empty(parts.join("\n"))
}

/// A user message, or a Responses tool output item (what the user side sends back).
fn is_user_turn(item: &Value) -> bool {
    item.get("role").and_then(Value::as_str) == Some("user")
        || item.get("type").and_then(Value::as_str) == Some("function_call_output")
}

/// The text of a content value: a string, or an array of blocks with `text` (any text block
/// type) or nested `content` (a `tool_result`).
fn collect_text(content: &Value, out: &mut Vec<String>) {
    match content {
        Value::String(text) => out.push(text.clone()),
        Value::Array(blocks) => {
            for block in blocks {
                if let Some(text) = block.get("text").and_then(Value::as_str) {
                    out.push(text.to_owned());
                } else if let Some(inner) = block.get("content") {
                    collect_text(inner, out);
                } else if let Some(output) = block.get("output") {
                    collect_text(output, out);
                }
            }
        }
        _ => {}
    }
}

fn non_empty(text: String) -> Option<String> {
    (!text.is_empty()).then_some(text)
}

#[cfg(test)]
mod tests;
