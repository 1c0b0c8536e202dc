//! The daemon's public HTTP front (SPEC §3): status endpoints, model and hook routes,
//! the credential table of §3.5, the bad-input rules of §3.6 and the failure answers of
//! §3.7. Everything a request must pass is checked here, in one order, before a byte goes
//! anywhere.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use relay_broker::{Decision as BrokerDecision, Digest, Fingerprint, ProbeOutcome, RequestKind};
use relay_identity::RouteToken;
use relay_proto::{
    DeploymentMode, ErrorKind, Health, HealthStatus, Id, PassThroughReason, Role, RouteMode,
    RouteState, RouteStatus, WorkerList, WorkerStatus, WorkerStatusList,
};
use uuid::Uuid;

use crate::answers::{
    ambiguous_framing, content_length, error, json, no_store, not_found, payload_too_large,
    relay_response, unauthorized, unsupported_media_type, upstream_error, upstream_not_allowed,
    worker_failed, worker_unavailable,
};
use crate::body::{RequestBody, ResponseBody};
use crate::config::{Config, DaemonKeys};
use crate::conn::HeadVerdict;
use crate::control::daemon::ControlPlane;
use crate::headers::{self, CredentialHeader, Toward};
use crate::metrics::{Destination, Metrics, RouteLabel};
use crate::routes::{
    Agent, Family, ModelFamily, Route, TargetError, UpstreamTarget, upstream_target,
};
use crate::server::{ConnContext, Handler};
use crate::shell::{Shell, TicketGuard};
use crate::upstream::{UpstreamClient, UpstreamError};
use crate::worker_client::{WorkerSendError, WorkerTarget};

/// How the daemon treats requests without a ready worker (§2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Pass through when no worker is ready.
    Managed,
    /// `--pass-through`: never use workers.
    PassThrough,
    /// `--require-worker`: 401/503 instead of passing through.
    RequireWorker,
}

/// The origin clients use to reach the daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advertised {
    pub https: bool,
    /// Lowercase host.
    pub host: String,
    pub port: u16,
}

/// Everything the front needs to decide, fixed at start-up.
#[derive(Debug, Clone)]
pub struct FrontOptions {
    pub bind: Ipv4Addr,
    /// The port the listener really has (after binding port 0 in tests).
    pub port: u16,
    pub advertised: Advertised,
    pub mode: Mode,
    pub allow_anonymous_pass_through: bool,
    pub config: Arc<Config>,
    pub instance_id: Uuid,
}

/// The daemon's own provider keys for `--pass-through` (§3.2), marked sensitive so hyper
/// never logs them.
#[derive(Clone, Default)]
pub struct ProviderKeys {
    pub openai: Option<HeaderValue>,
    pub anthropic: Option<HeaderValue>,
}

impl std::fmt::Debug for ProviderKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderKeys")
            .field("openai", &self.openai.is_some())
            .field("anthropic", &self.anthropic.is_some())
            .finish()
    }
}

impl ProviderKeys {
    /// Builds the header values: `Authorization: Bearer` for OpenAI, `x-api-key` for
    /// Anthropic. A key that is not a valid header value is refused.
    pub fn new(
        openai: Option<&str>,
        anthropic: Option<&str>,
    ) -> Result<ProviderKeys, &'static str> {
        let value = |text: String, which: &'static str| {
            let mut value = HeaderValue::from_str(&text).map_err(|_| which)?;
            value.set_sensitive(true);
            Ok::<_, &'static str>(value)
        };
        Ok(ProviderKeys {
            openai: openai
                .map(|k| value(format!("Bearer {}", k.trim()), "the OpenAI key"))
                .transpose()?,
            anthropic: anthropic
                .map(|k| value(k.trim().to_owned(), "the Anthropic key"))
                .transpose()?,
        })
    }
}

