//! The normalised usage of one model exchange, parsed from the captured (decoded) response
//! body: an SSE stream or a JSON body, in one of the three wire formats Relay serves.
//!
//! The providers count differently, which is where tools of this kind go wrong under prompt
//! caching:
//! - Anthropic Messages reports `input_tokens` *without* the cached tokens; cache reads and
//!   cache writes (`cache_read_input_tokens`, `cache_creation_input_tokens`, split by
//!   lifetime in `cache_creation.ephemeral_5m_input_tokens` / `ephemeral_1h_input_tokens`)
//!   come beside it. `message_start` carries the usage so far and `message_delta` the final,
//!   cumulative counts, so a field in `message_delta` replaces the one from `message_start`.
//! - OpenAI (Responses and Chat Completions) reports `input_tokens` / `prompt_tokens`
//!   *including* the cached tokens (`cached_tokens` is a part of it, not an addition), and
//!   `output_tokens` / `completion_tokens` including the reasoning tokens.
//!
//! [`Usage`] is therefore normalised into disjoint input buckets (uncached input, cache read,
//! cache write 5m, cache write 1h), while `reasoning` stays a part of `output` as both
//! providers report it. [`Usage::genai_input_tokens`] is `gen_ai.usage.input_tokens` as the
//! OpenTelemetry GenAI semantic conventions define it: all input tokens, cached ones included
//! (the Anthropic page of the conventions says so explicitly: input + cache read + cache
//! creation). The version followed is [`GENAI_SEMCONV_VERSION`]: v1.41.1, the last release
//! of the GenAI conventions in the main semantic-conventions repository, whose Anthropic page
//! has carried that formula since v1.40.0 and whose OpenAI page says `input_tokens` already
//! holds the cached tokens.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;

use crate::request::Scalar;
use crate::sse::{SseEvent, SseParser};

/// The OpenTelemetry semantic conventions release whose GenAI usage attributes
/// [`Usage::genai_attributes`] follows.
pub const GENAI_SEMCONV_VERSION: &str = "1.41.1";

/// Most finish reasons kept for one answer: one per choice, and a client asks for few.
const MAX_FINISH_REASONS: usize = 16;

/// The wire format of a model exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireFormat {
    /// Anthropic Messages (`POST /v1/messages`).
    AnthropicMessages,
    /// OpenAI Responses (`POST /v1/responses`).
    OpenAiResponses,
    /// OpenAI Chat Completions (`POST /v1/chat/completions`).
    OpenAiChatCompletions,
}

impl WireFormat {
    /// The format a request path speaks (the query is ignored), if it is one of the three.
    /// Anthropic's token counting (`/v1/messages/count_tokens`) takes a Messages request, so
    /// policy and redaction see it as one.
    pub fn from_path(path: &str) -> Option<Self> {
        let path = path.split('?').next().unwrap_or(path).trim_end_matches('/');
        if path.ends_with("/messages") || path.ends_with("/messages/count_tokens") {
            Some(Self::AnthropicMessages)
        } else if path.ends_with("/responses") {
            Some(Self::OpenAiResponses)
        } else if path.ends_with("/chat/completions") {
            Some(Self::OpenAiChatCompletions)
        } else {
            None
        }
    }

    /// `gen_ai.provider.name` for this format.
    pub fn provider_name(self) -> &'static str {
        match self {
            Self::AnthropicMessages => "anthropic",
            Self::OpenAiResponses | Self::OpenAiChatCompletions => "openai",
        }
    }

    /// `openai.api.type` for this format: which of OpenAI's APIs it is, none for Anthropic's.
    pub fn openai_api_type(self) -> Option<&'static str> {
        match self {
            Self::AnthropicMessages => None,
            Self::OpenAiResponses => Some("responses"),
            Self::OpenAiChatCompletions => Some("chat_completions"),
        }
    }
}

