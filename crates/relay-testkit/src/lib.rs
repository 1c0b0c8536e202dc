//! `relay-testkit` is the model-provider stand-in that Relay's tests and benchmarks talk to instead of a paid provider.
//! [`StandIn`] is a real hyper server (HTTP/1.1, and HTTP/2 with prior knowledge) on a loopback port that answers the Anthropic Messages, OpenAI Responses and OpenAI Chat Completions routes with the captured fixture streams, records every request it receives ([`Recorded`]), and misbehaves on demand ([`Behaviour`]: chunking, pacing, mid-body failures, canned statuses, hangs).
//! It can also drive a coding agent through one tool call and back (`Behaviour::tool_round_trip`).
//! [`duplex`] holds raw providers that answer before they have read the request body.
//! [`fixture_request`] loads the requests the real harnesses sent, embedded in the crate.
//! It is not a provider emulator: it does not look at prompts, count tokens or validate request schemas, and it never opens an outbound connection.
//! The `relay-stand-in` binary serves the same thing from a separate process for benchmarks and end-to-end runs; it and `relay-bare-proxy`, the bench's yardstick, stop on [`shutdown_signal`].
//! For `cargo xtask bench` and `relay-loadgen` it also holds the table of SPEC §12's measures ([`measures`]), the one `/proc` reader both use ([`procfs`]), and the client TLS configuration with which both reach a relayd serving HTTPS ([`tls`]).

mod behaviour;
mod body;
pub mod duplex;
mod error;
mod fixtures;
mod formats;
mod json;
pub mod measures;
pub mod procfs;
mod record;
mod routes;
mod shutdown;
mod stand_in;
#[cfg(test)]
mod test_support;
pub mod tls;
mod wait;

pub use behaviour::{Behaviour, CannedResponse};
pub use error::Error;
pub use fixtures::{
    ANTHROPIC_MESSAGES_SSE, FIXTURE_REQUEST_NAMES, FixtureRequest, OPENAI_CHAT_SSE,
    OPENAI_RESPONSES_SSE, fixture_request,
};
pub use formats::{Api, DEFAULT_TEXT, TOOL_COMMAND, TOOL_DONE_TEXT};
pub use record::Recorded;
pub use shutdown::shutdown_signal;
pub use stand_in::{AnswerSteps, REQUEST_ID_HEADER, StandIn, StandInConfig};
pub use wait::{eventually, eventually_some};
