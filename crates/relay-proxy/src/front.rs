//! The daemon's public HTTP front (SPEC §3): status endpoints, model and hook routes,
//! the credential table of §3.5, the bad-input rules of §3.6 and the failure answers of
//! §3.7. Everything a request must pass is checked here, in one order, before a byte goes
//! anywhere.
//!
//! This file holds the front's options and the dispatch with the checks every path
//! shares (framing, Host, Origin); each subsystem has its own module: `status` (the
//! status endpoints), `credential` (the credential table), `model` and `hook` (the two
//! forwarded routes), `to_worker` (one call to a worker) and `logs`.

mod credential;
mod hook;
mod logs;
mod model;
mod status;
mod to_worker;

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode};
use relay_proto::{ErrorKind, Role};
use uuid::Uuid;

use crate::answers::{error, framing_refusal, no_store, not_found, relay_response};
use crate::body::{ClientBody, ResponseBody};
use crate::config::Config;
use crate::control::daemon::ControlPlane;
use crate::forward::method_not_allowed;
use crate::headers::decimal;
use crate::metrics::{Destination, Metrics, RouteLabel};
use crate::routes::{Family, ModelFamily, PathClass};
use crate::server::{ConnContext, Handler, MAX_REQUEST_HEADERS, Next};
use crate::shell::{Shell, TicketGuard};
use crate::upstream::{UpstreamBody, UpstreamClient};
use logs::{BrokeOff, FailureLog, Relayed};

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

