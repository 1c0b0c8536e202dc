//! The worker's request handler (SPEC §5.5, §3.2–§3.4, §3.7, §7.2).
//!
//! Order on every request: the generation secret (401 before anything else, before the
//! body is read), then the route, then the worker's state (503 while starting, while
//! control is lost, and for model requests while draining), then the request itself.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use relay_proto::ErrorKind;

use super::identity::WorkerIdentity;
use super::plugins::{HookOutcome, ModelStage, PluginHost};
use super::state::{RequestKind, WorkerState};
use crate::answers::{
    content_length, error, framing_refusal, json, payload_too_large, relay_response, retry_later,
    upstream_error,
};
use crate::body::{BodyError, ClientBody, RequestBody, ResponseBody};
use crate::config::{Config, DaemonConfig, TimersConfig};
use crate::forward::{Checked, Prologue, method_not_allowed, provider_request};
use crate::headers::{ModelHeaders, WORKER_REFUSED, WORKER_SECRET, WORKER_UPSTREAM_FAILED};
use crate::routes::{Agent, ModelFamily, PathClass};
use crate::server::{ConnContext, Handler, Next, PeerLimit, ServeOptions};
use crate::upstream::UpstreamClient;

/// The readiness probe the daemon sends over the pinned connection (§5.5).
pub const READY_PATH: &str = "/_relay/worker/v1/ready";

/// Body limits and the stream idle time. A worker reads no `[daemon]` table, so these are
/// the daemon's defaults (§3.6, §3.3); tests shorten them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerLimits {
    /// Model request bodies (32 MiB).
    pub max_request_body_bytes: u64,
    /// Hook bodies (1 MiB).
    pub max_hook_body_bytes: u64,
    /// A stream with no byte for this long is aborted on both sides (600 s).
    pub stream_idle: Duration,
}

impl Default for WorkerLimits {
    fn default() -> Self {
        let daemon = DaemonConfig::default();
        WorkerLimits {
            max_request_body_bytes: daemon.max_request_body_bytes,
            max_hook_body_bytes: daemon.max_hook_body_bytes,
            stream_idle: daemon.stream_idle_secs.get(),
        }
    }
}

/// How the worker's listener is served: TLS with the generation's identity, and limits
/// sized for its one legitimate client, the daemon (which opens one connection per request
/// in flight, at most `max_requests_per_identity`, 256 by default, plus probes and idle
/// pooled ones): 2,048 connections, at most 1,536 from one address (loopback included, since a
/// remote worker's daemon is one address and an attacker on the network another), a 2 s
/// TLS handshake and a 5 s header timeout, and at most 1,024 connections without a request
/// that carried the secret, the oldest closed for each one more, so that another user who
/// shares 127.0.0.1 with the daemon cannot fill the per-address cap and lock it out.
/// `drain_timeout` is how long accepted requests may run on once the serve future's
/// shutdown resolves.
pub fn serve_options(identity: &WorkerIdentity, drain_timeout: Duration) -> ServeOptions {
    let daemon = DaemonConfig::default();
    ServeOptions {
        // The daemon opens one connection per request in flight: room for the 1,000 open
        // streams through one worker that the performance targets ask for.
        max_connections: 2048,
        // Half the daemon's: 5 s by default.
        header_read_timeout: TimersConfig::default().header_read_timeout_secs.get() / 2,
        keepalive_idle: daemon.keepalive_idle_secs.get(),
        write_stall: daemon.stream_idle_secs.get(),
        drain_timeout,
        tls: Some(identity.server_config()),
        handshake_timeout: Duration::from_secs(2),
        per_peer: PeerLimit {
            max: 1536,
            loopback: true,
        },
        // Room for the daemon opening a connection for each of 1,000 streams at once,
        // before their first requests vouch for them; an attacker holding this many leaves
        // the daemon 512 of the per-address cap, and each new connection of the daemon's
        // closes the oldest of the attacker's.
        unvouched: Some(1024),
        hold_port: true,
    }
}

/// Serves the daemon's requests to this worker.
#[derive(Debug)]
pub struct WorkerHandler {
    state: Arc<WorkerState>,
    config: Arc<Config>,
    upstream: UpstreamClient,
    limits: WorkerLimits,
    /// Installed once, before the worker reports `Ready` (no request is served before).
    plugins: OnceLock<PluginHost>,
}

