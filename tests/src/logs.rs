//! A process's stderr, captured whole into memory and read back as jsonl lifecycle events.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt as _};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::error::Error;

/// Everything a process wrote to stderr so far. Cloning shares the buffer.
#[derive(Debug, Clone)]
pub struct Logs {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    program: String,
    state: Mutex<State>,
    /// Bumped on every change so waiters re-check.
    changed: watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct State {
    raw: Vec<u8>,
    /// The process closed its stderr (usually: it exited).
    closed: bool,
}

impl Logs {
    /// An empty buffer for the process named `program` (used in error messages).
    pub fn new(program: &str) -> Logs {
        Logs {
            inner: Arc::new(Inner {
                program: program.to_owned(),
                state: Mutex::new(State::default()),
                changed: watch::Sender::new(0),
            }),
        }
    }

    fn with_state<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        // A panicking test thread cannot leave the buffer half-written: every change is one
        // `extend` or one flag.
        f(&mut self
            .inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner))
    }

    fn bump(&self) {
        self.inner.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    pub(crate) fn push(&self, bytes: &[u8]) {
        self.with_state(|state| state.raw.extend_from_slice(bytes));
        self.bump();
    }

    pub(crate) fn close(&self) {
        self.with_state(|state| state.closed = true);
        self.bump();
    }

    /// Every byte written so far.
    pub fn raw(&self) -> Vec<u8> {
        self.with_state(|state| state.raw.clone())
    }

    /// Every byte written so far, as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.raw()).into_owned()
    }

    /// Whether `needle` appears anywhere in what was written, across line breaks too.
    pub fn contains(&self, needle: &[u8]) -> bool {
        self.with_state(|state| contains(&state.raw, needle))
    }

    /// Whether the process closed its stderr.
    pub fn is_closed(&self) -> bool {
        self.with_state(|state| state.closed)
    }

    /// Every complete line that is a JSON object, in order.
    pub fn events(&self) -> Vec<Value> {
        self.with_state(|state| parse_events(&state.raw, state.closed))
    }

    /// The JSON lines whose `event` field is `name`, in order.
    pub fn events_named(&self, name: &str) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter(|event| event["event"] == name)
            .collect()
    }

    /// Waits until a line with `"event": name` is written and returns it (the first one).
    /// Fails when the deadline passes or the process closes stderr first; the error carries
    /// the whole stderr so the test output shows what happened.
    pub async fn wait_for_event(&self, name: &str, timeout: Duration) -> Result<Value, Error> {
        self.wait_for(name, timeout, |logs| {
            logs.events_named(name).into_iter().next()
        })
        .await
    }

    /// Waits until `count` lines with `"event": name` are written and returns them all.
    pub async fn wait_for_events(
        &self,
        name: &str,
        count: usize,
        timeout: Duration,
    ) -> Result<Vec<Value>, Error> {
        let what = format!("{count} × {name}");
        self.wait_for(&what, timeout, |logs| {
            let events = logs.events_named(name);
            (events.len() >= count).then_some(events)
        })
        .await
    }

    /// Waits until `check` finds what it looks for in the logs (it runs again after every
    /// write). `what` names it in the error when the deadline passes or the stream closes
    /// first; the error carries the whole text.
    pub async fn wait_for<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut check: impl FnMut(&Logs) -> Option<T>,
    ) -> Result<T, Error> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut changes = self.inner.changed.subscribe();
        loop {
            // Subscribed before checking, so no write slips between the check and the wait.
            changes.borrow_and_update();
            if let Some(found) = check(self) {
                return Ok(found);
            }
            if self.is_closed() {
                return Err(Error::LogEventMissing {
                    program: self.inner.program.clone(),
                    event: what.to_owned(),
                    stderr: self.text(),
                });
            }
            if tokio::time::timeout_at(deadline, changes.changed())
                .await
                .is_err()
            {
                return Err(Error::LogEventTimedOut {
                    program: self.inner.program.clone(),
                    event: what.to_owned(),
                    timeout,
                    stderr: self.text(),
                });
            }
        }
    }

    /// The complete lines written so far (without their `\n`), as text.
    pub fn lines(&self) -> Vec<String> {
        self.with_state(|state| complete_lines(&state.raw, state.closed))
    }

    /// Waits until the process closes its stderr; false if the deadline passes first.
    pub async fn wait_closed(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut changes = self.inner.changed.subscribe();
        loop {
            changes.borrow_and_update();
            if self.is_closed() {
                return true;
            }
            if tokio::time::timeout_at(deadline, changes.changed())
                .await
                .is_err()
            {
                return self.is_closed();
            }
        }
    }
}