/// How the response body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// `text/event-stream`.
    EventStream,
    /// Anything else: one JSON document.
    Json,
}

impl BodyKind {
    /// From the response's `content-type` header.
    pub fn from_content_type(content_type: Option<&str>) -> Self {
        let essence = content_type
            .and_then(|ct| ct.split(';').next())
            .map(str::trim)
            .unwrap_or("");
        if essence.eq_ignore_ascii_case("text/event-stream") {
            Self::EventStream
        } else {
            Self::Json
        }
    }
}

/// Normalised token usage of one exchange. The four input buckets are disjoint; `reasoning`
/// is the part of `output` the model spent reasoning (it is not added to `output` again).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Usage {
    /// Input tokens neither read from nor written to a cache.
    pub uncached_input: u64,
    /// Input tokens read from the provider's prompt cache.
    pub cache_read: u64,
    /// Input tokens written to the cache with the 5-minute lifetime (Anthropic's default,
    /// also where a cache write without a lifetime breakdown is counted).
    pub cache_write_5m: u64,
    /// Input tokens written to the cache with the 1-hour lifetime.
    pub cache_write_1h: u64,
    /// All output tokens, reasoning included.
    pub output: u64,
    /// The reasoning part of `output`, where the provider reports it: Anthropic counts
    /// thinking in `output` without saying how much, so there it is unknown, not 0.
    pub reasoning: Option<u64>,
}

impl Usage {
    /// Tokens written to the cache, both lifetimes.
    pub fn cache_write(&self) -> u64 {
        self.cache_write_5m.saturating_add(self.cache_write_1h)
    }

    /// `gen_ai.usage.input_tokens`: every input token, cached ones included.
    pub fn genai_input_tokens(&self) -> u64 {
        self.uncached_input
            .saturating_add(self.cache_read)
            .saturating_add(self.cache_write())
    }

    /// `gen_ai.usage.output_tokens`: every output token, reasoning included.
    pub fn genai_output_tokens(&self) -> u64 {
        self.output
    }

    /// The usage as GenAI span attributes of [`GENAI_SEMCONV_VERSION`], in a fixed order.
    /// The cache and reasoning counts are parts of the input and output totals, as the
    /// conventions define them; they are listed even when zero, but the reasoning count
    /// only where it is known.
    pub fn genai_attributes(&self) -> impl Iterator<Item = (&'static str, u64)> {
        [
            ("gen_ai.usage.input_tokens", Some(self.genai_input_tokens())),
            (
                "gen_ai.usage.output_tokens",
                Some(self.genai_output_tokens()),
            ),
            (
                "gen_ai.usage.cache_read.input_tokens",
                Some(self.cache_read),
            ),
            (
                "gen_ai.usage.cache_creation.input_tokens",
                Some(self.cache_write()),
            ),
            ("gen_ai.usage.reasoning.output_tokens", self.reasoning),
        ]
        .into_iter()
        .filter_map(|(key, value)| Some((key, value?)))
    }

    /// Adds another exchange's usage (for session totals); saturates instead of wrapping.
    pub fn add(&mut self, other: &Usage) {
        self.uncached_input = self.uncached_input.saturating_add(other.uncached_input);
        self.cache_read = self.cache_read.saturating_add(other.cache_read);
        self.cache_write_5m = self.cache_write_5m.saturating_add(other.cache_write_5m);
        self.cache_write_1h = self.cache_write_1h.saturating_add(other.cache_write_1h);
        self.output = self.output.saturating_add(other.output);
        self.reasoning = match (self.reasoning, other.reasoning) {
            (Some(a), Some(b)) => Some(a.saturating_add(b)),
            (a, b) => a.or(b),
        };
    }
}

