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

pub mod atof;
mod cost;
mod decode;
mod sse;
mod usage;

pub use cost::{
    Bucket, Cost, CostError, MissingPrice, Price, PriceError, PriceTable, SessionCost, Usd,
    UsdPerMTok,
};
pub use decode::{ContentEncoding, DecodeError, Decoded, MAX_CODINGS, decode};
pub use sse::{SseEvent, SseParser};
pub use usage::{BodyKind, GENAI_SEMCONV_VERSION, Usage, UsageReport, UsageTap, WireFormat};
