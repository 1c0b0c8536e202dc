//! The route broker of SPEC §5.4 as a pure state machine: per machine identity
//! (fingerprint) it keeps the credential bindings, the MCP references, the one launch
//! grant, the worker generations and the state of the route, and it decides where each
//! request goes.
//!
//! It does no IO: it reads no clock (time comes in as `now`), opens no socket, spawns
//! nothing and draws no randomness of its own (fresh ids and secrets come from the
//! [`Entropy`] its owner gives it). Its API is [`Broker::handle`], [`Broker::handle_timeout`],
//! [`Broker::poll_output`] and [`Broker::poll_timeout`], plus the synchronous request-plane
//! calls [`Broker::begin_request`] / [`Broker::end_request`] and read-only views for the
//! status endpoints. The async shell in `relay-proxy` owns sockets and timers and only moves
//! data between them and this core, so every rule here is testable as a script on a virtual
//! clock.
//!
//! Key types: [`Broker`], [`Input`], [`Output`], [`Event`], [`Decision`], [`BrokerConfig`].

mod broker;
mod io;
mod persist;
mod timers;
mod types;

pub use broker::Broker;
pub use io::{Decision, Event, Input, Output, ProbeOutcome, RequestKind, Ticket, Wait};
pub use persist::{PersistedBinding, PersistedGeneration, PersistedState};
pub use types::{
    BindingView, BrokerConfig, ConnId, Digest, Entropy, Fingerprint, RouteView, WorkerView,
};
