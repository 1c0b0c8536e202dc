//! The daemon's admin socket (SPEC §2.1, §5.4 last row): `relayd bindings` reaches a
//! running daemon over HTTP/1.1 on the Unix socket `<state_dir>/admin.sock`.
//!
//! The socket's protection is the file system (mode 0600 in the daemon's 0700 state
//! directory) and, in case a mode is ever widened, the peer's uid: only the daemon's own
//! account and root are served; anyone else gets 403. The daemon also holds an exclusive
//! lock on `<state_dir>/admin.lock` from before it loads its state until after it wrote it a
//! last time, so `relayd bindings` can edit the state file of a stopped daemon without
//! racing a daemon that starts or stops meanwhile.
//!
//! Routes: `GET /bindings` → [`BindingsList`]; `POST /bindings/<fingerprint>/revoke`,
//! `/block`, `/unblock` → [`ActionOutcome`]; errors are [`ErrorBody`].

mod client;
mod lock;
mod protocol;
mod server;

pub use client::{AdminClient, AdminClientError};
pub use lock::{LOCK_FILE, StateLock, give_to_directory_owner};
pub use protocol::{
    Action, ActionOutcome, BindingEntry, BindingsList, ErrorBody, FingerprintError, SOCKET_FILE,
    parse_fingerprint,
};
pub use server::{AdminError, AdminListener, Probe, bind, is_peer_allowed, probe, serve};

#[cfg(test)]
use protocol::{AdminRoute, admin_route};
#[cfg(test)]
mod tests;
