//! The captured fixtures, embedded: the three streams the harnesses accepted and the first requests each harness sent.

use std::fmt;

use bytes::Bytes;
use http::Method;
use http_body_util::Full;
use serde::Deserialize;
use serde::de::{MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::error::Error;
use crate::json::minify;

/// The captured Anthropic Messages stream (`fixtures/anthropic-messages.sse`).
pub const ANTHROPIC_MESSAGES_SSE: &[u8] = include_bytes!("../fixtures/anthropic-messages.sse");
/// The captured OpenAI Responses stream (`fixtures/openai-responses.sse`).
pub const OPENAI_RESPONSES_SSE: &[u8] = include_bytes!("../fixtures/openai-responses.sse");
/// The captured OpenAI Chat Completions stream (`fixtures/openai-chat.sse`).
pub const OPENAI_CHAT_SSE: &[u8] = include_bytes!("../fixtures/openai-chat.sse");

/// The names [`fixture_request`] accepts.
pub const FIXTURE_REQUEST_NAMES: [&str; 6] = [
    "claude-code-messages-1",
    "codex-responses-0",
    "codex-responses-1",
    "pi-0",
    "pi-1",
    "pi-2",
];

const FIXTURE_REQUEST_FILES: [&str; 6] = [
    include_str!("../fixtures/requests/claude-code-messages-1.json"),
    include_str!("../fixtures/requests/codex-responses-0.json"),
    include_str!("../fixtures/requests/codex-responses-1.json"),
    include_str!("../fixtures/requests/pi-0.json"),
    include_str!("../fixtures/requests/pi-1.json"),
    include_str!("../fixtures/requests/pi-2.json"),
];

/// Headers the capture recorded but a replay must not send as they were: the body was trimmed (so its length changed) and the address differs.
const DROPPED_HEADERS: [&str; 2] = ["content-length", "host"];

/// A request a real harness sent, ready to replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FixtureRequest {
    /// The fixture's name, one of [`FIXTURE_REQUEST_NAMES`].
    pub name: String,
    pub method: Method,
    /// Path and query, e.g. `/v1/messages?beta=true`.
    pub path: String,
    /// The captured headers in captured order and case, without `content-length` and `host`.
    pub headers: Vec<(String, String)>,
    /// The captured JSON body, compact, with its keys in captured order.
    pub body: Bytes,
}

impl FixtureRequest {
    /// An HTTP request for `base_url` (e.g. `StandIn::base_url()` or a relayd address, without a trailing slash).
    pub fn to_request(&self, base_url: &str) -> Result<http::Request<Full<Bytes>>, Error> {
        let mut builder = http::Request::builder()
            .method(self.method.clone())
            .uri(format!("{base_url}{}", self.path));
        for (name, value) in &self.headers {
            builder = builder.header(name.as_str(), value.as_str());
        }
        builder
            .body(Full::new(self.body.clone()))
            .map_err(|source| Error::FixtureToRequest {
                name: self.name.clone(),
                base_url: base_url.to_owned(),
                source,
            })
    }
}

#[derive(Deserialize)]
struct CapturedRequest<'a> {
    #[serde(borrow)]
    method: &'a str,
    #[serde(borrow)]
    path: &'a str,
    headers: OrderedHeaders,
    #[serde(borrow)]
    body: &'a RawValue,
}

/// A JSON object of string values, kept in document order.
struct OrderedHeaders(Vec<(String, String)>);

impl<'de> Deserialize<'de> for OrderedHeaders {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct OrderedVisitor;
        impl<'de> Visitor<'de> for OrderedVisitor {
            type Value = OrderedHeaders;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of header names to string values")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<OrderedHeaders, A::Error> {
                let mut headers = Vec::new();
                while let Some(entry) = map.next_entry::<String, String>()? {
                    headers.push(entry);
                }
                Ok(OrderedHeaders(headers))
            }
        }
        deserializer.deserialize_map(OrderedVisitor)
    }
}

/// Loads an embedded fixture request by name (see [`FIXTURE_REQUEST_NAMES`]).
pub fn fixture_request(name: &str) -> Result<FixtureRequest, Error> {
    let text = FIXTURE_REQUEST_NAMES
        .iter()
        .position(|known| *known == name)
        .and_then(|i| FIXTURE_REQUEST_FILES.get(i))
        .ok_or_else(|| Error::UnknownFixture {
            name: name.to_owned(),
        })?;
    let captured: CapturedRequest<'_> =
        serde_json::from_str(text).map_err(|source| Error::MalformedFixture {
            name: name.to_owned(),
            source,
        })?;
    let method =
        Method::from_bytes(captured.method.as_bytes()).map_err(|_| Error::FixtureMethod {
            name: name.to_owned(),
            method: captured.method.to_owned(),
        })?;
    let headers = captured
        .headers
        .0
        .into_iter()
        .filter(|(header, _)| {
            !DROPPED_HEADERS
                .iter()
                .any(|dropped| header.eq_ignore_ascii_case(dropped))
        })
        .collect();
    Ok(FixtureRequest {
        name: name.to_owned(),
        method,
        path: captured.path.to_owned(),
        headers,
        body: Bytes::from(minify(captured.body.get())),
    })
}

#[cfg(test)]
mod tests;
