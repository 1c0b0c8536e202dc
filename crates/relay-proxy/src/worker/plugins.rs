//! The worker's plugin host (SPEC §7.2, §8.1, §8.2, §3.3): one seam before a model request
//! is forwarded (policy, then redaction) and one tap on its response body, plus the hook
//! decision. The rules themselves are `relay_plugins`' (pure); the records leave through an
//! [`Observer`], which the `relay-worker` shell implements with the sinks, so this crate
//! never links an exporter.
//!
//! With no enabled component the host is inactive: requests are streamed through as before,
//! with no body buffering and no tap.

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{HeaderMap, Method, Response, StatusCode};
use http_body_util::BodyExt;
use relay_plugins::atof::{
    self, HookEvent, ModelRequestEnd, ModelRequestStart, Observation, PolicyDecision, PolicyTarget,
    RequestId, UsageFacts,
};
use relay_plugins::policy::{Action, Mode, Route};
use relay_plugins::{
    Agent, BodyKind, Decision, Policy, PriceTable, Redactor, RequestFacts, UsageReport, UsageTap,
    WireFormat,
};
use relay_proto::{ErrorBody, ErrorKind};

use crate::answers::{error, json, payload_too_large, too_large_once_decoded};
use crate::body::{BodyEnd, BodyError, BodyTap, RequestBody, ResponseBody};
use crate::config::WorkerConfig;
use crate::forward::Checked;
use crate::headers;
use crate::routes::Family;

/// Where the host's observations go. Implementations queue and return at once: `observe`
/// runs on the request path.
pub trait Observer: Send + Sync + 'static {
    /// Queues one observation made at `at`; never waits, may drop (and count) when full.
    fn observe(&self, at: SystemTime, observation: Observation);

    /// Resolves once every observation queued before has been recorded and written by the
    /// sinks, or when `deadline` has passed.
    fn flush(&self, deadline: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>>;
}

/// How long a terminal hook waits for its records (§7.2).
pub const TERMINAL_FLUSH: Duration = Duration::from_secs(2);

/// The enabled components of one worker generation, ready to apply.
#[derive(Default)]
pub struct PluginHost {
    policy: Option<Policy>,
    /// Rewrites outbound request bodies (only with `redact_requests = true`).
    request_redactor: Option<Arc<Redactor>>,
    observer: Option<Arc<dyn Observer>>,
    capture_content: bool,
    prices: Arc<PriceTable>,
    capture: Arc<CaptureBudget>,
    next_request: AtomicU64,
    /// Set when the worker cuts off what is still in flight at its drain deadline, so an
    /// exchange that ends then is not recorded as its client's going away.
    cut_off: Arc<AtomicBool>,
}

impl std::fmt::Debug for PluginHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginHost")
            .field("policy", &self.policy.is_some())
            .field("redacts_requests", &self.request_redactor.is_some())
            .field("observes", &self.observer.is_some())
            .finish_non_exhaustive()
    }
}

/// The side-copy bounds of §3.3: per stream, and across the worker.
#[derive(Debug, Default)]
struct CaptureBudget {
    per_stream: usize,
    total: usize,
    in_use: AtomicUsize,
}

impl CaptureBudget {
    fn reserve(&self, bytes: usize) -> bool {
        let before = self.in_use.fetch_add(bytes, Ordering::Relaxed);
        if before.saturating_add(bytes) > self.total {
            self.in_use.fetch_sub(bytes, Ordering::Relaxed);
            return false;
        }
        true
    }

    fn release(&self, bytes: usize) {
        self.in_use.fetch_sub(bytes, Ordering::Relaxed);
    }
}

