//! The model route (SPEC §3.2, §3.3): the forwarding prologue, the credential decision,
//! then the worker or the provider, with the daemon's own keys only where §3.2 allows.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::body::ClientBody;
use http::header;
use http::{HeaderMap, HeaderName, HeaderValue, Request};
use relay_broker::{Fingerprint, RequestKind};
use relay_proto::PassThroughReason;

use super::credential::{Credential, Routed};
use super::to_worker::WorkerResult;
use super::{Answer, Front, Mode};
use crate::answers::{upstream_error, worker_failed, worker_unavailable};
use crate::config::DaemonKeys;
use crate::forward::{Checked, Prologue, provider_request};
use crate::headers::{self, ModelHeaders, Toward};
use crate::metrics::{Destination, RouteLabel};
use crate::routes::{Family, ModelFamily, UpstreamBase, UpstreamTarget};
use crate::server::ConnContext;
use crate::shell::TicketGuard;
use crate::upstream::{UpstreamBody, UpstreamError};

impl Front {
    pub(super) async fn model(
        self: Arc<Self>,
        req: Request<ClientBody>,
        conn: ConnContext,
        family: ModelFamily,
        responses: bool,
    ) -> Answer {
        let label = match family {
            ModelFamily::Fixed(Family::Anthropic) => RouteLabel::Anthropic,
            _ => RouteLabel::Openai,
        };
        let local = |res, label| Answer::new(res, label, Destination::Local);
        let idle = self.config().daemon.stream_idle_secs.get();
        let prologue = Prologue {
            upstream: &self.config().upstream,
            max_body_bytes: self.config().daemon.max_request_body_bytes,
            stream_idle: idle,
            require_json: true,
        };
        let found = ModelHeaders::read(req.headers());
        let checks = prologue.shape(&req, &found, responses);
        let target = match checks.and_then(|()| prologue.target(&req, &found, family)) {
            Ok(target) => target,
            Err(refused) => return local(refused.answer(), label),
        };
        let credential = Credential::from_header(found.client_token);
        let Checked {
            parts,
            body,
            target,
        } = prologue.checked(req, target);
        let label = family_label(target.family);
        let routed = match self.decide(&credential, RequestKind::Model).await {
            Ok(routed) => routed,
            Err(refusal) => return local(refusal.answer(), label),
        };
        let models = family == ModelFamily::Models;
        // One call toward the provider for both ways of getting there: each call site would
        // have its own room in this future.
        let (parts, body, keyed, fingerprint, ticket) = match routed {
            Routed::Worker {
                target: worker,
                fingerprint,
                ticket,
            } => {
                // Judged before the worker's copy is made: that copy has lost the names the
                // caller's `Connection` header lists, a credential among them perhaps.
                let keyed = self.adds_daemon_key(&parts.headers, &conn, &target, true);
                let mut req = Request::from_parts(parts, body);
                headers::strip_request_headers(req.headers_mut(), Toward::Worker);
                match self
                    .send_to_worker(&worker, fingerprint, target.family.as_str(), req)
                    .await
                {
                    WorkerResult::Answered(res, waited) => {
                        let broke_off = self.worker_broke_off(
                            target.family.as_str(),
                            fingerprint,
                            worker.worker_id,
                        );
                        return self.relayed(
                            res,
                            waited,
                            label,
                            Destination::Worker,
                            models,
                            Some(ticket),
                            broke_off,
                        );
                    }
                    WorkerResult::Failed(res, waited) => {
                        return Answer::new(res, label, Destination::Worker).waited(waited);
                    }
                    // The body is spent, so it cannot pass through: 502, as for a worker
                    // that fails before answering (§3.7), in either mode.
                    WorkerResult::Refused(waited) => {
                        return Answer::new(worker_failed(), label, Destination::Worker)
                            .waited(waited);
                    }
                    WorkerResult::NotSent(req, outcome) => {
                        // Nothing reached the worker: pass through once (§3.7).
                        ticket.unreachable(outcome);
                        if self.options.mode == Mode::RequireWorker {
                            return local(worker_unavailable(Duration::from_secs(1)), label);
                        }
                        self.log_pass_through(
                            target.family.as_str(),
                            PassThroughReason::WorkerConnectFailed,
                            Some(fingerprint),
                        );
                        let (parts, body) = req.into_parts();
                        (parts, body, keyed, Some(fingerprint), None)
                    }
                }
            }
            Routed::PassThrough {
                reason,
                credentialed,
                fingerprint,
                ticket,
            } => {
                if credentialed {
                    self.log_pass_through(target.family.as_str(), reason, fingerprint);
                }
                let keyed =
                    self.adds_daemon_key(&parts.headers, &conn, &target, fingerprint.is_some());
                (parts, body, keyed, fingerprint, ticket)
            }
        };
        // Straight to the provider, written here rather than in an `async fn` of its own:
        // each one the request passes through copies it into its state twice.
        let provider = target.family;
        let mut upstream_req = provider_request(parts, body, target.uri);
        if keyed && let Some((name, key)) = self.daemon_key(provider) {
            upstream_req.headers_mut().insert(name, key.clone());
        }
        let waiting = Instant::now();
        let result = self.upstream.send(upstream_req).await;
        self.provider_answer(
            result,
            waiting.elapsed(),
            provider,
            fingerprint,
            models,
            ticket,
        )
    }

