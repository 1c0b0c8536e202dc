//! Bounded decoding of a captured body by its `content-encoding` (SPEC §8.1): gzip, deflate,
//! br and zstd, never producing more than a bound the caller gives, so a decompression bomb
//! stops at the bound and says so. An identity body is handed back borrowed.
//!
//! Decisions where the standards leave room (written down in `docs/plugins.md` too):
//! - `deflate` is the zlib format (RFC 9110 §8.4.1.2); a raw deflate stream, which some servers
//!   send instead, is accepted as well.
//! - gzip bodies may hold several members (RFC 1952 §2.2); all are decoded.
//! - zstd frames may not ask for a window beyond 8 MiB, the limit RFC 9659 sets for HTTP, so a
//!   frame cannot make the decoder allocate a large window before producing a byte.
//! - A body that ends early (the side copy was cut at its own bound) yields what was decoded
//!   with `truncated` set; a body that is corrupt before its end is an error.

use std::borrow::Cow;
use std::io::{self, Read};

/// One content coding of the `content-encoding` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentEncoding {
    /// No coding (`identity`, or no header at all).
    Identity,
    /// `gzip` (or its alias `x-gzip`).
    Gzip,
    /// `deflate`: zlib, or raw deflate as some servers send it.
    Deflate,
    /// `br`.
    Brotli,
    /// `zstd`.
    Zstd,
}

/// Why a captured body could not be decoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    /// A coding this worker cannot decode; when a rule needs the body the worker answers 415
    /// `relay_unsupported_encoding`.
    #[error("unsupported content encoding {encoding:?}")]
    UnsupportedEncoding {
        /// The coding as the header named it.
        encoding: String,
    },
    /// More codings are stacked than anyone sends on purpose.
    #[error("too many stacked content encodings ({count}, at most {MAX_CODINGS})")]
    TooManyEncodings {
        /// How many codings the header named.
        count: usize,
    },
    /// The body is not valid in the coding it claims.
    #[error("the body is not valid {encoding} data: {detail}")]
    Corrupt {
        /// The coding that failed.
        encoding: &'static str,
        /// What the decoder reported.
        detail: String,
    },
}

impl DecodeError {
    /// The error type of the worker's answer when a rule needs a body it cannot decode.
    pub const UNSUPPORTED_ENCODING_TYPE: &'static str = "relay_unsupported_encoding";
}

/// At most this many codings in one header (`gzip, br` is two).
pub const MAX_CODINGS: usize = 4;

impl ContentEncoding {
    /// One coding token, case-insensitive, surrounding whitespace ignored.
    pub fn parse(token: &str) -> Result<Self, DecodeError> {
        let token = token.trim();
        let coding = if token.eq_ignore_ascii_case("identity") || token.is_empty() {
            Self::Identity
        } else if token.eq_ignore_ascii_case("gzip") || token.eq_ignore_ascii_case("x-gzip") {
            Self::Gzip
        } else if token.eq_ignore_ascii_case("deflate") {
            Self::Deflate
        } else if token.eq_ignore_ascii_case("br") {
            Self::Brotli
        } else if token.eq_ignore_ascii_case("zstd") {
            Self::Zstd
        } else {
            return Err(DecodeError::UnsupportedEncoding {
                encoding: token.to_owned(),
            });
        };
        Ok(coding)
    }

    /// The coding's name as it appears in the header.
    pub fn name(self) -> &'static str {
        match self {
            Self::Identity => "identity",
            Self::Gzip => "gzip",
            Self::Deflate => "deflate",
            Self::Brotli => "br",
            Self::Zstd => "zstd",
        }
    }
}

/// A decoded body: borrowed when no decoding was needed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded<'a> {
    /// The decoded bytes, at most the bound.
    pub body: Cow<'a, [u8]>,
    /// The decoded body was longer than the bound (it was cut there), or the encoded body
    /// ended before its coding did.
    pub truncated: bool,
    /// The encoded body ended before its coding did. A side copy cut at its own bound does;
    /// a whole request body that does is corrupt.
    pub ended_early: bool,
}

/// Decodes `body` as the `content-encoding` header value says (`None`: no header), producing
/// at most `limit` bytes. Codings listed in the header were applied in order, so they are
/// undone from the last to the first; each step is bounded by `limit`. A response with
/// several `content-encoding` lines is passed as their values joined with `,`, in order.
pub fn decode<'a>(
    content_encoding: Option<&str>,
    body: &'a [u8],
    limit: usize,
) -> Result<Decoded<'a>, DecodeError> {
    let header = content_encoding.unwrap_or("");
    let count = header.split(',').count();
    if count > MAX_CODINGS {
        return Err(DecodeError::TooManyEncodings { count });
    }
    // Parse every coding first: an unsupported one is an error before any work is done.
    let mut codings = [ContentEncoding::Identity; MAX_CODINGS];
    for (slot, token) in codings.iter_mut().zip(header.split(',')) {
        *slot = ContentEncoding::parse(token)?;
    }
    let mut current = Decoded {
        body: Cow::Borrowed(body),
        truncated: false,
        ended_early: false,
    };
    for coding in codings[..count].iter().rev() {
        if *coding == ContentEncoding::Identity {
            continue;
        }
        let (bytes, cut) = decode_one(*coding, &current.body, limit)?;
        current = Decoded {
            body: Cow::Owned(bytes),
            truncated: current.truncated || cut.over || cut.ended_early,
            // An input that an earlier step cut at the bound ends early here because of
            // that cut, not because the body is short.
            ended_early: current.ended_early || (cut.ended_early && !current.truncated),
        };
    }
    // Identity (alone or in a chain) still honours the bound.
    if current.body.len() > limit {
        current.truncated = true;
        current.body = match current.body {
            Cow::Borrowed(b) => Cow::Borrowed(&b[..limit]),
            Cow::Owned(mut v) => {
                v.truncate(limit);
                Cow::Owned(v)
            }
        };
    }
    Ok(current)
}

