//! The front's log events (SPEC §10.3): pass-through decisions, and the rate-limited
//! provider and worker failures.

use std::time::Instant;

use relay_broker::Fingerprint;
use relay_proto::{Id, PassThroughReason};

use super::Front;
use crate::upstream::UpstreamError;

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
        let fingerprint = fingerprint.to_hex();
        let event = relay_logging::ProviderFailure::WorkerRequestFailed {
            route: public_route(route),
            fingerprint: &fingerprint,
            worker_id: worker.as_uuid(),
            reason,
        };
        if let Some(mut limiter) = relay_logging::sync::lock(&self.failures, "failure log limiter")
        {
            limiter.emit(Instant::now(), &event);
        }
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
        let fingerprint = fingerprint.map(|f| f.to_hex());
        let event = relay_logging::ProviderFailure::UpstreamRequestFailed {
            route: public_route(route),
            fingerprint: fingerprint.as_deref(),
            reason: failure.reason(),
        };
        if let Some(mut limiter) = relay_logging::sync::lock(&self.failures, "failure log limiter")
        {
            limiter.emit(Instant::now(), &event);
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
