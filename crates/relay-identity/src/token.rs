//! The route credential of §4.1: the token, its digest, the token-file checks, the resolution
//! order (env, then file) and `relay-doctor token ensure`.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::{DecodeError, DecodeSliceError};

use crate::env::{Env, names};
use crate::keys::{HexError, decode_hex32, hex_serde};
use crate::paths::StatePaths;
use crate::secret::{RandomError, constant_time_eq, fill_random};
use crate::store::{self, FileFacts, StoreError};

/// A token file larger than this is refused (`too_large`).
pub const MAX_TOKEN_FILE_BYTES: u64 = 128;

/// The length of an encoded token: 32 bytes in base64url without padding.
const ENCODED_LEN: usize = 43;

/// Why a string is not a route token. Messages never include the string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not exactly 43 characters.
    #[error("a route token has 43 characters, this one has {len}")]
    Length {
        /// The length found, in bytes.
        len: usize,
    },
    /// A character outside the base64url alphabet.
    #[error("a route token uses only base64url characters (A-Z a-z 0-9 - _)")]
    Alphabet,
    /// Decodes, but is not the canonical encoding of 32 bytes.
    #[error("a route token must be the canonical base64url encoding of 32 bytes")]
    NonCanonical,
}

/// 32 random bytes that select a machine-user's route (§4.1).
///
/// The only way to see it is [`RouteToken::encode`] (or [`RouteToken::expose_bytes`] for the
/// wire): `Debug` is redacted and there is no `Display`. Equality is constant-time.
#[derive(Clone)]
pub struct RouteToken([u8; 32]);

impl RouteToken {
    /// 32 fresh bytes from the OS CSPRNG.
    pub fn generate() -> Result<RouteToken, RandomError> {
        let mut bytes = [0u8; 32];
        fill_random(&mut bytes)?;
        Ok(RouteToken(bytes))
    }

    /// Wraps raw token bytes received on the wire.
    pub fn from_bytes(bytes: [u8; 32]) -> RouteToken {
        RouteToken(bytes)
    }

    /// Parses exactly 43 base64url characters (no padding) that decode to 32 bytes and are the
    /// one spelling of those bytes.
    pub fn parse(text: &str) -> Result<RouteToken, TokenError> {
        if text.len() != ENCODED_LEN {
            return Err(TokenError::Length { len: text.len() });
        }
        // The engine refuses a byte outside the alphabet (`=` included: no padding), and the
        // last character's 2 unused bits unless they are zero, so each token has one
        // spelling. Every request with a token is parsed here, so the engine's one pass over
        // the text is the only one.
        let mut bytes = [0u8; 32];
        match URL_SAFE_NO_PAD.decode_slice(text, &mut bytes) {
            Ok(32) => Ok(RouteToken(bytes)),
            Err(DecodeSliceError::DecodeError(
                DecodeError::InvalidByte(..) | DecodeError::InvalidPadding,
            )) => Err(TokenError::Alphabet),
            _ => Err(TokenError::NonCanonical),
        }
    }

    /// The token as 43 base64url characters: what goes in the file and in headers.
    pub fn encode(&self) -> String {
        URL_SAFE_NO_PAD.encode(self.0)
    }

    /// The raw bytes, for the control message that carries the credential.
    pub fn expose_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The SHA-256 of the raw 32 bytes: all the daemon ever stores.
    pub fn digest(&self) -> TokenDigest {
        let digest = ring::digest::digest(&ring::digest::SHA256, &self.0);
        let mut bytes = [0u8; 32];
        bytes.copy_from_slice(digest.as_ref());
        TokenDigest(bytes)
    }
}

impl PartialEq for RouteToken {
    fn eq(&self, other: &RouteToken) -> bool {
        constant_time_eq(&self.0, &other.0)
    }
}

impl Eq for RouteToken {}

impl fmt::Debug for RouteToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RouteToken(..)")
    }
}

/// The SHA-256 of a route token. `Display` is 64 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TokenDigest([u8; 32]);