/// What the captured response body said about its exchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageReport {
    /// The wire format it was read as.
    pub format: WireFormat,
    /// The usage, if the body reported any (a chat stream without `include_usage` does not).
    pub usage: Option<Usage>,
    /// `gen_ai.response.model`: the model that answered, as the body names it.
    pub response_model: Option<String>,
    /// `gen_ai.response.id`: the provider's id of the answer (`msg_…`, `resp_…`,
    /// `chatcmpl-…`).
    pub response_id: Option<String>,
    /// `gen_ai.response.finish_reasons`: why generation stopped, one per choice as the
    /// provider words it (Anthropic's `stop_reason`, a Chat choice's `finish_reason`, a
    /// Responses object's `status`).
    pub finish_reasons: Vec<String>,
    /// The body ended before the exchange did (no final event, a cut event or JSON
    /// document): `usage` holds what was seen so far.
    pub truncated: bool,
    /// Events (or the JSON body) that could not be read: not JSON, wrong field types, or over
    /// the event bound. They are skipped, not guessed at.
    pub unreadable_events: u64,
    /// The error a stream reported after its successful head: Anthropic's `error` event,
    /// a Responses `response.failed` or `error` event, a Chat chunk with an `error`. Its
    /// type or code, or the event's name when it gives neither.
    pub error: Option<String>,
}

impl UsageReport {
    /// What a body that could not be read says: nothing.
    pub fn empty(format: WireFormat) -> UsageReport {
        Accumulator::new(format).report(false)
    }
}

/// Reads one captured response body, fed in chunks as the tap sees them.
///
/// ```text
/// let mut tap = UsageTap::new(format, BodyKind::from_content_type(ct), bound);
/// for chunk in side_copy { tap.push(chunk) }
/// let report = tap.finish();
/// ```
#[derive(Debug)]
pub struct UsageTap {
    kind: BodyKind,
    sse: SseParser,
    json: Vec<u8>,
    max_json_bytes: usize,
    json_overflow: bool,
    acc: Accumulator,
}

impl UsageTap {
    /// A tap for one response body. `max_event_bytes` bounds what it buffers: one SSE event,
    /// or the whole body when it is JSON (the side copy's own bound is a good value).
    pub fn new(format: WireFormat, kind: BodyKind, max_event_bytes: usize) -> Self {
        Self {
            kind,
            sse: SseParser::new(max_event_bytes),
            json: Vec::new(),
            max_json_bytes: max_event_bytes,
            json_overflow: false,
            acc: Accumulator::new(format),
        }
    }

    /// Reads a whole body at once.
    pub fn read_body(format: WireFormat, kind: BodyKind, body: &[u8]) -> UsageReport {
        let mut tap = Self::new(format, kind, body.len());
        tap.push(body);
        tap.finish()
    }

    /// Feeds the next chunk of the (decoded) body.
    pub fn push(&mut self, chunk: &[u8]) {
        match self.kind {
            BodyKind::EventStream => {
                let acc = &mut self.acc;
                self.sse.push(chunk, &mut |event| acc.handle_event(event));
            }
            BodyKind::Json => {
                if self.json_overflow {
                    return;
                }
                if self.json.len() + chunk.len() > self.max_json_bytes {
                    self.json_overflow = true;
                    self.json = Vec::new();
                    return;
                }
                self.json.extend_from_slice(chunk);
            }
        }
    }

    /// Ends the body and reports.
    pub fn finish(mut self) -> UsageReport {
        let truncated = match self.kind {
            BodyKind::EventStream => {
                let cut = self.sse.finish();
                self.acc.unreadable = self
                    .acc
                    .unreadable
                    .saturating_add(self.sse.dropped_events());
                cut || !self.acc.done
            }
            BodyKind::Json if self.json_overflow => {
                self.acc.unreadable = self.acc.unreadable.saturating_add(1);
                true
            }
            BodyKind::Json => match self.acc.handle_json(&self.json) {
                Ok(()) => false,
                Err(e) if e.is_eof() => true,
                Err(_) => {
                    self.acc.unreadable = self.acc.unreadable.saturating_add(1);
                    false
                }
            },
        };
        self.acc.report(truncated)
    }
}

