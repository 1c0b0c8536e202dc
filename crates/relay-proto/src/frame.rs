//! The frame envelope of SPEC §5.6: `u16 magic ‖ u16 version ‖ u16 kind ‖ postcard payload`,
//! all integers big-endian.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::message::{Kind, Message};
use crate::types::ProtocolRange;

/// "RE".
pub const MAGIC: u16 = 0x5245;
/// The version this build speaks and sends.
pub const PROTOCOL_VERSION: u16 = 1;
/// Every version this build can decode.
pub const SUPPORTED_PROTOCOLS: ProtocolRange = ProtocolRange { min: 1, max: 1 };
/// Largest frame accepted or produced, header included (§5.1).
pub const MAX_FRAME_BYTES: usize = 256 * 1024;
pub const HEADER_LEN: usize = 6;

/// The three header fields of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub magic: u16,
    pub version: u16,
    pub kind: u16,
}

impl FrameHeader {
    /// Reads the header, or `None` when fewer than [`HEADER_LEN`] bytes are given.
    pub fn parse(bytes: &[u8]) -> Option<FrameHeader> {
        let field = |i: usize| u16::from_be_bytes([bytes[i], bytes[i + 1]]);
        (bytes.len() >= HEADER_LEN).then(|| FrameHeader {
            magic: field(0),
            version: field(2),
            kind: field(4),
        })
    }
}

/// A decoded frame: the version it was sent with and its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub version: u16,
    pub message: Message,
}

/// Why bytes are not a frame this build accepts.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame of {len} bytes exceeds the limit of {MAX_FRAME_BYTES} bytes")]
    TooLarge { len: usize },
    #[error("frame of {len} bytes is shorter than its {HEADER_LEN}-byte header")]
    TruncatedHeader { len: usize },
    #[error("frame starts with {magic:#06x}, not the magic {MAGIC:#06x}")]
    BadMagic { magic: u16 },
    #[error("protocol version {version} is not supported (supported: {}..={})", SUPPORTED_PROTOCOLS.min, SUPPORTED_PROTOCOLS.max)]
    UnsupportedVersion { version: u16 },
    #[error("unknown message kind {kind}")]
    UnknownKind { kind: u16 },
    #[error("{kind:?} payload ends early")]
    TruncatedPayload { kind: Kind },
    #[error("{kind:?} payload has {extra} trailing bytes")]
    TrailingBytes { kind: Kind, extra: usize },
    #[error("{kind:?} payload is malformed")]
    Malformed {
        kind: Kind,
        #[source]
        source: postcard::Error,
    },
    #[error("{kind:?} could not be encoded")]
    Encode {
        kind: Kind,
        #[source]
        source: postcard::Error,
    },
}

impl FrameError {
    /// True when the peer speaks a protocol this build does not, which the daemon answers
    /// with `Refused { protocol_unsupported }` rather than a bare close.
    pub fn is_protocol_unsupported(&self) -> bool {
        matches!(
            self,
            FrameError::UnsupportedVersion { .. } | FrameError::UnknownKind { .. }
        )
    }
}

/// Encodes a message in a frame of the current protocol version.
pub fn encode(message: &Message) -> Result<Vec<u8>, FrameError> {
    encode_versioned(PROTOCOL_VERSION, message)
}

/// Encodes a message in a frame claiming `version`. Only tests need another version than
/// [`PROTOCOL_VERSION`], to play an older or newer peer.
pub fn encode_versioned(version: u16, message: &Message) -> Result<Vec<u8>, FrameError> {
    let kind = message.kind();
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&MAGIC.to_be_bytes());
    out.extend_from_slice(&version.to_be_bytes());
    out.extend_from_slice(&(kind as u16).to_be_bytes());
    let out = match message {
        Message::Hello(m) => append(out, kind, m),
        Message::Challenge(m) => append(out, kind, m),
        Message::Refused(m) => append(out, kind, m),
        Message::RegisterMcp(m) => append(out, kind, m),
        Message::ResumeMcp(m) => append(out, kind, m),
        Message::RegisterWorker(m) => append(out, kind, m),
        Message::ResumeWorker(m) => append(out, kind, m),
        Message::Registered(m) => append(out, kind, m),
        Message::LaunchWorker(m) => append(out, kind, m),
        Message::WaitForWorker { retry_after_ms } => append(out, kind, retry_after_ms),
        Message::ActivationFailed(m) => append(out, kind, m),
        Message::WorkerExited(m) => append(out, kind, m),
        Message::LaunchStatus { activation_id } => append(out, kind, activation_id),
        Message::LaunchStatusIs(m) => append(out, kind, m),
        Message::WorkerActivationFailed(m) => append(out, kind, m),
        Message::Drain { deadline_ms } => append(out, kind, deadline_ms),
        Message::DaemonStopping { restart_expected } => append(out, kind, restart_expected),
        Message::ReuseWorker
        | Message::RouteReady
        | Message::UsePassThrough
        | Message::Release
        | Message::Ready
        | Message::Stopping => Ok(out),
    }?;
    if out.len() > MAX_FRAME_BYTES {
        return Err(FrameError::TooLarge { len: out.len() });
    }
    Ok(out)
}

