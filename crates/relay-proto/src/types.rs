//! Fixed-size and bounded field types shared by the control messages.

use std::fmt;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::ser::{SerializeTuple, Serializer};
use serde::{Deserialize, Serialize};

/// Longest string a control message may carry, in bytes (SPEC §5.6).
pub const MAX_TEXT_BYTES: usize = 2048;

/// A 16-byte identifier: worker ids, activation ids, session ids, instance ids and
/// challenge ids are UUIDs (version 7 where Relay makes them).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Id(pub [u8; 16]);

impl Id {
    pub fn as_uuid(&self) -> uuid::Uuid {
        uuid::Uuid::from_bytes(self.0)
    }
}

impl From<uuid::Uuid> for Id {
    fn from(id: uuid::Uuid) -> Self {
        Id(id.into_bytes())
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.as_uuid(), f)
    }
}

impl fmt::Debug for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Id({})", self.as_uuid())
    }
}

/// 32 opaque bytes: nonces, route credentials, activation tokens, resume tokens,
/// generation secrets and digests. Secrets among them must never reach a log, so `Debug`
/// prints only the length.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Bytes32(pub [u8; 32]);

impl fmt::Debug for Bytes32 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Bytes32(..)")
    }
}

/// An Ed25519 public key.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PublicKey(pub [u8; 32]);

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "PublicKey({:02x}{:02x}{:02x}{:02x}..)",
            self.0[0], self.0[1], self.0[2], self.0[3]
        )
    }
}

/// An Ed25519 signature. Serialised as 64 raw bytes (serde derives stop at 32-element
/// arrays, so this type spells the tuple out).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Signature(pub [u8; 64]);

impl fmt::Debug for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Signature(..)")
    }
}

impl Serialize for Signature {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut tuple = serializer.serialize_tuple(64)?;
        for byte in &self.0 {
            tuple.serialize_element(byte)?;
        }
        tuple.end()
    }
}

impl<'de> Deserialize<'de> for Signature {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct SignatureVisitor;
        impl<'de> Visitor<'de> for SignatureVisitor {
            type Value = Signature;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("64 signature bytes")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Signature, A::Error> {
                let mut bytes = [0u8; 64];
                for (i, slot) in bytes.iter_mut().enumerate() {
                    *slot = seq
                        .next_element()?
                        .ok_or_else(|| de::Error::invalid_length(i, &self))?;
                }
                Ok(Signature(bytes))
            }
        }
        deserializer.deserialize_tuple(64, SignatureVisitor)
    }
}

/// A UTF-8 string of at most [`MAX_TEXT_BYTES`] bytes. The bound is checked when a value is
/// made and again when one is decoded, so no message can smuggle a longer one.
#[derive(Clone, PartialEq, Eq, Hash, Default, Serialize)]
pub struct Text(String);

/// A string was longer than a control message allows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("text of {len} bytes exceeds the limit of {MAX_TEXT_BYTES} bytes")]
pub struct TextTooLong {
    pub len: usize,
}

impl Text {
    pub fn new(text: impl Into<String>) -> Result<Text, TextTooLong> {
        let text = text.into();
        if text.len() > MAX_TEXT_BYTES {
            return Err(TextTooLong { len: text.len() });
        }
        Ok(Text(text))
    }

    /// Makes a text from a longer diagnostic by cutting it at a character boundary at or
    /// below the limit. Only for human-readable diagnostics, never for identifiers.
    pub fn truncated(text: &str) -> Text {
        let mut end = text.len().min(MAX_TEXT_BYTES);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        Text(text[..end].to_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Text::new(text).map_err(de::Error::custom)
    }
}

/// Which kind of client opened a control session; its spelling is the `role` of the log
/// events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Role {
    Mcp,
    Worker,
}

impl Role {
    /// Both roles.
    pub const ALL: &'static [Role] = &[Role::Mcp, Role::Worker];

    /// The role's byte in the handshake transcript (§5.2).
    pub fn transcript_byte(self) -> u8 {
        match self {
            Role::Mcp => 1,
            Role::Worker => 2,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Mcp => "mcp",
            Role::Worker => "worker",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An inclusive range of protocol versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ProtocolRange {
    pub min: u16,
    pub max: u16,
}

impl ProtocolRange {
    pub fn contains(&self, version: u16) -> bool {
        self.min <= version && version <= self.max
    }

    /// The highest version both ranges support.
    pub fn highest_common(&self, other: &ProtocolRange) -> Option<u16> {
        let high = self.max.min(other.max);
        let low = self.min.max(other.min);
        (low <= high).then_some(high)
    }
}
