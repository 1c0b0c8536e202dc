//! What the worker reads out of a model request body before forwarding it: the model, whether
//! it streams, and (only when records carry content) the text of the last user message.
//!
//! The body is the client's JSON; a body that lacks a field gives `None` for that field and
//! is still forwarded: the provider, not the worker, answers bad requests. One whose model
//! cannot be read for certain says so, for the policy to refuse when a rule must judge it.

use serde::Deserialize;
use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde_json::Value;

use crate::WireFormat;

/// The fields of a request body that records and policy use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestFacts {
    /// The top-level `model`; the last one when it is named more than once, as most JSON
    /// readers take it.
    pub model: Option<String>,
    /// No one model can be read for certain: the body is not a JSON object, or names
    /// `model` more than once with different values, or gives it a value that is not a
    /// string. A provider's reader may take another value than this one, so a rule on the
    /// model cannot tell which one it would judge.
    pub model_unclear: bool,
    /// The top-level `stream` (absent, or not a boolean, is false).
    pub stream: bool,
}

impl RequestFacts {
    /// Reads `model` and `stream` without building the rest of the document.
    pub fn read(body: &[u8]) -> RequestFacts {
        serde_json::from_slice::<RequestFacts>(body).unwrap_or(RequestFacts {
            model_unclear: true,
            ..RequestFacts::default()
        })
    }
}

/// Reads a top-level object field by field, so a repeated `model` is seen rather than
/// refused as a duplicate field, and skips every other field without building it.
impl<'de> Deserialize<'de> for RequestFacts {
    fn deserialize<D: serde::Deserializer<'de>>(reader: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = RequestFacts;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut fields: A) -> Result<RequestFacts, A::Error> {
                let mut facts = RequestFacts::default();
                let mut first: Option<Scalar> = None;
                while let Some(key) = fields.next_key::<Key>()? {
                    match key {
                        Key::Model => {
                            let value: Scalar = fields.next_value()?;
                            let text = match &value {
                                Scalar::Text(text) => Some(text.clone()),
                                _ => None,
                            };
                            facts.model_unclear |= text.is_none()
                                || first.as_ref().is_some_and(|first| *first != value);
                            facts.model = text;
                            first.get_or_insert(value);
                        }
                        Key::Stream => {
                            facts.stream = fields.next_value::<Scalar>()? == Scalar::Bool(true);
                        }
                        Key::Other => {
                            fields.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(facts)
            }
        }
        reader.deserialize_map(Fields)
    }
}

/// A top-level field's name, escapes undone, told apart without keeping it.
enum Key {
    Model,
    Stream,
    Other,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: serde::Deserializer<'de>>(reader: D) -> Result<Self, D::Error> {
        struct Name;
        impl Visitor<'_> for Name {
            type Value = Key;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a field name")
            }

            /// `model` and `stream` in any case: some providers' readers (Go's
            /// `encoding/json`) match a field's name without case, so `Model` may be the one
            /// they take.
            fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<Key, E> {
                Ok(if name.eq_ignore_ascii_case("model") {
                    Key::Model
                } else if name.eq_ignore_ascii_case("stream") {
                    Key::Stream
                } else {
                    Key::Other
                })
            }
        }
        reader.deserialize_identifier(Name)
    }
}

/// A field's value as far as the facts need it: text, a boolean, null, or anything else,
/// which is skipped without being built (a 30 MiB array is not a model).
#[derive(Debug, PartialEq)]
pub(crate) enum Scalar {
    Text(String),
    Bool(bool),
    /// A whole number from 0 to `u64::MAX`.
    Count(u64),
    Null,
    Other,
}

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: serde::Deserializer<'de>>(reader: D) -> Result<Self, D::Error> {
        struct Any;
        impl<'de> Visitor<'de> for Any {
            type Value = Scalar;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("any JSON value")
            }

            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Scalar, E> {
                Ok(Scalar::Text(text.to_owned()))
            }

            fn visit_bool<E: serde::de::Error>(self, value: bool) -> Result<Scalar, E> {
                Ok(Scalar::Bool(value))
            }

            fn visit_unit<E: serde::de::Error>(self) -> Result<Scalar, E> {
                Ok(Scalar::Null)
            }

            fn visit_i64<E: serde::de::Error>(self, value: i64) -> Result<Scalar, E> {
                Ok(u64::try_from(value).map_or(Scalar::Other, Scalar::Count))
            }

            fn visit_u64<E: serde::de::Error>(self, value: u64) -> Result<Scalar, E> {
                Ok(Scalar::Count(value))
            }

            fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Scalar, E> {
                Ok(Scalar::Other)
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut items: A,
            ) -> Result<Scalar, A::Error> {
                while items.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Scalar::Other)
            }

            fn visit_map<A: MapAccess<'de>>(self, mut fields: A) -> Result<Scalar, A::Error> {
                while fields.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Scalar::Other)
            }
        }
        reader.deserialize_any(Any)
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