impl TokenDigest {
    /// Wraps 32 digest bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> TokenDigest {
        TokenDigest(bytes)
    }

    /// The 32 digest bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Parses 64 lowercase hex digits.
    pub fn parse_hex(text: &str) -> Result<TokenDigest, HexError> {
        decode_hex32(text).map(TokenDigest)
    }

    /// A 12-character prefix, for `relayd bindings list` and logs.
    pub fn short(&self) -> String {
        hex::encode(&self.0[..6])
    }
}

impl fmt::Display for TokenDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl fmt::Debug for TokenDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TokenDigest({self})")
    }
}

hex_serde!(TokenDigest, TokenDigest::parse_hex);

/// Why a token source was not used: the reason codes of §4.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TokenFileReason {
    /// The path is a symbolic link.
    Symlink,
    /// The path is not a regular file.
    NotRegularFile,
    /// The file's owner is not the effective user.
    NotOwnedByCurrentUser,
    /// `mode & 0o077 != 0`.
    InsecurePermissions,
    /// Over [`MAX_TOKEN_FILE_BYTES`] bytes.
    TooLarge,
    /// Not exactly one token plus an optional `\n` or `\r\n` (also used for an invalid
    /// `RELAY_CLIENT_TOKEN`).
    InvalidContents,
    /// Opening or reading failed.
    Unreadable,
}

impl TokenFileReason {
    /// Every reason, in the order the checks run.
    pub const ALL: [TokenFileReason; 7] = [
        TokenFileReason::Symlink,
        TokenFileReason::NotRegularFile,
        TokenFileReason::NotOwnedByCurrentUser,
        TokenFileReason::InsecurePermissions,
        TokenFileReason::TooLarge,
        TokenFileReason::InvalidContents,
        TokenFileReason::Unreadable,
    ];

    /// The reason code as logged (`route_credential_skipped reason=…`).
    pub fn as_str(self) -> &'static str {
        match self {
            TokenFileReason::Symlink => "symlink",
            TokenFileReason::NotRegularFile => "not_regular_file",
            TokenFileReason::NotOwnedByCurrentUser => "not_owned_by_current_user",
            TokenFileReason::InsecurePermissions => "insecure_permissions",
            TokenFileReason::TooLarge => "too_large",
            TokenFileReason::InvalidContents => "invalid_contents",
            TokenFileReason::Unreadable => "unreadable",
        }
    }
}

impl fmt::Display for TokenFileReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The metadata checks of §4.1, in order: symlink, file type, owner, permissions, size.
pub fn check_token_file(facts: &FileFacts, euid: u32) -> Result<(), TokenFileReason> {
    check_private_file(facts, euid, MAX_TOKEN_FILE_BYTES)
}

/// The checks of §4.1 for any private file (the route token, the daemon's provider key
/// files): not a symlink, a regular file, owned by `euid`, no group or other access, at most
/// `max_len` bytes.
pub fn check_private_file(
    facts: &FileFacts,
    euid: u32,
    max_len: u64,
) -> Result<(), TokenFileReason> {
    check_file(facts, facts.uid == euid, 0o077, max_len)
}

/// The checks in order: symlink, file type, owner (`owned`), no permission bit of
/// `forbidden`, size.
fn check_file(
    facts: &FileFacts,
    owned: bool,
    forbidden: u32,
    max_len: u64,
) -> Result<(), TokenFileReason> {
    if facts.is_symlink {
        return Err(TokenFileReason::Symlink);
    }
    if !facts.is_regular_file {
        return Err(TokenFileReason::NotRegularFile);
    }
    if !owned {
        return Err(TokenFileReason::NotOwnedByCurrentUser);
    }
    if facts.mode & forbidden != 0 {
        return Err(TokenFileReason::InsecurePermissions);
    }
    if facts.len > max_len {
        return Err(TokenFileReason::TooLarge);
    }
    Ok(())
}

