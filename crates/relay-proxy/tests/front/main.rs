//! Integration tests of the daemon's public front (SPEC §2.1, §3, §8): a real `Front` served
//! on `127.0.0.1:0` in-process, in front of the recording provider stand-in of
//! `relay-testkit`. Every test asserts on what the stand-in received, not only on the answer.

// The set-up helpers sit outside `#[test]` functions, where clippy's allow-unwrap-in-tests
// does not reach.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test set-up helpers fail the test on error"
)]

mod support;

mod bad_input;
mod connections;
mod credentials;
mod daemon_keys;
mod egress;
mod forwarding;
mod hook_bodies;
mod secrets;
mod status;
mod streaming;
mod tls;
mod upstream_failures;
