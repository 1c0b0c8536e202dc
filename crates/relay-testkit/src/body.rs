//! The response body writer: splits an answer into frames, paces them, holds them while a test says so, and breaks off on purpose.
//!
//! It is one `http_body::Body` polled by hyper's connection task; nothing is spawned, and nothing is allocated per frame while no test holds the answer (frames are slices of one `Bytes`).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::sync::Semaphore;
use tokio::time::Sleep;

use crate::error::InjectedFailure;
use crate::record::ExchangeGuard;

/// How a body is cut into frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// One frame for the whole body.
    Whole,
    /// One frame per SSE event (an event ends at a blank line).
    Events,
    /// Frames of this many bytes.
    Chunks(usize),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Sending,
    /// The failure point is reached; give hyper one turn to flush what it holds, then fail.
    FlushThenFail {
        yielded: bool,
    },
    Done,
}

#[derive(Debug)]
pub(crate) struct ScriptedBody {
    rest: Bytes,
    sent: usize,
    framing: Framing,
    pace: Option<Duration>,
    fail_after: Option<usize>,
    /// Whether the length is announced (`content-length`) instead of chunked framing.
    exact_length: bool,
    sleep: Option<Pin<Box<Sleep>>>,
    /// The frames a test lets through one by one, if it does (see `StandIn::step_answers` and
    /// `StandIn::hold_answers`).
    steps: Option<Arc<Semaphore>>,
    stepping: Option<Stepped>,
    state: State,
    guard: ExchangeGuard,
}

/// Ready with `true` once a test lets one more frame through, or with `false` once it has
/// stopped stepping the answer.
struct Stepped(Pin<Box<dyn Future<Output = bool> + Send>>);

impl Stepped {
    fn new(steps: Arc<Semaphore>) -> Stepped {
        Stepped(Box::pin(async move {
            match steps.acquire_owned().await {
                Ok(step) => {
                    step.forget();
                    true
                }
                Err(_closed) => false,
            }
        }))
    }
}

impl fmt::Debug for Stepped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Stepped")
    }
}

impl ScriptedBody {
    pub(crate) fn new(
        data: Bytes,
        framing: Framing,
        pace: Option<Duration>,
        fail_after: Option<usize>,
        exact_length: bool,
        mut guard: ExchangeGuard,
    ) -> ScriptedBody {
        let state = if fail_after.is_some() {
            State::Sending
        } else if data.is_empty() {
            // hyper never polls a body that is already at its end, so the exchange is over now.
            guard.finish();
            State::Done
        } else {
            State::Sending
        };
        ScriptedBody {
            rest: data,
            sent: 0,
            framing,
            pace,
            fail_after,
            exact_length: exact_length && fail_after.is_none(),
            sleep: None,
            steps: None,
            stepping: None,
            state,
            guard,
        }
    }

    /// Frames after the first wait for a step of `steps`, when there is one.
    pub(crate) fn stepped_by(mut self, steps: Option<Arc<Semaphore>>) -> ScriptedBody {
        self.steps = steps;
        self
    }

    fn next_frame_len(&self) -> usize {
        let len = match self.framing {
            Framing::Whole => self.rest.len(),
            Framing::Chunks(n) => n.max(1),
            Framing::Events => event_end(&self.rest),
        };
        let len = len.min(self.rest.len());
        match self.fail_after {
            Some(limit) => len.min(limit.saturating_sub(self.sent)),
            None => len,
        }
    }
}

/// The length of the first SSE event in `data` including its blank line, or all of `data` when no event ends in it.
fn event_end(data: &[u8]) -> usize {
    let mut i = 0;
    while i < data.len() {
        if data[i] == b'\n' {
            match data.get(i + 1) {
                Some(b'\n') => return i + 2,
                Some(b'\r') if data.get(i + 2) == Some(&b'\n') => return i + 3,
                _ => {}
            }
        }
        i += 1;
    }
    data.len()
}

impl Body for ScriptedBody {
    type Data = Bytes;
    type Error = InjectedFailure;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, InjectedFailure>>> {
        let this = self.get_mut();
        loop {
            match this.state {
                State::Done => return Poll::Ready(None),
                State::FlushThenFail { yielded: false } => {
                    // hyper flushes its write buffer when the body is pending; an error returned right away would drop the bytes still buffered.
                    this.state = State::FlushThenFail { yielded: true };
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                State::FlushThenFail { yielded: true } => {
                    this.state = State::Done;
                    this.guard.finish();
                    return Poll::Ready(Some(Err(InjectedFailure {
                        after_bytes: this.sent,
                    })));
                }
                State::Sending => {
                    if let Some(sleep) = this.sleep.as_mut() {
                        if sleep.as_mut().poll(cx).is_pending() {
                            return Poll::Pending;
                        }
                        this.sleep = None;
                    }
                    if this.sent > 0
                        && this.stepping.is_none()
                        && let Some(steps) = this.steps.as_ref()
                    {
                        this.stepping = Some(Stepped::new(steps.clone()));
                    }
                    if let Some(stepping) = this.stepping.as_mut() {
                        let Poll::Ready(stepped) = stepping.0.as_mut().poll(cx) else {
                            return Poll::Pending;
                        };
                        this.stepping = None;
                        if !stepped {
                            this.steps = None;
                        }
                    }
                    let limit_reached = this.fail_after.is_some_and(|limit| this.sent >= limit);
                    if limit_reached || (this.rest.is_empty() && this.fail_after.is_some()) {
                        this.state = State::FlushThenFail { yielded: false };
                        continue;
                    }
                    let len = this.next_frame_len();
                    let frame = this.rest.split_to(len);
                    this.sent += len;
                    if this.rest.is_empty() && this.fail_after.is_none() {
                        this.state = State::Done;
                        this.guard.finish();
                    } else if let Some(pace) = this.pace {
                        let at_failure = this.fail_after.is_some_and(|limit| this.sent >= limit);
                        if !this.rest.is_empty() && !at_failure {
                            this.sleep = Some(Box::pin(tokio::time::sleep(pace)));
                        }
                    }
                    return Poll::Ready(Some(Ok(Frame::data(frame))));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.state == State::Done
    }

    fn size_hint(&self) -> SizeHint {
        if self.exact_length {
            SizeHint::with_exact(self.rest.len() as u64)
        } else {
            SizeHint::default()
        }
    }
}

#[cfg(test)]
mod tests;
