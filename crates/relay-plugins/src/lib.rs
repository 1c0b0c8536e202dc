//! The worker's plugin logic, pure like the broker: `plugins.toml`, the policy engine, the
//! redactor, usage and cost, bounded decoding of captured bodies, and the ATOF recorder as a
//! state machine. It does no IO: no tokio, no hyper, no sockets, no clock; time and data come
//! in as arguments, so every rule is testable as a script.
//!
//! Captured bodies are decoded within a caller's bound (`decode`), read as SSE by an
//! incremental parser (`SseParser`), reduced to the normalised usage of one model exchange
//! (`UsageTap` → `UsageReport`), and priced exactly in pico-dollars (`PriceTable`, `Usd`).
//! The ATOF recorder (`atof::Recorder`) turns hook events, model requests and policy
//! decisions into ATOF 0.1 records with consistent parent links, redacted and bounded.
//! `config` parses and validates both `plugins.toml` texts into typed component
//! configurations ([`Plugins`]), `policy` decides hooks and model requests ([`Policy`],
//! [`Decision`]), and `redact` rewrites secrets in record text and request bodies
//! ([`Redactor`]).

pub mod atof;
pub mod config;
mod cost;
mod decode;
pub mod policy;
pub mod redact;
mod request;
mod sse;
mod traceparent;
mod usage;

pub use config::{ComponentConfig, ComponentKind, PluginConfigError, Plugins};
pub use cost::{
    Bucket, Cost, CostError, MissingPrice, Price, PriceError, PriceTable, SessionCost, Usd,
    UsdPerMTok,
};
pub use decode::{ContentEncoding, DecodeError, Decoded, MAX_CODINGS, decode};
pub use policy::{Agent, Decision, Policy, PolicyConfig};
pub use redact::{
    Detector, RedactAction, RedactionConfig, Redactor, Replacements, is_json_object, parse_value,
};
pub use request::{RequestFacts, last_user_text};
pub use sse::{SseEvent, SseParser};
pub use traceparent::TraceParent;
pub use usage::{BodyKind, GENAI_SEMCONV_VERSION, Usage, UsageReport, UsageTap, WireFormat};