/// The usage counts as the wire reported them, before normalisation. A field that was never
/// reported stays `None`.
#[derive(Debug, Default)]
struct Raw {
    input: Option<u64>,
    cache_read: Option<u64>,
    cache_creation: Option<u64>,
    cache_5m: Option<u64>,
    cache_1h: Option<u64>,
    output: Option<u64>,
    reasoning: Option<u64>,
}

#[derive(Debug)]
struct Accumulator {
    format: WireFormat,
    raw: Option<Raw>,
    model: Option<String>,
    id: Option<String>,
    /// By choice index, the last reason of each.
    finish_reasons: Vec<(u64, String)>,
    done: bool,
    unreadable: u64,
    error: Option<String>,
}

impl Accumulator {
    fn new(format: WireFormat) -> Self {
        Self {
            format,
            raw: None,
            model: None,
            id: None,
            finish_reasons: Vec::new(),
            done: false,
            unreadable: 0,
            error: None,
        }
    }

    fn handle_event(&mut self, event: SseEvent<'_>) {
        if !self.wants(event) {
            return;
        }
        if self.format == WireFormat::OpenAiChatCompletions && event.data == b"[DONE]" {
            self.done = true;
            return;
        }
        let parsed = match self.format {
            WireFormat::AnthropicMessages => {
                serde_json::from_slice::<AnthropicEvent<'_>>(event.data)
                    .map(|e| self.handle_anthropic(e))
            }
            WireFormat::OpenAiResponses => serde_json::from_slice::<ResponsesEvent<'_>>(event.data)
                .map(|e| self.handle_responses(e)),
            WireFormat::OpenAiChatCompletions => {
                serde_json::from_slice::<ChatBody>(event.data).map(|c| self.handle_chat(c, true))
            }
        };
        if parsed.is_err() {
            self.unreadable = self.unreadable.saturating_add(1);
        }
    }

    /// Skips the events that cannot carry usage or the model without parsing them (content
    /// deltas are most of a stream). An event without an `event` field is always parsed.
    fn wants(&self, event: SseEvent<'_>) -> bool {
        match self.format {
            WireFormat::AnthropicMessages => matches!(
                event.event,
                b"message" | b"message_start" | b"message_delta" | b"message_stop" | b"error"
            ),
            WireFormat::OpenAiResponses => matches!(
                event.event,
                b"message"
                    | b"response.created"
                    | b"response.in_progress"
                    | b"response.completed"
                    | b"response.incomplete"
                    | b"response.failed"
                    | b"error"
            ),
            // Chunks have no event name; once the model is known only a chunk that mentions
            // usage, an error or a finish reason (or the end marker) is worth parsing.
            WireFormat::OpenAiChatCompletions => {
                self.model.is_none()
                    || event.data == b"[DONE]"
                    || contains(event.data, b"\"usage\"")
                    || contains(event.data, b"\"error\"")
                    || has_finish_reason(event.data)
            }
        }
    }

    fn set_id(&mut self, id: Option<Cow<'_, str>>) {
        if self.id.is_none()
            && let Some(id) = id.filter(|i| !i.is_empty())
        {
            self.id = Some(id.into_owned());
        }
    }

    /// Keeps choice `index`'s finish reason, replacing one it gave before (a provider may
    /// repeat it in a later chunk).
    fn finished(&mut self, index: u64, reason: Option<&str>) {
        let Some(reason) = reason.filter(|r| !r.is_empty()) else {
            return;
        };
        let reasons = &mut self.finish_reasons;
        match reasons.iter().position(|(i, _)| *i == index) {
            Some(at) => reason.clone_into(&mut reasons[at].1),
            None if reasons.len() < MAX_FINISH_REASONS => reasons.push((index, reason.to_owned())),
            None => {}
        }
    }

