//! One call to a worker over its pinned TLS connection (SPEC §3.3, §3.7), shared by the
//! model and hook routes.

use std::time::{Duration, Instant};

use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode};
use relay_broker::{Fingerprint, ProbeOutcome};
use relay_proto::ErrorKind;

use super::Front;
use crate::answers::{error, upstream_error, worker_failed};
use crate::body::{BodyError, RequestBody, ResponseBody, answer_within};
use crate::headers::{WORKER_REFUSED, WORKER_UPSTREAM_FAILED};
use crate::upstream::{UpstreamBody, UpstreamError};
use crate::worker_client::{WorkerSendError, WorkerTarget};

impl Front {
    /// Sends a request to its worker over the pinned TLS connection, with the response-head
    /// backstop of §3.3 (the worker's own timeout plus 5 s, none when that is 0).
    pub(super) async fn send_to_worker(
        &self,
        worker: &WorkerTarget,
        fingerprint: Fingerprint,
        route: &'static str,
        mut req: Request<RequestBody>,
    ) -> WorkerResult {
        let Some(shell) = &self.shell else {
            return WorkerResult::Failed(worker_failed(), Duration::ZERO);
        };
        if let Some(path) = req.uri().path_and_query() {
            *req.uri_mut() = http::Uri::from(path.clone());
        }
        // The worker hop is HTTP/1.1, whatever the client spoke: hyper's HTTP/1 client frames
        // a body of unknown length as chunked only in an HTTP/1.1 request, and would send an
        // HTTP/2 client's streamed body as an empty one.
        *req.version_mut() = http::Version::HTTP_11;
        if let Ok(host) = HeaderValue::from_str(&worker.endpoint) {
            req.headers_mut().insert(header::HOST, host);
        }
        let response_timeout = self.config().upstream.response_timeout_secs.get();
        let limit = (!response_timeout.is_zero()).then(|| response_timeout + WORKER_BACKSTOP);
        let upload = limit.and_then(|_| req.body().upload());
        let waiting = Instant::now();
        // Boxed: inline, the worker client's future (pooled sends, a connect) would sit in
        // every model and hook request's future, also those that never go to a worker.
        let sending = crate::boxed(|| shell.workers().send(worker, req));
        let result = match limit {
            None => Some(sending.await),
            Some(limit) => answer_within(limit, upload, sending).await,
        };
        // The wait for the worker's head, which the overhead metric leaves out, failed or not.
        let waited = waiting.elapsed();
        let Some(result) = result else {
            self.log_worker_failure(
                route,
                fingerprint,
                worker.worker_id,
                "response_head_timeout",
            );
            return WorkerResult::Failed(
                error(
                    StatusCode::GATEWAY_TIMEOUT,
                    ErrorKind::RelayUpstreamTimeout,
                    "the worker did not answer in time",
                ),
                waited,
            );
        };
        match result {
            // The worker refused the secret: a request decided just before the worker resumed
            // with a new one. The worker read no body, but ours may be partly written: 502,
            // never the worker's 401, which a harness would take as a login problem. A
            // provider's 401 (a wrong key, an expired login) has no mark and is relayed.
            Ok(res)
                if res.status() == StatusCode::UNAUTHORIZED
                    && res.headers().contains_key(WORKER_REFUSED) =>
            {
                self.log_worker_failure(route, fingerprint, worker.worker_id, "secret_refused");
                WorkerResult::Failed(worker_failed(), waited)
            }
            // The worker stopped taking requests (it drains, or lost its control session)
            // after this one was routed to it: logged, where its 503 was relayed unseen.
            Ok(res)
                if res.status() == StatusCode::SERVICE_UNAVAILABLE
                    && res.headers().contains_key(WORKER_REFUSED) =>
            {
                self.log_worker_failure(route, fingerprint, worker.worker_id, "worker_unavailable");
                WorkerResult::Refused(waited)
            }
            Ok(res) => {
                // The worker answered a provider failure: logged here, with the daemon's
                // other failure events. The relay of the answer drops the mark, as it drops
                // every `x-relay-*` header.
                if let Some(reason) = res.headers().get(WORKER_UPSTREAM_FAILED) {
                    let reason = UpstreamError::failure_reason(reason.as_bytes());
                    self.log_worker_failure(route, fingerprint, worker.worker_id, reason);
                }
                WorkerResult::Answered(res, waited)
            }
            Err(WorkerSendError::NotSent { request, outcome }) => {
                self.log_worker_communication(fingerprint, worker.worker_id, "connect_failed");
                WorkerResult::NotSent(*request, outcome)
            }
            // The daemon's own limit, not the worker's fault: the broker is not told, and the
            // request is not passed through (that would need a connection too).
            Err(WorkerSendError::NoRoom) => {
                self.log_worker_communication(
                    fingerprint,
                    worker.worker_id,
                    "too_many_connections",
                );
                WorkerResult::Failed(upstream_error(&UpstreamError::NoRoom), waited)
            }
            Err(WorkerSendError::Failed(error)) => {
                // The client's own body crossed the limit, stopped arriving or broke off
                // while it was being sent: answered as on the way to a provider, and no
                // worker failure.
                if let Some(found) = BodyError::find(&error) {
                    let failure = UpstreamError::of_request_body(found);
                    return WorkerResult::Failed(upstream_error(&failure), waited);
                }
                self.log_worker_failure(route, fingerprint, worker.worker_id, "worker_failed");
                WorkerResult::Failed(worker_failed(), waited)
            }
        }
    }
}

/// How a call to a worker ended.
pub(super) enum WorkerResult {
    /// The worker's answer, and how long its head took.
    Answered(Response<UpstreamBody>, Duration),
    /// Nothing reached the worker; the request comes back unsent.
    NotSent(Request<RequestBody>, ProbeOutcome),
    /// The daemon's answer for a failed exchange, and how long it waited on the worker.
    Failed(Response<ResponseBody>, Duration),
    /// The worker refused the request unread: it no longer takes requests. Nothing reached
    /// the provider, but the request's body went to the worker.
    Refused(Duration),
}

/// The daemon's backstop toward a worker beyond the worker's own response timeout (§3.3).
pub(super) const WORKER_BACKSTOP: Duration = Duration::from_secs(5);
