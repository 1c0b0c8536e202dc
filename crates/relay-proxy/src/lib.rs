//! The network half of Relay: the daemon's public HTTP front, the forwarding path toward
//! providers and workers, TLS, limits, and (with the worker issues) the control transport
//! and the shell that drives the broker.
//!
//! It owns every socket, timer and task; the decisions about routes live in
//! `relay-broker`, and the wire types in `relay-proto`. It never re-serialises a body it
//! forwards and never logs a credential.
//!
//! Key types: [`server::serve`] with its [`server::Handler`], [`front::Front`] (the daemon's
//! handler), [`upstream::UpstreamClient`], [`body::RequestBody`] and
//! [`body::ResponseBody`], and [`config::Config`].

pub mod admin;
mod answers;
pub mod body;
pub mod client_process;
pub mod config;
pub mod conn;
pub mod control;
pub mod daemon_http;
mod error_chain;
mod forward;
pub mod front;
pub mod headers;
pub mod metrics;
mod per_address;
pub mod plugins;
pub mod routes;
pub mod runtime;
pub mod server;
pub mod shell;
pub mod sockets;
pub mod state;
pub mod tls;
pub mod tls_io;
pub mod upstream;
pub mod worker;
pub mod worker_client;

/// Any error, as the bodies and connections of both hyper and h2 give them.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

pub use error_chain::error_chain;