impl WorkerHandler {
    /// `config` is the worker's own (its `[upstream]` decides where model requests go);
    /// `upstream` is built from the same `[upstream]` table (connect and response-head
    /// timeouts, egress proxy).
    pub fn new(
        state: Arc<WorkerState>,
        config: Arc<Config>,
        upstream: UpstreamClient,
        limits: WorkerLimits,
    ) -> WorkerHandler {
        WorkerHandler {
            state,
            config,
            upstream,
            limits,
            plugins: OnceLock::new(),
        }
    }

    /// Runs this generation's plugins on every request from now on; a second call is
    /// ignored (a generation's plugins never change).
    pub fn install_plugins(&self, plugins: PluginHost) {
        if self.plugins.set(plugins).is_err() {
            tracing::warn!(
                event = "plugins_already_installed",
                "plugins were already installed for this generation"
            );
        }
    }

    /// The worker is about to cut off what is still in flight at its drain deadline: the
    /// plugins record those exchanges as cut, not as abandoned by their clients.
    pub fn cut_off_in_flight(&self) {
        if let Some(plugins) = self.plugins.get() {
            plugins.cut_off();
        }
    }

    /// The plugins, when any component acts on traffic.
    fn active_plugins(&self) -> Option<&PluginHost> {
        self.plugins.get().filter(|p| p.is_active())
    }

    pub fn state(&self) -> &Arc<WorkerState> {
        &self.state
    }

    /// The checks every request passes, and the answers that need nothing awaited; a model
    /// or hook request comes back as the boxed future that forwards it.
    fn dispatch(
        self: Arc<Self>,
        req: Request<ClientBody>,
        conn: ConnContext,
    ) -> Next<
        Response<ResponseBody>,
        impl Future<Output = Response<ResponseBody>> + Send,
        impl Future<Output = Response<ResponseBody>> + Send,
    > {
        // Taken for every request so the connection's verdicts stay in step with its heads.
        let verdict = conn.state.take_verdict();
        if !self.is_authorized(req.headers()) {
            tracing::debug!(peer = %conn.peer, "worker request without the generation secret");
            return Next::answered(unauthorized());
        }
        conn.state.vouch();
        if let Some(refused) = framing_refusal(verdict) {
            return Next::answered(refused);
        }
        if req.uri().path() == READY_PATH {
            return Next::answered(if req.method() == Method::GET {
                self.ready()
            } else {
                method_not_allowed("GET")
            });
        }
        match PathClass::classify(req.method(), req.uri().path()) {
            PathClass::Model { family, responses } => {
                Next::Model(crate::boxed(|| self.model(req, family, responses)))
            }
            PathClass::Hook(agent) => Next::Hook(crate::boxed(|| self.hook(req, agent))),
            PathClass::MethodNotAllowed { allow } => Next::answered(method_not_allowed(allow)),
            // The daemon's own status, control and probe routes do not exist here.
            _ => Next::answered(error(
                StatusCode::NOT_FOUND,
                ErrorKind::RelayNotFound,
                "not found",
            )),
        }
    }

    /// Exactly one `x-relay-worker-secret`, equal to the current secret.
    fn is_authorized(&self, headers: &HeaderMap) -> bool {
        let mut values = headers.get_all(WORKER_SECRET).iter();
        match (values.next(), values.next()) {
            (Some(value), None) => self.state.is_authorized(value.as_bytes()),
            _ => false,
        }
    }

    fn ready(&self) -> Response<ResponseBody> {
        if self.state.is_ready() {
            json(&serde_json::json!({ "ready": true }))
        } else {
            unavailable()
        }
    }

    async fn model(
        self: Arc<Self>,
        req: Request<ClientBody>,
        family: ModelFamily,
        responses: bool,
    ) -> Response<ResponseBody> {
        let prologue = self.prologue();
        let found = ModelHeaders::read(req.headers());
        if let Err(refused) = prologue.shape(&req, &found, responses) {
            return refused.answer();
        }
        // The worker's state is checked between the shape and the request (see the order
        // at the top of this file).
        let Some(in_flight) = self.state.admit(RequestKind::Model) else {
            return unavailable();
        };
        let checked = match prologue.target(&req, &found, family) {
            Ok(target) => prologue.checked(req, target),
            Err(refused) => return refused.answer(),
        };
        let (checked, exchange) = if let Some(plugins) = self.active_plugins() {
            match plugins
                .model_request(checked, self.limits.max_request_body_bytes)
                .await
            {
                ModelStage::Forward(checked, exchange) => (checked, exchange),
                ModelStage::Answer(res) => return res,
            }
        } else {
            (checked, None)
        };
        let Checked {
            parts,
            body,
            target,
        } = checked;
        let idle = self.limits.stream_idle;
        let upstream_req = provider_request(parts, body, target.uri);
        match self.upstream.send(upstream_req).await {
            Ok(res) => {
                let mut res = relay_response(
                    res,
                    family == ModelFamily::Models,
                    idle,
                    Box::new(in_flight),
                );
                if let Some(exchange) = exchange {
                    exchange.watch(&mut res);
                }
                res
            }
            Err(failure) => {
                tracing::debug!(reason = failure.reason(), "worker upstream request failed");
                let mut res = upstream_error(&failure);
                // The daemon logs a provider failure; the client's own are not marked.
                if failure.is_provider_failure() {
                    res.headers_mut().insert(
                        WORKER_UPSTREAM_FAILED,
                        HeaderValue::from_static(failure.reason()),
                    );
                }
                if let Some(exchange) = exchange {
                    exchange.failed(res.status());
                }
                res
            }
        }
    }

