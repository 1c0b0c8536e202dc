//! Transcripts: a captured response body (written out, or a fixture stream) and the report it
//! gives (`UPDATE_EXPECT=1 cargo test -p relay-plugins` rewrites them). Every body is also fed
//! one byte at a time, which must give the same report.

use std::fmt::Write as _;

use expect_test::{Expect, expect};
use proptest::prelude::*;

use super::*;

const ANTHROPIC: &[u8] = include_bytes!("../../../relay-testkit/fixtures/anthropic-messages.sse");
const RESPONSES: &[u8] = include_bytes!("../../../relay-testkit/fixtures/openai-responses.sse");
const CHAT: &[u8] = include_bytes!("../../../relay-testkit/fixtures/openai-chat.sse");

use BodyKind::{EventStream, Json};
use WireFormat::{AnthropicMessages, OpenAiChatCompletions, OpenAiResponses};

fn render(report: &UsageReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "gen_ai.provider.name={} gen_ai.response.model={:?} truncated={} unreadable={}",
        report.format.provider_name(),
        report.response_model,
        report.truncated,
        report.unreadable_events,
    );
    match &report.usage {
        None => out.push_str("no usage\n"),
        Some(u) => {
            let _ = writeln!(
                out,
                "usage: uncached_input={} cache_read={} cache_write_5m={} cache_write_1h={} output={} reasoning={}",
                u.uncached_input,
                u.cache_read,
                u.cache_write_5m,
                u.cache_write_1h,
                u.output,
                u.reasoning.map_or("unknown".to_owned(), |r| r.to_string()),
            );
            let attributes: Vec<String> = u
                .genai_attributes()
                .map(|(name, value)| format!("{name}={value}"))
                .collect();
            let _ = writeln!(out, "{}", attributes.join(" "));
        }
    }
    out
}

fn read(format: WireFormat, kind: BodyKind, body: &[u8]) -> UsageReport {
    UsageTap::read_body(format, kind, body)
}

fn check(format: WireFormat, kind: BodyKind, body: &[u8], expect: Expect) {
    let whole = read(format, kind, body);
    let mut tap = UsageTap::new(format, kind, body.len().max(1));
    for byte in body.chunks(1) {
        tap.push(byte);
    }
    assert_eq!(
        tap.finish(),
        whole,
        "byte-by-byte feeding changed the report"
    );
    expect.assert_eq(&render(&whole));
}