    fn set_model(&mut self, model: Option<Cow<'_, str>>) {
        if self.model.is_none()
            && let Some(model) = model.filter(|m| !m.is_empty())
        {
            self.model = Some(model.into_owned());
        }
    }

    fn handle_anthropic(&mut self, event: AnthropicEvent<'_>) {
        match event.kind.as_deref() {
            Some("message_start") => {
                if let Some(message) = event.message {
                    self.set_id(message.id);
                    self.set_model(message.model);
                    if let Some(usage) = message.usage {
                        self.merge_anthropic(usage);
                    }
                }
            }
            Some("message_delta") => {
                if let Some(usage) = event.usage {
                    self.merge_anthropic(usage);
                }
                if let Some(delta) = event.delta {
                    self.finished(0, delta.stop_reason.as_deref());
                }
            }
            Some("message_stop") => self.done = true,
            Some("error") => {
                self.done = true;
                self.failed(event.error.as_ref().and_then(error_name), "error");
            }
            _ => {}
        }
    }

    /// Keeps the first error a stream reported: its name, or `otherwise` without one.
    fn failed(&mut self, name: Option<&str>, otherwise: &str) {
        if self.error.is_none() {
            let name = name.filter(|n| !n.is_empty()).unwrap_or(otherwise);
            self.error = Some(name.to_owned());
        }
    }

    /// A later report of a field replaces the earlier one: Anthropic's counts are cumulative.
    fn merge_anthropic(&mut self, usage: AnthropicUsage) {
        let raw = self.raw.get_or_insert_with(Raw::default);
        let cache = usage.cache_creation.unwrap_or_default();
        for (slot, value) in [
            (&mut raw.input, usage.input_tokens),
            (&mut raw.cache_read, usage.cache_read_input_tokens),
            (&mut raw.cache_creation, usage.cache_creation_input_tokens),
            (&mut raw.cache_5m, cache.ephemeral_5m_input_tokens),
            (&mut raw.cache_1h, cache.ephemeral_1h_input_tokens),
            (&mut raw.output, usage.output_tokens),
        ] {
            if value.is_some() {
                *slot = value;
            }
        }
    }

    fn handle_responses(&mut self, event: ResponsesEvent<'_>) {
        let terminal = matches!(
            event.kind.as_deref(),
            Some("response.completed" | "response.incomplete" | "response.failed" | "error")
        );
        let mut error = None;
        if let Some(response) = event.response {
            self.set_responses(response.id, response.model, response.usage);
            if terminal {
                self.finished(0, response.status.as_deref());
            }
            error = response.error;
        }
        match event.kind.as_deref() {
            Some("response.failed") => {
                self.failed(error.as_ref().and_then(error_name), "response.failed");
            }
            // An `error` event names its code at the top level.
            Some("error") => self.failed(event.code.as_ref().and_then(Value::as_str), "error"),
            _ => {}
        }
        if terminal {
            self.done = true;
        }
    }

    /// A Responses object's id, model and usage, from an event or a whole body.
    fn set_responses(
        &mut self,
        id: Option<Cow<'_, str>>,
        model: Option<Cow<'_, str>>,
        usage: Option<ResponsesUsage>,
    ) {
        self.set_id(id);
        self.set_model(model);
        if let Some(usage) = usage {
            self.merge_openai(usage.into());
        }
    }

    /// A chunk of a stream (`streamed`), or a whole completion, whose error body comes
    /// with its failed status and is no failure after a successful head.
    fn handle_chat(&mut self, chunk: ChatBody, streamed: bool) {
        if streamed && let Some(error) = &chunk.error {
            self.failed(error_name(error), "error");
        }
        self.set_id(chunk.id);
        for (position, choice) in chunk.choices.iter().flatten().enumerate() {
            let index = match choice.index {
                Some(Scalar::Count(index)) => index,
                _ => position as u64,
            };
            let reason = match &choice.finish_reason {
                Some(Scalar::Text(reason)) => Some(reason.as_str()),
                _ => None,
            };
            self.finished(index, reason);
        }
        self.set_model(chunk.model.map(Cow::Owned));
        if let Some(usage) = chunk.usage {
            self.merge_openai(usage.into());
        }
    }

