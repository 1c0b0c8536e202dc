//! `GET /metrics` (SPEC §3.1): Prometheus text from the `prometheus-client` crate.

use std::fmt::Write as _;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// The kind of route a request took, as a metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RouteLabel {
    Anthropic,
    Openai,
    Hook,
    Status,
    Control,
    Other,
}

/// Where a request went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Destination {
    Worker,
    PassThrough,
    /// Answered by relayd itself (status, errors, refusals).
    Local,
}

impl RouteLabel {
    /// Every variant, in declaration order: the table of kept counters is sized by it.
    pub const ALL: [RouteLabel; 6] = [
        RouteLabel::Anthropic,
        RouteLabel::Openai,
        RouteLabel::Hook,
        RouteLabel::Status,
        RouteLabel::Control,
        RouteLabel::Other,
    ];

    /// The label value: lowercase, as Prometheus labels are usually written.
    pub fn as_str(self) -> &'static str {
        match self {
            RouteLabel::Anthropic => "anthropic",
            RouteLabel::Openai => "openai",
            RouteLabel::Hook => "hook",
            RouteLabel::Status => "status",
            RouteLabel::Control => "control",
            RouteLabel::Other => "other",
        }
    }
}

impl Destination {
    /// Every variant, in declaration order: the table of kept counters is sized by it.
    pub const ALL: [Destination; 3] = [
        Destination::Worker,
        Destination::PassThrough,
        Destination::Local,
    ];

    /// The label value, spelled as SPEC §3.1 names it (`worker`, `pass_through`).
    pub fn as_str(self) -> &'static str {
        match self {
            Destination::Worker => "worker",
            Destination::PassThrough => "pass_through",
            Destination::Local => "local",
        }
    }
}

// The derive would write the variant names (`PassThrough`); the values are snake_case.
impl EncodeLabelValue for RouteLabel {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> std::fmt::Result {
        encoder.write_str(self.as_str())
    }
}

impl EncodeLabelValue for Destination {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> std::fmt::Result {
        encoder.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RequestLabels {
    route: RouteLabel,
    destination: Destination,
    status: u16,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StateLabels {
    state: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

/// Every metric relayd exports.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    /// The `requests` counters of 200 answers, by route and destination. Nearly every
    /// request counts there, and the family's look-up hashes the labels (SipHash) under a
    /// lock; a counter kept here is the same counter, shared.
    ok_requests: [[OnceLock<Counter>; Destination::ALL.len()]; RouteLabel::ALL.len()],
    overhead: Histogram,
    open_streams: Gauge,
    open_streams_now: AtomicI64,
    workers: Family<StateLabels, Gauge>,
    control_sessions: Gauge,
    refused: Family<ReasonLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("relay");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "requests",
            "Requests by route, destination and status",
            requests.clone(),
        );
        // 10 µs to about 80 ms.
        let overhead = Histogram::new(exponential_buckets(0.000_01, 2.0, 14));
        registry.register(
            "overhead_seconds",
            "Time spent inside relayd per request, excluding the wait for the upstream",
            overhead.clone(),
        );
        let open_streams = Gauge::default();
        registry.register(
            "open_streams",
            "Response bodies being relayed",
            open_streams.clone(),
        );
        let workers = Family::<StateLabels, Gauge>::default();
        registry.register("workers", "Workers by state", workers.clone());
        let control_sessions = Gauge::default();
        registry.register(
            "control_sessions",
            "Open control sessions",
            control_sessions.clone(),
        );
        let refused = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "refused_registrations",
            "Refused control registrations by reason",
            refused.clone(),
        );
        // Every reason is shown from the start, at 0, so that a rate over the first
        // refusal of a kind sees it rise rather than appear.
        for code in relay_proto::RefusedCode::ALL {
            let _ = refused.get_or_create(&ReasonLabels {
                reason: code.as_str(),
            });
        }
        Metrics {
            registry,
            requests,
            ok_requests: Default::default(),
            overhead,
            open_streams,
            open_streams_now: AtomicI64::new(0),
            workers,
            control_sessions,
            refused,
        }
    }

    pub fn record_request(&self, route: RouteLabel, destination: Destination, status: u16) {
        let labels = RequestLabels {
            route,
            destination,
            status,
        };
        let kept = match status {
            200 => self.ok_requests.get(route as usize),
            _ => None,
        };
        let kept = kept.and_then(|by_destination| by_destination.get(destination as usize));
        match kept {
            Some(kept) => kept
                .get_or_init(|| self.requests.get_or_create(&labels).clone())
                .inc(),
            None => self.requests.get_or_create(&labels).inc(),
        };
    }

    pub fn record_overhead(&self, spent: Duration) {
        self.overhead.observe(spent.as_secs_f64());
    }

    /// Counts one open stream until the returned guard is dropped.
    pub fn open_stream(self: &std::sync::Arc<Self>) -> OpenStream {
        self.open_streams.inc();
        self.open_streams_now.fetch_add(1, Ordering::Relaxed);
        OpenStream {
            metrics: self.clone(),
        }
    }

    pub fn open_streams(&self) -> i64 {
        self.open_streams_now.load(Ordering::Relaxed)
    }

    pub fn set_workers(&self, state: &'static str, count: i64) {
        self.workers
            .get_or_create(&StateLabels { state })
            .set(count);
    }

    pub fn set_control_sessions(&self, count: i64) {
        self.control_sessions.set(count);
    }

    pub fn record_refusal(&self, reason: &'static str) {
        self.refused.get_or_create(&ReasonLabels { reason }).inc();
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// The OpenMetrics text `prometheus-client` writes, as the classic Prometheus text (format
/// 0.0.4): a counter's `# HELP` and `# TYPE` lines name its samples (`…_total`), where
/// OpenMetrics names the family without the suffix and a classic parser would then read
/// the counter as untyped; `# UNIT` lines and the closing `# EOF` are OpenMetrics' own.
pub fn classic_text(openmetrics: &str) -> String {
    let counters: Vec<&str> = openmetrics
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len() + 16 * counters.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        // `# HELP name …` or `# TYPE name …` of a counter: the name gets its suffix.
        let counter = line
            .strip_prefix("# HELP ")
            .or_else(|| line.strip_prefix("# TYPE "))
            .and_then(|rest| rest.split_once(' '))
            .filter(|(name, _)| counters.contains(name));
        match counter {
            Some((name, after)) => {
                out.push_str(&line[..7]);
                out.push_str(name);
                out.push_str("_total ");
                out.push_str(after);
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// Held by a response body while it streams.
#[derive(Debug)]
pub struct OpenStream {
    metrics: std::sync::Arc<Metrics>,
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.metrics.open_streams.dec();
        self.metrics
            .open_streams_now
            .fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests;
