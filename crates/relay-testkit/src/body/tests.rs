use http_body_util::BodyExt;

use super::*;
use crate::fixtures::ANTHROPIC_MESSAGES_SSE;

/// Polls the body to its end and returns the frames, and the error if it ended with one.
async fn drain(mut body: ScriptedBody) -> (Vec<Bytes>, Option<InjectedFailure>) {
    let mut frames = Vec::new();
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => frames.push(frame.into_data().unwrap()),
            Err(error) => {
                assert!(body.frame().await.is_none(), "a frame after the failure");
                return (frames, Some(error));
            }
        }
    }
    (frames, None)
}

fn scripted(framing: Framing, fail_after: Option<usize>) -> ScriptedBody {
    ScriptedBody::new(
        Bytes::from_static(ANTHROPIC_MESSAGES_SSE),
        framing,
        None,
        fail_after,
        false,
        ExchangeGuard::detached(),
    )
}

#[tokio::test]
async fn events_framing_writes_one_sse_event_per_frame() {
    let (frames, failure) = drain(scripted(Framing::Events, None)).await;
    assert!(failure.is_none());
    assert_eq!(frames.len(), 7);
    assert!(
        frames
            .iter()
            .all(|f| f.ends_with(b"\n\n") && f.starts_with(b"event: "))
    );
    assert_eq!(frames.concat(), ANTHROPIC_MESSAGES_SSE);
}

#[tokio::test]
async fn chunk_framing_writes_frames_of_the_given_size() {
    let (frames, _) = drain(scripted(Framing::Chunks(1), None)).await;
    assert_eq!(frames.len(), ANTHROPIC_MESSAGES_SSE.len());
    assert_eq!(frames.concat(), ANTHROPIC_MESSAGES_SSE);
    let (frames, _) = drain(scripted(Framing::Chunks(0), None)).await;
    assert!(frames.iter().all(|f| f.len() == 1));
    let (frames, _) = drain(scripted(Framing::Chunks(100), None)).await;
    assert!(frames[..frames.len() - 1].iter().all(|f| f.len() == 100));
    assert_eq!(frames.concat(), ANTHROPIC_MESSAGES_SSE);
}

#[tokio::test]
async fn fail_after_bytes_stops_exactly_there_with_an_error() {
    let (frames, failure) = drain(scripted(Framing::Events, Some(100))).await;
    assert_eq!(frames.concat(), &ANTHROPIC_MESSAGES_SSE[..100]);
    assert_eq!(failure.unwrap().after_bytes, 100);

    let (frames, failure) = drain(scripted(Framing::Whole, Some(0))).await;
    assert!(frames.is_empty());
    assert_eq!(failure.unwrap().after_bytes, 0);

    // A limit beyond the body still never ends it cleanly.
    let (frames, failure) = drain(scripted(Framing::Whole, Some(1 << 20))).await;
    assert_eq!(frames.concat(), ANTHROPIC_MESSAGES_SSE);
    assert_eq!(failure.unwrap().after_bytes, ANTHROPIC_MESSAGES_SSE.len());
}

#[tokio::test]
async fn pace_spaces_the_frames() {
    let pace = Duration::from_millis(20);
    let body = ScriptedBody::new(
        Bytes::from_static(b"data: 1\n\ndata: 2\n\ndata: 3\n\n"),
        Framing::Events,
        Some(pace),
        None,
        false,
        ExchangeGuard::detached(),
    );
    let started = tokio::time::Instant::now();
    let (frames, _) = drain(body).await;
    assert_eq!(frames.len(), 3);
    // Two pauses: between the first and second, and the second and third events (none before the first).
    assert!(started.elapsed() >= pace * 2);
}

#[test]
fn length_is_announced_only_for_whole_answers_that_cannot_fail() {
    let exact = |exact_length, fail_after| {
        ScriptedBody::new(
            Bytes::from_static(b"{}"),
            Framing::Whole,
            None,
            fail_after,
            exact_length,
            ExchangeGuard::detached(),
        )
        .size_hint()
        .exact()
    };
    assert_eq!(exact(true, None), Some(2));
    assert_eq!(exact(false, None), None);
    assert_eq!(exact(true, Some(1)), None);
}

#[test]
fn an_event_ends_at_a_blank_line_with_either_line_ending() {
    assert_eq!(event_end(b"data: a\n\ndata: b\n\n"), 9);
    assert_eq!(event_end(b"data: a\r\n\r\ndata: b"), 11);
    assert_eq!(event_end(b"data: a\ndata: b"), 15);
    assert_eq!(event_end(b""), 0);
}

#[test]
fn an_empty_body_is_over_at_once() {
    let body = ScriptedBody::new(
        Bytes::new(),
        Framing::Whole,
        None,
        None,
        true,
        ExchangeGuard::detached(),
    );
    assert!(body.is_end_stream());
}