/// The daemon's request handler.
#[derive(Debug)]
pub struct Front {
    options: FrontOptions,
    upstream: UpstreamClient,
    keys: ProviderKeys,
    metrics: Arc<Metrics>,
    degraded: AtomicBool,
    failures: std::sync::Mutex<relay_logging::RateLimiter>,
    /// The broker's shell and the control plane; absent in front-only tests, where no
    /// credential is ever bound.
    shell: Option<Arc<Shell>>,
    control: Option<Arc<ControlPlane>>,
}

/// Where the credential rules send a request (§3.5).
#[derive(Debug)]
enum Routed {
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
enum Refusal {
    Unauthorized,
    /// Strict mode without a ready worker: 503 with this `Retry-After`.
    Unavailable {
        retry_after: Duration,
    },
    TooMany,
}

impl Refusal {
    fn answer(self) -> Response<ResponseBody> {
        match self {
            Refusal::Unauthorized => unauthorized(),
            Refusal::Unavailable { retry_after } => worker_unavailable(retry_after),
            Refusal::TooMany => {
                let mut res = error(
                    StatusCode::TOO_MANY_REQUESTS,
                    ErrorKind::RelayTooManyRequests,
                    "too many requests in flight for this route",
                );
                res.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                res
            }
        }
    }
}

impl Front {
    pub fn new(
        options: FrontOptions,
        upstream: UpstreamClient,
        keys: ProviderKeys,
        metrics: Arc<Metrics>,
    ) -> Front {
        Front {
            options,
            upstream,
            keys,
            metrics,
            degraded: AtomicBool::new(false),
            failures: std::sync::Mutex::new(relay_logging::RateLimiter::new(
                std::time::Duration::from_secs(10),
            )),
            shell: None,
            control: None,
        }
    }

