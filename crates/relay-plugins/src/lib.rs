//! The worker's plugin logic, pure like the broker: `plugins.toml`, the policy engine, the
//! redactor, usage and cost, bounded decoding of captured bodies, and the ATOF recorder as a
//! state machine. It does no IO: no tokio, no hyper, no sockets, no clock; time and data come
//! in as arguments, so every rule is testable as a script.
//!
//! `config` parses and validates both `plugins.toml` texts into typed component
//! configurations ([`Plugins`]), `policy` decides hooks and model requests ([`Policy`],
//! [`Decision`]), and `redact` rewrites secrets in record text and request bodies
//! ([`Redactor`]).

pub mod config;
pub mod policy;
pub mod redact;

pub use config::{ComponentConfig, ComponentKind, PluginConfigError, Plugins};
pub use policy::{Agent, Decision, Policy, PolicyConfig};
pub use redact::{Detector, RedactAction, RedactionConfig, Redactor, Replacements};