/// The redactors of one generation. Both use the generation's hashing key, so a value hashes
/// alike in records and in request bodies.
#[derive(Debug, Clone, Default)]
pub struct Redactors {
    /// For records: the `pii_redaction` component's detectors and, whatever it lists, the
    /// credential ones ([`relay_plugins::Detector::CREDENTIALS`]), since records never hold
    /// a credential; with no component but `capture_content` on, every built-in detector
    /// with `redact`.
    pub records: Option<Arc<Redactor>>,
    /// For request bodies, when the component asks (`redact_requests`): its detectors as
    /// it lists them.
    pub requests: Option<Arc<Redactor>>,
}

/// The redactors a generation uses; `key` is its hashing key.
pub fn generation_redactors(plugins: &relay_plugins::Plugins, key: &[u8]) -> Redactors {
    let Some(config) = plugins.redaction() else {
        let captures = plugins.observability().is_some_and(|o| o.capture_content);
        return Redactors {
            records: captures.then(|| Arc::new(Redactor::new(&Default::default(), key))),
            requests: None,
        };
    };
    let for_records = config.for_records();
    let requests = config
        .redact_requests
        .then(|| Arc::new(Redactor::new(config, key)));
    let records = match &requests {
        // One redactor when both lists are the same.
        Some(shared) if for_records.detectors == config.detectors => shared.clone(),
        _ => Arc::new(Redactor::new(&for_records, key)),
    };
    Redactors {
        records: Some(records),
        requests,
    }
}

impl PluginHost {
    /// The host of `plugins`. `request_redactor` is [`generation_redactors`]'s `requests`;
    /// `observer` is where records go when an observability component is enabled.
    pub fn new(
        plugins: &relay_plugins::Plugins,
        request_redactor: Option<Arc<Redactor>>,
        observer: Option<Arc<dyn Observer>>,
        worker: &WorkerConfig,
    ) -> PluginHost {
        let observability = plugins.observability();
        let to_usize = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        PluginHost {
            policy: plugins.policy().cloned().map(Policy::new),
            request_redactor,
            observer: observability.and(observer),
            capture_content: observability.is_some_and(|o| o.capture_content),
            prices: Arc::new(observability.map(|o| o.prices.clone()).unwrap_or_default()),
            capture: Arc::new(CaptureBudget {
                per_stream: to_usize(worker.observation_capture_bytes),
                total: to_usize(worker.observation_total_bytes),
                in_use: AtomicUsize::new(0),
            }),
            next_request: AtomicU64::new(1),
            cut_off: Arc::default(),
        }
    }

    /// The worker is about to cut off every request still in flight (its drain deadline
    /// passed): those that end from now on are recorded as cut, not as abandoned.
    pub fn cut_off(&self) {
        self.cut_off.store(true, Ordering::Relaxed);
    }

    /// Whether any component acts on traffic; an inactive host costs nothing.
    pub fn is_active(&self) -> bool {
        self.policy.is_some() || self.request_redactor.is_some() || self.observer.is_some()
    }

