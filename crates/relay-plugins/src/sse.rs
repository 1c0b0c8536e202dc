//! An incremental parser for `text/event-stream` bodies, written against the event stream
//! interpretation of the WHATWG HTML standard ("Server-sent events", §9.2.6) and SPEC §3.3:
//! lines end in CRLF, LF or CR (also when a CRLF is split across two chunks), a leading BOM is
//! dropped, `:` lines are comments, `data` lines join with LF, a field without a colon has an
//! empty value, one space after the colon is dropped, and an event ends at an empty line.
//!
//! The tap sees a stream as chunks, so the parser is fed with [`SseParser::push`] and closed
//! with [`SseParser::finish`]; events are handed to a callback as borrowed slices, so a clean
//! stream costs no allocation beyond the parser's two buffers, which keep their capacity.
//! Bytes are never required to be UTF-8: a non-UTF-8 byte is carried through as it is.

/// One dispatched event. Every slice borrows from the parser and lives until the callback
/// returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseEvent<'a> {
    /// The event type: the last `event` field, or `message` when there was none.
    pub event: &'a [u8],
    /// The `data` lines joined with LF, without the final LF.
    pub data: &'a [u8],
    /// The last event id seen so far in the stream (the standard's "last event ID buffer").
    pub id: &'a [u8],
}

/// The incremental event stream parser; see the module documentation.
#[derive(Debug)]
pub struct SseParser {
    /// Bytes of a line that is not finished yet (it continues in the next chunk).
    line: Vec<u8>,
    /// A line started in an earlier chunk and is not finished (its bytes are in `line`
    /// unless the event is oversized).
    partial_line: bool,
    /// The data buffer of the event being built; every `data` line adds its value and an LF.
    data: Vec<u8>,
    /// The event type buffer of the event being built.
    event: Vec<u8>,
    /// The last event id buffer, which survives dispatches.
    id: Vec<u8>,
    /// The previous chunk ended in CR: an LF at the start of the next one belongs to it.
    after_cr: bool,
    /// No byte seen yet: a BOM may still come.
    at_start: bool,
    /// The bytes of the leading BOM seen so far, when the stream starts with a prefix of it.
    bom_seen: usize,
    /// The event being built grew beyond `max_event_bytes`: it is skipped until its end.
    oversized: bool,
    max_event_bytes: usize,
    dropped_events: u64,
    retry: Option<u64>,
}

const BOM: &[u8] = b"\xEF\xBB\xBF";

impl SseParser {
    /// A parser that drops (and counts) any event whose buffered line or data would exceed
    /// `max_event_bytes`, so a hostile stream cannot make it hold more than about that much.
    pub fn new(max_event_bytes: usize) -> Self {
        Self {
            line: Vec::new(),
            partial_line: false,
            data: Vec::new(),
            event: Vec::new(),
            id: Vec::new(),
            after_cr: false,
            at_start: true,
            bom_seen: 0,
            oversized: false,
            max_event_bytes,
            dropped_events: 0,
            retry: None,
        }
    }

