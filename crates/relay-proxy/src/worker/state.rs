//! What the worker's request handler needs to know about the worker's life (SPEC §5.4,
//! §5.5), set by the control-plane shell and read on every request.
//!
//! The shell calls, in order: [`WorkerState::set_secret`] when `Registered` arrives (and
//! again with the fresh secret of every `ResumeWorker`), [`WorkerState::set_ready`] once
//! its plugins are loaded (then it sends `Ready`), [`WorkerState::set_control`]`(false)`
//! when its control session drops and `(true)` once a resume succeeded (after the new
//! secret is set), and [`WorkerState::start_drain`] on `Drain`, followed by awaiting
//! [`WorkerState::drained`] under the drain deadline before it sends `Stopping` and exits.

use std::fmt;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Instant;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use tokio::sync::watch;

/// Where the worker is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Plugins are not loaded yet: model requests and hooks get 503, the readiness probe
    /// too.
    Starting,
    /// Plugins are loaded: everything is served.
    Ready,
    /// The route drains (§5.4): no new model request is accepted; hook events are still
    /// answered (they close the session's records, §3.5), but only if the plugins were
    /// loaded, so no hook is ever answered without its policy. A drain is never undone.
    Draining {
        deadline: Instant,
        plugins_loaded: bool,
    },
}

/// A snapshot of the worker's state, for the shell's logs and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerSnapshot {
    pub phase: Phase,
    /// False between a control-session drop and a successful resume.
    pub control_available: bool,
    /// False until the first `Registered`.
    pub has_secret: bool,
    pub in_flight: usize,
}

/// The shared state of one worker process. Cheap to read on every request; every method
/// takes `&self`, so the shell and the handler share it in an `Arc`.
pub struct WorkerState {
    inner: RwLock<Inner>,
    /// Requests admitted and not finished (their response body ended or was dropped).
    in_flight: watch::Sender<usize>,
}

struct Inner {
    /// The generation secret as the header carries it (base64url, no padding).
    secret: Option<EncodedSecret>,
    phase: Phase,
    control_available: bool,
}

/// The secret in its header form. `Debug` never shows it.
struct EncodedSecret(String);

impl fmt::Debug for WorkerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerState")
            .field("snapshot", &self.snapshot())
            .finish()
    }
}

impl Default for WorkerState {
    fn default() -> Self {
        WorkerState::new()
    }
}

/// What a request of some kind may do right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RequestKind {
    Model,
    Hook,
}

