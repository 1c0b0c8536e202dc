//! The sinks end to end on loopback: a hyper stand-in collector records what it receives.

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value;
use prost::Message;
use relay_plugins::Usage;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use crate::SinkError;
use crate::config::{
    DeliveryConfig, FileSinkConfig, HttpSinkConfig, OtlpConfig, SinkConfig, SinkContext,
    SinksConfig,
};
use crate::genai::{GenAiFacts, Operation, genai_attributes, span_name};
use crate::otlp::{IdGenerator, SpanData, SpanKind, SpanStatus};
use crate::sinks::{SinkHandle, Sinks};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const WAIT: Duration = Duration::from_secs(5);

#[derive(Debug)]
struct Received {
    path: String,
    content_type: String,
    team: Option<String>,
    body: Bytes,
}

/// A collector on `127.0.0.1:0` answering the given statuses in turn, then 200.
async fn stand_in(
    statuses: Vec<StatusCode>,
) -> std::io::Result<(SocketAddr, mpsc::UnboundedReceiver<Received>)> {
    let answers = statuses.into_iter().map(|status| (status, None)).collect();
    stand_in_answering(answers, Bytes::new()).await
}

/// A collector on `127.0.0.1:0` answering the given statuses, each with its `Retry-After`
/// when it has one, in turn, then 200; every answer's body is `body`.
async fn stand_in_answering(
    statuses: Vec<(StatusCode, Option<&'static str>)>,
    body: Bytes,
) -> std::io::Result<(SocketAddr, mpsc::UnboundedReceiver<Received>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (tx, rx) = mpsc::unbounded_channel();
    let statuses = Arc::new(Mutex::new(VecDeque::from(statuses)));
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let tx = tx.clone();
            let statuses = statuses.clone();
            let answer = body.clone();
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let tx = tx.clone();
                let statuses = statuses.clone();
                let answer = answer.clone();
                async move {
                    let path = req.uri().path().to_owned();
                    let header = |name| {
                        req.headers()
                            .get(name)
                            .and_then(|v| v.to_str().ok())
                            .map(str::to_owned)
                    };
                    let content_type = header("content-type").unwrap_or_default();
                    let team = header("x-team");
                    let body = req
                        .into_body()
                        .collect()
                        .await
                        .map(|b| b.to_bytes())
                        .unwrap_or_default();
                    let (status, retry_after) = relay_logging::sync::lock(&statuses, "test")
                        .and_then(|mut s| s.pop_front())
                        .unwrap_or((StatusCode::OK, None));
                    let _ = tx.send(Received {
                        path,
                        content_type,
                        team,
                        body,
                    });
                    let mut res = Response::new(Full::new(answer));
                    *res.status_mut() = status;
                    if let Some(after) = retry_after {
                        res.headers_mut().insert(
                            http::header::RETRY_AFTER,
                            http::HeaderValue::from_static(after),
                        );
                    }
                    Ok::<_, Infallible>(res)
                }
            });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok((addr, rx))
}

async fn next(rx: &mut mpsc::UnboundedReceiver<Received>) -> Result<Received, String> {
    match tokio::time::timeout(WAIT, rx.recv()).await {
        Ok(Some(received)) => Ok(received),
        Ok(None) => Err("the stand-in stopped".to_owned()),
        Err(_) => Err("nothing received in time".to_owned()),
    }
}

fn delivery(batch: usize) -> DeliveryConfig {
    DeliveryConfig {
        batch_max_items: batch,
        batch_max_delay_ms: 60_000,
        timeout_ms: 2_000,
        queue_capacity: 64,
        retry_initial_ms: 10,
        retry_max_ms: 50,
        max_attempts: 5,
    }
}

/// One record per batch, retried once a second for longer than any test runs: a collector
/// that is down keeps its drain busy.
fn retrying_for_long() -> DeliveryConfig {
    DeliveryConfig {
        retry_initial_ms: 1_000,
        retry_max_ms: 1_000,
        max_attempts: 1_000,
        ..delivery(1)
    }
}