/// The content check of §4.1: exactly one token, optionally followed by `\n` or `\r\n`.
pub fn parse_token_contents(bytes: &[u8]) -> Result<RouteToken, TokenFileReason> {
    if bytes.len() as u64 > MAX_TOKEN_FILE_BYTES {
        return Err(TokenFileReason::TooLarge);
    }
    let body = bytes
        .strip_suffix(b"\r\n")
        .or_else(|| bytes.strip_suffix(b"\n"))
        .unwrap_or(bytes);
    let text = std::str::from_utf8(body).map_err(|_| TokenFileReason::InvalidContents)?;
    RouteToken::parse(text).map_err(|_| TokenFileReason::InvalidContents)
}

/// Reads the token file at `path` with every check of §4.1: opened with `O_NOFOLLOW`, the
/// opened handle's metadata checked, then the contents.
///
/// `Ok(None)` means there is no file, which is not a reason to warn.
pub fn read_token_file(path: &Path, euid: u32) -> Result<Option<RouteToken>, TokenFileReason> {
    match read_private_file(path, euid, MAX_TOKEN_FILE_BYTES)? {
        Some(bytes) => parse_token_contents(&bytes).map(Some),
        None => Ok(None),
    }
}

/// Reads a private file with the checks of [`check_private_file`], made on the handle
/// opened with `O_NOFOLLOW`. `Ok(None)` means there is no file.
pub fn read_private_file(
    path: &Path,
    euid: u32,
    max_len: u64,
) -> Result<Option<Vec<u8>>, TokenFileReason> {
    read_checked(path, max_len, |facts| {
        check_private_file(facts, euid, max_len)
    })
}

/// The checks for a credential that systemd hands a service (`LoadCredential=`) in its
/// private credentials directory: systemd writes the file owned by root, mode 0400, and
/// gives the service's user read access with an ACL, whose mask then shows as the group's
/// bits. Not a symlink, a regular file, owned by root or `euid`, no access for others, at
/// most `max_len` bytes.
pub fn check_service_credential(
    facts: &FileFacts,
    euid: u32,
    max_len: u64,
) -> Result<(), TokenFileReason> {
    check_file(facts, facts.uid == euid || facts.uid == 0, 0o007, max_len)
}

/// [`read_private_file`] for a file in a service's credentials directory, checked by
/// [`check_service_credential`].
pub fn read_service_credential(
    path: &Path,
    euid: u32,
    max_len: u64,
) -> Result<Option<Vec<u8>>, TokenFileReason> {
    read_checked(path, max_len, |facts| {
        check_service_credential(facts, euid, max_len)
    })
}

fn read_checked(
    path: &Path,
    max_len: u64,
    check: impl Fn(&FileFacts) -> Result<(), TokenFileReason>,
) -> Result<Option<Vec<u8>>, TokenFileReason> {
    let mut file = match store::open_nofollow(path) {
        Ok(file) => file,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(err) if store::is_symlink_error(path, &err) => return Err(TokenFileReason::Symlink),
        Err(_) => return Err(TokenFileReason::Unreadable),
    };
    let metadata = file.metadata().map_err(|_| TokenFileReason::Unreadable)?;
    check(&FileFacts::from_metadata(&metadata))?;
    let bytes = store::read_bounded(&mut file, max_len).map_err(|_| TokenFileReason::Unreadable)?;
    if bytes.len() as u64 > max_len {
        return Err(TokenFileReason::TooLarge);
    }
    Ok(Some(bytes))
}

/// Where a route token came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CredentialSource {
    /// `RELAY_CLIENT_TOKEN`.
    Env,
    /// `<base>/relay/.client-token`.
    File,
}

impl CredentialSource {
    /// `env` or `file`, as logged.
    pub fn as_str(self) -> &'static str {
        match self {
            CredentialSource::Env => "env",
            CredentialSource::File => "file",
        }
    }
}

impl fmt::Display for CredentialSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The outcome of [`resolve_credential`]: the token if any, and every source that was present
/// but skipped (the caller logs one `route_credential_skipped` for each).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedCredential {
    /// The token and its source.
    pub token: Option<(RouteToken, CredentialSource)>,
    /// Sources that were present but invalid or unsafe.
    pub skipped: Vec<(CredentialSource, TokenFileReason)>,
}

