//! The IO of observability: the file, HTTP and OTLP sinks that the worker feeds from a
//! bounded channel. Only `relay-worker` links it; `relayd` never does, nor OpenTelemetry.
//!
//! It is empty while the plugins are being built; `cargo xtask tidy` already holds it to its
//! layering rules.