/// The sinks with one HTTP sink toward `addr`, started.
fn start_http(addr: SocketAddr, delivery: DeliveryConfig) -> Result<SinkHandle, SinkError> {
    let config = SinksConfig {
        sinks: vec![http_sink(addr, delivery)],
        otlp: None,
    };
    Sinks::start(&config, &ctx())
}

fn http_sink(addr: SocketAddr, delivery: DeliveryConfig) -> SinkConfig {
    SinkConfig::Http(HttpSinkConfig {
        url: format!("http://{addr}/ingest"),
        headers: BTreeMap::from([("x-team".to_owned(), "infra".to_owned())]),
        header_env: BTreeMap::new(),
        delivery,
    })
}

/// The sinks with only an OTLP exporter toward `addr`.
fn otlp_exporter(addr: SocketAddr, delivery: DeliveryConfig) -> SinksConfig {
    SinksConfig {
        sinks: vec![],
        otlp: Some(OtlpConfig {
            endpoint: format!("http://{addr}"),
            service_name: "relay-worker".to_owned(),
            headers: BTreeMap::new(),
            header_env: BTreeMap::new(),
            delivery,
        }),
    }
}

/// A finished `chat` span of a new trace.
fn chat_span(ids: &IdGenerator) -> Result<SpanData, SinkError> {
    let (trace_id, _) = ids.root(None)?;
    let chat = GenAiFacts::new(Operation::Chat);
    Ok(SpanData {
        name: span_name(&chat),
        trace_id,
        span_id: ids.span_id()?,
        parent_span_id: None,
        kind: SpanKind::Client,
        start_unix_nanos: 1_700_000_000_000_000_000,
        end_unix_nanos: 1_700_000_001_000_000_000,
        status: SpanStatus::Ok,
        attributes: genai_attributes(&chat),
    })
}

fn ctx() -> SinkContext {
    SinkContext {
        user: "alice".to_owned(),
        fingerprint: "fp1".to_owned(),
        tls: None,
    }
}

#[tokio::test]
async fn the_http_sink_posts_batches_of_json_lines() -> TestResult {
    let (addr, mut rx) = stand_in(vec![]).await?;
    let sinks = start_http(addr, delivery(3))?;
    for n in 0..7 {
        sinks.record(format!("{{\"n\":{n}}}"));
    }
    sinks.flush(WAIT).await?;
    let mut batches = Vec::new();
    for _ in 0..3 {
        let received = next(&mut rx).await?;
        assert_eq!(received.path, "/ingest");
        assert_eq!(received.content_type, "application/x-ndjson");
        assert_eq!(received.team.as_deref(), Some("infra"));
        batches.push(String::from_utf8(received.body.to_vec())?);
    }
    assert_eq!(
        batches,
        [
            "{\"n\":0}\n{\"n\":1}\n{\"n\":2}\n",
            "{\"n\":3}\n{\"n\":4}\n{\"n\":5}\n",
            "{\"n\":6}\n"
        ]
    );
    let stats = sinks.stats();
    assert_eq!(stats[0].1.written, 7);
    assert_eq!(stats[0].1.dropped, 0);
    sinks.shutdown(WAIT).await?;
    Ok(())
}

#[tokio::test]
async fn a_batch_is_sent_when_its_first_record_has_waited_long_enough() -> TestResult {
    let (addr, mut rx) = stand_in(vec![]).await?;
    let mut short = delivery(100);
    short.batch_max_delay_ms = 20;
    let sinks = start_http(addr, short)?;
    sinks.record("{\"late\":true}");
    // No flush: the timer alone sends it.
    let received = next(&mut rx).await?;
    assert_eq!(&received.body[..], b"{\"late\":true}\n");
    sinks.shutdown(WAIT).await?;
    Ok(())
}