#[test]
fn anthropic_fixture_stream() {
    check(
        AnthropicMessages,
        EventStream,
        ANTHROPIC,
        expect![[r#"
            gen_ai.provider.name=anthropic gen_ai.response.model=Some("m") truncated=false unreadable=0
            usage: uncached_input=10 cache_read=0 cache_write_5m=0 cache_write_1h=0 output=5 reasoning=unknown
            gen_ai.usage.input_tokens=10 gen_ai.usage.output_tokens=5 gen_ai.usage.cache_read.input_tokens=0 gen_ai.usage.cache_creation.input_tokens=0
        "#]],
    );
}

/// Anthropic's `input_tokens` excludes the cache: the GenAI total must add cache reads and
/// both cache-write lifetimes back (missing them under-reports input by the cached share).
#[test]
fn anthropic_cache_reads_and_both_write_lifetimes() {
    check(
        AnthropicMessages,
        EventStream,
        br#"event: message_start
data: {"type":"message_start","message":{"model":"claude-sonnet-4-5-20250929","usage":{"input_tokens":120,"cache_read_input_tokens":30000,"cache_creation_input_tokens":5000,"cache_creation":{"ephemeral_5m_input_tokens":2000,"ephemeral_1h_input_tokens":3000},"output_tokens":1}}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"usage \"input_tokens\": 999999"}}

event: ping
data: {"type": "ping"}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":850}}

event: message_stop
data: {"type":"message_stop"}

"#,
        expect![[r#"
            gen_ai.provider.name=anthropic gen_ai.response.model=Some("claude-sonnet-4-5-20250929") truncated=false unreadable=0
            usage: uncached_input=120 cache_read=30000 cache_write_5m=2000 cache_write_1h=3000 output=850 reasoning=unknown
            gen_ai.usage.input_tokens=35120 gen_ai.usage.output_tokens=850 gen_ai.usage.cache_read.input_tokens=30000 gen_ai.usage.cache_creation.input_tokens=5000
        "#]],
    );
}

#[test]
fn anthropic_message_delta_counts_replace_the_start_counts() {
    // Newer streams repeat the (cumulative) input and cache counts in message_delta; they are
    // the final ones and replace, never add to, those of message_start. A null is no report.
    check(
        AnthropicMessages,
        EventStream,
        br#"event: message_start
data: {"type":"message_start","message":{"model":"claude-opus-4-1","usage":{"input_tokens":7,"cache_read_input_tokens":100,"cache_creation_input_tokens":40,"output_tokens":1}}}

event: message_delta
data: {"type":"message_delta","usage":{"input_tokens":7,"cache_read_input_tokens":100,"cache_creation_input_tokens":null,"output_tokens":60}}

event: message_stop
data: {"type":"message_stop"}

"#,
        expect![[r#"
            gen_ai.provider.name=anthropic gen_ai.response.model=Some("claude-opus-4-1") truncated=false unreadable=0
            usage: uncached_input=7 cache_read=100 cache_write_5m=40 cache_write_1h=0 output=60 reasoning=unknown
            gen_ai.usage.input_tokens=147 gen_ai.usage.output_tokens=60 gen_ai.usage.cache_read.input_tokens=100 gen_ai.usage.cache_creation.input_tokens=40
        "#]],
    );
}

#[test]
fn anthropic_stream_cut_before_message_stop() {
    // What was seen is kept; the output count is the one of message_start, and the flag says
    // the stream ended early.
    check(
        AnthropicMessages,
        EventStream,
        b"event: message_start\r\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"m\",\"usage\":{\"input_tokens\":10,\"cache_read_input_tokens\":5,\"output_tokens\":1}}}\r\n\r\nevent: content_block_delta\r\ndata: {\"type\":\"content_block_del",
        expect![[r#"
            gen_ai.provider.name=anthropic gen_ai.response.model=Some("m") truncated=true unreadable=0
            usage: uncached_input=10 cache_read=5 cache_write_5m=0 cache_write_1h=0 output=1 reasoning=unknown
            gen_ai.usage.input_tokens=15 gen_ai.usage.output_tokens=1 gen_ai.usage.cache_read.input_tokens=5 gen_ai.usage.cache_creation.input_tokens=0
        "#]],
    );
}

#[test]
fn anthropic_json_body() {
    check(
        AnthropicMessages,
        Json,
        br#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-haiku-4-5","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":3,"cache_read_input_tokens":2048,"cache_creation_input_tokens":1024,"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":1024},"output_tokens":9}}"#,
        expect![[r#"
            gen_ai.provider.name=anthropic gen_ai.response.model=Some("claude-haiku-4-5") truncated=false unreadable=0
            usage: uncached_input=3 cache_read=2048 cache_write_5m=0 cache_write_1h=1024 output=9 reasoning=unknown
            gen_ai.usage.input_tokens=3075 gen_ai.usage.output_tokens=9 gen_ai.usage.cache_read.input_tokens=2048 gen_ai.usage.cache_creation.input_tokens=1024
        "#]],
    );
}

#[test]
fn anthropic_error_body_has_no_usage() {
    check(
        AnthropicMessages,
        Json,
        br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        expect![[r#"
            gen_ai.provider.name=anthropic gen_ai.response.model=None truncated=false unreadable=0
            no usage
        "#]],
    );
}

#[test]
fn responses_fixture_stream() {
    check(
        OpenAiResponses,
        EventStream,
        RESPONSES,
        expect![[r#"
            gen_ai.provider.name=openai gen_ai.response.model=Some("m") truncated=false unreadable=0
            usage: uncached_input=10 cache_read=0 cache_write_5m=0 cache_write_1h=0 output=5 reasoning=0
            gen_ai.usage.input_tokens=10 gen_ai.usage.output_tokens=5 gen_ai.usage.cache_read.input_tokens=0 gen_ai.usage.cache_creation.input_tokens=0 gen_ai.usage.reasoning.output_tokens=0
        "#]],
    );
}

/// OpenAI's `input_tokens` already includes `cached_tokens`: adding them again would
/// over-report input (the classic double count).
#[test]
fn responses_cached_and_reasoning_tokens_are_parts_not_additions() {
    check(
        OpenAiResponses,
        EventStream,
        br#"event: response.created
data: {"type":"response.created","response":{"model":"gpt-5-2025-08-07","status":"in_progress"}}

event: response.output_text.delta
data: {"type":"response.output_text.delta","delta":"\"usage\""}

event: response.completed
data: {"type":"response.completed","response":{"model":"gpt-5-2025-08-07","status":"completed","usage":{"input_tokens":40000,"input_tokens_details":{"cached_tokens":32000},"output_tokens":1500,"output_tokens_details":{"reasoning_tokens":1200},"total_tokens":41500}}}

"#,
        expect![[r#"
            gen_ai.provider.name=openai gen_ai.response.model=Some("gpt-5-2025-08-07") truncated=false unreadable=0
            usage: uncached_input=8000 cache_read=32000 cache_write_5m=0 cache_write_1h=0 output=1500 reasoning=1200
            gen_ai.usage.input_tokens=40000 gen_ai.usage.output_tokens=1500 gen_ai.usage.cache_read.input_tokens=32000 gen_ai.usage.cache_creation.input_tokens=0 gen_ai.usage.reasoning.output_tokens=1200
        "#]],
    );
}

#[test]
fn responses_stream_cut_before_completion_has_the_model_only() {
    check(
        OpenAiResponses,
        EventStream,
        b"event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"model\":\"gpt-5\"}}\n\nevent: response.output_text.delta\ndata: {\"delta\":\"hi\"}\n\n",
        expect![[r#"
            gen_ai.provider.name=openai gen_ai.response.model=Some("gpt-5") truncated=true unreadable=0
            no usage
        "#]],
    );
}

#[test]
fn responses_incomplete_is_an_end_with_usage() {
    check(
        OpenAiResponses,
        EventStream,
        b"data: {\"type\":\"response.incomplete\",\"response\":{\"model\":\"gpt-5\",\"usage\":{\"input_tokens\":10,\"output_tokens\":4096}}}\n\n",
        expect![[r#"
            gen_ai.provider.name=openai gen_ai.response.model=Some("gpt-5") truncated=false unreadable=0
            usage: uncached_input=10 cache_read=0 cache_write_5m=0 cache_write_1h=0 output=4096 reasoning=unknown
            gen_ai.usage.input_tokens=10 gen_ai.usage.output_tokens=4096 gen_ai.usage.cache_read.input_tokens=0 gen_ai.usage.cache_creation.input_tokens=0
        "#]],
    );
}

#[test]
fn responses_json_body() {
    check(
        OpenAiResponses,
        Json,
        br#"{"id":"resp_1","object":"response","model":"gpt-5-mini","output":[],"usage":{"input_tokens":2000,"input_tokens_details":{"cached_tokens":1920},"output_tokens":64,"output_tokens_details":{"reasoning_tokens":0}}}"#,
        expect![[r#"
            gen_ai.provider.name=openai gen_ai.response.model=Some("gpt-5-mini") truncated=false unreadable=0
            usage: uncached_input=80 cache_read=1920 cache_write_5m=0 cache_write_1h=0 output=64 reasoning=0
            gen_ai.usage.input_tokens=2000 gen_ai.usage.output_tokens=64 gen_ai.usage.cache_read.input_tokens=1920 gen_ai.usage.cache_creation.input_tokens=0 gen_ai.usage.reasoning.output_tokens=0
        "#]],
    );
}

#[test]
fn chat_fixture_stream_reports_no_usage_without_include_usage() {
    check(
        OpenAiChatCompletions,
        EventStream,
        CHAT,
        expect![[r#"
            gen_ai.provider.name=openai gen_ai.response.model=Some("m") truncated=false unreadable=0
            no usage
        "#]],
    );
}

#[test]
fn chat_final_usage_chunk_with_cached_and_reasoning_tokens() {
    check(
        OpenAiChatCompletions,
        EventStream,
        b"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4.1-2025-04-14\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\r\n\r\n: keep-alive\r\n\r\ndata: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4.1-2025-04-14\",\"choices\":[],\"usage\":{\"prompt_tokens\":1500,\"prompt_tokens_details\":{\"cached_tokens\":1024},\"completion_tokens\":300,\"completion_tokens_details\":{\"reasoning_tokens\":120},\"total_tokens\":1800}}\r\n\r\ndata: [DONE]\r\n\r\n",
        expect![[r#"
            gen_ai.provider.name=openai gen_ai.response.model=Some("gpt-4.1-2025-04-14") truncated=false unreadable=0
            usage: uncached_input=476 cache_read=1024 cache_write_5m=0 cache_write_1h=0 output=300 reasoning=120
            gen_ai.usage.input_tokens=1500 gen_ai.usage.output_tokens=300 gen_ai.usage.cache_read.input_tokens=1024 gen_ai.usage.cache_creation.input_tokens=0 gen_ai.usage.reasoning.output_tokens=120
        "#]],
    );
}

#[test]
fn chat_stream_without_done_is_truncated() {
    check(
        OpenAiChatCompletions,
        EventStream,
        b"data: {\"model\":\"gpt-4.1\",\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n",
        expect![[r#"
            gen_ai.provider.name=openai gen_ai.response.model=Some("gpt-4.1") truncated=true unreadable=0
            no usage
        "#]],
    );
}

#[test]
fn chat_json_body() {
    check(
        OpenAiChatCompletions,
        Json,
        br#"{"id":"c2","object":"chat.completion","model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"hi"}}],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}"#,
        expect![[r#"
            gen_ai.provider.name=openai gen_ai.response.model=Some("gpt-4o-mini") truncated=false unreadable=0
            usage: uncached_input=12 cache_read=0 cache_write_5m=0 cache_write_1h=0 output=3 reasoning=unknown
            gen_ai.usage.input_tokens=12 gen_ai.usage.output_tokens=3 gen_ai.usage.cache_read.input_tokens=0 gen_ai.usage.cache_creation.input_tokens=0
        "#]],
    );
}

#[test]
fn unreadable_events_are_counted_not_guessed() {
    check(
        AnthropicMessages,
        EventStream,
        b"event: message_start\ndata: not json\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":-3}}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":8}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        expect![[r#"
            gen_ai.provider.name=anthropic gen_ai.response.model=None truncated=false unreadable=2
            usage: uncached_input=0 cache_read=0 cache_write_5m=0 cache_write_1h=0 output=8 reasoning=unknown
            gen_ai.usage.input_tokens=0 gen_ai.usage.output_tokens=8 gen_ai.usage.cache_read.input_tokens=0 gen_ai.usage.cache_creation.input_tokens=0
        "#]],
    );
    check(
        OpenAiChatCompletions,
        Json,
        b"{\"model\": \"cut",
        expect![[r#"
            gen_ai.provider.name=openai gen_ai.response.model=None truncated=true unreadable=0
            no usage
        "#]],
    );
}

#[test]
fn a_json_body_over_the_bound_is_truncated() {
    let mut tap = UsageTap::new(OpenAiChatCompletions, Json, 8);
    tap.push(br#"{"model":"gpt-4o","usage":{"prompt_tokens":1}}"#);
    expect![[r#"
        gen_ai.provider.name=openai gen_ai.response.model=None truncated=true unreadable=1
        no usage
    "#]]
    .assert_eq(&render(&tap.finish()));
}

#[test]
fn formats_and_body_kinds_from_the_request() {
    assert_eq!(
        WireFormat::from_path("/v1/messages?beta=true"),
        Some(AnthropicMessages)
    );
    assert_eq!(
        WireFormat::from_path("/v1/responses"),
        Some(OpenAiResponses)
    );
    assert_eq!(
        WireFormat::from_path("/openai/v1/chat/completions"),
        Some(OpenAiChatCompletions)
    );
    assert_eq!(
        WireFormat::from_path("/v1/messages/count_tokens?beta=true"),
        Some(AnthropicMessages)
    );
    assert_eq!(WireFormat::from_path("/v1/models"), None);
    assert_eq!(
        BodyKind::from_content_type(Some("text/event-stream; charset=utf-8")),
        EventStream
    );
    assert_eq!(
        BodyKind::from_content_type(Some("Text/Event-Stream")),
        EventStream
    );
    assert_eq!(BodyKind::from_content_type(Some("application/json")), Json);
    assert_eq!(BodyKind::from_content_type(None), Json);
}

/// How the worker reads a compressed side copy: decode within the capture bound, then read.
#[test]
fn a_gzip_stream_is_read_after_bounded_decoding() {
    use std::io::Write as _;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let _ = encoder.write_all(ANTHROPIC);
    let gzipped = encoder.finish().unwrap_or_default();
    let decoded = crate::decode::decode(Some("gzip"), &gzipped, 4 << 20);
    let Ok(decoded) = decoded else {
        panic!("{decoded:?}");
    };
    assert!(!decoded.truncated);
    let report = read(AnthropicMessages, EventStream, &decoded.body);
    assert_eq!(report, read(AnthropicMessages, EventStream, ANTHROPIC));

    // Cut by the bound inside the stream: what was seen, flagged.
    let Ok(cut) = crate::decode::decode(Some("gzip"), &gzipped, 400) else {
        panic!("decoding failed");
    };
    assert!(cut.truncated);
    expect![[r#"
        gen_ai.provider.name=anthropic gen_ai.response.model=Some("m") truncated=true unreadable=0
        usage: uncached_input=10 cache_read=0 cache_write_5m=0 cache_write_1h=0 output=1 reasoning=unknown
        gen_ai.usage.input_tokens=10 gen_ai.usage.output_tokens=1 gen_ai.usage.cache_read.input_tokens=0 gen_ai.usage.cache_creation.input_tokens=0
    "#]]
    .assert_eq(&render(&read(AnthropicMessages, EventStream, &cut.body)));
}

#[test]
fn hostile_events_are_skipped_without_harm() {
    // JSON nested far beyond serde_json's recursion limit, and a usage event over the bound.
    let deep = format!("data: {}{}\n\n", "[".repeat(100_000), "]".repeat(100_000));
    let mut tap = UsageTap::new(OpenAiChatCompletions, EventStream, 256 << 10);
    tap.push(deep.as_bytes());
    let padding = "x".repeat(300 << 10);
    tap.push(
        format!(
            "data: {{\"model\":\"m\",\"usage\":{{\"prompt_tokens\":1}},\"pad\":\"{padding}\"}}\n\n"
        )
        .as_bytes(),
    );
    tap.push(b"data: [DONE]\n\n");
    expect![[r#"
        gen_ai.provider.name=openai gen_ai.response.model=None truncated=false unreadable=2
        no usage
    "#]]
    .assert_eq(&render(&tap.finish()));
}

proptest! {
    /// Any split of a body into chunks gives the same report, and no bytes make it panic.
    #[test]
    fn any_chunk_split_gives_the_same_report(
        which in 0usize..3,
        points in proptest::collection::vec(any::<usize>(), 0..16),
        noise in proptest::collection::vec(any::<u8>(), 0..64),
        noise_at in any::<usize>(),
    ) {
        let (format, fixture) = [
            (AnthropicMessages, ANTHROPIC),
            (OpenAiResponses, RESPONSES),
            (OpenAiChatCompletions, CHAT),
        ][which];
        let mut body = fixture.to_vec();
        let at = noise_at % (body.len() + 1);
        body.splice(at..at, noise);
        let whole = read(format, EventStream, &body);
        let mut cuts: Vec<usize> = points.iter().map(|p| p % (body.len() + 1)).collect();
        cuts.sort_unstable();
        let mut tap = UsageTap::new(format, EventStream, body.len().max(1));
        let mut start = 0;
        for cut in cuts {
            tap.push(&body[start..cut]);
            start = cut;
        }
        tap.push(&body[start..]);
        prop_assert_eq!(tap.finish(), whole);
    }
}

/// A stream that reports an error after its successful head names it; one that ends well
/// reports none.
#[test]
fn an_error_reported_inside_a_stream_is_named() {
    for (format, body, error) in [
        (
            AnthropicMessages,
            &b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-x\",\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n\
               event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"[..],
            Some("overloaded_error"),
        ),
        (
            OpenAiResponses,
            b"event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"model\":\"gpt-x\",\"error\":{\"code\":\"server_error\",\"message\":\"x\"}}}\n\n",
            Some("server_error"),
        ),
        (
            OpenAiResponses,
            b"event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"model\":\"gpt-x\",\"error\":null}}\n\n",
            Some("response.failed"),
        ),
        (
            OpenAiResponses,
            b"event: error\ndata: {\"type\":\"error\",\"code\":\"rate_limit_exceeded\",\"message\":\"x\"}\n\n",
            Some("rate_limit_exceeded"),
        ),
        (
            OpenAiResponses,
            b"event: error\ndata: {\"type\":\"error\",\"code\":500,\"message\":\"x\"}\n\n",
            Some("error"),
        ),
        (
            OpenAiChatCompletions,
            b"data: {\"model\":\"gpt-x\",\"choices\":[]}\n\ndata: {\"error\":{\"type\":\"server_error\",\"message\":\"x\"}}\n\n",
            Some("server_error"),
        ),
        (AnthropicMessages, ANTHROPIC, None),
        (OpenAiResponses, RESPONSES, None),
        (OpenAiChatCompletions, CHAT, None),
    ] {
        let report = read(format, EventStream, body);
        assert_eq!(report.error.as_deref(), error, "{format:?}");
    }
}

/// The answer's id and why it stopped, from each format's stream and whole body.
#[test]
fn the_response_id_and_finish_reasons_are_read() {
    for (format, kind, body, id, reasons) in [
        (
            AnthropicMessages,
            EventStream,
            ANTHROPIC,
            "msg_mock_651f7b64e8cb",
            vec!["end_turn"],
        ),
        (
            OpenAiResponses,
            EventStream,
            RESPONSES,
            "resp_mock_19f3d5c9263e",
            vec!["completed"],
        ),
        (
            OpenAiChatCompletions,
            EventStream,
            CHAT,
            "chatcmpl-mockccb4ed379d",
            vec!["stop"],
        ),
        (
            OpenAiChatCompletions,
            EventStream,
            &b"data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"delta\":{},\"finish_reason\":null}]}\n\n\
               data: {\"id\":\"c1\",\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n"[..],
            "c1",
            vec!["length"],
        ),
        (
            AnthropicMessages,
            Json,
            &br#"{"id":"msg_2","model":"claude-x","stop_reason":"tool_use","usage":{"input_tokens":1,"output_tokens":2}}"#[..],
            "msg_2",
            vec!["tool_use"],
        ),
        (
            OpenAiResponses,
            Json,
            br#"{"id":"resp_2","status":"incomplete","model":"gpt-x"}"#,
            "resp_2",
            vec!["incomplete"],
        ),
        (
            OpenAiChatCompletions,
            Json,
            br#"{"id":"chatcmpl-2","model":"gpt-x","choices":[{"finish_reason":"length"},{"finish_reason":"stop"}]}"#,
            "chatcmpl-2",
            vec!["length", "stop"],
        ),
    ] {
        let report = read(format, kind, body);
        assert_eq!(report.response_id.as_deref(), Some(id), "{format:?} {kind:?}");
        assert_eq!(report.finish_reasons, reasons, "{format:?} {kind:?}");
    }
}

/// A whole Chat error body comes with its failed status: it is no failure after a head,
/// and an `error` of an unexpected shape costs the usage beside it nothing.
#[test]
fn a_json_error_body_names_no_stream_error_and_keeps_its_usage() {
    let report = read(
        OpenAiChatCompletions,
        Json,
        br#"{"error":{"type":"invalid_request_error","message":"x"}}"#,
    );
    assert_eq!(report.error, None);
    let report = read(
        OpenAiChatCompletions,
        EventStream,
        b"data: {\"model\":\"m\",\"error\":\"oops\",\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n",
    );
    assert_eq!(report.error.as_deref(), Some("error"));
    assert_eq!(report.unreadable_events, 0);
    assert_eq!(report.usage.map(|u| u.output), Some(1));
}

/// A reason repeated in a later chunk counts once, several choices are in their order,
/// and choices of an unexpected shape cost their reasons, not the usage beside them.
#[test]
fn finish_reasons_are_one_per_choice_in_order_and_read_leniently() {
    let report = read(
        OpenAiChatCompletions,
        EventStream,
        b"data: {\"id\":\"c\",\"model\":\"m\",\"choices\":[{\"index\":1,\"delta\":{},\"finish_reason\":\"length\"},{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
          data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n",
    );
    assert_eq!(report.finish_reasons, ["stop", "length"]);
    for chunk in [
        &b"data: {\"model\":\"m\",\"choices\":null,\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n"[..],
        b"data: {\"model\":\"m\",\"choices\":[{\"finish_reason\":7}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n",
        b"data: {\"model\":\"m\",\"choices\":[{\"index\":-1,\"finish_reason\":null}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n",
    ] {
        let report = read(OpenAiChatCompletions, EventStream, chunk);
        assert_eq!(report.unreadable_events, 0, "{}", String::from_utf8_lossy(chunk));
        assert_eq!(report.usage.map(|u| u.output), Some(1));
        assert!(report.finish_reasons.is_empty());
    }
}
