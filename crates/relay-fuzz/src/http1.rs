//! The HTTP/1 framing watcher under hyper (SPEC §3.6): `relay_proxy::conn::ConnIo`, fed a byte
//! stream in pieces, through its public `AsyncRead`.
//!
//! The input's first two bytes choose how the rest is cut into reads; the rest is the stream.
//! The watcher must not panic, must give the same verdicts however the stream is cut, and must
//! never call a request clean whose head carries both `Content-Length` and
//! `Transfer-Encoding`. Which bytes are request heads is decided by [`reference_heads`], a
//! whole-buffer reading of the stream the way hyper reads it (httparse for heads, the body
//! framing to find the next one), which claims nothing once the stream stops being plain.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use relay_proxy::conn::{ConnIo, ConnState, HeadVerdict};
use tokio::io::{AsyncRead, ReadBuf};

/// hyper's limits in relayd (`server.rs`): the read buffer and the header count.
const HYPER_MAX_BUF: usize = 64 * 1024;
const HYPER_MAX_HEADERS: usize = 100;
/// The longest chunk-size line or trailer block the reference follows; hyper accepts chunk
/// extensions up to 16 KiB per body, so every line the reference follows hyper follows too.
const REFERENCE_MAX_LINE: usize = 8 * 1024;

/// How the reference reads one request head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reference {
    /// Plain framing: hyper serves it and reads on.
    Clean,
    /// `Content-Length` and `Transfer-Encoding` together: hyper forwards it (chunked) unless
    /// Relay refuses it.
    Smuggling,
}

/// The target: see the module documentation.
pub fn http1_watcher(data: &[u8]) {
    let (seed, stream) = match data {
        [a, b, rest @ ..] => (u16::from_be_bytes([*a, *b]), rest),
        _ => (0, data),
    };
    let heads = reference_heads(stream);
    let whole = verdicts(stream, &heads, &[stream.len().max(1)]);
    let bytewise = verdicts(stream, &heads, &[1]);
    let sizes = cuts(seed);
    let cut = verdicts(stream, &heads, &sizes);
    same(&whole, &bytewise, "one read per byte");
    same(&whole, &cut, &format!("reads of {sizes:?} bytes"));
    for (index, (head, _)) in heads.iter().enumerate() {
        if *head == Reference::Smuggling {
            assert_ne!(
                whole[index],
                HeadVerdict::Clean,
                "request {index} carries Content-Length and Transfer-Encoding but its verdict is clean"
            );
        }
    }
}

fn same(whole: &[HeadVerdict], other: &[HeadVerdict], how: &str) {
    if let Some(index) = (0..whole.len()).find(|i| whole[*i] != other[*i]) {
        panic!(
            "the verdict on request {index} is {:?} when the stream arrives whole but {:?} in {how}",
            whole[index], other[index]
        );
    }
}

/// Read sizes from a seed: a repeating pattern of 1 to 16 lengths of 1 to 64 bytes.
fn cuts(seed: u16) -> Vec<usize> {
    let mut state = u32::from(seed) | 0x1_0000;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        state
    };
    let count = next() % 16 + 1;
    (0..count).map(|_| (next() % 64 + 1) as usize).collect()
}

/// The verdicts the watcher reports when `stream` arrives in reads of the repeating `sizes`,
/// taken as hyper takes them: the verdict on each head the reference finds as soon as the
/// head's last byte has been read (a read also ends there, the worst case for the watcher),
/// then as many more as the stream could hold heads (the shortest, "GET / HTTP/1.1\n\n",
/// is 16 bytes), so an untracked request shows the watcher's default.
fn verdicts(stream: &[u8], heads: &[(Reference, usize)], sizes: &[usize]) -> Vec<HeadVerdict> {
    let state = Arc::new(ConnState::new());
    let stops: Vec<usize> = heads.iter().map(|(_, end)| *end).collect();
    let mut io = ConnIo::new(
        Pieces {
            rest: stream,
            at: 0,
            stops: stops.clone(),
            sizes,
            next: 0,
        },
        state.clone(),
        true,
    );
    let mut cx = Context::from_waker(Waker::noop());
    let mut buf = vec![0u8; 64 * 1024];
    let mut read_so_far = 0;
    let mut taken = Vec::new();
    loop {
        let mut read = ReadBuf::new(&mut buf);
        match Pin::new(&mut io).poll_read(&mut cx, &mut read) {
            Poll::Ready(Ok(())) if read.filled().is_empty() => break,
            Poll::Ready(Ok(())) => read_so_far += read.filled().len(),
            Poll::Ready(Err(error)) => panic!("reading from memory failed: {error}"),
            Poll::Pending => panic!("reading from memory is pending"),
        }
        while taken.len() < stops.len() && stops[taken.len()] <= read_so_far {
            taken.push(state.take_verdict());
        }
    }
    let more = (stream.len() / 16 + 1).saturating_sub(taken.len());
    taken.extend((0..more).map(|_| state.take_verdict()));
    taken
}

