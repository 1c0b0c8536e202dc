//! ATOF scopes to OTLP spans: one span per scope, ended when the scope ends, with the same
//! parent links (a span id is the random half of its scope's uuid, so a child names its
//! parent without a lookup), named and attributed after the GenAI conventions. A session's
//! spans share a trace; an `llm` scope whose request carried a valid `traceparent` joins the
//! harness's trace under the harness's span instead (its ATOF parent stays in
//! `relay.atof.parent_uuid`). Guardrail marks become spans of no duration under their parent.
//!
//! Pure: the caller feeds every record in order and sends what comes out.

use std::collections::{HashMap, VecDeque};
use std::time::{SystemTime, UNIX_EPOCH};

use relay_plugins::atof::{Category, Record, RecordKind};
use relay_plugins::{Agent, Usage, WireFormat};
use serde_json::Value;

use crate::genai::{GenAiFacts, Operation, genai_attributes, span_name};
use crate::otlp::{
    AttrValue, Attribute, IdGenerator, SpanData, SpanId, SpanKind, SpanStatus, TraceId,
};
use relay_plugins::TraceParent;

/// Spans kept open at once; one more ends the oldest unexported (it is dropped: a span
/// without its end would be wrong).
pub const MAX_OPEN_SPANS: usize = 8192;

/// A scope whose span has started.
#[derive(Debug)]
struct Open {
    trace_id: TraceId,
    parent: Option<SpanId>,
    start: u64,
    data: Value,
    metadata: Option<Value>,
    profile: Option<Value>,
    parent_uuid: Option<String>,
}

/// Turns ATOF records into finished spans.
#[derive(Debug, Default)]
pub struct SpanMapper {
    ids: IdGenerator,
    open: HashMap<uuid::Uuid, Open>,
    order: VecDeque<uuid::Uuid>,
}

impl SpanMapper {
    pub fn new() -> SpanMapper {
        SpanMapper::default()
    }

    /// Takes the next record; returns the span it finishes, if any.
    pub fn on_record(&mut self, record: &Record) -> Option<SpanData> {
        match &record.kind {
            RecordKind::Scope {
                category,
                category_profile,
                ..
            } => {
                if record.is_start() {
                    self.start(record, category_profile.clone());
                    None
                } else {
                    let open = self.open.remove(&record.uuid)?;
                    self.order.retain(|u| *u != record.uuid);
                    Some(finish(record, *category, open))
                }
            }
            RecordKind::Mark {
                category: Category::Guardrail,
                ..
            } => {
                let (trace_id, parent) = self.placement(record.parent_uuid, None);
                let at = unix_nanos(record.timestamp);
                let mut attributes = vec![
                    Attribute::str("openinference.span.kind", "GUARDRAIL"),
                    Attribute::str("relay.atof.uuid", record.uuid.to_string()),
                ];
                for key in ["decision", "rule", "reason", "event"] {
                    if let Some(text) = record.data.get(key).and_then(Value::as_str) {
                        attributes.push(Attribute {
                            key: format!("relay.policy.{key}").into(),
                            value: AttrValue::Str(text.to_owned()),
                        });
                    }
                }
                if let Some(dry) = record.data.get("dry_run").and_then(Value::as_bool) {
                    attributes.push(Attribute {
                        key: "relay.policy.dry_run".into(),
                        value: AttrValue::Bool(dry),
                    });
                }
                Some(SpanData {
                    name: "guardrail".to_owned(),
                    trace_id,
                    span_id: span_id(&record.uuid),
                    parent_span_id: parent,
                    kind: SpanKind::Internal,
                    start_unix_nanos: at,
                    end_unix_nanos: at,
                    status: SpanStatus::Unset,
                    attributes,
                })
            }
            RecordKind::Mark { .. } => None,
        }
    }

    fn start(&mut self, record: &Record, profile: Option<Value>) {
        if self.open.len() >= MAX_OPEN_SPANS
            && let Some(oldest) = self.order.pop_front()
        {
            self.open.remove(&oldest);
        }
        let traceparent = record
            .data
            .get("traceparent")
            .and_then(Value::as_str)
            .and_then(TraceParent::parse);
        let (trace_id, parent) = self.placement(record.parent_uuid, traceparent);
        self.open.insert(
            record.uuid,
            Open {
                trace_id,
                parent,
                start: unix_nanos(record.timestamp),
                data: record.data.clone(),
                metadata: record.metadata.clone(),
                profile,
                parent_uuid: record.parent_uuid.map(|u| u.to_string()),
            },
        );
        self.order.push_back(record.uuid);
    }

    /// The trace and parent span of a new span: the harness's when it sent a traceparent,
    /// else its parent scope's trace, else a new trace.
    fn placement(
        &self,
        parent: Option<uuid::Uuid>,
        traceparent: Option<TraceParent>,
    ) -> (TraceId, Option<SpanId>) {
        if let Some(tp) = traceparent {
            return (TraceId(tp.trace_id), Some(SpanId(tp.parent_id)));
        }
        match parent.and_then(|p| self.open.get(&p).map(|open| (p, open))) {
            Some((uuid, open)) => (open.trace_id, Some(span_id(&uuid))),
            None => {
                let trace = self.ids.trace_id().unwrap_or(TraceId([1; 16]));
                (trace, parent.map(|p| span_id(&p)))
            }
        }
    }
}