    /// Feeds the next chunk of the stream; every event it completes goes to `on_event`.
    pub fn push(&mut self, mut chunk: &[u8], on_event: &mut impl FnMut(SseEvent<'_>)) {
        if chunk.is_empty() {
            return;
        }
        if self.at_start {
            chunk = self.skip_bom(chunk);
            if chunk.is_empty() {
                return;
            }
            self.at_start = false;
        }
        if self.after_cr {
            self.after_cr = false;
            if let Some(rest) = chunk.strip_prefix(b"\n") {
                chunk = rest;
            }
        }
        while !chunk.is_empty() {
            let Some(end) = chunk.iter().position(|b| *b == b'\n' || *b == b'\r') else {
                self.buffer_partial_line(chunk);
                return;
            };
            let (content, rest) = chunk.split_at(end);
            // `rest` starts with the terminator; a CR may be followed by an LF.
            let mut next = &rest[1..];
            if rest[0] == b'\r' {
                match next.first() {
                    Some(b'\n') => next = &next[1..],
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
            if !self.partial_line {
                self.handle_line(content, on_event);
            } else {
                self.buffer_partial_line(content);
                self.partial_line = false;
                if !self.oversized {
                    let line = std::mem::take(&mut self.line);
                    self.handle_line(&line, on_event);
                    self.line = line;
                }
                self.line.clear();
            }
            chunk = next;
        }
    }

    /// Ends the stream. Returns true when it ended inside an event (after some field of an
    /// event but before the empty line that dispatches it): the standard discards such an
    /// event, and the caller learns that the stream was cut.
    pub fn finish(&mut self) -> bool {
        let cut =
            self.partial_line || self.oversized || !self.data.is_empty() || !self.event.is_empty();
        self.partial_line = false;
        self.line.clear();
        self.data.clear();
        self.event.clear();
        self.oversized = false;
        cut
    }

    /// How many events were dropped for exceeding the bound.
    pub fn dropped_events(&self) -> u64 {
        self.dropped_events
    }

    /// The last valid `retry` value, in milliseconds.
    pub fn retry(&self) -> Option<u64> {
        self.retry
    }

    fn skip_bom<'c>(&mut self, chunk: &'c [u8]) -> &'c [u8] {
        let mut chunk = chunk;
        while self.bom_seen < BOM.len() {
            match chunk.first() {
                None => return chunk,
                Some(b) if *b == BOM[self.bom_seen] => {
                    self.bom_seen += 1;
                    chunk = &chunk[1..];
                }
                Some(_) => {
                    // Not a BOM after all: the bytes taken so far were stream content.
                    let taken = &BOM[..self.bom_seen];
                    self.bom_seen = BOM.len();
                    if !taken.is_empty() {
                        self.buffer_partial_line(taken);
                    }
                    return chunk;
                }
            }
        }
        chunk
    }

    fn buffer_partial_line(&mut self, bytes: &[u8]) {
        self.partial_line = true;
        if self.oversized {
            return;
        }
        if self.line.len() + bytes.len() + self.data.len() > self.max_event_bytes {
            self.mark_oversized();
            return;
        }
        self.line.extend_from_slice(bytes);
    }

    fn mark_oversized(&mut self) {
        if !self.oversized {
            self.oversized = true;
            self.dropped_events += 1;
        }
        self.line.clear();
        self.data.clear();
    }

    fn handle_line(&mut self, line: &[u8], on_event: &mut impl FnMut(SseEvent<'_>)) {
        if line.is_empty() {
            self.dispatch(on_event);
            return;
        }
        if self.oversized {
            return;
        }
        // The same bound as for a line that arrives in pieces, so chunking changes nothing.
        if line.len() + self.data.len() > self.max_event_bytes {
            self.mark_oversized();
            return;
        }
        if line[0] == b':' {
            return;
        }
        let (name, value) = match line.iter().position(|b| *b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match name {
            b"event" => {
                self.event.clear();
                self.event.extend_from_slice(value);
            }
            b"data" => {
                if self.data.len() + value.len() + 1 > self.max_event_bytes {
                    self.mark_oversized();
                    return;
                }
                self.data.extend_from_slice(value);
                self.data.push(b'\n');
            }
            // An id containing NUL is ignored, as the standard says.
            b"id" if !value.contains(&0) => {
                self.id.clear();
                self.id.extend_from_slice(value);
            }
            // Digits only, so parsing fails only on overflow: the old value stays then.
            b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                if let Some(ms) = std::str::from_utf8(value).ok().and_then(|s| s.parse().ok()) {
                    self.retry = Some(ms);
                }
            }
            _ => {}
        }
    }

    fn dispatch(&mut self, on_event: &mut impl FnMut(SseEvent<'_>)) {
        if self.oversized {
            self.oversized = false;
        } else if !self.data.is_empty() {
            let data = &self.data[..self.data.len() - 1];
            let event = if self.event.is_empty() {
                &b"message"[..]
            } else {
                &self.event
            };
            on_event(SseEvent {
                event,
                data,
                id: &self.id,
            });
        }
        self.data.clear();
        self.event.clear();
    }
}

#[cfg(test)]
mod tests;
