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
mod driven;
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

/// The future `make` builds, pinned in a box it is built in.
///
/// `Box::pin(route(req))` builds the future on the stack and then copies the whole of it
/// into the box: its size is that of its largest state (kilobytes for a request's route),
/// though a future that has not started holds only its arguments. Allocating first lets
/// the compiler build it where it stays.
#[inline(always)]
pub(crate) fn boxed<F: std::future::Future>(make: impl FnOnce() -> F) -> std::pin::Pin<Box<F>> {
    Box::into_pin(Box::write(Box::new_uninit(), make()))
}