#[tokio::test]
async fn a_failed_batch_is_retried_until_it_is_delivered() -> TestResult {
    let (addr, mut rx) = stand_in(vec![
        StatusCode::SERVICE_UNAVAILABLE,
        StatusCode::TOO_MANY_REQUESTS,
    ])
    .await?;
    let sinks = start_http(addr, delivery(10))?;
    sinks.record("{\"n\":1}");
    sinks.flush(WAIT).await?;
    for _ in 0..3 {
        assert_eq!(&next(&mut rx).await?.body[..], b"{\"n\":1}\n");
    }
    assert_eq!(sinks.stats()[0].1.written, 1);
    assert_eq!(sinks.stats()[0].1.dropped, 0);
    sinks.shutdown(WAIT).await?;
    Ok(())
}

/// OTLP/HTTP retries only 429, 502, 503 and 504: a 500 or a 501 is a refusal, sent once.
#[tokio::test]
async fn a_server_error_other_than_busy_is_not_retried() -> TestResult {
    for status in [
        StatusCode::INTERNAL_SERVER_ERROR,
        StatusCode::NOT_IMPLEMENTED,
    ] {
        let (addr, mut rx) = stand_in(vec![status]).await?;
        let sinks = start_http(addr, delivery(10))?;
        sinks.record("{\"n\":1}");
        sinks.flush(WAIT).await?;
        next(&mut rx).await?;
        assert_eq!(sinks.stats()[0].1.dropped, 1, "{status}");
        assert!(rx.try_recv().is_err(), "{status} was retried");
        sinks.shutdown(WAIT).await?;
    }
    Ok(())
}

/// A busy collector's `Retry-After` is waited for, instead of the backoff (10 ms here).
#[tokio::test]
async fn a_busy_collector_is_tried_again_after_its_retry_after() -> TestResult {
    let (addr, mut rx) = stand_in_answering(
        vec![(StatusCode::SERVICE_UNAVAILABLE, Some("1"))],
        Bytes::new(),
    )
    .await?;
    let sinks = start_http(addr, delivery(10))?;
    sinks.record("{\"n\":1}");
    // The flush waits for the delivery: the refused attempt, the wait, the second one.
    let started = tokio::time::Instant::now();
    sinks.flush(WAIT).await?;
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "delivered after {:?}",
        started.elapsed()
    );
    next(&mut rx).await?;
    next(&mut rx).await?;
    assert_eq!(sinks.stats()[0].1.written, 1);
    sinks.shutdown(WAIT).await?;
    Ok(())
}

#[tokio::test]
async fn a_refused_batch_is_dropped_without_retry() -> TestResult {
    let (addr, mut rx) = stand_in(vec![StatusCode::BAD_REQUEST]).await?;
    let sinks = start_http(addr, delivery(10))?;
    sinks.record("{\"n\":1}");
    sinks.record("{\"n\":2}");
    sinks.flush(WAIT).await?;
    next(&mut rx).await?;
    assert_eq!(sinks.stats()[0].1.dropped, 2);
    sinks.record("{\"n\":3}");
    sinks.flush(WAIT).await?;
    assert_eq!(&next(&mut rx).await?.body[..], b"{\"n\":3}\n");
    sinks.shutdown(WAIT).await?;
    Ok(())
}

#[tokio::test]
async fn while_the_collector_is_down_record_never_blocks_and_drops_are_counted() -> TestResult {
    // A port nobody listens on.
    let addr = TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
    let mut slow = retrying_for_long();
    slow.queue_capacity = 4;
    let sinks = start_http(addr, slow)?;
    let started = Instant::now();
    for n in 0..1_000 {
        sinks.record(format!("{{\"n\":{n}}}"));
    }
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    let stats = sinks.stats()[0].1;
    assert_eq!(stats.written, 0);
    assert!(stats.dropped >= 1_000 - 4 - 1, "{stats:?}");
    // The drain is still retrying: a flush gives up at its deadline, shutdown cancels it.
    assert!(sinks.flush(Duration::from_millis(50)).await.is_err());
    assert!(sinks.shutdown(Duration::from_millis(50)).await.is_err());
    Ok(())
}

