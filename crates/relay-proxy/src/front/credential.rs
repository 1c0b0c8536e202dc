//! The credential decision of SPEC §3.5: how the route credential is read, and where
//! the table sends a request (a worker, pass-through, or a refusal).

use std::time::Duration;

use http::{HeaderMap, Response, StatusCode};
use relay_broker::{Decision as BrokerDecision, Digest, Fingerprint, RequestKind};
use relay_identity::RouteToken;
use relay_proto::{ErrorKind, PassThroughReason};

use super::{Front, Mode};
use crate::answers::{retry_later, unauthorized, unbound_token, worker_unavailable};
use crate::body::ResponseBody;
use crate::headers::{self, CredentialHeader};
use crate::shell::TicketGuard;
use crate::worker_client::WorkerTarget;

/// Where the credential rules send a request (§3.5).
#[derive(Debug)]
pub(super) enum Routed {
    PassThrough {
        reason: PassThroughReason,
        /// True when the request carried a credential (then the pass-through is logged).
        credentialed: bool,
        /// The route of a bound credential (daemon keys need one by default).
        fingerprint: Option<Fingerprint>,
        /// Counts the request against its route until it ends.
        ticket: Option<TicketGuard>,
    },
    Worker {
        target: WorkerTarget,
        fingerprint: Fingerprint,
        ticket: TicketGuard,
    },
}

/// Why the credential rules send a request nowhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    Unauthorized,
    /// A well-formed token that no route holds, where only a bound one is served (strict
    /// mode, or a daemon that refuses anonymous pass-through).
    Unbound,
    /// Strict mode without a ready worker: 503 with this `Retry-After`.
    Unavailable {
        retry_after: Duration,
        /// Why the broker would have passed the request through, when it decided.
        reason: Option<PassThroughReason>,
    },
    TooMany,
}

impl Refusal {
    pub(super) fn answer(self) -> Response<ResponseBody> {
        match self {
            Refusal::Unauthorized => unauthorized(),
            Refusal::Unbound => unbound_token(),
            Refusal::Unavailable { retry_after, .. } => worker_unavailable(retry_after),
            Refusal::TooMany => retry_later(
                StatusCode::TOO_MANY_REQUESTS,
                ErrorKind::RelayTooManyRequests,
                "too many requests in flight for this route",
                1,
            ),
        }
    }
}

/// The route credential as §3.5 classifies it.
#[derive(Debug)]
pub(super) enum Credential {
    Missing,
    /// Malformed or present twice.
    Invalid,
    Token(RouteToken),
}

pub(super) fn parse_credential(headers: &HeaderMap) -> Credential {
    Credential::from_header(headers::credential_header(headers))
}

impl Credential {
    pub(super) fn from_header(header: CredentialHeader<'_>) -> Credential {
        match header {
            CredentialHeader::Missing => Credential::Missing,
            CredentialHeader::Duplicated => Credential::Invalid,
            CredentialHeader::Present(value) => match value.to_str().ok().map(RouteToken::parse) {
                Some(Ok(token)) => Credential::Token(token),
                _ => Credential::Invalid,
            },
        }
    }
}

impl Front {
    /// A non-loopback bind without `--allow-anonymous-pass-through`: callers the broker
    /// does not know are refused.
    fn is_anonymous_refused(&self) -> bool {
        !self.is_loopback_bind() && !self.options.allow_anonymous_pass_through
    }

    /// True when [`Front::decide`] for a hook depends on whether it opens a session before
    /// anything else is known: for a token the broker may know, where an unknown caller is
    /// not refused anyway. For every other credential the hook is decided from its head
    /// first, so refusals are answered before its body is read (a missing, malformed or
    /// refused credential costs the daemon no body); where unknown callers are refused, a
    /// bound token whose route has no live session is decided again with its event
    /// (`Front::hook`).
    pub(super) fn decision_needs_event(&self, credential: &Credential) -> bool {
        matches!(credential, Credential::Token(_))
            && self.shell.is_some()
            && !self.is_anonymous_refused()
    }

    /// The table of §3.5: a bound credential goes to the broker, which may wait for an
    /// activating route; everything else follows the rules for unbound callers.
    ///
    /// Where unknown callers are refused, only a credential the broker has just called bound
    /// is decided as an opening hook (`Front::hook`): should its binding go while the body
    /// arrives, the broker treats it as unknown, which may wait in the small pool of
    /// unknown credentials for the activation wait before its 401.
    pub(super) async fn decide(
        &self,
        credential: &Credential,
        kind: RequestKind,
    ) -> Result<Routed, Refusal> {
        let anonymous_refused = self.is_anonymous_refused();
        if let (Credential::Token(token), Some(shell)) = (credential, &self.shell) {
            let digest = Digest(*token.digest().as_bytes());
            match shell.route(digest, kind).await {
                BrokerDecision::Unbound => {}
                BrokerDecision::Worker {
                    ticket,
                    fingerprint,
                    worker_id,
                    endpoint,
                    certificate_sha256,
                    secret,
                } => {
                    return Ok(Routed::Worker {
                        target: WorkerTarget {
                            worker_id,
                            endpoint,
                            certificate_sha256: certificate_sha256.0,
                            secret: secret.0,
                        },
                        fingerprint,
                        ticket: TicketGuard::new(shell.clone(), ticket),
                    });
                }
                BrokerDecision::PassThrough {
                    ticket,
                    fingerprint,
                    reason,
                    retry_after,
                } => {
                    let ticket = TicketGuard::new(shell.clone(), ticket);
                    return match self.options.mode {
                        Mode::RequireWorker => Err(Refusal::Unavailable {
                            retry_after,
                            reason: Some(reason),
                        }),
                        Mode::Managed | Mode::PassThrough => Ok(Routed::PassThrough {
                            reason,
                            credentialed: true,
                            fingerprint: Some(fingerprint),
                            ticket: Some(ticket),
                        }),
                    };
                }
                BrokerDecision::TooMany { .. } => return Err(Refusal::TooMany),
                // The shell only returns once the wait is over; should it not, nothing is
                // forwarded.
                BrokerDecision::Wait => {
                    return Err(Refusal::Unavailable {
                        retry_after: Duration::from_secs(1),
                        reason: None,
                    });
                }
            }
        }
        let pass_through = |reason, credentialed| {
            Ok(Routed::PassThrough {
                reason,
                credentialed,
                fingerprint: None,
                ticket: None,
            })
        };
        match (credential, self.options.mode) {
            (Credential::Invalid, _) => Err(Refusal::Unauthorized),
            (Credential::Token(_), Mode::RequireWorker) => Err(Refusal::Unbound),
            (_, Mode::RequireWorker) => Err(Refusal::Unauthorized),
            (Credential::Token(_), _) if anonymous_refused => Err(Refusal::Unbound),
            (_, _) if anonymous_refused => Err(Refusal::Unauthorized),
            (Credential::Missing, Mode::Managed) => {
                pass_through(PassThroughReason::MissingCredential, false)
            }
            (Credential::Token(_), Mode::Managed) => {
                pass_through(PassThroughReason::UnboundCredential, true)
            }
            (credential, Mode::PassThrough) => pass_through(
                PassThroughReason::ConfiguredPassThrough,
                matches!(credential, Credential::Token(_)),
            ),
        }
    }
}
