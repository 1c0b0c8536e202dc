//! The knobs a test turns to make the stand-in misbehave, as plain data.

use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderName, HeaderValue};
use http::{HeaderMap, StatusCode};

/// How the stand-in answers the requests that arrive after `StandIn::set_behaviour`.
///
/// Every knob is independent and they combine; the default answers normally.
/// They apply to every route except `HEAD /`, which always answers 200 at once so a harness's probe never trips over a test's fault injection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Behaviour {
    /// Answer the first turn of a conversation with a tool call and the turn that carries the tool result with [`crate::TOOL_DONE_TEXT`].
    pub tool_round_trip: bool,
    /// Write the response body in frames of this many bytes (0 counts as 1), each a frame of its own.
    /// Without it a stream is written one SSE event per frame and a JSON body in one frame.
    pub chunk_size: Option<usize>,
    /// Sleep this long between frames: between SSE events, or between chunks when `chunk_size` is set.
    pub pace: Option<Duration>,
    /// After this many body bytes, raise a body error so hyper aborts the connection: HTTP/1 never sends the terminating chunk, HTTP/2 resets the stream.
    /// The body never ends cleanly while this is set, even when it is shorter than the limit.
    pub fail_after_bytes: Option<usize>,
    /// Answer this instead of the route's normal answer.
    pub status: Option<CannedResponse>,
    /// Read the request body, record it, then never answer; the client going away is recorded.
    pub hang_before_headers: bool,
    /// Number of content deltas in a text stream (the fixtures have one); the text is [`crate::DEFAULT_TEXT`] repeated.
    pub stream_events: Option<usize>,
    /// Wait this long after the request body before sending the response head.
    pub delay_before_headers: Option<Duration>,
    /// The shell command of the tool call `tool_round_trip` asks for, in every API's variant of the call; [`crate::TOOL_COMMAND`] when unset.
    pub tool_command: Option<String>,
}

/// A fixed answer: status, headers (several values per name allowed) and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CannedResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl CannedResponse {
    /// A response with this status, no headers and an empty body.
    pub fn new(status: StatusCode) -> CannedResponse {
        CannedResponse {
            status,
            headers: HeaderMap::new(),
            body: Bytes::new(),
        }
    }

    /// A response with this status and a JSON body (`content-type: application/json`).
    pub fn json(status: StatusCode, body: impl Into<Bytes>) -> CannedResponse {
        CannedResponse::new(status)
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .body(body)
    }

    /// Adds one header value (appended, so a name may repeat).
    pub fn header(mut self, name: HeaderName, value: HeaderValue) -> CannedResponse {
        self.headers.append(name, value);
        self
    }

    /// Replaces the body.
    pub fn body(mut self, body: impl Into<Bytes>) -> CannedResponse {
        self.body = body.into();
        self
    }
}