    /// The model-request seam: reads the body once when a component needs it, records the
    /// request's start, applies the policy (which may answer 403 itself) and then redaction
    /// (which may rewrite the body). `limit` is the request body limit.
    pub(crate) async fn model_request(&self, checked: Checked, limit: u64) -> ModelStage {
        let format = WireFormat::from_path(checked.parts.uri.path());
        // The handler calls this only for an active host.
        let (Some(format), true) = (format, checked.parts.method == Method::POST) else {
            return ModelStage::Forward(checked, None);
        };
        let Checked {
            mut parts,
            body,
            target,
        } = checked;
        let raw = match body.collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(BodyError::TooLarge { limit }) => {
                return ModelStage::Answer(payload_too_large(limit));
            }
            Err(_) => {
                return ModelStage::Answer(error(
                    StatusCode::BAD_REQUEST,
                    ErrorKind::RelayBadRequest,
                    "the request body could not be read",
                ));
            }
        };
        let encoding = headers::content_codings(&parts.headers).map(Cow::into_owned);
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        // A rule needs the body when it may block on the model or rewrites the body; records,
        // and a policy in dry run, do without it (their request facts stay empty, and a dry
        // run records what it would have decided on no model).
        let model_rules = self.policy.as_ref().is_some_and(Policy::has_model_rules);
        let rule_needs_body = self.request_redactor.is_some()
            || self
                .policy
                .as_ref()
                .is_some_and(Policy::enforces_model_rules);
        // Borrowed from `raw` unless it had to be decoded: an identity body is not copied.
        // `None`: it cannot be decoded whole (an unknown coding, a corrupt body, or more than
        // the limit once decoded), and no rule needs it, so it goes on as it came. The body
        // is whole here, so one that ends before its coding does is corrupt, not too large.
        let decoded: Option<Cow<'_, [u8]>> =
            match relay_plugins::decode(encoding.as_deref(), &raw, limit) {
                Ok(decoded) if !decoded.truncated => Some(decoded.body),
                _ if !rule_needs_body => None,
                Ok(decoded) if !decoded.ended_early => {
                    return ModelStage::Answer(too_large_once_decoded(limit as u64));
                }
                Ok(_) | Err(_) => {
                    return ModelStage::Answer(error(
                        StatusCode::UNSUPPORTED_MEDIA_TYPE,
                        ErrorKind::RelayUnsupportedEncoding,
                        "the request body's content-encoding cannot be decoded",
                    ));
                }
            };
        let request_bytes = decoded.as_ref().map_or(raw.len(), |body| body.len()) as u64;
        let decoded = decoded.as_deref().unwrap_or_default();
        let facts = RequestFacts::read(decoded);
        if facts.model_unclear
            && self
                .policy
                .as_ref()
                .is_some_and(Policy::enforces_model_rules)
        {
            // A provider's reader may take another model than the one a rule would judge.
            return ModelStage::Answer(error(
                StatusCode::BAD_REQUEST,
                ErrorKind::RelayBadRequest,
                "the request body does not name one model as text, so the policy cannot judge it",
            ));
        }
        let request_id = RequestId(self.next_request.fetch_add(1, Ordering::Relaxed));

        // Redaction first computes what would be sent; the record says how much it changed.
        let mut redactions = 0u64;
        let mut outbound: Option<Bytes> = None;
        if let Some(redactor) = &self.request_redactor {
            let redacted = redactor.redact_json_body(decoded);
            if !redacted.replaced.is_empty() {
                redactions = redacted.replaced.total() as u64;
                outbound = Some(Bytes::from(redacted.body.into_owned()));
            }
        }