impl WorkerState {
    /// A worker that has no secret yet (every request is answered 401), is starting, and
    /// has its control session (control is lost only after it was had).
    pub fn new() -> WorkerState {
        WorkerState {
            inner: RwLock::new(Inner {
                secret: None,
                phase: Phase::Starting,
                control_available: true,
            }),
            in_flight: watch::Sender::new(0),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sets the generation secret from `Registered`, replacing any earlier one (a resume
    /// gets a fresh secret). Requests must then carry it in `x-relay-worker-secret`,
    /// base64url-encoded without padding (43 characters).
    pub fn set_secret(&self, secret: [u8; 32]) {
        self.write().secret = Some(EncodedSecret(URL_SAFE_NO_PAD.encode(secret)));
    }

    /// Control session available (`true`) or lost (`false`). While it is lost every new
    /// request is answered 503 `relay_worker_unavailable`; accepted requests and streams
    /// run on. On a resume, set the new secret first, then call `set_control(true)`.
    pub fn set_control(&self, available: bool) {
        self.write().control_available = available;
    }

    /// Plugins are loaded: the worker starts serving (and the readiness probe says so).
    /// During a drain it only lets hook events be answered.
    pub fn set_ready(&self) {
        let mut inner = self.write();
        inner.phase = match inner.phase {
            Phase::Starting | Phase::Ready => Phase::Ready,
            Phase::Draining { deadline, .. } => Phase::Draining {
                deadline,
                plugins_loaded: true,
            },
        };
    }

    /// The route drains until `deadline`: no new model request is accepted, hook events
    /// still are. A second `Drain` (re-sent in `Registered`) never moves the deadline
    /// later.
    pub fn start_drain(&self, deadline: Instant) {
        let mut inner = self.write();
        inner.phase = match inner.phase {
            Phase::Starting => Phase::Draining {
                deadline,
                plugins_loaded: false,
            },
            Phase::Ready => Phase::Draining {
                deadline,
                plugins_loaded: true,
            },
            Phase::Draining {
                deadline: earlier,
                plugins_loaded,
            } => Phase::Draining {
                deadline: earlier.min(deadline),
                plugins_loaded,
            },
        };
    }

    pub fn snapshot(&self) -> WorkerSnapshot {
        let inner = self.read();
        WorkerSnapshot {
            phase: inner.phase,
            control_available: inner.control_available,
            has_secret: inner.secret.is_some(),
            in_flight: self.in_flight(),
        }
    }

    /// Model requests and hook events admitted and not finished yet. A streamed response
    /// counts until its last byte is sent or the daemon goes away.
    pub fn in_flight(&self) -> usize {
        *self.in_flight.borrow()
    }

    /// Resolves as soon as no request is in flight (at once if none is). The shell awaits
    /// it after `start_drain`, under the drain deadline.
    pub async fn drained(&self) {
        let mut watching = self.in_flight.subscribe();
        // The sender lives in `self`, so the wait cannot fail while it is borrowed.
        let _ = watching.wait_for(|n| *n == 0).await;
    }

    /// Resolves once no request has been in flight for `quiet` without a break. A draining
    /// worker waits for this before it stops, so the hooks a harness posts as it ends
    /// (`Stop`, `SessionEnd`), which still go to a draining worker (§3.5), find it.
    pub async fn quiet_for(&self, quiet: std::time::Duration) {
        let mut watching = self.in_flight.subscribe();
        loop {
            // `wait_for` marks as seen the change it judged, and only that one: a request
            // admitted right after must still wake the `changed` below.
            let _ = watching.wait_for(|n| *n == 0).await;
            tokio::select! {
                () = tokio::time::sleep(quiet) => return,
                changed = watching.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
            }
        }
    }

    /// Compares the presented header value with the secret, in constant time. False while
    /// no secret is set.
    pub(crate) fn is_authorized(&self, presented: &[u8]) -> bool {
        match &self.read().secret {
            Some(EncodedSecret(secret)) => {
                relay_identity::constant_time_eq(secret.as_bytes(), presented)
            }
            None => false,
        }
    }

    /// True when the readiness probe may say `{"ready":true}`.
    pub(crate) fn is_ready(&self) -> bool {
        let inner = self.read();
        inner.control_available && inner.phase == Phase::Ready
    }

    /// Changes the in-flight count, waking those who wait on it only if someone does: the
    /// count changes twice per request, and waking the channel's waiters costs more than the
    /// rest of the change. A waiter subscribes before it reads the count, and the count
    /// changes under the channel's lock, so a change that sees no waiter comes before the
    /// read of any waiter that missed it.
    fn count_in_flight(&self, change: impl FnOnce(&mut usize)) {
        self.in_flight.send_if_modified(|n| {
            change(n);
            self.in_flight.receiver_count() > 0
        });
    }

    /// Admits a request, counting it in flight until the returned guard is dropped, or
    /// refuses it. The check and the count happen under one lock, so a drain that starts
    /// concurrently either refuses the request or waits for it in `drained`.
    pub(crate) fn admit(self: &Arc<Self>, kind: RequestKind) -> Option<InFlight> {
        let inner = self.read();
        let admitted = inner.control_available
            && match (inner.phase, kind) {
                (Phase::Ready, _) => true,
                (
                    Phase::Draining {
                        plugins_loaded: true,
                        ..
                    },
                    RequestKind::Hook,
                ) => true,
                (Phase::Starting | Phase::Draining { .. }, _) => false,
            };
        if !admitted {
            return None;
        }
        self.count_in_flight(|n| *n += 1);
        drop(inner);
        Some(InFlight {
            state: self.clone(),
        })
    }
}

/// One admitted request; dropping it ends the request's in-flight count.
pub(crate) struct InFlight {
    state: Arc<WorkerState>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.state.count_in_flight(|n| *n = n.saturating_sub(1));
    }
}

/// A break in a provider's answer is the plugin host's to record (the exchange's tap).
impl crate::body::StreamGuard for InFlight {}

#[cfg(test)]
mod tests;