    /// The model-request rules of this worker: its own `[upstream]`, the daemon's limits,
    /// no media-type check (the daemon made it).
    fn prologue(&self) -> Prologue<'_> {
        Prologue {
            upstream: &self.config.upstream,
            max_body_bytes: self.limits.max_request_body_bytes,
            stream_idle: self.limits.stream_idle,
            require_json: false,
        }
    }

    async fn hook(
        self: Arc<Self>,
        req: Request<ClientBody>,
        agent: Agent,
    ) -> Response<ResponseBody> {
        let Some(_in_flight) = self.state.admit(RequestKind::Hook) else {
            return unavailable();
        };
        let limit = self.limits.max_hook_body_bytes;
        if content_length(req.headers()).is_some_and(|len| len > limit) {
            return payload_too_large(limit);
        }
        let body = RequestBody::streaming(req.into_body(), limit, self.limits.stream_idle);
        let bytes = match body.collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(BodyError::TooLarge { limit }) => return payload_too_large(limit),
            Err(_) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    ErrorKind::RelayBadRequest,
                    "the request body could not be read",
                );
            }
        };
        let payload = match relay_plugins::parse_value(&bytes) {
            Some(payload @ serde_json::Value::Object(_)) => payload,
            _ => {
                return error(
                    StatusCode::BAD_REQUEST,
                    ErrorKind::RelayBadRequest,
                    "a hook body must be a JSON object",
                );
            }
        };
        if let Some(plugins) = self.active_plugins() {
            match plugins.hook(agent.plugin_agent(), payload) {
                HookOutcome::Deny(res) => return res,
                HookOutcome::Allow { flush: Some(flush) } => flush.await,
                HookOutcome::Allow { flush: None } => {}
            }
        }
        let mut res = Response::new(ResponseBody::full(Bytes::from_static(allow_answer(agent))));
        res.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        res
    }
}

impl Handler for WorkerHandler {
    fn handle(
        self: Arc<Self>,
        req: Request<ClientBody>,
        conn: ConnContext,
    ) -> impl Future<Output = Response<ResponseBody>> + Send + 'static {
        let next = self.dispatch(req, conn);
        async move {
            match next {
                Next::Answered(res) => *res,
                Next::Model(model) => model.await,
                Next::Hook(hook) => hook.await,
            }
        }
    }
}

/// The answer that lets a hook event proceed (§7.2). It equals the pass-through answer of
/// §3.4 today, but it is a different rule: Claude Code gets `{"continue":true}` and never
/// `permissionDecision: allow`, which would bypass the user's own permission prompts.
fn allow_answer(agent: Agent) -> &'static [u8] {
    match agent {
        Agent::ClaudeCode => br#"{"continue":true}"#,
        // Codex refuses unknown fields in hook output; pi expects an object.
        Agent::Codex | Agent::Pi => b"{}",
    }
}

fn unauthorized() -> Response<ResponseBody> {
    let mut res = error(
        StatusCode::UNAUTHORIZED,
        ErrorKind::RelayUnauthorized,
        "a valid x-relay-worker-secret is required",
    );
    res.headers_mut()
        .insert(WORKER_REFUSED, HeaderValue::from_static("secret"));
    res
}

/// 503 with `Retry-After: 1` (§3.5: every 503 carries one), marked as the worker's own
/// refusal: the daemon, whose routing raced the worker's drain or loss of control, answers
/// it as a worker that failed before answering, since nothing reached the provider but the
/// request's body is spent.
fn unavailable() -> Response<ResponseBody> {
    let mut res = retry_later(
        StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::RelayWorkerUnavailable,
        "the worker is not accepting this request now",
        1,
    );
    res.headers_mut()
        .insert(WORKER_REFUSED, HeaderValue::from_static("unavailable"));
    res
}

#[cfg(test)]
mod tests;
