//! The control-handshake transcript of §5.2 and the two messages signed over it.
//!
//! Layout (every length is a big-endian u64 followed by that many bytes; fixed-size fields are
//! written as they are):
//!
//! ```text
//! len ‖ "relay/control-handshake/v1"
//! len ‖ target origin (UTF-8, as the client sent it in Hello)
//! role                 1 byte
//! selected protocol    2 bytes, big-endian
//! challenge id        16 bytes
//! client nonce        32 bytes
//! daemon nonce        32 bytes
//! client public key   32 bytes
//! daemon public key   32 bytes
//! ```
//!
//! The daemon signs `transcript ‖ len ‖ "challenge"`; the client signs
//! `transcript ‖ len ‖ "register" ‖ len ‖ register fields`. The labels keep one signature from
//! ever passing for the other.

use crate::keys::{BadSignature, PublicKey, SigningKey};

/// The domain string that opens every transcript.
pub const HANDSHAKE_DOMAIN: &str = "relay/control-handshake/v1";

const CHALLENGE_LABEL: &[u8] = b"challenge";
const REGISTER_LABEL: &[u8] = b"register";

/// Everything both sides know once the daemon has chosen its nonce and protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandshakeFields<'a> {
    /// The normalized origin the client dialled (from `Hello`).
    pub target_origin: &'a str,
    /// The client's role, as its wire code.
    pub role: u8,
    /// The protocol version the daemon selected.
    pub selected_protocol: u16,
    /// The daemon's challenge id.
    pub challenge_id: [u8; 16],
    /// The client's nonce from `Hello`.
    pub client_nonce: [u8; 32],
    /// The daemon's nonce from `Challenge`.
    pub daemon_nonce: [u8; 32],
    /// The client's machine public key.
    pub client_key: PublicKey,
    /// The daemon's public key.
    pub daemon_key: PublicKey,
}

/// The canonical bytes of one handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transcript {
    bytes: Vec<u8>,
    client_key: PublicKey,
    daemon_key: PublicKey,
}

impl Transcript {
    /// Builds the canonical byte string of `fields` (layout in the module docs).
    pub fn new(fields: &HandshakeFields<'_>) -> Transcript {
        let mut bytes =
            Vec::with_capacity(8 + HANDSHAKE_DOMAIN.len() + 8 + fields.target_origin.len() + 179);
        push_prefixed(&mut bytes, HANDSHAKE_DOMAIN.as_bytes());
        push_prefixed(&mut bytes, fields.target_origin.as_bytes());
        bytes.push(fields.role);
        bytes.extend_from_slice(&fields.selected_protocol.to_be_bytes());
        bytes.extend_from_slice(&fields.challenge_id);
        bytes.extend_from_slice(&fields.client_nonce);
        bytes.extend_from_slice(&fields.daemon_nonce);
        bytes.extend_from_slice(fields.client_key.as_bytes());
        bytes.extend_from_slice(fields.daemon_key.as_bytes());
        Transcript {
            bytes,
            client_key: fields.client_key,
            daemon_key: fields.daemon_key,
        }
    }

    /// The transcript bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// What the daemon signs in `Challenge`.
    pub fn challenge_message(&self) -> Vec<u8> {
        let mut message = self.bytes.clone();
        push_prefixed(&mut message, CHALLENGE_LABEL);
        message
    }

    /// What the client signs in `Register…`/`Resume…`: the transcript plus the canonical bytes
    /// of its own fields, which the caller encodes.
    pub fn registration_message(&self, register_fields: &[u8]) -> Vec<u8> {
        let mut message = self.bytes.clone();
        push_prefixed(&mut message, REGISTER_LABEL);
        push_prefixed(&mut message, register_fields);
        message
    }

    /// The daemon's signature for `Challenge`. `daemon_key` should be the key named in the
    /// fields; with any other key the signature will not verify.
    pub fn sign_challenge(&self, daemon_key: &SigningKey) -> [u8; 64] {
        daemon_key.sign(&self.challenge_message())
    }

    /// Checks the daemon's `Challenge` signature against the daemon key of the fields.
    pub fn verify_challenge(&self, signature: &[u8]) -> Result<(), BadSignature> {
        self.daemon_key.verify(&self.challenge_message(), signature)
    }

    /// The client's signature for its registration.
    pub fn sign_registration(&self, machine_key: &SigningKey, register_fields: &[u8]) -> [u8; 64] {
        machine_key.sign(&self.registration_message(register_fields))
    }

    /// Checks the client's registration signature against the client key of the fields.
    pub fn verify_registration(
        &self,
        register_fields: &[u8],
        signature: &[u8],
    ) -> Result<(), BadSignature> {
        self.client_key
            .verify(&self.registration_message(register_fields), signature)
    }
}

fn push_prefixed(out: &mut Vec<u8>, bytes: &[u8]) {
    // usize is at most 64 bits on every supported target, so this never truncates.
    out.extend_from_slice(&(bytes.len() as u64).to_be_bytes());
    out.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests;
