//! OTLP/HTTP trace export: plain span data in, the official `opentelemetry-proto` messages
//! out, encoded with prost and posted by the shared client as `application/x-protobuf`.

use std::borrow::Cow;

use bytes::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, InstrumentationScope, KeyValue, any_value,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{
    ResourceSpans, ScopeSpans, Span, Status, span, status,
};
use prost::Message;
use ring::rand::{SecureRandom, SystemRandom};

use crate::error::SinkError;
use relay_plugins::TraceParent;

/// The content type of an OTLP/HTTP protobuf export.
pub const OTLP_PROTOBUF: &str = "application/x-protobuf";
/// The path appended to an endpoint given without one.
pub const OTLP_TRACES_PATH: &str = "/v1/traces";
/// The instrumentation scope of Relay's spans.
pub const SCOPE_NAME: &str = "relay-worker";

/// A trace id (16 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceId(pub [u8; 16]);

/// A span id (8 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SpanId(pub [u8; 8]);

/// Random, non-zero trace and span ids from the system generator.
#[derive(Debug)]
pub struct IdGenerator {
    rng: SystemRandom,
}

impl Default for IdGenerator {
    fn default() -> Self {
        IdGenerator {
            rng: SystemRandom::new(),
        }
    }
}

impl IdGenerator {
    /// A fresh trace id.
    pub fn trace_id(&self) -> Result<TraceId, SinkError> {
        let mut id = [0u8; 16];
        while id == [0; 16] {
            self.rng.fill(&mut id).map_err(|_| SinkError::Random)?;
        }
        Ok(TraceId(id))
    }

    /// A fresh span id.
    pub fn span_id(&self) -> Result<SpanId, SinkError> {
        let mut id = [0u8; 8];
        while id == [0; 8] {
            self.rng.fill(&mut id).map_err(|_| SinkError::Random)?;
        }
        Ok(SpanId(id))
    }

    /// Where a session's root span goes: under the inbound `traceparent` when it is valid
    /// (the span joins the harness's trace), else at the root of a new trace.
    pub fn root(&self, traceparent: Option<&str>) -> Result<(TraceId, Option<SpanId>), SinkError> {
        match traceparent.and_then(TraceParent::parse) {
            Some(parent) => Ok((TraceId(parent.trace_id), Some(SpanId(parent.parent_id)))),
            None => Ok((self.trace_id()?, None)),
        }
    }
}

/// A typed attribute value.
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    /// A string.
    Str(String),
    /// An integer.
    Int(i64),
    /// A floating-point number.
    Float(f64),
    /// A boolean.
    Bool(bool),
    /// An array of strings.
    StrArray(Vec<String>),
}

/// One span attribute.
#[derive(Debug, Clone, PartialEq)]
pub struct Attribute {
    /// The key, usually a semantic-convention constant.
    pub key: Cow<'static, str>,
    /// The value.
    pub value: AttrValue,
}

impl Attribute {
    /// A string attribute.
    pub fn str(key: &'static str, value: impl Into<String>) -> Self {
        Attribute {
            key: Cow::Borrowed(key),
            value: AttrValue::Str(value.into()),
        }
    }

    /// A string array attribute.
    pub fn strs(key: &'static str, values: &[&str]) -> Self {
        Attribute {
            key: Cow::Borrowed(key),
            value: AttrValue::StrArray(values.iter().map(|v| (*v).to_owned()).collect()),
        }
    }

    /// An integer attribute; counts beyond `i64::MAX` saturate.
    pub fn int(key: &'static str, value: u64) -> Self {
        Attribute {
            key: Cow::Borrowed(key),
            value: AttrValue::Int(i64::try_from(value).unwrap_or(i64::MAX)),
        }
    }

    /// A boolean attribute.
    pub fn bool(key: &'static str, value: bool) -> Self {
        Attribute {
            key: Cow::Borrowed(key),
            value: AttrValue::Bool(value),
        }
    }

    /// A floating-point attribute.
    pub fn float(key: &'static str, value: f64) -> Self {
        Attribute {
            key: Cow::Borrowed(key),
            value: AttrValue::Float(value),
        }
    }
}

/// The role of a span.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SpanKind {
    /// Work inside the worker (sessions, turns, tools).
    #[default]
    Internal,
    /// A call the worker makes (a model request to the provider).
    Client,
}