    /// The client's answer to a request sent straight to its provider, which `waited` for
    /// the provider's head. `fingerprint` is the caller's, when its credential is bound.
    fn provider_answer(
        &self,
        result: Result<http::Response<UpstreamBody>, UpstreamError>,
        waited: Duration,
        family: Family,
        fingerprint: Option<Fingerprint>,
        models: bool,
        ticket: Option<TicketGuard>,
    ) -> Answer {
        let label = family_label(family);
        match result {
            Ok(res) => {
                let broke_off = self.broke_off(family.as_str(), fingerprint);
                self.relayed(
                    res,
                    waited,
                    label,
                    Destination::PassThrough,
                    models,
                    ticket,
                    broke_off,
                )
            }
            Err(failure) => {
                // A body over the limit, or an upload that broke off, is the client's doing.
                if failure.is_provider_failure() {
                    self.log_upstream_failure(family.as_str(), &failure, fingerprint);
                }
                Answer::new(upstream_error(&failure), label, Destination::PassThrough)
                    .waited(waited)
            }
        }
    }

    /// The daemon's key for `family`, and the header that carries it.
    fn daemon_key(&self, family: Family) -> Option<(HeaderName, &HeaderValue)> {
        match family {
            Family::OpenAi => self
                .keys
                .openai
                .as_ref()
                .map(|k| (header::AUTHORIZATION, k)),
            Family::Anthropic => self
                .keys
                .anthropic
                .as_ref()
                .map(|k| (HeaderName::from_static("x-api-key"), k)),
        }
    }

    /// Whether a request with the caller's `headers` gets the daemon's key for its family.
    /// Each key goes only to the base it was configured for: the OpenAI key to
    /// `openai_base_url`, the Anthropic key to `anthropic_base_url`; never to the ChatGPT
    /// base or a base the caller selected. Without a key for the family there is nothing to
    /// add, so the conditions are not even looked at.
    fn adds_daemon_key(
        &self,
        headers: &HeaderMap,
        conn: &ConnContext,
        target: &UpstreamTarget,
        bound: bool,
    ) -> bool {
        self.daemon_key(target.family).is_some()
            && self.may_add_daemon_keys(
                headers,
                conn,
                target.base == UpstreamBase::Configured,
                bound,
            )
    }

    /// Every condition of §3.2 under which the daemon adds its own provider keys.
    pub(super) fn may_add_daemon_keys(
        &self,
        headers: &HeaderMap,
        conn: &ConnContext,
        configured_base: bool,
        bound: bool,
    ) -> bool {
        self.options.mode == Mode::PassThrough
            && self.is_loopback_bind()
            && conn.peer.ip().is_loopback()
            && !headers::has_forwarding_headers(headers)
            && !headers::has_provider_credential(headers)
            && configured_base
            && (bound || self.config().upstream.daemon_keys == DaemonKeys::AnyLocal)
    }
}

/// The metrics label of the provider a request goes to.
fn family_label(family: Family) -> RouteLabel {
    match family {
        Family::Anthropic => RouteLabel::Anthropic,
        Family::OpenAi => RouteLabel::Openai,
    }
}
