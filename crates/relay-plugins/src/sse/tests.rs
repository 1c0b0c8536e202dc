//! Transcripts of event streams: the input (split into the chunks given) and every event
//! dispatched, then whether the stream was cut (`UPDATE_EXPECT=1` rewrites them).

use std::fmt::Write as _;

use expect_test::{Expect, expect};
use proptest::prelude::*;

use super::*;

const ANTHROPIC: &[u8] = include_bytes!("../../../relay-testkit/fixtures/anthropic-messages.sse");
const RESPONSES: &[u8] = include_bytes!("../../../relay-testkit/fixtures/openai-responses.sse");
const CHAT: &[u8] = include_bytes!("../../../relay-testkit/fixtures/openai-chat.sse");

fn transcript(chunks: &[&[u8]], max_event_bytes: usize) -> String {
    let mut parser = SseParser::new(max_event_bytes);
    let mut out = String::new();
    for chunk in chunks {
        parser.push(chunk, &mut |e: SseEvent<'_>| {
            let _ = writeln!(
                out,
                "event={:?} id={:?} data={:?}",
                String::from_utf8_lossy(e.event),
                String::from_utf8_lossy(e.id),
                String::from_utf8_lossy(e.data),
            );
        });
    }
    let dropped = parser.dropped_events();
    let retry = parser.retry();
    let cut = parser.finish();
    let _ = writeln!(out, "end: cut={cut} dropped={dropped} retry={retry:?}");
    out
}

fn check(chunks: &[&[u8]], expect: Expect) {
    expect.assert_eq(&transcript(chunks, 1 << 20));
}