/// The resolution order of §4.1: `RELAY_CLIENT_TOKEN` if non-empty and valid, else the token
/// file. The file is not read when the env token is valid. A missing file is not "skipped".
pub fn resolve_credential(env: &impl Env, paths: &StatePaths, euid: u32) -> ResolvedCredential {
    let mut skipped = Vec::new();
    if let Some(value) = env.non_empty(names::RELAY_CLIENT_TOKEN) {
        match value.to_str().map(RouteToken::parse) {
            Some(Ok(token)) => {
                return ResolvedCredential {
                    token: Some((token, CredentialSource::Env)),
                    skipped,
                };
            }
            _ => skipped.push((CredentialSource::Env, TokenFileReason::InvalidContents)),
        }
    }
    let token = match read_token_file(&paths.token_file(), euid) {
        Ok(token) => token.map(|token| (token, CredentialSource::File)),
        Err(reason) => {
            skipped.push((CredentialSource::File, reason));
            None
        }
    };
    ResolvedCredential { token, skipped }
}

/// What `relay-doctor token ensure` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnsureOutcome {
    /// This call created the token file.
    Created,
    /// A valid token file was already there and was left alone.
    Existing,
}

impl EnsureOutcome {
    /// `created` or `existing`.
    pub fn as_str(self) -> &'static str {
        match self {
            EnsureOutcome::Created => "created",
            EnsureOutcome::Existing => "existing",
        }
    }
}

/// Why the token file could not be ensured.
#[derive(Debug, thiserror::Error)]
pub enum EnsureError {
    /// Run as root: a root-owned token would be shared by every user who runs as root.
    #[error(
        "refusing to run as root: run relay-doctor token ensure as the user who runs the coding agent"
    )]
    Root,
    /// The relay directory could not be prepared.
    #[error("token directory: {0}")]
    Dir(#[source] StoreError),
    /// A token file exists but fails a check; it is never overwritten.
    #[error(
        "token file {} is not usable ({reason}) and was left unchanged: fix or remove it, then run relay-doctor token ensure again",
        path.display()
    )]
    Invalid {
        /// The token file.
        path: PathBuf,
        /// The failed check.
        reason: TokenFileReason,
    },
    /// Writing the new file failed.
    #[error("creating token file: {0}")]
    Write(#[source] StoreError),
    /// The token file kept disappearing between creation and reading.
    #[error("token file {} disappeared while it was being created", path.display())]
    Vanished {
        /// The token file.
        path: PathBuf,
    },
    /// No randomness for a new token.
    #[error("cannot generate a token: {0}")]
    Random(#[from] RandomError),
}

/// Creates `<base>/relay/.client-token` if there is none (§4.1): mode 0600 in a 0700 directory
/// owned by the user, by `link(2)` so exactly one concurrent caller creates it.
/// A valid file is left alone; an invalid one is reported and never overwritten.
pub fn ensure_token_file(paths: &StatePaths, euid: u32) -> Result<EnsureOutcome, EnsureError> {
    if euid == 0 {
        return Err(EnsureError::Root);
    }
    store::ensure_private_dir_for(&paths.relay_dir(), euid).map_err(EnsureError::Dir)?;
    let path = paths.token_file();
    let invalid = |reason| EnsureError::Invalid {
        path: path.clone(),
        reason,
    };
    for _ in 0..3 {
        if read_token_file(&path, euid).map_err(invalid)?.is_some() {
            return Ok(EnsureOutcome::Existing);
        }
        let token = RouteToken::generate()?;
        let contents = format!("{}\n", token.encode());
        if store::create_new_linked(&path, contents.as_bytes(), 0o600)
            .map_err(EnsureError::Write)?
        {
            return Ok(EnsureOutcome::Created);
        }
        // Another writer won: the next round reads and checks its file.
    }
    Err(EnsureError::Vanished { path })
}

#[cfg(test)]
mod tests;
