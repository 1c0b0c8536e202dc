//! Rate-limited provider-failure events (SPEC §10.3: `suppressed_since_last_emit`).
//!
//! A provider outage fails every request at once; logging each failure would bury everything
//! else. The three provider-failure events are therefore a separate type whose only way out is
//! [`RateLimiter::emit`]: at most one line per key and interval, reporting how many were held back.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use uuid::Uuid;

use crate::lifecycle::{LIFECYCLE_TARGET, PublicRoute, digest_prefix};

/// A failure on the request path toward a provider or a worker.
///
/// `reason` is a `&'static str` on purpose: a code chosen in the code (`connect_failed`,
/// `response_head_timeout`, `response_aborted`, …), never text built from a request or an error
/// at run time, so nothing secret can end up in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderFailure<'a> {
    /// A pass-through request to the provider failed (SPEC §3.7). `fingerprint` is known when
    /// the request carried a bound credential.
    UpstreamRequestFailed {
        route: PublicRoute,
        fingerprint: Option<&'a str>,
        reason: &'static str,
    },
    /// A request forwarded to a worker failed, for example `response_head_timeout`.
    WorkerRequestFailed {
        route: PublicRoute,
        fingerprint: &'a str,
        worker_id: Uuid,
        reason: &'static str,
    },
    /// The daemon could not talk to a worker (connect, TLS or protocol failure).
    WorkerCommunicationFailed {
        fingerprint: &'a str,
        worker_id: Uuid,
        reason: &'static str,
    },
}

