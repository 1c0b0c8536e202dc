//! What the admin socket speaks: its address in the state directory, the JSON bodies of
//! its answers, and the requests it understands.

use http::Method;
use relay_broker::{BindingView, Fingerprint};
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// The socket's name in the daemon's state directory.
pub const SOCKET_FILE: &str = "admin.sock";

/// The three changes an administrator can make to a fingerprint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Revoke,
    Block,
    Unblock,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Revoke => "revoke",
            Action::Block => "block",
            Action::Unblock => "unblock",
        }
    }

    fn from_segment(segment: &str) -> Option<Action> {
        match segment {
            "revoke" => Some(Action::Revoke),
            "block" => Some(Action::Block),
            "unblock" => Some(Action::Unblock),
            _ => None,
        }
    }
}

/// `GET /bindings`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BindingsList {
    pub bindings: Vec<BindingEntry>,
    /// Every blocked fingerprint, also those without a binding.
    pub blocked: Vec<String>,
}

impl BindingsList {
    /// The list of the broker's bindings view and its blocked fingerprints, with last-use
    /// times in wall-clock milliseconds. A running daemon answers with it, and `relayd
    /// bindings list` makes a stopped daemon's list with it from a broker it restores.
    pub fn from_views(
        views: &[BindingView],
        blocked: &[Fingerprint],
        wall_ms: impl Fn(Instant) -> u64,
    ) -> BindingsList {
        BindingsList {
            bindings: views
                .iter()
                .map(|view| BindingEntry {
                    fingerprint: view.fingerprint.to_hex(),
                    digest_prefix: view.digest.to_hex()[..12].to_owned(),
                    last_use_unix_ms: wall_ms(view.last_use),
                    tombstone: view.tombstone,
                    blocked: view.blocked,
                })
                .collect(),
            blocked: blocked.iter().map(Fingerprint::to_hex).collect(),
        }
    }
}

/// One persisted credential binding: digests only, never a token (§4.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BindingEntry {
    /// 64 lowercase hex characters.
    pub fingerprint: String,
    /// The first 12 hex characters of the credential's SHA-256.
    pub digest_prefix: String,
    pub last_use_unix_ms: u64,
    pub tombstone: bool,
    pub blocked: bool,
}

/// The answer to `POST /bindings/<fingerprint>/<action>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionOutcome {
    pub action: Action,
    pub fingerprint: String,
    /// Bindings that became tombstones.
    pub bindings: usize,
    /// MCP sessions closed with `Refused { revoked | blocked }`.
    pub sessions: usize,
    /// A worker generation left service (a published worker was told to `Drain`).
    pub worker_retired: bool,
    /// A launch grant was cancelled before its worker was published.
    pub launch_cancelled: bool,
    /// Whether the fingerprint was blocked before the action.
    pub was_blocked: bool,
    /// False when the change is in effect but the state file could not be written yet (the
    /// daemon keeps retrying); `persist_error` says why.
    pub persisted: bool,
    pub persist_error: Option<String>,
}

/// Every answer that is not a success.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
}

/// A fingerprint argument that is not the SHA-256 of a machine key. The argument itself is
/// never repeated: an operator who pastes a route token here by mistake must not find it
/// in a terminal or a CI log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the argument ({chars} characters) is not a fingerprint: expected 64 hex characters (the SHA-256 of a machine public key, as `relayd bindings list` shows it){}",
    if *.looks_like_token { "; it has the shape of a route token, which is never to be passed around: revoke by fingerprint" } else { "" }
)]
pub struct FingerprintError {
    pub chars: usize,
    pub looks_like_token: bool,
}

/// Parses a fingerprint: 64 hex characters, uppercase accepted.
pub fn parse_fingerprint(text: &str) -> Result<Fingerprint, FingerprintError> {
    let error = || FingerprintError {
        chars: text.chars().count(),
        looks_like_token: relay_identity::RouteToken::parse(text).is_ok(),
    };
    if text.len() != 64 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(error());
    }
    let bytes = hex::decode(text.to_ascii_lowercase()).map_err(|_| error())?;
    let bytes: [u8; 32] = bytes.try_into().map_err(|_| error())?;
    Ok(Fingerprint(bytes))
}

/// What a request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AdminRoute {
    List,
    Act {
        fingerprint: Fingerprint,
        action: Action,
    },
    BadFingerprint(FingerprintError),
    MethodNotAllowed,
    NotFound,
}

pub(crate) fn admin_route(method: &Method, path: &str) -> AdminRoute {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match segments.as_slice() {
        ["bindings"] if method == Method::GET => AdminRoute::List,
        ["bindings"] => AdminRoute::MethodNotAllowed,
        ["bindings", fingerprint, action] => match Action::from_segment(action) {
            None => AdminRoute::NotFound,
            Some(_) if method != Method::POST => AdminRoute::MethodNotAllowed,
            Some(action) => match parse_fingerprint(fingerprint) {
                Ok(fingerprint) => AdminRoute::Act {
                    fingerprint,
                    action,
                },
                Err(e) => AdminRoute::BadFingerprint(e),
            },
        },
        _ => AdminRoute::NotFound,
    }
}
