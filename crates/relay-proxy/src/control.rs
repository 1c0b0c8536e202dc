//! Control sessions (SPEC §5.1–§5.3, §5.6): one WebSocket per `relay-mcp` and per
//! `relay-worker`, carrying binary frames of `relay-proto` messages after a signed
//! handshake. [`daemon`] is the daemon's side, [`client`] the side the MCP and the worker
//! share.

pub mod client;
pub mod daemon;
mod wire;

pub use wire::{Transport, TransportError, ws_config};

/// The control endpoints on the daemon origin.
pub const MCP_PATH: &str = "/_relay/control/v1/mcp";
pub const WORKER_PATH: &str = "/_relay/control/v1/worker";