    /// Routes bound credentials through the broker and serves the control endpoints.
    pub fn with_control(mut self, shell: Arc<Shell>, control: Arc<ControlPlane>) -> Front {
        self.shell = Some(shell);
        self.control = Some(control);
        self
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Marks state as unwritable (§4.4): `/healthz` then says `degraded`.
    pub fn set_degraded(&self, degraded: bool) {
        self.degraded.store(degraded, Ordering::Relaxed);
    }

    fn config(&self) -> &Config {
        &self.options.config
    }

    fn is_loopback_bind(&self) -> bool {
        self.options.bind.is_loopback()
    }

    async fn route(
        self: Arc<Self>,
        req: Request<Incoming>,
        conn: ConnContext,
    ) -> (Response<ResponseBody>, RouteLabel, Destination) {
        let route = Route::classify(req.method(), req.uri().path());
        let label = route_label(route);
        let local = |res| (res, label, Destination::Local);
        if conn.state.take_verdict() == HeadVerdict::AmbiguousFraming {
            return local(ambiguous_framing());
        }
        if !self.is_host_allowed(&req, &conn) {
            return local(error(
                StatusCode::MISDIRECTED_REQUEST,
                ErrorKind::RelayMisdirectedRequest,
                "this host name is not served here",
            ));
        }
        if let Some(origin) = req.headers().get(header::ORIGIN)
            && !self.is_origin_allowed(origin)
        {
            return local(error(
                StatusCode::FORBIDDEN,
                ErrorKind::RelayCrossOrigin,
                "cross-origin requests are refused",
            ));
        }
        match route {
            Route::HeadRoot => local(Response::new(ResponseBody::empty())),
            Route::Healthz => local(self.health()),
            Route::Workers | Route::WorkersStatus | Route::WorkerStatus(_) | Route::Metrics => {
                if !self.is_status_visible(conn.peer.ip()) {
                    return local(not_found());
                }
                let workers: Vec<WorkerStatus> = self
                    .shell
                    .as_ref()
                    .map(|shell| shell.workers_view())
                    .unwrap_or_default()
                    .into_iter()
                    .map(|w| WorkerStatus {
                        worker_id: w.worker_id.as_uuid(),
                        state: w.state,
                        control_available: w.control_available,
                        reference_count: w.reference_count,
                        in_flight: w.in_flight,
                    })
                    .collect();
                local(match route {
                    Route::Workers => json(&WorkerList {
                        instance_id: self.options.instance_id,
                        status: HealthStatus::Ok,
                        workers: workers.iter().map(|w| w.worker_id).collect(),
                    }),
                    Route::WorkersStatus => json(&WorkerStatusList {
                        instance_id: self.options.instance_id,
                        status: HealthStatus::Ok,
                        workers,
                    }),
                    Route::WorkerStatus(id) => {
                        match workers.into_iter().find(|w| Some(w.worker_id) == id) {
                            Some(worker) => json(&worker),
                            None => error(
                                StatusCode::NOT_FOUND,
                                ErrorKind::RelayNotFound,
                                "worker not found",
                            ),
                        }
                    }
                    _ => {
                        let mut res = Response::new(ResponseBody::full(self.metrics.encode()));
                        res.headers_mut().insert(
                            header::CONTENT_TYPE,
                            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
                        );
                        no_store(res)
                    }
                })
            }
            Route::RouteStatus => local(self.route_status(req.headers())),
            Route::ControlMcp | Route::ControlWorker => match &self.control {
                Some(control) => {
                    let role = if route == Route::ControlMcp {
                        Role::Mcp
                    } else {
                        Role::Worker
                    };
                    local(control.upgrade(req, role, conn.peer))
                }
                None => local(not_found()),
            },
            Route::Model { family, responses } => self.model(req, &conn, family, responses).await,
            Route::Hook(agent) => self.hook(req, agent).await,
            Route::MethodNotAllowed => local(error(
                StatusCode::METHOD_NOT_ALLOWED,
                ErrorKind::RelayMethodNotAllowed,
                "method not allowed on this path",
            )),
            Route::NotFound => local(not_found()),
        }
    }

    /// §3.6: the advertised host from anyone, loopback names with the listening port from
    /// loopback peers only.
    fn is_host_allowed<B>(&self, req: &Request<B>, conn: &ConnContext) -> bool {
        let authority = req
            .uri()
            .authority()
            .map(|a| a.as_str().to_owned())
            .or_else(|| {
                req.headers()
                    .get(header::HOST)
                    .and_then(|h| h.to_str().ok())
                    .map(str::to_owned)
            });
        let Some(authority) = authority else {
            return false;
        };
        let authority = authority.to_ascii_lowercase();
        let (host, port) = match authority.rsplit_once(':') {
            Some((host, port)) => match port.parse::<u16>() {
                Ok(port) => (host, Some(port)),
                Err(_) => return false,
            },
            None => (authority.as_str(), None),
        };
        let advertised = &self.options.advertised;
        let default_port = if advertised.https { 443 } else { 80 };
        if host == advertised.host
            && (port == Some(advertised.port)
                || (port.is_none() && advertised.port == default_port))
        {
            return true;
        }
        conn.peer.ip().is_loopback()
            && matches!(host, "127.0.0.1" | "localhost")
            && port == Some(self.options.port)
    }

    fn is_origin_allowed(&self, origin: &HeaderValue) -> bool {
        let Ok(origin) = origin.to_str() else {
            return false;
        };
        let origin = origin.trim_end_matches('/');
        self.config()
            .daemon
            .allowed_origins
            .iter()
            .any(|allowed| allowed.trim_end_matches('/').eq_ignore_ascii_case(origin))
    }

    fn is_status_visible(&self, peer: IpAddr) -> bool {
        self.is_loopback_bind() || peer.is_loopback() || self.config().daemon.status_public
    }

    fn health(&self) -> Response<ResponseBody> {
        json(&Health {
            service: "relayd".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            instance_id: self.options.instance_id,
            deployment_mode: match self.options.mode {
                Mode::PassThrough => DeploymentMode::PassThrough,
                Mode::Managed | Mode::RequireWorker => DeploymentMode::Managed,
            },
            status: if self.degraded.load(Ordering::Relaxed)
                || self.shell.as_ref().is_some_and(|shell| shell.is_degraded())
            {
                HealthStatus::Degraded
            } else {
                HealthStatus::Ok
            },
        })
    }

    fn route_status(&self, headers: &HeaderMap) -> Response<ResponseBody> {
        let token = match parse_credential(headers) {
            Credential::Missing | Credential::Invalid => return unauthorized(),
            Credential::Token(token) => token,
        };
        let digest = Digest(*token.digest().as_bytes());
        let view = self
            .shell
            .as_ref()
            .and_then(|shell| shell.route_view(&digest));
        let Some(view) = view else {
            return json(&RouteStatus {
                route_mode: RouteMode::PassThrough,
                reason: Some(PassThroughReason::UnboundCredential),
                worker_id: None,
                state: RouteState::None,
                control_available: None,
            });
        };
        let reason = if view.worker_ready {
            None
        } else if self.options.mode == Mode::PassThrough {
            Some(PassThroughReason::ConfiguredPassThrough)
        } else if view.live_references == 0 {
            Some(PassThroughReason::NoLiveSession)
        } else {
            Some(PassThroughReason::WorkerUnavailable)
        };
        json(&RouteStatus {
            route_mode: if view.worker_ready {
                RouteMode::Worker
            } else {
                RouteMode::PassThrough
            },
            reason,
            worker_id: view.worker_id.map(|id| id.as_uuid()),
            state: view.state,
            control_available: view.control_available,
        })
    }

    /// The table of §3.5: a bound credential goes to the broker, which may wait for an
    /// activating route; everything else follows the rules for unbound callers.
    async fn decide(&self, credential: &Credential, kind: RequestKind) -> Result<Routed, Refusal> {
        let anonymous_refused =
            !self.is_loopback_bind() && !self.options.allow_anonymous_pass_through;
        // A caller whose credential turns out unbound gets 401 here: it may not park a
        // request waiting for a session.
        let kind = match kind {
            RequestKind::OpeningHook if anonymous_refused => RequestKind::Hook,
            kind => kind,
        };
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
                        Mode::RequireWorker => Err(Refusal::Unavailable { retry_after }),
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
            (_, Mode::RequireWorker) => Err(Refusal::Unauthorized),
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

    async fn model(
        self: Arc<Self>,
        req: Request<Incoming>,
        conn: &ConnContext,
        family: ModelFamily,
        responses: bool,
    ) -> (Response<ResponseBody>, RouteLabel, Destination) {
        let label = match family {
            ModelFamily::Fixed(Family::Anthropic) => RouteLabel::Anthropic,
            _ => RouteLabel::Openai,
        };
        let local = |res, label| (res, label, Destination::Local);
        if responses && headers::is_websocket_upgrade(req.method(), req.headers()) {
            return local(
                error(
                    StatusCode::UPGRADE_REQUIRED,
                    ErrorKind::RelayUpgradeRequired,
                    "WebSocket is not supported here; use HTTP streaming",
                ),
                label,
            );
        }
        if responses && req.method() != Method::POST {
            return local(
                error(
                    StatusCode::METHOD_NOT_ALLOWED,
                    ErrorKind::RelayMethodNotAllowed,
                    "method not allowed on this path",
                ),
                label,
            );
        }
        if req.method() == Method::POST && !headers::is_json_media_type(req.headers()) {
            return local(unsupported_media_type(), label);
        }
        let limit = self.config().daemon.max_request_body_bytes;
        if content_length(req.headers()).is_some_and(|len| len > limit) {
            return local(payload_too_large(limit), label);
        }
        let selected = match req.headers().get(headers::UPSTREAM_BASE_URL) {
            None => None,
            Some(value) => match value.to_str() {
                Ok(text) => Some(text.to_owned()),
                Err(_) => return local(upstream_not_allowed(), label),
            },
        };
        let target = match upstream_target(
            &self.config().upstream,
            family,
            req.headers(),
            selected.as_deref(),
            req.uri().path(),
            req.uri().query(),
        ) {
            Ok(target) => target,
            Err(TargetError::NotAllowed(_)) => return local(upstream_not_allowed(), label),
            Err(TargetError::BadUri) => {
                return local(
                    error(
                        StatusCode::BAD_REQUEST,
                        ErrorKind::RelayBadRequest,
                        "bad request path",
                    ),
                    label,
                );
            }
        };
        let label = match target.family {
            Family::Anthropic => RouteLabel::Anthropic,
            Family::OpenAi => RouteLabel::Openai,
        };
        let credential = parse_credential(req.headers());
        let routed = match self.decide(&credential, RequestKind::Model).await {
            Ok(routed) => routed,
            Err(refusal) => return local(refusal.answer(), label),
        };
        let idle = self.config().daemon.stream_idle_secs.get();
        let models = family == ModelFamily::Models;
        let (parts, incoming) = req.into_parts();
        let body = if parts.method == Method::GET || parts.method == Method::HEAD {
            RequestBody::empty()
        } else {
            RequestBody::streaming(incoming, limit, idle)
        };
        match routed {
            Routed::Worker {
                target: worker,
                fingerprint,
                ticket,
            } => {
                let mut req = Request::from_parts(parts, body);
                *req.headers_mut() =
                    headers::forwardable_request_headers(req.headers(), Toward::Worker);
                match self
                    .send_to_worker(&worker, fingerprint, target.family.as_str(), req)
                    .await
                {
                    WorkerResult::Answered(res) => (
                        relay_response(
                            res,
                            models,
                            idle,
                            Box::new((self.metrics.open_stream(), Some(ticket))),
                        ),
                        label,
                        Destination::Worker,
                    ),
                    WorkerResult::Failed(res) => (res, label, Destination::Worker),
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
                        let res = self
                            .to_provider(&parts, body, &target, conn, true, models, idle, None)
                            .await;
                        (res, label, Destination::PassThrough)
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
                let bound = fingerprint.is_some();
                let res = self
                    .to_provider(&parts, body, &target, conn, bound, models, idle, ticket)
                    .await;
                (res, label, Destination::PassThrough)
            }
        }
    }

    /// Forwards a request straight to its provider.
    #[allow(clippy::too_many_arguments)]
    async fn to_provider(
        &self,
        parts: &http::request::Parts,
        body: RequestBody,
        target: &UpstreamTarget,
        conn: &ConnContext,
        bound: bool,
        models: bool,
        idle: Duration,
        ticket: Option<TicketGuard>,
    ) -> Response<ResponseBody> {
        let mut headers = headers::forwardable_request_headers(&parts.headers, Toward::Provider);
        if self.may_add_daemon_keys(&parts.headers, conn, target.is_configured_base, bound) {
            match target.family {
                Family::OpenAi => {
                    if let Some(key) = &self.keys.openai {
                        headers.insert(header::AUTHORIZATION, key.clone());
                    }
                }
                Family::Anthropic => {
                    if let Some(key) = &self.keys.anthropic {
                        headers.insert("x-api-key", key.clone());
                    }
                }
            }
        }
        let mut upstream_req = Request::new(body);
        *upstream_req.method_mut() = parts.method.clone();
        *upstream_req.uri_mut() = target.uri.clone();
        *upstream_req.headers_mut() = headers;
        let waiting = Instant::now();
        let result = self.upstream.send(upstream_req).await;
        let waited = UpstreamWait(waiting.elapsed());
        match result.map(|mut res| {
            res.extensions_mut().insert(waited);
            res
        }) {
            Ok(res) => relay_response(
                res,
                models,
                idle,
                Box::new((self.metrics.open_stream(), ticket)),
            ),
            Err(failure) => {
                // A body over the limit is the client's fault, not a provider failure.
                if !matches!(failure, UpstreamError::BodyTooLarge { .. }) {
                    self.log_upstream_failure(target.family.as_str(), &failure);
                }
                upstream_error(&failure)
            }
        }
    }

    /// Sends a request to its worker over the pinned TLS connection, with the response-head
    /// backstop of §3.3 (the worker's own timeout plus 5 s, none when that is 0).
    async fn send_to_worker(
        &self,
        worker: &WorkerTarget,
        fingerprint: Fingerprint,
        route: &'static str,
        mut req: Request<RequestBody>,
    ) -> WorkerResult {
        let Some(shell) = &self.shell else {
            return WorkerResult::Failed(worker_failed());
        };
        if let Some(path) = req.uri().path_and_query() {
            *req.uri_mut() = http::Uri::from(path.clone());
        }
        if let Ok(host) = HeaderValue::from_str(&worker.endpoint) {
            req.headers_mut().insert(header::HOST, host);
        }
        let response_timeout = self.config().upstream.response_timeout_secs.get();
        let waiting = Instant::now();
        let sending = shell.workers().send(worker, req);
        let result = if response_timeout.is_zero() {
            sending.await
        } else {
            match tokio::time::timeout(response_timeout + WORKER_BACKSTOP, sending).await {
                Ok(result) => result,
                Err(_) => {
                    self.log_worker_failure(
                        route,
                        fingerprint,
                        worker.worker_id,
                        "response_head_timeout",
                    );
                    return WorkerResult::Failed(error(
                        StatusCode::GATEWAY_TIMEOUT,
                        ErrorKind::RelayUpstreamTimeout,
                        "the worker did not answer in time",
                    ));
                }
            }
        };
        match result {
            // The worker refused the secret: a request decided just before the worker resumed
            // with a new one. The worker read no body, but ours may be partly written: 502,
            // never the worker's 401, which a harness would take as a login problem.
            Ok(res) if res.status() == StatusCode::UNAUTHORIZED => {
                self.log_worker_failure(route, fingerprint, worker.worker_id, "secret_refused");
                WorkerResult::Failed(worker_failed())
            }
            Ok(mut res) => {
                res.extensions_mut().insert(UpstreamWait(waiting.elapsed()));
                WorkerResult::Answered(res)
            }
            Err(WorkerSendError::NotSent { request, outcome }) => {
                self.log_worker_communication(fingerprint, worker.worker_id, "connect_failed");
                WorkerResult::NotSent(*request, outcome)
            }
            Err(WorkerSendError::Failed(_)) => {
                self.log_worker_failure(route, fingerprint, worker.worker_id, "worker_failed");
                WorkerResult::Failed(worker_failed())
            }
        }
    }

    /// Every condition of §3.2 under which the daemon adds its own provider keys.
    fn may_add_daemon_keys(
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

    async fn hook(
        self: Arc<Self>,
        req: Request<Incoming>,
        agent: Agent,
    ) -> (Response<ResponseBody>, RouteLabel, Destination) {
        let local = |res| (res, RouteLabel::Hook, Destination::Local);
        if !headers::is_json_media_type(req.headers()) {
            return local(unsupported_media_type());
        }
        let limit = self.config().daemon.max_hook_body_bytes;
        let (parts, incoming) = req.into_parts();
        let body = match read_limited(&parts.headers, incoming, limit).await {
            Ok(body) => body,
            Err(res) => return local(res),
        };
        let Some(event) = hook_event(&body) else {
            return local(error(
                StatusCode::BAD_REQUEST,
                ErrorKind::RelayBadRequest,
                "a hook body must be a JSON object",
            ));
        };
        let kind = if event.is_some_and(|name| agent.is_opening_event(name)) {
            RequestKind::OpeningHook
        } else {
            RequestKind::Hook
        };
        let credential = parse_credential(&parts.headers);
        let routed = match self.decide(&credential, kind).await {
            Ok(routed) => routed,
            Err(refusal) => return local(refusal.answer()),
        };
        let (reason, fingerprint) = match routed {
            Routed::Worker {
                target: worker,
                fingerprint,
                ticket,
            } => {
                let mut req = Request::new(RequestBody::full(body));
                *req.method_mut() = Method::POST;
                *req.uri_mut() = parts.uri.clone();
                *req.headers_mut() =
                    headers::forwardable_request_headers(&parts.headers, Toward::Worker);
                match self.send_to_worker(&worker, fingerprint, "hook", req).await {
                    WorkerResult::Answered(res) => {
                        let idle = self.config().daemon.stream_idle_secs.get();
                        let res = relay_response(
                            res,
                            false,
                            idle,
                            Box::new((self.metrics.open_stream(), Some(ticket))),
                        );
                        return (res, RouteLabel::Hook, Destination::Worker);
                    }
                    WorkerResult::Failed(res) => {
                        return (res, RouteLabel::Hook, Destination::Worker);
                    }
                    WorkerResult::NotSent(_, outcome) => {
                        ticket.unreachable(outcome);
                        if self.options.mode == Mode::RequireWorker {
                            return local(worker_unavailable(Duration::from_secs(1)));
                        }
                        (
                            Some(PassThroughReason::WorkerConnectFailed),
                            Some(fingerprint),
                        )
                    }
                }
            }
            Routed::PassThrough {
                reason,
                credentialed,
                fingerprint,
                ..
            } => (credentialed.then_some(reason), fingerprint),
        };
        if let Some(reason) = reason {
            self.log_pass_through("hook", reason, fingerprint);
        }
        let mut res = Response::new(ResponseBody::full(Bytes::from_static(
            agent.pass_through_answer(),
        )));
        res.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        (res, RouteLabel::Hook, Destination::PassThrough)
    }

    fn log_pass_through(
        &self,
        route: &'static str,
        reason: PassThroughReason,
        fingerprint: Option<Fingerprint>,
    ) {
        let fingerprint = fingerprint.map(|f| f.to_hex());
        relay_logging::Lifecycle::PublicRequestPassThrough {
            route: public_route(route),
            reason: log_reason(reason),
            fingerprint: fingerprint.as_deref(),
        }
        .emit();
    }

    fn log_worker_failure(
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
        if let Ok(mut limiter) = self.failures.lock() {
            limiter.emit(Instant::now(), &event);
        }
    }

    fn log_worker_communication(&self, fingerprint: Fingerprint, worker: Id, reason: &'static str) {
        let fingerprint = fingerprint.to_hex();
        let event = relay_logging::ProviderFailure::WorkerCommunicationFailed {
            fingerprint: &fingerprint,
            worker_id: worker.as_uuid(),
            reason,
        };
        if let Ok(mut limiter) = self.failures.lock() {
            limiter.emit(Instant::now(), &event);
        }
    }

    fn log_upstream_failure(&self, route: &'static str, failure: &UpstreamError) {
        let event = relay_logging::ProviderFailure::UpstreamRequestFailed {
            route: public_route(route),
            fingerprint: None,
            reason: failure.reason(),
        };
        if let Ok(mut limiter) = self.failures.lock() {
            limiter.emit(Instant::now(), &event);
        }
    }
}

impl Handler for Front {
    async fn handle(
        self: Arc<Self>,
        req: Request<Incoming>,
        conn: ConnContext,
    ) -> Response<ResponseBody> {
        let started = Instant::now();
        let metrics = self.metrics.clone();
        let (res, label, destination) = self.route(req, conn).await;
        metrics.record_request(label, destination, res.status().as_u16());
        // Time inside relayd: all of it but the wait for the provider's or worker's head.
        let waited = res
            .extensions()
            .get::<UpstreamWait>()
            .map_or(Duration::ZERO, |w| w.0);
        metrics.record_overhead(started.elapsed().saturating_sub(waited));
        res
    }
}

fn public_route(route: &str) -> relay_logging::PublicRoute {
    match route {
        "hook" => relay_logging::PublicRoute::Hook,
        "anthropic" => relay_logging::PublicRoute::Anthropic,
        _ => relay_logging::PublicRoute::Openai,
    }
}

fn log_reason(reason: PassThroughReason) -> relay_logging::PassThroughReason {
    use relay_logging::PassThroughReason as L;
    match reason {
        PassThroughReason::MissingCredential => L::MissingCredential,
        PassThroughReason::UnboundCredential => L::UnboundCredential,
        PassThroughReason::NoLiveSession => L::NoLiveSession,
        PassThroughReason::WorkerUnavailable => L::WorkerUnavailable,
        PassThroughReason::ConfiguredPassThrough => L::ConfiguredPassThrough,
        PassThroughReason::WorkerConnectFailed => L::WorkerConnectFailed,
    }
}

fn route_label(route: Route) -> RouteLabel {
    match route {
        Route::Model {
            family: ModelFamily::Fixed(Family::Anthropic),
            ..
        } => RouteLabel::Anthropic,
        Route::Model { .. } => RouteLabel::Openai,
        Route::Hook(_) => RouteLabel::Hook,
        Route::ControlMcp | Route::ControlWorker => RouteLabel::Control,
        Route::HeadRoot
        | Route::Healthz
        | Route::Workers
        | Route::WorkersStatus
        | Route::WorkerStatus(_)
        | Route::RouteStatus
        | Route::Metrics => RouteLabel::Status,
        Route::MethodNotAllowed | Route::NotFound => RouteLabel::Other,
    }
}

/// How a call to a worker ended.
enum WorkerResult {
    Answered(Response<Incoming>),
    /// Nothing reached the worker; the request comes back unsent.
    NotSent(Request<RequestBody>, ProbeOutcome),
    Failed(Response<ResponseBody>),
}

/// How long a request waited for its provider's or worker's response head, carried in
/// the response's extensions so the overhead metric can leave it out (§3.1).
#[derive(Debug, Clone, Copy)]
struct UpstreamWait(Duration);

/// The daemon's backstop toward a worker beyond the worker's own response timeout (§3.3).
const WORKER_BACKSTOP: Duration = Duration::from_secs(5);

/// The route credential as §3.5 classifies it.
#[derive(Debug)]
enum Credential {
    Missing,
    /// Malformed or present twice.
    Invalid,
    Token(RouteToken),
}

fn parse_credential(headers: &HeaderMap) -> Credential {
    match headers::credential_header(headers) {
        CredentialHeader::Missing => Credential::Missing,
        CredentialHeader::Duplicated => Credential::Invalid,
        CredentialHeader::Present(value) => match value.to_str().ok().map(RouteToken::parse) {
            Some(Ok(token)) => Credential::Token(token),
            _ => Credential::Invalid,
        },
    }
}

/// Reads a whole body of at most `limit` bytes, or answers 413.
async fn read_limited(
    headers: &HeaderMap,
    body: Incoming,
    limit: u64,
) -> Result<Bytes, Response<ResponseBody>> {
    if content_length(headers).is_some_and(|len| len > limit) {
        return Err(payload_too_large(limit));
    }
    let limited = http_body_util::Limited::new(body, usize::try_from(limit).unwrap_or(usize::MAX));
    match limited.collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e)
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            Err(payload_too_large(limit))
        }
        Err(_) => Err(error(
            StatusCode::BAD_REQUEST,
            ErrorKind::RelayBadRequest,
            "the request body could not be read",
        )),
    }
}

/// The `hook_event_name` of a hook body, `Some(None)` for an object without one, and `None`
/// when the body is not a JSON object.
fn hook_event(body: &[u8]) -> Option<Option<&str>> {
    #[derive(serde::Deserialize)]
    struct Head<'a> {
        #[serde(borrow, default)]
        hook_event_name: Option<&'a str>,
    }
    // serde accepts an array for a struct; only an object is a hook payload.
    let object = body
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|b| *b == b'{');
    if !object {
        return None;
    }
    // A name with escapes cannot be borrowed; it is then no event Relay waits for.
    match serde_json::from_slice::<Head<'_>>(body) {
        Ok(head) => Some(head.hook_event_name),
        Err(e) if e.is_data() => serde_json::from_slice::<serde::de::IgnoredAny>(body)
            .is_ok()
            .then_some(None),
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests;

/// [`hook_event`] for the fuzz targets in `crates/relay-fuzz`; not part of the API.
#[doc(hidden)]
pub fn fuzz_hook_event(body: &[u8]) -> Option<Option<&str>> {
    hook_event(body)
}