#[tokio::test]
async fn a_collector_that_is_down_costs_the_file_sink_nothing() -> TestResult {
    let addr = TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
    let temp = tempfile::tempdir()?;
    let mut slow = delivery(1);
    slow.queue_capacity = 2;
    slow.retry_initial_ms = 1_000;
    slow.max_attempts = 1_000;
    let config = SinksConfig {
        sinks: vec![
            http_sink(addr, slow),
            SinkConfig::File(FileSinkConfig {
                directory: temp.path().to_path_buf(),
                filename: "{user}.jsonl".to_owned(),
                queue_capacity: 100,
            }),
        ],
        otlp: None,
    };
    let sinks = Sinks::start(&config, &ctx())?;
    for n in 0..50 {
        sinks.record(format!("{{\"n\":{n}}}"));
    }
    let stats = sinks.stats();
    assert!(stats[0].1.dropped >= 50 - 2 - 1, "{stats:?}");
    // Flushing waits for every sink; the file sink is done long before the stuck one.
    let deadline = Instant::now() + WAIT;
    let mut poll = tokio::time::interval(Duration::from_millis(5));
    loop {
        poll.tick().await;
        if sinks.stats()[1].1.written == 50 {
            break;
        }
        assert!(Instant::now() < deadline, "{:?}", sinks.stats());
    }
    let text = std::fs::read_to_string(temp.path().join("alice.jsonl"))?;
    assert_eq!(text.lines().count(), 50);
    assert_eq!(sinks.stats()[1].1.dropped, 0);
    let _ = sinks.shutdown(Duration::from_millis(50)).await;
    // After shutdown a record is counted as dropped, not lost silently.
    sinks.record("{\"late\":1}");
    assert_eq!(sinks.stats()[1].1.dropped, 1);
    Ok(())
}

/// A terminal hook's flush waits for the file, not for a collector or an exporter that is
/// down: each is only asked to send, while a full flush still waits for it.
#[tokio::test]
async fn a_local_flush_waits_for_the_file_and_not_for_a_down_collector_or_exporter() -> TestResult {
    let closed = TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
    let slow = retrying_for_long();
    let collector = SinksConfig {
        sinks: vec![http_sink(closed, slow.clone())],
        otlp: None,
    };
    let exporter = otlp_exporter(closed, slow);
    for mut config in [collector, exporter] {
        let temp = tempfile::tempdir()?;
        config.sinks.push(SinkConfig::File(FileSinkConfig {
            directory: temp.path().to_path_buf(),
            filename: "{user}.jsonl".to_owned(),
            queue_capacity: 100,
        }));
        let sinks = Sinks::start(&config, &ctx())?;
        sinks.record("{\"n\":1}");
        sinks.span(chat_span(&IdGenerator::default())?);
        let started = Instant::now();
        sinks.flush_local(Duration::from_secs(2)).await?;
        let took = started.elapsed();
        assert!(took < Duration::from_millis(500), "the flush took {took:?}");
        let text = std::fs::read_to_string(temp.path().join("alice.jsonl"))?;
        assert_eq!(text, "{\"n\":1}\n");
        // The network sink is really stuck retrying: a full flush gives up at its deadline.
        assert!(sinks.flush(Duration::from_millis(50)).await.is_err());
        let _ = sinks.shutdown(Duration::from_millis(50)).await;
    }
    Ok(())
}