/// A span id from the random half of a v7 uuid (never all zero in practice; a zero one is
/// replaced by ones so the span stays valid).
pub fn span_id(uuid: &uuid::Uuid) -> SpanId {
    let bytes = uuid.as_bytes();
    let mut id = [0u8; 8];
    id.copy_from_slice(&bytes[8..16]);
    if id == [0; 8] {
        id = [1; 8];
    }
    SpanId(id)
}

fn unix_nanos(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn text<'v>(value: Option<&'v Value>, key: &str) -> Option<&'v str> {
    value?.get(key)?.as_str()
}

fn usage_of(end: &Value) -> Option<Usage> {
    let usage = end.get("usage")?.as_object()?;
    let n = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
    Some(Usage {
        uncached_input: n("uncached_input_tokens"),
        cache_read: n("cache_read_tokens"),
        cache_write_5m: n("cache_write_5m_tokens"),
        cache_write_1h: n("cache_write_1h_tokens"),
        output: n("output_tokens"),
        reasoning: usage.get("reasoning_tokens").and_then(Value::as_u64),
    })
}

fn finish(end: &Record, category: Category, open: Open) -> SpanData {
    let session = text(open.metadata.as_ref(), "session_id");
    let harness = text(open.metadata.as_ref(), "harness");
    let usage = usage_of(&end.data);
    let route = open.data.get("route").and_then(Value::as_str);
    // A session's provider is that of the API its harness speaks; a request's, its route's.
    let format = match category {
        Category::Agent => harness.and_then(Agent::parse).and_then(Agent::wire_format),
        _ => route.and_then(WireFormat::from_path),
    };
    let provider = format.map(WireFormat::provider_name);
    let stream =
        category == Category::Llm && open.data.get("stream").and_then(Value::as_bool) == Some(true);
    let (operation, kind) = match category {
        Category::Agent => (Some(Operation::InvokeAgent), SpanKind::Internal),
        Category::Llm => (Some(Operation::Chat), SpanKind::Client),
        Category::Tool => (Some(Operation::ExecuteTool), SpanKind::Internal),
        Category::Guardrail | Category::Custom => (None, SpanKind::Internal),
    };
    let finish_reasons: Vec<&str> = end
        .data
        .get("finish_reasons")
        .and_then(Value::as_array)
        .map(|reasons| reasons.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let (name, mut attributes) = match operation {
        Some(operation) => {
            let facts = GenAiFacts {
                operation,
                provider,
                openai_api_type: format
                    .filter(|_| category == Category::Llm)
                    .and_then(WireFormat::openai_api_type),
                request_model: open.data.get("model").and_then(Value::as_str),
                response_model: end.data.get("response_model").and_then(Value::as_str),
                response_id: end.data.get("response_id").and_then(Value::as_str),
                finish_reasons: &finish_reasons,
                server_address: open.data.get("server_address").and_then(Value::as_str),
                server_port: open.data.get("server_port").and_then(Value::as_u64),
                usage: usage.as_ref(),
                conversation_id: session,
                agent_name: harness,
                tool_name: (operation == Operation::ExecuteTool).then_some(end.name.as_str()),
                tool_call_id: text(open.profile.as_ref(), "tool_call_id"),
                stream,
                time_to_first_chunk: end
                    .data
                    .get("time_to_first_byte_ms")
                    .and_then(Value::as_f64)
                    .map(|ms| ms / 1000.0),
            };
            (span_name(&facts), genai_attributes(&facts))
        }
        None => {
            let mut attributes = vec![Attribute::str("openinference.span.kind", "CHAIN")];
            if let Some(session) = session {
                attributes.push(Attribute::str("session.id", session));
            }
            (end.name.clone(), attributes)
        }
    };
    attributes.push(Attribute::str("relay.atof.uuid", end.uuid.to_string()));
    if let Some(parent) = open.parent_uuid {
        attributes.push(Attribute::str("relay.atof.parent_uuid", parent));
    }
    for (field, key) in [
        ("cost_usd", "relay.cost_usd"),
        ("cost_error", "relay.cost_error"),
    ] {
        let value = end.data.get("usage").and_then(|u| u.get(field));
        if let Some(value) = value.and_then(Value::as_str) {
            attributes.push(Attribute::str(key, value));
        }
    }
    // A failure names its type in `error.type`, as the conventions require: the HTTP
    // status, the error a stream reported after its successful head (or the break of its
    // body), or `_OTHER` (their fallback) for a failed tool. A success leaves the status
    // unset, as OpenTelemetry asks of instrumentation. The status description adds what
    // `error.type` does not say, and never repeats it (the conventions advise against that).
    let stream_error = end.data.get("error").and_then(Value::as_str);
    let (status, error_type) = match end.data.get("status").and_then(Value::as_u64) {
        Some(code) if code >= 400 => (SpanStatus::Error(String::new()), Some(code.to_string())),
        Some(_) if let Some(error) = stream_error => (
            SpanStatus::Error("the response failed after its head".to_owned()),
            Some(error.to_owned()),
        ),
        None if end.data.get("outcome").and_then(Value::as_str) == Some("failure") => (
            SpanStatus::Error("the tool failed".to_owned()),
            Some("_OTHER".to_owned()),
        ),
        Some(_) | None => (SpanStatus::Unset, None),
    };
    if let Some(error_type) = error_type {
        attributes.push(Attribute::str("error.type", error_type));
    }
    SpanData {
        name,
        trace_id: open.trace_id,
        span_id: span_id(&end.uuid),
        parent_span_id: open.parent,
        kind,
        start_unix_nanos: open.start,
        end_unix_nanos: unix_nanos(end.timestamp).max(open.start),
        status,
        attributes,
    }
}

#[cfg(test)]
mod tests;