    /// OpenAI reports usage once, complete; a later report replaces an earlier one.
    fn merge_openai(&mut self, raw: Raw) {
        self.raw = Some(raw);
    }

    fn handle_json(&mut self, body: &[u8]) -> Result<(), serde_json::Error> {
        match self.format {
            WireFormat::AnthropicMessages => {
                let message: AnthropicMessage<'_> = serde_json::from_slice(body)?;
                self.set_id(message.id);
                self.finished(0, message.stop_reason.as_deref());
                self.set_model(message.model);
                if let Some(usage) = message.usage {
                    self.merge_anthropic(usage);
                }
            }
            WireFormat::OpenAiResponses => {
                let response: ResponsesObject<'_> = serde_json::from_slice(body)?;
                self.set_responses(response.id, response.model, response.usage);
                self.finished(0, response.status.as_deref());
            }
            WireFormat::OpenAiChatCompletions => {
                let chunk: ChatBody = serde_json::from_slice(body)?;
                self.handle_chat(chunk, false);
            }
        }
        self.done = true;
        Ok(())
    }

    fn report(self, truncated: bool) -> UsageReport {
        let usage = self.raw.map(|raw| normalise(self.format, &raw));
        UsageReport {
            format: self.format,
            usage,
            response_model: self.model,
            response_id: self.id,
            finish_reasons: {
                let mut reasons = self.finish_reasons;
                reasons.sort_by_key(|(index, _)| *index);
                reasons.into_iter().map(|(_, reason)| reason).collect()
            },
            truncated,
            unreadable_events: self.unreadable,
            error: self.error,
        }
    }
}

fn normalise(format: WireFormat, raw: &Raw) -> Usage {
    let n = |v: Option<u64>| v.unwrap_or(0);
    match format {
        WireFormat::AnthropicMessages => {
            // Without the lifetime breakdown every cache write is a 5-minute write (the
            // default lifetime); with it, a remainder the breakdown does not explain is too.
            let total = n(raw.cache_creation);
            let write_1h = n(raw.cache_1h);
            let write_5m = n(raw.cache_5m).max(total.saturating_sub(write_1h));
            Usage {
                uncached_input: n(raw.input),
                cache_read: n(raw.cache_read),
                cache_write_5m: write_5m,
                cache_write_1h: write_1h,
                output: n(raw.output),
                reasoning: None,
            }
        }
        WireFormat::OpenAiResponses | WireFormat::OpenAiChatCompletions => {
            let input = n(raw.input);
            // `cached_tokens` is part of the input total; a provider that reports more
            // cached than total tokens is believed for the cache and gets no uncached input.
            let cached = n(raw.cache_read);
            Usage {
                uncached_input: input.saturating_sub(cached),
                cache_read: cached,
                cache_write_5m: 0,
                cache_write_1h: 0,
                output: n(raw.output),
                reasoning: raw.reasoning.map(|r| r.min(n(raw.output))),
            }
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(haystack, needle).is_some()
}

/// True when a Chat chunk's text gives a choice a finish reason: `"finish_reason"` followed,
/// after the colon and any white space, by a string rather than `null`, as every chunk but
/// the last of a choice has.
fn has_finish_reason(chunk: &[u8]) -> bool {
    const NAME: &[u8] = b"\"finish_reason\"";
    memchr::memmem::find_iter(chunk, NAME).any(|at| {
        chunk[at + NAME.len()..]
            .trim_ascii_start()
            .strip_prefix(b":")
            .is_some_and(|value| value.trim_ascii_start().starts_with(b"\""))
    })
}

// The wire shapes, only the fields read here; every other field is ignored.

#[derive(Deserialize)]
struct AnthropicEvent<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow)]
    message: Option<AnthropicMessage<'a>>,
    usage: Option<AnthropicUsage>,
    error: Option<Value>,
    #[serde(borrow)]
    delta: Option<AnthropicDelta<'a>>,
}

