use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, ArrayValue, any_value};
use prost::Message;

use super::{
    AttrValue, Attribute, IdGenerator, SpanData, SpanId, SpanKind, SpanStatus, TraceId,
    encode_spans, traces_url,
};

#[test]
fn the_traces_path_is_appended_only_to_a_bare_endpoint() {
    assert_eq!(traces_url("http://c:4318"), "http://c:4318/v1/traces");
    assert_eq!(traces_url("http://c:4318/"), "http://c:4318/v1/traces");
    assert_eq!(
        traces_url("https://c/otlp/v1/traces"),
        "https://c/otlp/v1/traces"
    );
}

#[test]
fn ids_are_random_and_never_zero() -> Result<(), crate::SinkError> {
    let ids = IdGenerator::default();
    let (a, b) = (ids.span_id()?, ids.span_id()?);
    assert_ne!(a, b);
    assert_ne!(a, SpanId([0; 8]));
    assert_ne!(ids.trace_id()?, TraceId([0; 16]));
    Ok(())
}

#[test]
fn an_inbound_traceparent_gives_the_trace_and_the_parent() -> Result<(), crate::SinkError> {
    let ids = IdGenerator::default();
    let (trace, parent) = ids.root(Some(
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    ))?;
    assert_eq!(trace.0[0], 0x4b);
    assert_eq!(
        parent,
        Some(SpanId([0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]))
    );
    let (_, parent) = ids.root(Some("garbage"))?;
    assert_eq!(parent, None);
    let (_, parent) = ids.root(None)?;
    assert_eq!(parent, None);
    Ok(())
}

#[test]
fn a_span_decodes_with_the_official_types() -> Result<(), prost::DecodeError> {
    let span = SpanData {
        name: "chat m".to_owned(),
        trace_id: TraceId([7; 16]),
        span_id: SpanId([2; 8]),
        parent_span_id: Some(SpanId([1; 8])),
        kind: SpanKind::Client,
        start_unix_nanos: 1_000,
        end_unix_nanos: 2_000,
        status: SpanStatus::Error("upstream 500".to_owned()),
        attributes: vec![
            Attribute::str("gen_ai.request.model", "m"),
            Attribute::int("gen_ai.usage.input_tokens", 5),
            Attribute {
                key: "relay.streaming".into(),
                value: AttrValue::Bool(true),
            },
            Attribute::strs("gen_ai.response.finish_reasons", &["stop", "length"]),
        ],
    };
    let body = encode_spans("svc", &[span]);
    let decoded = ExportTraceServiceRequest::decode(body)?;
    let resource = &decoded.resource_spans[0];
    let service = resource.resource.as_ref().map(|r| r.attributes[0].clone());
    assert_eq!(service.map(|kv| kv.key), Some("service.name".to_owned()));
    let span = &resource.scope_spans[0].spans[0];
    assert_eq!(span.name, "chat m");
    assert_eq!(span.trace_id, vec![7; 16]);
    assert_eq!(span.parent_span_id, vec![1; 8]);
    assert_eq!(span.kind, 3); // SPAN_KIND_CLIENT
    assert_eq!(span.status.as_ref().map(|s| s.code), Some(2)); // STATUS_CODE_ERROR
    let values: Vec<_> = span
        .attributes
        .iter()
        .map(|kv| {
            (
                kv.key.as_str(),
                kv.value.as_ref().and_then(|v| v.value.clone()),
            )
        })
        .collect();
    assert_eq!(
        values,
        vec![
            (
                "gen_ai.request.model",
                Some(any_value::Value::StringValue("m".to_owned()))
            ),
            (
                "gen_ai.usage.input_tokens",
                Some(any_value::Value::IntValue(5))
            ),
            ("relay.streaming", Some(any_value::Value::BoolValue(true))),
            (
                "gen_ai.response.finish_reasons",
                Some(any_value::Value::ArrayValue(ArrayValue {
                    values: ["stop", "length"]
                        .map(|r| AnyValue {
                            value: Some(any_value::Value::StringValue(r.to_owned())),
                        })
                        .to_vec(),
                }))
            ),
        ]
    );
    Ok(())
}
