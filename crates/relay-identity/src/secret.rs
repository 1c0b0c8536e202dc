//! Random one-time material (activation tokens, worker generation secrets, resume tokens, nonces)
//! and constant-time comparison.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::{SecureRandom, SystemRandom};
use subtle::ConstantTimeEq;

/// The operating system's random generator failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the system random number generator failed")]
pub struct RandomError;

/// Fills `buf` from the OS CSPRNG.
pub(crate) fn fill_random(buf: &mut [u8]) -> Result<(), RandomError> {
    SystemRandom::new().fill(buf).map_err(|_| RandomError)
}

/// 16 random bytes, e.g. the random part of a UUIDv7.
pub fn random_id_bytes() -> Result<[u8; 16], RandomError> {
    let mut bytes = [0u8; 16];
    fill_random(&mut bytes)?;
    Ok(bytes)
}

/// Compares two byte strings in time that depends only on their lengths.
/// Different lengths compare unequal.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.ct_eq(b).into()
}

/// 32 secret random bytes. `Debug` never shows them and equality is constant-time.
#[derive(Clone)]
pub struct Secret32([u8; 32]);

impl Secret32 {
    /// 32 fresh bytes from the OS CSPRNG.
    pub fn generate() -> Result<Secret32, RandomError> {
        let mut bytes = [0u8; 32];
        fill_random(&mut bytes)?;
        Ok(Secret32(bytes))
    }

    /// Wraps bytes received from a peer.
    pub fn from_bytes(bytes: [u8; 32]) -> Secret32 {
        Secret32(bytes)
    }

    /// The secret bytes, to put on the wire.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Whether `other` holds the same bytes, in constant time (a length mismatch is `false`).
    pub fn ct_eq(&self, other: &[u8]) -> bool {
        constant_time_eq(&self.0, other)
    }

    /// The secret as base64url without padding (43 characters), for an HTTP header.
    pub fn encode_base64url(&self) -> String {
        URL_SAFE_NO_PAD.encode(self.0)
    }

    /// Parses what [`Secret32::encode_base64url`] produced; `None` for anything else.
    pub fn parse_base64url(text: &str) -> Option<Secret32> {
        if text.len() != 43 {
            return None;
        }
        let decoded = URL_SAFE_NO_PAD.decode(text).ok()?;
        let bytes: [u8; 32] = decoded.try_into().ok()?;
        Some(Secret32(bytes))
    }
}

impl PartialEq for Secret32 {
    fn eq(&self, other: &Secret32) -> bool {
        self.ct_eq(&other.0)
    }
}

impl Eq for Secret32 {}

impl fmt::Debug for Secret32 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret32(..)")
    }
}

#[cfg(test)]
mod tests;
