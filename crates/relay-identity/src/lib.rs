//! Relay's identity material: machine and daemon keys, the per-user route token, trust pins,
//! the control-handshake transcript, one-time secrets and constant-time comparison.
//!
//! It does no networking and keeps no grant ledger (the broker does); its only IO is the small
//! [`store`] module (private directories, atomic writes, `link(2)` creation) and the key, token
//! and pin files built on it.
//! File checks are pure functions of the file's metadata and the effective uid, so every refusal
//! can be tested even when tests run as root.
//!
//! The [`bundle`] module holds the managed bundle's digest and comparison, shared by `relayd`
//! and `relay-doctor`.
//!
//! Key types: [`SigningKey`] and [`PublicKey`] (Ed25519, with [`Fingerprint`]), [`RouteToken`]
//! (the route credential), [`DaemonAddress`] and [`Origin`], [`PinStore`], [`Transcript`] and
//! [`Secret32`].

pub mod bundle;
mod env;
mod keys;
mod origin;
mod paths;
mod pins;
mod secret;
pub mod store;
mod token;
mod transcript;

pub use env::{Env, MapEnv, ProcessEnv, names};
pub use keys::{
    BadSignature, Fingerprint, HexError, KeyError, KeyFileOutcome, PublicKey, SigningKey,
};
pub use origin::{AddressError, DaemonAddress, Origin, Scheme};
pub use paths::{
    PathsError, StatePaths, provisioned_daemon_key_file, system_config_dir, system_plugins_file,
};
pub use pins::{Pin, PinError, PinFormatError, PinOutcome, PinStore, format_pin, parse_pin};
pub use secret::{RandomError, Secret32, constant_time_eq, random_id_bytes};
pub use store::{FileFacts, StoreError};
pub use token::{
    CredentialSource, EnsureError, EnsureOutcome, MAX_TOKEN_FILE_BYTES, ResolvedCredential,
    RouteToken, TokenDigest, TokenError, TokenFileReason, check_private_file,
    check_service_credential, check_token_file, ensure_token_file, parse_token_contents,
    read_private_file, read_service_credential, read_token_file, resolve_credential,
};
pub use transcript::{HANDSHAKE_DOMAIN, HandshakeFields, Transcript};
