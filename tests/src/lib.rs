//! `relay-e2e` is the harness of Relay's end-to-end tests: it starts the real binaries and
//! the real coding-agent CLIs as processes and talks to them only through their public
//! surfaces (command line, exit status, HTTP, files, stderr logs).
//! [`Relayd`] starts the daemon in an empty environment with temporary `HOME`,
//! `XDG_CONFIG_HOME` and `RELAY_SYSTEM_CONFIG_DIR`, on a socket the harness bound and passed
//! as fd 3 (socket activation) so no test races for a port; [`Logs`] holds its stderr and
//! waits for jsonl lifecycle events with a deadline; [`AgentCommand`] runs `claude`, `codex`
//! or `pi` from `RELAY_AGENT_BIN_DIR`; [`Tap`] records the bytes a client sent so they can be
//! compared with what the provider stand-in (`relay_testkit::StandIn`) received.
//! It never sleeps to wait for a condition, never skips a test whose binaries are missing
//! (it fails, naming `cargo xtask e2e`), and is not a library for production code.

mod agent;
mod bins;
mod error;
pub mod http;
mod logs;
mod process;
mod relayd;
mod tap;

pub use crate::{
    agent::{AGENT_TIMEOUT, AgentCommand, AgentOutput},
    bins::{ENV_AGENT_BIN_DIR, ENV_BIN_DIR, ENV_E2E, agent_binary, bin_dir, binary},
    error::Error,
    logs::Logs,
    process::{Process, STOP_TIMEOUT},
    relayd::{CliOutput, Listen, Relayd, RelaydBuilder, START_TIMEOUT},
    tap::{Tap, TapListener, TappedRequest},
};