impl Advertised {
    /// `scheme://host:port`, the port always written.
    pub fn origin(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}:{}", self.host, self.port)
    }
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
    failures: Arc<FailureLog>,
    /// The broker's shell and the control plane; absent in front-only tests, where no
    /// credential is ever bound.
    shell: Option<Arc<Shell>>,
    control: Option<Arc<ControlPlane>>,
    /// The bytes of hook bodies buffered at once across the daemon.
    hook_buffer: hook::HookBuffer,
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
            failures: Arc::new(std::sync::Mutex::new(relay_logging::RateLimiter::new(
                std::time::Duration::from_secs(10),
            ))),
            shell: None,
            control: None,
            hook_buffer: hook::HookBuffer::new(hook::DEFAULT_HOOK_BUFFER_BYTES),
        }
    }

    /// Sets how many bytes of hook bodies the daemon buffers at once (16 MiB by default);
    /// beyond it a hook waits up to a second for room, then gets 429.
    pub fn with_hook_buffer_bytes(mut self, bytes: u64) -> Front {
        self.hook_buffer = hook::HookBuffer::new(bytes);
        self
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

    /// Everything a request gets before a byte of it goes anywhere: the checks every path
    /// shares, the answers of the status endpoints and the upgrade of control connections.
    /// A model or hook request comes back as the boxed future that forwards it.
    fn dispatch(
        self: Arc<Self>,
        mut req: Request<ClientBody>,
        conn: ConnContext,
    ) -> Next<Answer, impl Future<Output = Answer> + Send, impl Future<Output = Answer> + Send>
    {
        let route = PathClass::classify(req.method(), req.uri().path());
        let label = route_label(route);
        let local = |res| Next::answered(Answer::new(res, label, Destination::Local));
        if let Some(refused) = framing_refusal(conn.state.take_verdict()) {
            return local(refused);
        }
        // hyper counts header lines only in HTTP/1.
        if req.headers().len() > MAX_REQUEST_HEADERS {
            return local(error(
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                ErrorKind::RelayBadRequest,
                &format!("a request may carry at most {MAX_REQUEST_HEADERS} header lines"),
            ));
        }
        // Every hop after this one is HTTP/1.1, or may be. Joined once the lines are
        // counted, so a split cookie list counts as the lines it came in.
        if req.version() == http::Version::HTTP_2 {
            crate::headers::join_cookies(req.headers_mut());
        }
        if let Some(refused) = self.host_refusal(&req, &conn) {
            return local(refused);
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
            PathClass::HeadRoot => local(no_store(Response::new(ResponseBody::empty()))),
            PathClass::Healthz => local(self.health()),
            PathClass::Workers
            | PathClass::WorkersStatus
            | PathClass::WorkerStatus(_)
            | PathClass::Metrics => local(self.workers_or_metrics(
                route,
                conn.peer.ip(),
                req.headers().get_all(header::ACCEPT),
            )),
            PathClass::RouteStatus => local(self.route_status(req.headers())),
            PathClass::ControlMcp | PathClass::ControlWorker => match &self.control {
                Some(control) => {
                    let role = if route == PathClass::ControlMcp {
                        Role::Mcp
                    } else {
                        Role::Worker
                    };
                    local(control.upgrade(req, role, conn.peer))
                }
                None => local(not_found()),
            },
            PathClass::Model { family, responses } => {
                Next::Model(crate::boxed(|| self.model(req, conn, family, responses)))
            }
            PathClass::Hook(agent) => {
                Next::Hook(crate::boxed(|| self.hook(req, agent, conn.peer.ip())))
            }
            PathClass::MethodNotAllowed { allow } => local(method_not_allowed(allow)),
            PathClass::NotFound => local(not_found()),
        }
    }

    /// §3.6: the advertised host from anyone, loopback names with the listening port from
    /// loopback peers only (421 otherwise); and one `Host` at most (400), since another
    /// reader could take the other one.
    fn host_refusal<B>(
        &self,
        req: &Request<B>,
        conn: &ConnContext,
    ) -> Option<Response<ResponseBody>> {
        let mut hosts = req.headers().get_all(header::HOST).iter();
        let host = hosts.next();
        if hosts.next().is_some() {
            return Some(error(
                StatusCode::BAD_REQUEST,
                ErrorKind::RelayBadRequest,
                "a request may carry one Host header",
            ));
        }
        (!self.is_host_allowed(req, host, conn)).then(|| {
            error(
                StatusCode::MISDIRECTED_REQUEST,
                ErrorKind::RelayMisdirectedRequest,
                "this host name is not served here",
            )
        })
    }

    /// Every name the request gives its server must be one served here: the authority of
    /// its target (HTTP/2's `:authority`, or an absolute-form HTTP/1 target, whose scheme
    /// must be `http` or `https`) and its `Host` header, each when present, and at least
    /// one of them. A `Host` that disagrees with the target's authority cannot name a host
    /// this front would refuse.
    fn is_host_allowed<B>(
        &self,
        req: &Request<B>,
        host: Option<&HeaderValue>,
        conn: &ConnContext,
    ) -> bool {
        let uri = req.uri();
        if uri
            .scheme()
            .is_some_and(|s| *s != http::uri::Scheme::HTTP && *s != http::uri::Scheme::HTTPS)
        {
            return false;
        }
        let target = uri.authority().map(|a| a.as_str());
        let header = match host.map(HeaderValue::to_str) {
            Some(Ok(text)) => Some(text),
            Some(Err(_)) => return false,
            None => None,
        };
        match (target, header) {
            (None, None) => false,
            (Some(one), None) | (None, Some(one)) => self.serves(one, conn),
            (Some(target), Some(header)) => self.serves(target, conn) && self.serves(header, conn),
        }
    }

    /// Whether `authority` (`host[:port]`) names this front: the advertised host from
    /// anyone, loopback names with the listening port from loopback peers.
    fn serves(&self, authority: &str, conn: &ConnContext) -> bool {
        // Compared without case and without copying: this runs for every request.
        let (host, port) = match authority.rsplit_once(':') {
            Some((host, port)) => match decimal(port.as_bytes()).map(u16::try_from) {
                Some(Ok(port)) => (host, Some(port)),
                _ => return false,
            },
            None => (authority, None),
        };
        let advertised = &self.options.advertised;
        let default_port = if advertised.https { 443 } else { 80 };
        if host.eq_ignore_ascii_case(&advertised.host)
            && (port == Some(advertised.port)
                || (port.is_none() && advertised.port == default_port))
        {
            return true;
        }
        conn.peer.ip().is_loopback()
            && (host == "127.0.0.1" || host.eq_ignore_ascii_case("localhost"))
            && port == Some(self.options.port)
    }

    /// A provider's or worker's answer on its way to the client: counted as an open stream,
    /// and holding the broker's ticket, when the request has one, until its body ends; a
    /// provider's answer whose body breaks off is logged with `broke_off`.
    /// Always inlined: out of line, the response moved in and the answer moved out cost each
    /// request about 200 instructions of copying (callgrind), and LLVM does not inline it.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn relayed(
        &self,
        res: Response<UpstreamBody>,
        waited: Duration,
        label: RouteLabel,
        destination: Destination,
        models: bool,
        ticket: Option<TicketGuard>,
        broke_off: BrokeOff,
    ) -> Answer {
        let idle = self.config().daemon.stream_idle_secs.get();
        let guard = Box::new(Relayed {
            _open: self.metrics.open_stream(),
            _ticket: ticket,
            broke_off: Some(broke_off),
        });
        Answer::new(relay_response(res, models, idle, guard), label, destination).waited(waited)
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
}