impl ProviderFailure<'_> {
    /// Every provider-failure event name, in declaration order.
    pub const NAMES: [&'static str; 3] = [
        "upstream_request_failed",
        "worker_request_failed",
        "worker_communication_failed",
    ];

    /// The event name of SPEC §10.3, written as the `event` field.
    pub fn name(&self) -> &'static str {
        match self {
            ProviderFailure::UpstreamRequestFailed { .. } => Self::NAMES[0],
            ProviderFailure::WorkerRequestFailed { .. } => Self::NAMES[1],
            ProviderFailure::WorkerCommunicationFailed { .. } => Self::NAMES[2],
        }
    }

    /// What events are counted under: the event, its route, fingerprint prefix, worker and
    /// reason. One failing route does not hide the failures of another.
    fn key(&self) -> RateKey {
        match *self {
            ProviderFailure::UpstreamRequestFailed {
                route,
                fingerprint,
                reason,
            } => RateKey {
                event: self.name(),
                route: Some(route),
                fingerprint: fingerprint.map(|full| digest_prefix(full).to_owned()),
                worker_id: None,
                reason,
            },
            ProviderFailure::WorkerRequestFailed {
                route,
                fingerprint,
                worker_id,
                reason,
            } => RateKey {
                event: self.name(),
                route: Some(route),
                fingerprint: Some(digest_prefix(fingerprint).to_owned()),
                worker_id: Some(worker_id),
                reason,
            },
            ProviderFailure::WorkerCommunicationFailed {
                fingerprint,
                worker_id,
                reason,
            } => RateKey {
                event: self.name(),
                route: None,
                fingerprint: Some(digest_prefix(fingerprint).to_owned()),
                worker_id: Some(worker_id),
                reason,
            },
        }
    }

    /// Writes the line (warn). Private to the crate: callers go through [`RateLimiter::emit`].
    fn emit_with(&self, suppressed_since_last_emit: u64) {
        let name = self.name();
        match *self {
            ProviderFailure::UpstreamRequestFailed {
                route,
                fingerprint,
                reason,
            } => tracing::warn!(
                target: LIFECYCLE_TARGET,
                event = name,
                route = route.as_str(),
                fingerprint = fingerprint.map(digest_prefix),
                reason,
                suppressed_since_last_emit,
                "upstream request failed"
            ),
            ProviderFailure::WorkerRequestFailed {
                route,
                fingerprint,
                worker_id,
                reason,
            } => tracing::warn!(
                target: LIFECYCLE_TARGET,
                event = name,
                route = route.as_str(),
                fingerprint = digest_prefix(fingerprint),
                worker_id = %worker_id,
                reason,
                suppressed_since_last_emit,
                "worker request failed"
            ),
            ProviderFailure::WorkerCommunicationFailed {
                fingerprint,
                worker_id,
                reason,
            } => tracing::warn!(
                target: LIFECYCLE_TARGET,
                event = name,
                fingerprint = digest_prefix(fingerprint),
                worker_id = %worker_id,
                reason,
                suppressed_since_last_emit,
                "worker communication failed"
            ),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct RateKey {
    event: &'static str,
    route: Option<PublicRoute>,
    fingerprint: Option<String>,
    worker_id: Option<Uuid>,
    reason: &'static str,
}

/// One line let through at most once per interval, the others only counted: the window of
/// one [`RateLimiter`] key, and of any warning that may repeat fast (a server that cannot
/// accept retries about 50 times a second).
#[derive(Debug, Clone, Copy, Default)]
pub struct Throttle {
    last_emit: Option<Instant>,
    suppressed: u64,
}

impl Throttle {
    /// Counts a line at `now`: `Some(suppressed since the last line let through)` when this
    /// one may be written, `None` when it is only counted.
    pub fn admit(&mut self, now: Instant, interval: Duration) -> Option<u64> {
        if self.is_open(now, interval) {
            self.suppressed = self.suppressed.saturating_add(1);
            return None;
        }
        self.last_emit = Some(now);
        Some(std::mem::take(&mut self.suppressed))
    }

    /// Whether a line was let through less than `interval` before `now`.
    fn is_open(&self, now: Instant, interval: Duration) -> bool {
        self.last_emit
            .is_some_and(|at| now.saturating_duration_since(at) < interval)
    }
}

/// Lets at most one provider-failure line per key through per interval (10 s by default) and
/// counts the others. It reads no clock: every call passes `now`.
///
/// Keys whose interval has passed are forgotten once more than [`RateLimiter::PRUNE_ABOVE`]
/// are tracked; a count suppressed under such a key is then not reported.
#[derive(Debug)]
pub struct RateLimiter {
    interval: Duration,
    windows: HashMap<RateKey, Throttle>,
}

impl Default for RateLimiter {
    fn default() -> RateLimiter {
        RateLimiter::new(RateLimiter::DEFAULT_INTERVAL)
    }
}

impl RateLimiter {
    /// At most one line per key in this interval, unless configured otherwise.
    pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);
    /// How many keys are kept before expired ones are dropped.
    pub const PRUNE_ABOVE: usize = 1024;

    /// A limiter letting one line per key through per `interval`.
    pub fn new(interval: Duration) -> RateLimiter {
        RateLimiter {
            interval,
            windows: HashMap::new(),
        }
    }

    /// Emits `failure` unless one with the same key was emitted less than an interval before
    /// `now`, in which case it is only counted. Returns whether a line was written; a written
    /// line carries `suppressed_since_last_emit`.
    pub fn emit(&mut self, now: Instant, failure: &ProviderFailure<'_>) -> bool {
        match self.admit(now, failure.key()) {
            Some(suppressed) => {
                failure.emit_with(suppressed);
                true
            }
            None => false,
        }
    }

    /// How many keys are tracked.
    pub fn tracked_keys(&self) -> usize {
        self.windows.len()
    }

    /// The pure decision: `Some(suppressed since the last emit)` when a line may be written.
    fn admit(&mut self, now: Instant, key: RateKey) -> Option<u64> {
        let interval = self.interval;
        if !self.windows.contains_key(&key) && self.windows.len() >= Self::PRUNE_ABOVE {
            self.windows
                .retain(|_, window| window.is_open(now, interval));
        }
        self.windows.entry(key).or_default().admit(now, interval)
    }
}

#[cfg(test)]
mod tests;