        let observer = self.observer.clone();
        if let Some(observer) = &observer {
            let prompt = self
                .capture_content
                .then(|| relay_plugins::last_user_text(format, decoded))
                .flatten();
            observer.observe(
                SystemTime::now(),
                Observation::ModelRequestStart(ModelRequestStart {
                    request_id,
                    session_id: session_id(&parts.headers),
                    route: parts.uri.path().to_owned(),
                    model: facts.model.clone(),
                    stream: facts.stream,
                    request_bytes,
                    prompt,
                    request_redactions: redactions,
                    traceparent: parts
                        .headers
                        .get("traceparent")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned),
                    server: target.uri.host().map(|host| {
                        let default = if target.uri.scheme_str() == Some("http") {
                            80
                        } else {
                            443
                        };
                        (host.to_owned(), target.uri.port_u16().unwrap_or(default))
                    }),
                }),
            );
        }

        if let Some(policy) = &self.policy
            && model_rules
        {
            let route = match target.family {
                Family::Anthropic => Route::Anthropic,
                Family::OpenAi => Route::OpenAi,
            };
            let decision = policy.evaluate_model(route, facts.model.as_deref().unwrap_or(""));
            if decision.is_match()
                && let Some(observer) = &observer
            {
                let target = PolicyTarget::ModelRequest { request_id };
                observer.observe(SystemTime::now(), guardrail(&decision, target));
            }
            if decision.blocks() {
                return ModelStage::Answer(policy_rejected(decision.reason));
            }
        }

        let body = match outbound {
            Some(rewritten) => {
                // The rewritten body is sent decoded: it is what the provider receives.
                parts.headers.remove(header::CONTENT_ENCODING);
                rewritten
            }
            None => raw,
        };
        parts.headers.remove(header::TRANSFER_ENCODING);
        parts
            .headers
            .insert(header::CONTENT_LENGTH, HeaderValue::from(body.len() as u64));
        let exchange = observer.map(|observer| Exchange {
            observer,
            request_id,
            format,
            request_model: facts.model,
            prices: self.prices.clone(),
            capture: self.capture.clone(),
            cut_off: self.cut_off.clone(),
            started: Instant::now(),
            ended: false,
        });
        ModelStage::Forward(
            Checked {
                parts,
                body: RequestBody::full(body),
                target,
            },
            exchange,
        )
    }

    /// Decides and records one hook event. `event` is the payload's `hook_event_name`.
    pub(crate) fn hook(&self, agent: Agent, payload: serde_json::Value) -> HookOutcome {
        let event = payload
            .get("hook_event_name")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("")
            .to_owned();
        let terminal = is_terminal(agent, &event);
        let decision = self
            .policy
            .as_ref()
            .map(|p| p.evaluate_hook(agent, &event, &payload));
        if let Some(observer) = &self.observer {
            let hook = HookEvent::from_payload(agent, payload);
            let target = PolicyTarget::Hook {
                agent,
                session_id: hook.session_id.clone(),
                event: hook.event.clone(),
                tool_use_id: hook.tool_use_id.clone(),
            };
            let now = SystemTime::now();
            observer.observe(now, Observation::Hook(hook));
            if let Some(decision) = decision.filter(Decision::is_match) {
                observer.observe(now, guardrail(&decision, target));
            }
        }
        match decision {
            Some(decision) if decision.blocks() => {
                HookOutcome::Deny(policy_rejected(decision.reason))
            }
            _ => HookOutcome::Allow {
                flush: self
                    .observer
                    .as_ref()
                    .filter(|_| terminal)
                    .map(|o| o.flush(TERMINAL_FLUSH)),
            },
        }
    }
}

/// What the seam made of a model request.
#[expect(
    clippy::large_enum_variant,
    reason = "made once per request and matched at once; boxing would only add an allocation"
)]
pub(crate) enum ModelStage {
    /// Send it as it now is; the exchange, when records are kept, watches the response.
    Forward(Checked, Option<Exchange>),
    /// Answer it here (a policy rejection, an unreadable body); nothing is sent.
    Answer(Response<ResponseBody>),
}

/// What a hook event gets.
#[expect(
    clippy::large_enum_variant,
    reason = "made once per hook and matched at once; boxing would only add an allocation"
)]
pub(crate) enum HookOutcome {
    /// Let it proceed, after `flush` when it is a terminal event with records to write.
    Allow {
        flush: Option<Pin<Box<dyn Future<Output = ()> + Send + 'static>>>,
    },
    /// The 403 `relay_policy_rejected` answer.
    Deny(Response<ResponseBody>),
}

/// The events after which a harness may exit: their records are written before the answer.
fn is_terminal(agent: Agent, event: &str) -> bool {
    match agent {
        Agent::ClaudeCode | Agent::Codex => matches!(event, "Stop" | "SessionEnd"),
        Agent::Pi => event == "session_shutdown",
    }
}

/// The guardrail mark of one policy decision.
fn guardrail(decision: &Decision<'_>, target: PolicyTarget) -> Observation {
    Observation::PolicyDecision(PolicyDecision {
        target,
        rule: decision.rule.map(|n| n.to_string()),
        decision: match decision.action {
            Action::Allow => atof::Decision::Allow,
            Action::Deny => atof::Decision::Deny,
        },
        reason: decision.reason.map(str::to_owned),
        dry_run: decision.mode == Mode::DryRun,
    })
}

