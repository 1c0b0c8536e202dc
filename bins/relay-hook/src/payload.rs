//! Step 1 of SPEC §7.1: the hook payload on stdin, read up to its limit, and the event name
//! that decides the timeout and what a failure does.

use std::fmt;
use std::io::{self, Read};
use std::sync::mpsc;
use std::time::Instant;

use bytes::Bytes;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};

/// The largest payload that is sent: the daemon's `max_hook_body_bytes` default (SPEC §3.6).
pub(crate) const MAX_PAYLOAD_BYTES: usize = 1024 * 1024;

/// What an empty stdin stands for.
const EMPTY_PAYLOAD: &[u8] = b"{}";

/// The top-level key that names the event, for all three agents (the pi extension puts pi's
/// event type there too).
const EVENT_NAME_KEY: &str = "hook_event_name";

/// A hook payload as read from stdin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Payload {
    /// The bytes to post, exactly as read (`{}` for an empty stdin). For an oversize payload,
    /// only the first [`MAX_PAYLOAD_BYTES`] + 1 bytes, which are never sent.
    pub(crate) body: Bytes,
    /// More than [`MAX_PAYLOAD_BYTES`] arrived: the payload must not be sent.
    pub(crate) is_oversize: bool,
    /// The top-level `hook_event_name`, if the payload (or, when it is oversize, its first
    /// megabyte) names one.
    pub(crate) event: Option<String>,
}

/// Reads at most `limit` + 1 bytes of `input` to its end: [`read_within`] without a deadline,
/// for a payload already in memory (relay-fuzz's target, which compiles this file).
#[allow(
    dead_code,
    reason = "the binary reads stdin with read_within; relay-fuzz reads memory"
)]
pub(crate) fn read_payload(input: impl Read, limit: usize) -> io::Result<Payload> {
    let mut bytes = Vec::new();
    input.take(cap_of(limit)).read_to_end(&mut bytes)?;
    Ok(payload_of(bytes, limit))
}

/// A payload read by [`read_within`], and whether its deadline passed with stdin still open.
#[derive(Debug)]
pub(crate) struct Arrived {
    pub(crate) payload: Payload,
    pub(crate) late: bool,
}

/// Reads at most `limit` + 1 bytes, enough to know whether the payload fits (the rest of an
/// oversize payload is left unread), until the input ends or the deadline `deadline_of` gives
/// for the event named by what has arrived so far passes: an agent that keeps stdin open must
/// not hold the hook past its timeout. The read runs on a thread of its own, left blocked in it if the deadline passes
/// first, until the process exits.
pub(crate) fn read_within(
    input: impl Read + Send + 'static,
    limit: usize,
    deadline_of: impl Fn(Option<&str>) -> Instant,
) -> io::Result<Arrived> {
    let (chunks, arriving) = mpsc::channel::<io::Result<Vec<u8>>>();
    std::thread::spawn(move || {
        let mut input = input.take(cap_of(limit));
        loop {
            let mut chunk = vec![0u8; 64 * 1024];
            let read = match input.read(&mut chunk) {
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => Err(error),
                // An empty chunk is the end.
                Ok(n) => {
                    chunk.truncate(n);
                    Ok(chunk)
                }
            };
            let last = read.as_ref().map_or(true, Vec::is_empty);
            if chunks.send(read).is_err() || last {
                return;
            }
        }
    });
    let mut bytes = Vec::new();
    loop {
        let deadline = deadline_of(event_name(&bytes).as_deref());
        let wait = deadline.saturating_duration_since(Instant::now());
        match arriving.recv_timeout(wait) {
            Ok(Ok(chunk)) if !chunk.is_empty() => bytes.extend_from_slice(&chunk),
            Ok(Ok(_)) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                let payload = payload_of(bytes, limit);
                return Ok(Arrived {
                    payload,
                    late: false,
                });
            }
            Ok(Err(error)) => return Err(error),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let payload = payload_of(bytes, limit);
                return Ok(Arrived {
                    payload,
                    late: true,
                });
            }
        }
    }
}

fn cap_of(limit: usize) -> u64 {
    u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1)
}

/// The payload `bytes` stand for, `limit` deciding whether it is oversize.
fn payload_of(bytes: Vec<u8>, limit: usize) -> Payload {
    if bytes.is_empty() {
        return Payload {
            body: Bytes::from_static(EMPTY_PAYLOAD),
            is_oversize: false,
            event: None,
        };
    }
    let event = event_name(&bytes);
    Payload {
        is_oversize: bytes.len() > limit,
        body: Bytes::from(bytes),
        event,
    }
}

/// The string value of the top-level `hook_event_name` key, without building the document.
///
/// Top-level entries are visited in order and every other value is skipped, so a payload that
/// is truncated or malformed after the key still yields the name (the last one wins when the
/// key repeats, as with `JSON.parse`). A payload that is not an object, or whose key holds
/// something other than a string, has no name.
pub(crate) fn event_name(json: &[u8]) -> Option<String> {
    let mut found = None;
    let mut deserializer = serde_json::Deserializer::from_slice(json);
    // An error only ends the scan: whatever was found before it stands.
    let _ = EventNameSeed { found: &mut found }.deserialize(&mut deserializer);
    found
}

struct EventNameSeed<'a> {
    found: &'a mut Option<String>,
}

impl<'de> DeserializeSeed<'de> for EventNameSeed<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for EventNameSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a hook payload object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<String>()? {
            if key == EVENT_NAME_KEY {
                *self.found = map.next_value::<StringOrOther>()?.0;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

/// A JSON value kept only when it is a string.
struct StringOrOther(Option<String>);

impl<'de> de::Deserialize<'de> for StringOrOther {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<StringOrOther, D::Error> {
        struct StringVisitor;

        impl<'de> Visitor<'de> for StringVisitor {
            type Value = StringOrOther;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }

            fn visit_str<E: de::Error>(self, value: &str) -> Result<StringOrOther, E> {
                Ok(StringOrOther(Some(value.to_owned())))
            }

            fn visit_bool<E: de::Error>(self, _: bool) -> Result<StringOrOther, E> {
                Ok(StringOrOther(None))
            }

            fn visit_i64<E: de::Error>(self, _: i64) -> Result<StringOrOther, E> {
                Ok(StringOrOther(None))
            }

            fn visit_u64<E: de::Error>(self, _: u64) -> Result<StringOrOther, E> {
                Ok(StringOrOther(None))
            }

            fn visit_f64<E: de::Error>(self, _: f64) -> Result<StringOrOther, E> {
                Ok(StringOrOther(None))
            }

            fn visit_unit<E: de::Error>(self) -> Result<StringOrOther, E> {
                Ok(StringOrOther(None))
            }

            fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<StringOrOther, A::Error> {
                IgnoredAny.visit_seq(seq).map(|_| StringOrOther(None))
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<StringOrOther, A::Error> {
                IgnoredAny.visit_map(map).map(|_| StringOrOther(None))
            }
        }

        deserializer.deserialize_any(StringVisitor)
    }
}

#[cfg(test)]
mod tests;
