//! The IO of observability: the file, HTTP and OTLP sinks that the worker feeds from a
//! bounded channel. Only `relay-worker` links it; `relayd` never does, nor OpenTelemetry.
//!
//! [`Sinks::start`] opens what a component configures ([`SinksConfig`]) and returns a
//! [`SinkHandle`], whose [`SinkHandle::record`] queues one serialised ATOF line per record
//! sink with `try_send`: a full queue drops and counts, drops are logged at most once per
//! ten seconds, and the request path never waits. [`SinkHandle::flush`] is what a terminal
//! hook awaits, under a deadline. The `file` sink appends one write per record to a 0600
//! file opened without following symlinks, in a directory nobody else can swap files in
//! (`relay_plugins::config::check_sink_directory`, the rule activation checks too); the `http` sink posts batches of JSON Lines with retries and a
//! capped backoff; the OTLP exporter turns plain [`SpanData`] into the official
//! `opentelemetry-proto` messages, named and attributed by [`genai_attributes`] after the
//! GenAI semantic conventions of [`SEMCONV_VERSION`] and OpenInference, under an inbound
//! [`TraceParent`] when the harness sent one. It parses no `plugins.toml` and builds no
//! record: `relay-plugins` does both.

mod config;
mod drops;
mod error;
mod file;
mod genai;
mod http;
mod otlp;
mod scopes;
mod sinks;

pub use config::{
    DeliveryConfig, FileSinkConfig, HttpSinkConfig, OtlpConfig, SinkConfig, SinkContext,
    SinksConfig,
};
pub use drops::{DROP_LOG_INTERVAL, SinkStats};
pub use error::SinkError;
pub use file::{FINGERPRINT_PLACEHOLDER, USER_PLACEHOLDER, render_filename};
pub use genai::{GenAiFacts, Operation, SEMCONV_VERSION, genai_attributes, span_name};
pub use http::{JSON_LINES, backoff, resolve_headers};
pub use otlp::{
    AttrValue, Attribute, IdGenerator, OTLP_PROTOBUF, OTLP_TRACES_PATH, SCOPE_NAME, SpanData,
    SpanId, SpanKind, SpanStatus, TraceId, export_request, traces_url,
};
pub use relay_plugins::TraceParent;
pub use scopes::{MAX_OPEN_SPANS, SpanMapper, span_id};
pub use sinks::{FlushTimedOut, SinkHandle, Sinks};