/// When a jsonl event was logged: its `timestamp` (RFC 3339 in UTC, as
/// `2026-11-30T01:08:00.123456Z`), or `None` if it has none or another format. Tests use it
/// to measure the time between two events without their own reading delay.
pub fn event_time(event: &Value) -> Option<SystemTime> {
    parse_utc_timestamp(event.get("timestamp")?.as_str()?)
}

/// `YYYY-MM-DDTHH:MM:SS[.fraction]Z` → the time it names.
pub(crate) fn parse_utc_timestamp(text: &str) -> Option<SystemTime> {
    let text = text.strip_suffix('Z')?;
    let (date, time) = text.split_once('T')?;
    let mut date_parts = date.splitn(3, '-');
    let year: i64 = date_parts.next()?.parse().ok()?;
    let month: i64 = date_parts.next()?.parse().ok()?;
    let day: i64 = date_parts.next()?.parse().ok()?;
    let (clock, fraction) = time.split_once('.').unwrap_or((time, ""));
    let mut clock_parts = clock.splitn(3, ':');
    let hour: i64 = clock_parts.next()?.parse().ok()?;
    let minute: i64 = clock_parts.next()?.parse().ok()?;
    let second: i64 = clock_parts.next()?.parse().ok()?;
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    let nanos: u32 = if fraction.is_empty() {
        0
    } else {
        let digits: String = fraction.chars().take(9).collect();
        if !digits.chars().all(|c| c.is_ascii_digit()) {
            return None;
        }
        format!("{digits:0<9}").parse().ok()?
    };
    // Days since 1970-01-01 of a proleptic Gregorian date (the civil-from-days inverse).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = era * 146_097 + day_of_era - 719_468;
    let secs = u64::try_from(days * 86_400 + hour * 3600 + minute * 60 + second).ok()?;
    SystemTime::UNIX_EPOCH.checked_add(Duration::new(secs, nanos))
}

/// Copies `stream` into `logs` until it ends, then marks the logs closed.
pub(crate) fn capture(
    mut stream: impl AsyncRead + Unpin + Send + 'static,
    logs: Logs,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut buffer = vec![0_u8; 16 * 1024];
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => logs.push(&buffer[..n]),
            }
        }
        logs.close();
    })
}

/// The part of `raw` made of complete lines; an unterminated last line counts only once
/// the stream is `closed` (before that it may still be growing).
fn complete_part(raw: &[u8], closed: bool) -> &[u8] {
    if closed {
        raw
    } else {
        match raw.iter().rposition(|&byte| byte == b'\n') {
            Some(end) => &raw[..end],
            None => &[],
        }
    }
}

/// The lines of `raw` that parse as JSON objects (see [`complete_part`]).
pub(crate) fn parse_events(raw: &[u8], closed: bool) -> Vec<Value> {
    complete_part(raw, closed)
        .split(|&byte| byte == b'\n')
        .filter_map(|line| serde_json::from_slice::<Value>(line).ok())
        .filter(Value::is_object)
        .collect()
}

/// The complete lines of `raw` as text, without their line ends; an unterminated last
/// line counts only once the stream is `closed`.
pub(crate) fn complete_lines(raw: &[u8], closed: bool) -> Vec<String> {
    let complete = if closed {
        raw
    } else {
        match raw.iter().rposition(|&byte| byte == b'\n') {
            Some(end) => &raw[..=end],
            None => &[],
        }
    };
    let complete = complete.strip_suffix(b"\n").unwrap_or(complete);
    if complete.is_empty() && !raw.starts_with(b"\n") {
        return Vec::new();
    }
    complete
        .split(|&byte| byte == b'\n')
        .map(|line| {
            String::from_utf8_lossy(line)
                .trim_end_matches('\r')
                .to_owned()
        })
        .collect()
}

pub(crate) fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty()
        || haystack
            .windows(needle.len())
            .any(|window| window == needle)
}

#[cfg(test)]
mod tests;