/// An in-memory reader that hands out its bytes in reads of the repeating `sizes`, never
/// across the next of `stops`.
struct Pieces<'a> {
    rest: &'a [u8],
    at: usize,
    stops: Vec<usize>,
    sizes: &'a [usize],
    next: usize,
}

impl AsyncRead for Pieces<'_> {
    fn poll_read(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let size = this.sizes[this.next % this.sizes.len()].max(1);
        this.next += 1;
        let at = this.at;
        let to_stop = this
            .stops
            .iter()
            .find(|stop| **stop > at)
            .map_or(usize::MAX, |stop| stop - at);
        let n = size.min(to_stop).min(this.rest.len()).min(buf.remaining());
        let (piece, rest) = this.rest.split_at(n);
        buf.put_slice(piece);
        this.rest = rest;
        this.at += n;
        Poll::Ready(Ok(()))
    }
}

/// The request heads of `stream` as hyper would read them, in order, each with the offset of
/// its end, up to the first one after
/// which the reference cannot tell where the next head starts (an upgrade, a framing it does not
/// follow, a head hyper refuses, or a smuggling attempt, after which hyper closes).
pub(crate) fn reference_heads(stream: &[u8]) -> Vec<(Reference, usize)> {
    let mut heads = Vec::new();
    let mut rest = stream;
    loop {
        if rest.iter().all(|b| *b == b'\r' || *b == b'\n') {
            return heads;
        }
        let mut headers = [httparse::EMPTY_HEADER; HYPER_MAX_HEADERS];
        let mut request = httparse::Request::new(&mut headers);
        let len = match request.parse(rest) {
            Ok(httparse::Status::Complete(len)) if len <= HYPER_MAX_BUF => len,
            _ => return heads,
        };
        let mut lengths = Vec::new();
        let mut transfer_encoding = None;
        let mut upgrade = request.method == Some("CONNECT");
        for header in request.headers.iter() {
            if header.name.eq_ignore_ascii_case("content-length") {
                lengths.push(header.value);
            } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
                transfer_encoding = Some(header.value);
            } else if header.name.eq_ignore_ascii_case("upgrade") {
                upgrade = true;
            }
        }
        if transfer_encoding.is_some() && !lengths.is_empty() {
            heads.push((Reference::Smuggling, stream.len() - rest.len() + len));
            return heads;
        }
        heads.push((Reference::Clean, stream.len() - rest.len() + len));
        if upgrade {
            return heads;
        }
        rest = &rest[len..];
        let body = match (transfer_encoding, lengths.as_slice()) {
            (Some(te), _) if te.trim_ascii().eq_ignore_ascii_case(b"chunked") => chunked_len(rest),
            (Some(_), _) => None,
            (None, []) => Some(0),
            (None, [one]) => std::str::from_utf8(one.trim_ascii())
                .ok()
                .filter(|t| !t.is_empty() && t.len() < 10 && t.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|t| t.parse::<usize>().ok()),
            (None, _) => None,
        };
        match body {
            Some(len) if len <= rest.len() => rest = &rest[len..],
            _ => return heads,
        }
    }
}

/// The length of the chunked body at the start of `rest`, trailers included, when it is all
/// there and plainly framed (CRLF line ends only).
fn chunked_len(rest: &[u8]) -> Option<usize> {
    let mut at = 0;
    loop {
        let line_end = find(&rest[at..], b"\r\n")?;
        let line = &rest[at..at + line_end];
        if line_end > REFERENCE_MAX_LINE || line.contains(&b'\n') || line.contains(&b'\r') {
            return None;
        }
        let size_text = line.split(|b| *b == b';').next().unwrap_or_default();
        if size_text.is_empty()
            || size_text.len() > 6
            || !size_text.iter().all(u8::is_ascii_hexdigit)
        {
            return None;
        }
        let size = usize::from_str_radix(std::str::from_utf8(size_text).ok()?, 16).ok()?;
        at += line_end + 2;
        if size == 0 {
            // Trailers: none, or CRLF-ended header lines up to an empty one.
            if rest[at..].starts_with(b"\r\n") {
                return Some(at + 2);
            }
            let end = find(&rest[at..], b"\r\n\r\n")?;
            let block = &rest[at..at + end];
            let bare_lf = block
                .iter()
                .enumerate()
                .any(|(i, b)| *b == b'\n' && (i == 0 || block[i - 1] != b'\r'));
            if end > REFERENCE_MAX_LINE || bare_lf {
                return None;
            }
            return Some(at + end + 4);
        }
        if rest.len() < at + size + 2 || &rest[at + size..at + size + 2] != b"\r\n" {
            return None;
        }
        at += size + 2;
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
