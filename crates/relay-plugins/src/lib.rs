//! The worker's plugin logic, pure like the broker: `plugins.toml`, the policy engine, the
//! redactor, usage and cost, bounded decoding of captured bodies, and the ATOF recorder as a
//! state machine. It does no IO: no tokio, no hyper, no sockets, no clock; time and data come
//! in as arguments, so every rule is testable as a script.
//!
//! The ATOF recorder (`atof::Recorder`) turns hook events, model requests and policy
//! decisions into ATOF 0.1 records with consistent parent links, redacted and bounded.

pub mod atof;