impl Handler for Front {
    fn handle(
        self: Arc<Self>,
        req: Request<ClientBody>,
        conn: ConnContext,
    ) -> impl Future<Output = Response<ResponseBody>> + Send + 'static {
        let started = Instant::now();
        let metrics = self.metrics.clone();
        let next = self.dispatch(req, conn);
        async move {
            let answer = match next {
                Next::Answered(answer) => *answer,
                Next::Model(model) => model.await,
                Next::Hook(hook) => hook.await,
            };
            metrics.record_request(
                answer.label,
                answer.destination,
                answer.res.status().as_u16(),
            );
            // Time inside relayd: all of it but the wait for the provider's or worker's head.
            metrics.record_overhead(started.elapsed().saturating_sub(answer.waited));
            answer.res
        }
    }
}

/// A request's answer, with what the request metrics record of it.
struct Answer {
    res: Response<ResponseBody>,
    label: RouteLabel,
    destination: Destination,
    /// How long the request waited for its provider's or worker's response head, which the
    /// overhead metric leaves out (§3.1).
    waited: Duration,
}

impl Answer {
    fn new(res: Response<ResponseBody>, label: RouteLabel, destination: Destination) -> Answer {
        Answer {
            res,
            label,
            destination,
            waited: Duration::ZERO,
        }
    }

    fn waited(self, waited: Duration) -> Answer {
        Answer { waited, ..self }
    }
}

fn route_label(route: PathClass) -> RouteLabel {
    match route {
        PathClass::Model {
            family: ModelFamily::Fixed(Family::Anthropic),
            ..
        } => RouteLabel::Anthropic,
        PathClass::Model { .. } => RouteLabel::Openai,
        PathClass::Hook(_) => RouteLabel::Hook,
        PathClass::ControlMcp | PathClass::ControlWorker => RouteLabel::Control,
        PathClass::HeadRoot
        | PathClass::Healthz
        | PathClass::Workers
        | PathClass::WorkersStatus
        | PathClass::WorkerStatus(_)
        | PathClass::RouteStatus
        | PathClass::Metrics => RouteLabel::Status,
        PathClass::MethodNotAllowed { .. } | PathClass::NotFound => RouteLabel::Other,
    }
}

#[cfg(test)]
mod tests;

/// The hook module's `hook_event`, for the fuzz targets in `crates/relay-fuzz`; not part of
/// the API.
#[doc(hidden)]
pub fn fuzz_hook_event(body: &[u8]) -> Option<Option<&str>> {
    hook::hook_event(body)
}
