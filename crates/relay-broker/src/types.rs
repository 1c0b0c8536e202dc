//! Identifiers, configuration and read-only views.

use std::fmt;
use std::time::{Duration, Instant};

use relay_proto::{Bytes32, Id, RouteState, Timers, WorkerState};

/// A route's key: the SHA-256 of a machine public key (§4.2).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Fingerprint(pub [u8; 32]);

impl Fingerprint {
    /// Lowercase hex, as logs take it (they write a 12-character prefix).
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "fp:{}", &self.to_hex()[..8])
    }
}

/// The SHA-256 of a route credential; the broker never sees a raw token.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "digest:{}", &self.to_hex()[..8])
    }
}

/// One control connection of the shell. The shell numbers them; a number is never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnId(pub u64);

/// Where fresh ids and secrets come from. The daemon passes the OS random generator; tests
/// pass a counter so scenarios are reproducible.
pub trait Entropy: Send {
    fn id(&mut self) -> Id;
    fn secret(&mut self) -> Bytes32;
}

/// The broker's fixed settings.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// `--pass-through`: registrations are bound and told `UsePassThrough`; no grants.
    pub pass_through: bool,
    pub max_tokens_per_identity: usize,
    pub max_routes: usize,
    pub max_sessions_per_route: usize,
    pub max_requests_per_identity: u32,
    /// How long a request waits for an activating route (§3.5); zero disables the wait.
    pub activation_wait: Duration,
    pub binding_tombstone: Duration,
    /// How often a ready loopback worker's readiness endpoint is probed.
    pub probe_interval: Duration,
    /// How often a worker that reported `Ready` is re-probed while its probe fails.
    pub activation_probe_retry: Duration,
    /// How often binding last-use times are written.
    pub bindings_flush: Duration,
    pub timers: Timers,
}

impl BrokerConfig {
    pub(crate) fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    pub(crate) fn reconnect_grace(&self) -> Duration {
        Self::ms(self.timers.reconnect_grace_ms)
    }

    pub(crate) fn drain(&self) -> Duration {
        Self::ms(self.timers.drain_ms)
    }

    pub(crate) fn startup_progress(&self) -> Duration {
        Self::ms(self.timers.startup_progress_ms)
    }
}

impl Default for BrokerConfig {
    /// SPEC defaults.
    fn default() -> Self {
        let timers = Timers::default();
        BrokerConfig {
            pass_through: false,
            max_tokens_per_identity: 4,
            max_routes: 4096,
            max_sessions_per_route: 64,
            max_requests_per_identity: 256,
            activation_wait: Duration::from_millis(2000),
            binding_tombstone: Duration::from_secs(30 * 24 * 3600),
            probe_interval: Duration::from_millis(timers.ping_ms),
            activation_probe_retry: Duration::from_millis(timers.reconnect_first_ms),
            bindings_flush: Duration::from_secs(300),
            timers,
        }
    }
}

/// A worker as the status endpoints show it (§3.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerView {
    pub worker_id: Id,
    pub state: WorkerState,
    pub control_available: bool,
    pub reference_count: u32,
    pub in_flight: u32,
}

/// A caller's route as `GET /_relay/v1/route` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteView {
    pub state: RouteState,
    pub worker_id: Option<Id>,
    pub control_available: Option<bool>,
    /// True when the next model request would go to the worker.
    pub worker_ready: bool,
    pub live_references: u32,
    /// The route's connected sessions come from more than one peer address: two machines
    /// share one machine identity (a cloned image, a home directory on a network share).
    pub identity_conflict: bool,
}

/// A persisted binding as `relayd bindings list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindingView {
    pub fingerprint: Fingerprint,
    pub digest: Digest,
    pub last_use: Instant,
    pub tombstone: bool,
    pub blocked: bool,
}
