//! The front's log events (SPEC §10.3): pass-through decisions, and the rate-limited
//! provider and worker failures, among them a provider's answer that breaks off.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use relay_broker::Fingerprint;
use relay_proto::{Id, PassThroughReason};

use super::Front;
use crate::body::StreamGuard;
use crate::metrics::OpenStream;
use crate::shell::TicketGuard;
use crate::upstream::UpstreamError;

/// The limiter every provider and worker failure line goes through.
pub(super) type FailureLog = Mutex<relay_logging::RateLimiter>;

/// What a relayed answer holds until its body ends: its place among the open streams, the
/// broker's ticket, and what a break in its body is logged with.
pub(super) struct Relayed {
    pub(super) _open: OpenStream,
    pub(super) _ticket: Option<TicketGuard>,
    pub(super) broke_off: Option<BrokeOff>,
}

/// How to log an answer that breaks off after its head (the client's answer is aborted, as
/// the contract says; without this line an operator would not see why): a provider's as
/// `upstream_request_failed`, a worker's as `worker_request_failed`.
pub(super) struct BrokeOff {
    failures: Arc<FailureLog>,
    route: &'static str,
    from: AnsweredBy,
}

/// Who sent the answer: the provider (for a caller whose credential is bound, or not), or a
/// route's worker.
enum AnsweredBy {
    Provider(Option<Fingerprint>),
    Worker(Fingerprint, Id),
}

impl StreamGuard for Relayed {
    fn broke_off(&mut self, idle: bool) {
        if let Some(broke) = self.broke_off.take() {
            let reason = if idle {
                "response_body_idle"
            } else {
                "response_body_failed"
            };
            match broke.from {
                AnsweredBy::Provider(fingerprint) => {
                    log_upstream(&broke.failures, broke.route, reason, fingerprint);
                }
                AnsweredBy::Worker(fingerprint, worker) => {
                    log_worker(&broke.failures, broke.route, fingerprint, worker, reason);
                }
            }
        }
    }
}

/// `upstream_request_failed` with `reason`, through the limiter.
fn log_upstream(
    failures: &FailureLog,
    route: &'static str,
    reason: &'static str,
    fingerprint: Option<Fingerprint>,
) {
    let fingerprint = fingerprint.map(|f| f.to_hex());
    let event = relay_logging::ProviderFailure::UpstreamRequestFailed {
        route: public_route(route),
        fingerprint: fingerprint.as_deref(),
        reason,
    };
    if let Some(mut limiter) = relay_logging::sync::lock(failures, "failure log limiter") {
        limiter.emit(Instant::now(), &event);
    }
}

/// `worker_request_failed` with `reason`, through the limiter.
fn log_worker(
    failures: &FailureLog,
    route: &'static str,
    fingerprint: Fingerprint,
    worker: Id,
    reason: &'static str,
) {
    let fingerprint = fingerprint.to_hex();
    let event = relay_logging::ProviderFailure::WorkerRequestFailed {
        route: public_route(route),
        fingerprint: &fingerprint,
        worker_id: worker.as_uuid(),
        reason,
    };
    if let Some(mut limiter) = relay_logging::sync::lock(failures, "failure log limiter") {
        limiter.emit(Instant::now(), &event);
    }
}

impl Front {
    pub(super) fn log_pass_through(
        &self,
        route: &'static str,
        reason: PassThroughReason,
        fingerprint: Option<Fingerprint>,
    ) {
        let fingerprint = fingerprint.map(|f| f.to_hex());
        relay_logging::Lifecycle::PublicRequestPassThrough {
            route: public_route(route),
            reason,
            fingerprint: fingerprint.as_deref(),
        }
        .emit();
    }

    pub(super) fn log_worker_failure(
        &self,
        route: &'static str,
        fingerprint: Fingerprint,
        worker: Id,
        reason: &'static str,
    ) {
        log_worker(&self.failures, route, fingerprint, worker, reason);
    }

    pub(super) fn log_worker_communication(
        &self,
        fingerprint: Fingerprint,
        worker: Id,
        reason: &'static str,
    ) {
        let fingerprint = fingerprint.to_hex();
        let event = relay_logging::ProviderFailure::WorkerCommunicationFailed {
            fingerprint: &fingerprint,
            worker_id: worker.as_uuid(),
            reason,
        };
        if let Some(mut limiter) = relay_logging::sync::lock(&self.failures, "failure log limiter")
        {
            limiter.emit(Instant::now(), &event);
        }
    }

    pub(super) fn log_upstream_failure(
        &self,
        route: &'static str,
        failure: &UpstreamError,
        fingerprint: Option<Fingerprint>,
    ) {
        log_upstream(&self.failures, route, failure.reason(), fingerprint);
    }

    /// What a provider's answer to a request on `route` is logged with if it breaks off.
    pub(super) fn broke_off(
        &self,
        route: &'static str,
        fingerprint: Option<Fingerprint>,
    ) -> BrokeOff {
        BrokeOff {
            failures: self.failures.clone(),
            route,
            from: AnsweredBy::Provider(fingerprint),
        }
    }

    /// What a worker's answer to a request on `route` is logged with if it breaks off.
    pub(super) fn worker_broke_off(
        &self,
        route: &'static str,
        fingerprint: Fingerprint,
        worker: Id,
    ) -> BrokeOff {
        BrokeOff {
            failures: self.failures.clone(),
            route,
            from: AnsweredBy::Worker(fingerprint, worker),
        }
    }
}

fn public_route(route: &str) -> relay_logging::PublicRoute {
    match route {
        "hook" => relay_logging::PublicRoute::Hook,
        "anthropic" => relay_logging::PublicRoute::Anthropic,
        _ => relay_logging::PublicRoute::Openai,
    }
}
