//! End-to-end tests of the real `relayd` binary and the real agent CLIs (run them with
//! `cargo xtask e2e`; docs/e2e.md says what each group proves).
//!
//! Every test starts its own daemon in its own temporary directories, on a socket the
//! harness passed in, in front of its own in-process provider stand-in, so tests run in
//! parallel without sharing a port, a file or a log.

mod e2e {
    pub(crate) mod agents;
    pub(crate) mod attacks;
    pub(crate) mod bundle;
    pub(crate) mod cli;
    pub(crate) mod collector;
    pub(crate) mod credentials;
    pub(crate) mod deployment;
    pub(crate) mod doctor;
    pub(crate) mod faults;
    pub(crate) mod hooks;
    pub(crate) mod lifecycle;
    pub(crate) mod mcp;
    pub(crate) mod package;
    pub(crate) mod pass_through;
    pub(crate) mod plugins;
    pub(crate) mod recovery;
    pub(crate) mod remote;
    pub(crate) mod sdks;
    pub(crate) mod service;
    pub(crate) mod sessions;
    pub(crate) mod support;
    pub(crate) mod workers;
}
