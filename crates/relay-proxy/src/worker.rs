//! The worker's HTTPS data plane (SPEC §5.5, §3.2–§3.4, §7.2): the per-generation TLS
//! identity the daemon pins, the shared state the control-plane shell drives, and the
//! request handler that checks the generation secret, answers the readiness probe,
//! forwards model requests to the provider and answers hook events.
//!
//! It does not speak the control protocol, read `config.toml` or `plugins.toml`, or log
//! request outcomes: the `relay-worker` shell does that and tells [`WorkerState`] what
//! happened (`Registered`, control lost, `Drain`, plugins loaded).
//!
//! Key types: [`WorkerIdentity`] (fresh ECDSA P-256 certificate for one generation),
//! [`WorkerState`] (secret, phase, control, in-flight count) and [`WorkerHandler`] (the
//! [`crate::server::Handler`] served with [`crate::server::serve`]).

mod handler;
mod identity;
mod plugins;
mod state;

pub use handler::{READY_PATH, WorkerHandler, WorkerLimits, serve_options};
pub use identity::{IdentityError, WorkerIdentity};
pub use plugins::{Observer, PluginHost, Redactors, TERMINAL_FLUSH, generation_redactors};
pub use state::{Phase, WorkerSnapshot, WorkerState};