#[tokio::test]
async fn the_file_sink_keeps_every_record_whole_under_concurrent_writers() -> TestResult {
    let temp = tempfile::tempdir()?;
    let config = SinksConfig {
        sinks: vec![SinkConfig::File(FileSinkConfig {
            directory: temp.path().to_path_buf(),
            filename: "events-{user}-{fingerprint}.jsonl".to_owned(),
            queue_capacity: 4096,
        })],
        otlp: None,
    };
    let sinks = Sinks::start(&config, &ctx())?;
    let filler = "x".repeat(5_000);
    let mut writers = Vec::new();
    for w in 0..8 {
        let sinks = sinks.clone();
        let filler = filler.clone();
        writers.push(tokio::spawn(async move {
            for n in 0..100 {
                sinks.record(format!("{{\"w\":{w},\"n\":{n},\"pad\":\"{filler}\"}}"));
                tokio::task::yield_now().await;
            }
        }));
    }
    for writer in writers {
        writer.await?;
    }
    sinks.flush(WAIT).await?;
    let text = std::fs::read_to_string(temp.path().join("events-alice-fp1.jsonl"))?;
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 800);
    for line in lines {
        let value: serde_json::Value = serde_json::from_str(line)?;
        assert_eq!(value["pad"].as_str().map(str::len), Some(5_000));
    }
    assert_eq!(sinks.stats()[0].1.written, 800);
    sinks.shutdown(WAIT).await?;
    Ok(())
}

#[tokio::test]
async fn otlp_spans_arrive_with_their_names_attributes_and_parents() -> TestResult {
    let (addr, mut rx) = stand_in(vec![]).await?;
    let config = otlp_exporter(addr, delivery(10));
    let sinks = Sinks::start(&config, &ctx())?;
    assert!(sinks.exports_spans());
    let ids = IdGenerator::default();
    let inbound = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let (trace_id, harness_parent) = ids.root(Some(inbound))?;
    let session_id = ids.span_id()?;
    let chat_id = ids.span_id()?;
    let session = GenAiFacts {
        agent_name: Some("claude-code"),
        conversation_id: Some("sess-1"),
        ..GenAiFacts::new(Operation::InvokeAgent)
    };
    let usage = Usage {
        uncached_input: 3,
        cache_read: 40,
        output: 7,
        ..Usage::default()
    };
    let chat = GenAiFacts {
        provider: Some("anthropic"),
        request_model: Some("claude-haiku-4-5"),
        usage: Some(&usage),
        conversation_id: Some("sess-1"),
        ..GenAiFacts::new(Operation::Chat)
    };
    sinks.span(SpanData {
        name: span_name(&chat),
        trace_id,
        span_id: chat_id,
        parent_span_id: Some(session_id),
        kind: SpanKind::Client,
        start_unix_nanos: 1_700_000_000_000_000_000,
        end_unix_nanos: 1_700_000_001_000_000_000,
        status: SpanStatus::Ok,
        attributes: genai_attributes(&chat),
    });
    sinks.span(SpanData {
        name: span_name(&session),
        trace_id,
        span_id: session_id,
        parent_span_id: harness_parent,
        kind: SpanKind::Internal,
        start_unix_nanos: 1_699_999_999_000_000_000,
        end_unix_nanos: 1_700_000_002_000_000_000,
        status: SpanStatus::Unset,
        attributes: genai_attributes(&session),
    });
    sinks.flush(WAIT).await?;
    let received = next(&mut rx).await?;
    assert_eq!(received.path, "/v1/traces");
    assert_eq!(received.content_type, "application/x-protobuf");
    let request = ExportTraceServiceRequest::decode(received.body)?;
    let spans = &request.resource_spans[0].scope_spans[0].spans;
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["chat claude-haiku-4-5", "invoke_agent claude-code"]);
    let inbound_trace = hex_decode("4bf92f3577b34da6a3ce929d0e0e4736");
    assert!(spans.iter().all(|s| s.trace_id == inbound_trace));
    assert_eq!(spans[0].parent_span_id, spans[1].span_id);
    assert_eq!(spans[1].parent_span_id, hex_decode("00f067aa0ba902b7"));
    let attribute = |span: usize, key: &str| {
        spans[span]
            .attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.as_ref())
            .and_then(|v| v.value.clone())
    };
    let text = |s: &str| Some(any_value::Value::StringValue(s.to_owned()));
    assert_eq!(attribute(0, "gen_ai.operation.name"), text("chat"));
    assert_eq!(attribute(0, "gen_ai.provider.name"), text("anthropic"));
    assert_eq!(
        attribute(0, "gen_ai.request.model"),
        text("claude-haiku-4-5")
    );
    assert_eq!(
        attribute(0, "gen_ai.usage.input_tokens"),
        Some(any_value::Value::IntValue(43))
    );
    assert_eq!(
        attribute(0, "gen_ai.usage.cache_read.input_tokens"),
        Some(any_value::Value::IntValue(40))
    );
    assert_eq!(attribute(0, "openinference.span.kind"), text("LLM"));
    assert_eq!(attribute(1, "gen_ai.conversation.id"), text("sess-1"));
    assert_eq!(attribute(1, "session.id"), text("sess-1"));
    assert_eq!(
        sinks.stats(),
        vec![(
            "otlp",
            crate::SinkStats {
                written: 2,
                dropped: 0
            }
        )]
    );
    sinks.shutdown(WAIT).await?;
    Ok(())
}