fn append<T: Serialize>(out: Vec<u8>, kind: Kind, value: &T) -> Result<Vec<u8>, FrameError> {
    postcard::to_extend(value, out).map_err(|source| FrameError::Encode { kind, source })
}

/// Decodes one frame. `Hello` is decoded whatever the frame's version, so the daemon can
/// answer an unsupported client; any other kind needs a supported version.
pub fn decode(bytes: &[u8]) -> Result<Frame, FrameError> {
    if bytes.len() > MAX_FRAME_BYTES {
        return Err(FrameError::TooLarge { len: bytes.len() });
    }
    let header =
        FrameHeader::parse(bytes).ok_or(FrameError::TruncatedHeader { len: bytes.len() })?;
    if header.magic != MAGIC {
        return Err(FrameError::BadMagic {
            magic: header.magic,
        });
    }
    if header.kind != Kind::Hello as u16 && !SUPPORTED_PROTOCOLS.contains(header.version) {
        return Err(FrameError::UnsupportedVersion {
            version: header.version,
        });
    }
    let kind = Kind::from_u16(header.kind).ok_or(FrameError::UnknownKind { kind: header.kind })?;
    let payload = &bytes[HEADER_LEN..];
    let message = match kind {
        Kind::Hello => Message::Hello(take(kind, payload)?),
        Kind::Challenge => Message::Challenge(take(kind, payload)?),
        Kind::Refused => Message::Refused(take(kind, payload)?),
        Kind::RegisterMcp => Message::RegisterMcp(take(kind, payload)?),
        Kind::ResumeMcp => Message::ResumeMcp(take(kind, payload)?),
        Kind::RegisterWorker => Message::RegisterWorker(take(kind, payload)?),
        Kind::ResumeWorker => Message::ResumeWorker(take(kind, payload)?),
        Kind::Registered => Message::Registered(take(kind, payload)?),
        Kind::LaunchWorker => Message::LaunchWorker(take(kind, payload)?),
        Kind::WaitForWorker => Message::WaitForWorker {
            retry_after_ms: take(kind, payload)?,
        },
        Kind::ActivationFailed => Message::ActivationFailed(take(kind, payload)?),
        Kind::WorkerExited => Message::WorkerExited(take(kind, payload)?),
        Kind::LaunchStatus => Message::LaunchStatus {
            activation_id: take(kind, payload)?,
        },
        Kind::LaunchStatusIs => Message::LaunchStatusIs(take(kind, payload)?),
        Kind::WorkerActivationFailed => Message::WorkerActivationFailed(take(kind, payload)?),
        Kind::Drain => Message::Drain {
            deadline_ms: take(kind, payload)?,
        },
        Kind::DaemonStopping => Message::DaemonStopping {
            restart_expected: take(kind, payload)?,
        },
        Kind::ReuseWorker => unit(kind, payload, Message::ReuseWorker)?,
        Kind::RouteReady => unit(kind, payload, Message::RouteReady)?,
        Kind::UsePassThrough => unit(kind, payload, Message::UsePassThrough)?,
        Kind::Release => unit(kind, payload, Message::Release)?,
        Kind::Ready => unit(kind, payload, Message::Ready)?,
        Kind::Stopping => unit(kind, payload, Message::Stopping)?,
    };
    Ok(Frame {
        version: header.version,
        message,
    })
}

fn take<T: DeserializeOwned>(kind: Kind, payload: &[u8]) -> Result<T, FrameError> {
    match postcard::take_from_bytes::<T>(payload) {
        Ok((value, [])) => Ok(value),
        Ok((_, rest)) => Err(FrameError::TrailingBytes {
            kind,
            extra: rest.len(),
        }),
        Err(postcard::Error::DeserializeUnexpectedEnd) => {
            Err(FrameError::TruncatedPayload { kind })
        }
        Err(source) => Err(FrameError::Malformed { kind, source }),
    }
}

fn unit(kind: Kind, payload: &[u8], message: Message) -> Result<Message, FrameError> {
    if payload.is_empty() {
        Ok(message)
    } else {
        Err(FrameError::TrailingBytes {
            kind,
            extra: payload.len(),
        })
    }
}

#[cfg(test)]
mod tests;
