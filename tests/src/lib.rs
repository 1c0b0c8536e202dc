//! `relay-e2e` is the harness of Relay's end-to-end tests: it starts the real binaries and
//! the real coding-agent CLIs as processes and talks to them only through their public
//! surfaces (command line, exit status, HTTP, stdio, files, stderr logs, and what Linux's
//! `/proc` says about their sockets).
//! [`Relayd`] starts the daemon in an empty environment with temporary `HOME`,
//! `XDG_CONFIG_HOME` and `RELAY_SYSTEM_CONFIG_DIR`, on a socket the harness bound and passed
//! as fd 3 (socket activation) so no test races for a port; [`User`] is one machine-user's
//! directories, whose [`Mcp`] processes launch the real `relay-worker`; [`Logs`] holds a
//! process's stderr and waits for jsonl lifecycle events with a deadline; [`AgentCommand`]
//! runs `claude`, `codex` or `pi` from `RELAY_AGENT_BIN_DIR`; [`Tap`] records the bytes of
//! a connection so they can be compared with what the provider stand-in
//! (`relay_testkit::StandIn`) received, or read back as control messages ([`ws`]);
//! [`ControlClient`] and [`RawHandshake`] speak the control protocol with a key of the
//! test's own, to attack the daemon; [`Secrets`] looks for secrets in logs; [`ControlCut`]
//! cuts and restores the control sessions of one path between the clients and relayd, and
//! [`BrokenWorker`] is a worker binary that fails to start until the test repairs it.
//! It never sleeps to wait for a condition, never skips a test whose binaries are missing
//! (it fails, naming `cargo xtask e2e`), and is not a library for production code.

#![allow(
    clippy::disallowed_methods,
    reason = "test support: a panic here fails the test that caused it, so a poisoned lock is read as is"
)]

mod agent;
mod bins;
mod broken;
mod control;
mod cut;
mod endpoint;
mod error;
mod gate;
pub mod http;
mod logs;
mod mcp;
pub mod metrics;
mod process;
pub mod procfs;
mod relayd;
mod secrets;
mod tap;
mod user;
pub mod ws;

pub use crate::{
    agent::{AGENT_TIMEOUT, AgentCommand, AgentOutput},
    bins::{
        ENV_AGENT_BIN_DIR, ENV_BIN_DIR, ENV_E2E, ENV_SDK_DIR, agent_binary, bin_dir, binary,
        sdk_dir,
    },
    broken::BrokenWorker,
    control::{CONNECT_TIMEOUT, ControlClient, RawHandshake, worker_fields},
    cut::{ControlCut, ControlCutListener, PathCounts},
    endpoint::{EndpointRequest, PinnedEndpoint, Squatter, SquatterConnection},
    error::Error,
    gate::WorkerGate,
    logs::{Logs, event_time},
    mcp::{Mcp, McpBuilder},
    process::{Process, STOP_TIMEOUT},
    relayd::{CliOutput, Listen, Relayd, RelaydBuilder, START_TIMEOUT},
    secrets::{Leak, Secrets},
    tap::{Exchange, Tap, TapListener, TappedRequest},
    user::User,
};
