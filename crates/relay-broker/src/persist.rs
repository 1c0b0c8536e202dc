//! What the broker keeps across daemon restarts (§5.7): credential bindings, blocked
//! fingerprints and the ledger of published generations. Raw tokens and secrets are never
//! part of it. Times are `Instant`s; the shell converts them to wall-clock time on disk.

use std::time::Instant;

use relay_proto::{Bytes32, Id};

use crate::types::{Digest, Fingerprint};

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PersistedState {
    pub bindings: Vec<PersistedBinding>,
    pub blocked: Vec<Fingerprint>,
    pub generations: Vec<PersistedGeneration>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PersistedBinding {
    pub digest: Digest,
    pub fingerprint: Fingerprint,
    pub last_use: Instant,
    /// Set for an evicted or revoked binding: it blocks other fingerprints until then.
    pub tombstone_until: Option<Instant>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PersistedGeneration {
    pub worker_id: Id,
    pub fingerprint: Fingerprint,
    pub endpoint: String,
    pub certificate_sha256: Bytes32,
    pub draining: bool,
}