/// A collector that takes a batch but rejects some of its spans (OTLP's partial success) has
/// them counted as dropped and logged with its message, and the batch is not sent again.
#[tokio::test]
async fn spans_a_collector_rejects_are_counted_and_logged_not_sent_again() -> TestResult {
    use opentelemetry_proto::tonic::collector::trace::v1::{
        ExportTracePartialSuccess, ExportTraceServiceResponse,
    };
    let answer = ExportTraceServiceResponse {
        partial_success: Some(ExportTracePartialSuccess {
            rejected_spans: 1,
            error_message: "span too old\nsecond line; bad key sk-collector-key-123 for tenant"
                .to_owned(),
        }),
    };
    let (addr, mut rx) = stand_in_answering(vec![], Bytes::from(answer.encode_to_vec())).await?;
    let mut config = otlp_exporter(addr, delivery(10));
    // A collector that echoes the credential it was sent: header values never reach a log.
    if let Some(otlp) = config.otlp.as_mut() {
        // A word that is part of another is masked after it, not before.
        otlp.headers
            .insert("authorization".to_owned(), "Bearer sk-collector".to_owned());
        otlp.headers
            .insert("x-api-key".to_owned(), "sk-collector-key-123".to_owned());
    }
    let (capture, dispatch) = relay_logging::LogCapture::jsonl("warn");
    let _guard = tracing::dispatcher::set_default(&dispatch);
    let sinks = Sinks::start(&config, &ctx())?;
    let ids = IdGenerator::default();
    for _ in 0..3 {
        sinks.span(chat_span(&ids)?);
    }
    sinks.flush(WAIT).await?;
    next(&mut rx).await?;
    assert_eq!(
        sinks.stats(),
        vec![(
            "otlp",
            crate::SinkStats {
                written: 2,
                dropped: 1
            }
        )]
    );
    sinks.shutdown(WAIT).await?;
    assert!(rx.try_recv().is_err(), "the batch was sent again");
    let logged = capture.contents();
    let line = logged
        .lines()
        .find(|line| line.contains(r#""event":"sink_items_rejected""#))
        .unwrap_or_else(|| panic!("no rejection logged: {logged}"));
    assert!(line.contains(r#""rejected":1"#), "{line}");
    assert!(
        line.contains(r#""collector_message":"span too old second line; bad key … for tenant""#),
        "{line}"
    );
    assert!(logged.contains(r#""reason":"rejected""#), "{logged}");
    Ok(())
}

fn hex_decode(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .filter_map(|i| u8::from_str_radix(&hex[i..i + 2], 16).ok())
        .collect()
}