/// How a span ended.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum SpanStatus {
    /// Not said.
    #[default]
    Unset,
    /// Succeeded.
    Ok,
    /// Failed, with a short description (never content or a credential).
    Error(String),
}

/// One finished span, as the integrator maps it from an ATOF scope.
#[derive(Debug, Clone, PartialEq)]
pub struct SpanData {
    /// The span name (see [`crate::genai::span_name`]).
    pub name: String,
    /// The trace.
    pub trace_id: TraceId,
    /// This span.
    pub span_id: SpanId,
    /// The parent span, `None` for a root.
    pub parent_span_id: Option<SpanId>,
    /// The role.
    pub kind: SpanKind,
    /// Start, nanoseconds since the Unix epoch.
    pub start_unix_nanos: u64,
    /// End, nanoseconds since the Unix epoch.
    pub end_unix_nanos: u64,
    /// How it ended.
    pub status: SpanStatus,
    /// The attributes, in order (see [`crate::genai::genai_attributes`]).
    pub attributes: Vec<Attribute>,
}

/// The endpoint URL of the traces: the configured one when it has a path, else with
/// `/v1/traces` appended.
pub fn traces_url(endpoint: &str) -> String {
    let trimmed = endpoint.trim_end_matches('/');
    let after_scheme = trimmed.split_once("://").map_or(trimmed, |(_, rest)| rest);
    if after_scheme.contains('/') {
        trimmed.to_owned()
    } else {
        format!("{trimmed}{OTLP_TRACES_PATH}")
    }
}

/// The export request of a batch of spans, under one resource with `service.name`.
pub fn export_request(service_name: &str, spans: &[SpanData]) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![key_value(
                    "service.name",
                    &AttrValue::Str(service_name.to_owned()),
                )],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: SCOPE_NAME.to_owned(),
                    version: env!("CARGO_PKG_VERSION").to_owned(),
                    ..Default::default()
                }),
                spans: spans.iter().map(proto_span).collect(),
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// The protobuf body of a batch.
pub(crate) fn encode_spans(service_name: &str, spans: &[SpanData]) -> Bytes {
    Bytes::from(export_request(service_name, spans).encode_to_vec())
}

/// The spans a collector's successful answer says it rejected (OTLP's partial success),
/// with its message; `None` when it took them all or its answer is not an OTLP response.
pub(crate) fn rejected_spans(answer: &[u8]) -> Option<(u64, String)> {
    let partial = ExportTraceServiceResponse::decode(answer)
        .ok()?
        .partial_success?;
    let rejected = u64::try_from(partial.rejected_spans).ok()?;
    (rejected > 0).then_some((rejected, partial.error_message))
}

fn proto_span(data: &SpanData) -> Span {
    let status = match &data.status {
        SpanStatus::Unset => None,
        SpanStatus::Ok => Some(Status {
            code: status::StatusCode::Ok as i32,
            message: String::new(),
        }),
        SpanStatus::Error(message) => Some(Status {
            code: status::StatusCode::Error as i32,
            message: message.clone(),
        }),
    };
    let kind = match data.kind {
        SpanKind::Internal => span::SpanKind::Internal,
        SpanKind::Client => span::SpanKind::Client,
    };
    Span {
        trace_id: data.trace_id.0.to_vec(),
        span_id: data.span_id.0.to_vec(),
        parent_span_id: data
            .parent_span_id
            .map(|p| p.0.to_vec())
            .unwrap_or_default(),
        name: data.name.clone(),
        kind: kind as i32,
        start_time_unix_nano: data.start_unix_nanos,
        end_time_unix_nano: data.end_unix_nanos,
        attributes: data
            .attributes
            .iter()
            .map(|a| key_value(&a.key, &a.value))
            .collect(),
        status,
        ..Default::default()
    }
}

fn key_value(key: &str, value: &AttrValue) -> KeyValue {
    let value = match value {
        AttrValue::Str(s) => any_value::Value::StringValue(s.clone()),
        AttrValue::Int(i) => any_value::Value::IntValue(*i),
        AttrValue::Float(f) => any_value::Value::DoubleValue(*f),
        AttrValue::Bool(b) => any_value::Value::BoolValue(*b),
        AttrValue::StrArray(items) => any_value::Value::ArrayValue(ArrayValue {
            values: items
                .iter()
                .map(|item| AnyValue {
                    value: Some(any_value::Value::StringValue(item.clone())),
                })
                .collect(),
        }),
    };
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests;
