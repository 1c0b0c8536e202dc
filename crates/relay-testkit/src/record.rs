//! What the stand-in received: one [`Recorded`] per request, the shared list, and the guard that records a request even when its exchange is cut short.

#![expect(
    clippy::disallowed_methods,
    reason = "test support: a panic here fails the test that caused it, so a poisoned lock is read as is"
)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use http::{Method, Version};
use tokio::sync::watch;

/// One request as the stand-in received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// Sequence number in order of arrival, from 1; also sent back in the `x-stand-in-request-id` response header.
    pub id: u64,
    pub method: Method,
    pub path_and_query: String,
    pub version: Version,
    /// Names as hyper gives them (lowercase), in `HeaderMap` order: first-appearance order of each name, repeated names grouped.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body bytes received, complete or not.
    pub body: Bytes,
    /// The body stream ended cleanly, so the whole request reached the stand-in.
    pub body_complete: bool,
    pub peer: SocketAddr,
    /// The client closed or reset the connection (or the stream) before the answer was fully written.
    pub client_went_away: bool,
    pub went_away_at: Option<Instant>,
    /// When the request head was parsed.
    pub received_at: Instant,
}

impl Recorded {
    /// The first value of a header, by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_slice())
    }

    /// Every value of a header, in received order.
    pub fn header_values(&self, name: &str) -> Vec<&[u8]> {
        self.headers
            .iter()
            .filter(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_slice())
            .collect()
    }

    /// The first value of a header as text, when it is UTF-8.
    pub fn header_str(&self, name: &str) -> Option<&str> {
        self.header(name)
            .and_then(|value| std::str::from_utf8(value).ok())
    }
}

/// The list of recorded requests and the signal waiters watch.
#[derive(Debug)]
pub(crate) struct Recorder {
    enabled: bool,
    records: Mutex<Vec<Recorded>>,
    /// Bumped on every change so waiters re-check their condition.
    changes: watch::Sender<u64>,
    next_id: AtomicU64,
    shutting_down: AtomicBool,
}

impl Recorder {
    pub(crate) fn new(enabled: bool) -> Recorder {
        Recorder {
            enabled,
            records: Mutex::new(Vec::new()),
            changes: watch::Sender::new(0),
            next_id: AtomicU64::new(1),
            shutting_down: AtomicBool::new(false),
        }
    }

    pub(crate) fn is_enabled(&self) -> bool {
        self.enabled
    }

    pub(crate) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// From now on, exchanges cut short are the stand-in's doing, not the client's.
    pub(crate) fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::Release);
    }

    fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Acquire)
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Recorded>> {
        // A panic elsewhere while holding the lock leaves the list usable: every write is a single push or field update.
        self.records.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn bump(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    fn insert(&self, record: Recorded) {
        self.lock().push(record);
        self.bump();
    }

    fn mark_went_away(&self, id: u64, at: Instant) {
        {
            let mut records = self.lock();
            if let Some(record) = records.iter_mut().rev().find(|r| r.id == id) {
                record.client_went_away = true;
                record.went_away_at = Some(at);
            }
        }
        self.bump();
    }

    pub(crate) fn with_records<T>(&self, f: impl FnOnce(&[Recorded]) -> T) -> T {
        f(&self.lock())
    }

    pub(crate) fn clear(&self) {
        self.lock().clear();
        self.bump();
    }

    /// Re-checks `check` on every change until it gives a value or `deadline` passes.
    pub(crate) async fn wait_until<T>(
        &self,
        deadline: tokio::time::Instant,
        mut check: impl FnMut(&[Recorded]) -> Option<T>,
    ) -> Option<T> {
        // Subscribing before the first check means no change can slip between the check and the wait.
        let mut changes = self.changes.subscribe();
        loop {
            if let Some(found) = self.with_records(&mut check) {
                return Some(found);
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                // The sender lives as long as `self`, so this cannot happen; check one last time anyway.
                Ok(Err(_)) | Err(_) => return self.with_records(&mut check),
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Reading the request body; the record is not in the list yet.
    Receiving,
    /// The request is recorded; the answer is being prepared or written.
    Answering,
    /// Nothing more to record.
    Finished,
}

/// Follows one exchange and records what happened to it, including when its future or body is dropped half-way.
///
/// It lives in the service future while the request is read and then moves into the response body, so being dropped before `finish` means hyper gave up on the exchange: the client went away.
#[derive(Debug)]
pub(crate) struct ExchangeGuard {
    recorder: Option<std::sync::Arc<Recorder>>,
    id: u64,
    pending: Option<Box<Recorded>>,
    body: BytesMut,
    phase: Phase,
}

impl ExchangeGuard {
    /// Starts following a request; `pending` is its record without body (None when recording is off).
    pub(crate) fn receiving(
        recorder: std::sync::Arc<Recorder>,
        id: u64,
        pending: Option<Recorded>,
    ) -> ExchangeGuard {
        ExchangeGuard {
            recorder: Some(recorder),
            id,
            pending: pending.map(Box::new),
            body: BytesMut::new(),
            phase: Phase::Receiving,
        }
    }

    /// A guard that records nothing (unit tests of the body writer).
    #[cfg(test)]
    pub(crate) fn detached() -> ExchangeGuard {
        ExchangeGuard {
            recorder: None,
            id: 0,
            pending: None,
            body: BytesMut::new(),
            phase: Phase::Answering,
        }
    }

    pub(crate) fn push_body(&mut self, data: &[u8]) {
        self.body.extend_from_slice(data);
    }

    /// The body has ended (cleanly when `complete`): records the request and returns its body.
    pub(crate) fn commit(&mut self, complete: bool) -> Bytes {
        let body = self.body.split().freeze();
        if self.phase != Phase::Receiving {
            return body;
        }
        self.phase = if complete {
            Phase::Answering
        } else {
            Phase::Finished
        };
        if let (Some(recorder), Some(mut record)) = (&self.recorder, self.pending.take()) {
            record.body = body.clone();
            record.body_complete = complete;
            if !complete && !recorder.is_shutting_down() {
                record.client_went_away = true;
                record.went_away_at = Some(Instant::now());
            }
            recorder.insert(*record);
        }
        body
    }

    /// The answer was written to the end (or failed on purpose): the client did not go away.
    pub(crate) fn finish(&mut self) {
        self.phase = Phase::Finished;
    }
}

impl Drop for ExchangeGuard {
    fn drop(&mut self) {
        match self.phase {
            Phase::Receiving => {
                self.commit(false);
            }
            Phase::Answering => {
                if let Some(recorder) = &self.recorder
                    && recorder.is_enabled()
                    && !recorder.is_shutting_down()
                {
                    recorder.mark_went_away(self.id, Instant::now());
                }
            }
            Phase::Finished => {}
        }
    }
}