/// How one decoding step was cut short, if it was.
#[derive(Debug, Clone, Copy)]
struct Cut {
    /// The decoded bytes went past the bound.
    over: bool,
    /// The input ended before the coding did.
    ended_early: bool,
}

/// Undoes one (non-identity) coding; returns the bytes and how they were cut.
fn decode_one(
    coding: ContentEncoding,
    body: &[u8],
    limit: usize,
) -> Result<(Vec<u8>, Cut), DecodeError> {
    let eof = |e: &io::Error| e.kind() == io::ErrorKind::UnexpectedEof;
    match coding {
        // `decode` never asks for it; the bound still holds if something does.
        ContentEncoding::Identity => read_bounded(coding, body, limit, |_| false),
        ContentEncoding::Gzip => {
            read_bounded(coding, flate2::read::MultiGzDecoder::new(body), limit, eof)
        }
        ContentEncoding::Deflate => {
            if looks_like_zlib(body) {
                read_bounded(coding, flate2::read::ZlibDecoder::new(body), limit, eof)
            } else {
                read_bounded(coding, flate2::read::DeflateDecoder::new(body), limit, eof)
            }
        }
        // These two report an early end like corrupt data, so the input is watched: an error
        // after the decoder asked for more input than there was is an early end.
        ContentEncoding::Brotli => {
            let input = WatchedInput::new(body);
            let decoder = brotli::Decompressor::new(&input, 4096);
            read_bounded(coding, decoder, limit, |e| eof(e) || input.exhausted.get())
        }
        ContentEncoding::Zstd => {
            let input = WatchedInput::new(body);
            let mut decoder =
                zstd::stream::read::Decoder::new(&input).map_err(|e| corrupt(coding, &e))?;
            decoder
                .window_log_max(ZSTD_WINDOW_LOG_MAX)
                .map_err(|e| corrupt(coding, &e))?;
            read_bounded(coding, decoder, limit, |e| eof(e) || input.exhausted.get())
        }
    }
}

/// 2^23 bytes = 8 MiB, the largest window RFC 9659 lets an HTTP zstd body ask for.
const ZSTD_WINDOW_LOG_MAX: u32 = 23;

/// A zlib stream starts with a CMF byte naming deflate (method 8, window at most 32 KiB) and
/// a check value that makes the first two bytes a multiple of 31 (RFC 1950 §2.2).
fn looks_like_zlib(body: &[u8]) -> bool {
    match body {
        [cmf, flg, ..] => {
            cmf & 0x0F == 8 && cmf >> 4 <= 7 && (u16::from(*cmf) << 8 | u16::from(*flg)) % 31 == 0
        }
        _ => false,
    }
}

fn read_bounded(
    coding: ContentEncoding,
    decoder: impl Read,
    limit: usize,
    is_early_end: impl Fn(&io::Error) -> bool,
) -> Result<(Vec<u8>, Cut), DecodeError> {
    let mut out = Vec::new();
    // One byte past the bound tells a body of exactly `limit` bytes from a longer one.
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    let mut taker = decoder.take(cap);
    // On an error, `read_to_end` keeps what it had read in `out`.
    let ended_early = match taker.read_to_end(&mut out) {
        Ok(_) => false,
        Err(e) if is_early_end(&e) => true,
        Err(e) => return Err(corrupt(coding, &e)),
    };
    let over = out.len() > limit;
    out.truncate(limit);
    Ok((out, Cut { over, ended_early }))
}

/// The encoded body as a reader that remembers whether a read found it exhausted.
struct WatchedInput<'b> {
    rest: std::cell::Cell<&'b [u8]>,
    exhausted: std::cell::Cell<bool>,
}

impl<'b> WatchedInput<'b> {
    fn new(body: &'b [u8]) -> Self {
        Self {
            rest: std::cell::Cell::new(body),
            exhausted: std::cell::Cell::new(false),
        }
    }
}

impl Read for &WatchedInput<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let rest = self.rest.get();
        if rest.is_empty() {
            self.exhausted.set(true);
            return Ok(0);
        }
        let n = rest.len().min(buf.len());
        buf[..n].copy_from_slice(&rest[..n]);
        self.rest.set(&rest[n..]);
        Ok(n)
    }
}

fn corrupt(coding: ContentEncoding, e: &io::Error) -> DecodeError {
    DecodeError::Corrupt {
        encoding: coding.name(),
        detail: e.to_string(),
    }
}

#[cfg(test)]
mod tests;