/// 403 `{"error":{"type":"relay_policy_rejected","message":…,"reason":…}}` (§7.2).
fn policy_rejected(reason: Option<&str>) -> Response<ResponseBody> {
    let reason = reason.unwrap_or("denied by policy");
    let mut body = ErrorBody::new(
        ErrorKind::RelayPolicyRejected,
        format!("blocked by the organisation's policy: {reason}"),
    );
    body.error.reason = Some(reason.to_owned());
    let mut res = json(&body);
    *res.status_mut() = StatusCode::FORBIDDEN;
    res
}

fn session_id(headers: &HeaderMap) -> Option<String> {
    atof::request_session_id(headers.iter().map(|(k, v)| (k.as_str(), v.as_bytes())))
        .map(str::to_owned)
}

/// One model exchange being recorded: its start is recorded, its end is recorded exactly
/// once, when the response body ends, fails or is dropped, or the provider cannot be reached.
pub(crate) struct Exchange {
    observer: Arc<dyn Observer>,
    request_id: RequestId,
    format: WireFormat,
    request_model: Option<String>,
    prices: Arc<PriceTable>,
    capture: Arc<CaptureBudget>,
    cut_off: Arc<AtomicBool>,
    started: Instant,
    ended: bool,
}

impl Exchange {
    /// Taps the response body; its end records the exchange's end.
    pub(crate) fn watch(self, res: &mut Response<ResponseBody>) {
        let status = res.status().as_u16();
        let kind = BodyKind::from_content_type(
            res.headers()
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok()),
        );
        let encoding = headers::content_codings(res.headers())
            .filter(|e| !e.trim().eq_ignore_ascii_case("identity"))
            .map(Cow::into_owned);
        let reader = match (&encoding, kind) {
            (None, BodyKind::EventStream) => Reader::Stream(Box::new(UsageTap::new(
                self.format,
                kind,
                self.capture.per_stream,
            ))),
            _ => Reader::Buffer {
                encoding,
                kind,
                bytes: Vec::new(),
                overflow: false,
            },
        };
        res.body_mut().set_tap(Box::new(Tap {
            exchange: self,
            status,
            first_byte: None,
            reader,
            reserved: 0,
        }));
    }

    /// The provider could not be reached: the harness got `status` from the worker.
    pub(crate) fn failed(mut self, status: StatusCode) {
        self.end(status.as_u16(), None, Usage::default());
    }

    fn end(&mut self, status: u16, ttfb: Option<Duration>, usage: Usage) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        self.observer.observe(
            SystemTime::now(),
            Observation::ModelRequestEnd(ModelRequestEnd {
                request_id: self.request_id,
                status,
                duration_ms: millis(self.started.elapsed()),
                time_to_first_byte_ms: ttfb.map(millis),
                usage: usage.facts,
                response_model: usage.response_model,
                response_id: usage.response_id,
                finish_reasons: usage.finish_reasons,
                truncated: usage.truncated,
                error: usage.error,
                response: None,
            }),
        );
    }
}

/// The error of an exchange the worker cut off at its drain deadline.
const CUT_AT_DRAIN_DEADLINE: &str = "drain_deadline_passed";

impl Drop for Exchange {
    /// A request abandoned before its response: 499 when the client went away, as proxies
    /// record a client that closed the request; 502 when the worker cut it off at its drain
    /// deadline, which is what relayd then answers its client.
    fn drop(&mut self) {
        if self.cut_off.load(Ordering::Relaxed) {
            let usage = Usage {
                truncated: true,
                error: Some(CUT_AT_DRAIN_DEADLINE.to_owned()),
                ..Usage::default()
            };
            self.end(502, None, usage);
        } else {
            self.end(499, None, Usage::default());
        }
    }
}

/// What the response said about its exchange.
#[derive(Default)]
struct Usage {
    facts: Option<UsageFacts>,
    response_model: Option<String>,
    response_id: Option<String>,
    finish_reasons: Vec<String>,
    truncated: bool,
    error: Option<String>,
}

