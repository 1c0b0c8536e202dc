//! The W3C Trace Context `traceparent` header, parsed so that Relay's spans join the
//! harness's trace (<https://www.w3.org/TR/trace-context/>, level 1).

/// A valid inbound `traceparent`: the trace to join and the span to hang under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    /// The trace id (never all zero).
    pub trace_id: [u8; 16],
    /// The caller's span, the parent of ours (never all zero).
    pub parent_id: [u8; 8],
    /// The trace flags (bit 0: sampled).
    pub flags: u8,
}

impl TraceParent {
    /// The length of the four fields of every version: `vv-<32 hex>-<16 hex>-ff`.
    pub const LEN: usize = 55;

    /// Parses `version-traceid-parentid-flags`. Version `00` must be exactly that; a later
    /// version may append fields after a `-`, which are ignored; version `ff`, upper-case
    /// hex, wrong lengths and all-zero ids are invalid. `None` means: start a new trace.
    pub fn parse(header: &str) -> Option<TraceParent> {
        let header = header.trim_matches([' ', '\t']);
        let bytes = header.as_bytes();
        if bytes.len() < Self::LEN {
            return None;
        }
        let version = hex_byte(&bytes[0..2])?;
        if version == 0xff || bytes[2] != b'-' || bytes[35] != b'-' || bytes[52] != b'-' {
            return None;
        }
        match (version, bytes.len()) {
            (0, Self::LEN) => {}
            (0, _) => return None,
            (_, Self::LEN) => {}
            (_, _) if bytes[Self::LEN] == b'-' => {}
            _ => return None,
        }
        let mut trace_id = [0u8; 16];
        for (i, out) in trace_id.iter_mut().enumerate() {
            *out = hex_byte(&bytes[3 + 2 * i..5 + 2 * i])?;
        }
        let mut parent_id = [0u8; 8];
        for (i, out) in parent_id.iter_mut().enumerate() {
            *out = hex_byte(&bytes[36 + 2 * i..38 + 2 * i])?;
        }
        let flags = hex_byte(&bytes[53..Self::LEN])?;
        if trace_id == [0; 16] || parent_id == [0; 8] {
            return None;
        }
        Some(TraceParent {
            trace_id,
            parent_id,
            flags,
        })
    }

    /// The header value of version `00` for a span of this trace.
    pub fn header_for(trace_id: [u8; 16], span_id: [u8; 8], flags: u8) -> String {
        let mut out = String::with_capacity(Self::LEN);
        out.push_str("00-");
        push_hex(&mut out, &trace_id);
        out.push('-');
        push_hex(&mut out, &span_id);
        out.push('-');
        push_hex(&mut out, &[flags]);
        out
    }
}

fn hex_byte(pair: &[u8]) -> Option<u8> {
    fn nibble(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        }
    }
    Some(nibble(*pair.first()?)? << 4 | nibble(*pair.get(1)?)?)
}

fn push_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
}

#[cfg(test)]
mod tests;