#[test]
fn line_endings_lf_crlf_and_cr_all_end_lines() {
    check(
        &[b"data: lf\n\ndata: crlf\r\n\r\ndata: cr\r\rdata: mixed\r\n\n"],
        expect![[r#"
            event="message" id="" data="lf"
            event="message" id="" data="crlf"
            event="message" id="" data="cr"
            event="message" id="" data="mixed"
            end: cut=false dropped=0 retry=None
        "#]],
    );
}

#[test]
fn a_crlf_split_across_chunks_is_one_line_end() {
    // The CR ends the first chunk; the LF that starts the next one must not be an empty line
    // (which would dispatch early) but the rest of the same line end.
    check(
        &[b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"],
        expect![[r#"
            event="message" id="" data="a\nb"
            end: cut=false dropped=0 retry=None
        "#]],
    );
}

#[test]
fn comments_fields_without_colon_and_the_optional_space() {
    check(
        &[b": a comment\n:another\ndata\ndata:no space\ndata:  two spaces\nunknown: x\n\n"],
        expect![[r#"
            event="message" id="" data="\nno space\n two spaces"
            end: cut=false dropped=0 retry=None
        "#]],
    );
}

#[test]
fn event_names_ids_and_retry() {
    check(
        &[
            b"event: ping\nid: 7\nretry: 1500\ndata: {}\n\n",
            b"data: after\n\n",
            b"id: bad\0id\nretry: 12x\nevent: x\ndata: kept id\n\n",
            b"id\ndata: cleared id\n\n",
        ],
        expect![[r#"
            event="ping" id="7" data="{}"
            event="message" id="7" data="after"
            event="x" id="7" data="kept id"
            event="message" id="" data="cleared id"
            end: cut=false dropped=0 retry=Some(1500)
        "#]],
    );
}

#[test]
fn an_event_without_data_is_not_dispatched() {
    check(
        &[b"event: lonely\n\nid: 3\n\n\n\ndata: x\n\n"],
        expect![[r#"
            event="message" id="3" data="x"
            end: cut=false dropped=0 retry=None
        "#]],
    );
}

#[test]
fn a_leading_bom_is_dropped_even_when_split_but_only_at_the_start() {
    // A second BOM is part of the next field name, which is then unknown: "two" is lost.
    check(
        &[
            b"\xEF",
            b"\xBB",
            b"\xBFdata: one\n\n\xEF\xBB\xBFdata: two\n\n",
        ],
        expect![[r#"
            event="message" id="" data="one"
            end: cut=false dropped=0 retry=None
        "#]],
    );
    // A prefix of a BOM that turns out not to be one is content.
    check(
        &[b"\xEF", b"data: x\n\n"],
        expect![[r#"
            end: cut=false dropped=0 retry=None
        "#]],
    );
}

#[test]
fn non_utf8_bytes_pass_through() {
    let mut seen = Vec::new();
    let mut parser = SseParser::new(1024);
    parser.push(b"data: \xFF\xFE ok\n\n", &mut |e| {
        seen.push(e.data.to_vec())
    });
    assert_eq!(seen, vec![b"\xFF\xFE ok".to_vec()]);
}

#[test]
fn a_stream_cut_inside_an_event_says_so_and_drops_it() {
    check(
        &[b"data: whole\n\ndata: half"],
        expect![[r#"
            event="message" id="" data="whole"
            end: cut=true dropped=0 retry=None
        "#]],
    );
    check(
        &[b"data: whole\n\ndata: no blank line\n"],
        expect![[r#"
            event="message" id="" data="whole"
            end: cut=true dropped=0 retry=None
        "#]],
    );
}

#[test]
fn an_oversized_event_is_dropped_whole_and_the_next_one_survives() {
    let big = [b'x'; 64];
    let chunks: Vec<&[u8]> = vec![
        b"data: small\n\n",
        b"data: ",
        &big,
        &big,
        b"\ndata: rest of the big event\n\n",
        b"data: ",
        &big,
        b"\n\ndata: after\n\n",
    ];
    expect![[r#"
        event="message" id="" data="small"
        event="message" id="" data="after"
        end: cut=false dropped=2 retry=None
    "#]]
    .assert_eq(&transcript(&chunks, 48));
}

#[test]
fn the_fixture_streams() {
    check(
        &[ANTHROPIC],
        expect![[r#"
            event="message_start" id="" data="{\"type\": \"message_start\", \"message\": {\"id\": \"msg_mock_651f7b64e8cb\", \"type\": \"message\", \"role\": \"assistant\", \"model\": \"m\", \"content\": [], \"stop_reason\": null, \"stop_sequence\": null, \"usage\": {\"input_tokens\": 10, \"output_tokens\": 1, \"cache_creation_input_tokens\": 0, \"cache_read_input_tokens\": 0}}}"
            event="content_block_start" id="" data="{\"type\": \"content_block_start\", \"index\": 0, \"content_block\": {\"type\": \"text\", \"text\": \"\"}}"
            event="ping" id="" data="{\"type\": \"ping\"}"
            event="content_block_delta" id="" data="{\"type\": \"content_block_delta\", \"index\": 0, \"delta\": {\"type\": \"text_delta\", \"text\": \"hi from mock\"}}"
            event="content_block_stop" id="" data="{\"type\": \"content_block_stop\", \"index\": 0}"
            event="message_delta" id="" data="{\"type\": \"message_delta\", \"delta\": {\"stop_reason\": \"end_turn\", \"stop_sequence\": null}, \"usage\": {\"output_tokens\": 5}}"
            event="message_stop" id="" data="{\"type\": \"message_stop\"}"
            end: cut=false dropped=0 retry=None
        "#]],
    );
    check(
        &[CHAT],
        expect![[r#"
            event="message" id="" data="{\"id\": \"chatcmpl-mockccb4ed379d\", \"object\": \"chat.completion.chunk\", \"created\": 1795997964, \"model\": \"m\", \"choices\": [{\"index\": 0, \"delta\": {\"role\": \"assistant\", \"content\": \"\"}, \"finish_reason\": null}]}"
            event="message" id="" data="{\"id\": \"chatcmpl-mockccb4ed379d\", \"object\": \"chat.completion.chunk\", \"created\": 1795997964, \"model\": \"m\", \"choices\": [{\"index\": 0, \"delta\": {\"content\": \"hi from mock\"}, \"finish_reason\": null}]}"
            event="message" id="" data="{\"id\": \"chatcmpl-mockccb4ed379d\", \"object\": \"chat.completion.chunk\", \"created\": 1795997964, \"model\": \"m\", \"choices\": [{\"index\": 0, \"delta\": {}, \"finish_reason\": \"stop\"}]}"
            event="message" id="" data="[DONE]"
            end: cut=false dropped=0 retry=None
        "#]],
    );
    let responses = transcript(&[RESPONSES], 1 << 20);
    assert_eq!(responses.lines().count(), 10, "{responses}");
}

/// Splits `input` at the given cut points (taken modulo its length, sorted).
fn split_at_points(input: &[u8], points: &[usize]) -> Vec<Vec<u8>> {
    if input.is_empty() {
        return vec![Vec::new()];
    }
    let mut cuts: Vec<usize> = points.iter().map(|p| p % (input.len() + 1)).collect();
    cuts.sort_unstable();
    let mut chunks = Vec::new();
    let mut start = 0;
    for cut in cuts {
        chunks.push(input[start..cut].to_vec());
        start = cut;
    }
    chunks.push(input[start..].to_vec());
    chunks
}

fn sse_bytes() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        Just(b"data: ".to_vec()),
        Just(b"data:".to_vec()),
        Just(b"event: e".to_vec()),
        Just(b"id: 1".to_vec()),
        Just(b"retry: 20".to_vec()),
        Just(b": c".to_vec()),
        Just(b"\n".to_vec()),
        Just(b"\r".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b"\xEF\xBB\xBF".to_vec()),
        Just(b"\xFF".to_vec()),
        proptest::collection::vec(any::<u8>(), 0..8),
    ];
    proptest::collection::vec(piece, 0..40).prop_map(|pieces| pieces.concat())
}

proptest! {
    /// Any split of a stream into chunks dispatches the same events as the whole stream,
    /// and no input makes the parser panic.
    #[test]
    fn any_chunk_split_gives_the_same_events(
        input in sse_bytes(),
        points in proptest::collection::vec(any::<usize>(), 0..12),
        bound in prop_oneof![Just(1usize << 20), 1usize..24],
    ) {
        let chunks = split_at_points(&input, &points);
        let refs: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
        prop_assert_eq!(transcript(&refs, bound), transcript(&[&input], bound));
    }

    #[test]
    fn any_split_of_a_fixture_gives_the_same_events(
        which in 0usize..3,
        points in proptest::collection::vec(any::<usize>(), 0..24),
    ) {
        let input = [ANTHROPIC, RESPONSES, CHAT][which];
        let chunks = split_at_points(input, &points);
        let refs: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
        prop_assert_eq!(transcript(&refs, 1 << 20), transcript(&[input], 1 << 20));
    }
}