#[derive(Deserialize)]
struct AnthropicDelta<'a> {
    #[serde(borrow)]
    stop_reason: Option<Cow<'a, str>>,
}

/// A Chat choice as far as its finish reason goes: its message or delta is skipped
/// unbuilt, and an index or reason of another type costs only itself.
#[derive(Deserialize)]
struct ChatChoice {
    index: Option<Scalar>,
    finish_reason: Option<Scalar>,
}

/// The name of an error a provider reports in a body: its `type` (Anthropic, OpenAI Chat)
/// or its `code`, when either is text. Read from any JSON value, so that an error of an
/// unexpected shape costs its name, not the usage beside it.
fn error_name(error: &Value) -> Option<&str> {
    ["type", "code"]
        .into_iter()
        .find_map(|key| error.get(key).and_then(Value::as_str))
}

#[derive(Deserialize)]
struct AnthropicMessage<'a> {
    #[serde(borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    stop_reason: Option<Cow<'a, str>>,
    #[serde(borrow)]
    model: Option<Cow<'a, str>>,
    usage: Option<AnthropicUsage>,
}

#[derive(Deserialize)]
struct AnthropicUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    cache_creation: Option<AnthropicCacheCreation>,
}

#[derive(Deserialize, Default)]
struct AnthropicCacheCreation {
    ephemeral_5m_input_tokens: Option<u64>,
    ephemeral_1h_input_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct ResponsesEvent<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow)]
    response: Option<ResponsesObject<'a>>,
    code: Option<Value>,
}

#[derive(Deserialize)]
struct ResponsesObject<'a> {
    #[serde(borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    status: Option<Cow<'a, str>>,
    #[serde(borrow)]
    model: Option<Cow<'a, str>>,
    usage: Option<ResponsesUsage>,
    error: Option<Value>,
}

#[derive(Deserialize)]
struct ResponsesUsage {
    input_tokens: Option<u64>,
    input_tokens_details: Option<CachedDetails>,
    output_tokens: Option<u64>,
    output_tokens_details: Option<ReasoningDetails>,
}

#[derive(Deserialize)]
struct CachedDetails {
    cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct ReasoningDetails {
    reasoning_tokens: Option<u64>,
}

impl From<ResponsesUsage> for Raw {
    fn from(u: ResponsesUsage) -> Self {
        Raw {
            input: u.input_tokens,
            cache_read: u.input_tokens_details.and_then(|d| d.cached_tokens),
            output: u.output_tokens,
            reasoning: u.output_tokens_details.and_then(|d| d.reasoning_tokens),
            ..Raw::default()
        }
    }
}

/// A chat completion chunk, or a whole non-streaming chat completion.
#[derive(Deserialize)]
struct ChatBody<'a> {
    #[serde(borrow)]
    id: Option<Cow<'a, str>>,
    choices: Option<Vec<ChatChoice>>,
    model: Option<String>,
    usage: Option<ChatUsage>,
    error: Option<Value>,
}

#[derive(Deserialize)]
struct ChatUsage {
    prompt_tokens: Option<u64>,
    prompt_tokens_details: Option<CachedDetails>,
    completion_tokens: Option<u64>,
    completion_tokens_details: Option<ReasoningDetails>,
}

impl From<ChatUsage> for Raw {
    fn from(u: ChatUsage) -> Self {
        Raw {
            input: u.prompt_tokens,
            cache_read: u.prompt_tokens_details.and_then(|d| d.cached_tokens),
            output: u.completion_tokens,
            reasoning: u.completion_tokens_details.and_then(|d| d.reasoning_tokens),
            ..Raw::default()
        }
    }
}

#[cfg(test)]
mod tests;