enum Reader {
    /// An identity event stream, parsed as it passes (it holds at most one event).
    Stream(Box<UsageTap>),
    /// A JSON or encoded body, copied within the bounds and read at its end.
    Buffer {
        encoding: Option<String>,
        kind: BodyKind,
        bytes: Vec<u8>,
        overflow: bool,
    },
}

struct Tap {
    exchange: Exchange,
    status: u16,
    first_byte: Option<Duration>,
    reader: Reader,
    reserved: usize,
}

impl BodyTap for Tap {
    fn data(&mut self, chunk: &Bytes) {
        if self.first_byte.is_none() {
            self.first_byte = Some(self.exchange.started.elapsed());
        }
        match &mut self.reader {
            Reader::Stream(tap) => tap.push(chunk),
            Reader::Buffer {
                bytes, overflow, ..
            } => {
                if *overflow {
                    return;
                }
                let budget = &self.exchange.capture;
                if bytes.len() + chunk.len() > budget.per_stream || !budget.reserve(chunk.len()) {
                    // Overflow only marks the copy truncated (§3.3).
                    *overflow = true;
                    budget.release(self.reserved);
                    self.reserved = 0;
                    *bytes = Vec::new();
                    return;
                }
                self.reserved += chunk.len();
                bytes.extend_from_slice(chunk);
            }
        }
    }

    fn end(self: Box<Self>, end: BodyEnd) {
        let Tap {
            mut exchange,
            status,
            first_byte,
            reader,
            reserved,
        } = *self;
        let report = match reader {
            Reader::Stream(tap) => Some(tap.finish()),
            Reader::Buffer { overflow: true, .. } => None,
            Reader::Buffer {
                encoding,
                kind,
                bytes,
                overflow: false,
            } => relay_plugins::decode(encoding.as_deref(), &bytes, exchange.capture.per_stream)
                .ok()
                .map(|decoded| {
                    let mut report = UsageTap::read_body(exchange.format, kind, &decoded.body);
                    report.truncated |= decoded.truncated;
                    report
                }),
        };
        exchange.capture.release(reserved);
        // What the copy holds says whether the answer is whole: a stream that reached its
        // final event, or JSON that closed, is, even when the connection broke after it.
        let truncated = report.as_ref().is_none_or(|r| r.truncated);
        let facts = report.as_ref().and_then(|report| {
            let usage = report.usage?;
            let cost = exchange.prices.cost_for(
                report.response_model.as_deref(),
                exchange.request_model.as_deref(),
                &usage,
            );
            let mut facts = UsageFacts::new(&usage, cost.as_ref().ok());
            // With no price table nobody asked for a cost; with one, its absence is said.
            if let Err(error) = cost
                && !exchange.prices.is_empty()
            {
                facts.cost_error = Some(error.to_string());
            }
            Some(facts)
        });
        // A client that goes away mid-answer is 499; but an error status it had already
        // received stays what it was (an SDK reads a 429's head, then closes to retry), so
        // traces say what metrics and the harness saw. An answer the worker cut off at its
        // drain deadline keeps its status too: the client did not go away.
        let cut_off = end == BodyEnd::Dropped && exchange.cut_off.load(Ordering::Relaxed);
        let status = if end == BodyEnd::Dropped && status < 400 && !cut_off {
            499
        } else {
            status
        };
        // The error the stream named says more than the break that may have followed it.
        let report = report.unwrap_or_else(|| UsageReport::empty(exchange.format));
        let error = report.error.or_else(|| match end {
            BodyEnd::Failed => Some("response_body_failed".to_owned()),
            BodyEnd::Dropped if cut_off => Some(CUT_AT_DRAIN_DEADLINE.to_owned()),
            _ => None,
        });
        let usage = Usage {
            facts,
            response_model: report.response_model,
            response_id: report.response_id,
            finish_reasons: report.finish_reasons,
            truncated,
            error,
        };
        exchange.end(status, first_byte, usage);
    }
}

#[cfg(test)]
mod tests;
